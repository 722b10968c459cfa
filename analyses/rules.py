"""Every verdict rule and threshold, once: the /proc (sampled) path and the eBPF (exact) path.

Deciding lives here and in the analyses that apply these predicates (analyses.stalls for the /proc
windows, analyses.exact_stalls for the exact timeline, analyses.spikes, the plots, the export and the
lab's truth); the sentences that explain a verdict live in analyses.evidence. Why each value is what it
is: DESIGN.md ("Kernel facts" and "The rules"); the user-facing wording: README ("Verdicts").

Margins that depend on the sampling are given in sampling intervals and turned into ns with the
capture's own interval, so a capture recorded at 1 ms or 10 ms is judged by its own resolution.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# The causes a stall episode is split into, in the order of its `components` (both paths).
CAUSES = ("run", "runqueue", "io", "fault", "lock", "reclaim", "unknown")
# Taskstats delays that are reclaim: direct reclaim, thrashing, compaction (needs --taskstats).
RECLAIM_COLUMNS = ("ts_freepages_ns", "ts_thrashing_ns", "ts_compact_ns")
# Where reclaim time is taken from: the kernel reclaims from an allocation, usually inside a page
# fault, else on CPU, else while waiting (thrashing waits on pages being read back).
RECLAIM_TAKEN_FROM = ("fault", "run", "io")


@dataclass(frozen=True)
class StallRules:
    """Thresholds of the stall rules; the CLI's defaults are these values (DESIGN.md, "The rules")."""

    # A window is hot when on CPU + runnable fills this share of its wall time (/proc path, spikes).
    busy_fraction: float = 0.5
    # Faults per ms on CPU from which the CPU time is a fault storm (/proc windows; eBPF without fault events).
    fault_rate_per_ms: float = 20.0
    # None: half the period of a periodic thread, else MIN_STALL_INTERVALS sampling intervals.
    min_stall_ns: int | None = None
    # A run of windows without a switch-in must exceed period + this many intervals to be a missed wake-up.
    wake_margin_intervals: float = 0.25
    # A longer silence is a pause (transport stopped), not a stall.
    max_gap_ns: int = 1_000_000_000


DEFAULT_RULES = StallRules()

# A recorder that cannot read every thread within its interval (534 threads from /proc on 2 vCPUs: 78 % of
# ticks missed) leaves windows longer than asked. Its median read spacing (the trailer's interval_p50_ns) is
# the windows' length where it is at least this many intervals: a kept 2 ms tick jitters by microseconds, so
# a median this long means most ticks were missed. A rule that counts on a window's length takes it, as the
# period rule does (a thread woken in every 9.1 ms window has a period of 9.1 ms or less, not 9.1 ms).
KEPT_INTERVAL_MIN_FACTOR = 1.25


def kept_interval_ns(asked_ns: int, median_spacing_ns: float | None) -> int:
    """The length of the windows the recorder left: its median read spacing where most ticks were missed."""
    if median_spacing_ns is None or not median_spacing_ns >= KEPT_INTERVAL_MIN_FACTOR * asked_ns:
        return int(asked_ns)
    return int(median_spacing_ns)


LAB_INTERVAL_NS = 2_000_000  # the lab records at 2 ms: the truth's default when no capture says otherwise
MIN_STALL_INTERVALS = 2.0  # below two sampling intervals an estimate is at the resolution of the sampling
SETTLE_WAKEUPS = 3  # a periodic thread is in its rhythm after this many regular wake-ups
SETTLE_MARGIN_INTERVALS = 2.0  # a regular wake-up comes within a period plus this many intervals

# /proc suspects (analyses.evidence.add_suspects). A thread kept runnable waited for a CPU: the recorded thread
# that ran most on its CPUs meanwhile is named as the one that held them only when it ran at least this share
# of that wait. Below it, most of the CPU went to something the capture does not hold (another process, an
# interrupt, the hypervisor), and naming a thread that ran a sliver of it would blame the wrong one (a real
# jackd starved by a FIFO 90 hog outside the capture: fluidsynth named for 0.1 ms of a 13.6 ms wait).
RUNQUEUE_SUSPECT_MIN_SHARE = 0.5


def runqueue_suspect_held(suspect_run_ns: int, runqueue_ns: int) -> bool:
    """Whether the busiest recorded thread on a runnable thread's CPUs ran enough of its wait to be named."""
    return suspect_run_ns >= RUNQUEUE_SUSPECT_MIN_SHARE * runqueue_ns


