"""The incidents view of `forensics stalls` (incidents first, their episodes under each) and the rows of
`forensics xruns`. Builds report models from analyses.incidents; prints nothing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analyses.incidents import IncidentRules, find_incidents, xrun_rows
from analyses.rules import after_the_recording
from analyses.source import first_sample_ns
from analyses.span import in_span, overlaps_span
from capture.format import Capture
from forensics.describe import asked_threads, damage_notes
from forensics.render import Report, Section
from forensics.render.jsonout import rows
from forensics.views.thresholds import xrun_thresholds

INCIDENT_TABLE = {
    "label": "#",
    "start_ns": "at",
    "cycle_text": "cycle",
    "xrun_text": "xrun",
    "thread": "thread",
    "verdict": "verdict",
    "stall_ns": "stalled",
    "waited_text": "waited",
}
XRUN_TABLE = {
    "t_ns": "at",
    "kind": "kind",
    "client": "client",
    "delay_us": "delay us",
    "source_text": "reported by",
    "incident_text": "#",  # the incident's number, under the heading `forensics stalls` gives it
    "root_text": "root",
    "root_verdict": "root verdict",
}


def _xrun_text(value: Any) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)):
        return "unknown"
    return "yes" if bool(value) else "no"


def _client_prefix(client: Any, comm: Any) -> str:
    """The engine's name of a root that is a client's process thread, before its comm ("p0: "); nothing
    where the two are one name."""
    return f"{client}: " if isinstance(client, str) and client != comm else ""


def incident_rows(incidents: pd.DataFrame, members: pd.DataFrame) -> pd.DataFrame:
    """One row per incident (its root) followed by one row per member episode, indented: the table of
    `forensics stalls`. Incident rows carry the root's evidence as their detail line."""
    out: list[dict[str, Any]] = []
    # The members' columns read once and their rows dealt out by incident: a frame per incident (group,
    # sort, itertuples) was 5 s of pandas overhead over 274 incidents on the 30 M-sample capture.
    member = {
        name: members[name].tolist() if name in members else []
        for name in (
            "incident",
            "role",
            "incident_verdict",
            "upstream_tid",
            "client",
            "comm",
            "tid",
            "start_ns",
            "stall_ns",
        )
    }
    positions: dict[Any, list[int]] = {}
    for i, number in enumerate(member["incident"]):
        positions.setdefault(number, []).append(i)
    role, start = member["role"], member["start_ns"]
    for row in incidents.itertuples(index=False):
        root_stall = np.nan
        if row.root_episode is not None and not pd.isna(row.root_episode):
            root_stall = float(members.loc[int(row.root_episode), "stall_ns"])
        out.append(
            {
                "label": str(int(row.incident)),
                "start_ns": row.start_ns,
                "cycle_text": "unknown" if pd.isna(row.cycle) else str(int(row.cycle)),
                "xrun_text": _xrun_text(row.xrun),
                "thread": f"{_client_prefix(row.root_client, row.root_comm)}{row.root_comm} ({row.root_tid})",
                "verdict": row.root_verdict,
                "stall_ns": root_stall,
                "waited_text": str(int(row.waited)),
                "detail": row.evidence,
            }
        )
        # The root first, then by start (a stable sort: ties keep the members' order).
        for i in sorted(positions.get(row.incident, []), key=lambda i: (role[i] != "root", start[i])):
            shown = role[i] if role[i] in ("root", "ran instead", "holder") else member["incident_verdict"][i]
            upstream = member["upstream_tid"][i]
            waited_for = "" if pd.isna(upstream) else f" <- {int(upstream)}"
            out.append(
                {
                    "label": "",
                    "start_ns": start[i],
                    "cycle_text": "",
                    "xrun_text": "",
                    "thread": f"  {_client_prefix(member['client'][i], member['comm'][i])}{member['comm'][i]} "
                    f"({member['tid'][i]})",
                    "verdict": f"{shown}{waited_for}",
                    "stall_ns": member["stall_ns"][i],
                    "waited_text": "",
                    "detail": "",
                }
            )
    frame = pd.DataFrame(out, columns=[*INCIDENT_TABLE, "detail"])
    frame["stall_ns"] = frame["stall_ns"].astype("Float64").round(0).astype("Int64")
    return frame


