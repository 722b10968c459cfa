"""Stall episodes of the threads of interest, each with a verdict, its components in ns and its evidence.

Rules (predicates and thresholds in `analyses.rules`; why each value: below, DESIGN.md "The rules", the README):

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
     not move) in which the thread was off CPU for longer than the period plus the larger of a quarter
     interval and 5 % of the period (analyses.rules: a 100 ms thread has its own slack). A
     periodic thread is switched in at least once a period, so such a run means it was kept from
     waking: its off-CPU time is `lock` when the reads found it in S (a futex, pipe or condition wait:
     another thread held it up), `io` for D, `unknown` for any other letter. A window with switch-ins
     but too few for its length (the sampler read nothing meanwhile: ticks missed while the machine
     held) is one too when its off-CPU time over (switch-ins + 1), the least its longest stretch off CPU
     lasted, is beyond that limit: that lower bound is what it counts, and its evidence says "at least".
   - *io under pressure*: a window in which the thread was switched in at least twice (it blocked and
     was woken more than once: a periodic thread is switched in about once a period), off CPU and not
     runnable for at least `busy_fraction` of it, no read finding it in D or S, while the machine's IO
     pressure (/proc/pressure/io "some", the time at least one task waited for IO, sampled with the
     system counters) grew by at least the thread's off-CPU time over the system interval around it.
     A thread doing back-to-back requests is on CPU between them, and the reads can catch it there
     every time: measured, one of ten 6 ms io episodes read R at all four of its reads, while PSI io
     rose 3-5.5 ms in every io episode's interval and 0 in every other episode's. PSI is machine-wide,
     so this is corroboration, not proof: the evidence says so.
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

from typing import Any

import numpy as np
import pandas as pd

from analyses import evidence, exact_stalls
from analyses import rules as R
from analyses.exact_stalls import ExactData, load_exact
from analyses.rules import CAUSES, RECLAIM_COLUMNS, StallRules
from analyses.source import STATE_D, STATE_S, capture_interval_ns
from analyses.span import overlaps_span
from analyses.threads import policy_label, select_threads, thread_profiles
from analyses.tiers import slow_tier_undecided
from analyses.windows import BASE_COLUMNS, FAULT_COLUMNS, _group_starts, thread_windows
from capture.format import Capture

# Delays accounted when they end: an episode also takes the next window's (windows.TASKSTATS_DELTAS).
LATE_ACCOUNTED = ("blkio_ns", "iowait_ns", "ts_blkio_ns", "ts_swapin_ns", "ts_freepages_ns", "ts_thrashing_ns",
                  "ts_compact_ns")  # fmt: skip
OPTIONAL_SUMS = ("blkio_ns", "iowait_ns", "invol_switches", "ts_blkio_ns", "ts_swapin_ns", *RECLAIM_COLUMNS)


# The sample columns a window's rules read; not user and system time nor nice (a third less to decode
# for the watched threads' windows: every row of the capture is decoded to find theirs).
WINDOW_COLUMNS = [*BASE_COLUMNS, *FAULT_COLUMNS, "blkio_ticks"]

SOURCE_FLAGS = ("delayacct", "sched", "schedstats", "taskstats", "ts_blkio", "ebpf", "ebpf_faults", "ebpf_block")


def _sources_present(cap: Capture, windows: pd.DataFrame, data: ExactData | None) -> dict[str, bool]:
    sources = cap.sources
    return {
        "delayacct": bool(sources.get("delayacct")) and "blkio_ns" in windows,
        "sched": "vol_switches" in windows,
        "schedstats": "iowait_ns" in windows or "block_ns" in windows,
        "taskstats": any(c in windows for c in RECLAIM_COLUMNS),
        # Block-IO delay known for a watched thread (delay accounting on when it was created).
        "ts_blkio": "ts_blkio_ns" in windows and bool(windows["ts_blkio_ns"].notna().any()),
        "ebpf": data is not None,
        "ebpf_faults": data is not None and data.has_faults,
        "ebpf_block": data is not None and data.has_block,
    }


def io_pressure_ns(cap: Capture, windows: pd.DataFrame) -> np.ndarray:
    """Per window: how much the machine's IO pressure (PSI io "some", ns) grew between the last system
    sample at or before the window's start and the first at or after its end; NaN where unknown (no PSI
    in the kernel or the capture, or the window is outside the system samples)."""
    out = np.full(len(windows), np.nan)
    system = cap.system
    if windows.empty or system.empty or "psi_io_some_us" not in system:
        return out
    machine = system[system["cpu"] == -1].sort_values("t_ns")
    machine = machine[machine["psi_io_some_us"].notna()]
    if len(machine) < 2:
        return out
    t = machine["t_ns"].to_numpy(np.int64)
    psi_ns = machine["psi_io_some_us"].to_numpy(np.float64) * 1000.0  # the kernel reports us
    before = np.searchsorted(t, windows["start_ns"].to_numpy(np.int64), side="right") - 1
    after = np.searchsorted(t, windows["end_ns"].to_numpy(np.int64), side="left")
    inside = (before >= 0) & (after < len(t))
    out[inside] = psi_ns[after[inside]] - psi_ns[before[inside]]
    return out


def classify_windows(
    windows: pd.DataFrame,
    threads: pd.DataFrame,
    interval_ns: int,
    rules: StallRules,
    io_pressure: np.ndarray | None = None,
) -> pd.DataFrame:
    """Per-window flags and per-cause ns (rules 1). `threads` gives period_ns per tid (NaN: not periodic).
    `io_pressure`: io_pressure_ns() of the same windows (None: not known, the rule is off)."""
    tid = windows["tid"].to_numpy()
    period_by_tid = threads.set_index("tid")["period_ns"]
    period = period_by_tid.reindex(tid).to_numpy(dtype=np.float64)
    wall = windows["wall_ns"].to_numpy()
    on = windows["on_cpu_ns"].to_numpy()
    rq = windows["runqueue_ns"].to_numpy()
    off = windows["off_cpu_ns"].to_numpy()
    state = windows["state"].to_numpy()
    busy = on + rq
    hot = R.is_hot(busy, wall, rules.busy_fraction)
    # Switch-ins here: a window the sampler left long is hot when one wait for a CPU in it was a stall.
    switches = windows["switches"].to_numpy()
    hot |= R.long_wait_in_window(rq, switches, wall, R.min_stall_ns(period, interval_ns, rules), interval_ns)
    faults = np.zeros(len(tid), dtype=np.int64)
    for name in ("minflt", "majflt"):
        if name in windows:
            faults = faults + windows[name].to_numpy()
    fault_win = R.is_fault_storm(faults, on, rules.fault_rate_per_ms)
    # D at either read: a wait for IO spans the read that starts the window or the one that ends it.
    # (A thread doing back-to-back IO is briefly R between requests; one read may catch that.)
    state_start = windows["state_start"].to_numpy() if "state_start" in windows else state
    d_state = R.read_in_d(state, state_start, STATE_D) & (off > 0)
    # Runs of windows without a switch-in, per thread (a window with a switch-in starts a new run).
    switched = switches > 0
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
    limit = R.wake_limit_ns(period, interval_ns, rules)
    missed = (
        quiet & ended & ~np.isnan(period) & (asleep > np.nan_to_num(limit, nan=np.inf)) & (asleep <= rules.max_gap_ns)
    )
    # A window of several periods with too few switch-ins (the sampler read nothing meanwhile: the whole
    # machine held, its ticks missed): its off-CPU time falls in at most switches + 1 stretches, each ended
    # by a switch-in, so one of them lasted at least off / (switches + 1). Beyond the wake limit that is a
    # missed wake-up for certain, of at least that length (a lower bound: never fires on a thread that woke
    # every period, whose stretches are each under a period whatever the window's length).
    longest_off = off / (switches + 1.0)
    sparse = (
        switched
        & ended
        & ~np.isnan(period)
        & (longest_off > np.nan_to_num(limit, nan=np.inf))
        & (longest_off <= rules.max_gap_ns)
    )
    # Before a periodic thread settles into its rhythm (its start-up: allocations, priority changes,
    # waiting for the engine to start) its activity is not a stalled callback.
    settled = _in_rhythm(windows, period, interval_ns)
    hot &= settled
    d_state &= settled
    missed &= settled
    sparse &= settled
    # Delay accounting read through taskstats: block-IO delay accounted in this window (the kernel adds
    # each wait when it ends, so short waits land in the window they were lived in). Half the window
    # spent waiting for block IO is an io window even when no read caught the D letter.
    if "ts_blkio_ns" in windows:
        blkio = windows["ts_blkio_ns"].astype("Float64").to_numpy(dtype=np.float64, na_value=0.0)
        io_delay = (blkio >= rules.busy_fraction * wall) & (off > 0) & settled
        d_state = d_state | io_delay
    # Blocked more than once, mostly off CPU, no letter read: io when the machine's IO pressure covers it.
    pressure_io = np.zeros(len(tid), dtype=bool)
    if io_pressure is not None:
        letter_s = (state == STATE_S) | (state_start == STATE_S)
        blocked = (switches >= 2) & (off >= rules.busy_fraction * wall) & (off > 0)
        covered = np.nan_to_num(io_pressure, nan=-1.0) >= off
        pressure_io = blocked & covered & ~letter_s & ~d_state & ~hot & settled
    missed_off = np.where(missed, off, np.where(sparse, longest_off, 0))
    missed |= sparse
    anomalous = hot | d_state | missed | pressure_io
    out = pd.DataFrame(
        {
            "hot": hot,
            "fault_window": fault_win,
            "d_state": d_state,
            "pressure_io": pressure_io,
            "io_pressure_ns": io_pressure if io_pressure is not None else np.full(len(tid), np.nan),
            "missed_wakeup": missed,
            "sparse_wakeup": sparse,  # of them, those whose length is a lower bound (too few switch-ins)
            "anomalous": anomalous,
            "faults": faults,
            "c_run": np.where(fault_win, 0, on),
            "c_fault_cpu": np.where(fault_win, on, 0),
            "c_runqueue": rq,
            "c_d": np.where(d_state | pressure_io, off, 0),
            "c_lock": np.where(missed & ~d_state & (state == STATE_S), missed_off, 0),
            "c_unknown": np.where(missed & ~d_state & (state != STATE_S), missed_off, 0),
            "settled": settled,
        },
        index=windows.index,
    )
    return out


def _in_rhythm(
    windows: pd.DataFrame, period: np.ndarray, interval_ns: int, wakeups: int = R.SETTLE_WAKEUPS
) -> np.ndarray:
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
    regular = same_next & (gap <= np.nan_to_num(period[idx], nan=0) + R.SETTLE_MARGIN_INTERVALS * interval_ns)
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
    tids: tuple[int, ...] = (),
    rules: StallRules | None = None,
    t_range: tuple[int | None, int | None] | None = None,
    profiles: pd.DataFrame | None = None,
    with_suspects: bool = True,
    max_samples: int = 3_000_000,
    use_exact: bool = True,
) -> pd.DataFrame:
    """Stall episodes of the threads of interest (module docstring), one row each, in time order.

    Columns: tid pid comm start_ns end_ns duration_ns verdict stall_ns excess_ns share components
    (dict ns per cause) run_ns runqueue_ns io_ns fault_ns lock_ns reclaim_ns unknown_ns idle_ns minflt
    majflt cpus core_types policy period_ns windows ... basis ("ebpf": exact, analyses.exact_stalls;
    "proc": sampled) waker_tid waker priority_inversion ran_instead_tid ran_instead block_requests
    evidence sources (the deciding ones first) undecided why.

    With eBPF switch records in the capture (and `use_exact`), a watched thread's episodes come from
    its exact timeline; /proc episodes are kept only where that timeline has holes (see _merge_exact).

    Threads are analysed in groups of about `max_samples` samples (one pass over the capture per
    group), so that `--all` on a long capture of many threads stays in bounded memory.
    """
    rules = rules or StallRules()
    interval = capture_interval_ns(cap)
    # A span selects which episodes are shown, never what is decided: the threads' profiles (period,
    # normal busy share) and the windows are the whole capture's, so an episode inside a span has the
    # verdict it has in the whole capture (README, "Explaining a spike").
    if profiles is None or profiles.attrs.get("t_range") is not None:
        profiles = thread_profiles(cap)
    chosen = select_threads(profiles, pattern=pattern, everything=everything, tids=tids)
    if chosen.empty:
        return empty_stalls()
    data = load_exact(cap) if use_exact else None
    parts, sources = [], dict.fromkeys(SOURCE_FLAGS, False)
    for group in _thread_groups(chosen, max_samples):
        found, group_sources = _episodes_of(cap, group, profiles, interval, rules, data)
        sources = {k: v or group_sources[k] for k, v in sources.items()}
        if len(found):
            parts.append(found)
    undecided = evidence.undecided(sources, data, chosen, t_range) + slow_tier_undecided(cap, chosen["tid"], t_range)
    if not parts:
        return empty_stalls(undecided)
    episodes = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    episodes = _excess_filter(episodes, interval, rules)
    episodes = episodes[overlaps_span(episodes["start_ns"], episodes["end_ns"], t_range)].reset_index(drop=True)
    if episodes.empty:
        return empty_stalls(undecided)
    for column in [*STALL_COLUMNS, "not_block_ns"]:
        if column not in episodes:
            episodes[column] = None
    proc = (episodes["basis"] == "proc").to_numpy()
    if with_suspects and proc.any():
        episodes = evidence.add_suspects(cap, episodes, interval, only=proc)
    else:
        episodes["suspect"] = ""
        episodes["suspect_tid"] = pd.array([pd.NA] * len(episodes), dtype="Int32")
    lines, used = episodes["evidence"].astype(object).tolist(), episodes["sources"].astype(object).tolist()
    where = np.flatnonzero(proc)
    in_hole = episodes["in_hole"].fillna(False).to_numpy(dtype=bool) if "in_hole" in episodes else proc & False
    for i, text, names in zip(
        where,
        evidence.proc_evidence(episodes[proc], sources),
        evidence.proc_sources(episodes[proc], sources),
        strict=True,
    ):
        prefix = "from the /proc windows (no eBPF switch record of this thread here); " if in_hole[i] else ""
        lines[i], used[i] = prefix + text, names
    episodes["evidence"], episodes["sources"] = lines, used
    episodes["undecided"] = [undecided] * len(episodes)
    out = episodes[STALL_COLUMNS].sort_values(["start_ns", "tid"]).reset_index(drop=True)
    out.attrs["undecided"] = undecided  # also on an empty result: what this capture could not decide
    return out


def _excess_filter(episodes: pd.DataFrame, interval: int, rules: StallRules) -> pd.DataFrame:
    """Rule 4: keep what exceeds the thread's normal busy share over the span by min_stall."""
    min_stall = R.min_stall_ns(episodes["period_ns"].to_numpy(dtype=np.float64), interval, rules)
    expected = episodes["utilization"].to_numpy(dtype=np.float64) * episodes["duration_ns"].to_numpy()
    excess = np.maximum(episodes["stall_ns"].to_numpy(dtype=np.float64) - expected, 0).astype(np.int64)
    episodes = episodes.assign(excess_ns=excess)
    return episodes[excess >= min_stall].reset_index(drop=True)


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
    data: ExactData | None = None,
) -> tuple[pd.DataFrame, dict[str, bool]]:
    """Episodes (rules 1-3, before the min-stall filter) of some threads, and the sources they had."""
    windows = thread_windows(cap, tids=chosen["tid"].tolist(), columns=WINDOW_COLUMNS)
    sources = _sources_present(cap, windows, data)
    if windows.empty:
        return pd.DataFrame(), sources
    flags = classify_windows(windows, chosen, interval, rules, io_pressure_ns(cap, windows))
    w = pd.concat([windows, flags], axis=1)
    del flags
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
    # Where a periodic thread's rhythm begins (its start-up before that is not a stalled callback).
    onset = w.loc[w["settled"].to_numpy(), ["tid", "start_ns"]].groupby("tid")["start_ns"].min()
    starts = anomalous & (np.r_[True, ~anomalous[:-1]] | _group_starts(tid))
    episode = np.cumsum(starts) - 1
    w = w[anomalous].assign(episode=episode[anomalous])
    proc = pd.DataFrame()
    if len(w):
        proc = _finish_components(_attach_threads(_aggregate(w), chosen, profiles), sources)
        proc["basis"] = "proc"
    if data is None:
        return proc, sources
    exact = _exact_episodes(cap, data, chosen, profiles, windows, onset, interval, rules)
    return _merge_exact(exact, proc, data, interval, rules), sources


