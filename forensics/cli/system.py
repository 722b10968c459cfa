"""`forensics system CAPTURE`: the figures a jackd + fluidsynth kernel benchmark reported, for this capture."""

from __future__ import annotations

import click

from capture.format import load
from forensics.cli.options import capture_argument, tid_option
from forensics.cli.report_options import emit, output_options, span_option
from forensics.views.system import system_report


@click.command()
@capture_argument
@span_option
@tid_option(
    "Time this thread's cycles and delays (repeatable): its lab callbacks, else its wake-ups from /proc "
    "(default: every lab callback, else the main periodic thread); the CPU and engine figures stay the "
    "whole machine's."
)
@output_options
def system(
    capture: str, span: str | None, tids: tuple[int, ...], fmt: str | None, as_json: bool, output: str | None
) -> None:
    """Print the machine-level figures of an audio benchmark run, as kernel-list benchmarks did in 2004.

    \b
    XRUN rate, delay rate above the spare time of a cycle and above 1000 us, delay and cycle maxima,
    average DSP load: exact from the lab's cycles when the capture has them (catch-load --lab); else
    estimated for the main periodic thread from /proc, where a wake-up's scheduling delay is the
    run-queue wait schedstat adds at its switch-in and a cycle is the CPU time until the next wake-up
    (timer and interrupt latency before the wake-up are not seen; XRUNs need the engine's cycle ends).
    CPU user/system/nice/IO-wait/IRQ/soft-IRQ load, interrupt and context-switch rates come from
    /proc/stat for the whole machine. Compare two runs with `forensics compare A B`.

    \b
    --tid N times that thread instead: its own lab callbacks when the capture has them, else its
    wake-ups from /proc (with several: their callbacks as the stages of one cycle, or from /proc the
    periodic one with the highest priority, else the first given). A thread that does not wake
    periodically has no spare time or DSP load. The machine's figures do not change with --tid.
    """
    from analyses.span import resolve_span
    from analyses.threads import check_tids

    cap = load(capture)
    check_tids(cap, tids, capture)
    report = system_report(cap, capture, t_range=resolve_span(cap, span), tids=tids)
    emit(report, fmt=fmt, as_json=as_json, output=output)
