"""What the PipeWire source costs the graph: the daemon's and a client's CPU and wake-ups per cycle, with
the source bound to the profiler and without, side by side (arms alternate, repeated).

A headless PipeWire (own XDG_RUNTIME_DIR, Dummy-Driver, 256 frames at 48 kHz) with one JACK client through
pw-jack (tests/workloads/pw_spin_client.py, never cued). Per arm, from /proc (schedstat: ns on CPU and
switch-ins, summed over every thread of the process): the daemon's and the client's CPU in % of a core
and switch-ins per cycle. Arm "source" runs `python -m samplers.engine.pipewire` alone (its frames to
/dev/null) and reports its own CPU too (rusage of the child): that cost is off the graph.

    python bench/pipewire_source_cost.py                  # 3 x 10 s per arm
    python bench/pipewire_source_cost.py --seconds 30 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "out"
PERIOD_S = 256 / 48000


def _schedstat(pid: int) -> tuple[int, int]:
    """(ns on CPU, switch-ins) summed over the process's threads."""
    run = slices = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
        except OSError:
            continue
        run += int(fields[0])
        slices += int(fields[2])
    return run, slices


def _arm(pids: dict[str, int], seconds: float, socket: str | None, env: dict[str, str]) -> dict[str, float]:
    source = None
    if socket is not None:
        source = subprocess.Popen(
            [sys.executable, "-m", "samplers.engine.pipewire", socket], stdout=subprocess.DEVNULL, env=env
        )
        time.sleep(1.0)  # connected and bound before the window opens
    before = {name: _schedstat(pid) for name, pid in pids.items()}
    t0 = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - t0
    after = {name: _schedstat(pid) for name, pid in pids.items()}
    out: dict[str, float] = {}
    cycles = elapsed / PERIOD_S
    for name in pids:
        out[f"{name} CPU %"] = 100.0 * (after[name][0] - before[name][0]) / 1e9 / elapsed
        out[f"{name} switch-ins per cycle"] = (after[name][1] - before[name][1]) / cycles
    if source is not None:
        source.terminate()
        _, _, usage = os.wait4(source.pid, 0)
        source.returncode = 0
        out["source CPU % (off the graph)"] = 100.0 * (usage.ru_utime + usage.ru_stime) / (elapsed + 1.0)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for tool in ("pipewire", "pw-jack"):
        if shutil.which(tool) is None:
            print(f"needs {tool} (apt: pipewire pipewire-bin pipewire-jack)", file=sys.stderr)
            return 2
    runtime = Path(tempfile.mkdtemp(prefix="pw-bench-"))
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "PYTHONPATH": str(REPO), "PIPEWIRE_QUANTUM": "256/48000"}
    daemon = subprocess.Popen(["pipewire"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = None
    try:
        while not (runtime / "pipewire-0").exists():
            time.sleep(0.05)
        ready = runtime / "ready"
        client = subprocess.Popen(
            [
                *("pw-jack", sys.executable, str(REPO / "tests" / "workloads" / "pw_spin_client.py")),
                *("--name", "bench", "--truth", str(runtime / "truth"), "--ready", str(ready)),
            ],
            env=env,
        )
        while not ready.exists():
            time.sleep(0.1)
        time.sleep(1.0)
        pids = {"daemon": daemon.pid, "client": client.pid}
        rows: dict[str, list[dict[str, float]]] = {"without": [], "source": []}
        for _ in range(args.repeat):
            rows["without"].append(_arm(pids, args.seconds, None, env))
            rows["source"].append(_arm(pids, args.seconds, str(runtime / "pipewire-0"), env))
    finally:
        for proc in (client, daemon):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait()
        shutil.rmtree(runtime, ignore_errors=True)
    medians = {arm: _median(r) for arm, r in rows.items()}
    lines = [f"PipeWire source cost: {args.repeat} x {args.seconds:.0f} s per arm, medians", ""]
    lines.append(f"  {'figure':40} {'without':>10} {'source':>10} {'ratio':>7}")
    for key in medians["source"]:
        a, b = medians["without"].get(key), medians["source"][key]
        ratio = f"{b / a:7.2f}" if a else "      -"
        lines.append(f"  {key:40} {a if a is not None else float('nan'):10.3f} {b:10.3f} {ratio}")
    text = "\n".join(lines)
    print(text)
    OUT.mkdir(exist_ok=True)
    (OUT / "pipewire_source_cost.txt").write_text(text + "\n")
    (OUT / "pipewire_source_cost.json").write_text(json.dumps(rows, indent=1))
    return 0


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: sorted(r[k] for r in runs)[len(runs) // 2] for k in runs[0]}


if __name__ == "__main__":
    raise SystemExit(main())
