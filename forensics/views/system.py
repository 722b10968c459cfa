"""The system view: the figures an audio kernel benchmark reported (as `forensics system` prints them)."""

from __future__ import annotations

from capture.format import Capture
from forensics.render import Report, Section
from forensics.views.thresholds import system_thresholds

COLUMNS = {"figure": "figure", "value": "value", "unit": "unit", "source": "source"}


def system_report(
    cap: Capture, name: str, *, t_range: tuple[int | None, int | None] | None = None, tids: tuple[int, ...] = ()
) -> Report:
    """`tids`: the threads whose cycles and delays are timed (default: the lab's callbacks, else the main
    periodic thread)."""
    from analyses.source import capture_origin_ns
    from analyses.system import system_figures

    figures = system_figures(cap, t_range=t_range, tids=tids)
    report = Report(title=f"System figures of {name}", origin_ns=capture_origin_ns(cap))
    report.sections.append(Section("figures", "Benchmark figures", figures, COLUMNS))
    report.notes.append(system_thresholds())
    return report