def scheduling_rank(policy: int, rtprio: int) -> int:
    """Which thread the scheduler runs first: DEADLINE, then FIFO/RR by priority, then every other class
    (kernel/sched/core.c __pick_next_task walks the classes in that order; a woken real-time thread of a
    higher priority preempts a lower one at once, rt.c wakeup_preempt_rt)."""
    if policy == 6:  # SCHED_DEADLINE
        return 1000
    if policy in (1, 2):  # SCHED_FIFO, SCHED_RR
        return 100 + rtprio
    return 0  # SCHED_OTHER, BATCH, IDLE: the fair class, below every real-time one


def can_hold_cpu_against(holder_policy: int, holder_rtprio: int, victim_policy: int, victim_rtprio: int) -> bool:
    """Whether a thread of the holder's class and priority can keep a runnable victim off a CPU it may run on:
    only one the scheduler ranks as high or higher (equal FIFO priorities do not preempt each other). A
    SCHED_OTHER thread named as the hog of a FIFO thread's wait is a wrong suspect: the time went to
    something the capture does not hold (interrupts, the hypervisor; or RT throttling, sched_rt_runtime_us)."""
    return scheduling_rank(holder_policy, holder_rtprio) >= scheduling_rank(victim_policy, victim_rtprio)


# eBPF (exact) path.
MINOR_NS = 100_000  # a segment shorter than this at the edge of a busy span is ordinary (wake-up latency)
FAULT_GAP_NS = 1_000_000  # a pause this long ends a fault storm (at 20 faults/ms the mean gap is 50 us)
LOCK_OVERSLEEP = 1.25  # a sleep longer than this many periods missed at least one wake-up
USUAL_WAKER_SHARE = 0.2  # a waker that ends at least 1 in 5 of a thread's sleeps is part of its rhythm
BRACKET_TOLERANCE_NS = 50_000_000  # a counter read further than this from an episode edge does not bracket it
# Delay accounting starts a block-IO wait before the sched_switch tracepoint and ends it in
# try_to_wake_up() before the sched_wakeup tracepoint (kernel/sched/core.c): the two clocks differ by a
# few us per wait (measured: 5-7 us). D time within this much per wait of the blkio delay is block IO.
BLKIO_SLACK_PER_WAIT_NS = 20_000
# On-CPU time by the switch record that the thread's clock did not count (steal, interrupts) is taken out
# of its run from this much on: the tracepoints' and the rq clock's timestamps differ by a few us per
# switch (2-4 us measured on a busy SCHED_FIFO thread's 11-20 ms runs).
UNCOUNTED_MIN_NS = 100_000
# An unknown episode is the machine's (it held the thread on CPU: hypervisor steal or interrupts) when its
# uncounted on-CPU time is at least this share of its unknown time (that time counts it, with the
# undecided off-CPU time and D without block IO: analyses.exact_stalls). Such a chain link was itself held
# up, not waiting for its upstream (analyses.incidents); its headline says so (analyses.evidence).
MACHINE_HELD_MIN_SHARE = 0.5


def machine_held(verdict: Any, uncounted_ns: Any, unknown_ns: Any) -> bool:
    """One episode's test. Missing figures (None, NaN, NA: a /proc episode has no switch record) are not
    held."""
    if verdict != "unknown":
        return False
    try:
        uncounted, unknown = float(uncounted_ns), float(unknown_ns)
    except (TypeError, ValueError):
        return False
    return bool(uncounted > 0 and uncounted >= MACHINE_HELD_MIN_SHARE * unknown)  # NaN compares False


# /proc path with taskstats: a D window whose blkio delay covers at least this share of its D time is
# block IO for all of it (the window's off time is known to the window only).
BLKIO_COVER_SHARE = 0.5

# A thread reading a file in its callback is on CPU between its D waits: the syscall's return, its own
# loop, the next request's submission. On the read injections of issue 22 (O_DIRECT reads, a virtual
# disk answering in 66-105 us at the median) those runs were 20-37 us at the median, 55-76 us at p99,
# 110 us at most (2,535 runs, captures kept from `bench/incident_causes.py`): with a host that answered
# in 29 us, the CPU issuing the reads outweighed the waits and a 20 ms read read as `run` (a CI run,
# 2026-12-05). A run shorter than this between two D waits of one thread is the IO's own CPU.
IO_ISSUE_MAX_NS = 100_000


