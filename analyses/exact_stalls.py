"""Stall episodes from the exact sources: eBPF switch, wake-up, fault and block events, taskstats delays.

Where the capture holds the eBPF `sched_switch`/`sched_wakeup` tables (catch-load --ebpf), a watched
thread's time is not sampled every 2 ms but known edge by edge (analyses.exact): when it went on and off
a CPU, the state it left in, when it was woken and by whom. Its stall episodes are built from that
timeline, with exact starts and ends; /proc decides only where the timeline has holes (see stalls.py).

1. Segments. Each watched thread's timeline is cut into segments that tile it, each with a cause:
   - on CPU: `run`; or `fault` for a fault storm inside it: page_fault_user events (ebpf page_faults)
     at least `fault_rate_per_ms` per ms, clustered (a pause longer than FAULT_GAP_NS ends a cluster).
     The storm segment runs from its first to its last fault, so the callback's own work around it
     stays `run`.
   - off CPU, left in R or R+ (preempted, runnable; a thread preempted in user space reports plain R):
     `runqueue` for the whole interval, with the task that took the CPU (the switch-out's next).
   - off CPU, left in S or D: asleep from the switch-out to the wake-up (sched_wakeup; sched_waking when
     the wakeup event is missing), then `runqueue` until the switch-in (wake-up latency), with the task
     that had the CPU (the switch-in's prev). Asleep in D: `io` (refined per episode, rule 3).
     Asleep in S: `lock` when it is a wait for another task, else `idle` (rule 2). Other letters:
     `unknown`.
   - a hole in the switch record (exact.timeline_gaps: the kernel emitted no sched_switch, or events
     were lost): `gap`. No interval is built across it; the time is unknown.
2. Which S sleeps are lock waits. A thread asleep in S waits for a futex, a pipe, a condition, a timer:
   its normal sleep between callbacks looks the same as a lock wait. What tells them apart is what ended
   it. Per thread, its *usual wakers* are the most frequent end of its S sleeps and any that ends at
   least one in five of them (a client woken by either of two upstream clients): a task (by tid) when a
   task woke it, else the kind of interrupt (hrtimer, softirq, hardirq: waker_context; the task an
   interrupt happened to interrupt is not a waker). For a periodic thread, an S sleep is a `lock` wait
   when a task woke it that is not a usual waker (the lab's callback sleeps on a timer; its futex wait
   is ended by lab-holder's futex_wake), or when a usual waker that is a task ended it after more than
   1.25 periods (it missed a wake-up: it waited for that task). A sleep ended by an interrupt is the
   thread's own (a timer it set, a device): `idle`. For a thread that is not periodic, every S sleep
   is `idle`: a worker waiting for work and a thread waiting for a lock look alike (a limit; /proc has
   the same one). Limits: a lock held by the thread's usual waker reads as idle unless it makes the
   thread miss a wake-up; a sleep the callback asked for itself (usleep in a callback) reads as idle.
3. Episodes. Consecutive segments of a thread without an `idle` or `gap` between them are one busy span
   (a callback and whatever held it up). Its *core* runs from its first to its last significant
   segment: a `run` at least `long_run_ns` (half the period of a periodic thread, two sampling
   intervals otherwise: the same bar as the /proc rules; or any run of a span whose runs add up to it
   and that has no other significant segment),
   or any other cause at least MINOR_NS (0.1 ms:
   wake-up latency here is 2-30 us, measured), or any D wait of a span whose D waits add up to the run's
   bar (back-to-back requests to a fast disk: 40-60 us each). The callback's ordinary work around a stall is trimmed
   off; what lies inside the core counts. Components (ns per cause) are summed over the core's segments;
   then, per episode, from the counters that bracket it (the last read at or before its start, the
   first at or after its end):
   - D time is `io` when nothing says otherwise. With delay accounting (taskstats blkio_delay_ns known for
     the thread), io is the part of the D time covered by blkio delay (accounted by the kernel from the
     switch-out to the wake-up of a task waiting in io_schedule(): __schedule() and try_to_wake_up() in
     kernel/sched/core.c; BLKIO_SLACK_PER_WAIT_NS allows for the few us between those points and the
     tracepoints); the rest is `unknown` (uninterruptible but not block IO:
     a kernel mutex, a journal commit (ext4 fsync waits for jbd2 in D), NFS or FUSE). Block requests the
     thread issued (ebpf block_rq) are shown as evidence; their absence proves nothing (a request may be
     issued by a kworker or a device-mapper thread).
   - major faults (/proc majflt rose): the D time is the kernel reading pages in: `fault`.
   - reclaim: taskstats freepages + thrashing + compact delays, taken out of fault, then run, then io.
   The verdict is the largest component. Rule 4 of stalls.py (report what exceeds the thread's normal
   busy time by min_stall) applies to these episodes as to the /proc ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analyses import evidence, exact
from analyses import rules as R
from analyses.rules import (
    BLKIO_SLACK_PER_WAIT_NS,
    BRACKET_TOLERANCE_NS,
    CAUSES,
    FAULT_GAP_NS,
    LOCK_OVERSLEEP,
    MINOR_NS,
    USUAL_WAKER_SHARE,
)
from capture.format import Capture

# np.where(cond, x, NONE_OBJECT): an object array with None where not cond (numpy's stubs refuse a bare None).
NONE_OBJECT = np.array(None, dtype=object)

SEGMENT_COLUMNS = [
    "tid", "start_ns", "end_ns", "cause", "state", "cpu", "faults", "off_index",
    "waker_tid", "waker_comm", "waker_context", "other_tid", "other_comm", "other_prio",
]  # fmt: skip
TASKSTATS_BRACKET = {
    "blkio_delay_ns": "ts_blkio_ns",
    "freepages_delay_ns": "ts_freepages_ns",
    "thrashing_delay_ns": "ts_thrashing_ns",
    "compact_delay_ns": "ts_compact_ns",
    "cpu_delay_ns": "ts_cpu_delay_ns",
}
SCHED_KINDS = ("sched_switch", "sched_waking", "sched_wakeup", "sched_wakeup_new")


@dataclass
class ExactData:
    """The eBPF and taskstats tables of a capture, reduced to what the episode rules need (loaded once)."""

    on_cpu: pd.DataFrame
    off_cpu: pd.DataFrame  # exact.off_cpu_intervals + the switch partners (exact.switch_partners)
    gaps: pd.DataFrame
    sched_switch: pd.DataFrame
    faults: pd.DataFrame  # tid t_ns of page_fault_user events (empty when not recorded)
    block_issues: pd.DataFrame  # tid t_ns of block_rq "issue" events (empty when not recorded)
    taskstats: pd.DataFrame | None  # cumulative delays per (tid, t_ns), implausible jumps taken out
    has_faults: bool
    has_block: bool
    lost: dict[str, int] = field(default_factory=dict)
    span: pd.DataFrame = field(default_factory=pd.DataFrame)  # tid first_ns last_ns: where edges exist

    @property
    def sched_lost(self) -> int:
        return int(sum(v for k, v in self.lost.items() if k in SCHED_KINDS))


def _families(cap: Capture) -> Mapping[str, Any]:
    return ((cap.meta.get("ebpf") or {}).get("families")) or {}


def load_exact(cap: Capture) -> ExactData | None:
    """The exact tables of `cap`, or None when it has no eBPF switch record (then /proc decides alone)."""
    if "sched_switch" not in cap.table_names:
        return None
    sw = cap.table("sched_switch")
    if sw.empty:
        return None
    wk = cap.table("sched_wakeup") if "sched_wakeup" in cap.table_names else None
    pids = exact.target_pids_of(sw, wk)
    on = exact.cpu_intervals(sw, pids)
    off = exact.switch_partners(exact.off_cpu_intervals(sw, wk, pids), sw)
    gaps = exact.timeline_gaps(sw, pids)
    families = _families(cap)
    faults = _points(cap, "page_faults")
    issues = _points(cap, "block_rq", kind="issue")
    has_faults = bool(families.get("WITH_FAULTS")) or len(faults) > 0
    has_block = bool(families.get("WITH_BLOCK")) or len(issues) > 0
    edges = pd.concat(
        [
            pd.DataFrame({"tid": on["tid"], "t": on["start_ns"]}),
            pd.DataFrame({"tid": on["tid"], "t": on["end_ns"]}),
            pd.DataFrame({"tid": off["tid"], "t": off["end_ns"]}),
        ],
        ignore_index=True,
    )
    span = edges.groupby("tid")["t"].agg(first_ns="min", last_ns="max").reset_index()
    stats = (cap.trailer or {}).get("ebpf") or {}
    lost = {str(k): int(v) for k, v in (stats.get("lost") or {}).items()}
    # Events the kernel never ran a probe for (bpf_prog_active: another probe was running on that CPU),
    # keyed "sched:sched_switch": as lost for the intervals.
    for name, count in (stats.get("missed") or {}).items():
        kind = str(name).split(":")[-1]
        lost[kind] = lost.get(kind, 0) + int(count)
    return ExactData(
        on_cpu=on,
        off_cpu=off,
        gaps=gaps,
        sched_switch=sw,
        faults=faults,
        block_issues=issues,
        taskstats=taskstats_cumulative(cap.table("taskstats")) if "taskstats" in cap.table_names else None,
        has_faults=has_faults,
        has_block=has_block,
        lost=lost,
        span=span,
    )


def _points(cap: Capture, table: str, kind: str | None = None) -> pd.DataFrame:
    """tid t_ns of a per-thread event table, sorted by time (empty frame when the capture lacks it)."""
    empty = pd.DataFrame({"tid": np.zeros(0, np.int64), "t_ns": np.zeros(0, np.int64)})
    if table not in cap.table_names:
        return empty
    columns = ["t_ns", "tid"] + (["kind"] if kind is not None else [])
    frame = cap.table(table, columns=columns)
    if kind is not None:
        frame = frame[frame["kind"].astype(str) == kind]
    tid = pd.to_numeric(frame["tid"], errors="coerce")
    frame = frame[tid.notna().to_numpy()]
    out = pd.DataFrame({"tid": frame["tid"].to_numpy(np.int64), "t_ns": frame["t_ns"].to_numpy(np.int64)})
    return out.sort_values("t_ns", kind="stable").reset_index(drop=True)


def taskstats_cumulative(taskstats: pd.DataFrame) -> pd.DataFrame | None:
    """Per (tid, t_ns): running totals of the delays rebuilt from exact.taskstats_deltas (implausible
    increments, e.g. blkio jumping by about the uptime, contribute nothing) and, per delay, a running
    count of such glitches and of unknown values, so that a bracket across one of them is unknown."""
    if taskstats is None or taskstats.empty:
        return None
    deltas = exact.taskstats_deltas(taskstats)
    first = taskstats.sort_values(["tid", "t_ns"], kind="stable").groupby("tid", sort=False).head(1)
    out = {"tid": first["tid"].to_numpy(np.int64), "t_ns": first["t_ns"].to_numpy(np.int64)}
    base = pd.DataFrame(out)
    rest = pd.DataFrame({"tid": deltas["tid"].to_numpy(np.int64), "t_ns": deltas["t_ns"].to_numpy(np.int64)})
    for column in TASKSTATS_BRACKET:
        if column not in taskstats:
            continue
        start = pd.to_numeric(first[column], errors="coerce").astype("Float64")
        base[column] = start.fillna(0).to_numpy(dtype=float)
        base[f"{column}_bad"] = start.isna().to_numpy(dtype=np.int64)
        step = deltas[column].astype("Float64") if column in deltas else pd.Series(np.nan, index=deltas.index)
        rest[column] = step.fillna(0).to_numpy(dtype=float)
        rest[f"{column}_bad"] = step.isna().to_numpy(dtype=np.int64)
    frame = pd.concat([base, rest], ignore_index=True).sort_values(["tid", "t_ns"], kind="stable")
    value_columns = [c for c in frame.columns if c not in ("tid", "t_ns")]
    frame[value_columns] = frame.groupby("tid", sort=False)[value_columns].cumsum()
    return frame.reset_index(drop=True)


def bracket(
    episodes: pd.DataFrame, table: pd.DataFrame, columns: Mapping[str, str], *, tolerance_ns: int
) -> pd.DataFrame:
    """Per episode (tid start_ns end_ns), the growth of cumulative `columns` of `table` (tid t_ns ...)
    from its last row at or before start_ns to its first row at or after end_ns; null where either read
    is missing (or further than tolerance_ns away) or where a `{column}_bad` count grew in between."""
    out = pd.DataFrame(index=episodes.index)
    if episodes.empty or table is None or table.empty:
        for name in columns.values():
            out[name] = pd.array([pd.NA] * len(episodes), dtype="Int64")
        return out
    keys = episodes[["tid", "start_ns", "end_ns"]].astype(np.int64).reset_index(names="_row")
    right = table.astype({"tid": np.int64, "t_ns": np.int64}).sort_values("t_ns", kind="stable")
    before = pd.merge_asof(
        keys.sort_values("start_ns", kind="stable"),
        right,
        left_on="start_ns",
        right_on="t_ns",
        by="tid",
        direction="backward",
        tolerance=tolerance_ns,
    ).set_index("_row")
    after = pd.merge_asof(
        keys.sort_values("end_ns", kind="stable"),
        right,
        left_on="end_ns",
        right_on="t_ns",
        by="tid",
        direction="forward",
        tolerance=tolerance_ns,
    ).set_index("_row")
    before, after = before.reindex(keys["_row"]), after.reindex(keys["_row"])
    for source, name in columns.items():
        if source not in right:
            out[name] = pd.array([pd.NA] * len(episodes), dtype="Int64")
            continue
        grew = after[source].to_numpy(dtype=float) - before[source].to_numpy(dtype=float)
        bad_col = f"{source}_bad"
        if bad_col in right:
            bad = after[bad_col].to_numpy(dtype=float) - before[bad_col].to_numpy(dtype=float)
            grew = np.where(bad > 0, np.nan, grew)
        grew = np.where(grew < 0, np.nan, grew)
        out[name] = pd.array(np.where(np.isnan(grew), NONE_OBJECT, np.rint(grew)), dtype="Int64")
    return out


def count_between(episodes: pd.DataFrame, points: pd.DataFrame) -> np.ndarray:
    """Per episode, how many of the thread's points (tid t_ns) fall in [start_ns, end_ns]."""
    if episodes.empty or points.empty:
        return np.zeros(len(episodes), dtype=np.int64)
    counts = np.zeros(len(episodes), dtype=np.int64)
    by_tid = points.groupby("tid")["t_ns"]
    tids = episodes["tid"].to_numpy(np.int64)
    for tid in np.unique(tids):  # one loop per thread, not per event
        if tid not in by_tid.groups:
            continue
        t = np.sort(by_tid.get_group(tid).to_numpy(np.int64))
        rows = np.flatnonzero(tids == tid)
        lo = np.searchsorted(t, episodes["start_ns"].to_numpy(np.int64)[rows], side="left")
        hi = np.searchsorted(t, episodes["end_ns"].to_numpy(np.int64)[rows], side="right")
        counts[rows] = hi - lo
    return counts


