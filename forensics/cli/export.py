"""`forensics export CAPTURE --format perfetto|csv|parquet -o PATH`: a capture for other tools."""

from __future__ import annotations

import gzip
from pathlib import Path

import click

from capture.errors import ForensicsError
from capture.format import load
from forensics.cli.artefacts import check_output, force_option, forced, suffix_of, write_bytes, wrote
from forensics.cli.options import REGEX, capture_argument, tid_option
from forensics.cli.report_options import span_option
from forensics.export.perfetto import perfetto_trace
from forensics.export.schemas import TABLES
from forensics.export.tables import write_tables
from forensics.progress import Progress

FORMATS = ("perfetto", "csv", "parquet")
TRACE_SUFFIXES = {".json": "json", ".json.gz": "json.gz"}


@click.command()
@capture_argument
@click.option("--format", "fmt", metavar="|".join(FORMATS), required=True, help="What to write (see below).")
@click.option("-o", "--output", required=True, type=click.Path(path_type=str),
              help="perfetto: FILE.json (or FILE.json.gz); csv, parquet: a directory (made if missing).")  # fmt: skip
@click.option("--thread", "pattern", type=REGEX, help="Only these threads (name or process name matches).")
@tid_option("Only this thread (repeatable), as --thread does; with --thread: the threads of both.")
@span_option
@force_option
def export(capture: str, fmt: str, output: str, pattern: str | None, tids: tuple[int, ...], span: str | None) -> None:
    """Write a capture for other tools: a trace for ui.perfetto.dev, or tables for pandas and DuckDB.

    \b
    --format perfetto -o FILE.json: a Chrome JSON trace (Trace Event Format) that ui.perfetto.dev and
      chrome://tracing open offline. One track per thread with "running", "runnable (waiting for a
      CPU)" and "blocked (D)" slices (exact amounts per sampling window; their order inside one window
      is not known: laid out run, runqueue, blocked); counters of page faults and of the CPU each
      thread was on; stall verdicts as instants on the thread and as slices on a "verdicts" track;
      the machine's per-CPU busy % and the markers on a "machine" process. With eBPF switch records
      (catch-load --ebpf) a thread's track holds the kernel's exact states (Running, Runnable, S, D),
      wake-ups are arrows from waker to wakee, and each CPU has a track. Times: seconds since the
      capture's first sample.
    --format csv|parquet -o DIR: one file per table in DIR, every table each time (empty where the
      capture has none), each with one versioned schema, so that the exports of many captures read as
      one dataset: samples (as recorded: cumulative counters), windows (per thread per tick: on_cpu_ns
      runqueue_ns off_cpu_ns blocked_ns faults cpu core_type state ...), verdicts (the stall episodes of
      `forensics stalls`, one column per cause in ns), threads, and the capture's other tables as
      recorded: events system processes sched truth cycles taskstats, the eBPF tables (sched_switch
      sched_wakeup page_faults block_rq ebpf_lost) and the engine tables (engine_cycles engine_nodes
      xruns engine_clients engine_graph engine_status). --thread and --tid keep the rows of the chosen
      threads (those either selects) in tables with a tid column; in a Perfetto trace, their tracks.
      Read them with pandas.read_parquet('DIR/windows.parquet') or in DuckDB:
      SELECT verdict, count(*) FROM 'DIR/verdicts.parquet' GROUP BY verdict;
      SELECT * FROM read_parquet('*/verdicts.parquet', filename=true);  -- many captures' exports
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
        from analyses.threads import check_tids

        check_tids(cap, tids, capture)
        t_range = resolve_span(cap, span)
        if fmt == "perfetto":
            text = perfetto_trace(cap, capture, pattern=pattern, t_range=t_range, progress=progress, tids=tids)
            data = text.encode()
            progress.step("writing")
            if compression == "json.gz":
                data = gzip.compress(data, mtime=0)
            progress.done()
            write_bytes(output, data)
            return
        write_tables(
            cap,
            Path(output),
            fmt,
            pattern=pattern,
            tids=tids,
            t_range=t_range,
            progress=progress,
            announce=wrote,
            force=forced(),
        )
