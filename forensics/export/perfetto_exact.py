"""The exact eBPF switch record in the Perfetto trace: thread states, wake-up arrows and CPU tracks.

Where the capture has `sched_switch` (catch-load --ebpf), a thread's track holds what the kernel said
instead of the 2 ms windows' amounts: "Running" from a switch-in to the switch-out, then the state it
left in ("Runnable (preempted)", "Sleeping (S)", "Uninterruptible (D)") until its wake-up ("Runnable"
from `sched_waking` to the switch-in). Each wake-up by a thread of the trace is a flow arrow (Trace
Event Format "s"/"f" with bp "e") from the waker's running slice to the wakee's next "Running" slice.
Only arrows from a waker seen running at the wake-up are drawn (an arrow binds to the slices at its
ends). One track per CPU (a process of its own, CPU_PID) shows which thread it ran between switches. Threads
without switch records keep the windows' slices (forensics/export/perfetto.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

SYNTHETIC = 1 << 22  # as in perfetto.py: above any real pid or tid
CPU_PID = SYNTHETIC + 2
CPU_TID = 2 * SYNTHETIC  # + cpu number: a track per CPU inside CPU_PID
LEFT_IN = {"R": "Runnable (preempted)", "S": "Sleeping (S)", "D": "Uninterruptible (D)"}
RUNNING, RUNNABLE = "Running", "Runnable"


def _us(ns: float, origin: int) -> float:
    return round((ns - origin) / 1e3, 3)


def thread_states(switch: pd.DataFrame, wakeups: pd.DataFrame, tids: set[int]) -> tuple[pd.DataFrame, list[tuple]]:
    """(slices: tid state start_ns end_ns, wakes: (waker_tid, wake_ns, tid, switch_in_ns)) of `tids`."""
    rows: list[tuple[int, int, int, str, int]] = []  # (t_ns, order, tid, what, other)
    for t, tid in zip(switch["t_ns"].tolist(), switch["next_tid"].tolist(), strict=True):
        if tid in tids:
            rows.append((t, 1, tid, "in", 0))
    left = [str(s)[:1] for s in switch["prev_state_char"].tolist()]
    for t, tid, letter in zip(switch["t_ns"].tolist(), switch["prev_tid"].tolist(), left, strict=True):
        if tid in tids:
            rows.append((t, 0, tid, "out:" + letter, 0))
    if len(wakeups):
        waking = wakeups[wakeups["kind"].astype(str).isin(("waking", "wakeup_new"))]
        waker = waking["waker_tid"].astype("Int64").fillna(-1).astype(np.int64).tolist()
        for t, tid, by in zip(waking["t_ns"].tolist(), waking["tid"].tolist(), waker, strict=True):
            if tid in tids:
                rows.append((t, 2, tid, "wake", by))
    rows.sort(key=lambda r: (r[2], r[0], r[1]))
    slices: list[tuple[int, str, int, int]] = []
    wakes: list[tuple[int, int, int, int]] = []
    state: str | None = None
    since = 0
    current = -1
    pending: tuple[int, int] | None = None  # (waker, wake_ns) waiting for the wakee's switch-in
    for t, _, tid, what, other in rows:
        if tid != current:
            current, state, pending = tid, None, None
        if what == "in":
            if state is not None and state != RUNNING:
                slices.append((tid, state, since, t))
            if pending is not None:
                wakes.append((pending[0], pending[1], tid, t))
                pending = None
            state, since = RUNNING, t
        elif what.startswith("out:"):
            if state == RUNNING:
                slices.append((tid, RUNNING, since, t))
            state, since = LEFT_IN.get(what[4:]), t
        elif what == "wake" and state in (LEFT_IN["S"], LEFT_IN["D"]):
            slices.append((tid, state, since, t))
            state, since = RUNNABLE, t
            pending = (other, t) if other >= 0 else None
    frame = pd.DataFrame(slices, columns=["tid", "state", "start_ns", "end_ns"])
    return frame[frame["end_ns"] > frame["start_ns"]], wakes


def exact_events(
    switch: pd.DataFrame, wakeups: pd.DataFrame, tids: set[int], pids: dict[int, int], origin: int
) -> list[dict[str, Any]]:
    """The trace events of the switch record for `tids` (pid of each from `pids`), and the CPU tracks."""
    events: list[dict[str, Any]] = []
    slices, wakes = thread_states(switch, wakeups, tids)
    for tid, state, start, end in slices.itertuples(index=False, name=None):
        events.append({"name": state, "cat": "sched,exact", "ph": "X", "ts": _us(start, origin),
                       "dur": round((end - start) / 1e3, 3), "pid": pids[tid], "tid": tid})  # fmt: skip
    running = slices[slices["state"] == RUNNING].sort_values(["tid", "start_ns"])
    spans = {
        int(tid): (g["start_ns"].to_numpy(), g["end_ns"].to_numpy()) for tid, g in running.groupby("tid", sort=False)
    }
    for flow_id, (waker, wake_ns, tid, in_ns) in enumerate(wakes, start=1):
        # An arrow binds to the slice around its ends: drawn only where the waker is seen running (a
        # thread outside the trace, or a wake-up from an interrupt, leaves the Runnable slice alone).
        starts, ends = spans.get(waker, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        at = int(np.searchsorted(starts, wake_ns, side="right")) - 1
        if at < 0 or ends[at] < wake_ns:
            continue
        events.append({"name": "wakeup", "cat": "wakeup", "ph": "s", "id": flow_id, "ts": _us(wake_ns, origin),
                       "pid": pids[waker], "tid": waker})  # fmt: skip
        events.append({"name": "wakeup", "cat": "wakeup", "ph": "f", "bp": "e", "id": flow_id,
                       "ts": _us(in_ns, origin), "pid": pids[tid], "tid": tid})  # fmt: skip
    events.extend(cpu_events(switch, origin))
    return events


def cpu_events(switch: pd.DataFrame, origin: int) -> list[dict[str, Any]]:
    """Only arrows from a waker seen running at the wake-up are drawn (an arrow binds to the slices at its
    ends). One track per CPU: the thread it ran from each switch to the next (idle left empty)."""
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "ts": 0, "pid": CPU_PID, "tid": CPU_PID, "args": {"name": "CPUs (eBPF)"}},
        {"name": "process_sort_index", "ph": "M", "ts": 0, "pid": CPU_PID, "tid": CPU_PID, "args": {"sort_index": -2}},
    ]  # fmt: skip
    for cpu, group in switch.sort_values(["cpu", "t_ns"], kind="stable").groupby("cpu", sort=True):
        track = CPU_TID + int(cpu)
        events.append({"name": "thread_name", "ph": "M", "ts": 0, "pid": CPU_PID, "tid": track,
                       "args": {"name": f"CPU {int(cpu)}"}})  # fmt: skip
        t = group["t_ns"].to_numpy(dtype=np.int64)
        for start, end, tid, comm in zip(t[:-1].tolist(), t[1:].tolist(), group["next_tid"].tolist()[:-1],
                                         group["next_comm"].astype(str).tolist()[:-1], strict=True):  # fmt: skip
            if tid == 0 or end <= start:
                continue
            events.append({"name": f"{comm} ({tid})", "cat": "cpu", "ph": "X", "ts": _us(start, origin),
                           "dur": round((end - start) / 1e3, 3), "pid": CPU_PID, "tid": track})  # fmt: skip
    return events
