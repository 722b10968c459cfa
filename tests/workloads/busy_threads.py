"""Threads that work on one CPU for a while between two quiet points, for the eBPF sampler's tests.

    python busy_threads.py N SECONDS [--now]

Starts N threads pinned to the CPU this process was started on (so they queue for it: runnable-wait time),
prints their tids on one line, then waits for a line on stdin. Then each thread runs 1 ms bursts with
0.3 ms sleeps for SECONDS, and blocks again; once all have, it prints "done" and waits for stdin to close.
At both quiet points every thread is asleep, off CPU: the kernel's counters are final there. With --now
the threads start at once and the process exits after the work (stdin is not read).
"""

from __future__ import annotations

import os
import sys
import threading
import time


def main() -> None:
    count, seconds = int(sys.argv[1]), float(sys.argv[2])
    now = "--now" in sys.argv
    cpu = min(os.sched_getaffinity(0))
    go = threading.Event()
    finished = threading.Barrier(count + 1)
    end = threading.Event()
    tids: list[int] = []
    ready = threading.Barrier(count + 1)

    def work() -> None:
        os.sched_setaffinity(0, {cpu})
        tids.append(threading.get_native_id())
        ready.wait()
        go.wait()
        stop_at = time.monotonic() + seconds
        while time.monotonic() < stop_at:
            burst_end = time.perf_counter() + 0.001
            while time.perf_counter() < burst_end:
                pass
            time.sleep(0.0003)
        finished.wait()
        end.wait()

    threads = [threading.Thread(target=work, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    ready.wait()
    print(" ".join(map(str, tids)), flush=True)
    if not now:
        sys.stdin.readline()
    go.set()
    finished.wait()
    print("done", flush=True)
    if not now:
        sys.stdin.read()
    end.set()


if __name__ == "__main__":
    main()
