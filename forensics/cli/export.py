"""`forensics export CAPTURE --format perfetto|csv|parquet -o PATH`: a capture for other tools."""

from __future__ import annotations

import gzip
from pathlib import Path

import click

from capture.errors import ForensicsError
from capture.format import load
from forensics.cli.artefacts import check_output, force_option, forced, suffix_of, write_bytes, wrote
from forensics.cli.options import capture_argument
from forensics.cli.report_options import span_option
from forensics.export.perfetto import perfetto_trace
from forensics.export.tables import write_tables
from forensics.progress import Progress

FORMATS = ("perfetto", "csv", "parquet")
TABLES = ("samples", "windows", "verdicts", "threads", "events")  # the files of --format csv|parquet
TRACE_SUFFIXES = {".json": "json", ".json.gz": "json.gz"}


@click.command()
@capture_argument
@click.option("--format", "fmt", metavar="|".join(FORMATS), required=True, help="What to write (see below).")
@click.option("-o", "--output", required=True, type=click.Path(path_type=str),
              help="perfetto: FILE.json (or FILE.json.gz); csv, parquet: a directory (made if missing).")  # fmt: skip
@click.option("--thread", "pattern", metavar="REGEX", help="Only these threads (name or process name matches).")
@span_option
@force_option
def export(capture: str, fmt: str, output: str, pattern: str | None, span: str | None) -> None:
    """Write a capture for other tools: a trace for ui.perfetto.dev, or tables for pandas and DuckDB.

    \b
    --format perfetto -o FILE.json: a Chrome JSON trace (Trace Event Format) that ui.perfetto.dev and
      chrome://tracing open offline. One track per thread with "running", "runnable (waiting for a
      CPU)" and "blocked (D)" slices (exact amounts per sampling window; their order inside one window
      is not known: laid out run, runqueue, blocked); counters of page faults and of the CPU each
      thread was on; stall verdicts as instants on the thread and as slices on a "verdicts" track;
      the machine's per-CPU busy % and the markers on a "machine" process. Times: seconds since the
      capture's first sample.
    --format csv|parquet -o DIR: one file per table in DIR: samples (as recorded: cumulative counters),
      windows (per thread per tick: on_cpu_ns runqueue_ns off_cpu_ns blocked_ns faults cpu core_type
      state ..., see analyses/windows.py), verdicts (the stall episodes of `forensics stalls`, one
      column per cause in ns), threads and events.
      Read them with pandas.read_parquet('DIR/windows.parquet') or in DuckDB:
      SELECT verdict, count(*) FROM 'DIR/verdicts.parquet' GROUP BY verdict;
    """
    if fmt not in FORMATS:
        raise ForensicsError(f"unknown --format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    if fmt == "perfetto":
        compression = suffix_of(output, TRACE_SUFFIXES, "a Perfetto trace")
        check_output(output)
    elif Path(output).exists() and not Path(output).is_dir():
        raise ForensicsError(f"--format {fmt} writes a directory of tables, and {output} is a file: name a directory")
    elif Path(output).is_dir() and not forced():  # before the work: an earlier export's tables need --force
        for table in TABLES:
            check_output(str(Path(output) / f"{table}.{fmt}"))
    with Progress(f"forensics export ({fmt})", 4) as progress:
        progress.step("reading the capture")
        cap = load(capture)
        from analyses.span import resolve_span

        t_range = resolve_span(cap, span)
        if fmt == "perfetto":
            text = perfetto_trace(cap, capture, pattern=pattern, t_range=t_range, progress=progress)
            data = text.encode()
            progress.step("writing")
            if compression == "json.gz":
                data = gzip.compress(data, mtime=0)
            progress.done()
            write_bytes(output, data)
            return
        write_tables(
            cap, Path(output), fmt, pattern=pattern, t_range=t_range, progress=progress, announce=wrote, force=forced()
        )
