"""The lab's episodes are real: checked from outside the lab with the kernel's own counters.

Each test starts `python -m forensics.lab` and watches it from this process: a thread reads lab-audio's
/proc/<pid>/task/<tid>/schedstat and stat about every 0.6 ms, and the engine threads' context-switch
counts every ~20 ms, until the lab exits. The truth file only says WHEN each episode was; what happened in
that window is read from the kernel's counters here, never from the lab's own log.

Counters of a thread move at a tick or a context switch (DESIGN.md), so a window is measured from the last
sample before the episode's start to the first sample 2 ms after its end (by then lab-audio has finished
the callback and gone to sleep, which updates them). The few extra ms of a window hold only the
callback's ~0.2 ms of DSP and sleep, so they can only add a little run time to a window.

Margins: the machine is shared (2 CPUs, other developers' jobs), and the lab runs SCHED_FIFO as root, so
its episodes barely move; the bounds are the issue's (run >= 0.8 D, wait >= 0.5 D, off CPU for most of D),
and the opposite checks (a run episode does not wait, an io episode does not run) are loose.
"""

from __future__ import annotations

import bisect
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest

from analyses.truth import as_injected
from forensics.lab.linux import fifo_permitted, machine_steal_ns
from forensics.lab.truth import Truth, read_truth
from tests.helpers import REPO, child_env, children, process_stat, running, wait_for_quiet_machine

AFTER_END_NS = 2_000_000
# Whether this machine lets us use SCHED_FIFO at the lab's priority (root with CAP_SYS_NICE and an RT
# budget in its cgroup, or an RLIMIT_RTPRIO): the lab then must get it, and its competitor too.
FIFO_PERMITTED = fifo_permitted(71)


def lab_env() -> dict[str, str]:
    return child_env()


@dataclass
class Sample:
    t_ns: int
    run_ns: int
    wait_ns: int
    slices: int
    minflt: int
    majflt: int
    state: str


@dataclass
class Watch:
    """What the watcher saw of one lab run."""

    pid: int
    audio_tid: int = 0
    samples: list[Sample] = field(default_factory=list)
    # comm -> (t_ns, voluntary switches) series for lab-audio and the series stages
    switches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    # tid -> (comm, pid, policy, rtprio), of the lab and every process it started
    threads: dict[int, tuple[str, int, int, int]] = field(default_factory=dict)
    comms_of_engine: set[str] = field(default_factory=set)
    # (t_ns, the machine's hypervisor steal in ns: forensics.lab.linux.machine_steal_ns), every 20 ms
    steal: list[tuple[int, int]] = field(default_factory=list)

    def window(self, start_ns: int, end_ns: int) -> tuple[Sample, Sample]:
        times = [s.t_ns for s in self.samples]
        before = bisect.bisect_left(times, start_ns) - 1
        after = bisect.bisect_left(times, end_ns + AFTER_END_NS)
        assert before >= 0 and after < len(self.samples), "the watcher did not see around this episode"
        return self.samples[before], self.samples[after]

    def states(self, start_ns: int, end_ns: int) -> Counter[str]:
        return Counter(s.state for s in self.samples if start_ns <= s.t_ns <= end_ns)


def _read(fd: int) -> bytes:
    return os.pread(fd, 4096, 0)


def _thread_info(pid: int, tid: int) -> tuple[str, int, int, int] | None:
    try:
        raw = Path(f"/proc/{pid}/task/{tid}/stat").read_bytes()
    except OSError:
        return None
    comm = raw[raw.find(b"(") + 1 : raw.rfind(b")")].decode()
    fields = raw[raw.rfind(b")") + 2 :].split()
    return comm, pid, int(fields[38]), int(fields[37])  # stat 41 policy, 40 rt_priority


