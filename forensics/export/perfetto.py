"""A capture as a Chrome JSON trace (the Trace Event Format) that ui.perfetto.dev and chrome://tracing open.

Rules of the format followed here (Trace Event Format document; Perfetto's "other formats" notes):
- one object {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}; `ts` and `dur` are
  microseconds (floats keep the ns); every event has `name`, `ph`, `pid`, `tid`, `ts`;
- "X" complete events (with `dur`) on one thread must nest or be disjoint: here they are disjoint;
- "C" counters belong to a process (pid and name identify the track) and carry numeric `args`;
- "i" instants carry a scope `s`: "t" thread, "p" process, "g" global;
- "M" metadata names processes and threads (`process_name`, `thread_name`, `*_sort_index`).

Tracks. Each thread: slices "running", "runnable (waiting for a CPU)" and "blocked (D)" from its
reconciled windows (analyses.windows). The amounts are exact per window; their order inside one
sampling window is not known, so each window is laid out run, then runqueue, then blocked, and
adjacent slices of the same kind are merged (a 20 ms run is one slice). Asleep in S (idle) is left
empty. Counters per thread: page faults per window and the CPU it was on. Stall episodes
(analyses.stalls): an instant on the thread at its start, and a slice on a "<thread> verdicts" track
(a tid of its own, 2^22 + tid: above Linux's pid_max, so never a real thread). The machine (a pid of
its own, 2^22 + 1): per-CPU busy % from /proc/stat, and the markers set while recording as global
instants.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from capture.errors import ForensicsError
from capture.format import Capture
from forensics.colors import VERDICT_COLORS
from forensics.progress import Progress

SYNTHETIC = 1 << 22  # PID_MAX_LIMIT on 64-bit Linux (include/linux/threads.h): no real pid or tid reaches it
MACHINE_PID = SYNTHETIC + 1
PARTS = (
    ("on_cpu_ns", "running"),
    ("runqueue_ns", "runnable (waiting for a CPU)"),
    ("blocked_ns", "blocked (D)"),
)
CPU_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")


def _us(ns: np.ndarray | float, origin: int) -> np.ndarray:
    return np.round((np.asarray(ns, dtype=np.float64) - origin) / 1e3, 3)


def thread_slices(windows: pd.DataFrame) -> pd.DataFrame:
    """Per thread, the run / runqueue / blocked slices of its windows, same-kind neighbours merged.

    Columns: tid kind start_ns end_ns windows. Vectorised: three candidate slices per window.
    """
    if windows.empty:
        return pd.DataFrame(columns=["tid", "kind", "start_ns", "end_ns", "windows"])
    start = windows["start_ns"].to_numpy(dtype=np.int64)
    offset = np.zeros(len(windows), dtype=np.int64)
    parts = []
    for k, (column, _) in enumerate(PARTS):
        length = windows[column].to_numpy(dtype=np.int64)
        parts.append(
            pd.DataFrame({"tid": windows["tid"].to_numpy(), "kind": k, "start_ns": start + offset, "length": length})
        )
        offset = offset + length
    frame = pd.concat(parts, ignore_index=True)
    frame = frame[frame["length"].to_numpy() > 0]
    if frame.empty:  # threads that only slept: no slice at all (and nothing for the grouping below)
        return pd.DataFrame(columns=["tid", "kind", "start_ns", "end_ns", "windows"])
    frame = frame.sort_values(["tid", "start_ns", "kind"], kind="stable").reset_index(drop=True)
    frame["end_ns"] = frame["start_ns"] + frame["length"]
    tid = frame["tid"].to_numpy()
    kind = frame["kind"].to_numpy()
    s = frame["start_ns"].to_numpy()
    e = frame["end_ns"].to_numpy()
    joins = np.r_[False, (tid[1:] == tid[:-1]) & (kind[1:] == kind[:-1]) & (s[1:] == e[:-1])]
    group = np.cumsum(~joins)
    merged = frame.groupby(group, sort=False).agg(
        tid=("tid", "first"), kind=("kind", "first"), start_ns=("start_ns", "first"), end_ns=("end_ns", "last"),
        windows=("tid", "size"),
    )  # fmt: skip
    return merged.reset_index(drop=True)


def _changes(tid: np.ndarray, values: np.ndarray) -> np.ndarray:
    """True where a thread's value differs from its previous one (or a new thread starts)."""
    return np.r_[True, (tid[1:] != tid[:-1]) | (values[1:] != values[:-1])] if len(tid) else np.zeros(0, bool)


