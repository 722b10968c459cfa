"""`forensics plot CAPTURE -o FILE.png`: a picture of a capture, for a bug report."""

from __future__ import annotations

import click

from capture.errors import ForensicsError
from capture.format import load
from forensics.cli.artefacts import check_output, force_option, suffix_of, write_bytes
from forensics.cli.options import REGEX, tid_option
from forensics.cli.report_options import span_option
from forensics.progress import Progress

KINDS = ("timeline", "jitter", "compare")


@click.command()
@click.argument(
    "captures", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=str), metavar="CAPTURE [B]"
)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="The picture to write: FILE.png (or FILE.svg).")  # fmt: skip
@force_option
@click.option("--kind", metavar="|".join(KINDS), default=None,
              help="What to draw (default: timeline for one capture, compare for two).")  # fmt: skip
@click.option("--thread", "pattern", type=REGEX,
              help="Draw these threads (name or process name matches), not the watched and busiest ones.")  # fmt: skip
@tid_option("Draw this thread (repeatable), as --thread does; with --thread: the threads of both.")
@click.option("--top", type=click.IntRange(1, 12), default=4, show_default=True, help="Threads in the timeline.")
@span_option
def plot(
    captures: tuple[str, ...],
    output: str,
    kind: str | None,
    pattern: str | None,
    tids: tuple[int, ...],
    top: int,
    span: str | None,
) -> None:
    """Draw a capture as a picture a person reads at a glance (PNG or SVG, no display needed).

    \b
    --kind timeline (one capture; the default): for the watched threads (real-time, periodic) and the
      busiest others, each window's time stacked as on CPU / waiting for a CPU / blocked in D; stall
      episodes shaded in their verdict's colour and labelled ("io 18.6 ms"); markers set while
      recording as dashed lines; on top, each callback's end against the deadline (the lab's cycles,
      or the main periodic thread's period); below, page faults and the CPU (and core type, on hybrid
      machines) each watched thread was on.
    --kind jitter: per periodic thread, the histogram of intervals between wake-ups; bins at 2x, 3x,
      4x the period (lost wake-ups) in red.
    --kind compare (two captures, A then B; the default for two): callback ends of both, and every
      figure of `forensics compare` as A/B bars with the change in %.

    --thread REGEX and --tid N (repeatable) choose the threads of the timeline and of the jitter
    picture: every thread either one selects.

    \b
    Examples:
      forensics plot load.ssf -o load.png
      forensics plot load.ssf -o zoom.png --span load..loaded --thread 'audio|jack'
      forensics plot load.ssf -o one.png --tid 4242 --tid 4243
      forensics plot load.ssf -o jitter.png --kind jitter
      forensics plot before.ssf after.ssf -o ab.png
    """
    from forensics.plots import FORMATS, figure_bytes

    fmt = suffix_of(output, FORMATS, "a plot")
    check_output(output)
    if kind is not None and kind not in KINDS:
        raise ForensicsError(f"unknown --kind {kind!r}; choose one of: {', '.join(KINDS)}")
    kind = kind or ("compare" if len(captures) == 2 else "timeline")
    if len(captures) > 2:
        raise ForensicsError("plot takes one capture, or two (A B) for --kind compare")
    if kind == "compare" and len(captures) != 2:
        raise ForensicsError("--kind compare needs two captures: forensics plot A B -o ab.png")
    if kind != "compare" and len(captures) != 1:
        raise ForensicsError(f"--kind {kind} draws one capture; for two use --kind compare (or give one)")
    if kind == "compare" and (span or pattern or tids):
        raise ForensicsError("--span, --thread and --tid do not apply to --kind compare")
    with Progress("forensics plot", 3) as progress:
        progress.step("reading the capture")
        if kind == "compare":
            from forensics.plots.compare import draw_compare
            from forensics.plots.data import compare_data

            a, b = load(captures[0]), load(captures[1])
            progress.step("comparing")
            figure = draw_compare(compare_data(a, b, captures[0], captures[1]))
        else:
            from analyses.span import resolve_span
            from analyses.threads import check_tids

            cap = load(captures[0])
            check_tids(cap, tids, captures[0])
            t_range = resolve_span(cap, span)
            where = f" ({span})" if span else ""
            progress.step("analysing")
            if kind == "jitter":
                from forensics.plots.data import jitter_data
                from forensics.plots.jitter import draw_jitter

                figure = draw_jitter(jitter_data(cap, captures[0] + where, pattern=pattern, t_range=t_range, tids=tids))
            else:
                from forensics.plots.data import timeline_data
                from forensics.plots.timeline import draw_timeline

                data = timeline_data(cap, captures[0] + where, pattern=pattern, top=top, t_range=t_range, tids=tids)
                figure = draw_timeline(data)
        progress.step("drawing")
        image = figure_bytes(figure, fmt)
    write_bytes(output, image)