# --------------------------------------------------------------------------------------------------
# Rule 1-2: segments


def _fault_segments(on: pd.DataFrame, faults: pd.DataFrame, rate_per_ms: float) -> pd.DataFrame:
    """On-CPU intervals cut into `run` and `fault` segments (rule 1)."""
    iv = on.reset_index(drop=True).assign(iv=lambda f: np.arange(len(f)))
    base = pd.DataFrame(
        {
            "tid": iv["tid"].to_numpy(np.int64),
            "start_ns": iv["start_ns"].to_numpy(np.int64),
            "end_ns": iv["end_ns"].to_numpy(np.int64),
            "cause": "run",
            "state": "",
            "cpu": iv["cpu"].to_numpy(np.int64),
            "faults": np.zeros(len(iv), dtype=np.int64),
        }
    )
    if faults.empty or iv.empty:
        return base
    f = faults[faults["tid"].isin(iv["tid"].unique())].sort_values("t_ns", kind="stable")
    if f.empty:
        return base
    placed = pd.merge_asof(
        f,
        iv[["tid", "start_ns", "end_ns", "iv"]].sort_values("start_ns", kind="stable"),
        left_on="t_ns",
        right_on="start_ns",
        by="tid",
        direction="backward",
    )
    placed = placed[placed["iv"].notna() & (placed["t_ns"] <= placed["end_ns"])]
    if placed.empty:
        return base
    placed = placed.astype({"iv": np.int64}).sort_values(["iv", "t_ns"], kind="stable")
    t = placed["t_ns"].to_numpy(np.int64)
    ivs = placed["iv"].to_numpy(np.int64)
    new = np.r_[True, (ivs[1:] != ivs[:-1]) | (np.diff(t) > FAULT_GAP_NS)]
    clusters = (
        pd.DataFrame({"iv": ivs, "t": t, "cluster": np.cumsum(new)})
        .groupby("cluster")
        .agg(iv=("iv", "first"), first=("t", "min"), last=("t", "max"), n=("t", "size"))
    )
    span = np.maximum(clusters["last"] - clusters["first"], 1)
    storm = (clusters["n"] >= 2) & (clusters["n"] * 1_000_000 >= rate_per_ms * span)
    storms = clusters[storm.to_numpy()].sort_values(["iv", "first"]).reset_index(drop=True)
    if storms.empty:
        return base
    starts = iv["start_ns"].to_numpy(np.int64)
    ends = iv["end_ns"].to_numpy(np.int64)
    s_iv = storms["iv"].to_numpy(np.int64)
    s_first = storms["first"].to_numpy(np.int64)
    s_last = storms["last"].to_numpy(np.int64)
    prev_same = np.r_[False, s_iv[1:] == s_iv[:-1]]
    run_from = np.where(prev_same, np.r_[0, s_last[:-1]], starts[s_iv])
    last_of_iv = np.r_[s_iv[1:] != s_iv[:-1], True]

    def rows(tids: np.ndarray, lo: np.ndarray, hi: np.ndarray, cause: str, cpus: np.ndarray, n: np.ndarray):
        return pd.DataFrame(
            {"tid": tids, "start_ns": lo, "end_ns": hi, "cause": cause, "state": "", "cpu": cpus, "faults": n}
        )

    tid_of = iv["tid"].to_numpy(np.int64)
    cpu_of = iv["cpu"].to_numpy(np.int64)
    zero = np.zeros(len(storms), dtype=np.int64)
    pieces = [
        base[~np.isin(np.arange(len(iv)), s_iv)],  # intervals without a storm stay whole
        rows(tid_of[s_iv], run_from, s_first, "run", cpu_of[s_iv], zero),
        rows(tid_of[s_iv], s_first, s_last, "fault", cpu_of[s_iv], storms["n"].to_numpy(np.int64)),
        rows(
            tid_of[s_iv[last_of_iv]], s_last[last_of_iv], ends[s_iv[last_of_iv]], "run", cpu_of[s_iv[last_of_iv]],
            zero[last_of_iv],
        ),
    ]  # fmt: skip
    out = pd.concat(pieces, ignore_index=True)
    return out[out["end_ns"] > out["start_ns"]]


