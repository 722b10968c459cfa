"""Small ways a recording or an export misled: a trace of threads that only sleep, a thread id given
as a process, an interval no machine can hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import forensics
from forensics.cli.export import perfetto_trace
from tests.synth import MS, SLEEP, T0, Timeline, capture

REPO = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO))


def test_perfetto_trace_of_threads_that_only_sleep() -> None:
    sleepers = []
    for tid in (1001, 1002):
        tl = Timeline(tid=tid, comm=f"sleeper-{tid}")
        tl.add(T0, T0 + 200 * MS, SLEEP)
        sleepers.append(tl)
    cap = capture(sleepers, t0=T0, duration_ns=200 * MS)
    data = json.loads(perfetto_trace(cap, "sleepers"))
    names = {e["args"]["name"] for e in data["traceEvents"] if e.get("ph") == "M" and e["name"] == "thread_name"}
    assert {"sleeper-1001 (1001)", "sleeper-1002 (1002)"} <= names  # both threads, with no run slice
    assert not [e for e in data["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "sched"]


def test_a_thread_id_given_as_pid_records_its_process(tmp_path: Path) -> None:
    done = threading.Event()
    tids: list[int] = []

    def worker() -> None:
        tids.append(threading.get_native_id())
        done.wait(60)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    while not tids:
        time.sleep(0.01)
    out = tmp_path / "tid.ssf"
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "forensics.cli.catch_load", "-o", str(out), "-p", str(tids[0]), "-d", "0.5s"],
            capture_output=True,
            text=True,
            env=_env(),
            cwd=REPO,
            timeout=120,
        )
    finally:
        done.set()
    assert proc.returncode == 0, proc.stderr
    assert f"{tids[0]} is a thread of process {os.getpid()}" in proc.stderr
    samples = forensics.load(out).samples
    assert set(samples["pid"]) == {os.getpid()}  # not the thread id in place of the process id
    assert {os.getpid(), tids[0]} <= set(samples["tid"])


def test_an_interval_below_what_a_tick_costs_is_a_warning(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "forensics.cli.catch_load", "-o", str(tmp_path / "fast.ssf"), "-i", "1us", "-d",
         "0.3s", "--", "sleep", "1"],
        capture_output=True, text=True, env=_env(), cwd=REPO, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    warning = [line for line in proc.stderr.splitlines() if "warning: -i" in line]
    assert len(warning) == 1 and "busy" in warning[0] and "miss" in warning[0]
    slow = subprocess.run(
        [sys.executable, "-m", "forensics.cli.catch_load", "-o", str(tmp_path / "ok.ssf"), "-d", "0.3s", "--",
         "sleep", "1"],
        capture_output=True, text=True, env=_env(), cwd=REPO, timeout=120,
    )  # fmt: skip
    assert "warning: -i" not in slow.stderr