def issues_block_io(is_run: np.ndarray, duration_ns: np.ndarray, after_d_wait: np.ndarray,
                    before_d_wait: np.ndarray) -> np.ndarray:  # fmt: skip
    """Per segment of a thread's exact timeline: a run shorter than IO_ISSUE_MAX_NS with a D wait before it
    (across its wake-up latency) and one right after it."""
    short = np.asarray(duration_ns, dtype=np.int64) < IO_ISSUE_MAX_NS
    return (
        np.asarray(is_run, dtype=bool)
        & short
        & np.asarray(after_d_wait, dtype=bool)
        & np.asarray(before_d_wait, dtype=bool)
    )


# Jitter: an interval this close (a share of the period, at least the timing's resolution) to k x the
# period, k >= 2, is a lost wake-up.
LOST_WAKEUP_TOLERANCE = 0.1


def lost_wakeups_resolvable(period_ns: float, resolution_ns: float) -> bool:
    """Whether intervals timed to `resolution_ns` (0: exact) can tell a lost wake-up from an on-time one.
    A wake-up timed to one sampling interval reads as period +- resolution: when the period is at most
    twice the resolution that range reaches 2x the period less its tolerance (a 2.667 ms JACK period
    sampled at 2 ms reads 2, 2, 4 ms; every 4 ms read as a lost wake-up: measured, 346 of 1046 on
    captures/jack-starved-ebpf.ssf, where the engine's own cycle starts show 9)."""
    return resolution_ns == 0 or period_ns > 2 * resolution_ns


def wakeups_timed(period_ns: float, interval_ns: float) -> bool:
    """Whether /proc windows can time a thread's wake-ups one by one: a window holds at most one when the period
    is at least the sampling interval. A shorter one is not timed at all (said so, not guessed): the windows
    with a single switch-in are a biased few (on the Bitwig shape from /proc, windows of 11 ms at a 5.36 ms
    period: 26 of ~1100 wake-ups, a "delay maximum" of 47 us beside five 12 ms starvations)."""
    return bool(period_ns >= interval_ns)


# Spikes.
SPIKE_FACTOR = 5.0  # times the thread's typical (median) CPU per window
SPIKE_MIN_INTERVALS = 0.25  # the smallest spike, in sampling intervals


def is_hot(busy_ns: np.ndarray, wall_ns: np.ndarray, busy_fraction: float = DEFAULT_RULES.busy_fraction) -> np.ndarray:
    """A window where the thread was on CPU or runnable for at least `busy_fraction` of its wall time."""
    return busy_ns >= busy_fraction * wall_ns


def is_fault_storm(
    faults: np.ndarray, on_cpu_ns: np.ndarray, rate_per_ms: float = DEFAULT_RULES.fault_rate_per_ms
) -> np.ndarray:
    """CPU time taken by faults: at least `rate_per_ms` minor+major faults per ms on CPU (and some CPU)."""
    return (faults > 0) & (faults * 1_000_000 >= rate_per_ms * on_cpu_ns) & (on_cpu_ns > 0)


def read_in_d(state_end: np.ndarray, state_start: np.ndarray, state_d: int | np.integer[Any]) -> np.ndarray:
    """The read that starts or ends the window found the thread in D (a wait for IO spans one of them;
    a thread doing back-to-back IO is briefly R between requests, and one read may catch that)."""
    return (state_end == state_d) | (state_start == state_d)


def blocked_ns(
    state_end: np.ndarray, state_start: np.ndarray, off_cpu_ns: np.ndarray, state_d: int | np.integer[Any]
) -> np.ndarray:
    """Off-CPU time of a window read in D at either end: what the /proc path counts as io (or fault)."""
    return np.where(read_in_d(state_end, state_start, state_d), off_cpu_ns, 0)


# A thread with a period of its own is judged against its own period, with a tolerance that grows with
# it: a fixed margin suits an audio callback at 1.3-10 ms, but a 100 ms housekeeping thread (fluidsynth's
# nice-19 hotplug poller) sleeps 100.0 ms against a measured period of 99.4 ms: its timer slack (50 us per
# sleep by default) and the period's measurement error (a median of switch-in gaps) grow with the period.
# 5 % of 5.333 ms is 0.27 ms, under the sampled rule's 0.5 ms margin: audio periods up to 10 ms keep it.
PERIOD_TOLERANCE_FRACTION = 0.05


def period_limit_ns(period_ns: np.ndarray, margin_ns: np.ndarray | float) -> np.ndarray:
    """Per thread: the longest sleep that is still on time, `period + max(margin, fraction * period)`;
    NaN where the thread has no period (the rule does not apply)."""
    period = np.asarray(period_ns, dtype=np.float64)
    return period + np.maximum(np.asarray(margin_ns, dtype=np.float64), PERIOD_TOLERANCE_FRACTION * period)