def _usual_waker_key(tid: np.ndarray, context: np.ndarray, waker_tid: np.ndarray) -> np.ndarray:
    """ "task:TID" for a wake-up by a task, else the interrupt kind (rule 2)."""
    ctx = pd.Series(context, dtype=object).fillna("?").astype(str).to_numpy().astype(object)
    who = pd.Series(waker_tid, dtype="float64").fillna(-1).astype(np.int64).astype(str).to_numpy().astype(object)
    return np.where(ctx == "task", "task:" + who, ctx)


def _off_segments(off: pd.DataFrame, periods: pd.Series) -> pd.DataFrame:
    """Off-CPU intervals cut into the asleep part and the runnable part (rules 1-2)."""
    if off.empty:
        return pd.DataFrame(columns=SEGMENT_COLUMNS)
    off = off.reset_index(names="off_index")
    state = off["state"].astype(str).to_numpy()
    runnable = off["state"].astype(str).str.startswith("R").to_numpy(dtype=bool)
    start = off["start_ns"].to_numpy(np.int64)
    end = off["end_ns"].to_numpy(np.int64)
    ready = off["ready_ns"].astype("Int64").to_numpy(dtype="float64", na_value=np.nan)
    known_ready = ~np.isnan(ready)
    asleep_end = np.where(runnable, start, np.where(known_ready, ready, end)).astype(np.int64)
    context = off["waker_context"].astype(object).to_numpy()
    waker = off["waker_tid"].astype("Int64")
    tid = off["tid"].to_numpy(np.int64)
    key = _usual_waker_key(tid, context, waker.to_numpy(dtype="float64", na_value=np.nan))
    sleep_s = (state == "S") & waker.notna().to_numpy()
    counted = pd.DataFrame({"tid": tid[sleep_s], "key": key[sleep_s]})
    shares = counted.groupby(["tid", "key"]).size().rename("n").reset_index()
    shares["share"] = shares["n"] / shares.groupby("tid")["n"].transform("sum")
    shares["top"] = shares["n"] == shares.groupby("tid")["n"].transform("max")
    usual_pairs = shares[(shares["share"] >= USUAL_WAKER_SHARE) | shares["top"]]
    pairs = pd.MultiIndex.from_arrays([usual_pairs["tid"].to_numpy(), usual_pairs["key"].to_numpy()])
    usual = pd.MultiIndex.from_arrays([tid, key]).isin(pairs)
    period = periods.reindex(tid).to_numpy(dtype=float)
    by_task = (pd.Series(context, dtype=object).astype(str).to_numpy() == "task") & waker.notna().to_numpy()
    asleep = asleep_end - start
    unusual = by_task & ~usual
    limit = R.period_limit_ns(period, (LOCK_OVERSLEEP - 1.0) * period)
    overslept = by_task & usual & (asleep > np.nan_to_num(limit, nan=np.inf))
    lock = (state == "S") & ~np.isnan(period) & (unusual | overslept)
    cause = np.where(state == "D", "io", np.where(state == "S", np.where(lock, "lock", "idle"), "unknown")).astype(
        object
    )
    common = {
        "tid": tid,
        "state": state,
        "off_index": off["off_index"].to_numpy(np.int64),
    }
    asleep_rows = pd.DataFrame(
        {
            **common,
            "start_ns": start,
            "end_ns": asleep_end,
            "cause": cause,
            "cpu": off["cpu_out"].to_numpy(np.int64),
            "waker_tid": waker.to_numpy(),
            "waker_comm": off["waker_comm"].astype(object).to_numpy(),
            "waker_context": context,
        }
    )
    # The runnable part: all of an R/R+ interval (who took the CPU: the switch-out's next task), or from
    # the wake-up to the switch-in (who had the CPU meanwhile: the switch-in's prev task).
    rq_rows = pd.DataFrame(
        {
            **common,
            "start_ns": np.where(runnable, start, asleep_end),
            "end_ns": end,
            "cause": "runqueue",
            "cpu": off["cpu_in"].to_numpy(np.int64),
            "other_tid": np.where(runnable, off["out_next_tid"], off["in_prev_tid"]),
            "other_comm": np.where(runnable, off["out_next_comm"], off["in_prev_comm"]),
            "other_prio": np.where(runnable, off["out_next_prio"], off["in_prev_prio"]),
        }
    )
    rq_rows = rq_rows[(runnable | known_ready) & (rq_rows["end_ns"] > rq_rows["start_ns"]).to_numpy()]
    asleep_rows = asleep_rows[~runnable & (asleep_rows["end_ns"] > asleep_rows["start_ns"]).to_numpy()]
    return pd.concat([asleep_rows, rq_rows], ignore_index=True)