def _voluntary(pid: int, tid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/task/{tid}/status").read_bytes()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith(b"voluntary_ctxt_switches"):
            return int(line.split()[1])
    return None


def _watch(proc: subprocess.Popen[bytes], watch: Watch, cpus: list[int] | None = None) -> None:
    pid = proc.pid
    if cpus:
        os.sched_setaffinity(0, cpus)  # this thread only (0 = the calling thread)
    if FIFO_PERMITTED:
        # SCHED_FIFO 1, as the recorder's sampler takes (samplers/recorder.py): above every SCHED_OTHER task
        # (lab-holder's busy loop and other load kept a nice-0 watcher off the CPU through whole 30 ms lock
        # episodes), below the lab's own real-time threads (70, 71), which it must not delay.
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    deadline = time.monotonic() + 30
    while not watch.audio_tid:
        if proc.poll() is not None or time.monotonic() > deadline:
            return
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                if Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip() == "lab-audio":
                    watch.audio_tid = int(tid)
        except OSError:
            pass
        time.sleep(0.002)
    schedstat = os.open(f"/proc/{pid}/task/{watch.audio_tid}/schedstat", os.O_RDONLY)
    stat = os.open(f"/proc/{pid}/task/{watch.audio_tid}/stat", os.O_RDONLY)
    engine: list[tuple[str, int, int]] = []
    next_slow = 0
    try:
        while True:
            try:
                raw_schedstat, raw_stat = _read(schedstat), _read(stat)
            except (ProcessLookupError, FileNotFoundError):
                break
            if not raw_schedstat or not raw_stat:
                break
            now = time.monotonic_ns()
            run_ns, wait_ns, slices = (int(x) for x in raw_schedstat.split()[:3])
            fields = raw_stat[raw_stat.rfind(b")") + 2 :].split()
            watch.samples.append(
                Sample(now, run_ns, wait_ns, slices, int(fields[7]), int(fields[9]), fields[0].decode())
            )
            if now >= next_slow:  # every 20 ms: who is there, and the engine threads' switches
                next_slow = now + 20_000_000
                watch.steal.append((now, machine_steal_ns()))
                _survey(pid, watch, engine)
                for comm, owner, tid in engine:
                    count = _voluntary(owner, tid)
                    if count is not None:
                        watch.switches.setdefault(comm, []).append((time.monotonic_ns(), count))
            time.sleep(0.0005)
    finally:
        os.close(schedstat)
        os.close(stat)


def _survey(pid: int, watch: Watch, engine: list[tuple[str, int, int]]) -> None:
    for process in [pid, *children(pid, recursive=True)]:
        try:
            tids = os.listdir(f"/proc/{process}/task")
        except OSError:
            continue
        for tid_text in tids:
            tid = int(tid_text)
            if tid in watch.threads:
                continue
            info = _thread_info(process, tid)
            if info is None:
                continue
            watch.threads[tid] = info
            if process == pid:
                watch.comms_of_engine.add(info[0])
            if info[0] in ("lab-audio", "lab-main") or info[0].startswith("lab-stage-"):
                engine.append((info[0], process, tid))


def run_lab(
    tmp_path: Path, *args: str, stop_after: float | None = None, watcher_cpus: list[int] | None = None
) -> tuple[Watch, Truth, int]:
    """Run `python -m forensics.lab ARGS --truth FILE` under the watcher; (watch, truth, exit code)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    truth_path = tmp_path / "truth.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "forensics.lab", *args, "--quiet", "--truth", str(truth_path)],
        env=lab_env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    watch = Watch(proc.pid)
    watcher = threading.Thread(target=_watch, args=(proc, watch, watcher_cpus), daemon=True)
    watcher.start()
    if stop_after is not None:
        while not watch.audio_tid and proc.poll() is None:
            time.sleep(0.01)
        time.sleep(stop_after)
        proc.send_signal(signal.SIGTERM)
    try:
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    watcher.join(timeout=10)
    assert proc.returncode in (0, 128 + signal.SIGTERM), err.decode()
    assert watch.audio_tid, "no thread named lab-audio appeared"
    return watch, read_truth(truth_path), proc.returncode


# --------------------------------------------------------------------------------------------------


EPISODE_CAUSES = ("fault", "io", "lock", "run", "runqueue")
# At most this share of the episodes may go unscored (tests/recording.py: steal on this VM comes in bursts
# of a minute or two, and can take several episodes of a short run).
MAX_UNSCORED_SHARE = 0.5


def _watcher_gap_ns(watch: Watch, start_ns: int, end_ns: int) -> int:
    """How much of [start_ns, end_ns] the longest gap in the watcher's own samples covers: the watcher was
    kept off the CPU then, so its window around the episode holds that much time it could not place."""
    times = [s.t_ns for s in watch.samples]
    lo = max(bisect.bisect_right(times, start_ns) - 1, 0)
    hi = min(bisect.bisect_left(times, end_ns), len(times) - 1)
    covered = [min(b, end_ns) - max(a, start_ns) for a, b in zip(times[lo:hi], times[lo + 1 : hi + 1], strict=True)]
    return max(covered, default=end_ns - start_ns)


# The checks that count the watcher's own reads of the thread's state letter (D for io, S for lock) need
# reads inside the episode; the others compare cumulative counters, which a longer window only widens.
STATE_READ_CAUSES = ("io", "lock")


def _unscored(watch: Watch, episodes) -> list[bool]:  # type: ignore[no-untyped-def]
    """Per episode: not what its cause says by the lab's own record (analyses.truth.as_injected: the host
    stole time during it, or an off-CPU cause kept the thread on its CPU for most of it), or, for a cause
    judged by its state letters, the watcher was kept off the CPU through half of it (under load the
    watcher paused 18-30 ms through each 30 ms major-fault episode): its counters cannot show it."""
    made = as_injected(episodes, timing=True)
    return [
        not bool(ok)
        or (
            row.cause in STATE_READ_CAUSES
            and _watcher_gap_ns(watch, row.start_ns, row.end_ns) >= 0.5 * (row.end_ns - row.start_ns)
        )
        for ok, row in zip(made, episodes.itertuples(), strict=True)
    ]


def _skip_when_the_machine_made_nothing(episodes: pd.DataFrame, unscored: pd.Series) -> None:
    stolen = int((pd.to_numeric(episodes["steal_ns"], errors="coerce").fillna(0) > 0).sum())
    pytest.skip(
        f"the machine kept the lab from making its episodes in two runs: {int(unscored.sum())} of "
        f"{len(episodes)} not scored in the last ({stolen} with hypervisor steal); nothing to judge"
    )


@pytest.mark.slow
@pytest.mark.may_skip  # only when the host stole through the episodes of two runs: see the end of its loop
def test_each_episode_is_what_its_cause_says(tmp_path: Path) -> None:
    # Run once more, after waiting for a burst of steal to pass (up to 2 minutes: tests/recording.py), only
    # when more than half of the 10 episodes could not be scored: 6 of 10 had steal in one CI run.
    for attempt in (1, 2):
        watch, truth, _ = run_lab(
            tmp_path / f"attempt-{attempt}",
            "--episodes=run:2,runqueue:2,io:2,fault:2,lock:2",
            "--episode-ms=30",
            "--spacing=300ms",
            "--fault-pages=2000",
        )
        unscored_now = pd.Series(_unscored(watch, truth.episodes), index=truth.episodes.index)
        scored_causes = set(truth.episodes[~unscored_now]["cause"])
        if unscored_now.sum() <= MAX_UNSCORED_SHARE * len(truth.episodes) and scored_causes == set(EPISODE_CAUSES):
            break
        if attempt == 1:
            wait_for_quiet_machine(max_wait_s=120)
    else:
        # Twice the host (steal) or the load kept the lab from making its episodes: nothing here can be
        # judged. A machine state, not a defect (the lab's episodes, when made, are checked below).
        _skip_when_the_machine_made_nothing(truth.episodes, unscored_now)
    episodes = truth.episodes
    assert sorted(Counter(episodes["cause"]).items()) == [
        ("fault", 2),
        ("io", 2),
        ("lock", 2),
        ("run", 2),
        ("runqueue", 2),
    ]
    assert (episodes["tid"] == watch.audio_tid).all()
    comm, _pid, policy, rtprio = watch.threads[watch.audio_tid]
    assert comm == "lab-audio"
    if FIFO_PERMITTED:
        assert (policy, rtprio) == (1, 70), "SCHED_FIFO is permitted here: lab-audio must have it"
        assert truth.lab["audio"]["policy"] == "FIFO" and truth.lab["competitor_policy"] == "FIFO"
    else:  # three SCHED_OTHER competitors leave lab-audio about a quarter of the CPU it wants
        assert truth.lab["audio"]["policy"] == "OTHER" and truth.lab["competitor_policy"] == "OTHER"

    unscored = pd.Series(_unscored(watch, episodes), index=episodes.index)
    # Counted and printed, not scored; at most half of them, and each cause scored at least once.
    print(f"episodes not scored (not as injected, or not watched): {episodes[unscored]['cause'].tolist()}")
    assert unscored.sum() <= MAX_UNSCORED_SHARE * len(episodes), episodes[unscored][["cause", "start_ns", "steal_ns"]]
    assert set(episodes[~unscored]["cause"]) == set(EPISODE_CAUSES), episodes[unscored][["cause", "steal_ns"]]
    for row in episodes[~unscored].itertuples():
        d = row.end_ns - row.start_ns
        before, after = watch.window(row.start_ns, row.end_ns)
        run, wait = after.run_ns - before.run_ns, after.wait_ns - before.wait_ns
        minflt = after.minflt - before.minflt
        states = watch.states(row.start_ns, row.end_ns)
        what = f"{row.cause} episode {row.index}: D {d / 1e6:.1f} ms, run {run / 1e6:.1f} ms, wait {wait / 1e6:.1f} ms"
        what += f", {minflt} minor faults, states {dict(states)}"
        assert d >= 30_000_000, what
        if row.cause == "run":
            assert run >= 0.8 * d, what
            # SCHED_OTHER shares the CPU with the machine's other load: it may wait, and so the episode
            # (D of CPU time burnt) lasts longer than --episode-ms.
            assert wait <= (0.2 if FIFO_PERMITTED else 0.6) * d, what
        elif row.cause == "runqueue":
            assert wait >= 0.5 * d, what
            assert run <= (0.3 if FIFO_PERMITTED else 0.45) * d, what
            assert watch.threads[int(row.competitor_tid)][0] == "lab-hog"
        elif row.cause == "fault":
            assert minflt >= 2000, what
            # minor faults are CPU time in the kernel (a SCHED_OTHER thread may also wait for that CPU)
            assert (run if FIFO_PERMITTED else run + wait) >= 0.5 * d, what
        elif row.cause == "io":
            off_cpu = d - run  # the window is a little longer than D: this errs towards "on CPU"
            assert off_cpu >= 0.5 * d, what
            # In D state, not S. The share of samples that see D is lower than the off-CPU share on a VM and
            # varies with the host: 30-60 % here, 10 % in one CI run (36 of 40 reads R while the thread ran
            # 6.9 ms of 30: the host served the IO with the guest's vCPU held), so the bar is D over S.
            assert states["D"] > states["S"] and states["D"] > 0, what
        elif row.cause == "lock":
            assert d - run >= 0.5 * d and wait <= 0.2 * d, what
            assert states["S"] >= 0.5 * sum(states.values()) > 0, what
            holder_comm, holder_pid, holder_policy, _ = watch.threads[int(row.holder_tid)]
            assert holder_comm == "lab-holder" and holder_policy == 0, "the holder is a SCHED_OTHER thread"
            assert holder_pid != watch.pid, "the holder is another process (it must not share our GIL)"
            assert row.released_ns <= row.end_ns, "the wait ends after the holder let go"


@pytest.mark.may_skip  # only when no episode of two runs was as injected (hypervisor steal in each)
@pytest.mark.parametrize("option", ["--io-mode=write", "--io-mode=fsync", "--fault-kind=major"])
def test_other_io_modes_and_major_faults_wait_for_the_disk(tmp_path: Path, option: str) -> None:
    cause = "fault" if "fault" in option else "io"
    # Scored: the episodes the lab's own record says were what their cause says (analyses.truth.as_injected:
    # under load one write episode kept the thread on its CPU for 25.8 ms of 30, the host serving the
    # write with the guest's vCPU held; and no steal). At least one, or the run is made again once after a
    # burst of steal (a CI run had steal in all three). The checks below compare cumulative counters over
    # the window around an episode, which a pause of the watcher only widens.
    for attempt in (1, 2):
        watch, truth, _ = run_lab(
            tmp_path / f"attempt-{attempt}",
            f"--episodes={cause}:3",
            "--episode-ms=30",
            "--spacing=200ms",
            "--fault-pages=100",
            option,
        )
        episodes = truth.episodes
        assert len(episodes) == 3
        scored = as_injected(episodes, timing=True)
        print(f"{option}: scored {int(scored.sum())} of {len(episodes)} (cpu_ns {episodes['cpu_ns'].tolist()})")
        if scored.any():
            break
        if attempt == 1:
            wait_for_quiet_machine(max_wait_s=120)
    else:
        _skip_when_the_machine_made_nothing(episodes, pd.Series(~scored, index=episodes.index))
    d_reads = 0
    for row in episodes[scored].itertuples():
        d = row.end_ns - row.start_ns
        before, after = watch.window(row.start_ns, row.end_ns)
        run, majflt = after.run_ns - before.run_ns, after.majflt - before.majflt
        what = f"{option}: D {d / 1e6:.1f} ms, run {run / 1e6:.1f} ms, {majflt} major faults"
        # Each request costs CPU on this VM's virtio disk (syscalls, exits to the host): measured off CPU
        # 55-70 % of D for write, 47-72 % for fsync, 42-64 % for major faults; hence 0.25, with the D state
        # and the major-fault count as the evidence that the disk was waited for.
        assert d - run >= 0.25 * d, what
        d_reads += watch.states(row.start_ns, row.end_ns)["D"]
        if cause == "fault":
            assert majflt >= 100, what
            assert row.fault_kind == "major" and row.pages >= 100
    # Read in D in at least one of them: on this VM the thread's wait for the disk sometimes reads R at
    # every read (40 reads of a 30 ms fsync episode in one CI run, off CPU 77 % of it).
    assert d_reads > 0, f"{option}: never read in D"


def test_helpers_die_with_a_killed_lab(tmp_path: Path) -> None:
    """SIGKILL leaves the lab no chance to clean up: PR_SET_PDEATHSIG must take its helpers with it."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "forensics.lab",
            "--topology=series",
            "--stages=2",
            "--episodes=lock:1,runqueue:1",
            "--quiet",
        ],
        env=lab_env(),
        cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 30
        expected = {"lab-hog", "lab-holder", "lab-stage-2"}  # named by the helpers once they run
        helpers: list[int] = []
        while _names(helpers) != expected and time.monotonic() < deadline:
            time.sleep(0.05)
            helpers = children(proc.pid)
        assert _names(helpers) == expected
    finally:
        proc.kill()
        proc.wait()
    assert not _still_running(helpers, timeout=5), "helpers left behind"