def window_events(
    windows: pd.DataFrame, origin: int, pids: dict[int, int], exact: frozenset[int] = frozenset()
) -> list[dict[str, Any]]:
    """Slices and counters of one group of threads' windows (no slices for the `exact` threads: their
    states come from the switch record, forensics/export/perfetto_exact.py)."""
    events: list[dict[str, Any]] = []
    slices = thread_slices(windows[~windows["tid"].isin(exact)])
    names = [name for _, name in PARTS]
    ts = _us(slices["start_ns"].to_numpy(), origin)
    dur = np.round((slices["end_ns"].to_numpy() - slices["start_ns"].to_numpy()) / 1e3, 3)
    for tid, kind, t, d, n in zip(
        slices["tid"].tolist(), slices["kind"].tolist(), ts.tolist(), dur.tolist(), slices["windows"].tolist(),
        strict=True,
    ):  # fmt: skip
        events.append(
            {"name": names[kind], "cat": "sched", "ph": "X", "ts": t, "dur": d, "pid": pids.get(tid, tid), "tid": tid,
             "args": {"windows": n}}
        )  # fmt: skip
    w = windows.sort_values(["tid", "end_ns"], kind="stable")
    tid = w["tid"].to_numpy()
    faults = np.zeros(len(w), dtype=np.int64)
    for column in ("minflt", "majflt"):
        if column in w:
            faults = faults + w[column].to_numpy(dtype=np.int64)
    cpu = w["cpu"].to_numpy(dtype=np.int64)
    t_us = _us(w["end_ns"].to_numpy(), origin)
    comm = w["comm"].to_numpy() if "comm" in w else tid.astype(str)
    for label, values in (("faults", faults), ("cpu", cpu)):
        keep = _changes(tid, values)
        for t, th, v, c in zip(t_us[keep].tolist(), tid[keep].tolist(), values[keep].tolist(), comm[keep].tolist(),
                               strict=True):  # fmt: skip
            events.append(
                {"name": f"{label} {c} ({th})", "cat": label, "ph": "C", "ts": t, "pid": pids.get(th, th), "tid": th,
                 "args": {label: v}}
            )  # fmt: skip
    return events


def machine_events(system: pd.DataFrame, markers: pd.DataFrame, origin: int) -> list[dict[str, Any]]:
    """Per-CPU busy % (from /proc/stat jiffies between reads) and the markers, on the machine's track."""
    events: list[dict[str, Any]] = []
    per_cpu = system[system["cpu"] >= 0].sort_values(["cpu", "t_ns"]) if len(system) else system
    if len(per_cpu):
        busy = sum(per_cpu[f].to_numpy(dtype=np.float64) for f in CPU_FIELDS if f in per_cpu)
        total = busy + per_cpu["idle"].to_numpy(dtype=np.float64)
        if "iowait" in per_cpu:
            total = total + per_cpu["iowait"].to_numpy(dtype=np.float64)
        cpu = per_cpu["cpu"].to_numpy()
        first = np.r_[True, cpu[1:] != cpu[:-1]]
        d_busy = np.r_[0, np.diff(busy)]
        d_total = np.r_[0, np.diff(total)]
        ok = ~first & (d_total > 0)
        pct = np.round(100.0 * d_busy[ok] / d_total[ok], 1)
        t = _us(per_cpu["t_ns"].to_numpy()[ok], origin)
        frame = pd.DataFrame({"t": t, "cpu": cpu[ok], "pct": pct})
        for t_value, group in frame.groupby("t", sort=True):
            events.append(
                {"name": "CPU busy %", "cat": "machine", "ph": "C", "ts": float(t_value), "pid": MACHINE_PID,
                 "tid": MACHINE_PID, "args": {f"cpu{int(c)}": float(p) for c, p in zip(group["cpu"], group["pct"],
                                                                                         strict=True)}}
            )  # fmt: skip
    for t_ns, text in zip(markers["t_ns"].tolist(), markers["text"].tolist(), strict=True):
        events.append(
            {"name": f"marker: {text}", "cat": "marker", "ph": "i", "s": "g", "ts": float(_us(t_ns, origin)),
             "pid": MACHINE_PID, "tid": MACHINE_PID, "args": {"text": text}}
        )  # fmt: skip
    return events


