"""Read tiers: the threads that matter every tick, the rest once per slow interval (README, "Read tiers").

Reading every thread every tick cannot keep 2 ms for a few hundred threads (two preads each, ~1-2 us a
read on a VM), and most of a big engine's threads sleep. So each thread is on one of two tiers:

- fast: read every tick. The engine's threads (a process an engine source reports as its client), real-
  time threads, threads matching --fast, and threads seen running in the last DEMOTE_QUIET_NS.
- slow: read once every `period` ticks, on its own phase: slow thread k is read at ticks where
  tick % period == phase(k), the phases filled evenly, so every tick reads about (slow threads / period)
  of them and the tick's cost stays flat.

A slow thread is promoted when its slow read shows, since its previous slow read, its schedstat run
counter moved by PROMOTE_RUN_NS or more (earns_fast_tier: running, not waiting for a CPU), or its stat
text shows a real-time policy: decided within one slow interval of the change, and read every tick once
the recorder next rebuilds its read lists (at most once per slow interval).
A fast thread that is not pinned (engine, real-time, --fast) goes back to the slow tier after
DEMOTE_QUIET_NS without a schedstat change.

The skip (README, "Read tiers"): a thread whose schedstat text is unchanged since its last read, and that
was not in R at that read, has not been switched in since (a switch-in bumps schedstat's third field), so
its stat counters (faults, utime, stime, block-IO ticks) cannot have moved: the stat read is skipped and the
writer carries the last values forward. A thread in R is always re-read: it may be running on, and a
running thread's schedstat lags until the next scheduler tick. What can change without a switch-in (a
wake-up still waiting for a CPU; a policy set from outside; the CPU chosen at wake-up) is re-read at least
once per slow interval: every thread's stat is read on its phase tick whatever its schedstat says.

The same reasoning bounds the costlier sources read beside a thread's row (the sched file, taskstats):
counters_may_have_moved says at which of its reads they are read, and adds_to_proc whether taskstats is
worth querying beside the sched file at all.

This module is the bookkeeping only (no /proc access): the recorder asks it which threads to read at
which tick and tells it what the reads showed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from capture.vocabulary import RT_POLICIES

SLOW_INTERVAL_NS = 20_000_000  # default slow tier: promotion within 20 ms, a tenth of the reads at 2 ms
DEMOTE_QUIET_NS = 250_000_000  # a fast thread quiet this long goes back to the slow tier
# A slow thread is promoted when, between two of its slow reads, it ran this long: a thread that wakes for
# 10 us once a second (a DAW's timers, its UI) is not worth every tick; one that starts burning a CPU
# crosses it at its next slow read. Waiting for a CPU does not promote (earns_fast_tier says why).
PROMOTE_RUN_NS = 500_000

# --slow-interval auto (catch-load's default): every thread every tick, and the tiers at SLOW_INTERVAL_NS from
# the moment the targets have more threads than AUTO_TIERS_ABOVE_THREADS (once; they stay on). Reading every
# thread every tick cost the whole tool (recorder + writer) about 0.4 % of a core per thread, the tiers a
# fraction of that: 30, 100 and 200 threads 16, 42 and 85 % without, 8.5, 15 and 20 % with
# (bench/sampler_bench.py --threads 30 100 200 --slow off 20ms, 2026-12-07), and a Bitwig-sized engine (533
# threads) cannot be read every tick at 2 ms at all (README "The Bitwig shape"). A small graph (a JACK server
# and a few clients: tens of threads) keeps every thread at every tick, its full resolution.
SLOW_AUTO = -1
AUTO_TIERS_ABOVE_THREADS = 100

FAST = "fast"
SLOW = "slow"


def counters_may_have_moved(moved_tick: int, last_stat: bytes, tick: int) -> bool:
    """At a tick a thread is read, whether its counters in the sched file and taskstats may have moved since
    its last read: its schedstat moved at this tick (it was switched in since), or its last stat line says R
    or D. Those counters move in the thread's own context while it runs (kernel/sched/core.c __schedule,
    kernel/delayacct.c), or at its wake-up, after which it is R until it runs: the wake-up's migration
    (set_task_cpu), the schedstats sleep and block sums (update_stats_enqueue_sleeper), and the block-IO
    delay, which the waker ends (try_to_wake_up -> delayacct_blkio_end). R: running on (its schedstat lags
    until the next scheduler tick) or runnable (a load balancer may migrate it); D: its wake-up may come
    before a stat read shows R. A policy set from outside while the thread sleeps changes the sched file's
    policy and prio lines, no counter: its stat line carries it (the samples' policy), and the next sched
    row. Not read otherwise: the next read's increments cover the gap."""
    return moved_tick == tick or last_stat[last_stat.rfind(b")") + 2 :][:1] in (b"R", b"D")


def adds_to_proc(delay_accounting: bool | None, sched_read: bool) -> bool:
    """Whether a thread's taskstats reply holds what its /proc reads do not (--taskstats auto). Without delay
    accounting a reply's counters are /proc's: cpu_count and cpu_delay_total are schedstat's switch-ins and
    run_delay, run and fault counts schedstat's and stat's, nvcsw and nivcsw the sched file's switch counts
    (kernel/taskstats.c fill_stats, kernel/delayacct.c delayacct_add_tsk), and the writer stores its delays as
    unknown (taskstats_table); what is left, the IO byte counts, no analysis uses. So beside the sched file a
    thread is queried only while delay accounting is on or not known to be off. Measured on the Bitwig shape
    (bench/sampler_bench.py --bitwig --slow 20ms, README "Read tiers"): the queries of its real-time threads
    were about a tenth of the recorder's CPU and 2.5 of the 8.1-8.6 bytes stored per thread-sample."""
    return delay_accounting is not False or not sched_read


# Why a thread is on its tier (the `why` column of the tiers table).
WHY_START = "start"  # its first tier (slow: not yet seen running)
WHY_ENGINE = "engine"
WHY_RT = "realtime"
WHY_MATCH = "--fast"
WHY_RAN = "ran"
WHY_QUIET = "quiet"
WHY_ALL = "all fast"  # tiers off: every thread is read every tick
# A process's leader: its stat line carries the process's thread count, read whole at every tick (never
# skipped) so that threads created and ended between two scans are counted (samplers/unseen.py).
WHY_LEADER = "leader"

STAT_POLICY_TOKEN = 38  # token index after the last ')' of a stat line (samplers.procfs.STAT_POLICY)


def earns_fast_tier(old: bytes, new: bytes) -> bool:
    """Whether a slow thread's schedstat moved enough between two slow reads to read it every tick: it ran
    PROMOTE_RUN_NS or more; True when a text is unreadable (read it every tick rather than guess).

    Its own running, not its waits for a CPU: a wait is the machine's doing, and on a machine the recorder
    loads partly the recorder's own, so promoting on it feeds back. Measured (bench/sampler_bench.py --bitwig
    --slow 20ms, README "Read tiers"): with 0.5 ms of running or waiting as the bar, the Bitwig shape's 408
    threads that wake for microseconds once a second were promoted 127 times a second, each then read every
    tick for DEMOTE_QUIET_NS without moving again: 202-210 threads read a tick, against 167 on running
    only. Missed ticks, two rounds each: 20-34 % against 9-11 %, and 41-61 % with a wait of a tick as the
    bar (a missed tick is a wait of a tick for every thread it held up); in three later rounds both rules
    missed 23-31 %, so the ticks missed are mostly noise of the machine here. A slow thread kept waiting is
    still read once per slow interval, its wait in its windows."""
    try:
        return int(new.split(maxsplit=1)[0]) - int(old.split(maxsplit=1)[0]) >= PROMOTE_RUN_NS
    except (ValueError, IndexError):
        return True


def stat_policy(raw: bytes) -> int | None:
    """Field 41 of a stat line, or None when the text is not one."""
    tokens = raw[raw.rfind(b")") + 2 :].split()
    try:
        return int(tokens[STAT_POLICY_TOKEN])
    except (IndexError, ValueError):
        return None


@dataclass
class TierState:
    tid: int
    pid: int
    comm: str
    tier: str
    phase: int
    pinned: str | None = None  # why it may not leave the fast tier
    last_change_ns: int = 0  # when its schedstat last moved (or it was promoted)


@dataclass
class Tiers:
    interval_ns: int
    slow_interval_ns: int = SLOW_INTERVAL_NS
    fast: re.Pattern[str] | None = None
    quiet_ns: int = DEMOTE_QUIET_NS
    threads: dict[int, TierState] = field(default_factory=dict)
    engine_pids: set[int] = field(default_factory=set)
    rows: list[dict[str, object]] = field(default_factory=list)  # tier changes not yet handed to the writer
    dirty: bool = True  # the read lists must be rebuilt

    def __post_init__(self) -> None:
        self.period = max(1, self.slow_interval_ns // self.interval_ns) if self.slow_interval_ns > 0 else 1
        self._phase_load = [0] * self.period

    @property
    def enabled(self) -> bool:
        return self.period > 1

    def is_slow(self, tid: int) -> bool:
        state = self.threads.get(tid)
        return state is not None and state.tier == SLOW

    def period_ns(self, tier: str) -> int:
        return self.interval_ns * (self.period if tier == SLOW else 1)

    def switched_on(self, slow_interval_ns: int, t_ns: int) -> Tiers:
        """These threads on tiers of `slow_interval_ns` from t_ns (--slow-interval auto, the targets grown past
        AUTO_TIERS_ABOVE_THREADS): each placed as if just added, its pins kept (a row each)."""
        new = Tiers(self.interval_ns, slow_interval_ns, self.fast, self.quiet_ns, engine_pids=set(self.engine_pids))
        new.rows = self.rows  # changes not yet handed over come first
        for state in self.threads.values():
            new.add(state.tid, state.pid, state.comm, os.SCHED_FIFO if state.pinned == WHY_RT else None, t_ns)
        return new

    # membership ----------------------------------------------------------------------------------
    def add(self, tid: int, pid: int, comm: str, policy: int | None, t_ns: int) -> None:
        phase = min(range(self.period), key=self._phase_load.__getitem__)
        self._phase_load[phase] += 1
        state = TierState(tid, pid, comm, SLOW, phase, last_change_ns=t_ns)
        self.threads[tid] = state
        state.pinned = self._pin(state, policy)
        why = state.pinned or WHY_START
        if not self.enabled:
            why = WHY_ALL
        self._set(state, FAST if (state.pinned or not self.enabled) else SLOW, t_ns, why, force=True)

    def remove(self, tid: int) -> None:
        state = self.threads.pop(tid, None)
        if state is not None:
            self._phase_load[state.phase] -= 1
            self.dirty = True

    def set_engine_pids(self, pids: Iterable[int], t_ns: int) -> None:
        new = set(pids) - self.engine_pids
        if not new:
            return
        self.engine_pids |= new
        for state in self.threads.values():
            if state.pid in new and state.pinned is None:
                state.pinned = WHY_ENGINE
                self._set(state, FAST, t_ns, WHY_ENGINE)

    def _pin(self, state: TierState, policy: int | None) -> str | None:
        if state.pid in self.engine_pids:
            return WHY_ENGINE
        if policy in RT_POLICIES:
            return WHY_RT
        if self.fast is not None and self.fast.search(state.comm):
            return WHY_MATCH
        if state.tid == state.pid:
            return WHY_LEADER
        return None

    # what the reads showed -----------------------------------------------------------------------
    def ran(self, tid: int, t_ns: int) -> None:
        """Its schedstat moved since its last read."""
        state = self.threads.get(tid)
        if state is None:
            return
        state.last_change_ns = t_ns
        if state.tier == SLOW:
            self._set(state, FAST, t_ns, WHY_RAN)

    def policy_seen(self, tid: int, policy: int | None, t_ns: int) -> None:
        """A slow read's stat text changed: a real-time policy pins the thread fast; leaving it unpins."""
        state = self.threads.get(tid)
        if state is None or policy is None:
            return
        if policy in RT_POLICIES and state.pinned is None:
            state.pinned = WHY_RT
            state.last_change_ns = t_ns
            self._set(state, FAST, t_ns, WHY_RT)
        elif policy not in RT_POLICIES and state.pinned == WHY_RT:
            state.pinned = None  # demoted like any thread once quiet

    def demote_quiet(self, t_ns: int) -> None:
        if not self.enabled:
            return
        for state in self.threads.values():
            if state.tier == FAST and state.pinned is None and t_ns - state.last_change_ns >= self.quiet_ns:
                self._set(state, SLOW, t_ns, WHY_QUIET)

    def _set(self, state: TierState, tier: str, t_ns: int, why: str, force: bool = False) -> None:
        if state.tier == tier and not force:
            return
        state.tier = tier
        self.dirty = True
        self.rows.append(
            {
                "t_ns": t_ns,
                "tid": state.tid,
                "pid": state.pid,
                "tier": tier,
                "interval_ns": self.period_ns(tier),
                "why": why,
            }
        )

    def take_rows(self) -> list[dict[str, object]]:
        rows, self.rows = self.rows, []
        return rows

    # the read lists ------------------------------------------------------------------------------
    def phase_split(self, ordered_tids: list[int]) -> tuple[list[int], list[list[int]], list[list[int]]]:
        """The threads read at each phase's ticks, in parts that phases share: the fast threads' indices
        into ordered_tids (the same in every phase), per phase the positions among them whose stat is
        forced there (their own phase; elsewhere it is skipped when their schedstat did not move), and
        per phase its slow threads (stat always read).

        One pass over the threads: the recorder rebuilds its read lists up to once per slow interval, and
        with every fast thread restated in each phase that was a fifth of its CPU at 534 threads."""
        threads = self.threads
        fast: list[int] = []
        forced_at: list[list[int]] = [[] for _ in range(self.period)]
        slow_at: list[list[int]] = [[] for _ in range(self.period)]
        everywhere = not self.enabled  # tiers off: one phase, every stat read
        for index, tid in enumerate(ordered_tids):
            state = threads[tid]
            if state.tier == FAST:
                if everywhere or state.tid == state.pid:
                    for forced in forced_at:
                        forced.append(len(fast))
                else:
                    forced_at[state.phase].append(len(fast))
                fast.append(index)
            else:
                slow_at[state.phase].append(index)
        self.dirty = False
        return fast, forced_at, slow_at
