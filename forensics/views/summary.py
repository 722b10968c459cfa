"""The summary view: the five views of a capture (as `forensics summarize` prints them and `forensics
report` embeds them)."""

from __future__ import annotations

from capture.format import Capture
from forensics.describe import asked_threads, fmt_ns
from forensics.render import Report, Section

TIMELINE = {"comm": "thread", "tid": "tid", "on_cpu_ns": "on CPU", "peak_pct": "peak", "timeline": "timeline"}
BREAKDOWN = {
    "comm": "thread",
    "tid": "tid",
    "policy": "policy",
    "on_cpu_ns": "on CPU",
    "runqueue_ns": "runnable",
    "off_cpu_ns": "off CPU",
    "on_pct": "on %",
    "runqueue_pct": "wait %",
    "wakeups_per_s": "wakes/s",
    "minflt": "minflt",
    "majflt": "majflt",
}
PLACEMENT = {
    "comm": "thread",
    "tid": "tid",
    "policy": "policy",
    "cpus": "CPUs (time)",
    "core_types": "core types",
    "migrations": "moves",
    "slow_core_pct": "slow core",
    "shared_pct": "shared",
    "runqueue_shared_ns": "waited shared",
}
CHANGES = {"t_ns": "at", "comm": "thread", "tid": "tid", "from": "from", "to": "to"}
FAULTS = {
    "minflt": "minor",
    "majflt": "major",
    "peak_bin_faults": "peak bin",
    "peak_thread": "by",
    "faults_over_time": "over time",
}
FAULT_BINS = {"bin_start_ns": "bin", "minflt": "minor", "majflt": "major", "top_comm": "mostly", "top_share": "share"}
WORST = {
    "start_ns": "at",
    "comm": "thread",
    "tid": "tid",
    "duration_ns": "span",
    "verdict": "verdict",
    "stall_ns": "stalled",
    "components": "components",
}


def summary_report(
    cap: Capture,
    name: str,
    *,
    t_range: tuple[int | None, int | None] | None = None,
    top: int = 8,
    worst: int = 10,
    rows: int = 15,
    full: bool = False,
    tids: tuple[int, ...] = (),
) -> Report:
    """The report `forensics summarize` prints: the five views (`full`: every row, as JSON shows them);
    `tids`: only those threads in the per-thread views. `forensics report` embeds the same sections."""
    from analyses.summary import summarize as run_summary

    result = run_summary(cap, t_range=t_range, top=top, worst=worst, tids=tids)
    views = result.views
    report = Report(title=f"Summary of {name}", origin_ns=result.origin_ns)
    if not views:
        report.notes.append("The capture (or span) holds no samples.")
        return report
    bin_text = fmt_ns(result.bin_ns)
    if tids:
        report.notes.append(
            f"Only {asked_threads(None, tids, ', ')} in the timeline, the breakdown, the placement and the "
            "worst episodes; the faults over time are the whole machine's."
        )
    machine = " (all threads)" if tids else ""
    report.sections.append(
        Section(
            "timeline", f"1. On-CPU timeline, busiest threads (one character = {bin_text})", views["timeline"], TIMELINE
        )
    )
    breakdown = views["breakdown"]
    shown = breakdown if full else breakdown.head(rows)
    note = f"{len(breakdown) - rows} more threads in --json." if len(breakdown) > rows else ""
    report.sections.append(Section("breakdown", "2. Run vs wait per thread", shown, BREAKDOWN, note=note))
    report.sections.append(
        Section(
            "placement",
            f"3. Placement of watched threads (CPU per {bin_text} under each)",
            views["placement"],
            PLACEMENT,
            detail="cpu_over_time",
            empty="(no window of the threads asked for)" if tids else "(no real-time or periodic thread)",
            note="shared: time another recorded thread was busy on the same CPU in the same tick.",
        )
    )
    report.sections.append(
        Section("placement_changes", "   Policy and priority changes", views["placement_changes"], CHANGES)
    )
    report.sections.append(Section("faults", f"4. Faults over time{machine}", views["faults"], FAULTS))
    fault_bins = views["faults_bins"]
    busiest = fault_bins[(fault_bins["minflt"] + fault_bins["majflt"]) > 0]
    busiest = busiest.sort_values("minflt", ascending=False).head(5).sort_values("bin_start_ns")
    report.sections.append(
        Section("faults_bins", "   Bins with the most faults", fault_bins if full else busiest, FAULT_BINS)
    )
    report.sections.append(
        Section("worst", "5. Worst stall episodes", views["worst"], WORST, detail="evidence", empty="(no stall)")
    )
    from analyses.rules import DEFAULT_RULES
    from analyses.source import capture_interval_ns
    from forensics.views.thresholds import stall_thresholds

    report.notes.append(stall_thresholds(DEFAULT_RULES, capture_interval_ns(cap)))
    return report