def verdict_events(episodes: pd.DataFrame, origin: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for row in episodes.itertuples(index=False):
        components = {k: round(v / 1e6, 3) for k, v in (row.components or {}).items() if v}
        args = {
            "verdict": row.verdict,
            "start_s": round((row.start_ns - origin) / 1e9, 6),
            "duration_ms": round(row.duration_ns / 1e6, 3),
            "stall_ms": round(row.stall_ns / 1e6, 3),
            "components_ms": components,
            "evidence": row.evidence,
            "sources": list(row.sources),
            "color": VERDICT_COLORS.get(row.verdict, VERDICT_COLORS["unknown"]),  # as in the plots and the report
        }
        name = f"stall: {row.verdict} {row.stall_ns / 1e6:.1f} ms"
        ts = float(_us(row.start_ns, origin))
        events.append({"name": name, "cat": "verdict", "ph": "i", "s": "t", "ts": ts, "pid": int(row.pid),
                       "tid": int(row.tid), "args": args})  # fmt: skip
        events.append({"name": name, "cat": "verdict", "ph": "X", "ts": ts, "dur": round(row.duration_ns / 1e3, 3),
                       "pid": int(row.pid), "tid": SYNTHETIC + int(row.tid), "args": args})  # fmt: skip
    return events


def incident_root_events(
    cap: Capture, episodes: pd.DataFrame, watched: pd.DataFrame, origin: int
) -> list[dict[str, Any]]:
    """Each incident's root (analyses.incidents: the first late link of a late cycle, as `forensics
    stalls` lists it) as a marked slice over its episode on the thread's verdicts track."""
    from analyses.incidents import find_incidents
    from analyses.source import capture_interval_ns

    if episodes.empty:
        return []
    _, members = find_incidents(cap, episodes, watched, interval_ns=capture_interval_ns(cap))
    roots = members[members["role"] == "root"] if len(members) else members
    events: list[dict[str, Any]] = []
    for row in roots.itertuples(index=False):
        verdict = row.incident_verdict if isinstance(row.incident_verdict, str) else row.verdict
        events.append(
            {"name": f"incident {int(row.incident)} root: {verdict}", "cat": "incident", "ph": "X",
             "ts": float(_us(row.start_ns, origin)), "dur": round(row.duration_ns / 1e3, 3), "pid": int(row.pid),
             "tid": SYNTHETIC + int(row.tid),
             "args": {"incident": int(row.incident), "root": True, "verdict": verdict, "evidence": row.evidence,
                      "color": VERDICT_COLORS.get(verdict, VERDICT_COLORS["unknown"])}}
        )  # fmt: skip
    return events


def metadata_events(threads: pd.DataFrame, episodes: pd.DataFrame, watched: Iterable[int]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "ts": 0, "pid": MACHINE_PID, "tid": MACHINE_PID,
         "args": {"name": "machine (/proc/stat, markers)"}},
        {"name": "process_sort_index", "ph": "M", "ts": 0, "pid": MACHINE_PID, "tid": MACHINE_PID,
         "args": {"sort_index": -1}},
    ]  # fmt: skip
    watched = set(watched)
    for pid, group in threads.groupby("pid", sort=True):
        process = next((p for p in group["process"].tolist() if isinstance(p, str) and p), str(pid))
        events.append({"name": "process_name", "ph": "M", "ts": 0, "pid": int(pid), "tid": int(pid),
                       "args": {"name": f"{process} ({int(pid)})"}})  # fmt: skip
    for row in threads.itertuples(index=False):
        events.append({"name": "thread_name", "ph": "M", "ts": 0, "pid": int(row.pid), "tid": int(row.tid),
                       "args": {"name": f"{row.comm} ({int(row.tid)})"}})  # fmt: skip
        order = 0 if int(row.tid) in watched else 10
        events.append({"name": "thread_sort_index", "ph": "M", "ts": 0, "pid": int(row.pid), "tid": int(row.tid),
                       "args": {"sort_index": order}})  # fmt: skip
    for tid, pid, comm in episodes[["tid", "pid", "comm"]].drop_duplicates("tid").itertuples(index=False):
        events.append({"name": "thread_name", "ph": "M", "ts": 0, "pid": int(pid), "tid": SYNTHETIC + int(tid),
                       "args": {"name": f"{comm} ({int(tid)}) verdicts"}})  # fmt: skip
        events.append({"name": "thread_sort_index", "ph": "M", "ts": 0, "pid": int(pid),
                       "tid": SYNTHETIC + int(tid), "args": {"sort_index": 1}})  # fmt: skip
    return events


def fragment(events: list[dict[str, Any]]) -> str:
    """Events as the inside of a JSON array (no brackets), to be joined with others."""
    return ",".join(json.dumps(e, separators=(",", ":"), default=str) for e in events)