def wake_limit_ns(period_ns: np.ndarray, interval_ns: int, rules: StallRules = DEFAULT_RULES) -> np.ndarray:
    """How long a periodic thread may stay off CPU without a switch-in before it missed a wake-up (the
    /proc rule): a period plus the sampling margin, or plus its own tolerance when that is larger."""
    return period_limit_ns(period_ns, rules.wake_margin_intervals * interval_ns)


def overslept_margin_ns(interval_ns: int, rules: StallRules = DEFAULT_RULES) -> int:
    """The margin past a period beyond which a callback's sleep was a missed wake-up (the truth's side of
    the missed wake-up rule: 0.5 ms at 2 ms sampling)."""
    return round(rules.wake_margin_intervals * interval_ns)


def min_stall_ns(period_ns: np.ndarray, interval_ns: int, rules: StallRules = DEFAULT_RULES) -> np.ndarray:
    """Per thread: the least stall (beyond its normal busy time) reported, and the shortest run that is
    significant in an exact episode: half the period of a periodic thread, two intervals otherwise."""
    if rules.min_stall_ns is not None:
        return np.full(len(period_ns), float(rules.min_stall_ns))
    return np.where(np.isnan(period_ns), MIN_STALL_INTERVALS * interval_ns, np.maximum(period_ns / 2.0, 0.0))


# A window this many sampling intervals long or longer was left long by the sampler (its ticks missed: the
# machine held it, or it had more to read than an interval holds). The busy-fraction test loses its edge as
# a window grows: a 12 ms starvation of a FIFO thread in a 27 ms window is 44 % of it (the Bitwig shape from
# /proc, 534 threads, a read every 11 ms at the median, five 12 ms FIFO 80 hogs: no episode at all).
LONG_WINDOW_INTERVALS = 2.0


def long_wait_in_window(
    runqueue_ns: np.ndarray, switches: np.ndarray, wall_ns: np.ndarray, min_stall: np.ndarray, interval_ns: int
) -> np.ndarray:
    """A window left long in which one wait for a CPU lasted at least the least stall reported (min_stall_ns):
    its runnable time was lived in at most `switches` waits, each ended by a switch-in (where the kernel
    accounts it), so the longest lasted at least runqueue / switches (a lower bound). Such a window is hot."""
    switches = np.asarray(switches, dtype=np.float64)
    longest = np.asarray(runqueue_ns, dtype=np.float64) / np.maximum(switches, 1.0)
    return (np.asarray(wall_ns) >= LONG_WINDOW_INTERVALS * interval_ns) & (switches > 0) & (longest >= min_stall)


def spike_min_ns(interval_ns: int) -> int:
    """The smallest CPU time per window that can be a spike: a quarter interval."""
    return int(interval_ns * SPIKE_MIN_INTERVALS)


