"""A JACK client whose process callback misbehaves on cue: known causes inside a real graph.

    python tests/workloads/jack_cue_client.py --name cue --control FIFO --truth FILE [--server NAME]

It passes its input to its output (so it can sit in a chain) and reads cues from the control fifo,
one per line; the next process callback carries the cue out:
    spin MS      burn the CPU for MS milliseconds                (run)
    lock MS      wait for a lock a SCHED_OTHER thread holds MS ms (lock: priority inversion)
    read PATH    read a file, uncached (posix_fadvise DONTNEED first)            (io)
    touch MB     touch MB of fresh anonymous pages                  (fault)
    quit
The truth file gets one JSON line per cue carried out: cue, arg, start_ns, end_ns (CLOCK_MONOTONIC),
and the tid of the process thread.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import queue
import threading
import time

import jack


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", default="cue")
    parser.add_argument("--server", default=None)
    parser.add_argument("--control", required=True)
    parser.add_argument("--truth", required=True)
    args = parser.parse_args()

    cues: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()
    done: queue.SimpleQueue[dict[str, object]] = queue.SimpleQueue()
    lock = threading.Lock()
    client = jack.Client(args.name, servername=args.server, no_start_server=True)
    inp = client.inports.register("in")
    out = client.outports.register("out")

    def hold(ms: float) -> None:  # a lower-priority thread holds the lock the callback will want
        with lock:
            time.sleep(ms / 1000)

    @client.set_process_callback
    def process(frames: int) -> None:
        out.get_buffer()[:] = inp.get_buffer()
        try:
            cue, arg = cues.get_nowait()
        except queue.Empty:
            return
        start = time.monotonic_ns()
        if cue == "spin":
            end_at = start + float(arg) * 1e6
            while time.monotonic_ns() < end_at:
                pass
        elif cue == "lock":
            lock.acquire()
            lock.release()
        elif cue == "read":
            with open(arg, "rb") as fh:
                os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                while fh.read(1 << 20):
                    pass
        elif cue == "touch":
            size = int(float(arg) * (1 << 20))
            pages = mmap.mmap(-1, size)
            for offset in range(0, size, mmap.PAGESIZE):
                pages[offset] = 1
            pages.close()
        done.put(
            {"cue": cue, "arg": arg, "start_ns": start, "end_ns": time.monotonic_ns(), "tid": threading.get_native_id()}
        )

    client.activate()
    with open(args.truth, "a") as truth:
        truth.write(json.dumps({"cue": "ready", "start_ns": time.monotonic_ns(), "pid": os.getpid()}) + "\n")
        truth.flush()
        with open(args.control) as control:  # blocks until a writer opens the fifo
            for line in control:
                cue, _, arg = line.strip().partition(" ")
                if cue == "quit":
                    break
                if cue == "lock":
                    holder = threading.Thread(target=hold, args=(float(arg),), daemon=True)
                    holder.start()
                    time.sleep(0.001)  # the holder has the lock before the callback asks
                if cue in ("spin", "lock", "read", "touch"):
                    cues.put((cue, arg))
                while not done.empty():
                    truth.write(json.dumps(done.get()) + "\n")
                    truth.flush()
            time.sleep(0.2)
            while not done.empty():
                truth.write(json.dumps(done.get()) + "\n")
    client.deactivate()
    client.close()


if __name__ == "__main__":
    main()
