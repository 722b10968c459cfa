"""Exact on-CPU / off-CPU intervals, wakers and runqueue latency from a capture's eBPF tables.

Pure functions over DataFrames (no I/O), vectorised (grouped shifts and as-of joins, no loop per event).
Input tables are as the eBPF collector writes them (see samplers/ebpf/tables.py; the analyses only
depend on their columns):

    sched_switch  t_ns cpu prev_tid prev_pid prev_comm prev_prio prev_state prev_state_char
                  next_tid next_pid next_comm next_prio
    sched_wakeup  t_ns cpu kind tid pid comm prio target_cpu waker_tid waker_pid waker_comm
                  waker_context waker_function

Which threads: the target threads, i.e. those whose process id the probes knew (next_pid is filled
only for targets), or the `target_pids` given. Non-target threads appear in the events only where they
met a target, so their intervals would be fragments: they are left out.

Interval rules (kernel/sched/core.c __schedule(): the sched_switch tracepoint fires with current ==
prev, before the context switch):
- on-CPU: from the switch that puts the thread on a CPU (next_tid == tid) to the next switch that
  takes it off (prev_tid == tid). The state it left in is that switch's prev_state_char.
- off-CPU: from a switch-out to the next switch-in of the same thread. Its `state` is the state it
  left in: "S" interruptible sleep (futex, pipe, poll, nanosleep: a lock or the normal idle),
  "D" uninterruptible (block IO, page-cache, some kernel locks), "R+" preempted (runnable: it waited
  for a CPU the whole time), "R" runnable without preemption (sched_yield).
- wake-up of a sleeping (S/D) interval: the last sched_waking of the thread before its switch-in and
  after its previous switch-in (a waker on another CPU can run between the dequeue in __schedule()
  and the sched_switch tracepoint, a few us before the switch-out); its waker is the task current at
  try_to_wake_up(), unless waker_context says an interrupt did it. wakeup_ns: the last sched_wakeup
  (the moment it was put on a run queue); ready_ns is never before start_ns.
- runqueue latency: switch-in minus the moment the thread became runnable: the sched_wakeup time (or
  the waking time when the wakeup event is missing) for S/D, the switch-out time for R/R+.
Intervals cut by the start or the end of the recording are left out (their other edge is unknown).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

# np.where(cond, x, NONE_OBJECT): an object array with None where not cond (numpy's stubs refuse a bare None).
NONE_OBJECT = np.array(None, dtype=object)

STATE_CLASS = {
    "S": "sleep",
    "D": "uninterruptible",
    # Both R forms mean "still runnable when it lost the CPU": it waited on a run queue. "R+" is a
    # preemption inside the kernel (__schedule(SM_PREEMPT)); a thread preempted while in user space is
    # switched out by schedule() on the return to user mode and reports plain "R" (0), as does
    # sched_yield(). Measured here: two threads pinned to one CPU report only "R".
    "R+": "preempted",
    "R": "preempted",
    "I": "idle",
    "T": "stopped",
    "t": "traced",
    "X": "dead",
    "Z": "zombie",
    "P": "parked",
}

CPU_INTERVAL_COLUMNS = ["tid", "pid", "comm", "cpu", "start_ns", "end_ns", "duration_ns", "end_state", "prio"]
OFF_CPU_COLUMNS = [
    "tid",
    "pid",
    "comm",
    "start_ns",
    "end_ns",
    "duration_ns",
    "state",
    "state_class",
    "cpu_out",
    "cpu_in",
    "prio",
    "waking_ns",
    "wakeup_ns",
    "ready_ns",
    "asleep_ns",
    "runqueue_ns",
    "waker_tid",
    "waker_pid",
    "waker_comm",
    "waker_context",
    "waker_function",
]
RUNQUEUE_COLUMNS = ["tid", "pid", "comm", "cause", "ready_ns", "run_ns", "latency_ns", "cpu", "waker_tid", "waker_comm"]


def target_pids_of(sched_switch: pd.DataFrame, sched_wakeup: pd.DataFrame | None = None) -> set[int]:
    """The process ids the probes treated as targets (next_pid / wakee pid are filled only for them)."""
    pids = set(
        pd.to_numeric(sched_switch.get("next_pid", pd.Series(dtype="Int64")), errors="coerce").dropna().astype(int)
    )
    if sched_wakeup is not None and "pid" in sched_wakeup:
        pids |= set(pd.to_numeric(sched_wakeup["pid"], errors="coerce").dropna().astype(int))
    return pids


def _edges(sched_switch: pd.DataFrame, target_pids: Iterable[int] | None) -> pd.DataFrame:
    """One row per switch-in ("in") and switch-out ("out") of a target thread, sorted by thread and time."""
    sw = sched_switch
    pids = set(target_pids) if target_pids is not None else target_pids_of(sw)
    prev_pid = pd.to_numeric(sw["prev_pid"], errors="coerce")
    next_pid = pd.to_numeric(sw["next_pid"], errors="coerce")
    outs = sw.loc[prev_pid.isin(pids).to_numpy()]
    ins = sw.loc[next_pid.isin(pids).to_numpy()]
    out_edges = pd.DataFrame(
        {
            "tid": outs["prev_tid"].to_numpy(np.int64),
            "pid": prev_pid[prev_pid.isin(pids)].to_numpy(np.int64),
            "comm": outs["prev_comm"].astype(str).to_numpy(),
            "t_ns": outs["t_ns"].to_numpy(np.int64),
            "cpu": outs["cpu"].to_numpy(np.int64),
            "edge": 0,  # 0 = out, 1 = in
            "state": outs["prev_state_char"].astype(str).to_numpy(),
            "prio": outs["prev_prio"].to_numpy(np.int64),
        }
    )
    in_edges = pd.DataFrame(
        {
            "tid": ins["next_tid"].to_numpy(np.int64),
            "pid": next_pid[next_pid.isin(pids)].to_numpy(np.int64),
            "comm": ins["next_comm"].astype(str).to_numpy(),
            "t_ns": ins["t_ns"].to_numpy(np.int64),
            "cpu": ins["cpu"].to_numpy(np.int64),
            "edge": 1,
            "state": "",
            "prio": ins["next_prio"].to_numpy(np.int64),
        }
    )
    edges = pd.concat([out_edges, in_edges], ignore_index=True)
    return edges.sort_values(["tid", "t_ns", "edge"], kind="stable").reset_index(drop=True)


def cpu_intervals(sched_switch: pd.DataFrame, target_pids: Iterable[int] | None = None) -> pd.DataFrame:
    """On-CPU intervals of the target threads: tid pid comm cpu start_ns end_ns duration_ns end_state prio."""
    if sched_switch.empty:
        return pd.DataFrame(columns=CPU_INTERVAL_COLUMNS)
    edges = _edges(sched_switch, target_pids)
    prev = edges.groupby("tid", sort=False).shift(1)
    # An interval: an "out" whose previous edge of the same thread is an "in" on the same CPU (a thread
    # cannot move while it runs; a mismatch means an edge was lost).
    ok = (edges["edge"] == 0) & (prev["edge"] == 1) & (prev["cpu"] == edges["cpu"])
    iv = edges[ok.to_numpy()]
    start = prev.loc[ok, "t_ns"].astype(np.int64).to_numpy()
    out = pd.DataFrame(
        {
            "tid": iv["tid"].to_numpy(),
            "pid": iv["pid"].to_numpy(),
            "comm": iv["comm"].to_numpy(),
            "cpu": iv["cpu"].to_numpy(),
            "start_ns": start,
            "end_ns": iv["t_ns"].to_numpy(),
            "duration_ns": iv["t_ns"].to_numpy() - start,
            "end_state": iv["state"].to_numpy(),
            "prio": iv["prio"].to_numpy(),
        }
    )
    return out.sort_values(["start_ns", "tid"], kind="stable").reset_index(drop=True)


def off_cpu_intervals(
    sched_switch: pd.DataFrame,
    sched_wakeup: pd.DataFrame | None = None,
    target_pids: Iterable[int] | None = None,
) -> pd.DataFrame:
    """Off-CPU intervals of the target threads with the state they left in, their waker and runqueue time.

    Columns: tid pid comm start_ns end_ns duration_ns state state_class cpu_out cpu_in prio
    waking_ns wakeup_ns ready_ns asleep_ns runqueue_ns waker_tid waker_pid waker_comm waker_context
    waker_function. Waker and wake-up columns are null where no wake-up was recorded (R/R+ intervals,
    or a lost event). asleep_ns = ready_ns - start_ns for S/D; runqueue_ns = end_ns - ready_ns.
    """
    if sched_switch.empty:
        return pd.DataFrame(columns=OFF_CPU_COLUMNS)
    edges = _edges(sched_switch, target_pids)
    prev = edges.groupby("tid", sort=False).shift(1)
    prev2 = edges.groupby("tid", sort=False).shift(2)
    ok = (edges["edge"] == 1) & (prev["edge"] == 0)
    iv = edges[ok.to_numpy()]
    before = prev[ok]
    start = before["t_ns"].astype(np.int64).to_numpy()
    # When the thread last came onto a CPU (the switch-in before this switch-out), else the switch-out.
    since = prev2.loc[ok, "t_ns"].where(prev2.loc[ok, "edge"] == 1).fillna(before["t_ns"]).astype(np.int64).to_numpy()
    state = before["state"].astype(str).to_numpy()
    off = pd.DataFrame(
        {
            "tid": iv["tid"].to_numpy(),
            "pid": iv["pid"].to_numpy(),
            "comm": before["comm"].astype(str).to_numpy(),
            "start_ns": start,
            "end_ns": iv["t_ns"].to_numpy(),
            "duration_ns": iv["t_ns"].to_numpy() - start,
            "state": state,
            "state_class": pd.Series(state).map(STATE_CLASS).fillna("other").to_numpy(),
            "cpu_out": before["cpu"].astype(np.int64).to_numpy(),
            "cpu_in": iv["cpu"].to_numpy(),
            "prio": iv["prio"].to_numpy(),
            "_on_since": since,
        }
    )
    off = off.sort_values("end_ns", kind="stable").reset_index(drop=True)
    sleeping = ~off["state"].str.startswith("R", na=False)  # a null state (pandas 3 keeps it through astype(str))

    wake_cols = ["waking_ns", "waker_tid", "waker_pid", "waker_comm", "waker_context", "waker_function"]
    if sched_wakeup is not None and not sched_wakeup.empty:
        wk = sched_wakeup
        waking = wk[wk["kind"].astype(str) == "waking"]
        waking = pd.DataFrame(
            {
                "tid": waking["tid"].to_numpy(np.int64),
                "waking_ns": waking["t_ns"].to_numpy(np.int64),
                "waker_tid": pd.array(waking["waker_tid"], dtype="Int64"),
                "waker_pid": pd.array(waking["waker_pid"], dtype="Int64"),
                "waker_comm": waking["waker_comm"].astype(object).to_numpy(),
                "waker_context": waking["waker_context"].astype(object).to_numpy(),
                "waker_function": waking["waker_function"].astype(object).to_numpy(),
            }
        ).sort_values("waking_ns", kind="stable")
        enq = wk[wk["kind"].astype(str) == "wakeup"]
        enq = pd.DataFrame({"tid": enq["tid"].to_numpy(np.int64), "wakeup_ns": enq["t_ns"].to_numpy(np.int64)})
        enq = enq.sort_values("wakeup_ns", kind="stable")
        off = pd.merge_asof(off, waking, left_on="end_ns", right_on="waking_ns", by="tid", direction="backward")
        off = pd.merge_asof(off, enq, left_on="end_ns", right_on="wakeup_ns", by="tid", direction="backward")
        # A wake-up belongs to this sleep if it came after the thread's previous switch-in: try_to_wake_up()
        # can run on another CPU between the dequeue in __schedule() and the sched_switch tracepoint, so
        # the waking may precede the switch-out by a few us. Only sleeps have wakers.
        stale_waking = ~(off["waking_ns"] >= off["_on_since"]) | ~sleeping
        off.loc[stale_waking, wake_cols] = pd.NA
        stale_wakeup = ~(off["wakeup_ns"] >= off["_on_since"]) | ~sleeping
        off.loc[stale_wakeup, "wakeup_ns"] = pd.NA
    else:
        for col in [*wake_cols, "wakeup_ns"]:
            off[col] = pd.NA
    off["waking_ns"] = pd.array(off["waking_ns"], dtype="Int64")
    off["wakeup_ns"] = pd.array(off["wakeup_ns"], dtype="Int64")
    off["waker_tid"] = pd.array(off["waker_tid"], dtype="Int64")
    off["waker_pid"] = pd.array(off["waker_pid"], dtype="Int64")

    # Runnable from: the enqueue (sched_wakeup), else the waking, for a sleep; the switch-out for R/R+.
    ready = off["wakeup_ns"].fillna(off["waking_ns"])
    ready = ready.where(sleeping, pd.array(off["start_ns"], dtype="Int64"))
    ready = ready.where(ready.isna() | (ready >= off["start_ns"]), pd.array(off["start_ns"], dtype="Int64"))
    off["ready_ns"] = pd.array(ready, dtype="Int64")
    off["asleep_ns"] = (off["ready_ns"] - off["start_ns"]).where(sleeping)
    off["asleep_ns"] = pd.array(off["asleep_ns"], dtype="Int64")
    off["runqueue_ns"] = pd.array(off["end_ns"] - off["ready_ns"], dtype="Int64")
    return off[OFF_CPU_COLUMNS].sort_values(["start_ns", "tid"], kind="stable").reset_index(drop=True)


def switch_partners(off_cpu: pd.DataFrame, sched_switch: pd.DataFrame) -> pd.DataFrame:
    """`off_cpu` plus who was on the other side of its two switches.

    out_next_tid out_next_comm out_next_prio: the task the CPU went to when the thread left it (for a
    preempted thread: the one that took its CPU). in_prev_tid in_prev_comm in_prev_prio: the task that
    gave the CPU back at the switch-in (for a thread woken and kept waiting: the one that ran meanwhile).
    Both come from the same sched_switch rows the interval was built from (matched on time, CPU, thread).
    """
    out = off_cpu.copy()
    names = {
        "out": ("prev_tid", "next_tid", "next_comm", "next_prio", "start_ns", "cpu_out"),
        "in": ("next_tid", "prev_tid", "prev_comm", "prev_prio", "end_ns", "cpu_in"),
    }
    for side, (me, other_tid, other_comm, other_prio, at, cpu) in names.items():
        prefix = "out_next" if side == "out" else "in_prev"
        columns = [f"{prefix}_tid", f"{prefix}_comm", f"{prefix}_prio"]
        if off_cpu.empty or sched_switch.empty:
            for column in columns:
                out[column] = pd.Series(dtype=object)
            continue
        rows = pd.DataFrame(
            {
                "tid": sched_switch[me].to_numpy(np.int64),
                at: sched_switch["t_ns"].to_numpy(np.int64),
                cpu: sched_switch["cpu"].to_numpy(np.int64),
                columns[0]: sched_switch[other_tid].to_numpy(np.int64),
                columns[1]: sched_switch[other_comm].astype(str).to_numpy(),
                columns[2]: sched_switch[other_prio].to_numpy(np.int64),
            }
        ).drop_duplicates(["tid", at, cpu])
        keys = pd.DataFrame(
            {
                "tid": out["tid"].to_numpy(np.int64),
                at: out[at].to_numpy(np.int64),
                cpu: out[cpu].to_numpy(np.int64),
            }
        )
        found = keys.merge(rows, on=["tid", at, cpu], how="left")
        out[columns[0]] = pd.array(found[columns[0]], dtype="Int64")
        out[columns[1]] = found[columns[1]].astype(object).to_numpy()
        out[columns[2]] = pd.array(found[columns[2]], dtype="Int64")
    return out


def timeline_gaps(sched_switch: pd.DataFrame, target_pids: Iterable[int] | None = None) -> pd.DataFrame:
    """Spans where a target thread's state is unknown because a switch edge is missing: two switch-outs
    (or two switch-ins) of the same thread in a row. Columns: tid pid start_ns end_ns missing ("in"/"out").

    Not only lost events: on the 6.18 VM kernel here, ftrace and eBPF both miss the occasional
    sched_switch (prev: the VM agent's tokio-rt-worker thread), so the kernel never emitted it.
    Intervals are never built across a gap (cpu_intervals / off_cpu_intervals pair only in->out and
    out->in), so these spans are simply absent from them: report them as unknown.
    """
    columns = ["tid", "pid", "start_ns", "end_ns", "missing"]
    if sched_switch.empty:
        return pd.DataFrame(columns=columns)
    edges = _edges(sched_switch, target_pids)
    prev = edges.groupby("tid", sort=False).shift(1)
    same = (prev["edge"] == edges["edge"]).to_numpy()
    gaps = edges[same]
    return pd.DataFrame(
        {
            "tid": gaps["tid"].to_numpy(),
            "pid": gaps["pid"].to_numpy(),
            "start_ns": prev.loc[same, "t_ns"].astype(np.int64).to_numpy(),
            "end_ns": gaps["t_ns"].to_numpy(),
            "missing": np.where(gaps["edge"].to_numpy() == 0, "in", "out"),
        },
        columns=columns,
    ).reset_index(drop=True)


def runqueue_latency(off_cpu: pd.DataFrame) -> pd.DataFrame:
    """Exact scheduler delay per wake-up or preemption: tid pid comm cause ready_ns run_ns latency_ns cpu
    waker_tid waker_comm. cause: "wakeup" (slept, then waited for a CPU) or "preempted"/"runnable"."""
    if off_cpu.empty:
        return pd.DataFrame(columns=RUNQUEUE_COLUMNS)
    known = off_cpu[off_cpu["ready_ns"].notna()]
    cause = np.where(known["state"].str.startswith("R"), known["state_class"], "wakeup")
    out = pd.DataFrame(
        {
            "tid": known["tid"].to_numpy(),
            "pid": known["pid"].to_numpy(),
            "comm": known["comm"].to_numpy(),
            "cause": cause,
            "ready_ns": known["ready_ns"].to_numpy(np.int64),
            "run_ns": known["end_ns"].to_numpy(np.int64),
            "latency_ns": known["runqueue_ns"].to_numpy(np.int64),
            "cpu": known["cpu_in"].to_numpy(),
            "waker_tid": known["waker_tid"].to_numpy(),
            "waker_comm": known["waker_comm"].to_numpy(),
        }
    )
    return out.reset_index(drop=True)


def _prio_class(prio: pd.Series) -> pd.Series:
    """Kernel prio -> "RT" (0-99: 99 - rtprio; also DEADLINE at -1) or "normal" (100-139: 120 + nice)."""
    p = pd.to_numeric(prio, errors="coerce").astype("Float64")
    known = p.notna().to_numpy(dtype=bool)
    below = (p.fillna(1000) < 100).to_numpy(dtype=bool)
    return pd.Series(np.where(known, np.where(below, "RT", "normal"), NONE_OBJECT), index=prio.index, dtype=object)


def wakers(off_cpu: pd.DataFrame, sched_switch: pd.DataFrame, samples: pd.DataFrame | None = None) -> pd.DataFrame:
    """The wake-ups of sleeping intervals with who woke them, the waker's priority and policy where known.

    Adds to each S/D interval that has a waker: waker_prio (kernel prio of the waker as last seen in a
    sched_switch before the wake-up), waker_class ("RT"/"normal"), and from the /proc samples when the
    waker was sampled: waker_policy, waker_nice, waker_rtprio. wakee_class is the sleeper's class;
    waker_lower_priority is True when an RT thread was woken by a task thread of lower priority (the
    shape of a priority inversion when the sleep was a lock wait). Interrupt wakers
    (waker_context != "task") never count as lower priority.
    """
    woken = off_cpu[off_cpu["waker_tid"].notna()].copy()
    if woken.empty:
        return woken.assign(
            waker_prio=pd.Series(dtype="Int64"),
            waker_class=pd.Series(dtype=object),
            wakee_class=pd.Series(dtype=object),
            waker_policy=pd.Series(dtype="Int64"),
            waker_nice=pd.Series(dtype="Int64"),
            waker_rtprio=pd.Series(dtype="Int64"),
            waker_lower_priority=pd.Series(dtype=bool),
        )
    woken["waker_tid"] = woken["waker_tid"].astype(np.int64)
    woken["waking_ns"] = woken["waking_ns"].astype(np.int64)
    # Priority of each thread as seen at its switches (prev_prio when it left, next_prio when it came).
    seen = pd.concat(
        [
            pd.DataFrame(
                {
                    "tid": sched_switch["prev_tid"].to_numpy(np.int64),
                    "t_ns": sched_switch["t_ns"].to_numpy(np.int64),
                    "prio": sched_switch["prev_prio"].to_numpy(np.int64),
                }
            ),
            pd.DataFrame(
                {
                    "tid": sched_switch["next_tid"].to_numpy(np.int64),
                    "t_ns": sched_switch["t_ns"].to_numpy(np.int64),
                    "prio": sched_switch["next_prio"].to_numpy(np.int64),
                }
            ),
        ],
        ignore_index=True,
    ).sort_values("t_ns", kind="stable")
    seen = seen.rename(columns={"tid": "waker_tid", "t_ns": "prio_seen_ns", "prio": "waker_prio"})
    woken = woken.sort_values("waking_ns", kind="stable")
    woken = pd.merge_asof(
        woken, seen, left_on="waking_ns", right_on="prio_seen_ns", by="waker_tid", direction="backward"
    )
    # A waker never seen before the wake-up: take its first sighting after (priorities rarely change).
    missing = woken["waker_prio"].isna()
    if missing.any():
        later = pd.merge_asof(
            woken.loc[missing, ["waking_ns", "waker_tid"]].reset_index(),
            seen,
            left_on="waking_ns",
            right_on="prio_seen_ns",
            by="waker_tid",
            direction="forward",
        ).set_index("index")
        woken.loc[missing, "waker_prio"] = later["waker_prio"]
    woken["waker_prio"] = pd.array(woken["waker_prio"], dtype="Int64")
    woken["waker_class"] = _prio_class(woken["waker_prio"])
    woken["wakee_class"] = _prio_class(woken["prio"])
    for col in ("waker_policy", "waker_nice", "waker_rtprio"):
        woken[col] = pd.array([pd.NA] * len(woken), dtype="Int64")
    if samples is not None and not samples.empty and {"tid", "t_ns", "policy"} <= set(samples.columns):
        s = samples[["tid", "t_ns", "policy", "nice", "rtprio"]].copy()
        s = s.rename(
            columns={
                "tid": "waker_tid",
                "t_ns": "sample_ns",
                "policy": "s_policy",
                "nice": "s_nice",
                "rtprio": "s_rtprio",
            }
        )
        s["waker_tid"] = s["waker_tid"].astype(np.int64)
        s["sample_ns"] = s["sample_ns"].astype(np.int64)
        s = s.sort_values("sample_ns", kind="stable")
        woken = pd.merge_asof(woken, s, left_on="waking_ns", right_on="sample_ns", by="waker_tid", direction="nearest")
        woken["waker_policy"] = pd.array(woken["s_policy"], dtype="Int64")
        woken["waker_nice"] = pd.array(woken["s_nice"], dtype="Int64")
        woken["waker_rtprio"] = pd.array(woken["s_rtprio"], dtype="Int64")
        woken = woken.drop(columns=["sample_ns", "s_policy", "s_nice", "s_rtprio"])
    from_task = woken["waker_context"].astype(str) == "task"
    lower = (
        (woken["wakee_class"] == "RT")
        & woken["waker_prio"].notna()
        & (woken["waker_prio"].fillna(-1) > woken["prio"])
        & from_task
    )
    woken["waker_lower_priority"] = lower.astype(bool)
    return woken.drop(columns=["prio_seen_ns"]).sort_values(["start_ns", "tid"], kind="stable").reset_index(drop=True)


def summarize_threads(off_cpu: pd.DataFrame, on_cpu: pd.DataFrame) -> pd.DataFrame:
    """Per thread: ns on CPU, ns off CPU by state class, ns waiting on a run queue, and the longest of each."""
    if on_cpu.empty and off_cpu.empty:
        return pd.DataFrame(columns=["tid", "pid", "comm", "run_ns", "runqueue_ns", "max_runqueue_ns"])
    run = on_cpu.groupby("tid").agg(
        pid=("pid", "first"), comm=("comm", "last"), run_ns=("duration_ns", "sum"), max_run_ns=("duration_ns", "max")
    )
    by_state = off_cpu.pivot_table(
        index="tid", columns="state_class", values="duration_ns", aggfunc="sum", fill_value=0
    )
    by_state.columns = [f"off_{c}_ns" for c in by_state.columns]
    rq = off_cpu.groupby("tid").agg(runqueue_ns=("runqueue_ns", "sum"), max_runqueue_ns=("runqueue_ns", "max"))
    return run.join(by_state, how="outer").join(rq, how="outer").reset_index()


TASKSTATS_DELAY_PAIRS = ("cpu", "blkio", "swapin", "freepages", "thrashing", "compact", "wpcopy", "irq")


def taskstats_deltas(taskstats: pd.DataFrame) -> pd.DataFrame:
    """Per-thread increments of the taskstats delay totals between consecutive queries.

    Columns: tid t_ns prev_t_ns, and for each delay kind K: K_delay_ns and K_count (increments since
    the previous query of the same thread; null where unknown), plus `glitch`: True where an increment
    was impossible and was set to null.

    Impossible: an increment larger than the thread's age (taskstats ac_etime, column age_us). Seen on
    6.18 with delay accounting turned on: blkio_delay_total jumps by about the uptime at once
    (kernel/delayacct.c delayacct_end() subtracts a blkio_start that was never set, i.e. 0, from
    local_clock(): a wake-up that races ahead of the block in try_to_wake_up(); DESIGN.md notes the same
    jump in stat field 42). A thread cannot have waited longer than it has existed. An increment may
    legitimately exceed the time between two queries: a delay is added when it ends.

    Smaller over-counts would pass through (a stale start from an earlier wait: one CI run counted
    2.38 ms of blkio for 1.38 ms of D sleep seen by sched_switch). Consumers clip io to the D time
    (exact_stalls) rather than trust blkio as a duration.
    """
    columns = ["tid", "t_ns", "prev_t_ns", "glitch"]
    kinds = [k for k in TASKSTATS_DELAY_PAIRS if f"{k}_delay_ns" in taskstats.columns]
    for k in kinds:
        columns += [f"{k}_delay_ns", f"{k}_count"]
    if taskstats.empty:
        return pd.DataFrame(columns=columns)
    ts = taskstats.sort_values(["tid", "t_ns"], kind="stable")
    grouped = ts.groupby("tid", sort=False)
    out = pd.DataFrame(
        {"tid": ts["tid"].to_numpy(), "t_ns": ts["t_ns"].to_numpy(), "prev_t_ns": grouped["t_ns"].shift(1).to_numpy()}
    )
    age_ns = (
        pd.to_numeric(ts["age_us"], errors="coerce").astype("Float64").to_numpy(dtype=float, na_value=np.nan) * 1000.0
        if "age_us" in ts
        else None
    )
    glitch = np.zeros(len(ts), dtype=bool)
    for k in kinds:
        for col, src in ((f"{k}_delay_ns", f"{k}_delay_ns"), (f"{k}_count", f"{k}_count")):
            values = pd.to_numeric(ts[src], errors="coerce").astype("Float64")
            delta = (values - grouped[src].shift(1).astype("Float64")).to_numpy(dtype=float, na_value=np.nan)
            if col.endswith("_delay_ns") and age_ns is not None:
                bad = (delta > age_ns) | (delta < 0)
                glitch |= np.nan_to_num(bad, nan=False).astype(bool)
                delta = np.where(bad, np.nan, delta)
            out[col] = pd.array(np.where(np.isnan(delta), None, delta), dtype="Int64")
    out["glitch"] = glitch
    out = out[out["prev_t_ns"].notna()].copy()
    out["prev_t_ns"] = out["prev_t_ns"].astype(np.int64)
    return out[columns].reset_index(drop=True)