def _exact_episodes(
    cap: Capture,
    data: ExactData,
    chosen: pd.DataFrame,
    profiles: pd.DataFrame,
    windows: pd.DataFrame,
    onset: pd.Series,
    interval: int,
    rules: StallRules,
) -> pd.DataFrame:
    """Episodes of these threads from their exact timelines (analyses.exact_stalls), before rule 4."""
    threads = _thread_info(chosen, profiles).merge(chosen[["tid", "pid"]], on="tid", how="left")
    threads["onset_ns"] = onset.reindex(threads["tid"]).to_numpy(dtype=float)
    long_run = R.min_stall_ns(threads["period_ns"].to_numpy(dtype=float), interval, rules)
    segments = exact_stalls.thread_segments(data, threads, rules)
    raw, seg = exact_stalls.episodes_from_segments(segments, pd.Series(long_run, index=threads["tid"].to_numpy()))
    if raw.empty:
        return pd.DataFrame()
    return exact_stalls.finish_episodes(
        raw, seg, data, cap=cap, threads=threads, windows=windows, fault_rate_per_ms=rules.fault_rate_per_ms
    )


def _merge_exact(
    exact: pd.DataFrame, proc: pd.DataFrame, data: ExactData, interval: int, rules: StallRules
) -> pd.DataFrame:
    """Exact where the thread's switch record covers the time, /proc where it does not.

    A /proc episode is kept only when it overlaps no reported exact episode of its thread and covers
    some time the switch record does not: before the thread's first or after its last switch (eBPF
    started late, or the thread is not a target of the probes), or a hole (exact.timeline_gaps). Where
    the record covers a /proc episode and the exact rules found no stall, the exact timeline wins: it
    saw every switch that the 2 ms reads could only infer.
    """
    reported = _excess_filter(exact, interval, rules) if len(exact) else exact
    if proc.empty:
        return exact
    span = data.span.set_index("tid")
    first = span["first_ns"].reindex(proc["tid"]).to_numpy(dtype=float)
    last = span["last_ns"].reindex(proc["tid"]).to_numpy(dtype=float)
    start = proc["start_ns"].to_numpy(dtype=float)
    end = proc["end_ns"].to_numpy(dtype=float)
    outside = np.where(np.isnan(first), end - start, np.clip(first - start, 0, None) + np.clip(end - last, 0, None))
    keep = np.zeros(len(proc), dtype=bool)
    gaps = data.gaps
    for i, (tid, s, e) in enumerate(zip(proc["tid"].to_numpy(), start, end, strict=True)):  # per episode
        mine = gaps[gaps["tid"] == tid]
        in_gaps = (np.minimum(mine["end_ns"].to_numpy(), e) - np.maximum(mine["start_ns"].to_numpy(), s)).clip(0).sum()
        same = reported[reported["tid"] == tid] if len(reported) else reported
        clash = len(same) and bool(((same["start_ns"] < e) & (same["end_ns"] > s)).any())
        keep[i] = (outside[i] + in_gaps) > 0 and not clash
    kept = proc[keep].assign(in_hole=True)
    if exact.empty:
        return kept.reset_index(drop=True)
    return pd.concat([exact, kept], ignore_index=True) if len(kept) else exact


