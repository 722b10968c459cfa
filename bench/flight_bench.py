"""The flight recorder's cost (README, "Flight recorder"), side by side with plain recording.

One lab process (`python -m forensics.lab`, an episode every --spacing) is recorded by two catch-loads at once, for
the same time: plain (`-o plain.ssf`) and flight (`--ring 60s --trigger stall>10ms -o DIR`). Every 5 s the
RSS of each process of the flight recorder (catch-load, its writer, its watcher) is read. Printed: their
RSS after 1 minute and at the end (the ratio: flat means within 5 %), and the CPU of each recording
(sampler and writer from the trailers, the watcher from flight.ssf), as % of a core.

    python bench/flight_bench.py                 # 10 minutes
    python bench/flight_bench.py --minutes 3     # a shorter check
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from capture.format import load  # noqa: E402
from capture.segments import list_segments  # noqa: E402

OUT = HERE / "out"


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


def _children(pid: int) -> dict[str, int]:
    """The flight recorder's writer and watcher, by the module each runs."""
    found = {}
    try:
        pids = [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return found
    for child in pids:
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        for name, module in (("writer", "samplers.writer_process"), ("watcher", "forensics.flight.watch")):
            if module in cmdline:
                found[name] = child
    return found


def _catch_load(*args: str) -> list[str]:
    return [sys.executable, "-m", "forensics.cli.catch_load", "-q", *args]


def _finished_trailer(path: Path, deadline: float) -> dict[str, Any]:
    """The capture's trailer once its writer has finished it (the CPU figures are in it), or fail."""
    while True:
        trailer = load(path).trailer or {}
        if "sampler_cpu_ns" in trailer or time.monotonic() > deadline:
            break
        time.sleep(2.0)
    if "sampler_cpu_ns" not in trailer:
        raise SystemExit(f"{path}: its writer did not finish the capture in time")
    return trailer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--spacing", default="30s", help="lab episodes every this (each one a window)")
    ap.add_argument("--trigger", default="stall>10ms")
    args = ap.parse_args()
    seconds = args.minutes * 60
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with tempfile.TemporaryDirectory() as tmp:
        lab = subprocess.Popen(
            [
                *(sys.executable, "-m", "forensics.lab", "--quiet", "--episodes", f"run:{int(seconds // 30) + 1}"),
                *("--spacing", args.spacing, "--duration", f"{seconds + 30}s"),
            ],
            env=env,
            cwd=REPO,
        )
        time.sleep(3.0)
        plain_out = Path(tmp) / "plain.ssf"
        flight_out = Path(tmp) / "flight"
        common = ["-p", str(lab.pid), "-d", f"{seconds}s"]
        plain = subprocess.Popen(_catch_load(*common, "-o", str(plain_out)), env=env, cwd=REPO)
        flight = subprocess.Popen(
            _catch_load(*common, "--ring", "60s", "--keep-ring", "--trigger", args.trigger, "-o", str(flight_out)),
            env=env,
            cwd=REPO,
        )
        start = time.monotonic()
        samples: list[dict[str, float]] = []
        while flight.poll() is None:
            time.sleep(5.0)
            procs = {"catch-load": flight.pid, **_children(flight.pid)}
            row: dict[str, float] = {"t_s": time.monotonic() - start}
            row.update({name: _rss_kib(pid) for name, pid in procs.items()})
            samples.append(row)
        plain.wait()
        lab.terminate()
        lab.wait()
        # A watcher or writer left behind on a loaded machine finishes on its own (catch-load says so and
        # exits): wait for flight.ssf and for both recordings' trailers.
        deadline = time.monotonic() + 1800
        while not (flight_out / "flight.ssf").exists() and time.monotonic() < deadline:
            time.sleep(2.0)
        time.sleep(2.0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            plain_trailer = _finished_trailer(plain_out, deadline)
            flight_trailer = _finished_trailer(list_segments(flight_out / ".ring")[-1].path, deadline)
            flight_meta = load(flight_out / "flight.ssf").meta.get("flight", {})
            windows = load(flight_out / "flight.ssf").table("flight_windows")
    names = ("catch-load", "writer", "watcher")
    full = [r for r in samples if all(r.get(n, -1) > 0 for n in names)]
    one_min = min(full, key=lambda r: abs(r["t_s"] - 60.0))
    end = full[-1]
    result = {
        "minutes": args.minutes,
        "rss_kib_at_1min": {n: one_min[n] for n in names},
        "rss_kib_at_end": {n: end[n] for n in names},
        "rss_end_over_1min": {n: round(end[n] / one_min[n], 3) for n in names},
        "rss_total_end_over_1min": round(sum(end[n] for n in names) / sum(one_min[n] for n in names), 3),
        "cpu_pct": {
            "plain sampler": 100 * plain_trailer["sampler_cpu_ns"] / plain_trailer["duration_ns"],
            "plain writer": 100 * plain_trailer["writer_cpu_ns"] / plain_trailer["duration_ns"],
            "flight sampler": 100 * flight_trailer["sampler_cpu_ns"] / flight_trailer["duration_ns"],
            "flight writer": 100 * flight_trailer["writer_cpu_ns"] / flight_trailer["duration_ns"],
            "flight watcher": 100 * flight_meta["watcher_cpu_ns"] / flight_trailer["duration_ns"],
        },
        "windows_saved": int((windows["status"] == "saved").sum()),
        "trigger": args.trigger,
    }
    cpu = result["cpu_pct"]
    result["cpu_flight_over_plain"] = round(
        (cpu["flight sampler"] + cpu["flight writer"] + cpu["flight watcher"])
        / (cpu["plain sampler"] + cpu["plain writer"]),
        2,
    )
    OUT.mkdir(exist_ok=True)
    (OUT / "flight_bench.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
