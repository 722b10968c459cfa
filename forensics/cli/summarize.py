"""`forensics summarize CAPTURE` (summarize-load): the five decisive views of a capture or a span of it."""

from __future__ import annotations

import click

from capture.format import load
from forensics.cli.options import capture_argument, tid_option
from forensics.cli.report_options import emit, output_options, span_option
from forensics.views.summary import summary_report


@click.command()
@capture_argument
@span_option
@click.option("--top", type=click.IntRange(1), default=8, show_default=True, help="Threads in the timeline.")
@click.option("--worst", type=click.IntRange(1), default=10, show_default=True, help="Worst episodes listed.")
@click.option("--rows", type=click.IntRange(1), default=15, show_default=True, help="Threads in the breakdown table.")
@tid_option(
    "Only this thread (repeatable) in the timeline, the breakdown, the placement (whatever its policy) and "
    "the worst episodes; the faults over time stay the whole machine's."
)
@output_options
def summarize(
    capture: str,
    span: str | None,
    top: int,
    worst: int,
    rows: int,
    tids: tuple[int, ...],
    fmt: str | None,
    as_json: bool,
    output: str | None,
) -> None:
    """Reduce a capture (or --span of it) to the five views that decide a spike investigation.

    \b
    1. On-CPU timeline of the busiest threads (one character per bin, scaled to each thread's peak).
    2. Run vs wait per thread: on CPU, runnable waiting for a CPU, off CPU; wake-ups; faults.
    3. Placement of the watched (real-time or periodic) threads: CPUs and core types used, migrations,
       time on slow cores (E-cores, LITTLE), time sharing its CPU with another busy thread, and
       policy/rtprio changes (an audio thread raised to FIFO late runs its first callbacks as OTHER).
    4. Faults over time and who took them.
    5. The worst stall episodes with verdicts (see `forensics stalls --help` for the rules).

    --span takes markers set while recording (Enter or SIGUSR1 in catch-load): `--span load..loaded`,
    `--span #1..#2`, or times since the first sample: `--span 2s..7.5s`.

    --tid N (repeatable) narrows views 1, 2, 3 and 5 to those threads (3 whatever their policy and
    period); view 4 stays the whole machine's, and says so.
    """
    from analyses.span import resolve_span
    from analyses.threads import check_tids

    cap = load(capture)
    check_tids(cap, tids, capture)
    t_range = resolve_span(cap, span)
    full = as_json or fmt == "json"
    where = f" ({span})" if span else ""
    report = summary_report(
        cap, f"{capture}{where}", t_range=t_range, top=top, worst=worst, rows=rows, full=full, tids=tids
    )
    emit(report, fmt=fmt, as_json=as_json, output=output)
