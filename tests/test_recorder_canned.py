"""The recorder and writer over a canned /proc tree: every value lands where it belongs."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import forensics
from capture.errors import ForensicsError
from samplers import frames
from samplers.recorder import Recorder, RecorderOptions
from samplers.targets import TargetSpec
from samplers.writer_process import CaptureSink
from tests.fakeproc import PID_ABOVE_MAX, FakeProc
from tests.helpers import SCHED_SCHEDSTATS_5_10


def _record(fake: FakeProc, out: Path, spec: TargetSpec, **options: object) -> dict:
    read_end, write_end = os.pipe()
    sink = CaptureSink(str(out))

    def consume() -> None:
        for kind, payload in frames.read_frames(read_end):
            sink.handle(kind, payload)
        sink.close()

    consumer = threading.Thread(target=consume)
    consumer.start()
    # rt_priority 0: the recorder runs in pytest's own thread here, and a SCHED_FIFO pytest would hand its
    # policy to every process a later test starts (their threads then all read as real-time).
    options.setdefault("rt_priority", 0)
    recorder = Recorder(spec, RecorderOptions(output=str(out), procfs=str(fake.root), **options))  # type: ignore[arg-type]
    try:
        trailer = recorder.run(write_end, {"test": True})
        recorder.finish(trailer)
    finally:
        os.close(write_end)
        consumer.join()
        os.close(read_end)
    return trailer


def test_canned_values_arrive_in_the_capture_unchanged(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path / "proc")
    fake.add_thread(100, 100, comm="engine", run_ns=5_000_000, wait_ns=7, slices=3, minflt=11, cpu=1)
    fake.add_thread(
        100,
        101,
        comm="we) ird\nname",
        run_ns=123_456_789_012,
        wait_ns=42,
        slices=9,
        state="D",
        majflt=4,
        utime=300,
        stime=20,
        nice=-5,
        rtprio=85,
        policy=1,
        blkio=6,
        sched=SCHED_SCHEDSTATS_5_10.decode(),
    )
    out = tmp_path / "canned.ssf"
    trailer = _record(fake, out, TargetSpec(pids=[100]), duration_ns=60_000_000, sched="all")
    cap = forensics.load(out)
    # Every tick of the 60 ms is read or counted missed: on a loaded machine (CI's pytest workers on 2 CPUs)
    # the recorder, SCHED_OTHER here, was once off its CPU for the whole span after its first tick.
    assert trailer["ticks"] >= 1 and trailer["ticks"] + trailer["missed_ticks"] >= 25 and cap.complete
    s = cap.samples
    weird = s[s["tid"] == 101]
    assert (weird["run_ns"] == 123_456_789_012).all() and (weird["wait_ns"] == 42).all()
    assert (weird["state"].astype(str) == "D").all()
    assert weird[["majflt", "utime", "stime", "nice", "rtprio", "policy", "blkio_ticks"]].iloc[0].tolist() == [
        4,
        300,
        20,
        -5,
        85,
        1,
        6,
    ]
    engine = s[s["tid"] == 100]
    assert engine[["run_ns", "slices", "minflt", "cpu"]].iloc[0].tolist() == [5_000_000, 3, 11, 1]
    threads = cap.threads.set_index("tid")
    assert threads.loc[101, "comm"] == "we) ird\nname"
    assert (threads.loc[101, "policy"], threads.loc[101, "rtprio"]) == (1, 85)  # as first seen
    assert threads.loc[100, "process"] == "engine"
    sched = cap.sched[cap.sched["tid"] == 101]
    assert not sched.empty
    assert sched["wait_max_ns"].iloc[0] == 538_000 and sched["sum_sleep_runtime_ns"].iloc[0] == 80_000_123_456
    assert sched["sum_block_runtime_ns"].isna().all()  # the 5.10 text has none: unknown, not 0
    # A sched file without schedstats (thread 100 has none here): no rows, not zero rows of zeros.
    assert 100 not in set(cap.sched["tid"])


def test_counters_that_change_between_ticks_are_recorded_as_read(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path / "proc")
    fake.add_thread(100, 100, comm="engine", run_ns=0)
    out = tmp_path / "moving.ssf"

    stop = threading.Event()

    def bump() -> None:
        value = 0
        while not stop.wait(0.005):
            value += 1_000_000
            fake.set_thread(100, 100, comm="engine", run_ns=value)

    bumper = threading.Thread(target=bump)
    bumper.start()
    try:
        _record(fake, out, TargetSpec(pids=[100]), duration_ns=200_000_000, sched="none")
    finally:
        stop.set()
        bumper.join()
    # write_text truncates then writes: a read in between sees an empty file and that tick has no row.
    run = forensics.load(out).samples["run_ns"]
    assert run.nunique() > 5 and run.iloc[-1] > run.iloc[0]


def test_permission_denied_names_the_path_and_what_to_do(tmp_path: Path, monkeypatch) -> None:
    fake = FakeProc(tmp_path / "proc")
    fake.add_thread(100, 100)
    real_open = os.open

    def deny(path, flags, *args):  # root ignores mode bits, so the kernel's answer is simulated
        if str(path).endswith("schedstat") and "/task/" in str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr("samplers.recorder.os.open", deny)
    with pytest.raises(
        ForensicsError,
        match=r"cannot read .*/proc/100/task/100/schedstat: permission denied; "
        r"record as the target's user or as root",
    ):
        _record(fake, tmp_path / "x.ssf", TargetSpec(pids=[100]), duration_ns=10_000_000)


def test_a_writer_behind_at_the_end_still_gets_the_trailer(tmp_path: Path) -> None:
    """A stop bounds how long the recorder waits for the writer, but the trailer the writer could not
    take in time (its pipe full) still reaches it, from a child process, so the capture ends with its
    counts. Here nobody reads the pipe during the recorder's budget; the reading starts after."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)  # as the writer's pipe is (samplers/session.py)
    recorder = Recorder(TargetSpec(pids=[100]), RecorderOptions(output=str(tmp_path / "x.ssf"), rt_priority=0))
    recorder._pipe = write_end
    event = frames.encode_json(frames.EVENT, {"t_ns": 1, "kind": "marker", "pid": None, "tid": None, "text": "x"})
    filled = 0
    while True:  # a frame under PIPE_BUF is written whole or not at all
        try:
            os.write(write_end, event)
        except BlockingIOError:
            break
        filled += 1
    try:
        assert recorder.finish({"end_reason": "test", "lost_ticks": 0}, budget_ns=50_000_000)
    finally:
        os.close(write_end)
    kinds = [kind for kind, _ in frames.read_frames(read_end)]  # to EOF: the child closes its end when done
    os.close(read_end)
    assert kinds == [frames.EVENT] * filled + [frames.TRAILER]


