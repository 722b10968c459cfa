"""A small process with known behaviour, for end-to-end tests of the exact sources (eBPF, taskstats).

Run as `python tests/workloads/exact_workload.py [--fsync-dir DIR]`. It starts its threads, prints one
JSON line {"pid", "tids": {name: tid}} and waits for a line on stdin ("go"), so the observer can attach
first. Then each thread does its part, recording CLOCK_MONOTONIC ns around every operation; when all
are done the process prints one JSON line of ground truth {"sleeps": [...], "pipe_waits": [...],
"fsyncs": [...], "spins": [...], "writes": [...]}, and its threads stay alive (asleep) until a second
line arrives on stdin, so their final counters can still be read. Threads (by name):

  ex-sleeper   5 x (spin 1 ms, sleep 8 ms in clock_nanosleep)        -> S, woken by an hrtimer
  ex-waiter    5 x block in read() on a pipe                          -> S, woken by ex-waker
  ex-waker     5 x (sleep 6 ms, write one byte to the pipe)
  ex-fsync     4 x (write 256 KiB, fsync) in --fsync-dir              -> D, block IO, blkio delay
  ex-spin-a/b  two child PROCESSES (their pids are in "spinner_pids": add them as targets), both
               pinned to the same CPU, spinning 60 ms at once -> preempted by each other (R). Processes,
               not threads: two Python threads would take turns on the GIL (S) instead.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable

now = time.monotonic_ns

SPINNER = """
import ctypes, json, os, sys, time
name, cpu = sys.argv[1], int(sys.argv[2])
os.sched_setaffinity(0, {cpu})
ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)
print("ready", flush=True)
sys.stdin.readline()
t0 = time.monotonic_ns()
end = t0 + 60_000_000
while time.monotonic_ns() < end:
    pass
print(json.dumps({"tid": os.getpid(), "start_ns": t0, "end_ns": time.monotonic_ns()}), flush=True)
"""


def spin_for(ns: int) -> None:
    end = now() + ns
    while now() < end:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fsync-dir", default=".")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    truth: dict[str, list[dict[str, int]]] = {"sleeps": [], "pipe_waits": [], "fsyncs": [], "spins": [], "writes": []}
    tids: dict[str, int] = {}
    ready = threading.Barrier(6)
    done = threading.Barrier(6)
    go = threading.Event()
    finish = threading.Event()
    read_fd, write_fd = os.pipe()
    lock = threading.Lock()

    def record(kind: str, **values: int) -> None:
        with lock:
            truth[kind].append(values)

    def named(name: str) -> None:
        threading.current_thread().name = name
        try:
            import ctypes

            libc = ctypes.CDLL(None)
            libc.prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME: the comm the kernel reports
        except OSError:
            pass
        tids[name] = threading.get_native_id()
        ready.wait()
        go.wait()

    def sleeper() -> None:
        named("ex-sleeper")
        for _ in range(args.rounds):
            spin_for(1_000_000)
            t0 = now()
            time.sleep(0.008)
            record("sleeps", tid=threading.get_native_id(), start_ns=t0, end_ns=now())

    def waiter() -> None:
        named("ex-waiter")
        for _ in range(args.rounds):
            t0 = now()
            os.read(read_fd, 1)
            record("pipe_waits", tid=threading.get_native_id(), start_ns=t0, end_ns=now())

    def waker() -> None:
        named("ex-waker")
        for _ in range(args.rounds):
            time.sleep(0.006)
            blocked_in_read(tids["ex-waiter"])
            t0 = now()
            os.write(write_fd, b"x")
            record("writes", tid=threading.get_native_id(), start_ns=t0, end_ns=now())

    def blocked_in_read(tid: int) -> None:
        """Until the waiter sleeps in its read of the pipe (its /proc syscall file: "0 0x<fd>", read on that fd):
        a byte written before it got there is read at once, and its pipe wait is no wait (a CI run beside other
        work: the waiter, late for the GIL, found the byte there and never slept)."""
        wanted = ["0", hex(read_fd)]
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/self/task/{tid}/syscall") as fh:
                    if fh.read().split()[:2] == wanted:
                        return
            except OSError:
                return  # no such file here: write as before
            time.sleep(0.0002)

    def fsyncer() -> None:
        named("ex-fsync")
        path = os.path.join(args.fsync_dir, f"exact-workload-{os.getpid()}.bin")
        block = os.urandom(256 * 1024)
        try:
            with open(path, "wb", buffering=0) as fh:
                for _ in range(4):
                    fh.write(block)
                    t0 = now()
                    os.fsync(fh.fileno())
                    record("fsyncs", tid=threading.get_native_id(), start_ns=t0, end_ns=now())
        finally:
            os.unlink(path)

    def spinners() -> None:
        named("ex-spinners")
        time.sleep(0.05)  # after the others' first burst
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children:
            assert child.stdout is not None
            record("spins", **json.loads(child.stdout.readline()))

    def run(target: Callable[..., None], *args: str | int) -> None:
        target(*args)
        done.wait()
        finish.wait()

    cpu = min(os.sched_getaffinity(0))
    children = [
        subprocess.Popen(
            [sys.executable, "-c", SPINNER, name, str(cpu)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for name in ("ex-spin-a", "ex-spin-b")
    ]
    for name, child in zip(("ex-spin-a", "ex-spin-b"), children, strict=True):
        assert child.stdout is not None
        child.stdout.readline()  # pinned and named
        tids[name] = child.pid
    parts: list[tuple[Callable[..., None], tuple[str | int, ...]]] = [
        (sleeper, ()),
        (waiter, ()),
        (waker, ()),
        (fsyncer, ()),
        (spinners, ()),
    ]
    threads = [threading.Thread(target=run, args=(target, *args)) for target, args in parts]
    for t in threads:
        t.start()
    ready.wait()
    print(json.dumps({"pid": os.getpid(), "tids": tids, "spinner_pids": [c.pid for c in children]}), flush=True)
    sys.stdin.readline()
    go.set()
    done.wait()
    print(json.dumps(truth), flush=True)
    sys.stdin.readline()
    finish.set()
    for t in threads:
        t.join()
    for child in children:
        child.wait()


if __name__ == "__main__":
    main()