STALL_COLUMNS = [
    "tid", "pid", "comm", "start_ns", "end_ns", "duration_ns", "verdict", "stall_ns", "excess_ns", "share",
    "components", "run_ns", "runqueue_ns", "io_ns", "fault_ns", "lock_ns", "reclaim_ns", "unknown_ns",
    "uncounted_ns", "idle_ns", "minflt", "majflt", "d_reads", "s_reads", "reads", "cpus", "core_types", "policy",
    "period_ns", "windows", "blkio_ns", "iowait_ns", "ts_blkio_ns", "invol_switches", "basis", "waker_tid", "waker",
    "priority_inversion", "ran_instead_tid", "ran_instead", "block_requests", "suspect", "suspect_tid", "evidence",
    "sources", "undecided", "why",
]  # fmt: skip


def empty_stalls(undecided: list[str] | None = None) -> pd.DataFrame:
    out = pd.DataFrame({c: pd.Series(dtype=object) for c in STALL_COLUMNS})
    out.attrs["undecided"] = list(undecided or [])
    return out


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
        "pressure_windows": ("pressure_io", "sum"),
        "sparse_windows": ("sparse_wakeup", "sum"),
        "pressure_ns": ("io_pressure_ns", "max"),
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


def _thread_info(chosen: pd.DataFrame, profiles: pd.DataFrame) -> pd.DataFrame:
    """tid comm period_ns why utilization (share of wall time busy: on CPU or runnable) of each thread."""
    info = chosen[["tid", "comm", "period_ns", "why"]].copy()
    util = profiles.set_index("tid")
    busy = (util["on_cpu_ns"] + util["runqueue_ns"]) / util["wall_ns"].where(util["wall_ns"] > 0)
    info["utilization"] = busy.reindex(info["tid"]).fillna(0.0).to_numpy()
    return info