def thread_segments(data: ExactData, threads: pd.DataFrame, rules: Any) -> pd.DataFrame:
    """Segments (rules 1-2) of the threads in `threads` (tid period_ns onset_ns), sorted by (tid, start).

    Columns: tid start_ns end_ns cause state cpu faults off_index waker_tid waker_comm waker_context
    other_tid other_comm other_prio. Segments that end before a thread's onset (its start-up, before
    its rhythm) are left out.
    """
    tids = threads["tid"].to_numpy(np.int64)
    periods = threads.set_index("tid")["period_ns"].astype(float)
    on = data.on_cpu[data.on_cpu["tid"].isin(tids)]
    off = data.off_cpu[data.off_cpu["tid"].isin(tids)]
    gaps = data.gaps[data.gaps["tid"].isin(tids)]
    faults = data.faults if data.has_faults else data.faults.iloc[0:0]
    parts = [
        _fault_segments(on, faults, float(rules.fault_rate_per_ms)),
        _off_segments(off, periods),
        pd.DataFrame(
            {
                "tid": gaps["tid"].to_numpy(np.int64),
                "start_ns": gaps["start_ns"].to_numpy(np.int64),
                "end_ns": gaps["end_ns"].to_numpy(np.int64),
                "cause": "gap",
                "state": "",
            }
        ),
    ]
    segments = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else None
    if segments is None:
        return pd.DataFrame(columns=SEGMENT_COLUMNS)
    for column in SEGMENT_COLUMNS:
        if column not in segments:
            segments[column] = pd.NA
    segments = segments[SEGMENT_COLUMNS]
    segments["faults"] = segments["faults"].fillna(0).astype(np.int64)
    segments["cpu"] = segments["cpu"].astype("Int64")
    onset = threads.set_index("tid")["onset_ns"].reindex(segments["tid"]).to_numpy(dtype=float)
    segments = segments[~(segments["end_ns"].to_numpy(dtype=float) <= np.nan_to_num(onset, nan=-np.inf))]
    return segments.sort_values(["tid", "start_ns", "end_ns"], kind="stable").reset_index(drop=True)


