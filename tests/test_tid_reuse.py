"""A reused thread id is a new thread: (tid, start time) keeps them apart.

The kernel hands a tid out again once its thread has gone. To reuse tids on demand, without burning
through the machine's pid space, the target runs in its own pid namespace (with the recorder, which
must see that namespace's /proc) and sets /proc/sys/kernel/ns_last_pid to one below the tid that just
ended: the next thread gets it. The new thread runs more than the old one, so its counters do not go
backwards: only the start time tells the two apart.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import forensics
from analyses.windows import thread_windows

REPO = Path(__file__).resolve().parent.parent
REUSE = """
import threading, time
def life(run_ms, sleep_ms):
    end = time.monotonic() + run_ms / 1000
    while time.monotonic() < end:
        pass
    time.sleep(sleep_ms / 1000)
for _ in range(8):
    old = []
    t = threading.Thread(target=lambda: (old.append(threading.get_native_id()), life(3, 100)))
    t.start(); t.join()
    time.sleep(0.06)
    with open("/proc/sys/kernel/ns_last_pid", "w") as fh:
        fh.write(str(old[0] - 1))
    new = []
    t = threading.Thread(target=lambda: (new.append(threading.get_native_id()), life(60, 60)))
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
        capture_output=True, text=True, timeout=300, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("reused") >= 6, done.stdout  # ns_last_pid did its job
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


def test_views_show_no_share_above_100_and_no_negative_amount(reused: forensics.Capture) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "forensics", "summarize", str(reused.path), "--json"],
        capture_output=True, text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    numbers = _numbers(json.loads(done.stdout))
    times = ("t_ns", "start", "end", "origin", "offset")
    negative = [(p, v) for p, v in numbers if v < 0 and not any(t in p.rsplit(".", 1)[-1] for t in times)]
    assert not negative, negative[:5]
    shares = [(p, v) for p, v in numbers if p.rsplit(".", 1)[-1].endswith(("pct", "_share", "percent"))]
    assert shares and max(v for _, v in shares) <= 100.0 + 1e-9, sorted(shares, key=lambda x: -x[1])[:5]
    assert np.isfinite([v for _, v in numbers]).all()
