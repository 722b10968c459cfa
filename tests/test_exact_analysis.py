"""analyses.exact on canned eBPF event tables (the real recording is checked in test_ebpf_live.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from analyses import exact

PID = 10
A, B, C = 11, 12, 13  # target threads; A is real-time (kernel prio 89 = SCHED_FIFO 10)


def switch(
    t: int, cpu: int, prev: int, prev_state: str, nxt: int, prev_prio: int = 120, next_prio: int = 120
) -> dict[str, object]:
    names = {0: "swapper", A: "audio", B: "worker", C: "helper", 99: "other"}
    target = {A, B, C}
    return {
        "t_ns": t,
        "cpu": cpu,
        "prev_tid": prev,
        "prev_pid": PID if prev in target else (0 if prev == 0 else 99),
        "prev_comm": names[prev],
        "prev_prio": prev_prio,
        "prev_state": 0,
        "prev_state_char": prev_state,
        "next_tid": nxt,
        "next_pid": PID if nxt in target else None,  # the probes know the tgid of target threads only
        "next_comm": names[nxt],
        "next_prio": next_prio,
    }


def wake(t: int, kind: str, tid: int, waker: int | None, context: str | None, prio: int = 89) -> dict[str, object]:
    return {
        "t_ns": t,
        "cpu": 0,
        "kind": kind,
        "tid": tid,
        "pid": PID,
        "comm": "audio",
        "prio": prio,
        "target_cpu": 0,
        "waker_tid": waker,
        "waker_pid": None if waker is None else (PID if waker in (A, B, C) else 0),
        "waker_comm": None if waker is None else {0: "swapper/0", B: "worker"}[waker],
        "waker_context": context,
        "waker_function": None,
    }


@pytest.fixture
def tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    sw = pd.DataFrame(
        [
            switch(100, 0, 0, "R", A, next_prio=89),
            switch(300, 0, A, "S", 0, prev_prio=89),  # A sleeps (futex)...
            switch(500, 1, 0, "R", B),
            switch(710, 1, B, "S", 0),  # ...B, which woke it at 700, goes to sleep
            switch(750, 0, 0, "R", A, next_prio=89),
            switch(900, 0, A, "R+", 99, prev_prio=89),  # preempted by a non-target
            switch(1000, 0, 99, "S", A, next_prio=89),
            switch(1200, 0, A, "D", 0, prev_prio=89),  # IO, completed in softirq
            switch(1510, 0, 0, "R", A, next_prio=89),
            switch(1700, 0, A, "S", 0, prev_prio=89),  # woken at 1698, before its own switch-out
            switch(1720, 0, 0, "R", A, next_prio=89),
            switch(1800, 1, 0, "R", C),
            switch(2000, 1, C, "S", 0),
            switch(2500, 1, C, "S", 0),  # C's switch-in between is missing
        ]
    )
    wk = pd.DataFrame(
        [
            wake(700, "waking", A, B, "task"),
            wake(705, "wakeup", A, None, None),
            wake(1500, "waking", A, 0, "softirq"),
            wake(1501, "wakeup", A, None, None),
            wake(1698, "waking", A, B, "task"),
            wake(1702, "wakeup", A, None, None),
        ]
    )
    return sw, wk


def test_cpu_intervals(tables: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    sw, _ = tables
    on = exact.cpu_intervals(sw)
    a = on[on.tid == A]
    assert a[["start_ns", "end_ns", "end_state"]].values.tolist() == [
        [100, 300, "S"],
        [750, 900, "R+"],
        [1000, 1200, "D"],
        [1510, 1700, "S"],
    ]
    assert on[on.tid == B][["start_ns", "end_ns", "cpu"]].values.tolist() == [[500, 710, 1]]
    assert 99 not in set(on.tid) and 0 not in set(on.tid)  # only target threads


def test_off_cpu_intervals_states_wakers_runqueue(tables: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    sw, wk = tables
    off = exact.off_cpu_intervals(sw, wk)
    a = off[off.tid == A].set_index("start_ns")
    assert list(a.index) == [300, 900, 1200, 1700]
    sleep = a.loc[300]
    assert (sleep.state, sleep.state_class, sleep.end_ns) == ("S", "sleep", 750)
    assert (sleep.waker_tid, sleep.waker_comm, sleep.waker_context) == (B, "worker", "task")
    assert (sleep.waking_ns, sleep.wakeup_ns, sleep.ready_ns) == (700, 705, 705)
    assert (sleep.asleep_ns, sleep.runqueue_ns) == (405, 45)
    pre = a.loc[900]
    assert (pre.state_class, pre.ready_ns, pre.runqueue_ns) == ("preempted", 900, 100)
    assert pd.isna(pre.waker_tid)  # a preemption has no waker
    io = a.loc[1200]
    assert (io.state_class, io.waker_tid, io.waker_context, io.runqueue_ns) == ("uninterruptible", 0, "softirq", 9)
    raced = a.loc[1700]  # the waking came 2 ns before the switch-out: still this sleep's
    assert (raced.waker_tid, raced.ready_ns, raced.runqueue_ns) == (B, 1702, 18)
    assert (raced.asleep_ns) == 2


def test_runqueue_latency(tables: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    sw, wk = tables
    rq = exact.runqueue_latency(exact.off_cpu_intervals(sw, wk))
    a = rq[rq.tid == A]
    assert a[["cause", "ready_ns", "run_ns", "latency_ns"]].values.tolist() == [
        ["wakeup", 705, 750, 45],
        ["preempted", 900, 1000, 100],
        ["wakeup", 1501, 1510, 9],
        ["wakeup", 1702, 1720, 18],
    ]


def test_wakers_flag_a_lower_priority_task_waker(tables: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    sw, wk = tables
    off = exact.off_cpu_intervals(sw, wk)
    samples = pd.DataFrame({"tid": [B], "t_ns": [650], "policy": [0], "nice": [0], "rtprio": [0]})
    w = exact.wakers(off, sw, samples).set_index("start_ns")
    futex = w.loc[300]
    assert (futex.waker_prio, futex.waker_class, futex.wakee_class) == (120, "normal", "RT")
    assert (futex.waker_policy, futex.waker_nice) == (0, 0)
    assert bool(futex.waker_lower_priority)  # RT audio thread waited for a SCHED_OTHER thread
    irq = w.loc[1200]
    assert not bool(irq.waker_lower_priority)  # an interrupt is no priority inversion


def test_timeline_gaps(tables: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    sw, wk = tables
    gaps = exact.timeline_gaps(sw)
    assert gaps[["tid", "start_ns", "end_ns", "missing"]].values.tolist() == [[C, 2000, 2500, "in"]]
    off = exact.off_cpu_intervals(sw, wk)
    assert off[off.tid == C].empty  # never an interval across the gap


def test_empty_tables() -> None:
    empty_sw = pd.DataFrame(columns=["t_ns", "prev_tid", "next_tid"])
    assert exact.cpu_intervals(empty_sw).empty
    assert list(exact.off_cpu_intervals(empty_sw).columns) == exact.OFF_CPU_COLUMNS
    assert exact.runqueue_latency(exact.off_cpu_intervals(empty_sw)).empty
    assert exact.timeline_gaps(empty_sw).empty


def test_taskstats_deltas_null_the_uptime_jump() -> None:
    ts = pd.DataFrame(
        {
            "tid": [5, 5, 5, 5],
            "t_ns": [0, 1_000_000, 2_000_000, 3_000_000],
            "age_us": [1000, 2000, 3000, 4000],
            "blkio_delay_ns": [0, 500_000, 500_000 + 3_000_000_000_000, 500_000 + 3_000_000_000_000 + 100_000],
            "blkio_count": [0, 1, 2, 3],
            "cpu_delay_ns": [10, 20, 30, 40],
            "cpu_count": [1, 2, 3, 4],
        }
    )
    d = exact.taskstats_deltas(ts)
    assert d["blkio_delay_ns"].tolist()[0] == 500_000
    assert pd.isna(d["blkio_delay_ns"].tolist()[1])  # 3000 s of IO wait in a 3 ms old thread: impossible
    assert d["blkio_delay_ns"].tolist()[2] == 100_000
    assert d["glitch"].tolist() == [False, True, False]
    assert d["blkio_count"].tolist() == [1, 1, 1]
    # A wait longer than the time between two queries is fine (the kernel adds a delay when it ends).
    long_wait = ts.assign(blkio_delay_ns=[0, 0, 1_900_000, 1_900_000])
    assert exact.taskstats_deltas(long_wait)["blkio_delay_ns"].tolist() == [0, 1_900_000, 0]


def test_summarize_threads(tables: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    sw, wk = tables
    summary = exact.summarize_threads(exact.off_cpu_intervals(sw, wk), exact.cpu_intervals(sw)).set_index("tid")
    a = summary.loc[A]
    assert a.run_ns == 200 + 150 + 200 + 190 and a.max_run_ns == 200
    assert (a.off_sleep_ns, a.off_preempted_ns, a.off_uninterruptible_ns) == (450 + 20, 100, 310)
    assert (a.runqueue_ns, a.max_runqueue_ns) == (45 + 100 + 9 + 18, 100)