def trace_json(fragments: list[str], other: dict[str, Any]) -> str:
    """The whole trace from event fragments (see `fragment`)."""
    events = ",".join(f for f in fragments if f)
    tail = json.dumps(other, separators=(",", ":"), default=str)
    return f'{{"traceEvents":[{events}],"displayTimeUnit":"ms","otherData":{tail}}}'


def perfetto_trace(
    cap: Capture,
    name: str,
    *,
    pattern: str | None = None,
    t_range: tuple[int | None, int | None] | None = None,
    progress: Progress | None = None,
    tids: tuple[int, ...] = (),
) -> str:
    from analyses.source import capture_origin_ns
    from analyses.threads import select_threads
    from forensics import __version__
    from forensics.export.frames import export_threads, export_verdicts, export_windows

    origin = capture_origin_ns(cap)
    if origin is None:
        raise ForensicsError(f"{name} holds no samples: there is nothing to export")
    profiles = export_threads(cap, pattern, t_range, tids)
    if progress:
        progress.step("windows of every thread")
    pids = dict(zip(profiles["tid"].astype(int), profiles["pid"].astype(int), strict=True))
    comms = profiles.set_index("tid")["comm"]
    # Each group of threads' events is serialised at once, so only one group's dicts live at a time.
    parts: list[str] = []
    switch = cap.table("sched_switch") if "sched_switch" in cap.table_names else pd.DataFrame()
    if len(switch) and t_range is not None:
        from analyses.span import in_span as _in_span

        switch = switch[_in_span(switch["t_ns"].to_numpy(), t_range)]
    exact: frozenset[int] = frozenset()
    if len(switch):
        from forensics.export.perfetto_exact import exact_events

        seen = set(switch["prev_tid"].tolist()) | set(switch["next_tid"].tolist())
        exact = frozenset(t for t in pids if t in seen)
        wakeups = cap.table("sched_wakeup") if "sched_wakeup" in cap.table_names else pd.DataFrame()
        parts.append(fragment(exact_events(switch, wakeups, set(exact), pids, origin)))
    for windows in export_windows(cap, profiles, t_range=t_range, group_samples=1_000_000):
        windows = windows.assign(comm=comms.reindex(windows["tid"]).fillna("?").to_numpy())
        parts.append(fragment(window_events(windows, origin, pids, exact)))
        del windows
    events: list[dict[str, object]] = []
    if progress:
        progress.step("stall verdicts")
    episodes = export_verdicts(cap, profiles, pattern, t_range, tids)
    events.extend(verdict_events(episodes, origin))
    events.extend(incident_root_events(cap, episodes, select_threads(profiles, pattern=pattern, tids=tids), origin))
    from analyses.span import in_span

    events_table = cap.events
    marks = events_table[events_table["kind"] == "marker"] if len(events_table) else events_table
    marks = marks[in_span(marks["t_ns"].to_numpy(), t_range)]
    markers = pd.DataFrame(
        {"t_ns": marks["t_ns"].to_numpy(), "text": [t if isinstance(t, str) and t else "marker" for t in marks["text"]]}
    )
    system = cap.system
    if len(system) and t_range is not None:
        system = system[in_span(system["t_ns"].to_numpy(), t_range)]
    events.extend(machine_events(system, markers, origin))
    from analyses.engine import node_lateness
    from forensics.export.perfetto_engine import engine_events

    xruns, nodes = cap.table("xruns"), cap.table("engine_nodes")
    nodes = nodes.assign(late=node_lateness(nodes, cap.engine_cycles)["late"])  # before the span: next starts
    if t_range is not None:
        xruns = xruns[in_span(xruns["t_ns"].to_numpy(), t_range)]
        nodes = nodes[in_span(nodes["t_ns"].to_numpy(), t_range)]
    engine = (cap.sources.get("engine") or {}).get("kind", "engine")
    events.extend(engine_events(xruns, nodes, origin, engine))
    watched = select_threads(profiles)["tid"].astype(int).tolist()
    head = metadata_events(profiles, episodes, watched)
    other = {
        "capture": name,
        "origin_ns": origin,
        "clock": "CLOCK_MONOTONIC; ts = microseconds since the capture's first sample",
        "tool": f"spike-stall-forensics {__version__}",
        "note": "run/runqueue/blocked amounts are exact per sampling window; their order inside one window is not"
        + ("; threads with eBPF switch records show the kernel's exact states instead" if exact else ""),
    }
    return trace_json([fragment(head), *parts, fragment(events)], other)