def incidents_json(incidents: pd.DataFrame, members: pd.DataFrame) -> pd.DataFrame:
    """Incidents with their member episodes (every episode column plus role, verdict in the incident)."""
    out = incidents.copy()
    # The members' rows made once and dealt out by incident: a frame per incident cost 3 s of pandas
    # overhead over 274 incidents on the 30 M-sample capture (issue 12: analyses speed).
    episodes: dict[Any, list[dict[str, Any]]] = {}
    for number, row in zip(members["incident"].tolist(), rows(members.drop(columns=["incident"])), strict=True):
        episodes.setdefault(number, []).append(row)
    out["episodes"] = [episodes.get(number, []) for number in incidents["incident"].tolist()]
    return out


def add_incident_sections(
    report: Report,
    cap: Capture,
    episodes: pd.DataFrame,
    watched: pd.DataFrame,
    *,
    interval_ns: int,
    rules: IncidentRules | None = None,
    for_json: bool = False,
    quiet_outside: bool = True,
    t_range: tuple[int | None, int | None] | None = None,
) -> pd.DataFrame:
    """Append the incidents section to `report` (json: incidents with member episodes, the report's JSON
    root); returns the incidents. `episodes` are the whole capture's; `t_range` picks the incidents shown."""
    incidents, members = find_incidents(
        cap, episodes, watched, rules=rules, interval_ns=interval_ns, quiet_outside=quiet_outside
    )
    if t_range is not None:
        incidents = incidents[overlaps_span(incidents["start_ns"], incidents["end_ns"], t_range)]
        members = members[members["incident"].isin(incidents["incident"]).to_numpy()]
    hidden = members.attrs.get("hidden") or {}
    if hidden.get("episodes"):
        report.notes.append(
            f"{hidden['episodes']} episodes of {hidden['threads']} watched threads outside the engine's graph "
            "(not real-time, not a link of it) are no incident of their own: --episodes, --all or --thread "
            "REGEX lists them."
        )
    # Groups of episodes that are no incident (analyses.incidents.find_incidents counts them): why, per kind.
    for kind, why in (
        ("on_time", "fell in cycles the engine recorded on time (every one ended within its period, none late "
                    "to start, no xrun): no late cycle, so no incident; --episodes lists them, --all keeps "
                    "them as incidents."),
        ("after_end", "began after the recording's last tick, while catch-load's own sources left: no "
                      "incident; --episodes lists them, --all keeps them."),
        ("at_attach", "ended while catch-load's engine source attached, before the engine recorded a cycle "
                      "(the engine was answering the tool): no incident; --episodes lists them, --all keeps "
                      "them."),
    ):  # fmt: skip
        counted = members.attrs.get(kind) or {}
        if counted.get("incidents"):
            groups, episodes_n = counted["incidents"], counted["episodes"]
            report.notes.append(
                f"{groups} group{'s' if groups > 1 else ''} of episodes ({episodes_n} "
                f"episode{'s' if episodes_n > 1 else ''}) {why}"
            )
    if for_json:
        report.sections.append(Section("incidents", "Incidents", incidents_json(incidents, members)))
        report.json_root = "incidents"
        return incidents
    sources = {"engine": "the engine's records", "ebpf": "eBPF wake-ups", "proc": "/proc periods (inferred)"}
    used = sorted({sources[s] for s in incidents["chain_source"].dropna().tolist() if s in sources})
    note = (
        "Each incident is one late cycle (or a run of them): its root first (the first late link, with its "
        "evidence), then its episodes; `upstream <- TID` is a client that only waited for that link."
    )
    if used:
        note += " Chains from " + ", ".join(used) + "."
    report.sections.append(
        Section(
            "incidents",
            "Incidents (root, then episodes)",
            incident_rows(incidents, members),
            INCIDENT_TABLE,
            detail="detail",
            note=note,
            empty="(no stall episode, so no incident)",
        )
    )
    return incidents


