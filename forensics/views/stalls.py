"""The stalls view: watched threads and stall episodes with their evidence, as `forensics stalls` prints
them and `forensics report` embeds them. Deciding is in analyses.stalls; this only lays it out."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from capture.format import Capture
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
    rules: StallRules | None = None,
    t_range: tuple[int | None, int | None] | None = None,
    with_truth: bool = False,
    profiles: pd.DataFrame | None = None,
    incidents: bool = False,
    for_json: bool = False,
) -> Report:
    """The report `forensics stalls` prints (watched threads, episodes with evidence, or with `incidents`
    the incidents with their episodes under each); `forensics report` embeds the same sections."""
    from analyses.source import capture_interval_ns, capture_origin_ns
    from analyses.stalls import find_stalls
    from analyses.threads import policy_label, select_threads, thread_profiles

    profiles = thread_profiles(cap, t_range=t_range) if profiles is None else profiles
    episodes = find_stalls(cap, pattern=pattern, everything=everything, rules=rules, t_range=t_range, profiles=profiles)
    watched = select_threads(profiles, pattern=pattern, everything=everything).copy()
    watched["policy"] = [
        policy_label(p, r, n)
        for p, r, n in zip(
            watched["policy"].tolist(), watched["rtprio"].tolist(), watched["nice"].tolist(), strict=True
        )
    ]
    interval = capture_interval_ns(cap)
    report = Report(
        title=f"Stalls in {name} (sampled every {interval / 1e6:g} ms)",
        origin_ns=capture_origin_ns(cap),
        json_root="stalls",
    )
    report.sections.append(
        Section(
            "threads",
            "Watched threads",
            watched,
            THREAD_COLUMNS,
            empty="(no real-time or periodic thread: try --thread REGEX or --all)",
        )
    )
    exact = int((episodes["basis"] == "ebpf").sum()) if len(episodes) else 0
    how = (
        f"{exact} of {len(episodes)} episodes have exact edges from eBPF switch events; the others come from "
        "the 2 ms /proc windows."
        if exact
        else ""
    )
    if incidents:
        from forensics.views.incidents import add_incident_sections

        add_incident_sections(
            report,
            cap,
            episodes,
            watched,
            interval_ns=interval,
            for_json=for_json,
            quiet_outside=pattern is None and not everything,
        )
    else:
        report.sections.append(
            Section(
                "stalls", "Stall episodes (evidence under each)", episodes, EPISODE_COLUMNS, detail="evidence", note=how
            )
        )
    undecided = episodes.attrs.get("undecided") or []
    if undecided:
        report.notes.append("Unknown for lack of a source in this capture: " + "; ".join(undecided) + ".")
    if with_truth:
        _add_truth(report, cap, episodes, interval)
    return report


def _add_truth(report: Report, cap: Capture, episodes: pd.DataFrame, interval: int) -> None:
    from analyses.truth import confusion

    truth = cap.truth
    if truth.empty:
        report.notes.append("--truth: this capture holds no ground truth (record the lab: catch-load --lab).")
        return
    matrix, scores = confusion(episodes, truth, cycles=cap.cycles, tolerance_ns=interval, interval_ns=interval)
    report.sections.append(Section("truth_matrix", "Ground truth (rows) against verdicts (columns), >= 5 ms", matrix))
    report.sections.append(Section("truth_scores", "Recall and precision per cause", scores))