MS = 1_000_000


@pytest.mark.parametrize("chunk_ns", [None, 2 * MS], ids=["within-a-chunk", "a-chunk-a-tick"])
def test_a_rename_and_a_policy_change_become_events_and_thread_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_ns: int | None
) -> None:
    """What a thread changed about itself, derived by the writer from its stat lines: a new name (an event, and a
    threads row; a leader's name is its process's too) and a new policy or priority (an event at the first row
    that shows it). Each is found against the thread's rows before it in the chunk, or at a chunk's first row
    against the chunk before: here both ways (chunk_ns: one chunk per tick)."""
    if chunk_ns is not None:
        monkeypatch.setattr("samplers.writer_process.FLUSH_EVERY_NS", chunk_ns)
    pid = PID_ABOVE_MAX
    fake = FakeProc(tmp_path / "proc")
    fake.add_thread(pid, pid, comm="host", process_comm="host")
    fake.add_thread(pid, pid + 1, comm="worker", run_ns=100)
    fake.add_thread(pid, pid + 2, comm="steady", run_ns=100)
    out = tmp_path / "changes.ssf"
    changer, changed_at = fake.change_later(
        out,
        0.3,
        (pid, pid + 1, {"comm": "dsp-0", "run_ns": 200, "policy": 1, "rtprio": 50}),
        (pid, pid, {"comm": "host-2", "run_ns": 300}),
    )
    try:
        _record(fake, out, TargetSpec(pids=[pid]), duration_ns=800 * MS, sched="none")
    finally:
        changer.join()
    cap = forensics.load(out)
    events = cap.events
    renamed = events[events["kind"] == "thread_renamed"]
    assert sorted(zip(renamed["tid"], renamed["text"], strict=True)) == [
        (pid, "host -> host-2"),
        (pid + 1, "worker -> dsp-0"),
    ]
    assert (renamed["t_ns"] >= changed_at[0]).all()
    policy = events[events["kind"] == "policy_changed"]
    assert list(zip(policy["tid"], policy["text"], strict=True)) == [(pid + 1, "OTHER/0 -> FIFO/50")]
    worker = cap.samples[cap.samples["tid"] == pid + 1].sort_values("t_ns")
    assert policy["t_ns"].iloc[0] == worker[worker["policy"] == 1]["t_ns"].iloc[0] >= changed_at[0]
    threads = cap.table("threads")
    new_names = threads[threads["t_ns"] >= changed_at[0]]
    assert sorted(zip(new_names["tid"], new_names["comm"], strict=True)) == [(pid, "host-2"), (pid + 1, "dsp-0")]
    assert list(new_names[new_names["tid"] == pid]["process"]) == ["host-2"]  # a leader's name is its process's


