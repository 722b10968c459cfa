"""eBPF sampler benchmark: the whole tool's CPU recording a Bitwig-shaped target, /proc sampler beside eBPF's.

The target (bench/bitwig_shape.c, as bench/sampler_bench.py's): 121 SCHED_FIFO threads woken every 5.333 ms
doing ~10 us, 408 SCHED_OTHER threads asleep (woken once a second), 4 busy (2 ms of work every 10 ms): 534
threads with the main one.
In one run, side by side on the same target process, each for --seconds at 2 ms:

  default       catch-load's defaults (--sampler auto: the eBPF sampler on this target, run as root)
  proc          --sampler proc (two /proc reads per thread per tick, sched + taskstats for RT threads, the tiers)
  proc-python   the same with the tick's reads and the writer's parse in Python (FORENSICS_PURE_PYTHON=1)
  proc-lean     the same with --sched none --taskstats none (schedstat + stat only)
  ebpf          --sampler ebpf (one copy of the kernel's counters per tick, stat every 250 ms)

and reports, as % of one core: the recorder, of which its tick's /proc reads (with the compiled tick about their
floor in C, in the same run), the writer, the eBPF probes (their run time in the kernel with
kernel.bpf_stats_enabled=1, set for the run and restored: charged to the threads that hit the tracepoints, so
no rusage shows it), the whole tool (their sum); missed ticks and the interval p99; `after`: the writer's CPU
once the recording has ended (the eBPF sampler's rows are made then, samplers/ebpf/deferred_rows.py), in
seconds.

    sudo python bench/ebpf_sampler_bench.py                  # 20 s per sampler
    sudo python bench/ebpf_sampler_bench.py --seconds 5 --samplers ebpf

Bar (the issue's): whole tool <= 5 % of a core with the eBPF sampler on this target. Writes
bench/out/ebpf_sampler_bench.json. The machine's load changes the figures: compare within one run.
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

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "out"
sys.path.insert(0, str(REPO))

from samplers.sysctl_guard import SysctlGuard  # noqa: E402

SAMPLERS = {
    "default": [],
    "proc": ["--sampler", "proc"],
    "proc-python": ["--sampler", "proc"],  # with FORENSICS_PURE_PYTHON=1: no compiled tick or parse (ENVIRONMENT)
    "proc-lean": ["--sampler", "proc", "--sched", "none", "--taskstats", "none"],
    "ebpf": ["--sampler", "ebpf"],
}
# Rows run with more in their environment than the bench's own.
ENVIRONMENT = {"proc-python": {"FORENSICS_PURE_PYTHON": "1"}}


def build(program: str = "bitwig_shape") -> Path:
    """bench/<program>.c compiled into bench/out/<program> (again when the source is newer)."""
    OUT.mkdir(exist_ok=True)
    binary = OUT / program
    source = HERE / f"{program}.c"
    if not binary.exists() or binary.stat().st_mtime < source.stat().st_mtime:
        subprocess.run(["gcc", "-O2", "-o", str(binary), str(source), "-lpthread"], check=True)
    return binary


def one_run(name: str, pid: int, seconds: float) -> dict:
    import forensics

    env = dict(os.environ, PYTHONPATH=str(REPO), **ENVIRONMENT.get(name, {}))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.ssf"
        argv = [sys.executable, "-m", "forensics.cli.catch_load", "-q", "-p", str(pid), "-d", f"{seconds}s"]
        subprocess.run([*argv, "-o", str(out), *SAMPLERS[name]], check=True, env=env)
        deadline = time.monotonic() + 900
        while True:  # a writer that fell behind finishes the file on its own, after catch-load returned
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                trailer = forensics.load(out).trailer
            if trailer is not None or time.monotonic() > deadline:
                break
            time.sleep(2)
        if trailer is None:
            raise SystemExit(f"the {name} recording's writer did not finish in 15 minutes")
        size = out.stat().st_size
    duration = trailer["duration_ns"]
    probes = (trailer.get("ebpf_sampler") or {}).get("probe_run_time_ns", 0)

    def pct(ns: float) -> float:
        return 100.0 * ns / duration

    result = {
        "sampler": name,
        "seconds": duration / 1e9,
        "threads": trailer["threads_seen"],
        "ticks": trailer["ticks"],
        "missed_pct": 100.0 * trailer["missed_ticks"] / max(1, trailer["ticks"] + trailer["missed_ticks"]),
        # Records the kernel's full ring refused (the recorder's wake-up too far apart): never expected.
        "refused": (trailer.get("ebpf_sampler") or {}).get("kernel_records_refused", 0),
        "p99_ms": trailer["interval_p99_ns"] / 1e6,
        "recorder_pct": pct(trailer["sampler_cpu_ns"]),
        # Of the recorder's CPU, the tick's /proc reads alone (samplers/tick_reads.py); with the compiled tick about
        # the floor of those very reads, their C cost, in the same run.
        "reads_pct": pct(trailer.get("tick_reads_cpu_ns", 0)),
        "writer_pct": pct(trailer["writer_cpu_ns"]),
        # The eBPF sampler's rows, made after the recording from the frames kept (samplers/ebpf/deferred_rows.py):
        # CPU after the recording, not in the whole tool's share of it.
        "after_s": trailer.get("writer_decode_cpu_ns", 0) / 1e9,
        "probes_pct": pct(probes),
        "probe_runs_per_s": (trailer.get("ebpf_sampler") or {}).get("probe_runs", 0) / (duration / 1e9),
        "bytes_per_sample": size / max(1, trailer["rows"]["samples"]),
    }
    result["whole_pct"] = result["recorder_pct"] + result["writer_pct"] + result["probes_pct"]
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=list(SAMPLERS))
    args = ap.parse_args()
    target_bin = build()
    load = os.getloadavg()[0]
    total = (args.seconds + 600) * len(args.samplers)  # outlives slow starts on a loaded machine; killed at the end
    target = subprocess.Popen([str(target_bin), "121", "408", "4", str(total)], stdout=subprocess.PIPE, text=True)
    results = []
    try:
        assert target.stdout is not None
        target.stdout.readline()  # "ready N": every thread started
        time.sleep(1.0)
        with SysctlGuard({"kernel.bpf_stats_enabled": "1"}, state_dir=Path(tempfile.mkdtemp())):
            for name in args.samplers:
                if target.poll() is not None:
                    raise SystemExit(f"the target exited (status {target.returncode}) before the {name} run")
                results.append(one_run(name, target.pid, args.seconds))
    finally:
        target.kill()
        target.wait()
    print(f"Bitwig-shaped target, {args.seconds:.0f} s per sampler at 2 ms, load average at start {load:.2f}")
    print(
        f"{'sampler':>11} {'threads':>7} {'missed':>7} {'p99 ms':>7} {'recorder':>9} {'reads':>7} {'writer':>7} "
        f"{'probes':>7} {'whole':>7} {'B/sample':>8} {'refused':>7} {'after':>7}"
    )
    for r in results:
        print(
            f"{r['sampler']:>11} {r['threads']:>7} {r['missed_pct']:>6.2f}% {r['p99_ms']:>7.3f} "
            f"{r['recorder_pct']:>8.1f}% {r['reads_pct']:>6.1f}% {r['writer_pct']:>6.1f}% {r['probes_pct']:>6.1f}% "
            f"{r['whole_pct']:>6.1f}% "
            f"{r['bytes_per_sample']:>8.2f} {r['refused']:>7} {r['after_s']:>6.2f}s"
        )
    OUT.mkdir(exist_ok=True)
    (OUT / "ebpf_sampler_bench.json").write_text(json.dumps({"load_at_start": load, "results": results}, indent=2))


if __name__ == "__main__":
    main()
