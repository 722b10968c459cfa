"""Stall episodes of the threads of interest, each with a verdict, its components in ns and its evidence.

Rules (thresholds in `StallRules`; why each value, below and in the README):

1. Windows come from `analyses.windows` (reconciled: late-accounted run and wait time is put back where it
   was lived). For each window of a thread of interest:
   - busy  = on CPU + runnable. The window is *hot* when busy >= `busy_fraction` (0.5) of its wall time.
     A callback that takes a few hundred us in each 5.3 ms period never fills half of a 2 ms window;
     one that runs, or waits for a CPU, for milliseconds does. At 20 ms windows the same 5 ms burst
     fills a quarter of the window and is averaged away: the sampling-rate lesson of the users' notes.
   - *fault* time: on-CPU time of a window with at least `fault_rate_per_ms` (20) minor+major faults per
     ms on CPU (one per 50 us). Ordinary DSP code takes none in steady state (the lab's CPU-burn windows:
     0 in every one). A minor fault costs 0.5-2 us when a free page is at hand (2.1 us measured on this
     VM), so a storm of a thread doing little but touching new pages runs at 500-2000 per ms; but when
     the allocator has to work for its pages a fault takes 10-15 us and the same storm shows only 50-100
     per ms (measured in the lab: 49-85 per ms in such windows, the thread doing nothing else). 20 per
     ms sits under both and far above code that does not fault. (The utime/stime split cannot help: the
     kernel reports it scaled by the thread's lifetime ratio, cputime_adjust(), not per interval.)
   - *io*: off-CPU time of a window whose closing read found the thread in state D (uninterruptible:
     waiting for block IO, or for pages read from disk, which is `fault` when major faults rose).
   - *missed wake-up* (periodic threads only): a run of windows with no switch-in (schedstat field 3 did
     not move) in which the thread was off CPU for longer than the period plus a quarter interval. A
     periodic thread is switched in at least once a period, so such a run means it was kept from
     waking: its off-CPU time is `lock` when the reads found it in S (a futex, pipe or condition wait:
     another thread held it up), `io` for D, `unknown` for any other letter.
2. Adjacent anomalous windows (hot, io, or missed wake-up) of a thread merge into an episode.
3. Components: run (on CPU, not fault), runqueue (runnable, waiting for a CPU), io, fault, lock, reclaim
   (only with taskstats), unknown. The verdict is the largest. `idle_ns` is the normal sleep inside
   the episode's windows and is not a cause.
4. An episode is reported when its stall (the sum of the components) exceeds what the thread normally
   spends busy over the same span by at least `min_stall_ns`: half the period for a periodic thread (a
   callback that lost half its period is in danger of missing its deadline), two sampling intervals
   otherwise (below that the estimate is at the resolution of the sampling).

How io is told from lock without delay accounting, schedstats or eBPF: by the state letter sampled at
each read (stat field 3): D is an uninterruptible wait (block IO, page-in), S an interruptible one (futex,
pipe, poll: a lock). Limits: the letter is a snapshot, so a wait shorter than one sampling interval may
never be read; a thread in S looks exactly like a thread asleep between callbacks, so a lock wait is seen
only when it makes a periodic thread miss a wake-up (a wait of about one period plus two sampling
intervals, 9.3 ms at 5.333 ms / 2 ms, always; shorter ones sometimes; below one period never); kernel
mutexes and NFS/FUSE waits also show D and read as io. Where the capture holds delay accounting (stat
field 42) or schedstats sums, they confirm io in the evidence.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analyses.source import STATE_ALPHABET, STATE_D, STATE_S, capture_interval_ns, iter_samples
from analyses.threads import policy_label, select_threads, thread_names, thread_profiles
from analyses.windows import _group_starts, thread_windows, window_deltas
from forensics.capture import Capture

CAUSES = ("run", "runqueue", "io", "fault", "lock", "reclaim", "unknown")
# Delays accounted when they end: an episode also takes the next window's (windows.TASKSTATS_DELTAS).
LATE_ACCOUNTED = ("blkio_ns", "iowait_ns", "ts_blkio_ns", "ts_swapin_ns", "ts_freepages_ns", "ts_thrashing_ns",
                  "ts_compact_ns")  # fmt: skip
RECLAIM_COLUMNS = ("ts_freepages_ns", "ts_thrashing_ns", "ts_compact_ns")
OPTIONAL_SUMS = ("blkio_ns", "iowait_ns", "invol_switches", "ts_blkio_ns", "ts_swapin_ns", *RECLAIM_COLUMNS)


@dataclass(frozen=True)
class StallRules:
    """Thresholds of the stall rules (module docstring says why each value)."""

    busy_fraction: float = 0.5
    fault_rate_per_ms: float = 20.0
    min_stall_ns: int | None = None  # None: half the period (periodic threads), else two intervals
    wake_margin_intervals: float = 0.25  # a no-switch-in run must exceed period + this many intervals
    max_gap_ns: int = 1_000_000_000  # a longer silence is a pause (transport stopped), not a stall


def _sources_present(cap: Capture, windows: pd.DataFrame) -> dict[str, bool]:
    sources = cap.meta.get("sources") or {}
    return {
        "delayacct": bool(sources.get("delayacct")) and "blkio_ns" in windows,
        "sched": "vol_switches" in windows,
        "schedstats": "iowait_ns" in windows or "block_ns" in windows,
        "taskstats": any(c in windows for c in RECLAIM_COLUMNS),
        "ebpf": bool(sources.get("ebpf")),
    }


def classify_windows(windows: pd.DataFrame, threads: pd.DataFrame, interval_ns: int, rules: StallRules) -> pd.DataFrame:
    """Per-window flags and per-cause ns (rules 1). `threads` gives period_ns per tid (NaN: not periodic)."""
    tid = windows["tid"].to_numpy()
    period_by_tid = threads.set_index("tid")["period_ns"]
    period = period_by_tid.reindex(tid).to_numpy(dtype=np.float64)
    wall = windows["wall_ns"].to_numpy()
    on = windows["on_cpu_ns"].to_numpy()
    rq = windows["runqueue_ns"].to_numpy()
    off = windows["off_cpu_ns"].to_numpy()
    state = windows["state"].to_numpy()
    busy = on + rq
    hot = busy >= rules.busy_fraction * wall
    faults = np.zeros(len(tid), dtype=np.int64)
    for name in ("minflt", "majflt"):
        if name in windows:
            faults = faults + windows[name].to_numpy()
    fault_win = (faults > 0) & (faults * 1_000_000 >= rules.fault_rate_per_ms * on) & (on > 0)
    # D at either read: a wait for IO spans the read that starts the window or the one that ends it.
    # (A thread doing back-to-back IO is briefly R between requests; one read may catch that.)
    state_start = windows["state_start"].to_numpy() if "state_start" in windows else state
    d_state = ((state == STATE_D) | (state_start == STATE_D)) & (off > 0)
    # Runs of windows without a switch-in, per thread (a window with a switch-in starts a new run).
    switched = windows["switches"].to_numpy() > 0
    first = _group_starts(tid)
    key = np.cumsum(switched | first)
    quiet = ~switched
    # Only the time spent off CPU counts: a thread that ran on through its next period (a long run)
    # was not kept from waking, it never slept.
    asleep = pd.Series(np.where(quiet, off, 0)).groupby(key).transform("sum").to_numpy()
    # A wait counts only when a wake-up ended it: a thread that stops waking for good (it is shutting
    # down, or its engine stopped) has not stalled. So the run must be followed by a switch-in.
    last_of_thread = np.r_[tid[1:] != tid[:-1], True] if len(tid) else np.zeros(0, dtype=bool)
    ended = ~pd.Series(last_of_thread).groupby(key).transform("max").to_numpy().astype(bool)
    limit = period + rules.wake_margin_intervals * interval_ns
    missed = (
        quiet & ended & ~np.isnan(period) & (asleep > np.nan_to_num(limit, nan=np.inf)) & (asleep <= rules.max_gap_ns)
    )
    # Before a periodic thread settles into its rhythm (its start-up: allocations, priority changes,
    # waiting for the engine to start) its activity is not a stalled callback.
    settled = _in_rhythm(windows, period, interval_ns)
    hot &= settled
    d_state &= settled
    missed &= settled
    anomalous = hot | d_state | missed
    out = pd.DataFrame(
        {
            "hot": hot,
            "fault_window": fault_win,
            "d_state": d_state,
            "missed_wakeup": missed,
            "anomalous": anomalous,
            "faults": faults,
            "c_run": np.where(fault_win, 0, on),
            "c_fault_cpu": np.where(fault_win, on, 0),
            "c_runqueue": rq,
            "c_d": np.where(d_state, off, 0),
            "c_lock": np.where(missed & ~d_state & (state == STATE_S), off, 0),
            "c_unknown": np.where(missed & ~d_state & (state != STATE_S), off, 0),
        },
        index=windows.index,
    )
    return out


def _in_rhythm(windows: pd.DataFrame, period: np.ndarray, interval_ns: int, wakeups: int = 3) -> np.ndarray:
    """True from the first wake-up of a periodic thread after which it woke `wakeups` times, each within
    a period plus two sampling intervals of the last; always True for threads without a period."""
    tid = windows["tid"].to_numpy()
    end = windows["end_ns"].to_numpy()
    woke = windows["switches"].to_numpy() > 0
    idx = np.flatnonzero(woke)
    settled = np.isnan(period).copy()
    if len(idx) == 0:
        return settled
    w_tid = tid[idx]
    gap = np.r_[np.diff(end[idx]), np.inf]
    same_next = np.r_[w_tid[1:] == w_tid[:-1], False]
    regular = same_next & (gap <= np.nan_to_num(period[idx], nan=0) + 2 * interval_ns)
    run_ok = regular.copy()
    n = len(idx)
    for k in range(1, wakeups):  # the next `wakeups` gaps all regular, in the same thread
        ahead = np.zeros(n, dtype=bool)
        if k < n:
            ahead[: n - k] = regular[k:] & (w_tid[k:] == w_tid[:-k])
        run_ok &= ahead
    starts = pd.Series(np.where(run_ok, end[idx], np.nan)).groupby(w_tid).min()
    onset = starts.reindex(tid).to_numpy(dtype=np.float64)
    settled |= ~np.isnan(onset) & (end >= np.nan_to_num(onset, nan=np.inf))
    return settled


def find_stalls(
    cap: Capture,
    *,
    pattern: str | None = None,
    everything: bool = False,
    rules: StallRules | None = None,
    t_range: tuple[int | None, int | None] | None = None,
    profiles: pd.DataFrame | None = None,
    with_suspects: bool = True,
    max_samples: int = 3_000_000,
) -> pd.DataFrame:
    """Stall episodes of the threads of interest (module docstring), one row each, worst first in time order.

    Columns: tid pid comm start_ns end_ns duration_ns verdict stall_ns excess_ns share components
    (dict ns per cause) run_ns runqueue_ns io_ns fault_ns lock_ns reclaim_ns unknown_ns idle_ns minflt
    majflt cpus core_types policy period_ns windows evidence sources undecided why.

    Threads are analysed in groups of about `max_samples` samples (one pass over the capture per
    group), so that `--all` on a long capture of many threads stays in bounded memory.
    """
    rules = rules or StallRules()
    interval = capture_interval_ns(cap)
    profiles = thread_profiles(cap, t_range=t_range) if profiles is None else profiles
    chosen = select_threads(profiles, pattern=pattern, everything=everything)
    if chosen.empty:
        return empty_stalls()
    parts, sources = [], dict.fromkeys(("delayacct", "sched", "schedstats", "taskstats", "ebpf"), False)
    for group in _thread_groups(chosen, max_samples):
        found, group_sources = _episodes_of(cap, group, profiles, interval, rules, t_range)
        sources = {k: v or group_sources[k] for k, v in sources.items()}
        if len(found):
            parts.append(found)
    if not parts:
        return empty_stalls()
    episodes = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    # Rule 4: report what exceeds the thread's normal busy share over the span by min_stall.
    period = episodes["period_ns"].to_numpy(dtype=np.float64)
    default_min = np.where(np.isnan(period), 2.0 * interval, np.maximum(period / 2.0, 0.0))
    min_stall = default_min if rules.min_stall_ns is None else np.full(len(episodes), float(rules.min_stall_ns))
    expected = episodes["utilization"].to_numpy() * episodes["duration_ns"].to_numpy()
    episodes["excess_ns"] = np.maximum(episodes["stall_ns"].to_numpy() - expected, 0).astype(np.int64)
    episodes = episodes[episodes["excess_ns"].to_numpy() >= min_stall].reset_index(drop=True)
    if episodes.empty:
        return empty_stalls()
    if with_suspects:
        episodes = _add_suspects(cap, episodes, interval)
    else:
        episodes["suspect"] = ""
    episodes["evidence"] = _evidence(episodes, sources)
    episodes["sources"] = _source_lists(episodes, sources)
    episodes["undecided"] = [_undecided(sources)] * len(episodes)
    return episodes[STALL_COLUMNS].sort_values(["start_ns", "tid"]).reset_index(drop=True)


def _thread_groups(chosen: pd.DataFrame, max_samples: int) -> list[pd.DataFrame]:
    """Consecutive groups of threads whose samples add up to at most max_samples (at least one thread)."""
    counts = chosen["samples"].to_numpy(dtype=np.int64)
    group = np.cumsum(counts) // max(max_samples, 1)
    return [chosen[group == g] for g in np.unique(group)]


def _episodes_of(
    cap: Capture,
    chosen: pd.DataFrame,
    profiles: pd.DataFrame,
    interval: int,
    rules: StallRules,
    t_range: tuple[int | None, int | None] | None,
) -> tuple[pd.DataFrame, dict[str, bool]]:
    """Episodes (rules 1-3, before the min-stall filter) of some threads, and the sources they had."""
    windows = thread_windows(cap, tids=chosen["tid"].tolist(), t_range=t_range)
    sources = _sources_present(cap, windows)
    if windows.empty:
        return pd.DataFrame(), sources
    flags = classify_windows(windows, chosen, interval, rules)
    w = pd.concat([windows, flags], axis=1)
    del windows, flags
    tid = w["tid"].to_numpy()
    anomalous = w["anomalous"].to_numpy()
    # Delays accounted at their end land in the window after the episode: give them to its last window.
    next_quiet = np.r_[(tid[1:] == tid[:-1]) & ~anomalous[1:], False] & anomalous
    for name in LATE_ACCOUNTED:
        if name in w:
            values = w[name].astype("Int64")
            following = values.shift(-1)
            w[name] = values.where(~next_quiet, values.fillna(0) + following.fillna(0)).where(
                ~(values.isna() & following.isna())
            )
    starts = anomalous & (np.r_[True, ~anomalous[:-1]] | _group_starts(tid))
    episode = np.cumsum(starts) - 1
    w = w[anomalous].assign(episode=episode[anomalous])
    if w.empty:
        return pd.DataFrame(), sources
    episodes = _aggregate(w)
    episodes = _attach_threads(episodes, chosen, profiles)
    return _finish_components(episodes, sources), sources


STALL_COLUMNS = [
    "tid", "pid", "comm", "start_ns", "end_ns", "duration_ns", "verdict", "stall_ns", "excess_ns", "share",
    "components", "run_ns", "runqueue_ns", "io_ns", "fault_ns", "lock_ns", "reclaim_ns", "unknown_ns",
    "idle_ns", "minflt", "majflt", "d_reads", "s_reads", "reads", "cpus", "core_types", "policy",
    "period_ns", "windows", "blkio_ns", "iowait_ns", "ts_blkio_ns", "invol_switches", "suspect", "evidence", "sources",
    "undecided", "why",
]  # fmt: skip


def empty_stalls() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in STALL_COLUMNS})


def _aggregate(w: pd.DataFrame) -> pd.DataFrame:
    g = w.groupby("episode", sort=True)
    agg: dict[str, Any] = {
        "tid": ("tid", "first"),
        "pid": ("pid", "first"),
        "start_ns": ("start_ns", "min"),
        "end_ns": ("end_ns", "max"),
        "windows": ("tid", "size"),
        "c_run": ("c_run", "sum"),
        "c_fault_cpu": ("c_fault_cpu", "sum"),
        "c_runqueue": ("c_runqueue", "sum"),
        "c_d": ("c_d", "sum"),
        "c_lock": ("c_lock", "sum"),
        "c_unknown": ("c_unknown", "sum"),
        "off": ("off_cpu_ns", "sum"),
        "faults": ("faults", "sum"),
        "d_reads": ("d_state", "sum"),
        "s_reads": ("state", lambda s: int((s.to_numpy() == STATE_S).sum())),
        "policy_code": ("policy", "last"),
        "rtprio": ("rtprio", "last"),
    }
    if "minflt" in w:
        agg["minflt"] = ("minflt", "sum")
    if "majflt" in w:
        agg["majflt"] = ("majflt", "sum")
    for optional in OPTIONAL_SUMS:
        if optional in w:
            agg[optional] = (optional, lambda s: s.sum(min_count=1))
    out = g.agg(**agg)
    out["cpus"] = g["cpu"].agg(lambda s: ",".join(str(c) for c in sorted(set(s.tolist()))))
    if "core_type" in w:
        out["core_types"] = g["core_type"].agg(lambda s: ",".join(sorted({str(c) for c in s.tolist()})))
    else:
        out["core_types"] = "unknown"
    for name in ("minflt", "majflt"):
        if name not in out:
            out[name] = 0
    for optional in OPTIONAL_SUMS:
        if optional not in out:
            out[optional] = pd.NA
    return out.reset_index(drop=True)


def _attach_threads(episodes: pd.DataFrame, chosen: pd.DataFrame, profiles: pd.DataFrame) -> pd.DataFrame:
    info = chosen[["tid", "comm", "period_ns", "why"]].copy()
    util = profiles.set_index("tid")
    busy = (util["on_cpu_ns"] + util["runqueue_ns"]) / util["wall_ns"].where(util["wall_ns"] > 0)
    info["utilization"] = busy.reindex(info["tid"]).fillna(0.0).to_numpy()
    out = episodes.merge(info, on="tid", how="left")
    out["duration_ns"] = out["end_ns"] - out["start_ns"]
    out["policy"] = [
        policy_label(p, r) for p, r in zip(out["policy_code"].tolist(), out["rtprio"].tolist(), strict=True)
    ]
    return out


def _finish_components(episodes: pd.DataFrame, sources: dict[str, bool]) -> pd.DataFrame:
    major = episodes["majflt"].to_numpy() > 0
    d_time = episodes["c_d"].to_numpy()
    # A D-state wait while major faults rose is the kernel reading pages in: the fault's, not an io's.
    episodes["run_ns"] = episodes["c_run"].astype(np.int64)
    episodes["runqueue_ns"] = episodes["c_runqueue"].astype(np.int64)
    episodes["io_ns"] = np.where(major, 0, d_time).astype(np.int64)
    episodes["fault_ns"] = (episodes["c_fault_cpu"].to_numpy() + np.where(major, d_time, 0)).astype(np.int64)
    episodes["lock_ns"] = episodes["c_lock"].astype(np.int64)
    episodes["unknown_ns"] = episodes["c_unknown"].astype(np.int64)
    # Reclaim (taskstats: direct reclaim, thrashing, compaction delays). The kernel gets into reclaim
    # from an allocation, usually inside a page fault, so its time is taken out of fault first, then
    # of run (on CPU), then of io (thrashing waits on pages being read back).
    reclaim = np.zeros(len(episodes), dtype=np.int64)
    for name in RECLAIM_COLUMNS:
        if name in episodes:
            reclaim += episodes[name].astype("Int64").fillna(0).to_numpy(dtype=np.int64)
    remaining = reclaim.copy()
    for cause in ("fault_ns", "run_ns", "io_ns"):
        take = np.minimum(remaining, episodes[cause].to_numpy())
        episodes[cause] = episodes[cause].to_numpy() - take
        remaining -= take
    episodes["reclaim_ns"] = reclaim - remaining
    components = episodes[[f"{c}_ns" for c in CAUSES]].to_numpy(dtype=np.int64)
    episodes["stall_ns"] = components.sum(axis=1)
    top = components.argmax(axis=1)
    episodes["verdict"] = np.array(CAUSES)[top]
    episodes["share"] = np.divide(
        components[np.arange(len(top)), top],
        episodes["stall_ns"].to_numpy(),
        out=np.zeros(len(top)),
        where=episodes["stall_ns"].to_numpy() > 0,
    ).round(3)
    explained = episodes["io_ns"] + episodes["lock_ns"] + episodes["unknown_ns"] + np.where(major, d_time, 0)
    episodes["idle_ns"] = np.maximum(episodes["off"] - explained, 0).astype(np.int64)
    episodes["reads"] = episodes["windows"]
    # Without taskstats reclaim is unknown, not zero (DESIGN.md: never a silent zero).
    reclaim_known = sources["taskstats"]
    episodes["components"] = [
        {c: (int(v) if reclaim_known or c != "reclaim" else None) for c, v in zip(CAUSES, row, strict=True)}
        for row in components.tolist()
    ]
    if not reclaim_known:
        episodes["reclaim_ns"] = pd.array([pd.NA] * len(episodes), dtype="Int64")
    episodes["period_ns"] = episodes["period_ns"].astype("Float64").round(0).astype("Int64")
    return episodes


def _undecided(sources: dict[str, bool]) -> list[str]:
    """Causes this capture has no source for (said as unknown, never as a silent zero)."""
    missing = []
    if not sources["taskstats"]:
        missing.append("reclaim (needs taskstats: freepages/thrashing/compaction delays)")
    if not (sources["delayacct"] or sources["schedstats"] or sources["ebpf"]):
        missing.append(
            "io and lock waits shorter than one sampling interval (needs delay accounting, schedstats or eBPF)"
        )
    if not sources["ebpf"]:
        missing.append("lock waits shorter than the period (needs eBPF sched_switch/wakeup)")
    return missing


def _source_lists(episodes: pd.DataFrame, sources: dict[str, bool]) -> list[list[str]]:
    out = []
    for row in episodes.itertuples(index=False):
        used = ["schedstat"]
        if row.d_reads or row.lock_ns or row.unknown_ns or row.verdict in ("io", "lock"):
            used.append("stat:state")
        if row.minflt or row.majflt or row.verdict == "fault":
            used.append("stat:faults")
        if sources["delayacct"] and not pd.isna(row.blkio_ns):
            used.append("delayacct")
        if sources["schedstats"] and not pd.isna(row.iowait_ns):
            used.append("schedstats")
        if sources["sched"] and not pd.isna(row.invol_switches):
            used.append("sched")
        if sources["taskstats"] and not (pd.isna(row.ts_blkio_ns) and pd.isna(row.ts_freepages_ns)):
            used.append("taskstats")
        out.append(used)
    return out


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.1f} ms"


def _evidence(episodes: pd.DataFrame, sources: dict[str, bool]) -> list[str]:
    """One line per episode: the numbers behind the verdict. A loop over episodes, not samples."""
    lines = []
    for row in episodes.itertuples(index=False):
        parts = [f"{row.windows} window{'s' if row.windows != 1 else ''}, {_ms(row.duration_ns)}"]
        on_cpu = row.c_run + row.c_fault_cpu
        small = 0.05 * row.stall_ns
        if on_cpu > small:
            parts.append(f"on CPU {_ms(on_cpu)}")
        if row.runqueue_ns > small:
            rq = f"runnable waiting for a CPU {_ms(row.runqueue_ns)}"
            if not pd.isna(row.invol_switches) and row.invol_switches:
                rq += f" ({int(row.invol_switches)} preemptions)"
            parts.append(rq)
        if row.minflt + row.majflt >= 10 or row.majflt:
            on_ms = max(on_cpu / 1e6, 1e-3)
            parts.append(
                f"{int(row.minflt)} minor + {int(row.majflt)} major faults ({row.minflt / on_ms:.0f}/ms on CPU)"
            )
        if row.d_reads:
            parts.append(f"state D at {int(row.d_reads)} of {row.reads} reads")
        if row.lock_ns or row.unknown_ns:
            letters = f"state S at {int(row.s_reads)} of {row.reads} reads"
            period = "" if pd.isna(row.period_ns) else f" (period {_ms(row.period_ns)})"
            parts.append(f"no wake-up for {_ms(row.lock_ns + row.unknown_ns)}{period}, {letters}")
        if sources["delayacct"] and not pd.isna(row.blkio_ns):
            parts.append(f"blkio delay {_ms(row.blkio_ns)} (delay accounting)")
        if not pd.isna(row.iowait_ns):
            parts.append(f"iowait {_ms(row.iowait_ns)} (schedstats)")
        if not pd.isna(row.ts_blkio_ns):
            parts.append(f"block-IO delay {_ms(row.ts_blkio_ns)} (taskstats)")
        if row.reclaim_ns is not pd.NA and not pd.isna(row.reclaim_ns) and row.reclaim_ns:
            parts.append(f"reclaim/compaction/thrashing delay {_ms(row.reclaim_ns)} (taskstats)")
        if isinstance(row.suspect, str) and row.suspect:
            parts.append(row.suspect)
        elif row.verdict == "lock":
            parts.append(
                "no recorded thread ran meanwhile: a lock held outside the capture, or a late wake-up "
                "(timer, interrupt); /proc cannot tell these apart, eBPF's waker can"
            )
        parts.append(f"CPU {row.cpus} ({row.core_types}), {row.policy}")
        lines.append("; ".join(parts))
    return lines


def _add_suspects(cap: Capture, episodes: pd.DataFrame, interval: int) -> pd.DataFrame:
    """For lock and runqueue verdicts: which recorded thread ran meanwhile (the likely holder or hog).

    runqueue: the thread with the most CPU time on the victim's CPU(s) during the episode; lock: the
    busiest other recorded thread (the holder of a lock is often busy while the waiter sleeps; it may
    live in another process). Only threads in the capture are candidates, and "ran meanwhile" is a
    suspicion, not proof: eBPF's waker is.
    """
    wanted = episodes["verdict"].isin(["lock", "runqueue"]).to_numpy()
    suspects = np.array([""] * len(episodes), dtype=object)
    if not wanted.any():
        return episodes.assign(suspect=suspects)
    spans = episodes.loc[wanted, ["start_ns", "end_ns"]].to_numpy()
    lo = int(spans[:, 0].min()) - 2 * interval
    hi = int(spans[:, 1].max()) + interval
    frames = []
    columns = ["pid", "run_ns", "wait_ns", "slices", "cpu", "policy", "rtprio"]
    order = np.argsort(spans[:, 0])
    span_lo = spans[order, 0] - 2 * interval
    span_hi = np.maximum.accumulate(spans[order, 1] + interval)  # covers overlapping spans too
    for batch in iter_samples(cap, columns, t_range=(lo, hi)):
        t = batch["t_ns"].to_numpy()
        # Rows near any episode: the last span starting at or before t must still be open at t.
        k = np.searchsorted(span_lo, t, side="right") - 1
        near = (k >= 0) & (t <= span_hi[np.maximum(k, 0)])
        frames.append(batch[near])
    if not frames:
        return episodes.assign(suspect=suspects)
    samples = pd.concat(frames, ignore_index=True)
    order = np.lexsort((samples["tick"].to_numpy(), samples["tid"].to_numpy()))
    others = window_deltas(samples.take(order).reset_index(drop=True))
    names = thread_names(cap).set_index("tid")["comm"]
    for i in np.flatnonzero(wanted):
        row = episodes.iloc[i]
        inside = (others["end_ns"] > row.start_ns) & (others["start_ns"] < row.end_ns) & (others["tid"] != row.tid)
        if row.verdict == "runqueue":
            cpus = [int(c) for c in str(row.cpus).split(",") if c.strip().lstrip("-").isdigit()]
            inside &= others["cpu"].isin(cpus)
        ran = (
            others[inside]
            .groupby("tid")
            .agg(
                on=("run_delta_ns", "sum"),
                pid=("pid", "last"),
                policy=("policy", "last"),
                rtprio=("rtprio", "last"),
                cpu=("cpu", "last"),
            )
        )
        if ran.empty or ran["on"].max() <= 0:
            continue
        top = ran["on"].idxmax()
        best = ran.loc[top]
        comm = names.get(top, "?")
        where = f" on CPU {int(best['cpu'])}" if row.verdict == "runqueue" else ""
        family = ", same process" if int(best["pid"]) == int(row.pid) else f", pid {int(best['pid'])}"
        suspects[i] = (
            f"meanwhile {comm} ({int(top)}{family}, {policy_label(best['policy'], best['rtprio'])}) ran "
            f"{_ms(best['on'])}{where}"
        )
    return episodes.assign(suspect=suspects)


def stall_windows(
    cap: Capture, tids: Iterable[int], *, rules: StallRules | None = None, profiles: pd.DataFrame | None = None
) -> pd.DataFrame:
    """The classified windows of some threads (for plots and for checking the rules by eye)."""
    rules = rules or StallRules()
    profiles = thread_profiles(cap) if profiles is None else profiles
    tids = list(tids)
    windows = thread_windows(cap, tids=tids)
    flags = classify_windows(windows, profiles[profiles["tid"].isin(tids)], capture_interval_ns(cap), rules)
    out = pd.concat([windows, flags], axis=1)
    out["state_letter"] = np.array(list(STATE_ALPHABET))[out["state"].to_numpy().astype(np.int64)]
    return out