@pytest.mark.parametrize("slow_interval_ns", [0, 20_000_000], ids=["tiers-off", "tiers-20ms"])
def test_taskstats_and_sched_read_where_the_counters_can_move(
    tmp_path: Path, monkeypatch, slow_interval_ns: int
) -> None:
    """At a thread's reads, a taskstats query and a sched read where it ran since (its schedstat moved), is in
    R, or sleeps in D (its block-IO delay ends at the wake-up, before it runs again); never for a sleeper
    that did not run: its counters cannot have moved (tiers.counters_may_have_moved). Never between its
    reads (a slow-tier thread's): the increments of such a query would find no window."""
    from samplers import taskstats
    from tests.test_taskstats import V16_OFFSETS, canned_struct, netlink_reply

    stats, _ = canned_struct(16, 560, V16_OFFSETS)
    queried: dict[int, int] = {}

    class CannedClient:  # the kernel's netlink family answers for real threads only; these are canned
        def check_permission(self) -> None:
            pass

        def query_raw(self, tid: int) -> bytes:
            queried[tid] = queried.get(tid, 0) + 1
            return netlink_reply(stats, tid)

        def close(self) -> None:
            pass

    monkeypatch.setattr(taskstats, "TaskstatsClient", CannedClient)
    fake = FakeProc(tmp_path / "proc")
    sched = SCHED_SCHEDSTATS_5_10.decode()
    fake.add_thread(100, 100, comm="sleeper", run_ns=1000, state="S", sched=sched)
    fake.add_thread(100, 101, comm="in-io", run_ns=1000, state="D", sched=sched)
    fake.add_thread(100, 102, comm="runner", run_ns=1000, state="S", sched=sched)
    fake.add_thread(100, 103, comm="spinner", run_ns=1000, state="R", sched=sched)
    out = tmp_path / "taskstats.ssf"
    stop = threading.Event()
    moves: list[int] = []

    def run_now_and_then() -> None:  # the runner runs between some ticks and sleeps again
        value = 1000
        while not stop.wait(0.02):
            value += 1_000_000
            fake.set_thread(100, 102, comm="runner", run_ns=value, state="S")
            moves.append(value)

    mover = threading.Thread(target=run_now_and_then)
    mover.start()
    try:
        _record(
            fake,
            out,
            TargetSpec(pids=[100]),
            duration_ns=300_000_000,
            sched="all",
            taskstats="all",
            slow_interval_ns=slow_interval_ns,
        )
    finally:
        stop.set()
        mover.join()
    cap = forensics.load(out)
    samples = cap.samples
    reads = samples.groupby("tid").size().to_dict()  # a row per tick each thread was read
    assert reads[100] > 50 and reads[101] > (50 if not slow_interval_ns else 5)
    assert queried[100] == 1  # its first read only
    assert queried[101] == reads[101] and queried[103] == reads[103]  # in D, in R: at every read
    runner = samples.loc[samples["tid"] == 102, "run_ns"].to_numpy()
    moved_reads = 1 + int((runner[1:] != runner[:-1]).sum())  # its first read, then each that saw a run
    assert len(moves) >= 2 and 2 <= queried[102] == moved_reads < reads[102]
    rows = cap.table("taskstats")
    assert rows.groupby("tid").size().to_dict() == queried
    read_at = set(zip(samples["tid"], samples["tick"], strict=True))
    assert set(zip(rows["tid"], rows["tick"], strict=True)) <= read_at
    # The sched file by the same rule (tiers.counters_may_have_moved), at the same reads.
    sched_rows = cap.sched
    assert sched_rows.groupby("tid").size().to_dict() == queried
    assert set(zip(sched_rows["tid"], sched_rows["tick"], strict=True)) == set(
        zip(rows["tid"], rows["tick"], strict=True)
    )
