"""The stalls view: watched threads and stall episodes with their evidence, as `forensics stalls` prints
them and `forensics report` embeds them. Deciding is in analyses.stalls; this only lays it out."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from capture.format import Capture
from forensics.describe import asked_threads, damage_notes
from forensics.render import Report, Section

if TYPE_CHECKING:
    from analyses.rules import StallRules

EPISODE_COLUMNS = {
    "start_ns": "at",
    "tid": "tid",
    "comm": "thread",
    "duration_ns": "span",
    "verdict": "verdict",
    "stall_ns": "stalled",
    "components": "components",
}
THREAD_COLUMNS = {
    "tid": "tid",
    "comm": "thread",
    "process": "process",
    "policy": "policy",
    "period_ns": "period",
    "why": "why",
}


def stalls_report(
    cap: Capture,
    name: str,
    *,
    pattern: str | None = None,
    everything: bool = False,
    tids: tuple[int, ...] = (),
    rules: StallRules | None = None,
    t_range: tuple[int | None, int | None] | None = None,
    with_truth: bool = False,
    profiles: pd.DataFrame | None = None,
    incidents: bool = False,
    for_json: bool = False,
) -> Report:
    """The report `forensics stalls` prints (watched threads, episodes with evidence, or with `incidents`
    the incidents with their episodes under each); `forensics report` embeds the same sections."""
    from analyses.source import asked_interval_ns, capture_interval_ns, capture_origin_ns
    from analyses.span import overlaps_span
    from analyses.stalls import find_stalls
    from analyses.threads import policy_label, select_threads, thread_profiles

    profiles = thread_profiles(cap, t_range=t_range) if profiles is None else profiles
    # Incidents are grouped from the whole capture's episodes, then the span picks those it touches.
    shown = None if incidents else t_range
    episodes = find_stalls(
        cap, pattern=pattern, everything=everything, tids=tids, rules=rules, t_range=shown, profiles=profiles
    )
    # The analyses take the numbers (an incident's chain tells real-time threads by their policy number,
    # as `forensics xruns` passes them); the table shows words.
    watched = select_threads(profiles, pattern=pattern, everything=everything, tids=tids)
    shown_threads = watched.copy()
    shown_threads["policy"] = [
        policy_label(p, r, n)
        for p, r, n in zip(
            watched["policy"].tolist(), watched["rtprio"].tolist(), watched["nice"].tolist(), strict=True
        )
    ]
    # -1 marks "never real-time" inside the analyses; shown, it is no priority at all.
    shown_threads["max_rtprio"] = watched["max_rtprio"].where(watched["max_rtprio"] >= 0)
    interval = capture_interval_ns(cap)
    asked = asked_interval_ns(cap)
    # A recorder that missed most ticks left longer windows than asked: the title says which the rules took.
    sampled = (
        f"sampled every {interval / 1e6:g} ms"
        if interval == asked
        else f"asked every {asked / 1e6:g} ms, read every {interval / 1e6:.3g} ms at the median: "
        f"{(cap.trailer or {}).get('missed_ticks', '?')} ticks missed"
    )
    report = Report(
        title=f"Stalls in {name} ({sampled})",
        origin_ns=capture_origin_ns(cap),
        json_root="stalls",
    )
    report.sections.append(
        Section(
            "threads",
            "Watched threads",
            shown_threads,
            THREAD_COLUMNS,
            empty=_no_thread_hint(pattern, tids),
        )
    )
    exact = int((episodes["basis"] == "ebpf").sum()) if len(episodes) else 0
    how = (
        f"{exact} of {len(episodes)} episodes have exact edges from eBPF switch events; the others come from "
        "the 2 ms /proc windows."
        if exact
        else ""
    )
    shown_episodes = episodes[overlaps_span(episodes["start_ns"], episodes["end_ns"], t_range)]
    report.found = {"episode": len(shown_episodes), **shown_episodes["verdict"].value_counts().to_dict()}
    if incidents:
        from forensics.views.incidents import add_incident_sections

        listed = add_incident_sections(
            report,
            cap,
            episodes,
            watched,
            interval_ns=interval,
            for_json=for_json,
            quiet_outside=pattern is None and not everything and not tids,
            t_range=t_range,
        )
        report.found["incident"] = len(listed)
    else:
        report.sections.append(
            Section(
                "stalls", "Stall episodes (evidence under each)", episodes, EPISODE_COLUMNS, detail="evidence", note=how
            )
        )
    from analyses.rules import DEFAULT_RULES
    from forensics.views.thresholds import stall_thresholds

    report.notes += damage_notes(cap, report.origin_ns, t_range)
    report.notes.append(stall_thresholds(rules or DEFAULT_RULES, interval))
    undecided = episodes.attrs.get("undecided") or []
    if undecided:
        report.notes.append("Unknown for lack of a source in this capture: " + "; ".join(undecided) + ".")
    if with_truth:
        _add_truth(report, cap, episodes, interval)
    return report


def _no_thread_hint(pattern: str | None, tids: tuple[int, ...]) -> str:
    """What to try next, never what was just tried."""
    if pattern is None and not tids:
        return "(no real-time or periodic thread: try --thread REGEX, --tid N or --all)"
    asked = asked_threads(pattern or None, tids, " and ")
    return f"(no thread matches {asked}: `forensics summarize` lists them; --all watches all)"


def _add_truth(report: Report, cap: Capture, episodes: pd.DataFrame, interval: int) -> None:
    from analyses.truth import confusion

    truth = cap.truth
    if truth.empty:
        report.notes.append("--truth: this capture holds no ground truth (record the lab: catch-load --lab).")
        return
    matrix, scores = confusion(
        episodes, truth, cycles=cap.cycles, tolerance_ns=interval, interval_ns=interval, system=cap.system
    )
    report.sections.append(Section("truth_matrix", "Ground truth (rows) against verdicts (columns), >= 5 ms", matrix))
    report.sections.append(Section("truth_scores", "Recall and precision per cause", scores))
