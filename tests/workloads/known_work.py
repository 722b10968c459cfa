"""A real multi-threaded process whose threads do known work, for end-to-end recorder tests.

Threads (names set with prctl, so /proc shows them):
  spinner      burns exactly --spin seconds of its own CPU time (time.thread_time), then sleeps
  sleeper      sleeps throughout (SCHED_FIFO 10 with --rt)
  faulter      touches --pages fresh anonymous pages (THP off for the mapping), then sleeps
  we) ird (x   a comm with spaces and parentheses; sleeps
  late         starts after --late-start s, sleeps --late-life s, exits (turns SCHED_RR 5 midway with --rt)
  child        (with --child) a child process started after --late-start s, lives --late-life s
Writes a JSON of tids and phase times (CLOCK_MONOTONIC ns) to --report at the end.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import subprocess
import sys
import threading
import time

libc = ctypes.CDLL(None, use_errno=True)
PR_SET_NAME = 15
MADV_NOHUGEPAGE = 15
report: dict[str, object] = {"tids": {}, "times": {}}
lock = threading.Lock()


def name_thread(name: str) -> None:
    libc.prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)
    with lock:
        report["tids"][name] = threading.get_native_id()  # type: ignore[index]


def mark(key: str) -> None:
    with lock:
        report["times"][key] = time.monotonic_ns()  # type: ignore[index]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--spin", type=float, default=1.0)
    ap.add_argument("--pages", type=int, default=20000)
    ap.add_argument("--late-start", type=float, default=1.0)
    ap.add_argument("--late-life", type=float, default=0.5)
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--rt", action="store_true", help="sleeper SCHED_FIFO 10; late turns SCHED_RR 5 midway (root)")
    ap.add_argument("--report", required=True)
    args = ap.parse_args()
    stop = threading.Event()
    ready = threading.Barrier(5)

    def spinner() -> None:
        name_thread("spinner")
        ready.wait()
        time.sleep(0.3)  # let the recorder open its fds first
        mark("spin_start")
        end = time.thread_time() + args.spin
        while time.thread_time() < end:
            pass
        mark("spin_end")
        stop.wait()

    def sleeper() -> None:
        name_thread("sleeper")
        if args.rt:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))  # idle: harmless at any priority
        ready.wait()
        stop.wait()

    def faulter() -> None:
        name_thread("faulter")
        ready.wait()
        time.sleep(0.3)
        size = args.pages * mmap.PAGESIZE
        region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        region.madvise(MADV_NOHUGEPAGE)  # one fault per 4 KiB page, not per 2 MiB
        mark("fault_start")
        for offset in range(0, size, mmap.PAGESIZE):
            region[offset] = 1
        mark("fault_end")
        stop.wait()
        region.close()

    def weird() -> None:
        name_thread("we) ird (x")
        ready.wait()
        stop.wait()

    threads = [threading.Thread(target=f) for f in (spinner, sleeper, faulter, weird)]
    for t in threads:
        t.start()
    ready.wait()
    time.sleep(args.late_start)

    def late() -> None:
        name_thread("late")
        mark("late_start")
        if args.rt:
            time.sleep(args.late_life / 2)
            os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(5))
            mark("late_rt")
            time.sleep(args.late_life / 2)
        else:
            time.sleep(args.late_life)
        mark("late_end")

    late_thread = threading.Thread(target=late)
    late_thread.start()
    child = None
    if args.child:
        mark("child_start")
        child = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({args.late_life})"])
        report["child_pid"] = child.pid
    late_thread.join()
    if child is not None:
        child.wait()
        mark("child_end")
    remaining = args.duration - args.late_start - args.late_life
    time.sleep(max(0.0, remaining))
    stop.set()
    for t in threads:
        t.join()
    report["pid"] = os.getpid()
    with open(args.report, "w") as fh:
        json.dump(report, fh)


if __name__ == "__main__":
    main()
