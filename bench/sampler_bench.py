"""Sampler benchmark: cost and timing of recording 10, 100 and 300 threads at 2 ms.

For each thread count, in one run and side by side:
  1. start bench/many_threads.c with N threads (1 in 10 periodic at 5.333 ms, the rest blocked);
  2. record it with `catch-load -p PID` for --seconds at --interval;
  3. run bench/pread_floor.c on the same process: the same pread loop in C, the floor per read;
then report achieved interval p50/p99/max, missed ticks, the recorder's and the writer's CPU %, the
recorder's CPU per file read as a ratio to the C floor (a tight loop: reads only), and to the same C
loop ticking at the sampler's interval (wake-ups and cold caches included, as the sampler pays them),
and bytes per thread-sample on disk.

    python bench/sampler_bench.py                 # 10, 100, 300 threads, 20 s each
    python bench/sampler_bench.py --threads 100 --seconds 5

Bars: 100 threads at 2 ms on an idle machine: p99 interval <= 3 ms, missed ticks <= 0.1 %,
per-read cost <= 2x the C floor. Run it on an otherwise idle machine: the figures are only comparable
side by side within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "out"


def build() -> tuple[Path, Path]:
    OUT.mkdir(exist_ok=True)
    targets = []
    for name, libs in (("many_threads", ["-lpthread"]), ("pread_floor", [])):
        binary = OUT / name
        source = HERE / f"{name}.c"
        if not binary.exists() or binary.stat().st_mtime < source.stat().st_mtime:
            subprocess.run(["gcc", "-O2", "-o", str(binary), str(source), *libs], check=True)
        targets.append(binary)
    return targets[0], targets[1]


def one_run(threads: int, seconds: float, interval: str, target_bin: Path, floor_bin: Path) -> dict:
    import forensics

    env = dict(os.environ, PYTHONPATH=str(REPO))
    target = subprocess.Popen([str(target_bin), str(threads), str(seconds + 30)], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)  # let every thread start
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "bench.ssf"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "forensics.cli.catch_load",
                    "-q",
                    "-p",
                    str(target.pid),
                    "-i",
                    interval,
                    "-d",
                    f"{seconds}s",
                    "-o",
                    str(out),
                ],
                check=True,
                env=env,
            )
            size = out.stat().st_size
            cap = forensics.load(out)
            trailer = cap.trailer
            rows = trailer["rows"]["samples"]
        # The floor on the same files, as many reads as the recorder did.
        rounds = max(1, trailer["reads"] // (2 * threads))
        floor = json.loads(
            subprocess.run(
                [str(floor_bin), str(target.pid), str(rounds)], check=True, capture_output=True, text=True
            ).stdout
        )
        # The same, ticking at the sampler's interval for the sampler's number of ticks: the floor for
        # a C sampler, wake-ups and cold caches included.
        ticked = json.loads(
            subprocess.run(
                [str(floor_bin), str(target.pid), str(trailer["ticks"]), str(int(trailer["interval_p50_ns"]) // 1000)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
    finally:
        target.kill()
        target.wait()
    duration = trailer["duration_ns"]
    per_read = trailer["sampler_cpu_ns"] / trailer["reads"]
    return {
        "threads": threads,
        "seconds": duration / 1e9,
        "ticks": trailer["ticks"],
        "missed_ticks": trailer["missed_ticks"],
        "missed_pct": 100.0 * trailer["missed_ticks"] / (trailer["ticks"] + trailer["missed_ticks"]),
        "p50_ms": trailer["interval_p50_ns"] / 1e6,
        "p99_ms": trailer["interval_p99_ns"] / 1e6,
        "max_ms": trailer["interval_max_ns"] / 1e6,
        "recorder_cpu_pct": 100.0 * trailer["sampler_cpu_ns"] / duration,
        "writer_cpu_pct": 100.0 * trailer["writer_cpu_ns"] / duration,
        "recorder_ns_per_read": per_read,
        "c_floor_ns_per_read": floor["cpu_ns_per_read"],
        "ratio_to_floor": per_read / floor["cpu_ns_per_read"],
        "c_ticked_ns_per_read": ticked["cpu_ns_per_read"],
        "ratio_to_ticked_floor": per_read / ticked["cpu_ns_per_read"],
        "bytes_per_thread_sample": size / rows,
        "reads": trailer["reads"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", default=[10, 100, 300])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--interval", default="2ms")
    args = ap.parse_args()
    target_bin, floor_bin = build()
    load = os.getloadavg()[0]
    results = [one_run(n, args.seconds, args.interval, target_bin, floor_bin) for n in args.threads]
    header = (
        f"{'threads':>7} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'missed':>12} {'rec CPU':>8} "
        f"{'wri CPU':>8} {'ns/read':>8} {'C loop':>7} {'ratio':>6} {'C tick':>7} {'ratio':>6} {'B/sample':>8}"
    )
    print(f"interval {args.interval}, {args.seconds:.0f} s per run, load average at start {load:.2f}")
    print(header)
    for r in results:
        print(
            f"{r['threads']:>7} {r['p50_ms']:>7.3f} {r['p99_ms']:>7.3f} {r['max_ms']:>7.3f} "
            f"{r['missed_ticks']:>5} {r['missed_pct']:>5.2f}% {r['recorder_cpu_pct']:>7.1f}% "
            f"{r['writer_cpu_pct']:>7.1f}% {r['recorder_ns_per_read']:>8.0f} {r['c_floor_ns_per_read']:>7.0f} "
            f"{r['ratio_to_floor']:>6.2f} {r['c_ticked_ns_per_read']:>7.0f} {r['ratio_to_ticked_floor']:>6.2f} "
            f"{r['bytes_per_thread_sample']:>8.2f}"
        )
    OUT.mkdir(exist_ok=True)
    (OUT / "sampler_bench.json").write_text(json.dumps({"load_at_start": load, "results": results}, indent=2))


if __name__ == "__main__":
    main()
