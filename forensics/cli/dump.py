"""`forensics dump CAPTURE`: a table of the capture as CSV on stdout."""

from __future__ import annotations

import sys

import click

from capture.errors import ForensicsError
from capture.format import load
from forensics.cli.options import capture_argument, tid_option


@click.command()
@capture_argument
@click.option(
    "--table",
    default="samples",
    show_default=True,
    help="Which table: samples, sched, threads, events, system, truth, cycles (or any the capture holds).",
)
@tid_option("Only the rows of this thread, in tables with a tid column (repeatable).")
def dump(capture: str, table: str, tids: tuple[int, ...]) -> None:
    """Print one table of a capture as CSV (samples by default: one row per thread per tick).

    Counters are cumulative, as read from /proc; times are CLOCK_MONOTONIC ns. Pipe into your own
    tools, or use `forensics export --format parquet` for large captures.
    """
    from analyses.threads import check_tids

    cap = load(capture)
    check_tids(cap, tids, capture)
    known = set(cap.table_names) | {"samples", "sched", "threads", "events", "system", "truth", "cycles"}
    if table not in known:
        raise ForensicsError(f"{capture} has no table {table!r}; it has: {', '.join(sorted(cap.table_names))}")
    first = True
    for chunk in cap.iter_chunks(table) if table != "threads" else [cap.threads]:
        if tids and "tid" in chunk.columns:
            chunk = chunk[chunk["tid"].isin(tids)]
        if "tick" in chunk.columns and "tid" in chunk.columns:
            chunk = chunk.sort_values(["tick", "tid"], kind="stable")
        chunk.to_csv(sys.stdout, index=False, header=first, lineterminator="\n")
        first = False
    if first:  # no chunk at all: still print the header
        cap.table(table).to_csv(sys.stdout, index=False, lineterminator="\n")