# --------------------------------------------------------------------------------------------------
# Rule 3: episodes


def episodes_from_segments(segments: pd.DataFrame, long_run_ns: pd.Series) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(episodes, their segments): busy spans trimmed to their core (rule 3), raw components per cause.

    Episode columns: episode tid start_ns end_ns duration_ns run_ns fault_ns runqueue_ns d_ns lock_ns
    unknown_ns page_faults d_waits lock_waits cpus near_gap.
    """
    if segments.empty:
        return pd.DataFrame(), segments
    seg = segments.reset_index(drop=True)
    tid = seg["tid"].to_numpy(np.int64)
    start = seg["start_ns"].to_numpy(np.int64)
    end = seg["end_ns"].to_numpy(np.int64)
    cause = seg["cause"].astype(str).to_numpy()
    separator = np.isin(cause, ("idle", "gap"))
    new_thread = np.r_[True, tid[1:] != tid[:-1]]
    contiguous = ~new_thread & np.r_[False, start[1:] == end[:-1]]
    begins = ~separator & (~contiguous | np.r_[True, separator[:-1]])
    busy = np.where(separator, -1, np.cumsum(begins) - 1)
    duration = end - start
    long_run = long_run_ns.reindex(tid).to_numpy(dtype=float)
    # A run is significant alone, or when the runs of a busy span with nothing else significant add up
    # to the bar: a thread issuing back-to-back requests that complete in tens of us (a fast virtual
    # disk) is on CPU in short slices.
    span_run = pd.Series(np.where(cause == "run", duration, 0)).groupby(busy).transform("sum").to_numpy()
    other = pd.Series(~separator & (cause != "run") & (duration >= MINOR_NS)).groupby(busy).transform("max")
    run_long = (duration >= long_run) | ((span_run >= long_run) & ~other.to_numpy(dtype=bool))
    # Likewise the D waits of a span that add up to the bar: a 20 ms O_DIRECT read on a disk that answers
    # in tens of us is 40-60 us D waits between 20 us runs (a PipeWire client's read, measured here): the
    # one or two waits of 0.1 ms and more made a core of under a millisecond and no episode of the read.
    span_io = pd.Series(np.where(cause == "io", duration, 0)).groupby(busy).transform("sum").to_numpy()
    io_adds_up = (cause == "io") & (span_io >= long_run)
    significant = ~separator & np.where(cause == "run", run_long, (duration >= MINOR_NS) | io_adds_up)
    position = np.arange(len(seg))
    frame = pd.DataFrame({"busy": busy, "pos": np.where(significant, position, np.nan)})
    grouped = frame[busy >= 0].groupby("busy")["pos"]
    first = grouped.min().reindex(busy).to_numpy()
    last = grouped.max().reindex(busy).to_numpy()
    core = (busy >= 0) & ~np.isnan(first) & (position >= np.nan_to_num(first, nan=np.inf)) & (position <= last)
    # A gap right before or after a busy span: the thread's state next to it is unknown.
    gap_before = np.r_[False, (cause[:-1] == "gap") & ~new_thread[1:]]
    gap_after = np.r_[(cause[1:] == "gap") & ~new_thread[1:], False]
    near_gap = pd.Series(gap_before | gap_after).groupby(busy).transform("max").to_numpy(dtype=bool)
    # A short run between two D waits of one thread is the CPU that took in one request and issued the next
    # (R.issues_block_io): counted apart from the run, and given to the waits' cause (finish_episodes).
    prev1 = np.concatenate([[""], cause[:-1]]).astype(object)
    prev2 = np.concatenate([["", ""], cause[:-2]])[: len(cause)].astype(object)
    same1 = ~new_thread
    same2 = same1 & np.concatenate([[False], same1[:-1]])
    # The wait before the run: the segment before it, or the one before that across the wake-up latency.
    after_d_wait = np.where(prev1 == "runqueue", (prev2 == "io") & same2, (prev1 == "io") & same1)
    before_d_wait = np.concatenate([(cause[1:] == "io") & ~new_thread[1:], [False]])
    issuing = R.issues_block_io(cause == "run", duration, after_d_wait, before_d_wait)
    seg = seg.assign(episode=busy, duration_ns=duration, near_gap=near_gap, issuing=issuing)[core].copy()
    if seg.empty:
        return pd.DataFrame(), seg
    d = seg["duration_ns"].to_numpy(np.int64)
    c = seg["cause"].astype(str).to_numpy()
    issue = seg["issuing"].to_numpy(dtype=bool)
    parts = pd.DataFrame(
        {
            "episode": seg["episode"].to_numpy(),
            "tid": seg["tid"].to_numpy(np.int64),
            "start_ns": seg["start_ns"].to_numpy(np.int64),
            "end_ns": seg["end_ns"].to_numpy(np.int64),
            "run_ns": np.where((c == "run") & ~issue, d, 0),
            "issue_ns": np.where(issue, d, 0),
            "fault_ns": np.where(c == "fault", d, 0),
            "runqueue_ns": np.where(c == "runqueue", d, 0),
            "d_ns": np.where(c == "io", d, 0),
            "lock_ns": np.where(c == "lock", d, 0),
            "unknown_ns": np.where(c == "unknown", d, 0),
            "page_faults": seg["faults"].to_numpy(np.int64),
            "d_waits": (c == "io").astype(np.int64),
            "lock_waits": (c == "lock").astype(np.int64),
            "preempted": ((c == "runqueue") & seg["state"].astype(str).str.startswith("R").to_numpy()).astype(np.int64),
            "near_gap": seg["near_gap"].to_numpy(dtype=bool),
        }
    )
    episodes = parts.groupby("episode", sort=True).agg(
        tid=("tid", "first"),
        start_ns=("start_ns", "min"),
        end_ns=("end_ns", "max"),
        run_ns=("run_ns", "sum"),
        issue_ns=("issue_ns", "sum"),
        fault_ns=("fault_ns", "sum"),
        runqueue_ns=("runqueue_ns", "sum"),
        d_ns=("d_ns", "sum"),
        lock_ns=("lock_ns", "sum"),
        unknown_ns=("unknown_ns", "sum"),
        page_faults=("page_faults", "sum"),
        d_waits=("d_waits", "sum"),
        lock_waits=("lock_waits", "sum"),
        preemptions=("preempted", "sum"),
        near_gap=("near_gap", "max"),
    )
    cpus = seg.dropna(subset=["cpu"]).groupby("episode")["cpu"].agg(lambda s: sorted({int(v) for v in s.tolist()}))
    episodes["cpu_list"] = cpus.reindex(episodes.index)
    episodes["duration_ns"] = episodes["end_ns"] - episodes["start_ns"]
    return episodes.reset_index(), seg


def longest_of(seg: pd.DataFrame, cause: str, columns: list[str]) -> pd.DataFrame:
    """Per episode, the columns of its longest segment of `cause` (indexed by episode)."""
    mine = seg[seg["cause"].astype(str) == cause]
    if mine.empty:
        return pd.DataFrame(columns=columns)
    pick = mine.groupby("episode")["duration_ns"].idxmax()
    return mine.loc[pick.to_numpy(), ["episode", *columns]].set_index("episode")


# --------------------------------------------------------------------------------------------------
# Rule 3, per episode: counters that bracket it, the verdict, who woke it or ran instead, the evidence


def _task_policies(cap: Capture, tids: np.ndarray) -> pd.DataFrame:
    """/proc policy, rtprio and nice of the given threads over time (those that were recorded)."""
    from analyses.source import load_samples

    if len(tids) == 0:
        return pd.DataFrame(columns=["tid", "t_ns", "policy", "nice", "rtprio"])
    return load_samples(cap, ["policy", "rtprio", "nice"], tids=sorted({int(t) for t in tids}))


def _policy_near(policies: pd.DataFrame, tids: pd.Series, at: pd.Series) -> pd.DataFrame:
    """policy rtprio nice of each (tid, time) from the nearest /proc read of that thread (NA if never read)."""
    keys = pd.DataFrame({"tid": tids.astype("Int64"), "at": at.astype("Int64")}).reset_index(names="_row")
    known = keys.dropna().astype({"tid": np.int64, "at": np.int64})
    out = pd.DataFrame(index=keys["_row"], columns=["policy", "rtprio", "nice"], dtype=object)
    if known.empty or policies.empty:
        return out
    right = policies[["tid", "t_ns", "policy", "rtprio", "nice"]].astype({"tid": np.int64, "t_ns": np.int64})
    found = pd.merge_asof(
        known.sort_values("at", kind="stable"),
        right.sort_values("t_ns", kind="stable"),
        left_on="at",
        right_on="t_ns",
        by="tid",
        direction="nearest",
    ).set_index("_row")
    out.loc[found.index, ["policy", "rtprio", "nice"]] = found[["policy", "rtprio", "nice"]].to_numpy()
    return out


def uncounted_on_cpu(episodes: pd.DataFrame, on_cpu: pd.DataFrame, run_reads: pd.DataFrame) -> np.ndarray:
    """Per episode (tid start_ns end_ns), the ns the switch record shows its thread on a CPU that the
    thread's own clock did not count, between the /proc reads that bracket it (`run_reads`: tid t_ns
    run_ns, schedstat's sum_exec_runtime); 0 where no read brackets it.

    The task clock leaves out hypervisor steal and, with IRQ_TIME_ACCOUNTING, interrupt time
    (update_rq_clock_task() in kernel/sched/core.c); the switch record does not: a vCPU the host takes
    away from a running thread leaves it "on CPU" between its switches. Only on-CPU intervals that ended
    by the second read are compared: a thread still running at a read has its clock updated only at the
    last tick, which would make its own time look uncounted. A slice in progress at the first read is
    counted from that read, which its clock covers too. Both choices can only make the result smaller.
    """
    out = np.zeros(len(episodes), dtype=np.int64)
    if episodes.empty or on_cpu.empty or run_reads.empty:
        return out
    keys = episodes[["tid", "start_ns", "end_ns"]].astype(np.int64).reset_index(drop=True).reset_index(names="_row")
    right = run_reads[["tid", "t_ns", "run_ns"]].dropna().astype(np.int64).sort_values("t_ns", kind="stable")
    found = {}
    for edge, direction in (("start_ns", "backward"), ("end_ns", "forward")):
        found[edge] = (
            pd.merge_asof(
                keys.sort_values(edge, kind="stable"), right, left_on=edge, right_on="t_ns", by="tid",
                direction=direction, tolerance=BRACKET_TOLERANCE_NS,
            )
            .set_index("_row")
            .reindex(keys["_row"])
        )  # fmt: skip
    first, last = found["start_ns"], found["end_ns"]
    ok = (first["t_ns"].notna() & last["t_ns"].notna()).to_numpy()
    by_tid = {
        int(tid): (g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64))
        for tid, g in on_cpu.sort_values("end_ns", kind="stable").groupby("tid", sort=False)
    }
    for i in np.flatnonzero(ok):  # one pass per episode (tens to hundreds)
        starts_ends = by_tid.get(int(keys["tid"].iat[i]))
        if starts_ends is None:
            continue
        a, b = int(first["t_ns"].iat[i]), int(last["t_ns"].iat[i])
        counted = int(last["run_ns"].iat[i]) - int(first["run_ns"].iat[i])
        if counted < 0:  # a reused tid: not the same thread's clock
            continue
        starts, ends = starts_ends
        lo, hi = np.searchsorted(ends, a, side="right"), np.searchsorted(ends, b, side="right")
        on = int((ends[lo:hi] - np.maximum(starts[lo:hi], a)).sum())
        out[i] = max(0, on - counted)
    return out


def _cumulative_faults(windows: pd.DataFrame) -> pd.DataFrame | None:
    """Per (tid, t_ns): running minflt and majflt from the /proc windows (for brackets)."""
    if windows is None or windows.empty or "minflt" not in windows:
        return None
    frame = pd.DataFrame(
        {
            "tid": windows["tid"].to_numpy(np.int64),
            "t_ns": windows["end_ns"].to_numpy(np.int64),
            "minflt": windows["minflt"].to_numpy(np.int64),
            "majflt": windows["majflt"].to_numpy(np.int64) if "majflt" in windows else 0,
        }
    ).sort_values(["tid", "t_ns"], kind="stable")
    frame[["minflt", "majflt"]] = frame.groupby("tid", sort=False)[["minflt", "majflt"]].cumsum()
    return frame


def finish_episodes(
    raw: pd.DataFrame,
    seg: pd.DataFrame,
    data: ExactData,
    *,
    cap: Capture,
    threads: pd.DataFrame,
    windows: pd.DataFrame,
    fault_rate_per_ms: float,
) -> pd.DataFrame:
    """Episodes with components, verdict, waker / who ran instead, evidence and sources (rule 3).

    `threads`: tid pid comm period_ns why utilization policy (label); `windows`: the /proc windows of
    those threads (fault counts for brackets, core types).
    """
    ep = raw.copy()
    info = threads.set_index("tid")
    ep["pid"] = info["pid"].reindex(ep["tid"]).to_numpy()
    ep["comm"] = info["comm"].reindex(ep["tid"]).astype(object).to_numpy()
    for column in ("period_ns", "utilization"):
        ep[column] = info[column].reindex(ep["tid"]).to_numpy(dtype=float)
    ep["why"] = info["why"].reindex(ep["tid"]).astype(object).to_numpy()

    # Counters that bracket each episode: /proc fault counts, taskstats delays.
    counts = {"minflt": "minflt", "majflt": "majflt"}
    faults = bracket(ep, _cumulative_faults(windows), counts, tolerance_ns=BRACKET_TOLERANCE_NS)
    ep["minflt"] = faults["minflt"].to_numpy()
    ep["majflt"] = faults["majflt"].to_numpy()
    delays = bracket(ep, data.taskstats, TASKSTATS_BRACKET, tolerance_ns=BRACKET_TOLERANCE_NS)
    for name in TASKSTATS_BRACKET.values():
        ep[name] = delays[name].to_numpy()
    ep["block_requests"] = count_between(ep, data.block_issues) if data.has_block else pd.NA

    run = ep["run_ns"].to_numpy(np.int64).copy()
    fault = ep["fault_ns"].to_numpy(np.int64).copy()
    d_time = ep["d_ns"].to_numpy(np.int64)
    unknown = ep["unknown_ns"].to_numpy(np.int64).copy()
    major = ep["majflt"].fillna(0).to_numpy(np.int64) > 0
    # Without page-fault events, the /proc counts decide a storm as the /proc rules do (20 per ms on CPU).
    proc_storm = np.zeros(len(ep), dtype=bool)
    if not data.has_faults:
        counted = ep["minflt"].fillna(0).to_numpy(np.int64) + ep["majflt"].fillna(0).to_numpy(np.int64)
        proc_storm = R.is_fault_storm(counted, run, fault_rate_per_ms)
        fault = fault + np.where(proc_storm, run, 0)
        run = np.where(proc_storm, 0, run)
    # On-CPU time the thread's own clock did not count is the machine's (steal, interrupts), not its run:
    # `unknown` (what the machine did with it is not in the capture), named in the evidence.
    from analyses.source import load_samples

    reads = load_samples(cap, ["run_ns"], tids=sorted({int(t) for t in ep["tid"]})) if len(ep) else pd.DataFrame()
    uncounted = uncounted_on_cpu(ep, data.on_cpu, reads)
    uncounted = np.minimum(np.where(uncounted >= R.UNCOUNTED_MIN_NS, uncounted, 0), run)
    run = run - uncounted
    ep["uncounted_ns"] = uncounted
    blkio = ep["ts_blkio_ns"].astype("Int64").to_numpy(dtype="float64", na_value=np.nan)
    blkio_known = ~np.isnan(blkio)
    fault = fault + np.where(major, d_time, 0)
    covered = np.nan_to_num(blkio) + BLKIO_SLACK_PER_WAIT_NS * ep["d_waits"].to_numpy(np.int64)
    io = np.where(major, 0, np.where(blkio_known, np.minimum(d_time, covered), d_time)).astype(np.int64)
    not_block = np.where(major, 0, d_time - io)  # D time the kernel did not account as block IO
    unknown = unknown + not_block + uncounted
    # The CPU between the D waits goes where the waits went: paging in (major faults), block IO (most of
    # the D time was, or delay accounting cannot say), else it stays the thread's run.
    issue = ep["issue_ns"].to_numpy(np.int64)
    issue_to_io = ~major & (io >= not_block)
    fault = fault + np.where(major, issue, 0)
    io = io + np.where(issue_to_io, issue, 0)
    run = run + np.where(major | issue_to_io, 0, issue)
    ep["io_cpu_ns"] = np.where(issue_to_io, issue, 0)
    reclaim_parts = [ep[c].astype("Int64") for c in R.RECLAIM_COLUMNS]
    reclaim_frame = pd.concat(reclaim_parts, axis=1)
    reclaim_known = reclaim_frame.notna().any(axis=1).to_numpy()
    reclaim = reclaim_frame.fillna(0).sum(axis=1).to_numpy(np.int64)
    parts, reclaim = R.take_reclaim(reclaim, {"fault": fault, "run": run, "io": io})
    ep["run_ns"] = parts["run"]
    ep["fault_ns"] = parts["fault"]
    ep["io_ns"] = parts["io"]
    ep["unknown_ns"] = unknown
    ep["not_block_ns"] = not_block
    ep["reclaim_ns"] = pd.array(np.where(reclaim_known, reclaim, NONE_OBJECT), dtype="Int64")
    components = np.stack(
        [ep["run_ns"], ep["runqueue_ns"], ep["io_ns"], ep["fault_ns"], ep["lock_ns"], reclaim, ep["unknown_ns"]],
        axis=1,
    ).astype(np.int64)
    ep["stall_ns"], ep["verdict"], ep["share"] = R.decide(components, CAUSES)
    ep["components"] = [
        {c: (int(v) if c != "reclaim" or known else None) for c, v in zip(CAUSES, row, strict=True)}
        for row, known in zip(components.tolist(), reclaim_known.tolist(), strict=True)
    ]
    ep["idle_ns"] = 0
    ep["proc_storm"] = proc_storm
    ep["major"] = major

    # Who woke the longest lock wait, and who ran during the longest runnable wait.
    ep = ep.set_index("episode")
    lock = longest_of(seg, "lock", ["off_index"])
    runnable = longest_of(seg, "runqueue", ["other_tid", "other_comm", "other_prio", "start_ns", "cpu"])
    runnable = runnable[runnable["other_tid"].notna()] if len(runnable) else runnable
    rows = data.off_cpu.loc[lock["off_index"].to_numpy(np.int64)] if len(lock) else data.off_cpu.iloc[0:0]
    # One pass over the samples for the policies of every task named below (wakers, who ran instead, and
    # the episodes' own threads).
    others = runnable["other_tid"] if len(runnable) else pd.Series(dtype="Int64")
    named = pd.concat([rows["waker_tid"].dropna(), others, ep["tid"]]).astype(np.int64).unique()
    policies = _task_policies(cap, named)
    ep["waker_tid"] = pd.array([pd.NA] * len(ep), dtype="Int64")
    ep["waker"] = None
    ep["priority_inversion"] = None
    if len(lock):
        woke = exact.wakers(rows, data.sched_switch, policies if len(policies) else None)
        woke = woke.set_index(["tid", "start_ns"])
        keyed = rows.set_index(["tid", "start_ns"])
        woke = woke.reindex(keyed.index)
        labels = [
            f"{comm} ({int(tid)}, {evidence.prio_label(prio, policy, rtprio, nice)})"
            for comm, tid, prio, policy, rtprio, nice in zip(
                woke["waker_comm"].tolist(), woke["waker_tid"].tolist(), woke["waker_prio"].tolist(),
                woke["waker_policy"].tolist(), woke["waker_rtprio"].tolist(), woke["waker_nice"].tolist(), strict=True,
            )
        ]  # fmt: skip
        at = lock.index
        ep.loc[at, "waker_tid"] = pd.array(woke["waker_tid"].to_numpy(), dtype="Int64")
        ep.loc[at, "waker"] = labels
        ep.loc[at, "priority_inversion"] = woke["waker_lower_priority"].astype(bool).to_numpy()
    ep["ran_instead_tid"] = pd.array([pd.NA] * len(ep), dtype="Int64")
    ep["ran_instead"] = None
    if len(runnable):
        pol = _policy_near(policies, runnable["other_tid"], runnable["start_ns"])
        texts = []
        for (comm, tid, prio, cpu), (policy, rtprio, nice) in zip(
            runnable[["other_comm", "other_tid", "other_prio", "cpu"]].itertuples(index=False, name=None),
            pol[["policy", "rtprio", "nice"]].itertuples(index=False, name=None),
            strict=True,
        ):  # one row per episode
            who = (
                "the idle task"
                if int(tid) == 0
                else f"{comm} ({int(tid)}, {evidence.prio_label(prio, policy, rtprio, nice)})"
            )
            texts.append(f"{who} on CPU {'?' if pd.isna(cpu) else int(cpu)}")
        ep.loc[runnable.index, "ran_instead_tid"] = pd.array(runnable["other_tid"].to_numpy(), dtype="Int64")
        ep.loc[runnable.index, "ran_instead"] = texts
    ep = ep.reset_index(drop=True)

    # Placement and policy from the /proc reads of the episode's thread.
    from analyses.threads import policy_label
    from analyses.windows import core_type_map

    mapping, _ = core_type_map(cap.cpus)
    ep["cpus"] = [",".join(str(c) for c in (cpus if isinstance(cpus, list) else [])) for cpus in ep["cpu_list"]]
    ep["core_types"] = [
        ",".join(sorted({mapping.get(c, "uniform" if not mapping else "unknown") for c in cpus}))
        if isinstance(cpus, list) and cpus
        else "unknown"
        for cpus in ep["cpu_list"]
    ]
    last = _policy_near(policies, ep["tid"].astype("Int64"), ep["end_ns"].astype("Int64"))
    ep["policy"] = [
        policy_label(p, r, n) if not pd.isna(p) else "unknown"
        for p, r, n in zip(last["policy"].tolist(), last["rtprio"].tolist(), last["nice"].tolist(), strict=True)
    ]
    ep["basis"] = "ebpf"
    ep["evidence"] = evidence.exact_evidence(ep, data.has_block)
    ep["sources"] = evidence.exact_sources(ep, data.has_block)
    return ep
