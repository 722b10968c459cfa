"""A reused thread id is a new thread: (tid, start time) keeps them apart.

The kernel hands a tid out again once its thread has gone. To reuse tids on demand, without burning
through the machine's pid space, the target runs in its own pid namespace (with the recorder, which
must see that namespace's /proc) and sets /proc/sys/kernel/ns_last_pid to one below the tid that just
ended: the next thread gets it. Every other time the new thread runs more than the old one, so its
counters do not go backwards and only the start time tells the two apart; the others run less (a fresh
short-lived thread, as churn makes them), so a delta across the two would be negative.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import forensics
from analyses.threads import thread_profiles
from analyses.windows import thread_windows
from capture.format import _incarnations
from tests.helpers import REPO, child_env

REUSE = """
import threading, time
def life(run_ms, sleep_ms):
    end = time.monotonic() + run_ms / 1000
    while time.monotonic() < end:
        pass
    time.sleep(sleep_ms / 1000)
for i in range(8):
    old = []
    first, second = ((3, 100), (60, 60)) if i % 2 else ((60, 60), (3, 100))
    t = threading.Thread(target=lambda: (old.append(threading.get_native_id()), life(*first)))
    t.start(); t.join()
    time.sleep(0.06)
    with open("/proc/sys/kernel/ns_last_pid", "w") as fh:
        fh.write(str(old[0] - 1))
    new = []
    t = threading.Thread(target=lambda: (new.append(threading.get_native_id()), life(*second)))
    t.start(); t.join()
    print("reused" if new == old else "not reused", old[0], flush=True)
    time.sleep(0.06)