def _attach_threads(episodes: pd.DataFrame, chosen: pd.DataFrame, profiles: pd.DataFrame) -> pd.DataFrame:
    out = episodes.merge(_thread_info(chosen, profiles), on="tid", how="left")
    out["duration_ns"] = out["end_ns"] - out["start_ns"]
    out["policy"] = [
        policy_label(p, r) for p, r in zip(out["policy_code"].tolist(), out["rtprio"].tolist(), strict=True)
    ]
    return out


def _finish_components(episodes: pd.DataFrame, sources: dict[str, bool]) -> pd.DataFrame:
    major = episodes["majflt"].to_numpy() > 0
    d_time = episodes["c_d"].to_numpy().astype(np.int64)
    lock = episodes["c_lock"].to_numpy().astype(np.int64)
    unknown = episodes["c_unknown"].to_numpy().astype(np.int64)
    # A D-state wait while major faults rose is the kernel reading pages in: the fault's, not an io's.
    episodes["run_ns"] = episodes["c_run"].astype(np.int64)
    episodes["runqueue_ns"] = episodes["c_runqueue"].astype(np.int64)
    episodes["fault_ns"] = (episodes["c_fault_cpu"].to_numpy() + np.where(major, d_time, 0)).astype(np.int64)
    # With block-IO delay from taskstats (delay accounting), io is the wait time the kernel accounted as
    # block IO, whatever letters the reads caught: it is taken from the D time first, then from waits
    # read in other states (a missed wake-up read in S, others). D time it did not account is not block
    # IO (a kernel lock, a journal commit: DESIGN.md) and becomes unknown. Without it, the letters decide.
    # The D windows' off time is known to a window only: when the blkio delay covers at least half of it,
    # all of it counts as block IO.
    blkio = episodes["ts_blkio_ns"].astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)
    known = ~np.isnan(blkio) & ~major
    covered = np.where(
        np.nan_to_num(blkio) >= R.BLKIO_COVER_SHARE * d_time, np.maximum(np.nan_to_num(blkio), d_time), blkio
    )
    io = np.where(major, 0, np.where(known, np.minimum(np.nan_to_num(covered), d_time + unknown + lock), d_time))
    io = io.astype(np.int64)
    from_d = np.minimum(io, d_time)
    from_unknown = np.minimum(io - from_d, unknown)
    from_lock = np.minimum(io - from_d - from_unknown, lock)
    not_block = np.where(known, d_time - from_d, 0)
    episodes["io_ns"] = io
    episodes["lock_ns"] = np.where(known, lock - from_lock, lock).astype(np.int64)
    episodes["unknown_ns"] = (np.where(known, unknown - from_unknown, unknown) + not_block).astype(np.int64)
    episodes["not_block_ns"] = not_block.astype(np.int64)
    # Reclaim (taskstats: direct reclaim, thrashing, compaction delays). The kernel gets into reclaim
    # from an allocation, usually inside a page fault, so its time is taken out of fault first, then
    # of run (on CPU), then of io (thrashing waits on pages being read back).
    reclaim = np.zeros(len(episodes), dtype=np.int64)
    for name in RECLAIM_COLUMNS:
        if name in episodes:
            reclaim += episodes[name].astype("Int64").fillna(0).to_numpy(dtype=np.int64)
    parts = {cause: episodes[f"{cause}_ns"].to_numpy() for cause in R.RECLAIM_TAKEN_FROM}
    parts, placed = R.take_reclaim(reclaim, parts)
    for cause, values in parts.items():
        episodes[f"{cause}_ns"] = values
    episodes["reclaim_ns"] = placed
    components = episodes[[f"{c}_ns" for c in CAUSES]].to_numpy(dtype=np.int64)
    episodes["stall_ns"], episodes["verdict"], episodes["share"] = R.decide(components, CAUSES)
    explained = d_time + lock + unknown
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
