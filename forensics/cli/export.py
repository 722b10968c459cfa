"""`forensics export CAPTURE --format perfetto|csv|parquet -o PATH`: a capture for other tools."""

from __future__ import annotations

import gzip
from pathlib import Path

import click
import numpy as np
import pandas as pd

from forensics.capture import Capture, load
from forensics.cli.artefacts import check_output, force_option, forced, suffix_of, write_bytes, wrote
from forensics.cli.options import capture_argument
from forensics.cli.report_options import span_option
from forensics.errors import ForensicsError
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
        write_tables(cap, Path(output), fmt, pattern=pattern, t_range=t_range, progress=progress)


def _threads(cap: Capture, pattern: str | None, t_range: tuple[int | None, int | None] | None) -> pd.DataFrame:
    from analyses.threads import select_threads, thread_profiles

    profiles = thread_profiles(cap, t_range=t_range)
    if pattern is not None:
        profiles = select_threads(profiles, pattern=pattern)
        if profiles.empty:
            raise ForensicsError(f"no thread matches --thread {pattern!r}: see `forensics summarize`")
    return profiles


def _verdicts(
    cap: Capture, profiles: pd.DataFrame, pattern: str | None, t_range: tuple[int | None, int | None] | None
) -> pd.DataFrame:
    from analyses.stalls import find_stalls

    return find_stalls(cap, pattern=pattern, t_range=t_range, profiles=profiles)


def perfetto_trace(
    cap: Capture,
    name: str,
    *,
    pattern: str | None = None,
    t_range: tuple[int | None, int | None] | None = None,
    progress: Progress | None = None,
) -> str:
    from analyses.source import capture_origin_ns
    from analyses.threads import select_threads
    from forensics import __version__
    from forensics.export import perfetto
    from forensics.export.frames import export_windows

    origin = capture_origin_ns(cap)
    if origin is None:
        raise ForensicsError(f"{name} holds no samples: there is nothing to export")
    profiles = _threads(cap, pattern, t_range)
    if progress:
        progress.step("windows of every thread")
    pids = dict(zip(profiles["tid"].astype(int), profiles["pid"].astype(int), strict=True))
    comms = profiles.set_index("tid")["comm"]
    # Each group of threads' events is serialised at once, so only one group's dicts live at a time.
    parts: list[str] = []
    for windows in export_windows(cap, profiles, t_range=t_range, group_samples=1_000_000):
        windows = windows.assign(comm=comms.reindex(windows["tid"]).fillna("?").to_numpy())
        parts.append(perfetto.fragment(perfetto.window_events(windows, origin, pids)))
        del windows
    events: list[dict[str, object]] = []
    if progress:
        progress.step("stall verdicts")
    episodes = _verdicts(cap, profiles, pattern, t_range)
    events.extend(perfetto.verdict_events(episodes, origin))
    from analyses.span import in_span

    events_table = cap.events
    marks = events_table[events_table["kind"] == "marker"] if len(events_table) else events_table
    marks = marks[in_span(marks["t_ns"].to_numpy(), t_range)]
    markers = pd.DataFrame(
        {"t_ns": marks["t_ns"].to_numpy(), "text": [t if isinstance(t, str) and t else "marker" for t in marks["text"]]}
    )
    system = cap.system
    if len(system) and t_range is not None:
        system = system[in_span(system["t_ns"].to_numpy(), t_range)]
    events.extend(perfetto.machine_events(system, markers, origin))
    watched = select_threads(profiles)["tid"].astype(int).tolist()
    head = perfetto.metadata_events(profiles, episodes, watched)
    other = {
        "capture": name,
        "origin_ns": origin,
        "clock": "CLOCK_MONOTONIC; ts = microseconds since the capture's first sample",
        "tool": f"spike-stall-forensics {__version__}",
        "note": "run/runqueue/blocked amounts are exact per sampling window; their order inside one window is not",
    }
    return perfetto.trace_json([perfetto.fragment(head), *parts, perfetto.fragment(events)], other)


def write_tables(
    cap: Capture,
    directory: Path,
    fmt: str,
    *,
    pattern: str | None = None,
    t_range: tuple[int | None, int | None] | None = None,
    progress: Progress | None = None,
) -> dict[str, int]:
    from forensics.export.frames import export_windows, flat_verdicts
    from forensics.export.tables import TableWriter, plain_samples

    profiles = _threads(cap, pattern, t_range)
    tids = profiles["tid"].to_numpy(dtype=np.int32)
    with TableWriter(directory, fmt, force=forced()) as writer:
        if progress:
            progress.step("samples")
        for chunk in cap.iter_chunks("samples"):
            keep = np.isin(chunk["tid"].to_numpy(), tids)
            if t_range is not None:
                from analyses.span import in_span

                keep &= in_span(chunk["t_ns"].to_numpy(), t_range)
            if keep.any():
                writer.append("samples", plain_samples(chunk[keep]))
        if progress:
            progress.step("windows")
        for windows in export_windows(cap, profiles, t_range=t_range):
            writer.append("windows", windows)
        if progress:
            progress.step("verdicts")
        writer.append("verdicts", flat_verdicts(_verdicts(cap, profiles, pattern, t_range)))
        threads = cap.threads
        writer.append("threads", threads[threads["tid"].isin(tids)])
        writer.append("events", cap.events)
    if progress:
        progress.done()
    for name, path in writer.files.items():
        wrote(f"{path} ({writer.rows[name]} rows)")
    return writer.rows
