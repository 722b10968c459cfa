"""Sampler benchmark: cost and timing of recording N threads at 2 ms, with and without the read tiers.

For each target and each --slow-interval, in one run and side by side:
  1. start the target: bench/many_threads.c with N threads (1 in 10 periodic at 5.333 ms, the rest asleep),
     or with --bitwig bench/bitwig_shape.c (121 SCHED_FIFO threads at 5.333 ms doing ~10 us, 408 asleep
     waking once a second, 4 busy 2 ms in 10);
  2. record it with `catch-load -p PID --slow-interval S` for --seconds at --interval;
  3. run bench/pread_floor.c on the same process: the same pread loop in C, the floor per read, and the
     same loop ticking at the sampler's interval, reading every thread's two files every tick;
then report achieved interval p50/p99/max, missed ticks, the recorder's and the writer's CPU %, the whole
tool's CPU (recorder + writer) as a ratio to the ticking C loop's ("tool/C": the C loop reads everything,
the tool with tiers reads less), the recorder's CPU per read against the C floor, and bytes per
thread-sample on disk.

    python bench/sampler_bench.py                                 # 10, 100, 300 threads, 20 s each
    python bench/sampler_bench.py --threads 200 --slow off 20ms   # tiers off and on, side by side
    python bench/sampler_bench.py --bitwig --slow off 20ms --seconds 12
    python bench/sampler_bench.py --threads 2000 --slow 20ms
    sudo python bench/sampler_bench.py --threads 2000 --sampler ebpf   # the kernel's counters (tiers off)

Bars (README, "Read tiers"): 200 threads: tool/C <= 1.5; the Bitwig shape: <= 0.1 % missed ticks, p99
<= 2.5 ms, whole tool <= 20 % of a core; 2000 threads: <= 0.1 % missed ticks. Run it on an otherwise
idle machine: the figures are only comparable side by side within one run.
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


def build() -> tuple[Path, Path, Path]:
    OUT.mkdir(exist_ok=True)
    targets = []
    for name, libs in (("many_threads", ["-lpthread"]), ("pread_floor", []), ("bitwig_shape", ["-lpthread"])):
        binary = OUT / name
        source = HERE / f"{name}.c"
        if not binary.exists() or binary.stat().st_mtime < source.stat().st_mtime:
            subprocess.run(["gcc", "-O2", "-o", str(binary), str(source), *libs], check=True)
        targets.append(binary)
    return targets[0], targets[1], targets[2]


def one_run(
    label: str,
    target_argv: list[str],
    seconds: float,
    interval: str,
    slow: str,
    floor_bin: Path,
    sampler: str,
    extra: list[str],
) -> dict:
    import forensics

    env = dict(os.environ, PYTHONPATH=str(REPO))
    target = subprocess.Popen(target_argv, stdout=subprocess.DEVNULL)
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
                    "--slow-interval",
                    slow,
                    *(["--sampler", sampler] if sampler != "proc" else []),
                    *extra,
                ],
                check=True,
                env=env,
            )
            # On a busy machine the writer may still be finishing when catch-load returns: wait for it.
            cap = forensics.load(out)
            deadline = time.monotonic() + 600
            while cap.trailer is None and time.monotonic() < deadline:
                time.sleep(2)
                cap = forensics.load(out)
            size = out.stat().st_size
            trailer = cap.trailer
            rows = trailer["rows"]["samples"]
            threads = len(cap.table("threads")["tid"].unique())
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
    tool_ns = trailer["sampler_cpu_ns"] + trailer["writer_cpu_ns"]
    c_loop_ns = ticked["cpu_ns_per_read"] * ticked["reads"]
    return {
        "target": label,
        "sampler": sampler,
        "slow": slow if sampler == "proc" else "-",
        "threads": threads,
        "tool_cpu_pct": 100.0 * tool_ns / duration,
        "c_loop_cpu_pct": 100.0 * c_loop_ns / duration,
        "tool_over_c": tool_ns / c_loop_ns,
        "rows_per_tick": rows / max(1, trailer["ticks"]),
        "seconds": duration / 1e9,
        "ticks": trailer["ticks"],
        "missed_ticks": trailer["missed_ticks"],
        "missed_pct": 100.0 * trailer["missed_ticks"] / (trailer["ticks"] + trailer["missed_ticks"]),
        # --sampler ebpf: records the kernel's full ring refused (the recorder's wake-up too far apart)
        "refused": (trailer.get("ebpf_sampler") or {}).get("kernel_records_refused", 0),
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
    ap.add_argument("--bitwig", action="store_true", help="the Bitwig-shaped target instead of --threads")
    ap.add_argument("--slow", nargs="+", default=["20ms"], help="--slow-interval values to compare (off: no tiers)")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--interval", default="2ms")
    ap.add_argument(
        "--sampler", choices=["proc", "ebpf"], default="proc", help="catch-load --sampler (ebpf: root; tiers are off)"
    )
    ap.add_argument(
        "--catch-load-args",
        default="",
        metavar="ARGS",
        help="more catch-load options for every run, e.g. '--taskstats none' (split on spaces)",
    )
    args = ap.parse_args()
    many_bin, floor_bin, bitwig_bin = build()
    load = os.getloadavg()[0]
    hold = str(args.seconds + 600)  # killed when its run ends; catch-load may start slowly on a busy machine
    targets = (
        [("bitwig 121/408/4", [str(bitwig_bin), "121", "408", "4", hold])]
        if args.bitwig
        else [(f"many {n}", [str(many_bin), str(n), hold]) for n in args.threads]
    )
    results = [
        one_run(label, argv, args.seconds, args.interval, slow, floor_bin, args.sampler, args.catch_load_args.split())
        for label, argv in targets
        for slow in args.slow
    ]
    header = (
        f"{'target':>17} {'slow':>5} {'thr':>5} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'missed':>12} "
        f"{'rec CPU':>8} {'wri CPU':>8} {'tool':>7} {'C loop':>7} {'tool/C':>6} {'rows/t':>7} {'ns/read':>8} "
        f"{'C read':>7} {'B/sample':>8} {'refused':>7}"
    )
    print(
        f"sampler {args.sampler}, interval {args.interval}, {args.seconds:.0f} s per run, "
        f"load average at start {load:.2f}"
    )
    print(header)
    for r in results:
        print(
            f"{r['target']:>17} {r['slow']:>5} {r['threads']:>5} {r['p50_ms']:>7.3f} {r['p99_ms']:>7.3f} "
            f"{r['max_ms']:>7.3f} {r['missed_ticks']:>5} {r['missed_pct']:>5.2f}% {r['recorder_cpu_pct']:>7.1f}% "
            f"{r['writer_cpu_pct']:>7.1f}% {r['tool_cpu_pct']:>6.1f}% {r['c_loop_cpu_pct']:>6.1f}% "
            f"{r['tool_over_c']:>6.2f} {r['rows_per_tick']:>7.1f} {r['recorder_ns_per_read']:>8.0f} "
            f"{r['c_ticked_ns_per_read']:>7.0f} {r['bytes_per_thread_sample']:>8.2f} {r['refused']:>7}"
        )
    OUT.mkdir(exist_ok=True)
    (OUT / "sampler_bench.json").write_text(json.dumps({"load_at_start": load, "results": results}, indent=2))


if __name__ == "__main__":
    main()
