"""`forensics report CAPTURE -o FILE.html|FILE.md`: everything a bug report needs, in one file."""

from __future__ import annotations

import click

from capture.format import load
from forensics.cli.artefacts import check_output, force_option, suffix_of, write_bytes
from forensics.cli.options import capture_argument, tid_option
from forensics.cli.report_options import span_option
from forensics.progress import Progress
from forensics.render import SUFFIXES, render
from forensics.views.report import STEPS, build_report


@click.command()
@capture_argument
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="The report to write: FILE.html (one self-contained page) or FILE.md.")  # fmt: skip
@force_option
@span_option
@tid_option(
    "Watch this thread (repeatable): its stall episodes, incidents, spikes, jitter and cycle timing, and the "
    "timeline of these threads; the machine's figures stay the machine's."
)
@click.option("--top", type=click.IntRange(1, 12), default=4, show_default=True, help="Threads in the timeline.")
@click.option("--spikes", "spike_limit", type=click.IntRange(1), default=10, show_default=True,
              help="Worst spikes listed.")  # fmt: skip
def report(capture: str, output: str, span: str | None, tids: tuple[int, ...], top: int, spike_limit: int) -> None:
    """Write one file a bug report can carry: what the capture shows, and what it cannot.

    \b
    Contents: the machine and its capabilities (kernel, CPUs, core types, which kernel sources were
    live); how the capture was taken (interval asked and achieved p50/p99/max, missed ticks, the
    recorder's own CPU); the timeline picture; the stall verdicts with their evidence; the five views
    of `forensics summarize`; the worst CPU spikes and who burned the CPU in them; wake-up jitter;
    the benchmark figures of `forensics system`; and what could not be known from this capture
    (missing sources and the verdicts they leave unknown, a missing trailer, no lab cycles).

    \b
    FILE.html is one page with the pictures inside (base64 PNG): no script, no network, readable
    offline in any browser. FILE.md is the same as Markdown (pictures as data: URIs).
      forensics report load.ssf -o load-report.html
      forensics report load.ssf -o load-report.md --span load..loaded
      forensics report load.ssf -o load-report.html --tid 1234
    """
    fmt = suffix_of(output, {s: f for s, f in SUFFIXES.items() if f in ("html", "markdown")}, "a report")
    check_output(output)
    with Progress("forensics report", STEPS) as progress:
        progress.step("reading the capture")
        cap = load(capture)
        from analyses.threads import check_tids

        check_tids(cap, tids, capture)
        built = build_report(cap, capture, span=span, tids=tids, top=top, spike_limit=spike_limit, progress=progress)
        progress.step("rendering")
        text = render(built, fmt)
    write_bytes(output, text.encode())
