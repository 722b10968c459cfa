"""Chain against series in the lab: N stages in one thread against N stage processes woken in turn.

Reproduces the shape of the published comparison of N plugins in one client against N clients in series
(cycle end p50/p99 after the period start, wake-ups per cycle, engine CPU, overruns). The arms alternate
inside each repetition so the machine's other load lands on both alike; the table shows medians over the
repetitions. Figures come from the lab's truth file (cycle times) and the engine threads' /proc counters.

    python bench/lab_topology.py --stages 4 --seconds 10 --repeat 3 [--quantum 256] [--rate 48000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_arm(topology: str, args: argparse.Namespace, truth: Path) -> dict[str, float]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    command = [sys.executable, "-m", "forensics.lab", "--episodes=none", f"--duration={args.seconds}s"]
    command += [f"--topology={topology}", f"--stages={args.stages}", f"--quantum={args.quantum}"]
    command += [f"--rate={args.rate}", f"--taps={args.taps}", "--quiet", f"--truth={truth}"]
    subprocess.run(command, env=env, check=True)
    stats = json.loads(truth.read_text())["lab"]["stats"]
    return {
        "cycle end p50 us": stats["cycle_end_ns"]["p50"] / 1e3,
        "cycle end p99 us": stats["cycle_end_ns"]["p99"] / 1e3,
        "wake-ups/cycle": stats["wakeups_per_cycle"],
        "engine CPU %": stats["engine_cpu_percent"],
        "overruns": stats["deadline_misses"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quantum", type=int, default=256)
    parser.add_argument("--rate", type=int, default=48_000)
    parser.add_argument("--taps", type=int, default=32)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"series": [], "chain": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeat):
            for topology in ("series", "chain"):
                results[topology].append(run_arm(topology, args, Path(tmp) / f"{topology}{rep}.json"))
    keys = list(results["series"][0])
    print(
        f"{args.rate} Hz, quantum {args.quantum}, {args.stages} stages x {args.taps} taps, "
        f"{args.repeat} x {args.seconds:g} s per arm, medians (series / chain, change)"
    )
    for key in keys:
        series = statistics.median(r[key] for r in results["series"])
        chain = statistics.median(r[key] for r in results["chain"])
        change = f"{100.0 * (chain - series) / series:+.1f} %" if series else "n/a"
        print(f"  {key:18s} {series:10.2f} / {chain:10.2f}   {change}")
    worst_chain = max(r["cycle end p99 us"] for r in results["chain"])
    best_series = min(r["cycle end p99 us"] for r in results["series"])
    print(f"  chain's worst p99 {worst_chain:.1f} us against series' best p99 {best_series:.1f} us")


if __name__ == "__main__":
    main()
