"""The floor of the fast tier's /proc reads at the Bitwig shape: the reads alone, in a bare loop.

Starts bench/bitwig_shape.c (121 SCHED_FIFO threads woken every 5.333 ms doing ~10 us, 408 asleep, 4
busy), then ticks at --interval (SCHED_FIFO 1, as the recorder) over its real-time threads only, reading
what the recorder reads of a fast thread and nothing else: schedstat every tick; stat when schedstat
moved; sched (--sched rt, the default) too. No frames, no parsing, no writer. Each mode runs --ticks
ticks and prints its CPU as a share of a core: what any /proc sampler that keeps those reads pays,
before the slow tier, discovery and the writer. Then the same three modes in C (bench/fast_tier_floor.c, the
same threads and ticks): the floor without Python's share of each read, which in the bare Python loop was most
of a schedstat read's cost (2026-12-07: 2128 against 654-682 ns a read).

    python bench/fast_tier_floor.py            # root (or an rtprio limit) for the SCHED_FIFO threads
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

from sampler_bench import build


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--interval-us", type=int, default=2000)
    ap.add_argument("--ticks", type=int, default=1500)
    args = ap.parse_args()
    _, _, bitwig_bin = build()
    target = subprocess.Popen([str(bitwig_bin), "121", "408", "4", "600"], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        except PermissionError:
            print("(SCHED_FIFO not permitted: ticking as SCHED_OTHER)")
        task = f"/proc/{target.pid}/task"
        rt = [int(t) for t in sorted(os.listdir(task)) if os.sched_getscheduler(int(t)) == os.SCHED_FIFO]
        fds = [
            tuple(os.open(f"{task}/{tid}/{name}", os.O_RDONLY) for name in ("schedstat", "stat", "sched")) for tid in rt
        ]
        interval = args.interval_us * 1000
        load = os.getloadavg()[0]
        print(f"{len(rt)} real-time threads, {args.ticks} ticks at {args.interval_us} us; load average {load:.2f}")
        for mode in ("schedstat", "schedstat, stat on a move", "schedstat, stat and sched on a move"):
            last = [b""] * len(fds)
            reads = moved = missed = 0
            start = due = time.monotonic_ns()
            cpu0 = time.process_time_ns()
            for _ in range(args.ticks):
                now = time.monotonic_ns()
                if now < due:
                    time.sleep((due - now) * 1e-9)
                elif now - due >= interval:
                    missed += (now - due) // interval
                    due += (now - due) // interval * interval
                for i, (fd_ss, fd_st, fd_sched) in enumerate(fds):
                    text = os.pread(fd_ss, 128, 0)
                    reads += 1
                    if text != last[i]:
                        last[i] = text
                        moved += 1
                        if "stat on" in mode or "stat and" in mode:
                            os.pread(fd_st, 1024, 0)
                            reads += 1
                        if "sched on" in mode:
                            os.pread(fd_sched, 8192, 0)
                            reads += 1
                due += interval
            cpu = time.process_time_ns() - cpu0
            wall = time.monotonic_ns() - start
            print(
                f"{mode:36s} {100 * cpu / wall:5.1f} % of a core, {cpu / args.ticks / 1000:5.0f} us per tick, "
                f"{moved / args.ticks:5.1f} moved per tick, {cpu / reads:5.0f} ns per read, {missed} ticks missed"
            )
        c_loop = build_c_loop()
        print("the same in C (bench/fast_tier_floor.c):")
        result = subprocess.run(
            [str(c_loop), str(target.pid), str(args.ticks), str(args.interval_us), *map(str, rt)],
            check=True,
            capture_output=True,
            text=True,
        )
        for line in result.stdout.splitlines():
            row = json.loads(line)
            print(
                f"{row['mode']:36s} {row['cpu_pct']:5.1f} % of a core, {row['us_per_tick']:5.0f} us per tick, "
                f"{row['moved_per_tick']:5.1f} moved per tick, {row['ns_per_read']:5.0f} ns per read, "
                f"{row['missed']} ticks missed"
            )
    finally:
        target.kill()
        target.wait()


def build_c_loop() -> Path:
    """bench/fast_tier_floor.c compiled into bench/out/fast_tier_floor_c (again when the source is newer)."""
    here = Path(__file__).resolve().parent
    source, binary = here / "fast_tier_floor.c", here / "out" / "fast_tier_floor_c"
    binary.parent.mkdir(exist_ok=True)
    if not binary.exists() or binary.stat().st_mtime < source.stat().st_mtime:
        subprocess.run(["gcc", "-O2", "-o", str(binary), str(source)], check=True)
    return binary


if __name__ == "__main__":
    main()
