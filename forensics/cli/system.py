"""`forensics system CAPTURE`: the figures a jackd + fluidsynth kernel benchmark reported, for this capture."""

from __future__ import annotations

import click

from capture.format import load
from forensics.cli.options import capture_argument
from forensics.cli.report_options import emit, output_options, span_option
from forensics.views.system import system_report


@click.command()
@capture_argument
@span_option
@output_options
def system(capture: str, span: str | None, fmt: str | None, as_json: bool, output: str | None) -> None:
    """Print the machine-level figures of an audio benchmark run, as kernel-list benchmarks did in 2004.

    \b
    XRUN rate, delay rate above the spare time of a cycle and above 1000 us, delay and cycle maxima,
    average DSP load: exact from the lab's cycles when the capture has them (catch-load --lab); else
    estimated for the main periodic thread from /proc, where a wake-up's scheduling delay is the
    run-queue wait schedstat adds at its switch-in and a cycle is the CPU time until the next wake-up
    (timer and interrupt latency before the wake-up are not seen; XRUNs need the engine's cycle ends).
    CPU user/system/nice/IO-wait/IRQ/soft-IRQ load, interrupt and context-switch rates come from
    /proc/stat for the whole machine. Compare two runs with `forensics compare A B`.
    """
    from analyses.span import resolve_span

    cap = load(capture)
    report = system_report(cap, capture, t_range=resolve_span(cap, span))
    emit(report, fmt=fmt, as_json=as_json, output=output)
