"""A JACK client whose process callback misbehaves on cue: known causes inside a real graph.

    python tests/workloads/jack_cue_client.py --name cue --control FIFO --truth FILE [--server NAME] [--link-self]

It passes its input to its output (so it can sit in a chain) and reads cues from the control fifo,
one per line; the next process callback carries the cue out:
    spin MS        burn the CPU for MS milliseconds                       (run)
    lock MS        wait for a lock a SCHED_OTHER thread holds MS ms        (lock: priority inversion)
    read PATH MS   O_DIRECT reads of PATH (no page cache: each goes to the device) for MS ms   (io)
    touch MS       touch fresh anonymous pages for MS ms (a page fault each)                   (fault)
    quit
--link-self connects its output to its own input (under PipeWire's pw-jack: a node with a link is
scheduled in the graph without another client).
The truth file gets one JSON line per cue carried out: cue, arg, start_ns, end_ns (CLOCK_MONOTONIC),
steal_ns (the machine's hypervisor steal over it),
and the tid of the process thread.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import mmap
import os
import queue
import signal
import sys
import threading
import time

import jack

# 1 MiB a read: the time in each read is the device's, not the syscall's. With 64 KiB reads the host served
# them in 29 us (its own cache) against 31 us of CPU each to issue them: 9.3 ms on CPU and 8.7 ms in D of a
# 20 ms injection, a `run` by the larger part (a clean-clone CI run, 2026-12-05). Measured here: the CPU
# share of a 20 ms O_DIRECT loop is 0.18 at 64 KiB, 0.13 at 1 MiB.
READ_CHUNK = 1024 * 1024
TOUCH_RESERVE = 1 << 30  # address space only: a page is allocated when touched (a fault each)
MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)


def _steal_ns() -> int:
    """The machine's hypervisor steal so far (/proc/stat, all CPUs, 10 ms ticks): a cue over which it grew
    was disturbed by the host, not only by the cue."""
    with open("/proc/stat", "rb") as fh:
        fields = fh.readline().split()
    return int(fields[8]) * (1_000_000_000 // os.sysconf("SC_CLK_TCK")) if len(fields) > 8 else 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", default="cue")
    parser.add_argument("--server", default=None)
    parser.add_argument("--control", required=True)
    parser.add_argument("--truth", required=True)
    parser.add_argument("--link-self", action="store_true")
    args = parser.parse_args()
    faulthandler.register(signal.SIGUSR1)  # the harness asks where a client that will not quit is stuck
    sys.setswitchinterval(0.0005)  # the callback waits at most this for the GIL when another thread runs

    cues: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()
    done: queue.SimpleQueue[dict[str, object]] = queue.SimpleQueue()
    lock = threading.Lock()
    read_buffer = mmap.mmap(-1, READ_CHUNK)  # page-aligned, as O_DIRECT wants
    client = jack.Client(args.name, servername=args.server, no_start_server=True)
    inp = client.inports.register("in")
    out = client.outports.register("out")

    def hold(ms: float, held: threading.Event) -> None:  # a lower-priority thread holds the lock the callback wants
        with lock:
            held.set()
            time.sleep(ms / 1000)

    @client.set_process_callback
    def process(frames: int) -> None:
        out.get_buffer()[:] = inp.get_buffer()
        try:
            cue, arg = cues.get_nowait()
        except queue.Empty:
            return
        steal_start = _steal_ns()
        start = time.monotonic_ns()
        if cue == "spin":
            end_at = start + float(arg) * 1e6
            while time.monotonic_ns() < end_at:
                pass
        elif cue == "lock":
            lock.acquire()
            lock.release()
        elif cue == "read":
            path, _, ms = arg.partition(" ")
            end_at = start + float(ms) * 1e6
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
            try:
                size = os.fstat(fd).st_size
                offset = 0
                while time.monotonic_ns() < end_at:
                    os.preadv(fd, [read_buffer], offset)
                    offset = (offset + READ_CHUNK) % max(size - READ_CHUNK, READ_CHUNK)
            finally:
                os.close(fd)
        elif cue == "touch":
            end_at = start + float(arg) * 1e6
            pages = mmap.mmap(-1, TOUCH_RESERVE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE)
            offset = 0
            while offset < TOUCH_RESERVE and time.monotonic_ns() < end_at:
                for page in range(offset, min(offset + 64 * mmap.PAGESIZE, TOUCH_RESERVE), mmap.PAGESIZE):
                    pages[page] = 1
                offset += 64 * mmap.PAGESIZE
            pages.close()
        end = time.monotonic_ns()
        done.put(
            {
                "cue": cue,
                "arg": arg,
                "start_ns": start,
                "end_ns": end,
                "tid": threading.get_native_id(),
                "steal_ns": _steal_ns() - steal_start,
            }
        )

    client.activate()
    if args.link_self:
        client.connect(out, inp)
    with open(args.truth, "a") as truth:
        truth.write(json.dumps({"cue": "ready", "start_ns": time.monotonic_ns(), "pid": os.getpid()}) + "\n")
        truth.flush()
        with open(args.control) as control:  # blocks until a writer opens the fifo
            for line in control:
                cue, _, arg = line.strip().partition(" ")
                if cue == "quit":
                    break
                if cue == "lock":
                    held = threading.Event()
                    holder = threading.Thread(target=hold, args=(float(arg), held), daemon=True)
                    holder.start()
                    held.wait(5.0)  # the holder has the lock before the callback asks (a loaded machine delays it)
                if cue in ("spin", "lock", "read", "touch"):
                    cues.put((cue, arg))
                    # Blocked (the GIL free) until the callback has carried the cue out: the callback runs
                    # Python, and a main thread holding the GIL when it wants it makes a wait of its own
                    # (measured on a loaded machine: 4-5 ms, woken by this thread, just before the cue).
                    with contextlib.suppress(queue.Empty):
                        truth.write(json.dumps(done.get(timeout=5.0)) + "\n")
                        truth.flush()
            time.sleep(0.2)
            while not done.empty():
                truth.write(json.dumps(done.get()) + "\n")
    client.deactivate()
    client.close()


if __name__ == "__main__":
    main()
