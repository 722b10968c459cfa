"""End to end, as root: record a process with known behaviour through eBPF and check what is said about it.

The workload (tests/workloads/exact_workload.py) sleeps on a timer, blocks on a pipe that a known thread
writes, fsyncs, and runs two threads pinned to one CPU; it reports CLOCK_MONOTONIC ns around every
operation. The collector runs with delay accounting on; taskstats is read before and after.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyses import exact
from samplers.ebpf import EbpfCollector, EbpfOptions, merge_tables
from samplers.sysctl_guard import SysctlGuard

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workloads.observe import Observation, observe_workload

from tests.helpers import child_env

HALF_MS = 500_000


pytestmark = [pytest.mark.needs_root, pytest.mark.needs_bcc]


@pytest.fixture(scope="module", params=["mmap", "callback"])
def observed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Observation:
    state = tmp_path_factory.mktemp("sysctl-state")
    fsync_dir = Path("/var/tmp") if Path("/var/tmp").is_dir() else tmp_path_factory.mktemp("io")  # a real disk
    with SysctlGuard({"kernel.task_delayacct": "1"}, state_dir=state) as guard:
        on = guard.outcomes["kernel.task_delayacct"].in_force
        return observe_workload(fsync_dir, EbpfOptions(reader=request.param), delayacct=on)


@pytest.fixture(scope="module")
def intervals(observed: Observation) -> tuple[pd.DataFrame, pd.DataFrame]:
    sw, wk = observed.table("sched_switch"), observed.table("sched_wakeup")
    pids = [observed.pid, *observed.spinner_pids]
    return exact.cpu_intervals(sw, pids), exact.off_cpu_intervals(sw, wk, pids)


def _inside(frame: pd.DataFrame, tid: int, start: int, end: int) -> pd.DataFrame:
    return frame[(frame["tid"] == tid) & (frame["start_ns"] >= start) & (frame["end_ns"] <= end)]


def test_nothing_lost_and_only_targets(observed: Observation) -> None:
    assert sum(observed.stats["lost"].values()) == 0, observed.stats  # the ring buffer never overflowed
    assert observed.stats["odd_records"] == 0
    # Every record written by the probes reached the tables (the readers drop nothing).
    assert observed.stats["events"]["sched_switch"] == len(observed.table("sched_switch"))
    assert observed.stats["events"]["page_fault_user"] == len(observed.table("page_faults"))
    sw = observed.table("sched_switch")
    targets = {observed.pid, *observed.spinner_pids}
    assert (sw["prev_pid"].isin(targets) | sw["next_pid"].isin(targets)).all()
    assert observed.table("sched_wakeup")["pid"].isin(targets).all()
    assert observed.table("page_faults")["pid"].isin(targets).all()
    names = set(sw.loc[sw["prev_pid"].isin(targets), "prev_comm"].astype(str))
    assert set(observed.tids) <= names


def test_intervals_tile_each_thread_timeline(
    observed: Observation, intervals: tuple[pd.DataFrame, pd.DataFrame]
) -> None:
    on, off = intervals
    gaps = exact.timeline_gaps(observed.table("sched_switch"), [observed.pid, *observed.spinner_pids])
    total = 0
    for name, tid in observed.tids.items():
        pieces = [
            on.loc[on.tid == tid, ["start_ns", "end_ns"]],
            off.loc[off.tid == tid, ["start_ns", "end_ns"]],
            gaps.loc[gaps.tid == tid, ["start_ns", "end_ns"]],
        ]
        both = pd.concat(pieces).sort_values("start_ns")
        total += len(both)
        assert len(both) > 4, name
        # Exact: every switch-out is the next interval's start, to the ns; where an edge is missing, the
        # span is reported as a gap (unknown), never papered over.
        holes = np.flatnonzero(both["start_ns"].to_numpy()[1:] != both["end_ns"].to_numpy()[:-1])
        assert len(holes) == 0, (name, both.iloc[max(0, holes[0] - 2) : holes[0] + 3].to_string())
    # Missing edges are rare (here: the kernel's own, seen by ftrace too; 0 to 3 per run of ~200 edges).
    assert len(gaps) <= max(2, 0.02 * total), gaps


def _around(observed: Observation, intervals: tuple[pd.DataFrame, pd.DataFrame], tid: int, span: dict) -> str:
    """What was recorded of `tid` around `span` (its own clock readings), for an assertion's message: its on- and
    off-CPU intervals that overlap it and its switch events within 2 ms of it, times relative to span's start."""
    start, end = span["start_ns"], span["end_ns"]
    parts = [f"tid {tid}, span 0..{end - start} ns; collector stats {observed.stats}"]
    for name, frame in zip(("on-CPU", "off-CPU"), intervals, strict=True):
        mine = frame[(frame["tid"] == tid) & (frame["start_ns"] < end) & (frame["end_ns"] > start)].copy()
        mine[["start_ns", "end_ns"]] -= start
        parts.append(f"{name} intervals overlapping it:\n{mine.to_string()}")
    sw = observed.table("sched_switch")
    near = sw[
        ((sw["prev_tid"] == tid) | (sw["next_tid"] == tid)) & sw["t_ns"].between(start - 2_000_000, end + 2_000_000)
    ]
    parts.append(f"its switches within 2 ms:\n{near.assign(t_ns=near['t_ns'] - start).to_string()}")
    return "\n".join(parts)


