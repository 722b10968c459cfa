"""Synthetic captures whose counters follow the kernel's real accounting, for unit tests and benchmarks.

A thread is described as a timeline of segments (on CPU in user mode, on CPU in the kernel, runnable on a
run queue, asleep S, asleep D). Sampling that timeline at read times reproduces what /proc shows, with the
kernel's quirks (DESIGN.md, "Kernel facts"):

- `run_ns` (schedstat 1, se.sum_exec_runtime) of a thread that is on a CPU grows only when update_curr()
  runs: at the scheduler tick (CONFIG_HZ, 250 here: every 4 ms) and at a switch-out. A read in the middle
  of a long run therefore lags by up to one tick.
- `wait_ns` (schedstat 2, sched_info.run_delay) is added at switch-in (sched_info_arrive), so a thread
  waiting on a run queue shows nothing until it finally runs.
- `slices` (schedstat 3, pcount) counts switch-ins.
- minflt/majflt are live (the fault handler increments them); utime/stime are clock ticks.
- The state letter is a snapshot at the read.

Times are CLOCK_MONOTONIC-like integer ns starting at `t0`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from capture.format import Capture

USER, SYS, RUNNABLE, SLEEP, BLOCKED = 0, 1, 2, 3, 4  # segment kinds
ON_CPU = (USER, SYS)
STATE_LETTER = {USER: "R", SYS: "R", RUNNABLE: "R", SLEEP: "S", BLOCKED: "D"}
MS = 1_000_000
US = 1_000
HZ_TICK_NS = 4 * MS  # CONFIG_HZ=250 on the project's machine
CLK_TCK = 100


@dataclass
class Timeline:
    """One thread's life as segments; gaps between segments are sleep (S)."""

    tid: int
    comm: str
    pid: int = 1000
    policy: int = 0
    rtprio: int = 0
    nice: int = 0
    cpu: int = 0
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    kinds: list[int] = field(default_factory=list)
    minflt: list[int] = field(default_factory=list)  # faults taken during the segment (spread evenly)
    majflt: list[int] = field(default_factory=list)
    cpu_changes: list[tuple[int, int]] = field(default_factory=list)  # (t_ns, cpu) from then on

    def add(self, start: int, end: int, kind: int, minflt: int = 0, majflt: int = 0) -> int:
        if end <= start:
            return start
        if self.ends and start < self.ends[-1]:
            raise ValueError(f"segment at {start} overlaps the previous one ending at {self.ends[-1]}")
        self.starts.append(int(start))
        self.ends.append(int(end))
        self.kinds.append(kind)
        self.minflt.append(minflt)
        self.majflt.append(majflt)
        return int(end)

    def extend(self, starts: np.ndarray, ends: np.ndarray, kinds: np.ndarray) -> None:
        """Many segments at once (sorted, not overlapping, all after the existing ones)."""
        keep = ends > starts
        self.starts.extend(np.asarray(starts)[keep].tolist())
        self.ends.extend(np.asarray(ends)[keep].tolist())
        self.kinds.extend(np.asarray(kinds)[keep].tolist())
        self.minflt.extend([0] * int(keep.sum()))
        self.majflt.extend([0] * int(keep.sum()))

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return (
            np.asarray(self.starts, dtype=np.int64),
            np.asarray(self.ends, dtype=np.int64),
            np.asarray(self.kinds, dtype=np.int8),
            np.asarray(self.minflt, dtype=np.int64),
            np.asarray(self.majflt, dtype=np.int64),
        )


@dataclass
class Episode:
    cause: str  # run runqueue io reads fault lock majfault
    cycle: int  # which callback it is injected in
    ms: float


