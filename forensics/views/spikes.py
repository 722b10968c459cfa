"""The spikes view: windows where a thread's CPU use stood out, and who burned the CPU in them (as
`forensics spikes` prints them and `forensics report` embeds them)."""

from __future__ import annotations

from analyses.rules import SPIKE_FACTOR
from capture.format import Capture
from forensics.describe import damage_notes
from forensics.render import Report, Section

SPIKE_COLUMNS = {
    "spike": "#",
    "start_ns": "at",
    "comm": "thread",
    "tid": "tid",
    "peak_on_cpu_ns": "peak",
    "typical_ns": "typical",
    "ratio": "x",
    "busy_ns": "busy",
    "reason": "why",  # outlier / deadline
    "cpus": "cpu",
    "core_types": "core",
}
BURNER_COLUMNS = {
    "spike": "#",
    "rank": "rank",
    "comm": "thread",
    "tid": "tid",
    "on_cpu_ns": "on CPU",
    "share": "share",
    "cpu": "cpu",
    "core_type": "core",
    "policy": "policy",
}


def spikes_report(
    cap: Capture,
    name: str,
    *,
    pattern: str | None = None,
    factor: float = SPIKE_FACTOR,
    min_ns: int | None = None,
    deadline_ns: int | None = None,
    top: int = 5,
    limit: int | None = 50,
    t_range: tuple[int | None, int | None] | None = None,
    tids: tuple[int, ...] = (),
) -> Report:
    """The report `forensics spikes` prints (spikes, then who burned the CPU in each); `forensics report`
    embeds the same sections."""
    from analyses.rules import spike_min_ns
    from analyses.source import capture_interval_ns, capture_origin_ns
    from analyses.spikes import find_spikes
    from forensics.views.thresholds import spike_thresholds

    found, burners = find_spikes(
        cap,
        pattern=pattern,
        factor=factor,
        min_ns=min_ns,
        deadline_ns=deadline_ns,
        top=top,
        limit=limit,
        t_range=t_range,
        tids=tids,
    )
    report = Report(title=f"CPU spikes in {name}", origin_ns=capture_origin_ns(cap))
    report.sections.append(Section("spikes", "Spikes", found, SPIKE_COLUMNS))
    report.sections.append(Section("burners", "Who burned the CPU in each spike", burners, BURNER_COLUMNS))
    least = spike_min_ns(capture_interval_ns(cap)) if min_ns is None else min_ns
    report.notes += damage_notes(cap, report.origin_ns, t_range)
    report.notes.append(spike_thresholds(factor, least, deadline_ns))
    return report
