"""The recorder's start-up: `catch-load --help` as shipped against the same with pandas imported first
(what the capture module did before it read pandas lazily), side by side, in one run.

    python bench/recorder_startup.py [--repeat 15]

Each arm is a fresh interpreter; the arms alternate so the shared machine's noise falls on both. Per arm:
median wall time and median peak RSS (ru_maxrss of the child, os.wait4). The ratio is what to quote.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

ARMS = {
    "catch-load --help": "from forensics.cli.catch_load import main; main(['--help'])",
    "same, pandas first": "import pandas; from forensics.cli.catch_load import main; main(['--help'])",
}


def run_once(code: str) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one fresh interpreter running `code`."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, env=env, cwd=REPO)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{code!r} exited with {child.returncode}")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in ARMS}
    for _ in range(args.repeat):
        for name, code in ARMS.items():
            results[name].append(run_once(code))
    for name, runs in results.items():
        wall = statistics.median(r[0] for r in runs)
        rss = statistics.median(r[1] for r in runs)
        print(f"{name:22} wall {wall * 1000:6.0f} ms  peak RSS {rss:6.1f} MB  ({len(runs)} runs)")
    light, heavy = (results[name] for name in ARMS)
    ratio = statistics.median(r[0] for r in heavy) / statistics.median(r[0] for r in light)
    rss_ratio = statistics.median(r[1] for r in heavy) / statistics.median(r[1] for r in light)
    print(f"pandas-first / shipped: wall x{ratio:.2f}, peak RSS x{rss_ratio:.2f}")


if __name__ == "__main__":
    main()
