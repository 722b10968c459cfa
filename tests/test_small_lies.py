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
from tests.helpers import REPO, child_env
from tests.recording import catch_load_argv
from tests.synth import MS, SLEEP, T0, Timeline, capture


def _env() -> dict[str, str]:
    return child_env()


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
            [*catch_load_argv(), "-o", str(out), "-p", str(tids[0]), "-d", "0.5s"],
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
        [*catch_load_argv(), "-o", str(tmp_path / "fast.ssf"), "-i", "1us", "-d",
         "0.3s", "--", "sleep", "1"],
        capture_output=True, text=True, env=_env(), cwd=REPO, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    warning = [line for line in proc.stderr.splitlines() if "warning: -i" in line]
    assert len(warning) == 1 and "busy" in warning[0] and "miss" in warning[0]
    slow = subprocess.run(
        [*catch_load_argv(), "-o", str(tmp_path / "ok.ssf"), "-d", "0.3s", "--",
         "sleep", "1"],
        capture_output=True, text=True, env=_env(), cwd=REPO, timeout=120,
    )  # fmt: skip
    assert "warning: -i" not in slow.stderr


CHURN = (
    "import sys, threading, time\n"
    "created = 0\n"
    "end = time.monotonic() + 2.0\n"
    "while time.monotonic() < end:\n"
    "    threading.Thread(target=time.sleep, args=(0.004,)).start()  # lives 4 ms: between two scans\n"
    "    created += 1\n"
    "    time.sleep(0.012)\n"
    "print('created', created, flush=True)\n"
)


def test_short_lived_threads_between_scans_are_counted(tmp_path: Path) -> None:
    out = tmp_path / "churn.ssf"
    proc = subprocess.run(
        [*catch_load_argv(), "-o", str(out), "--", sys.executable, "-c", CHURN],
        capture_output=True, text=True, env=_env(), cwd=REPO, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    created = int(proc.stdout.split("created")[1].split()[0])
    cap = forensics.load(out)
    found_later = int((cap.events["kind"] == "thread_appeared").sum())
    never_read = created - found_later
    unseen = cap.trailer["threads_unseen_min"]
    assert unseen <= never_read  # a lower bound, never more than the truth
    assert unseen >= 0.5 * never_read, (unseen, never_read)  # and not an empty one: most are counted
    assert f"at least {unseen} short-lived threads" in proc.stderr
    info = subprocess.run(
        [sys.executable, "-m", "forensics", "info", str(out)], capture_output=True, text=True, env=_env(), cwd=REPO
    )
    assert f"at least {unseen}:" in info.stdout


def test_absurd_durations_are_one_line() -> None:
    for option, value in (("-d", "1e999s"), ("-i", "1e30s"), ("-d", "nan"), ("-i", "0ms"), ("-i", "0.002")):
        proc = subprocess.run(
            [*catch_load_argv(), option, value, "--", "true"],
            capture_output=True, text=True, env=_env(), cwd=REPO, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 2, (option, value, proc.stderr)
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
