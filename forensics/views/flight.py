"""The flight recorder's counters in `forensics xruns` (README, "Flight recorder"): on flight.ssf, the
xruns and missed deadlines per minute, the bursts and the gaps between them, and the windows saved or
skipped; on a saved window, which trigger saved it."""

from __future__ import annotations

import pandas as pd

from capture.format import Capture
from forensics.render import Section

MINUTES_TABLE = {
    "t_ns": "minute from",
    "covered_ns": "recorded",
    "xruns": "xruns",
    "missed_deadlines": "missed deadlines",
    "stalls": "rule matches",
    "markers": "markers",
}
BURSTS_TABLE = {
    "start_ns": "from",
    "end_ns": "to",
    "xruns": "xruns",
    "missed_deadlines": "missed deadlines",
    "gap_before_ns": "gap before",
}
WINDOWS_TABLE = {
    "t_ns": "trigger at",
    "text": "trigger",
    "triggers": "triggers",
    "status": "status",
    "file": "file",
    "verdict": "first verdict",
    "reason": "why skipped",
}


def flight_sections(cap: Capture) -> list[Section]:
    """The sections a flight recording adds (none for an ordinary capture)."""
    names = set(cap.table_names)
    sections = []
    if "flight_minutes" in names:
        minutes = cap.table("flight_minutes")
        stalls = minutes["stalls"].notna().any()
        columns = {k: v for k, v in MINUTES_TABLE.items() if k != "stalls" or stalls}
        sections.append(Section("flight_minutes", "Per minute of the flight recording", minutes, columns))
    if "flight_bursts" in names or "flight_minutes" in names:
        gap = (cap.meta.get("flight") or {}).get("burst_gap_ns")
        apart = f" (events less than {gap / 1e9:g} s apart)" if isinstance(gap, int) else ""
        title = f"Bursts of xruns and missed deadlines{apart}, and the gaps between them"
        sections.append(Section("flight_bursts", title, cap.table("flight_bursts"), BURSTS_TABLE))
    if "flight_windows" in names:
        early = (cap.meta.get("flight") or {}).get("triggers_before_start")
        note = ""
        if isinstance(early, int) and early:
            note = f"{early} trigger{'s' if early > 1 else ''} before the recording's start made no window."
        sections.append(Section("flight_windows", "Windows", cap.table("flight_windows"), WINDOWS_TABLE, note=note))
    window = cap.meta.get("window")
    if isinstance(window, dict) and isinstance(window.get("trigger"), dict):
        trigger = window["trigger"]
        frame = pd.DataFrame(
            [
                {
                    "t_ns": trigger.get("t_ns"),
                    "text": trigger.get("text"),
                    "triggers": window.get("triggers"),
                    "start_ns": window.get("start_ns"),
                    "end_ns": window.get("end_ns"),
                }
            ]
        )
        columns = {"t_ns": "trigger at", "text": "trigger", "triggers": "triggers", "start_ns": "from", "end_ns": "to"}
        sections.append(Section("flight_window", "This window of a flight recording", frame, columns))
    return sections
