"""`forensics spikes CAPTURE` (catch-spike): windows where a thread burned unusual CPU, and who burned it."""

from __future__ import annotations

import click

from analyses.rules import SPIKE_FACTOR
from capture.format import load
from forensics.cli.options import DURATION, REGEX, FiniteRange, capture_argument, tid_option
from forensics.cli.report_options import emit, output_options, span_option
from forensics.views.spikes import spikes_report


@click.command()
@capture_argument
@click.option("--thread", "pattern", type=REGEX, help="Only spikes of threads whose name matches.")
@tid_option("Only spikes of this thread (repeatable; with --thread: those threads too).")
@click.option(
    "--deadline",
    type=DURATION,
    default=None,
    help="Flag any run of busy windows adding up to this (default: the period of a periodic thread).",
)
@click.option(
    "--factor",
    type=FiniteRange(1.0),
    default=SPIKE_FACTOR,
    show_default=True,
    help="Times the thread's typical CPU.",
)
@click.option(
    "--min", "min_ns", type=DURATION, default=None, help="Smallest spike (default: a quarter sampling interval)."
)
@click.option("--top", type=click.IntRange(1), default=5, show_default=True, help="Burners listed per spike.")
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True, help="Most severe spikes shown.")
@span_option
@output_options
def spikes(
    capture: str,
    pattern: str | None,
    tids: tuple[int, ...],
    deadline: int | None,
    factor: float,
    min_ns: int | None,
    top: int,
    limit: int,
    span: str | None,
    fmt: str | None,
    as_json: bool,
    output: str | None,
) -> None:
    """Find the windows where a thread's CPU use stands out, and rank who burned the CPU in them.

    \b
    A thread's typical CPU per window is the median over the windows in which it ran at all. A window
    spikes as an "outlier" when the thread ran --factor times that (and at least --min), or on
    "deadline" when the thread was busy (on CPU or runnable) through consecutive windows adding up to
    --deadline: by default its period when it wakes periodically (a callback busy for a whole period is
    late).

    \b
    For each spike the threads that burned CPU in the same windows are ranked, with the CPU and core
    type (P/E, big/little) they ran on: a "Load MAX" spike becomes a thread name and a core. Use
    `forensics stalls` to learn whether a slow callback ran long or waited, and for what.
    """
    from analyses.span import resolve_span
    from analyses.threads import check_tids

    cap = load(capture)
    check_tids(cap, tids, capture)
    t_range = resolve_span(cap, span)
    report = spikes_report(
        cap,
        capture,
        pattern=pattern,
        factor=factor,
        min_ns=min_ns,
        deadline_ns=deadline,
        top=top,
        limit=limit,
        t_range=t_range,
        tids=tids,
    )
    emit(report, fmt=fmt, as_json=as_json, output=output)