"""


@pytest.fixture(scope="module")
def reused(tmp_path_factory: pytest.TempPathFactory) -> forensics.Capture:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and util-linux's unshare (a pid namespace of its own)")
    out = tmp_path_factory.mktemp("reuse") / "reuse.ssf"
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "forensics.cli.catch_load", "-q",
         "-o", str(out), "--", sys.executable, "-c", REUSE],
        capture_output=True, text=True, timeout=300, cwd=REPO, env=child_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # ns_last_pid did its job: whole lines, as "not reused" also contains "reused".
    lines = done.stdout.splitlines()
    assert sum(line.split()[0] == "reused" for line in lines if line.strip()) >= 6, done.stdout
    return forensics.load(out)


def _reused_tids(cap: forensics.Capture) -> dict[int, list[int]]:
    threads = cap.table("threads")
    starts = threads.groupby("tid")["starttime"].unique()
    return {int(tid): sorted(int(s) for s in values) for tid, values in starts.items() if len(values) > 1}


def test_samples_carry_the_thread_start_time(reused: forensics.Capture) -> None:
    tids = _reused_tids(reused)
    assert len(tids) >= 6
    samples = reused.samples
    for tid, starts in tids.items():
        assert sorted(samples.loc[samples["tid"] == tid, "starttime"].unique().tolist()) == starts


def test_no_window_spans_two_threads_of_one_tid(reused: forensics.Capture) -> None:
    samples = reused.samples
    windows = thread_windows(reused)
    for tid, starts in _reused_tids(reused).items():
        second = samples[(samples["tid"] == tid) & (samples["starttime"] == starts[1])]["t_ns"].min()
        mine = windows[windows["tid"] == tid]
        spanning = mine[(mine["start_ns"] < second) & (mine["end_ns"] >= second)]
        assert spanning.empty, spanning[["start_ns", "end_ns", "run_delta_ns"]]
        assert (mine[["on_cpu_ns", "runqueue_ns", "off_cpu_ns"]].to_numpy() >= 0).all()
        assert (mine["on_cpu_ns"] + mine["runqueue_ns"] <= mine["wall_ns"]).all()


def _numbers(value: object, path: str = "") -> list[tuple[str, float]]:
    if isinstance(value, dict):
        return [n for k, v in value.items() for n in _numbers(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v, path)]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return [(path, float(value))]
    return []


def _forensics(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "forensics", *args],
        capture_output=True, text=True, cwd=REPO, env=child_env(), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done


# Times, and rtprio's -1 for "no real-time priority": not amounts.
TIMES = ("t_ns", "start", "end", "origin", "offset", "first", "last", "exit", "at", "rtprio")


def _no_negative_and_no_share_above_100(numbers: list[tuple[str, float]]) -> None:
    negative = [(p, v) for p, v in numbers if v < 0 and not any(t in p.rsplit(".", 1)[-1] for t in TIMES)]
    assert not negative, negative[:5]
    shares = [(p, v) for p, v in numbers if p.rsplit(".", 1)[-1].endswith(("pct", "share", "percent"))]
    assert not shares or max(v for _, v in shares) <= 100.0 + 1e-9, sorted(shares, key=lambda x: -x[1])[:5]
    assert np.isfinite([v for _, v in numbers]).all()


# Every thread chosen where a view chooses (stalls and jitter watch periodic or real-time ones).
EVERY_THREAD = {"stalls": ("--all",), "jitter": ("--thread", ".")}


@pytest.mark.parametrize("view", ["summarize", "stalls", "spikes", "system", "jitter"])
def test_views_show_no_share_above_100_and_no_negative_amount(reused: forensics.Capture, view: str) -> None:
    done = _forensics(view, str(reused.path), "--json", *EVERY_THREAD.get(view, ()))
    numbers = _numbers(json.loads(done.stdout))
    _no_negative_and_no_share_above_100(numbers)
    assert numbers


def test_report_shows_no_share_above_100_and_no_negative_amount(reused: forensics.Capture, tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    _forensics("report", str(reused.path), "-o", str(out))
    text = out.read_text()
    shares = [float(v) for v in re.findall(r"(-?\d+(?:\.\d+)?) %", text)]
    assert shares and max(shares) <= 100.0 and min(shares) >= 0, sorted(shares)[-5:]
    assert not re.search(r"\| -\d", text)  # no negative figure in any table cell


def test_exports_keep_threads_of_one_tid_apart(reused: forensics.Capture, tmp_path: Path) -> None:
    _forensics("export", str(reused.path), "--format", "csv", "-o", str(tmp_path / "tables"))
    threads = pd.read_csv(tmp_path / "tables" / "threads.csv")
    for tid, starts in _reused_tids(reused).items():
        assert sorted(threads.loc[threads["tid"] == tid, "starttime"].tolist()) == starts
    for name in ("samples", "windows", "verdicts"):
        table = pd.read_csv(tmp_path / "tables" / f"{name}.csv").select_dtypes("number")
        amounts = [c for c in table.columns if not any(t in c for t in TIMES)]
        assert not (table[amounts] < 0).any().any(), (name, table[amounts].min()[lambda m: m < 0])
    _forensics("export", str(reused.path), "--format", "perfetto", "-o", str(tmp_path / "trace.json"))
    events = json.loads((tmp_path / "trace.json").read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    assert all(e.get("dur", 0) >= 0 for e in events)
    counters = [v for e in events if e.get("ph") == "C" for v in e.get("args", {}).values()]
    assert counters and min(counters) >= 0


def test_threads_are_one_row_per_tid_and_start_time(reused: forensics.Capture) -> None:
    """Capture.threads, `dump --table threads` and `info` count a reused tid as the threads it was, each
    with its own life: first and last seen, and exit, in order and apart."""
    threads = reused.threads
    tids = _reused_tids(reused)
    assert len(threads) == threads[["tid", "starttime"]].drop_duplicates().shape[0]
    for tid in tids:
        lives = threads[threads["tid"] == tid].sort_values("first_ns")
        first, last, gone = (lives[c].astype("int64").to_numpy() for c in ("first_ns", "last_ns", "exit_ns"))
        assert (first <= last).all() and (last <= gone).all()
        assert (gone[:-1] < first[1:]).all(), lives  # the old thread ended before the new one appeared
    info = _forensics("info", str(reused.path)).stdout
    assert re.search(rf"distinct threads\s+{len(threads)}\b", info), info


def test_thread_profiles_add_each_threads_own_deltas(reused: forensics.Capture) -> None:
    """The per-thread totals behind summarize, spikes, stalls and jitter: a tid that was two threads has
    the two threads' own deltas added up, never one delta from the first thread's counters to the second's."""
    profiles = thread_profiles(reused).set_index("tid")
    samples = reused.samples
    for tid in _reused_tids(reused):
        lives = samples[samples["tid"] == tid].groupby("starttime")
        for total, counter in (("on_cpu_ns", "run_ns"), ("runqueue_ns", "wait_ns"), ("switches", "slices")):
            own = int((lives[counter].max() - lives[counter].min()).sum())
            assert int(profiles.at[tid, total]) == own, (tid, total)
        walls = int((lives["t_ns"].max() - lives["t_ns"].min()).sum())
        assert int(profiles.at[tid, "wall_ns"]) == walls


def test_a_threads_row_without_a_start_time_stays_with_its_own_tid() -> None:
    """A rename row (no start time) belongs to the thread its tid was when it was written; a tid whose
    start time was never read is one thread, never given the next tid's start time."""
    rows = pd.DataFrame(
        {"tid": [5, 5, 5, 5, 6, 6, 7], "t_ns": [1, 2, 3, 4, 1, 2, 1], "starttime": [None, 10, None, 20, None, None, 30]}
    )
    threads = _incarnations(rows).set_index(["tid", "t_ns"])["_thread"]
    assert threads.loc[5].tolist() == [10, 10, 10, 20]
    assert threads.loc[6].tolist() == [-1, -1]
    assert threads.loc[7].tolist() == [30]
