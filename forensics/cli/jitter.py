"""`forensics jitter CAPTURE`: wake-up period distribution of periodic threads; lost wake-ups flagged."""

from __future__ import annotations

import click

from capture.format import load
from forensics.cli.options import REGEX, capture_argument, tid_option
from forensics.cli.report_options import emit, output_options, span_option
from forensics.views.jitter import jitter_report


@click.command()
@capture_argument
@click.option("--thread", "pattern", type=REGEX, help="These threads instead of the periodic ones.")
@tid_option("This thread instead of the periodic ones (repeatable; with --thread: those threads too).")
@span_option
@output_options
def jitter(
    capture: str,
    pattern: str | None,
    tids: tuple[int, ...],
    span: str | None,
    fmt: str | None,
    as_json: bool,
    output: str | None,
) -> None:
    """Show how regularly each periodic thread woke up, and flag lost wake-ups.

    \b
    For each periodic thread: the intervals between consecutive wake-ups (p50, p99, min, max; jitter =
    standard deviation / period) and a histogram. A peak at 2x, 3x... the period is the signature of a
    lost wake-up: the thread slept (or ran) through a whole period.

    \b
    Timing source: the lab's callback starts when the capture has them (exact); otherwise /proc, where a
    wake-up is known only to the sampling window it fell in: periods read as multiples of the interval
    (5.333 ms as 4 or 6 ms at 2 ms), so the histogram's bins are one interval wide and no jitter
    percentage is given. A period shorter than the interval cannot be timed from /proc.
    """
    from analyses.span import resolve_span
    from analyses.threads import check_tids

    cap = load(capture)
    check_tids(cap, tids, capture)
    report = jitter_report(cap, capture, pattern=pattern, t_range=resolve_span(cap, span), tids=tids)
    emit(report, fmt=fmt, as_json=as_json, output=output)