def periodic(
    tl: Timeline,
    *,
    t0: int,
    duration_ns: int,
    period_ns: int,
    work_ns: int = 300 * US,
    wake_delay_ns: int = 15 * US,
    episodes: Iterable[Episode] = (),
    faults_per_ms: int = 480,
    seed: int = 0,
) -> list[tuple[str, int, int]]:
    """An audio-like callback thread sleeping on an absolute clock; returns ground truth (cause, start, end).

    Each cycle: woken at t0 + k * period (after a short run-queue delay), runs `work_ns`, sleeps to the
    next period. An episode inside a cycle adds its time where the cause puts it; a cycle that ends past
    the next wake-up time starts the next callback at once, without sleeping (no switch-in), as a real
    absolute-clock loop does.
    """
    rng = np.random.default_rng(seed)
    by_cycle = {e.cycle: e for e in episodes}
    truth: list[tuple[str, int, int]] = []
    end_of_previous = t0
    k = 0
    jitter = rng.integers(0, 5 * US, size=int(duration_ns // period_ns) + 2)
    while True:
        nominal = t0 + k * period_ns
        if nominal >= t0 + duration_ns:
            break
        wake = nominal + int(jitter[k])
        t = end_of_previous
        if t <= wake:  # asleep until the timer fires, then runnable for a short while, then switched in
            t = tl.add(t, wake, SLEEP) if t < wake else t
            t = tl.add(t, t + wake_delay_ns, RUNNABLE)
        episode = by_cycle.get(k)
        work = int(work_ns * (0.9 + 0.2 * rng.random()))
        if episode is None:
            t = tl.add(t, t + work, USER)
        else:
            d = int(episode.ms * MS)
            head = work // 3
            t = tl.add(t, t + head, USER)
            start = t
            if episode.cause == "run":
                t = tl.add(t, t + d, USER)
            elif episode.cause == "fault":
                t = tl.add(t, t + d, SYS, minflt=int(faults_per_ms * d / MS))
            elif episode.cause == "majfault":
                t = tl.add(t, t + d, BLOCKED, majflt=max(1, d // (200 * US)))
            elif episode.cause == "runqueue":
                t = tl.add(t, t + d, RUNNABLE)  # preempted: runnable, not running
            elif episode.cause == "io":
                t = tl.add(t, t + d, BLOCKED)
            elif episode.cause == "reads":  # back-to-back small reads a fast disk serves: 31 us issuing, 29 us D
                end = t + d
                while t < end:
                    t = tl.add(t, min(t + 31 * US, end), SYS)
                    t = tl.add(t, min(t + 29 * US, end), BLOCKED)
            elif episode.cause == "lock":
                t = tl.add(t, t + d, SLEEP)  # futex wait: interruptible sleep
            else:
                raise ValueError(episode.cause)
            truth.append((episode.cause, start, t))
            t = tl.add(t, t + work - head, USER)
        end_of_previous = t
        k += 1
    tl.add(end_of_previous, t0 + duration_ns + period_ns, SLEEP)
    return truth


def busy(tl: Timeline, *, t0: int, duration_ns: int, slice_ns: int = 3 * MS, wait_ns: int = 1 * MS) -> None:
    """A CPU-bound SCHED_OTHER thread sharing its CPU: runs a slice, waits on the run queue, again."""
    t = t0
    while t < t0 + duration_ns:
        t = tl.add(t, t + slice_ns, USER)
        t = tl.add(t, t + wait_ns, RUNNABLE)


def random_waker(
    tl: Timeline, *, t0: int, duration_ns: int, rate_hz: float, run_ns: int = 100 * US, seed: int = 1
) -> None:
    """A thread woken at random (Poisson) times, each time running briefly."""
    rng = np.random.default_rng(seed)
    n = int(duration_ns / 1e9 * rate_hz * 1.5) + 10
    gaps = rng.exponential(1e9 / rate_hz, size=n).astype(np.int64) + run_ns + 10 * US
    t = t0
    for gap in gaps:
        wake = t + int(gap)
        if wake >= t0 + duration_ns:
            break
        t = tl.add(t, wake, SLEEP)
        t = tl.add(t, t + 10 * US, RUNNABLE)
        t = tl.add(t, t + run_ns, USER)


def random_waker_fast(
    tl: Timeline, *, t0: int, duration_ns: int, rate_hz: float, run_ns: int = 100 * US, seed: int = 1
) -> None:
    """`random_waker`, vectorised (for long benchmark captures)."""
    rng = np.random.default_rng(seed)
    n = int(duration_ns / 1e9 * rate_hz * 1.2) + 10
    gaps = rng.exponential(1e9 / rate_hz, size=n).astype(np.int64) + run_ns + 10 * US
    wake = t0 + np.cumsum(gaps)
    wake = wake[wake < t0 + duration_ns - run_ns - 10 * US]
    runnable_end = wake + 10 * US
    run_end = runnable_end + run_ns
    sleep_start = np.r_[t0, run_end[:-1]]
    starts = np.stack([sleep_start, wake, runnable_end], axis=1).ravel()
    ends = np.stack([wake, runnable_end, run_end], axis=1).ravel()
    kinds = np.tile(np.array([SLEEP, RUNNABLE, USER]), len(wake))
    tl.extend(starts, ends, kinds)


def busy_fast(tl: Timeline, *, t0: int, duration_ns: int, slice_ns: int = 3 * MS, wait_ns: int = 1 * MS) -> None:
    """`busy`, vectorised."""
    n = duration_ns // (slice_ns + wait_ns) + 1
    begin = t0 + np.arange(n, dtype=np.int64) * (slice_ns + wait_ns)
    starts = np.stack([begin, begin + slice_ns], axis=1).ravel()
    ends = np.stack([begin + slice_ns, begin + slice_ns + wait_ns], axis=1).ravel()
    kinds = np.tile(np.array([USER, RUNNABLE]), n)
    tl.extend(starts, ends, kinds)


def _tick_floor(t: np.ndarray) -> np.ndarray:
    return (t // HZ_TICK_NS) * HZ_TICK_NS


class SampledThread:
    """One thread's timeline, prepared once so that reading it at many times is a few binary searches."""

    def __init__(self, tl: Timeline) -> None:
        self.tl = tl
        starts, ends, kinds, minflt, majflt = tl.arrays()
        self.starts, self.ends, self.kinds, self.minflt, self.majflt = starts, ends, kinds, minflt, majflt
        on = np.isin(kinds, ON_CPU)
        # On-CPU stretches: adjacent on-CPU segments (user <-> kernel) are one stretch: no switch between them.
        contiguous = np.r_[False, on[:-1] & (ends[:-1] == starts[1:])] if len(on) else np.zeros(0, dtype=bool)
        self.stretch_start = on & ~contiguous
        self.stretch_id = np.cumsum(self.stretch_start) - 1
        self.first_seg_of_stretch = np.flatnonzero(self.stretch_start)
        self.on = on
        self.dur = ends - starts
        self.cum_on = np.r_[0, np.cumsum(np.where(on, self.dur, 0))]
        self.cum_rq = np.r_[0, np.cumsum(np.where(kinds == RUNNABLE, self.dur, 0))]
        self.cum_slices = np.r_[0, np.cumsum(self.stretch_start)]
        self.cum_min = np.r_[0, np.cumsum(minflt)]
        self.cum_maj = np.r_[0, np.cumsum(majflt)]
        self.cum_sys = np.r_[0, np.cumsum(np.where(kinds == SYS, self.dur, 0))]
        self.letters = np.array([STATE_LETTER[k] for k in range(5)])

    def read(self, read_ns: np.ndarray) -> pd.DataFrame:
        """What /proc shows for this thread at each read time (kernel accounting, module docstring)."""
        tl = self.tl
        starts, ends, kinds, dur = self.starts, self.ends, self.kinds, self.dur
        read_ns = np.asarray(read_ns, dtype=np.int64)
        seg = np.searchsorted(starts, read_ns, side="right") - 1
        seg_c = np.maximum(seg, 0)
        inside = (seg >= 0) & (read_ns < ends[seg_c]) if len(starts) else np.zeros(len(read_ns), dtype=bool)
        done = np.where(seg >= 0, seg_c + np.where(inside, 0, 1), 0)  # segments finished before the read
        # Completed on-CPU time: stretches that ended (switch-out accounts them)...
        cur_on = inside & self.on[seg_c] if len(starts) else inside
        first_seg = (
            self.first_seg_of_stretch[np.maximum(np.where(cur_on, self.stretch_id[seg_c], 0), 0)]
            if (len(self.first_seg_of_stretch))
            else np.zeros(len(read_ns), dtype=np.int64)
        )
        stretch_begin = np.where(cur_on, starts[first_seg] if len(starts) else 0, 0)
        completed = np.where(cur_on, self.cum_on[first_seg], self.cum_on[np.where(seg >= 0, seg_c + 1, 0)])
        # ...but a read inside a stretch sees only what the last tick accounted since the stretch began.
        lagged = np.where(cur_on, np.maximum(_tick_floor(read_ns) - stretch_begin, 0), 0)
        run_ns = completed + lagged
        # Run-queue waits are accounted when the wait ends (switch-in).
        wait_ns = self.cum_rq[done]
        slices = self.cum_slices[np.where(seg >= 0, seg_c + 1, 0)]
        # Faults are counted live, spread evenly across their segment.
        frac = np.where(inside, (read_ns - starts[seg_c]) / np.maximum(dur[seg_c], 1), 0.0) if len(starts) else 0.0
        part_min = np.where(inside, np.floor(self.minflt[seg_c] * frac), 0) if len(starts) else 0
        part_maj = np.where(inside, np.floor(self.majflt[seg_c] * frac), 0) if len(starts) else 0
        minf = self.cum_min[done] + np.asarray(part_min, dtype=np.int64)
        majf = self.cum_maj[done] + np.asarray(part_maj, dtype=np.int64)
        # utime/stime: clock ticks of accounted time per mode.
        in_sys = inside & (kinds[seg_c] == SYS) if len(starts) else inside
        sys_ns = self.cum_sys[done] + np.where(in_sys, read_ns - (starts[seg_c] if len(starts) else 0), 0)
        sys_ns = np.minimum(sys_ns, run_ns)
        tick_ns = 1_000_000_000 // CLK_TCK
        state = np.where(inside, self.letters[kinds[seg_c]] if len(starts) else "S", "S")
        cpu = np.full(len(read_ns), tl.cpu, dtype=np.int16)
        for t_change, new_cpu in sorted(tl.cpu_changes):
            cpu[read_ns >= t_change] = new_cpu
        n = len(read_ns)
        return pd.DataFrame(
            {
                "t_ns": read_ns,
                "tid": np.full(n, tl.tid, dtype=np.int32),
                "pid": np.full(n, tl.pid, dtype=np.int32),
                "run_ns": run_ns.astype(np.int64),
                "wait_ns": wait_ns.astype(np.int64),
                "slices": slices.astype(np.int64),
                "state": state,
                "minflt": minf,
                "majflt": majf,
                "utime": (np.maximum(run_ns - sys_ns, 0) // tick_ns).astype(np.int64),
                "stime": (sys_ns // tick_ns).astype(np.int64),
                "nice": np.full(n, tl.nice, dtype=np.int8),
                "cpu": cpu,
                "rtprio": np.full(n, tl.rtprio, dtype=np.int16),
                "policy": np.full(n, tl.policy, dtype=np.int8),
                "blkio_ticks": np.zeros(n, dtype=np.int64),
            }
        )


def sample_timeline(tl: Timeline, read_ns: np.ndarray) -> pd.DataFrame:
    """What /proc shows for this thread at each read time (kernel accounting semantics, module docstring)."""
    return SampledThread(tl).read(read_ns)


def sample(
    timelines: Sequence[Timeline],
    *,
    t0: int,
    duration_ns: int,
    interval_ns: int = 2 * MS,
    read_spacing_ns: int = 2 * US,
) -> pd.DataFrame:
    """Samples of every thread at every tick; thread j is read `j * read_spacing_ns` after the tick."""
    ticks = np.arange(0, duration_ns // interval_ns + 1, dtype=np.int64)
    frames = []
    for j, tl in enumerate(timelines):
        read_ns = t0 + ticks * interval_ns + j * read_spacing_ns
        frame = SampledThread(tl).read(read_ns)
        frame.insert(0, "tick", ticks.astype(np.uint32))
        frames.append(frame)
    samples = pd.concat(frames, ignore_index=True).sort_values(["tick", "tid"], kind="stable")
    return samples.reset_index(drop=True)


def meta(interval_ns: int = 2 * MS, *, cpus: Sequence[int] = (0, 1), core_types: dict | None = None) -> dict:
    return {
        "recording": {"interval_ns": interval_ns},
        "host": {"clk_tck": CLK_TCK},
        "cpus": {"online": list(cpus), "core_types": core_types or {}},
        "sources": {
            "sched": "none",
            "schedstats_compiled": False,
            "schedstats_enabled": False,
            "delayacct": False,
            "taskstats": False,
            "ebpf": False,
            "psi": False,
        },
    }


def threads_table(timelines: Sequence[Timeline], t0: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "t_ns": [t0] * len(timelines),
            "tid": [tl.tid for tl in timelines],
            "pid": [tl.pid for tl in timelines],
            "comm": [tl.comm for tl in timelines],
            "process": ["engine"] * len(timelines),
            "cmdline": ["engine --synthetic"] * len(timelines),
            "starttime": [0] * len(timelines),
        }
    )


def capture(
    timelines: Sequence[Timeline],
    *,
    t0: int,
    duration_ns: int,
    interval_ns: int = 2 * MS,
    truth: Sequence[tuple[str, int, int, int]] = (),
    **tables: pd.DataFrame,
) -> Capture:
    """An in-memory capture of these timelines; `truth` rows are (cause, tid, start_ns, end_ns)."""
    samples = sample(timelines, t0=t0, duration_ns=duration_ns, interval_ns=interval_ns)
    truth_df = pd.DataFrame(list(truth), columns=["cause", "tid", "start_ns", "end_ns"])
    return Capture.from_frames(
        meta=meta(interval_ns),
        trailer={"ticks": int(samples["tick"].max()) + 1, "missed_ticks": 0, "duration_ns": duration_ns},
        samples=samples,
        threads=threads_table(timelines, t0),
        truth=truth_df,
        **tables,
    )


T0 = 1_000_000_000_000  # an arbitrary CLOCK_MONOTONIC origin, far from zero like a real one


def audio_capture(
    episodes: Iterable[Episode] = (),
    *,
    seconds: float = 3.0,
    period_ns: int = 5_333_333,
    policy: int = 1,
    rtprio: int = 70,
    interval_ns: int = 2 * MS,
    extra: Sequence[Timeline] = (),
    seed: int = 0,
    work_ns: int = 300 * US,
) -> Capture:
    """The lab in miniature: `lab-audio` at 5.333 ms (FIFO 70 by default) plus given extra threads."""
    duration = int(seconds * 1e9)
    audio = Timeline(tid=1001, comm="lab-audio", policy=policy, rtprio=rtprio, cpu=1)
    truth = periodic(
        audio, t0=T0, duration_ns=duration, period_ns=period_ns, episodes=episodes, seed=seed, work_ns=work_ns
    )
    rows = [(cause, audio.tid, s, e) for cause, s, e in truth]
    return capture([audio, *extra], t0=T0, duration_ns=duration, interval_ns=interval_ns, truth=rows)


# --------------------------------------------------------------------------------------------------
# eBPF event tables for the same timelines (what catch-load --ebpf would have recorded)


@dataclass
class Waker:
    """Who ends the sleeps (S or D) that end within [start_ns, end_ns]: a task, or an interrupt."""

    start_ns: int
    end_ns: int
    tid: int
    comm: str
    context: str = "task"  # task, hardirq, softirq, hrtimer


@dataclass
class Partner:
    """The task on the other side of the thread's switches within [start_ns, end_ns]."""

    start_ns: int
    end_ns: int
    tid: int
    comm: str
    prio: int


def kernel_prio(tl: Timeline) -> int:
    """include/linux/sched/prio.h: 99 - rtprio for FIFO/RR, 120 + nice otherwise."""
    return 99 - tl.rtprio if tl.policy in (1, 2) else 120 + tl.nice


def ebpf_tables(
    timelines: Sequence[Timeline],
    *,
    wakers: Sequence[Waker] = (),
    partners: Sequence[Partner] = (),
    faults: bool = True,
) -> dict[str, pd.DataFrame]:
    """sched_switch, sched_wakeup and page_faults rows for these timelines (all treated as targets).

    Each on-CPU stretch (adjacent USER/SYS segments) starts with a switch-in and ends with a switch-out
    whose prev_state is the letter of what follows: S (sleep), D (blocked), R (runnable: preempted). A
    sleep followed by a runnable segment is woken at that segment's start (waking, then wakeup 1 us
    later, but never past the switch-in); one followed directly by a stretch, at the switch-in. Sleeps
    are ended by an hrtimer (S) or a softirq (D) unless `wakers` says otherwise; the other side of each
    switch is the idle task unless `partners` says otherwise. SYS segments with minflt get that many
    page_fault_user events spread evenly.
    """
    switch_rows: list[dict] = []
    wake_rows: list[dict] = []
    fault_rows: list[dict] = []

    def partner_at(t: int) -> tuple[int, str, int]:
        for p in partners:
            if p.start_ns <= t <= p.end_ns:
                return p.tid, p.comm, p.prio
        return 0, "swapper/0", 120

    def waker_at(t: int, letter: str) -> tuple[int, str, str]:
        for w in wakers:
            if w.start_ns <= t <= w.end_ns:
                return w.tid, w.comm, w.context
        return (0, "swapper/0", "hrtimer") if letter == "S" else (0, "swapper/0", "softirq")

    for tl in timelines:
        starts, ends, kinds, minflt, _ = tl.arrays()
        prio = kernel_prio(tl)
        on = np.isin(kinds, ON_CPU)
        n = len(kinds)
        for i in range(n):
            if on[i] and (i == 0 or not on[i - 1] or ends[i - 1] != starts[i]):  # a stretch begins
                other_tid, other_comm, other_prio = partner_at(int(starts[i]))
                switch_rows.append(
                    {"t_ns": int(starts[i]), "cpu": tl.cpu, "prev_tid": other_tid, "prev_pid": None,
                     "prev_comm": other_comm, "prev_prio": other_prio, "prev_state": 0, "prev_state_char": "R",
                     "next_tid": tl.tid, "next_pid": tl.pid, "next_comm": tl.comm, "next_prio": prio}
                )  # fmt: skip
            if on[i] and (i == n - 1 or not on[i + 1] or starts[i + 1] != ends[i]):  # a stretch ends
                following = kinds[i + 1] if i + 1 < n and starts[i + 1] == ends[i] else SLEEP
                letter = STATE_LETTER[int(following)] if following in (SLEEP, BLOCKED, RUNNABLE) else "S"
                other_tid, other_comm, other_prio = partner_at(int(ends[i]))
                switch_rows.append(
                    {"t_ns": int(ends[i]), "cpu": tl.cpu, "prev_tid": tl.tid, "prev_pid": tl.pid,
                     "prev_comm": tl.comm, "prev_prio": prio, "prev_state": 0, "prev_state_char": letter,
                     "next_tid": other_tid, "next_pid": None, "next_comm": other_comm, "next_prio": other_prio}
                )  # fmt: skip
            if kinds[i] in (SLEEP, BLOCKED) and i + 1 < n and starts[i + 1] == ends[i]:
                t = int(ends[i])
                letter = STATE_LETTER[int(kinds[i])]
                waker_tid, waker_comm, context = waker_at(t, letter)
                switch_in = int(ends[i + 1]) if kinds[i + 1] == RUNNABLE else t
                for kind, at in (("waking", t), ("wakeup", min(t + 1_000, switch_in))):
                    wake_rows.append(
                        {"t_ns": at, "cpu": tl.cpu, "kind": kind, "tid": tl.tid, "pid": tl.pid, "comm": tl.comm,
                         "prio": prio, "target_cpu": tl.cpu,
                         "waker_tid": waker_tid if kind == "waking" else None,
                         "waker_pid": (0 if waker_tid == 0 else waker_tid) if kind == "waking" else None,
                         "waker_comm": waker_comm if kind == "waking" else None,
                         "waker_context": context if kind == "waking" else None, "waker_function": None}
                    )  # fmt: skip
            if faults and kinds[i] == SYS and minflt[i] > 0:
                times = np.linspace(starts[i], ends[i], int(minflt[i]) + 2)[1:-1].astype(np.int64)
                for t in times:
                    fault_rows.append(
                        {"t_ns": int(t), "cpu": tl.cpu, "tid": tl.tid, "pid": tl.pid, "address": 0, "ip": 0,
                         "error_code": 6}
                    )  # fmt: skip
    sw = pd.DataFrame(switch_rows).sort_values("t_ns", kind="stable").reset_index(drop=True)
    wk = pd.DataFrame(wake_rows).sort_values("t_ns", kind="stable").reset_index(drop=True)
    sw["next_pid"] = pd.array(sw["next_pid"], dtype="Int64")
    sw["prev_pid"] = pd.array(sw["prev_pid"], dtype="Int64")
    wk["waker_tid"] = pd.array(wk["waker_tid"], dtype="Int64")
    wk["waker_pid"] = pd.array(wk["waker_pid"], dtype="Int64")
    out = {"sched_switch": sw, "sched_wakeup": wk}
    if faults:
        columns = ["t_ns", "cpu", "tid", "pid", "address", "ip", "error_code"]
        out["page_faults"] = pd.DataFrame(fault_rows, columns=columns).sort_values("t_ns").reset_index(drop=True)
    return out


def with_ebpf(cap: Capture, tables: dict[str, pd.DataFrame], *, faults: bool = True, block: bool = False) -> Capture:
    """The capture plus eBPF tables, its meta saying the probes were on."""
    meta = dict(cap.meta, sources=dict(cap.meta["sources"], ebpf=True))
    meta["ebpf"] = {"families": {"WITH_SCHED": True, "WITH_FAULTS": faults, "WITH_BLOCK": block}}
    frames = {name: cap.table(name) for name in cap.table_names}
    frames.update(tables)
    return Capture.from_frames(meta=meta, trailer=cap.trailer, **frames)