def xruns_report(
    cap: Capture,
    name: str,
    incidents: pd.DataFrame,
    *,
    origin_ns: int | None,
    t_range: tuple[int | None, int | None] | None = None,
    members: pd.DataFrame | None = None,
    tids: tuple[int, ...] = (),
) -> Report:
    """`forensics xruns`: one row per engine-reported xrun or missed deadline, joined to its incident
    (the whole capture's incidents: `t_range` only picks the xruns shown; `tids` too, keeping those
    whose incident has one of them as its root or among its `members`' episodes)."""
    frame = xrun_rows(cap, incidents)
    keep = in_span(frame["t_ns"].to_numpy(np.int64), t_range)
    if tids:
        involved = set(incidents.loc[incidents["root_tid"].isin(tids).to_numpy(), "incident"].tolist())
        if members is not None and len(members):
            involved |= set(members.loc[members["tid"].isin(tids).to_numpy(), "incident"].tolist())
        keep &= frame["incident"].isin(involved).to_numpy(dtype=bool)
    frame = frame[keep].reset_index(drop=True)
    frame["incident_text"] = [("" if pd.isna(i) else str(int(i))) for i in frame["incident"]]
    frame["root_text"] = [  # no incident: None (analyses.incidents.xrun_rows)
        None if comm is None else f"{_client_prefix(client, comm)}{comm}"
        for comm, client in zip(frame["root_comm"], frame["root_client"], strict=True)
    ]
    # One row per xrun: how many reports of the engine it merges (jack2 notifies once per client it
    # found unfinished), beside where they came from.
    frame["source_text"] = [
        f"{source} x{int(n)}" if n > 1 else str(source)
        for source, n in zip(frame["source"], frame["reports"], strict=True)
    ]
    report = Report(title=f"Xruns and missed deadlines in {name}", origin_ns=origin_ns, json_root="xruns")
    have = set(cap.table_names)
    why = ""
    if "xruns" not in have and "engine_cycles" not in have and cap.cycles.empty:
        why = "(this capture holds no engine record: no xruns table, engine cycles or lab callbacks)"
    elif tids:
        why = f"(no xrun whose incident involves {asked_threads(None, tids)})"
    report.sections.append(
        Section(
            "xruns",
            "Xruns (engine-reported) and missed deadlines",
            frame,
            XRUN_TABLE,
            empty=why or "(none)",
            whole=("root_text",),  # the root (the engine's client: the thread's comm) is what a row is read by
        )
    )
    report.notes += damage_notes(cap, origin_ns, t_range)  # an xrun there has no incident: nothing was read
    first_ns = first_sample_ns(cap)
    if first_ns is not None and (early := int((frame["t_ns"].to_numpy(np.int64) < first_ns).sum())):
        # The engine's sources attach as soon as the engine is found, the threads' sampler a moment later (the
        # eBPF sampler's programs take 1-2 s to load): seen on a real jackd found by --match, 9 xruns of its
        # start-up before the first read, at negative times.
        report.notes.append(
            f"{early} of these came before the recording's first read of the threads (the engine's sources "
            "attached first): no thread was read then, so their root is unknown."
        )
    ended_ns = (cap.trailer or {}).get("ended_ns")
    late = after_the_recording(frame["t_ns"].to_numpy(np.int64), int(ended_ns) if ended_ns is not None else None)
    if late.any():  # the engine sources stop after the sampler: what they saw then has no thread read
        n = int(late.sum())
        report.notes.append(
            f"{n} of these came after the recording's end (the engine's sources stop after the threads' sampler):"
            " no thread was read then, so their root is unknown."
        )
    report.notes.append(xrun_thresholds())
    return report