def _overlaps_a_gap(gaps: pd.DataFrame, tid: int, start: int, end: int) -> bool:
    mine = gaps[gaps["tid"] == tid]
    return bool(((mine["start_ns"] < end) & (mine["end_ns"] > start)).any())


def test_timer_sleeps(observed: Observation, intervals: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    _, off = intervals
    tid = observed.tids["ex-sleeper"]
    gaps = exact.timeline_gaps(observed.table("sched_switch"), [observed.pid, *observed.spinner_pids])
    lead, tail = [], []
    unknown_wakers = 0
    for sleep in observed.truth["sleeps"]:
        if _overlaps_a_gap(gaps, tid, sleep["start_ns"], sleep["end_ns"]):
            continue  # the kernel emitted no switch there: that span is unknown (see exact.timeline_gaps)
        window = _inside(off, tid, sleep["start_ns"], sleep["end_ns"])
        # One sleep on the timer: the longest S. Other S intervals in the window are CPython's GIL
        # hand-over (a futex, woken by the thread that releases it), before or after the sleep.
        asleep = window[window["state"] == "S"]
        assert len(asleep) >= 1, _around(observed, intervals, tid, sleep)
        row = asleep.loc[asleep["duration_ns"].idxmax()]
        if pd.isna(row["waker_context"]):
            # No waking recorded: the waker is reported unknown (null), never guessed. It happens when
            # the kernel skipped one of our probes (counted in stats["missed"]), and rarely without a
            # count on this VM kernel, which also drops the odd sched_switch (see exact.timeline_gaps).
            unknown_wakers += 1
            continue
        assert row["waker_context"] == "hrtimer", window
        slept = asleep[asleep["waker_context"] == "hrtimer"]
        assert len(slept) == 1, window
        assert row["waker_function"] == "hrtimer_wakeup"
        others = asleep[asleep.index != slept.index[0]]
        assert (others["waker_context"] == "task").all() and (others["waker_pid"] == observed.pid).all()
        # time.sleep(0.008) sleeps until an absolute deadline computed before the syscall (CPython's
        # clock_nanosleep(TIMER_ABSTIME)): the switch-in is at least 8 ms after the thread's t0.
        assert row["end_ns"] - sleep["start_ns"] >= 8_000_000
        assert row["waking_ns"] <= row["wakeup_ns"] <= row["end_ns"]
        assert row["runqueue_ns"] == row["end_ns"] - row["wakeup_ns"]
        lead.append(row["start_ns"] - sleep["start_ns"])
        tail.append(sleep["end_ns"] - row["end_ns"])
    assert unknown_wakers <= max(1, sum(observed.stats["missed"].values()))
    assert len(lead) >= len(observed.truth["sleeps"]) - 2
    # Start and end within 0.5 ms of the thread's own clock readings (median: one unlucky preemption
    # between the clock read and the syscall on a shared machine does not decide it).
    assert np.median(lead) < HALF_MS and np.median(tail) < HALF_MS, (lead, tail)


def test_pipe_waits_name_the_writer(observed: Observation, intervals: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    _, off = intervals
    waiter, waker = observed.tids["ex-waiter"], observed.tids["ex-waker"]
    writes = observed.truth["writes"]
    gaps = exact.timeline_gaps(observed.table("sched_switch"), [observed.pid, *observed.spinner_pids])
    for wait in observed.truth["pipe_waits"]:
        if _overlaps_a_gap(gaps, waiter, wait["start_ns"], wait["end_ns"]):
            continue  # unknown span (see test_timer_sleeps)
        window = _inside(off, waiter, wait["start_ns"], wait["end_ns"])
        slept = window[window["state"] == "S"]
        assert len(slept) >= 1, window
        row = slept.loc[slept["duration_ns"].idxmax()]
        assert row["waker_tid"] == waker and row["waker_comm"] == "ex-waker" and row["waker_context"] == "task"
        assert any(w["start_ns"] <= row["waking_ns"] <= w["end_ns"] for w in writes)


def test_waker_priority(observed: Observation, intervals: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    _, off = intervals
    table = exact.wakers(off, observed.table("sched_switch"))
    by_writer = table[table["waker_tid"] == observed.tids["ex-waker"]]
    assert len(by_writer) >= len(observed.truth["pipe_waits"])
    # The example's threads inherit this process's nice (0 in CI; a test run under `nice` shifts both).
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    assert (by_writer["waker_prio"] == 120 + nice).all() and (by_writer["waker_class"] == "normal").all()
    assert not by_writer["waker_lower_priority"].any()  # both SCHED_OTHER at one nice: no inversion


def test_fsync_waits_in_d_with_block_io(observed: Observation, intervals: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    _, off = intervals
    tid = observed.tids["ex-fsync"]
    rq = observed.table("block_rq")
    d_total = 0
    gaps = exact.timeline_gaps(observed.table("sched_switch"), [observed.pid, *observed.spinner_pids])
    for fsync in observed.truth["fsyncs"]:
        if _overlaps_a_gap(gaps, tid, fsync["start_ns"], fsync["end_ns"]):
            continue  # unknown span (see test_timer_sleeps)
        window = _inside(off, tid, fsync["start_ns"], fsync["end_ns"])
        d = window[window["state"] == "D"]
        assert len(d) >= 1, window
        d_total += int(d["duration_ns"].sum())
        issued = rq[
            (rq["kind"] == "issue") & (rq["tid"] == tid) & rq["t_ns"].between(fsync["start_ns"], fsync["end_ns"])
        ]
        assert len(issued) >= 1
        completed = rq[rq["kind"] == "complete"].merge(issued[["dev", "sector"]], on=["dev", "sector"])
        assert len(completed) >= len(issued)
        assert (issued["rwbs"].astype(str).str.startswith("W")).all()
    # Delay accounting on: blkio delay counts io_schedule() sleeps (kernel/sched/core.c), which are D
    # sleeps: every fsync adds at least one to blkio_count. It is not all of the D time: fsync on ext4
    # also sleeps in D without block IO (journal commit waits, timed waits); measured here: blkio / D
    # time from 0.47 to 0.98 over 20 local runs, so "D" alone does not prove IO; blkio does. No upper
    # bound is asserted: one CI run counted 2.38 ms of blkio against 1.38 ms of D seen in the whole run
    # (a stale blkio start in the kernel, as in the uptime jump of exact.taskstats_deltas, or a D sleep
    # hidden by a missing switch edge: that run did not say which). The verdicts clip io to the D time
    # (test_exact_stalls.py::test_blkio_over_count_is_clipped_to_d_time).
    deltas = exact.taskstats_deltas(observed.taskstats)
    mine = deltas[deltas["tid"] == tid]
    blkio = int(mine["blkio_delay_ns"].sum())  # glitches (null) left out
    before, after = observed.taskstats_before[tid], observed.taskstats_after[tid]
    context = (before.get("blkio_count"), after.get("blkio_count"), len(mine), observed.meta.get("delayacct"), d_total)
    assert int(mine["blkio_count"].sum()) >= len(observed.truth["fsyncs"]), context
    if mine["glitch"].any():
        # The kernel's uptime-sized jump (see exact.taskstats_deltas) hit this thread: that increment is
        # unknown (null), never counted as a multi-minute wait.
        assert mine.loc[mine["glitch"], "blkio_delay_ns"].isna().all()
    else:
        assert blkio > 0, context
    # Every increment of blkio_count comes with a D sleep that ended (was woken) in that poll interval:
    # the count is incremented at the wake-up (delayacct_blkio_end from try_to_wake_up), never otherwise.
    # 1 ms either side: a poll's timestamp is taken just before its netlink query.
    d_sleeps = off[(off["tid"] == tid) & (off["state"] == "D")]
    woken = np.sort(d_sleeps["ready_ns"].fillna(d_sleeps["end_ns"]).astype(np.int64).to_numpy())
    for row in mine[mine["blkio_count"].fillna(0) > 0].itertuples():
        lo, hi = row.prev_t_ns - 1_000_000, row.t_ns + 1_000_000
        if not _overlaps_a_gap(gaps, tid, lo, hi):
            ended = np.searchsorted(woken, hi, side="right") - np.searchsorted(woken, lo, side="left")
            assert ended >= 1, (row, context)


def test_pipe_waits_carry_no_blkio(observed: Observation) -> None:
    tid = observed.tids["ex-waiter"]
    deltas = exact.taskstats_deltas(observed.taskstats)
    mine = deltas[deltas["tid"] == tid]
    assert len(mine) >= 1 and mine["blkio_delay_ns"].notna().all()
    assert int(mine["blkio_delay_ns"].sum()) == 0 and int(mine["blkio_count"].sum()) == 0
    assert observed.taskstats_after[tid]["blkio_count"] == observed.taskstats_before[tid]["blkio_count"]


def test_pinned_processes_preempt_each_other(
    observed: Observation, intervals: tuple[pd.DataFrame, pd.DataFrame]
) -> None:
    on, off = intervals
    a, b = observed.tids["ex-spin-a"], observed.tids["ex-spin-b"]
    spins = {s["tid"]: s for s in observed.truth["spins"]}
    assert set(spins) == {a, b}
    start = max(spins[a]["start_ns"], spins[b]["start_ns"])
    end = min(spins[a]["end_ns"], spins[b]["end_ns"])
    assert end - start > 5_000_000  # both were runnable on the one CPU at the same time for a while
    runs = []
    for me in (a, b):
        window = _inside(off, me, spins[me]["start_ns"], spins[me]["end_ns"])
        assert len(window) >= 1, window
        # A spinner never sleeps: every off-CPU interval is a preemption (runnable all along).
        assert (window["state_class"] == "preempted").all(), window["state"].value_counts()
        assert (window["runqueue_ns"] == window["duration_ns"]).all()
        runs.append(_inside(on, me, spins[me]["start_ns"], spins[me]["end_ns"]))
    # Pinned to one CPU: every run of either is on that CPU, and no run of one overlaps a run of the
    # other, so while both spun, their CPU time adds up to no more than the time that passed.
    both = pd.concat(runs).sort_values("start_ns")
    assert both["cpu"].nunique() == 1
    assert (both["start_ns"].to_numpy()[1:] >= both["end_ns"].to_numpy()[:-1]).all()
    during = both[(both["start_ns"] >= start) & (both["end_ns"] <= end)]
    assert during["duration_ns"].sum() <= end - start


def test_runqueue_latency_table(intervals: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    _, off = intervals
    rq = exact.runqueue_latency(off)
    assert set(rq["cause"]) <= {"wakeup", "preempted"}
    assert (rq["latency_ns"] >= 0).all()
    assert (rq["run_ns"] - rq["ready_ns"] == rq["latency_ns"]).all()
    assert (rq["cause"] == "wakeup").sum() >= 10


def test_tracefs_mounted_when_missing() -> None:
    """In a private mount namespace without tracefs, the collector's helper mounts it and says so."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("unshare (util-linux) is needed for a private mount namespace")
    code = (
        "import subprocess\n"
        "from samplers.ebpf.tracefs import ensure_tracefs, find_tracefs, release_tracefs\n"
        # debugfs, where mounted, auto-mounts tracefs at debug/tracing on access (the helper would use it)
        "for where in ('/sys/kernel/debug/tracing', '/sys/kernel/debug', '/sys/kernel/tracing'):\n"
        "    subprocess.run(['umount', where], capture_output=True)\n"
        "assert find_tracefs() is None, 'still mounted'\n"
        "status = ensure_tracefs()\n"
        "print(status.mounted_by_us, status.message)\n"
        "release_tracefs(status)\n"
        "print(find_tracefs(['/sys/kernel/tracing']))\n"
    )
    env = child_env()
    result = subprocess.run(
        [unshare, "--mount", "--propagation", "private", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.strip().splitlines()
    assert first.startswith("True mounted tracefs at /sys/kernel/tracing")
    assert second == "None"  # unmounted again at the end


def test_without_privileges_one_line_and_no_probe_left() -> None:
    """uid 0 without capabilities (setpriv): start() fails with one plain line; nothing stays attached."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is needed to drop capabilities")
    code = (
        "import os\n"
        "from samplers.ebpf import EbpfCollector, EbpfUnavailable\n"
        "try:\n"
        "    EbpfCollector([os.getpid()]).start()\n"
        "except EbpfUnavailable as err:\n"
        "    print('UNAVAILABLE', err)\n"
    )
    env = child_env()
    result = subprocess.run(
        [setpriv, "--bounding-set=-all", "--inh-caps=-all", "--", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("UNAVAILABLE ") and "recording without eBPF" in lines[0], result
    assert "Traceback" not in result.stderr


def test_processes_added_and_removed_while_recording() -> None:
    # Ticking until killed: a fixed count (400 x 2 ms) ran out before the third poll on a loaded machine,
    # where BCC's compile in start() alone takes seconds, and the third poll then held no switch at all.
    ticking = "import time\nwhile True:\n    time.sleep(0.002)\n"
    a = subprocess.Popen([sys.executable, "-c", ticking])
    b = subprocess.Popen([sys.executable, "-c", ticking])
    collector = EbpfCollector([a.pid], EbpfOptions(faults=False, block=False))
    try:
        collector.start()
        first = collector.poll(150)
        collector.add_tgids([b.pid])  # found later, as a recorder discovers processes
        second = collector.poll(150)
        collector.remove_tgids([b.pid])
        removed_at = time.monotonic_ns()
        third = merge_tables([collector.poll(150), collector.stop()])
    finally:
        a.kill()
        b.kill()
        a.wait()
        b.wait()
    # prev_pid is any task's (the switch is kept if the other side is a target); next_pid is filled only
    # for target threads: it tells which processes the probes treat as targets.
    first_sw, second_sw = first["sched_switch"].to_pandas(), second["sched_switch"].to_pandas()
    assert ((first_sw["prev_pid"] == a.pid) | (first_sw["next_pid"] == a.pid)).all()
    assert not (first_sw["next_pid"] == b.pid).any()
    assert (second_sw["next_pid"] == b.pid).any() and (second_sw["next_pid"] == a.pid).any()
    late = third["sched_switch"].to_pandas()
    late = late[late["t_ns"] > removed_at + 1_000_000]
    assert (late["prev_pid"] == a.pid).any()
    # b no longer counts: its switches are kept only where a is the other side, and the probes no
    # longer know its threads (next_pid is filled for targets only).
    assert ((late["prev_pid"] == a.pid) | (late["next_pid"] == a.pid)).all()
    assert not (late["next_pid"] == b.pid).any()
