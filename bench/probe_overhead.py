"""What the eBPF sampler's probes cost a thread per scheduler event, in full: the tracepoints' own work too.

`kernel.bpf_stats_enabled` (bench/ebpf_sampler_bench.py's "probes" column) times the BPF programs only; a
tracepoint with a BPF program attached also builds its record (perf_trace_<event>) before calling it, and
that is charged to the thread that hit it like the program is. Here two threads hand a byte back and forth
through pipes on one CPU (bench/pingpong.c: each round trip is two wake-ups and two switches), alone and
recorded by `catch-load --sampler ebpf` (the tool pinned to the other CPU, so only the probes slow the
round trips), alternating, and the extra CPU time per round trip (the process's own, which leaves out its
waits for a CPU) is set beside the programs' own run time.

    sudo python bench/probe_overhead.py                 # 3 rounds of 8 s each way
    sudo python bench/probe_overhead.py --rounds 5 --seconds 10

Needs 2 CPUs and root. The machine's other load moves the figures: compare within a run, several rounds.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from ebpf_sampler_bench import build  # noqa: E402  (bench/ is sys.path[0] when run as a script)

from samplers.sysctl_guard import SysctlGuard  # noqa: E402

PING_CPU, TOOL_CPU = 1, 0
EVENTS_PER_TRIP = 4  # two wake-ups, two switches


def one_run(binary: Path, seconds: float, recorded: bool) -> dict[str, float]:
    """ns per round trip; with `recorded`, the probes' own ns per run from the capture's trailer too."""
    import forensics

    ping = subprocess.Popen(
        [str(binary), str(PING_CPU), str(seconds)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert ping.stdin is not None and ping.stdout is not None
    ping.stdout.readline()  # "ready": both threads started, waiting for "go"
    result: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "probe.ssf"
        tool = None
        if recorded:
            argv = ["taskset", "-c", str(TOOL_CPU), sys.executable, "-m", "forensics.cli.catch_load", "-q"]
            argv += ["-p", str(ping.pid), "-d", "600s", "--sampler", "ebpf", "--cpu", str(TOOL_CPU)]
            tool = subprocess.Popen([*argv, "-o", str(out)], env=dict(os.environ, PYTHONPATH=str(REPO)))
            _wait_recording(out, tool)
        ping.stdin.write("go\n")
        ping.stdin.flush()
        trips, elapsed_ns, cpu_ns = (int(v) for v in ping.stdout.readline().split())
        ping.wait()
        if tool is not None:
            tool.send_signal(signal.SIGINT)
            tool.wait()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                stats = forensics.load(out).trailer["ebpf_sampler"]
            result["program_ns_per_run"] = stats["probe_run_time_ns"] / max(1, stats["probe_runs"])
    result["ns_per_trip"] = elapsed_ns / trips
    result["cpu_ns_per_trip"] = cpu_ns / trips
    return result


def _wait_recording(out: Path, tool: subprocess.Popen[bytes]) -> None:
    """Until the recording's file has grown twice a second apart: the probes are attached and ticking."""
    sizes = [0]
    while len(sizes) < 3 or sizes[-1] == sizes[-2]:
        if tool.poll() is not None:
            raise SystemExit(f"catch-load exited (status {tool.returncode}) before recording")
        time.sleep(1.0)
        sizes.append(out.stat().st_size if out.exists() else 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0)
    args = ap.parse_args()
    if os.geteuid() != 0 or (os.cpu_count() or 1) < 2:
        raise SystemExit("probe_overhead: needs root and 2 CPUs")
    binary = build("pingpong")
    print(f"load average at start {os.getloadavg()[0]:.2f}", flush=True)
    alone, recorded = [], []
    with SysctlGuard({"kernel.bpf_stats_enabled": "1"}, state_dir=Path(tempfile.mkdtemp())):
        for r in range(args.rounds):
            alone.append(one_run(binary, args.seconds, False))
            recorded.append(one_run(binary, args.seconds, True))
            a, b = alone[-1]["cpu_ns_per_trip"], recorded[-1]["cpu_ns_per_trip"]
            print(
                f"round {r + 1}: CPU a round trip alone {a:6.0f} ns, recorded {b:6.0f} ns: "
                f"{(b - a) / EVENTS_PER_TRIP:+5.0f} ns an event; the programs' own "
                f"{recorded[-1]['program_ns_per_run']:4.0f} ns a run (elapsed a trip "
                f"{alone[-1]['ns_per_trip']:.0f} / {recorded[-1]['ns_per_trip']:.0f} ns, "
                f"load {os.getloadavg()[0]:.2f})",
                flush=True,
            )
            time.sleep(1)


if __name__ == "__main__":
    main()
