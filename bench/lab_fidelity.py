"""How real are the lab's episodes? Each cause's effect on lab-audio, read from the kernel's counters.

Runs the lab R times and polls lab-audio's /proc/<pid>/task/<tid>/schedstat and stat at ~0.6 ms from this
process. For every episode window of the truth file (last sample before the start, first sample 2 ms
after the end), prints per cause: run_ns / D, wait_ns / D, off-CPU share (1 - run / D), the share of
in-episode samples in D and S state, and minor/major faults. Min / median / max over all episodes.

    python bench/lab_fidelity.py --repeat 3 -- --episodes run:3,runqueue:3,io:3,fault:3,lock:3 --episode-ms 20
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def poll(proc: subprocess.Popen[bytes], rows: list[tuple[int, int, int, int, int, str]]) -> None:
    tid = None
    while tid is None and proc.poll() is None:
        try:
            for name in os.listdir(f"/proc/{proc.pid}/task"):
                if Path(f"/proc/{proc.pid}/task/{name}/comm").read_text().strip() == "lab-audio":
                    tid = int(name)
        except OSError:
            pass
        time.sleep(0.002)
    if tid is None:
        return
    schedstat = os.open(f"/proc/{proc.pid}/task/{tid}/schedstat", os.O_RDONLY)
    stat = os.open(f"/proc/{proc.pid}/task/{tid}/stat", os.O_RDONLY)
    while True:
        try:
            a, b = os.pread(schedstat, 200, 0), os.pread(stat, 2000, 0)
        except OSError:
            break
        if not a or not b:
            break
        run, wait = (int(x) for x in a.split()[:2])
        fields = b[b.rfind(b")") + 2 :].split()
        rows.append((time.monotonic_ns(), run, wait, int(fields[7]), int(fields[9]), fields[0].decode()))
        time.sleep(0.0005)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("lab_args", nargs="*", help="options for the lab (after --)")
    args = parser.parse_args()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    figures: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeat):
            truth = Path(tmp) / f"truth{rep}.json"
            command = [sys.executable, "-m", "forensics.lab", *args.lab_args, "--quiet", f"--truth={truth}"]
            proc = subprocess.Popen(command, env=env)
            rows: list[tuple[int, int, int, int, int, str]] = []
            poller = threading.Thread(target=poll, args=(proc, rows))
            poller.start()
            proc.wait()
            poller.join()
            times = [r[0] for r in rows]
            for episode in json.loads(truth.read_text())["episodes"]:
                start, end = episode["start_ns"], episode["end_ns"]
                d = end - start
                i, j = bisect.bisect_left(times, start) - 1, bisect.bisect_left(times, end + 2_000_000)
                if i < 0 or j >= len(rows):
                    continue
                before, after = rows[i], rows[j]
                states = [r[5] for r in rows if start <= r[0] <= end]
                f = figures[episode["cause"]]
                f["D ms"].append(d / 1e6)
                f["run/D"].append((after[1] - before[1]) / d)
                f["wait/D"].append((after[2] - before[2]) / d)
                f["off-CPU share"].append(1 - (after[1] - before[1]) / d)
                if states:
                    f["D-state share"].append(states.count("D") / len(states))
                    f["S-state share"].append(states.count("S") / len(states))
                f["minflt"].append(after[3] - before[3])
                f["majflt"].append(after[4] - before[4])
    print("cause     figure          min / median / max over episodes")
    for cause, table in sorted(figures.items()):
        for name, values in table.items():
            print(f"{cause:9s} {name:14s} {min(values):9.2f} / {statistics.median(values):9.2f} / {max(values):9.2f}")


if __name__ == "__main__":
    main()