def take_reclaim(reclaim_ns: np.ndarray, parts: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Carve reclaim time out of fault, then run, then io. Returns the parts left and the reclaim placed
    (reclaim beyond what those parts hold is not placed)."""
    out = dict(parts)
    remaining = reclaim_ns.copy()
    for name in RECLAIM_TAKEN_FROM:
        take = np.minimum(remaining, out[name])
        out[name] = out[name] - take
        remaining = remaining - take
    return out, reclaim_ns - remaining


def decide(components: np.ndarray, causes: Sequence[str] = CAUSES) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per episode (a row of ns per cause): the total stall, the verdict (the cause with the most ns), and
    that cause's share of the total (0 for an empty episode). The /proc and the exact rules both end here.
    """
    stall = components.sum(axis=1)
    top = components.argmax(axis=1)
    share = np.divide(components[np.arange(len(top)), top], stall, out=np.zeros(len(top)), where=stall > 0)
    return stall, np.array(causes)[top], share.round(3)


# --------------------------------------------------------------------------------------------------
# Engine cycles (analyses/engine.py): whether a JACK client was late in a cycle

# The next cycle start the poller saw is the cycle's very next one when it came less than this many
# periods after it: the driver starts a cycle a period after the one before, so a longer gap holds a
# start the poller did not see (or a driver half a period late, which a poll cannot tell apart).
NEXT_START_MAX_PERIODS = 1.5


def next_start_seen(start_ns: np.ndarray, following_ns: np.ndarray, period_ns: np.ndarray) -> np.ndarray:
    """Whether the next cycle start the capture holds (NaN: none) is the very next one."""
    return (following_ns - start_ns) < NEXT_START_MAX_PERIODS * period_ns


def jack_client_late(
    awake_ns: np.ndarray,
    finish_ns: np.ndarray,
    resignal_ns: np.ndarray,
    finish_at_resignal_ns: np.ndarray,
    following_ns: np.ndarray,
    very_next: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """jack2's own test of a client in a cycle: late when the next cycle's start came before it finished.
    jack2 makes it at that start (JackEngine::Process -> ProcessCurrent -> CheckXRun: a client whose state
    is not Finished, or that finished after the start, is an xrun). Times in ns, NaN where not seen;
    `awake_ns` is the wake-up, else the signal. Per client-cycle (late, known):
    - late: its finish stamp, read when it was signalled again (at or after the next start), was older
      than its wake-up (or it had never finished); or its finish came after a later start the capture
      holds (the very next one came no later);
    - on time: it finished by the very next start (`very_next`: the next start the capture holds is it);
    - else unknown: no finish seen, or the very next start was not seen and the finish came before the
      next one seen. The driver stamps its start when it resumes the graph, a few us after the date
      jack2 checks against: a finish in between is on time here and late to jack2, never the reverse."""
    unfinished = ~np.isnan(resignal_ns) & ~(finish_at_resignal_ns >= awake_ns)
    late = unfinished | (finish_ns > following_ns)
    on_time = ~late & very_next & (finish_ns <= following_ns)
    return late, late | on_time


# --------------------------------------------------------------------------------------------------
# Engine threads (analyses/threads.py, engine_periods): which threads of an engine's processes run its cycle

# A thread of an engine's process is switched in once a cycle or a few times (PipeWire's data loop: by its
# timer, then by its client's finish), and its period measured from /proc is no k-th of the engine's: the
# windows with a switch-in (analyses/threads.py) count the wake-ups of one cycle that fall in one sampling
# window as one. The data loop's two wake-ups, 0.3-0.6 ms apart (the Python test client's callback), read
# 4.0-5.3 ms for a 5.333 ms quantum in seven recordings here (2.69-2.86 ms by switch-ins), anywhere between
# a half and one period as that gap varies: a range, not the k-th fractions. Read so, a thread at up to
# ENGINE_WAKES_MAX wake-ups a cycle (less the agreement of one graph's threads) runs the engine's cycle.
ENGINE_WAKES_MAX = 4
ENGINE_PERIOD_FRACTION = 0.02  # as IncidentRules.same_period_fraction: one graph's threads agree within 0.4 %
# Above the period: on a loaded machine the driver skips cycles (recorded cycle starts 5.42-5.48 ms apart on
# average at a 5.333 ms quantum) and a late tick's window holds two wake-ups: the test client, woken once a
# cycle, measured 5.37-5.88 ms (up to 10.2 % over). 48 kHz and 44.1 kHz graphs differ by 8.8 %, but only
# the engine's own processes are matched here.
ENGINE_SLOW_FRACTION = 0.15


def runs_engine_cycle(measured_ns: np.ndarray, period_ns: float) -> np.ndarray:
    """Per thread of an engine's process: whether its measured period (NaN: not periodic) is that of a
    thread switched in one to ENGINE_WAKES_MAX times each engine cycle of `period_ns`."""
    measured = np.asarray(measured_ns, dtype=np.float64)
    low = period_ns / ENGINE_WAKES_MAX * (1.0 - ENGINE_PERIOD_FRACTION)
    return (measured >= low) & (measured <= period_ns * (1.0 + ENGINE_SLOW_FRACTION))


# A thread of an engine's process that /proc found no period for (its switch-ins per 200 ms block were not
# steady: analyses.threads) runs the engine's cycle when its mean interval between switch-ins over the
# capture fits runs_engine_cycle. On a loaded machine the driver skips and delays cycles and the counts per
# block wander: a PipeWire recording here beside a process using 90 % of a core and 4-37 % steal had the
# data loop at 46 % steady blocks and the client at 49 % (the bar is half), so no thread was a link, every
# episode was an incident of its own, and the daemon's SCHED_OTHER main loop (measured periodic at 85 ms,
# its switch-ins 100-150 ms apart by eBPF in 222 of 440 intervals) gave 172 `lock` incidents, 7 of 8 hog
# starvations split in two. Their mean rates still told them apart: the data loop 340.9 switch-ins a
# second (2.93 ms, woken about twice a 5.333 ms cycle), the client 170.8 (5.85 ms), the main loop 13.4
# (74.6 ms, no link). A thread /proc did find a period for is judged by that period alone.
# A mean rate is a cycle's only over a life of several of the periodicity test's 200 ms blocks: jack_connect,
# a client for 15-30 ms, was switched in 13 times in 30 ms (435 a second) on a loaded machine.
ENGINE_RATE_MIN_LIFE_NS = 1_000_000_000
# And only of a thread switched in through its life, as one running the cycle is in every 200 ms block (a
# driver skipping cycles on a loaded machine skips cycles, not blocks): jackd --no-realtime's request thread,
# recorded from the server's start (catch-load --match first), was switched in 4146 times, all but 7 in its
# first 3 s while seven clients registered: woken in 20 % of its blocks, 274 a second on average, 3.2 an
# 11.6 ms cycle. By that mean it was taken for the server's cycle thread (107 a second, woken
# in every block), and the driver's late cycles were rooted at a thread asleep through them (998 ms "late
# wake-up" incidents). The graph's cycle threads were woken in 100 % of their blocks there, every other
# thread of those processes in 6-20 %.
ENGINE_RATE_MIN_WOKEN_BLOCKS = 0.75


def runs_engine_cycle_by_rate(
    wakeups_per_s: np.ndarray, period_ns: float, life_ns: np.ndarray, woken_blocks: np.ndarray | None = None
) -> np.ndarray:
    """Per thread of an engine's process without a period of its own: whether its mean switch-in rate
    (per second over its `life_ns` in the capture; NaN or 0: unknown) is that of a thread switched in one to
    ENGINE_WAKES_MAX times each engine cycle of `period_ns` (runs_engine_cycle), over a life of at least
    ENGINE_RATE_MIN_LIFE_NS, and, where `woken_blocks` gives the share of its life's blocks in which it was
    switched in (NaN or None: not known, not judged), in at least ENGINE_RATE_MIN_WOKEN_BLOCKS of them."""
    rate = np.asarray(wakeups_per_s, dtype=np.float64)
    mean = np.divide(1e9, rate, out=np.full(len(rate), np.nan), where=np.nan_to_num(rate) > 0)
    lived = np.nan_to_num(np.asarray(life_ns, dtype=np.float64)) >= ENGINE_RATE_MIN_LIFE_NS
    share = np.full(len(rate), np.nan) if woken_blocks is None else np.asarray(woken_blocks, dtype=np.float64)
    throughout = np.isnan(share) | (share >= ENGINE_RATE_MIN_WOKEN_BLOCKS)
    return runs_engine_cycle(mean, period_ns) & lived & throughout


# --------------------------------------------------------------------------------------------------
# Incidents (analyses/incidents.py): grouping the episodes of one late engine cycle


@dataclass(frozen=True)
class IncidentRules:
    """Thresholds of the incident rules."""

    # Links of one engine run at the engine's period; measured periods of one graph's threads agreed within
    # 0.4 % (jackd and five clients at 2.666-2.675 ms); 2 % keeps 48 kHz and 44.1 kHz graphs apart (8.8 %).
    same_period_fraction: float = 0.02
    # Episodes that start within one period of the incident's end belong to the same (or the next) late
    # cycle: a starved driver delays every link of its cycle and often the next cycle too.
    join_periods: float = 1.0
    # A node the engine reports woken (awake - signal) or running (finish - awake) this share of the
    # period or more is late in that cycle (engine source).
    engine_late_share: float = 0.5
    # Machine evidence for a late wake-up: steal or irq+softirq time of at least this much over the
    # incident's system interval is worth naming (a jiffy is 10 ms at USER_HZ 100: any nonzero delta).
    machine_evidence_min_ns: int = 1
    # The sampler saw a gap (every thread unread at once) when two consecutive ticks are this many
    # intervals apart.
    sampler_gap_intervals: float = 2.5


# An engine's xrun report or a missed deadline this close to an incident belongs to it (JACK reported
# xruns ~0.3 ms after a starved driver ran again; a lab callback's deadline precedes its episode's end).
XRUN_JOIN_NS = 20_000_000


# --------------------------------------------------------------------------------------------------
# Engine xruns (analyses/engine.py): the reports of one xrun, one row

# jack2 notifies each client's xrun callback once for the driver's late wake-up and once per client it
# finds unfinished when the next cycle begins (JackEngine::CheckXRun): one xrun arrives as several
# callbacks, 10-314 us apart on the stored captures at a 2.667 ms period (31 queued behind a stalled
# notification thread came 11-15 us apart), a second check of a still unfinished graph 1.9 ms after the
# first (jack-signalled-late). PipeWire reports each cycle it finds unfinished at the next one's start,
# a period apart. A report within this many periods of the previous one is the same xrun: a run of late
# cycles is one, as it is one incident (IncidentRules.join_periods); the quarter period above one covers
# the jitter of callbacks stamped on arrival in libjack's non-real-time notification thread.
XRUN_REPORT_GAP_PERIODS = 1.25
# The server log is read at once from a pipe, within 50 ms from a followed file (samplers/engine/jack.py,
# follow_log): a log line stamped up to this long after an xrun's last report belongs to that xrun.
SERVER_LOG_LAG_NS = 100_000_000
# A log line can also come before the xrun's first counted report. jack2 logs "client = X was not
# finished" and queues the xrun notification in one step (JackEngine::CheckXRun); the server then calls
# its clients one after the other, waiting for each, so a client that holds its notification thread
# holds every later client's callback (captures/jack-client-spins.ssf: the cue client, Python spinning
# 20 ms in its process callback with the GIL held; the recorder's callbacks came 15.8 ms after the line
# that announced them). A line that follows no xrun joins the first one that begins this long after it.
SERVER_LOG_LEAD_NS = 100_000_000


# Farther apart, two reports are still one xrun while the graph never recovered between them: the engine's
# cycles recorded between them (at least one) include none that ended within its period before the
# later report. jack2 notifies a client unfinished at every cycle start, but the callbacks arrive through
# the server's non-real-time notification thread: a client spinning 20 ms (the README's "wait for jackd"
# use, the recorder attached first) gave callbacks 2.3-5.4 ms apart at a 2.667 ms period, while none of the
# 8 cycles between them ended; the cycle that did end came after the last. A late report that did not
# follow a recovery is not a new xrun.
def overrun_goes_on(cycles_between: np.ndarray, recovered_between: np.ndarray) -> np.ndarray:
    """Per gap between consecutive reports: whether the engine's recorded cycles between them show the
    graph still overrunning (some recorded, none ended within its period before the later report)."""
    return (np.asarray(cycles_between) > 0) & (np.asarray(recovered_between) == 0)


def same_xrun(gap_ns: np.ndarray, period_ns: float) -> np.ndarray:
    """Per gap between consecutive reports of an engine: whether the later report is of the same xrun
    (without a known period only reports stamped at the same instant are one)."""
    gap = np.asarray(gap_ns, dtype=np.float64)
    if not np.isfinite(period_ns) or period_ns <= 0:
        return gap <= 0
    return gap <= XRUN_REPORT_GAP_PERIODS * period_ns


# A cycle met its deadline when it ended within one period of its start: by then the next cycle is due
# (jack2 JackEngine::CheckXRun finds a client unfinished at the next cycle's start; PipeWire reports a node
# unfinished at the next quantum). One rule for `forensics system`'s deadline misses and for the cycles that
# end an xrun (engine_xruns: a recovery between two reports).
def ended_late(end_rel_ns: Any, period_ns: Any) -> Any:
    """Per cycle: whether it ended more than a period after its start (numpy arrays or nullable pandas
    columns; a missing end or period compares as neither)."""
    return end_rel_ns > period_ns


# A gap between two recorded cycle starts of a driver this close (a share of the period) to a whole
# number k >= 2 of periods is k cycles run on the driver's clock, k - 1 of them not recorded: jack2's
# cycles are polled (samplers/engine/cycles.py), and a poller held off its CPU for a period misses one
# (stored captures: 5.319-5.342 ms gaps at 2.667 ms, within 0.6 %; cycle starts jitter by 25 us). A
# driver woken late starts off that grid (jack2's timed driver re-anchors its clock after an xrun:
# 13.409 and 14.331 ms measured), and the cycles due before its late start never ran.
CYCLE_GRID_TOLERANCE = 0.02


def missed_cycles(gap_ns: np.ndarray, period_ns: np.ndarray) -> np.ndarray:
    """Per gap between consecutive recorded cycle starts of one driver: the cycles that were due in it
    and never started (0 for a gap of at most a period, or one on the driver's grid of whole periods:
    cycles the record missed, not the engine)."""
    ratio = np.asarray(gap_ns, dtype=np.float64) / np.asarray(period_ns, dtype=np.float64)
    on_grid = np.abs(ratio - np.round(ratio)) <= CYCLE_GRID_TOLERANCE
    missed = np.where(on_grid | ~np.isfinite(ratio), 0, np.floor(np.nan_to_num(ratio)) - 1)
    return np.maximum(missed, 0).astype(np.int64)


# The recording ends at its last tick (the trailer's ended_ns). Its probes still see the machine until the
# writer detaches them, after the engine sources have left: what they show then is the tool's own end. On
# issue 22's PipeWire graph (recorder first, eBPF) the only incident away from the 40 injections was there:
# the data loop waited 5 ms for the daemon's main thread, 6 ms after the last tick, while catch-load's
# profiler client disconnected. A group of episodes that begins after the recording ended is no incident.
def after_the_recording(start_ns: np.ndarray, ended_ns: int | None) -> np.ndarray:
    """Per group of episodes (its first start), whether it began after the recording's end (None: a capture
    without its trailer, whose end is not known: nothing is after it)."""
    start = np.asarray(start_ns, dtype=np.float64)
    if ended_ns is None:
        return np.zeros(len(start), dtype=bool)
    return start > float(ended_ns)


# Attaching to an engine is the tool's own doing too. PipeWire's data loop, asleep between two cycles, is
# woken by the daemon's main thread when a client binds the profiler (module-profiler's invoke into the
# data loop; pw-top's bind does the same): on issue 22's PipeWire graph (graph first, eBPF) the data loop
# slept 4.1 ms and was woken by the main thread 0.42 ms after catch-load's source sent its bind, 1.2 ms
# before its timer was due and 1.2 ms before the engine recorded its first cycle; it read as a 4.1 ms
# `lock` incident, the only one away from 40 injections. From the source's attach until the engine's first
# record after it (at most a period: a graph that records nothing then is late, not attaching), the engine
# is answering the tool, and no cycle of it is on record: a group of episodes that ended then is no
# incident. A wait inside the engine's own cycle cannot be told from it there (no record says the cycle
# was due); the window is one engine period or less per attach.
def ended_at_an_attach(
    end_ns: np.ndarray, attached_ns: np.ndarray, first_record_ns: np.ndarray, period_ns: float
) -> np.ndarray:
    """Per group of one engine's episodes (its last end): whether it ended in an attach window of that
    engine's source, from an attach (`attached_ns`, one per attach) to the engine's first cycle record
    after it (`first_record_ns`, NaN: none), at most one period (`period_ns`, NaN: unknown) later."""
    end = np.asarray(end_ns, dtype=np.float64)[:, None]
    attached = np.asarray(attached_ns, dtype=np.float64)[None, :]
    until = np.fmin(np.asarray(first_record_ns, dtype=np.float64)[None, :], attached + float(period_ns))
    return np.asarray(((end >= attached) & (end <= until)).any(axis=1), dtype=bool)


# An incident is a late engine cycle or a run of them (DESIGN.md, "Engines, cycles and incidents"). Where the
# engine's records hold every cycle around a group of episodes one by one (successive recorded starts less
# than 1 + engine_late_share periods apart: none the poller missed, none started late), each of them ended
# within its period (ended_late) and none was due and never started, and the engine reported no xrun there,
# the engine says its graph met every deadline: the waits are ordinary (a client switched in 0.9 ms late at
# a 2.667 ms period still finished in time), no finding. On issue 22's graph (fluidsynth, four jalv with calf
# and lsp plugins, ecasound in parallel) 3 groups of episodes in 13 s from eBPF were such, none a late cycle.
# A record with a hole, a cycle of unknown end or lateness, or no recorded cycle there decides nothing.
def engine_on_time(start_gaps_ns: np.ndarray, period_ns: float, late: np.ndarray, known: np.ndarray, xruns: int,
                   late_share: float) -> bool:  # fmt: skip
    """Whether an engine's records show every cycle around a group of episodes on time: `start_gaps_ns`
    from each recorded start there to the one before it, `late` / `known` per cycle (missed its deadline
    or started after cycles that never started; whether that is known), `xruns` the engine reported there."""
    gaps = np.asarray(start_gaps_ns, dtype=np.float64)
    if len(gaps) == 0 or xruns > 0 or not np.isfinite(period_ns) or period_ns <= 0:
        return False
    whole = bool(np.all(gaps < (1.0 + late_share) * period_ns))
    return whole and bool(np.all(np.asarray(known, dtype=bool))) and not bool(np.any(np.asarray(late, dtype=bool)))
