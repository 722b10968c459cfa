"""Stall verdicts on synthetic captures whose counters follow the kernel's accounting (tests/synth.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analyses.resample import resample
from analyses.stalls import StallRules, find_stalls
from analyses.threads import select_threads, thread_profiles
from analyses.truth import confusion, match_truth
from capture.format import Capture
from tests import synth
from tests.synth import MS, T0, Episode, Timeline


def _one(cause: str, ms: float, **kw) -> tuple[pd.DataFrame, pd.DataFrame]:
    cap = synth.audio_capture([Episode(cause, 100, ms)], seconds=1.5, **kw)
    return find_stalls(cap), cap.truth


def _overlaps(episode: pd.Series, truth: pd.Series) -> bool:
    return episode.start_ns < truth.end_ns and episode.end_ns > truth.start_ns


@pytest.mark.parametrize(
    ("cause", "ms", "verdict", "component"),
    [
        ("run", 10, "run", "run_ns"),
        ("run", 5, "run", "run_ns"),
        ("runqueue", 10, "runqueue", "runqueue_ns"),
        ("runqueue", 5, "runqueue", "runqueue_ns"),
        ("io", 10, "io", "io_ns"),
        ("io", 5, "io", "io_ns"),
        ("fault", 10, "fault", "fault_ns"),
        ("fault", 5, "fault", "fault_ns"),
        ("majfault", 10, "fault", "fault_ns"),
        ("lock", 12, "lock", "lock_ns"),
        ("lock", 20, "lock", "lock_ns"),
    ],
)
def test_each_cause_gets_its_verdict(cause, ms, verdict, component):
    stalls, truth = _one(cause, ms)
    assert len(stalls) == 1, stalls[["start_ns", "verdict", "components"]]
    episode = stalls.iloc[0]
    assert episode.verdict == verdict
    assert _overlaps(episode, truth.iloc[0])
    # The component is close to the episode's length (window resolution: +-2 intervals).
    assert abs(episode[component] - ms * MS) <= 4 * MS
    assert episode.components[verdict] == episode[component]
    assert episode.tid == 1001 and episode.comm == "lab-audio"


def test_clean_run_has_no_verdict():
    worker = Timeline(tid=1002, comm="worker", cpu=1)
    synth.busy(worker, t0=T0, duration_ns=3_000 * MS)
    gui = Timeline(tid=1003, comm="gui", cpu=0)
    synth.random_waker(gui, t0=T0, duration_ns=3_000 * MS, rate_hz=80, run_ns=2 * MS)
    cap = synth.audio_capture([], seconds=3, extra=[worker, gui])
    assert find_stalls(cap).empty
    assert find_stalls(cap, everything=True).empty  # the CPU-bound worker is busy as always: not a stall


def test_lock_shorter_than_a_period_is_not_seen_from_proc():
    # The documented limit: a 4 ms futex wait inside a 5.333 ms period looks like the normal sleep.
    stalls, _ = _one("lock", 4)
    assert stalls.empty


def test_missed_wakeup_needs_a_periodic_thread():
    # The same 20 ms S-state wait in a thread that is not periodic cannot be told from sleep.
    sleeper = Timeline(tid=1002, comm="sleeper", policy=1, rtprio=50, cpu=0)
    synth.random_waker(sleeper, t0=T0, duration_ns=1_500 * MS, rate_hz=20)
    cap = synth.audio_capture([Episode("lock", 100, 20)], seconds=1.5, extra=[sleeper])
    stalls = find_stalls(cap)
    assert stalls["tid"].tolist() == [1001]


def test_non_realtime_audio_thread_is_watched_by_its_wakeups():
    cap = synth.audio_capture([Episode("run", 100, 10)], seconds=1.5, policy=0, rtprio=0)
    profiles = thread_profiles(cap)
    chosen = select_threads(profiles)
    assert chosen["tid"].tolist() == [1001]
    assert chosen["why"].iloc[0] == "periodic"
    assert abs(chosen["period_ns"].iloc[0] - 5_333_333) < 0.01 * 5_333_333
    stalls = find_stalls(cap)
    assert stalls["verdict"].tolist() == ["run"]
    assert stalls["policy"].iloc[0] == "OTHER"


def test_thread_selection_options():
    worker = Timeline(tid=1002, comm="dsp-worker", cpu=0)
    synth.random_waker(worker, t0=T0, duration_ns=1_500 * MS, rate_hz=30, run_ns=200_000)
    cap = synth.audio_capture([], seconds=1.5, extra=[worker])
    profiles = thread_profiles(cap)
    assert select_threads(profiles)["tid"].tolist() == [1001]
    assert select_threads(profiles, pattern="worker")["tid"].tolist() == [1002]
    assert select_threads(profiles, everything=True)["tid"].tolist() == [1001, 1002]


def test_cpu_bound_thread_is_not_taken_for_periodic():
    hog = Timeline(tid=1002, comm="hog", cpu=1)
    synth.busy(hog, t0=T0, duration_ns=2_000 * MS)  # switched in at a steady rate by its time slices
    cap = synth.audio_capture([], seconds=2, extra=[hog])
    profiles = thread_profiles(cap).set_index("tid")
    assert not profiles.loc[1002, "periodic"]
    assert profiles.loc[1001, "periodic"]


def test_min_stall_threshold():
    stalls, _ = _one("run", 2)
    assert stalls.empty  # 2 ms is below half the period
    cap = synth.audio_capture([Episode("run", 100, 2)], seconds=1.5)
    found = find_stalls(cap, rules=StallRules(min_stall_ns=1 * MS))
    assert found["verdict"].tolist() == ["run"]


def test_fault_rate_threshold_decides_fault_vs_run():
    cap = synth.audio_capture([Episode("fault", 100, 10)], seconds=1.5)
    assert find_stalls(cap)["verdict"].tolist() == ["fault"]
    # At 480 faults/ms a threshold above that rate calls the same CPU time plain run.
    assert find_stalls(cap, rules=StallRules(fault_rate_per_ms=1000))["verdict"].tolist() == ["run"]


def test_a_runqueue_wait_whose_cpu_went_outside_the_capture_names_no_recorded_thread():
    """The callback waits 12 ms for CPU 1 while a recorded FIFO 80 thread (one that could hold it) runs 2 ms
    of it there, a hog outside the capture the rest: no suspect (rules.RUNQUEUE_SUSPECT_MIN_SHARE); the
    evidence gives what recorded threads ran and says the rest went outside the capture; no suspect_tid, so
    no incident blames it."""
    sliver = Timeline(tid=2003, comm="sliver", pid=2000, policy=1, rtprio=80, cpu=1)
    cap0 = synth.audio_capture([Episode("runqueue", 160, 12)], seconds=3)
    runq = cap0.truth.iloc[0]
    sliver.add(T0, runq.start_ns + 4 * MS, synth.SLEEP)
    sliver.add(runq.start_ns + 4 * MS, runq.start_ns + 6 * MS, synth.USER)
    sliver.add(runq.start_ns + 6 * MS, runq.start_ns + 2000 * MS, synth.SLEEP)
    cap = synth.audio_capture([Episode("runqueue", 160, 12)], seconds=3, extra=[sliver])
    stalls = find_stalls(cap)
    row = stalls[(stalls["tid"] == 1001) & (stalls["verdict"] == "runqueue")].iloc[0]
    assert pd.isna(row["suspect_tid"]), row["suspect"]
    assert "recorded threads ran 2.0 ms on CPU 1" in row["suspect"] and "sliver (2003" in row["suspect"], row["suspect"]
    assert "does not hold" in row["evidence"]


def test_a_fair_thread_is_never_the_hog_of_a_real_time_threads_wait():
    """The callback (SCHED_FIFO) waits 12 ms for CPU 1 while a SCHED_OTHER thread runs there all along: the
    scheduler runs every real-time thread before it (rules.can_hold_cpu_against), so the wait was not its
    doing (interrupts, the hypervisor, RT throttling): said, and no suspect_tid."""
    fair = Timeline(tid=2004, comm="fair", pid=2000, policy=0, cpu=1)
    cap0 = synth.audio_capture([Episode("runqueue", 160, 12)], seconds=3)
    runq = cap0.truth.iloc[0]
    fair.add(T0, runq.start_ns, synth.SLEEP)
    fair.add(runq.start_ns, runq.end_ns, synth.USER)
    fair.add(runq.end_ns, runq.end_ns + 1000 * MS, synth.SLEEP)
    cap = synth.audio_capture([Episode("runqueue", 160, 12)], seconds=3, extra=[fair])
    stalls = find_stalls(cap)
    row = stalls[(stalls["tid"] == 1001) & (stalls["verdict"] == "runqueue")].iloc[0]
    assert pd.isna(row["suspect_tid"]), row["suspect"]
    assert "fair (2004" in row["suspect"] and "cannot keep a FIFO" in row["suspect"], row["suspect"]


def test_suspects_name_the_lock_holder_and_the_cpu_hog():
    holder = Timeline(tid=2001, comm="holder", pid=2000, cpu=0)
    hog = Timeline(tid=2002, comm="hog", pid=2000, policy=1, rtprio=80, cpu=1)
    cap0 = synth.audio_capture([Episode("lock", 60, 20), Episode("runqueue", 160, 12)], seconds=3)
    lock, runq = cap0.truth.iloc[0], cap0.truth.iloc[1]
    # The holder burns CPU exactly while the callback waits; the hog runs on the callback's CPU (1).
    holder.add(T0, lock.start_ns - 1 * MS, synth.SLEEP)
    holder.add(lock.start_ns - 1 * MS, lock.end_ns, synth.USER)
    hog.add(T0, runq.start_ns, synth.SLEEP)
    hog.add(runq.start_ns, runq.end_ns, synth.USER)
    cap = synth.audio_capture([Episode("lock", 60, 20), Episode("runqueue", 160, 12)], seconds=3, extra=[holder, hog])
    stalls = find_stalls(cap)
    stalls = stalls[stalls["tid"] == 1001].set_index("verdict")
    assert "holder (2001" in stalls.loc["lock", "suspect"]
    assert "hog (2002" in stalls.loc["runqueue", "suspect"] and "on CPU 1" in stalls.loc["runqueue", "suspect"]
    assert stalls.loc["lock", "suspect_tid"] == 2001 and stalls.loc["runqueue", "suspect_tid"] == 2002
    assert "holder" in stalls.loc["lock", "evidence"]


def test_sources_and_unknowns_are_stated():
    stalls, _ = _one("io", 10)
    episode = stalls.iloc[0]
    assert "proc:state" in episode.sources and "proc:schedstat" in episode.sources
    assert episode.components["reclaim"] is None  # no taskstats: unknown, not zero
    assert pd.isna(episode.reclaim_ns)
    assert any("reclaim" in u for u in episode.undecided)
    assert "state D at" in episode.evidence


def test_delay_accounting_confirms_io_in_the_evidence():
    cap = synth.audio_capture([Episode("io", 100, 30)], seconds=1.0)
    samples = cap.samples.copy()
    truth = cap.truth.iloc[0]
    # Field 42 counts clock ticks (10 ms) of block-IO delay, accounted when the wait ends.
    after = (samples["tid"] == 1001) & (samples["t_ns"] >= truth.end_ns)
    samples.loc[after, "blkio_ticks"] = 3
    meta = dict(cap.meta, sources=dict(cap.meta["sources"], delayacct=True))
    cap2 = synth.Capture.from_frames(meta=meta, samples=samples, threads=cap.table("threads"))
    episode = find_stalls(cap2).iloc[0]
    assert episode.verdict == "io"
    assert "proc:blkio_ticks" in episode.sources
    assert "blkio delay" in episode.evidence


def test_sampling_rate_lesson_on_synthetic_capture():
    cap = synth.audio_capture([Episode("run", 150, 5)], seconds=2.0)
    at_2ms = find_stalls(cap)
    assert at_2ms["verdict"].tolist() == ["run"]
    at_20ms = find_stalls(resample(cap, 20 * MS))
    assert at_20ms.empty  # 5 ms in a 20 ms window with ~3.75 callbacks: averaged away


def test_truth_scoring():
    episodes = [Episode(c, 40 + 60 * i, 12) for i, c in enumerate(["run", "runqueue", "io", "fault", "lock"] * 2)]
    cap = synth.audio_capture(episodes, seconds=4.0)
    stalls = find_stalls(cap)
    matched = match_truth(stalls, cap.truth)
    assert (matched["cause"] == matched["verdict"]).all()
    matrix, scores = confusion(stalls, cap.truth)
    assert matrix.set_index("truth").to_numpy().trace() == len(matched)
    assert (scores["recall"] == 1.0).all() and (scores["precision"] == 1.0).all()
    assert set(scores["cause"]) == {"run", "runqueue", "io", "fault", "lock"}
    # A wrong verdict shows up in the matrix and in precision.
    stalls.loc[0, "verdict"] = "io"
    _, scores = confusion(stalls, cap.truth)
    by = scores.set_index("cause")
    assert by.loc["run", "recall"] == 0.5 and by.loc["io", "precision"] < 1.0


def _with_taskstats(cap, delays: dict[str, list[tuple[int, int]]]):
    """The capture plus a taskstats table for lab-audio: per column, (end_ns, ns) delays accounted at end."""
    samples = cap.samples[cap.samples["tid"] == 1001]
    table = {"tick": samples["tick"].to_numpy(), "t_ns": samples["t_ns"].to_numpy(), "tid": samples["tid"].to_numpy()}
    for column in ("blkio_delay_ns", "freepages_delay_ns", "thrashing_delay_ns", "compact_delay_ns"):
        total = np.zeros(len(samples), dtype=np.int64)
        for end, ns in delays.get(column, []):
            total += np.where(samples["t_ns"].to_numpy() >= end, ns, 0)
        table[column] = total
    meta = dict(cap.meta, sources=dict(cap.meta["sources"], taskstats=True, delayacct=True))
    return synth.Capture.from_frames(
        meta=meta, samples=cap.samples, threads=cap.table("threads"), taskstats=pd.DataFrame(table)
    )


def test_taskstats_reclaim_delay_makes_a_reclaim_verdict():
    cap = synth.audio_capture([Episode("fault", 100, 12), Episode("io", 200, 12)], seconds=1.5)
    fault, io = cap.truth.iloc[0], cap.truth.iloc[1]
    # Direct reclaim took 10 of the fault storm's 12 ms; the io wait was all block IO.
    rich = _with_taskstats(
        cap, {"freepages_delay_ns": [(fault.end_ns, 10 * MS)], "blkio_delay_ns": [(io.end_ns, 12 * MS)]}
    )
    stalls = find_stalls(rich).set_index("verdict")
    assert "reclaim" in stalls.index and "io" in stalls.index
    assert abs(stalls.loc["reclaim", "reclaim_ns"] - 10 * MS) < 1 * MS
    assert stalls.loc["reclaim", "components"]["reclaim"] == stalls.loc["reclaim", "reclaim_ns"]
    assert stalls.loc["reclaim", "sources"][0] == "taskstats:reclaim"  # the deciding source comes first
    assert stalls.loc["io", "sources"][0] == "taskstats:blkio"
    assert "block-IO delay 12.0 ms (taskstats)" in stalls.loc["io", "evidence"]
    # Without the table the same capture says fault, and reclaim is unknown (not zero).
    plain = find_stalls(cap).set_index("verdict")
    assert plain.loc["fault", "components"]["reclaim"] is None


def test_threads_in_groups_give_the_same_episodes():
    # --all on a big capture reads the threads in groups (bounded memory): the result must not change.
    hog = Timeline(tid=1002, comm="hog", policy=1, rtprio=60, cpu=0)
    hog.add(T0, T0 + 700 * MS, synth.SLEEP)
    hog.add(T0 + 700 * MS, T0 + 720 * MS, synth.USER)
    cap = synth.audio_capture([Episode("run", 60, 10), Episode("io", 200, 10)], seconds=1.5, extra=[hog])
    whole = find_stalls(cap, everything=True)
    grouped = find_stalls(cap, everything=True, max_samples=100)
    assert len(whole) == 3 and set(whole["tid"]) == {1001, 1002}
    pd.testing.assert_frame_equal(whole, grouped)


def test_start_up_and_stop_of_a_periodic_thread_are_not_stalls():
    # Before its loop the thread initialises (18 ms on CPU) and waits to be started (17 ms asleep); at
    # the end it stops waking 300 ms before the capture ends. Neither is a stalled callback.
    audio = Timeline(tid=1001, comm="lab-audio", policy=1, rtprio=70, cpu=1)
    t = audio.add(T0 + 10 * MS, T0 + 28 * MS, synth.USER)
    t = audio.add(t, T0 + 45 * MS, synth.SLEEP)
    synth.periodic(audio, t0=T0 + 45 * MS, duration_ns=1_500 * MS, period_ns=5_333_333)
    cap = synth.capture([audio], t0=T0, duration_ns=1_900 * MS)
    assert find_stalls(cap).empty
    # The same wait inside the rhythm is a stall: it ends in a wake-up after the thread was periodic.
    late = Timeline(tid=1001, comm="lab-audio", policy=1, rtprio=70, cpu=1)
    synth.periodic(late, t0=T0, duration_ns=1_900 * MS, period_ns=5_333_333, episodes=[Episode("lock", 150, 17)])
    assert find_stalls(synth.capture([late], t0=T0, duration_ns=1_900 * MS))["verdict"].tolist() == ["lock"]


def _io_read_as_running(psi_io_ms_per_50ms: float | None) -> tuple[synth.Capture, pd.Series]:
    """lab-audio with one 8 ms io episode of back-to-back requests: ~290 us in D, ~35 us on CPU between
    them, and on CPU at every read, as one real 6 ms episode was read (R at all four reads). The system
    samples carry PSI io "some" growing by `psi_io_ms_per_50ms` (None: no system table)."""
    planned = Timeline(tid=1001, comm="lab-audio", policy=1, rtprio=70, cpu=1)
    episode = [Episode("io", 100, 8)]
    truth = synth.periodic(planned, t0=T0, duration_ns=int(1.5e9), period_ns=5_333_333, episodes=episode)
    reads = T0 + np.arange(0, 800) * 2 * MS  # sample() reads thread 0 at each tick
    audio = Timeline(tid=1001, comm="lab-audio", policy=1, rtprio=70, cpu=1)
    for s, e, k in zip(planned.starts, planned.ends, planned.kinds, strict=True):
        if k != synth.BLOCKED:
            audio.add(s, e, k)
            continue
        t = s
        while t < e:  # requests of ~290 us, each followed by ~35 us on CPU; on CPU around every read
            nxt = min(t + 290 * synth.US, e)
            read = reads[(reads >= t) & (reads < nxt + 40 * synth.US)]
            if len(read):
                nxt = max(int(read[0]) - 20 * synth.US, t + synth.US)
            audio.add(t, nxt, synth.BLOCKED)
            t = audio.add(nxt, min(nxt + (40 if len(read) else 35) * synth.US, e), synth.USER)
    tables = {}
    if psi_io_ms_per_50ms is not None:
        t = T0 - 10 * MS + np.arange(0, 32) * 50 * MS
        psi = np.cumsum(np.where((t > truth[0][1]) & (t - 50 * MS < truth[0][2]), psi_io_ms_per_50ms * 1000, 0))
        tables["system"] = pd.DataFrame({"t_ns": t, "cpu": -1, "psi_io_some_us": psi.astype(np.int64)})
    rows = [(cause, audio.tid, s, e) for cause, s, e in truth]
    cap = synth.capture([audio], t0=T0, duration_ns=int(1.5e9), truth=rows, **tables)
    return cap, cap.truth.iloc[0]


def test_io_read_as_running_is_io_when_the_machine_was_waiting_for_io() -> None:
    cap, truth = _io_read_as_running(psi_io_ms_per_50ms=None)
    reads = cap.samples[cap.samples["t_ns"].between(truth.start_ns, truth.end_ns)]
    assert len(reads) >= 3 and (reads["state"] == "R").all()  # no read caught the D letter
    assert find_stalls(cap).empty  # no letter, no pressure: nothing to say

    cap, truth = _io_read_as_running(psi_io_ms_per_50ms=7.5)
    stalls = find_stalls(cap)
    assert len(stalls) == 1 and _overlaps(stalls.iloc[0], truth)
    found = stalls.iloc[0]
    assert found.verdict == "io" and found.io_ns >= 5 * MS
    assert found.sources[0] == "proc:pressure/io"
    assert "PSI io some" in found.evidence and "machine-wide" in found.evidence

    cap, _ = _io_read_as_running(psi_io_ms_per_50ms=0.5)  # the machine was not waiting for IO that long
    assert find_stalls(cap).empty


def test_a_callback_that_overslept_its_period_counts_as_late() -> None:
    from analyses.truth import late_cycles

    period = 5_333_333
    starts = T0 + np.arange(20) * period + 40_000  # on time: 40 us after each period began
    starts[10] += 1_550_000  # woken 1.55 ms late (under the 2 ms "delayed" bar): slept 6.6 ms
    cycles = pd.DataFrame(
        {"tid": 1001, "start_ns": starts, "end_ns": starts + 215_000, "deadline_ns": T0 + (np.arange(20) + 1) * period}
    )
    late = late_cycles(cycles)
    assert late["start_ns"].tolist() == [int(starts[10])]
    assert late_cycles(cycles, overslept_ns=2_000_000).empty  # the old bar missed it


def test_a_callback_that_ran_half_its_period_counts_as_late() -> None:
    """The lab's log of a callback that ran 4 ms of a 5.333 ms period (met its deadline, no episode
    there): a long run by the min-stall rule (half the period), so a verdict on it is not a false alarm."""
    from analyses.truth import late_cycles

    period = 5_333_333
    starts = T0 + np.arange(20) * period + 40_000
    ends = starts + 450_000
    ends[7] = starts[7] + 4_000_000
    cycles = pd.DataFrame({"tid": 1001, "start_ns": starts, "end_ns": ends, "deadline_ns": starts - 40_000 + period})
    assert late_cycles(cycles)["start_ns"].tolist() == [int(starts[7])]
    ends[7] = starts[7] + 2_500_000  # under half the period
    assert late_cycles(cycles.assign(end_ns=ends)).empty


def test_episodes_the_lab_did_not_make_are_left_out_of_recall_and_precision() -> None:
    """An io episode whose thread was on CPU for most of it (the lab's cpu_ns), and a minor-fault
    episode below the storm rate, are `not as injected`: their verdicts count neither way."""
    from analyses.truth import as_injected, confusion

    ms = 1_000_000
    truth = pd.DataFrame(
        {
            "cause": ["io", "io", "fault", "fault", "lock", "run"],
            "tid": 1001,
            "start_ns": T0 + np.arange(6) * 100 * ms,
            "end_ns": T0 + np.arange(6) * 100 * ms + 10 * ms,
            "cpu_ns": [2 * ms, 9 * ms, 10 * ms, 10 * ms, 1 * ms, 10 * ms],
            "pages": [None, None, 2000, 100, None, None],
            "fault_kind": [None, None, "minor", "minor", None, None],
        }
    )
    assert as_injected(truth).tolist() == [True, False, True, False, True, True]
    assert as_injected(truth.drop(columns=["cpu_ns"])).all()  # a truth file from before cpu_ns
    stolen = truth.assign(steal_ns=[0, 0, 0, 0, 10 * ms, 0])  # the host took a vCPU during the lock episode
    # The lock waiter was off its CPU: its verdict stays scorable, its edges do not.
    assert as_injected(stolen).tolist() == [True, False, True, False, True, True]
    assert as_injected(stolen, timing=True).tolist() == [True, False, True, False, False, True]
    # A storm on the CPU with steal over it: the host took time from the faulting thread itself.
    storm_stolen = truth.assign(
        steal_ns=[0, 0, 10 * ms, 0, 0, 0], cpu_ns=[2 * ms, 9 * ms, 8 * ms, 10 * ms, ms, 10 * ms]
    )
    assert as_injected(storm_stolen).tolist()[2] is False
    # Machine steal over the run episode: its thread's clock counted all 10 ms, so none was its own;
    # with 7 ms counted the host may have taken the rest from it.
    ran_through = truth.assign(steal_ns=[0, 0, 0, 0, 0, 10 * ms])
    assert as_injected(ran_through).tolist() == [True, False, True, False, True, True]
    short_of_it = ran_through.assign(cpu_ns=[*truth["cpu_ns"][:5], 7 * ms])
    assert as_injected(short_of_it).tolist() == [True, False, True, False, True, False]
    # The first io episode: off CPU 8 ms, but the kernel counted 1.3 ms of IO wait on the whole machine.
    pressure = truth.assign(io_pressure_ns=[1.3 * ms, None, None, None, None, None])
    assert as_injected(pressure).tolist() == [False, False, True, False, True, True]
    assert as_injected(truth.assign(io_pressure_ns=[7 * ms] + [None] * 5)).tolist()[0] is True
    # 3 ms of IO wait in 8 ms off CPU: the group of 12 ms CI episodes at 0.4-0.5 share, still an IO wait.
    assert as_injected(truth.assign(io_pressure_ns=[3 * ms] + [None] * 5)).tolist()[0] is True
    # Off CPU 5 ms with 1.8 ms of IO wait: over 0.3 of it, but shorter than a 2 ms sampling interval.
    short = truth.assign(cpu_ns=[5 * ms, *truth["cpu_ns"][1:]], io_pressure_ns=[1.8 * ms] + [None] * 5)
    assert as_injected(short).tolist()[0] is False
    verdicts = ["io", "run", "fault", "run", "lock", "run"]
    stalls = pd.DataFrame(
        {
            "tid": 1001,
            "start_ns": truth["start_ns"],
            "end_ns": truth["end_ns"],
            "verdict": verdicts,
        }
    )
    matrix, scores = confusion(stalls, truth)
    scores = scores.set_index("cause")
    assert scores.loc["io", "episodes"] == 1 and scores.loc["io", "not_as_injected"] == 1
    assert scores.loc["io", "recall"] == 1.0 and scores.loc["fault", "recall"] == 1.0
    assert scores.loc["run", "precision"] == 1.0  # the run verdicts on the two episodes not made count neither way
    row = matrix[matrix["truth"] == "not as injected"].iloc[0]
    assert row["run"] == 2


def test_a_false_alarm_over_hypervisor_steal_is_the_machines() -> None:
    """A verdict on a callback the lab logged on time, while /proc/stat's steal grew between the system
    reads around it: the host took a vCPU, a real stall of the machine, not a false alarm."""
    from analyses.truth import split_alarms, steal_around

    ms = 1_000_000
    period = 5_333_333
    starts = T0 + np.arange(40) * period + 40_000
    cycles = pd.DataFrame({"tid": 1001, "start_ns": starts, "end_ns": starts + 450_000, "deadline_ns": starts + period})
    alarms = pd.DataFrame(
        {
            "tid": 1001,
            "start_ns": [T0 + 20 * ms, T0 + 120 * ms],
            "end_ns": [T0 + 26 * ms, T0 + 126 * ms],
            "verdict": "run",
        }
    )
    system = pd.DataFrame({"t_ns": T0 + np.arange(5) * 50 * ms, "cpu": -1, "steal": [7, 7, 7, 9, 9]})
    assert steal_around(system, alarms).tolist() == [False, True]
    false, real = split_alarms(alarms, cycles, system=system)
    assert false["start_ns"].tolist() == [T0 + 20 * ms] and real["start_ns"].tolist() == [T0 + 120 * ms]
    false, real = split_alarms(alarms, cycles)  # without the system table both are false alarms
    assert len(false) == 2 and real.empty
    # Each /proc/stat line is truncated to ticks on its own: steal that moved one CPU's line but not the
    # machine line's (its sum had already crossed the tick) is steal all the same.
    per_cpu = pd.concat(
        [
            system.assign(steal=[8, 8, 8, 8, 8]),
            system.assign(cpu=0, steal=[4, 4, 4, 4, 4]),
            system.assign(cpu=1, steal=[3, 3, 3, 4, 4]),
        ]
    )
    assert steal_around(per_cpu, alarms).tolist() == [False, True]


def _ticks_dropped(cap, start_ns: int, end_ns: int):  # type: ignore[no-untyped-def]
    """`cap` as if the sampler had read nothing in [start_ns, end_ns) (a whole-machine hold: its ticks missed)."""
    from capture.format import Capture

    tables = {name: cap.table(name) for name in cap.table_names}
    for name in ("samples", "sampler_ticks"):
        if name in tables:
            frame = tables[name]
            tables[name] = frame[(frame["t_ns"] < start_ns) | (frame["t_ns"] >= end_ns)].reset_index(drop=True)
    return Capture.from_frames(cap.meta, cap.trailer, **tables)


def test_a_missed_wake_up_inside_a_sampler_gap_is_found_as_a_lower_bound():
    """The sampler read nothing over most of a 12 ms lock wait of lab-audio (at 5.333 ms: two wake-ups
    missed), the machine held and its ticks missed: the one long window holds the wake-up that ended the
    wait, so it is no run of windows without a switch-in. Too few switch-ins for its off-CPU time: one
    stretch lasted at least off / (switch-ins + 1), beyond a period plus the margin, so a missed wake-up of
    at least that (a real VM's hold, seen on jackd under the eBPF sampler: 10.8 ms, one switch-in)."""
    cap = synth.audio_capture([Episode("lock", 100, 12)], seconds=1.5)
    truth = cap.truth.iloc[0]
    gap = _ticks_dropped(cap, int(truth.start_ns) + MS, int(truth.end_ns) + MS)
    stalls = find_stalls(gap)
    assert len(stalls) == 1 and stalls.iloc[0].verdict == "lock", stalls
    episode = stalls.iloc[0]
    assert _overlaps(episode, truth) and 6 * MS <= episode.lock_ns <= 12 * MS
    assert "no wake-up for at least" in episode.evidence
    # Whole, the same wait is found from its quiet windows, its length not a bound.
    whole = find_stalls(cap).iloc[0]
    assert "no wake-up for at least" not in whole.evidence


def test_a_sampler_gap_over_a_thread_that_woke_every_period_is_no_stall():
    """An 18 ms gap over a clean run: three or four switch-ins in it, no stretch beyond a period plus margin."""
    cap = synth.audio_capture([], seconds=1.5)
    gap = _ticks_dropped(cap, T0 + 700 * MS, T0 + 718 * MS)
    assert find_stalls(gap).empty


def _starved_in_long_windows(starved_ms: float) -> Capture:
    """A FIFO thread at 5.333 ms doing 10 us, read every 11 ms (2 ms asked: the recorder missed most ticks, as
    from /proc for 534 threads on 2 vCPUs), kept runnable `starved_ms` in cycle 400 by a FIFO hog above it
    and the sampler."""
    seconds = 4
    tl = Timeline(tid=1001, comm="audio-0", policy=1, rtprio=10, cpu=0)
    truth = synth.periodic(
        tl, t0=T0, duration_ns=seconds * 1000 * MS, period_ns=5_333_333, work_ns=10_000,
        episodes=[Episode("runqueue", 400, starved_ms)],
    )  # fmt: skip
    kept_ns = 11_000_000
    samples = synth.sample([tl], t0=T0, duration_ns=seconds * 1000 * MS, interval_ns=kept_ns)
    samples["tick"] = (samples["tick"].astype(np.int64) * kept_ns // (2 * MS)).astype(np.uint32)
    # The hog holds every CPU, the sampler's too: no read during the starvation, so its window is 23-34 ms.
    ((_, start, end),) = truth
    samples = samples[(samples["t_ns"] < start) | (samples["t_ns"] > end)].reset_index(drop=True)
    return Capture.from_frames(
        meta=synth.meta(2 * MS),
        trailer={"ticks": len(samples), "missed_ticks": 3 * len(samples), "interval_p50_ns": kept_ns},
        samples=samples,
        threads=synth.threads_table([tl], T0),
        truth=pd.DataFrame([(c, 1001, s, e) for c, s, e in truth], columns=["cause", "tid", "start_ns", "end_ns"]),
    )


def test_a_starvation_inside_a_window_the_sampler_left_long_is_a_runqueue_stall():
    """15 ms of waiting for a CPU in a window of 33 ms is under half of it, so the busy-fraction test never
    fired: five 12 ms FIFO hogs on the Bitwig shape from /proc (a read every 11 ms) gave no episode. One wait
    lasted at least runnable time / switch-ins, beyond half the period: a stall."""
    cap = _starved_in_long_windows(15)
    stalls = find_stalls(cap)
    assert len(stalls) == 1, stalls[["start_ns", "verdict", "components"]]
    episode, injected = stalls.iloc[0], cap.truth.iloc[0]
    assert episode.verdict == "runqueue" and _overlaps(episode, injected)
    assert episode.runqueue_ns >= 13 * MS
    assert find_stalls(_starved_in_long_windows(1)).empty  # a 1 ms wait is no stall at any window length