def _names(pids: list[int]) -> set[str]:
    """The comm of each live process (a process gone meanwhile is left out)."""
    return {stat.comm for pid in pids if (stat := process_stat(pid)) is not None}


def _still_running(pids: list[int], timeout: float) -> list[int]:
    """The pids still running (a zombie, dead and not yet reaped by its new parent, counts as gone)."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for pid in set(pids):
            if running(pid):
                alive.append(pid)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _machine_stall(watch: Watch, boundary_ns: int, end_ns: int, deadline_ns: int) -> bool:
    """Whether a missed deadline is explained by the machine (the host stealing a vCPU, or the whole
    guest stopping), not by the lab.

    On this VM the guest now and then stops as a whole for 3-7 ms, about once a minute: both vCPUs stop,
    steal time does not show it, and lab-audio's counters cannot either (the guest clock runs on, and a
    thread "on CPU" through the stall is charged run time for it). The watcher thread runs on another
    CPU than the (pinned) lab, so it sees such a stall as a gap in its own samples, as long as the overrun.
    A miss of the lab's own making (a slow callback, a wait for the GIL or for a CPU) leaves the watcher
    sampling as usual.
    """
    # The host took a vCPU (hypervisor steal grew between the watcher's /proc/stat reads around the miss):
    # the lab's vCPU can stop alone, and a thread "running" through it is late by the host's doing.
    at = [t for t, _ in watch.steal]
    lo, hi = bisect.bisect_right(at, boundary_ns) - 1, bisect.bisect_left(at, end_ns)
    if lo >= 0 and hi < len(at) and watch.steal[hi][1] > watch.steal[lo][1]:
        return True
    times = [s.t_ns for s in watch.samples]
    first = max(0, bisect.bisect_left(times, boundary_ns) - 1)
    last = min(len(times) - 1, bisect.bisect_left(times, end_ns))
    gap = max((b - a for a, b in zip(times[first:last], times[first + 1 : last + 1], strict=True)), default=0)
    return gap >= max(2_000_000, end_ns - deadline_ns)


@pytest.mark.slow
def test_clean_ten_seconds_have_no_deadline_misses(tmp_path: Path) -> None:
    if not FIFO_PERMITTED:
        pytest.skip("SCHED_FIFO is not permitted here: a SCHED_OTHER callback's deadlines depend on other load")
    cpus = sorted(os.sched_getaffinity(0))
    lab_cpu, watcher_cpus = cpus[-1], cpus[:-1]
    pin = [f"--cpu={lab_cpu}"] if watcher_cpus else []
    # Short steals (3 ms) move /proc/stat only now and then (one allowed below); a burst of them would read
    # as the lab's own misses: wait one out, up to 2 minutes (tests/recording.py).
    wait_for_quiet_machine(max_wait_s=120)
    watch, truth, _ = run_lab(tmp_path, "--episodes=none", "--duration=10s", *pin, watcher_cpus=watcher_cpus)
    cycles = truth.cycles
    period_ns = truth.lab["period_ns"]
    assert len(cycles) == 1875 - truth.lab["stats"]["skipped_periods"]
    missed = cycles[cycles["end_ns"] > cycles["deadline_ns"]]
    own = [
        row
        for row in missed.itertuples()
        if not (watcher_cpus and _machine_stall(watch, int(row.deadline_ns - period_ns), row.end_ns, row.deadline_ns))
    ]
    # SCHED_FIFO callbacks of ~0.3 ms in a 5.333 ms period: a miss of the lab's own making is a bug. One is
    # allowed: /proc/stat counts steal in 10 ms ticks, so a host taking the lab's vCPU for 3 ms moves it
    # only now and then (one CI run: a 3.1 ms callback, 0.37 ms late, no steal tick, no watcher gap).
    assert len(own) <= 1, f"{len(own)} of {len(missed)} deadline misses are not the machine's: {own}"
    # Outside check: one wake-up per callback (lab-audio's own switch-ins, schedstat), so the cycles logged
    # are callbacks that really ran, one per period, and lab-audio never slept on anything else (a wait
    # for the GIL would be a second sleep in a cycle).
    first, last = watch.samples[0], watch.samples[-1]
    logged = ((cycles["start_ns"] > first.t_ns) & (cycles["start_ns"] < last.t_ns)).sum()
    assert 0.97 * logged <= last.slices - first.slices <= 1.05 * logged + 5
    # lab-main sleeps in Thread.join from the first callback on: it never wakes up to take the GIL from
    # lab-audio (it does switch a few times while it starts lab-audio, before the first period).
    run_start, run_end = cycles["start_ns"].min(), cycles["end_ns"].max()
    main = [count for t, count in watch.switches["lab-main"] if run_start <= t <= run_end]
    assert len(main) > 100 and main[-1] - main[0] <= 1, main


def _wakeups_per_cycle(watch: Watch, cycles) -> tuple[float, int]:
    """Voluntary switches of all engine threads (lab-audio, lab-stage-*) per callback, from the kernel's
    counters, over the part of the run where all of them were seen."""
    series = {comm: points for comm, points in watch.switches.items() if len(points) > 10 and comm != "lab-main"}
    start = max(points[2][0] for points in series.values())
    end = min(points[-2][0] for points in series.values())
    total = 0
    for points in series.values():
        inside = [count for t, count in points if start <= t <= end]
        total += inside[-1] - inside[0]
    first = min(t for points in series.values() for t, _ in points if t >= start)
    last = max(t for points in series.values() for t, _ in points if t <= end)
    callbacks = int(((cycles["start_ns"] >= first) & (cycles["start_ns"] <= last)).sum())
    return total / callbacks, len(series)


@pytest.mark.slow
def test_series_wakes_n_threads_per_cycle_where_chain_wakes_one(tmp_path: Path) -> None:
    stages = 4
    common = ["--episodes=none", "--duration=4s", f"--stages={stages}"]
    chain_watch, chain, _ = run_lab(tmp_path / "chain", *common, "--topology=chain")
    series_watch, series, _ = run_lab(tmp_path / "series", *common, "--topology=series")
    chain_rate, chain_threads = _wakeups_per_cycle(chain_watch, chain.cycles)
    series_rate, series_threads = _wakeups_per_cycle(series_watch, series.cycles)
    assert (chain_threads, series_threads) == (1, stages)
    assert 0.9 <= chain_rate <= 1.2, chain_rate
    assert 0.85 * stages <= series_rate / chain_rate <= 1.15 * stages, (series_rate, chain_rate)
    # the same DSP work and output either way
    # (every checkpoint both runs reached is the same; under steal a run makes fewer cycles in its time)
    a, b = dict(map(tuple, chain.lab["output"]["checkpoints"])), dict(map(tuple, series.lab["output"]["checkpoints"]))
    shared = a.keys() & b.keys()
    assert len(shared) >= 2 and all(a[k] == b[k] for k in shared), (a, b)


def test_sigterm_ends_cleanly_writes_truth_and_reaps_helpers(tmp_path: Path) -> None:
    watch, truth, code = run_lab(
        tmp_path, "--topology=series", "--stages=3", "--episodes=lock:2,runqueue:2", "--spacing=300ms", stop_after=0.4
    )
    assert code == 128 + signal.SIGTERM
    assert truth.lab["ended_because"] == "SIGTERM"
    assert len(truth.cycles) > 20
    helpers = {tid: info for tid, info in watch.threads.items() if info[1] != watch.pid}
    assert {info[0] for info in helpers.values()} == {"lab-stage-2", "lab-stage-3", "lab-hog", "lab-holder"}
    assert not _still_running([info[1] for info in helpers.values()], timeout=2), "helpers left behind"


def test_forensics_lab_runs_with_only_the_lab_threads(tmp_path: Path) -> None:
    """`forensics lab` starts inside the forensics CLI (numpy and pyarrow imported, their thread pools
    running); the engine must still hold only lab-main and lab-audio."""
    truth_path = tmp_path / "truth.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "forensics", "lab", "--episodes=none", "--duration=1.5s", "--truth", str(truth_path)],
        env=lab_env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    watch = Watch(proc.pid)
    watcher = threading.Thread(target=_watch, args=(proc, watch), daemon=True)
    watcher.start()
    out, err = proc.communicate(timeout=60)
    watcher.join(timeout=10)
    assert proc.returncode == 0, err.decode()
    assert watch.comms_of_engine == {"lab-main", "lab-audio"}
    assert "lab: ended (duration)" in out.decode()
    assert json.loads(truth_path.read_text())["lab"]["pid"] == proc.pid


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--episodes", "foo:3"], "unknown cause 'foo'"),
        (["--episodes", "run:-2"], "negative"),
        (["--topology", "ring"], "--topology 'ring' is unknown"),
    ],
)
def test_bad_options_print_one_line(run_module, args: list[str], words: str) -> None:
    for module in ("forensics.lab", "forensics"):
        result = run_module(module, *(["lab"] if module == "forensics" else []), *args)
        assert result.returncode == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0] and "error:" in lines[0], result.stderr
        assert "Traceback" not in result.stderr


def test_lab_processes_run_this_copy_of_the_lab() -> None:
    """The lab's processes (forensics lab re-executed, its helpers) put the checkout's root first on
    PYTHONPATH: `python -m forensics.lab` must find this copy without the package installed."""
    from forensics.lab.engine_env import QUIET_LIBRARIES, lab_env

    env = lab_env()
    root = Path(env["PYTHONPATH"].split(os.pathsep)[0])
    assert (root / "forensics" / "lab" / "__main__.py").is_file(), root
    assert all(env[name] == value for name, value in QUIET_LIBRARIES.items())
