"""`forensics jitter CAPTURE`: wake-up period distribution of periodic threads; lost wake-ups flagged."""

from __future__ import annotations

import click
import numpy as np

from capture.format import load
from forensics.cli.options import capture_argument
from forensics.cli.report_options import emit, output_options, span_option
from forensics.render import Report, Section

STATS = {
    "comm": "thread",
    "tid": "tid",
    "nominal_ns": "period",
    "n": "wake-ups",
    "p50_ns": "p50",
    "p99_ns": "p99",
    "min_ns": "min",
    "max_ns": "max",
    "jitter_pct": "jitter",
}
HIST = {"comm": "thread", "lo_ns": "from", "hi_ns": "to", "count": "count", "bar": "", "mark": ""}


@click.command()
@capture_argument
@click.option("--thread", "pattern", metavar="REGEX", help="These threads instead of the periodic ones.")
@span_option
@output_options
def jitter(
    capture: str, pattern: str | None, span: str | None, fmt: str | None, as_json: bool, output: str | None
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
    from analyses.jitter import jitter as run_jitter
    from analyses.source import capture_origin_ns
    from analyses.span import resolve_span

    cap = load(capture)
    t_range = resolve_span(cap, span)
    stats, hist = run_jitter(cap, pattern=pattern, t_range=t_range)
    report = Report(title=f"Wake-up jitter in {capture}", origin_ns=capture_origin_ns(cap))
    if len(hist):
        peak = hist.groupby("tid")["count"].transform("max").replace(0, 1)
        hist = hist.assign(
            bar=["█" * max(round(30 * c / p), 1 if c else 0) for c, p in zip(hist["count"], peak, strict=True)],
            mark=np.where(hist["multiple"] > 0, hist["multiple"].astype(str) + "x period", ""),
        )
    note = ""
    if len(stats):
        note = "Sources: " + "; ".join(f"{r.comm}: {r.source}" for r in stats.itertuples(index=False))
    report.sections.append(
        Section(
            "stats",
            "Wake-up periods",
            stats,
            STATS,
            detail="flag",
            empty="(no periodic thread; try --thread REGEX)",
            note=note,
        )
    )
    report.sections.append(Section("histogram", "Histogram of periods", hist, HIST))
    emit(report, fmt=fmt, as_json=as_json, output=output)
