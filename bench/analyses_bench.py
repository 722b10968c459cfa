"""Analyses benchmark: `stalls` and `summarize` on a 10-minute, 100-thread, 2 ms capture.

1. Generate the capture (not timed): 100 threads sampled at 2 ms for 10 minutes, about 30 million
   thread-samples, written with CaptureWriter one second (500 ticks) per chunk as the recorder does.
   The counters follow the kernel's accounting (tests/synth.py): an audio thread (SCHED_FIFO, 5.333 ms)
   with an episode of each cause every 2 s, three more periodic threads, 16 CPU-bound threads sharing
   CPUs, 80 threads woken at random 5-200 times a second.
2. Time each analysis in a fresh process (so that its peak RSS is its own): `find_stalls` and
   `summarize` through the Python API, then the same through the CLI (`forensics stalls|summarize`).
   The project's modules are compiled to bytecode first (not timed), as an installed tool's are: the
   figures before 2026-12-05 evening were taken with PYTHONDONTWRITEBYTECODE set and no __pycache__ (the
   sessions' shells), so each run compiled its ~40 modules again (0.1-0.15 s of a CLI run).

    python bench/analyses_bench.py                       # the issue's size
    python bench/analyses_bench.py --minutes 1 --threads 20
    python bench/analyses_bench.py --keep /var/tmp/big.ssf   # reuse (or keep) the generated capture

Bars: each at most 60 s and 4 GiB peak RSS on the project's machine; the figure to report is
thread-samples per second. Writes bench/out/analyses_bench.json.
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

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "out"
sys.path.insert(0, str(REPO))

from capture.format import CaptureWriter  # noqa: E402
from tests import synth  # noqa: E402
from tests.synth import MS, T0, Episode, SampledThread, Timeline  # noqa: E402

CAUSES = ("run", "runqueue", "io", "fault", "lock")


def build_threads(minutes: float, threads: int, seed: int = 3) -> tuple[list[Timeline], list[tuple]]:
    duration = int(minutes * 60e9)
    rng = np.random.default_rng(seed)
    out: list[Timeline] = []
    period = 5_333_333
    cycles = duration // period
    episodes = [
        Episode(CAUSES[i % len(CAUSES)], int(c), float(rng.choice([6, 10, 20])))
        for i, c in enumerate(range(200, cycles - 200, 375))  # every 2 s
    ]
    audio = Timeline(tid=10_001, comm="audio", policy=1, rtprio=70, cpu=1)
    truth = synth.periodic(audio, t0=T0, duration_ns=duration, period_ns=period, episodes=episodes, seed=seed)
    out.append(audio)
    tid = 10_002
    for p in (10_666_666, 21_333_333, 42_666_666)[: max(0, min(3, threads - 1))]:
        tl = Timeline(tid=tid, comm=f"periodic-{p // 1_000_000}ms", cpu=tid % 2)
        synth.periodic(tl, t0=T0, duration_ns=duration, period_ns=p, work_ns=200_000, seed=tid)
        out.append(tl)
        tid += 1
    n_busy = min(16, max(0, threads - len(out)) // 6)
    for _ in range(n_busy):
        tl = Timeline(tid=tid, comm=f"worker-{tid}", cpu=tid % 2)
        synth.busy_fast(tl, t0=T0, duration_ns=duration)
        out.append(tl)
        tid += 1
    while len(out) < threads:
        tl = Timeline(tid=tid, comm=f"thread-{tid}", cpu=tid % 2)
        synth.random_waker_fast(
            tl, t0=T0, duration_ns=duration, rate_hz=float(rng.uniform(5, 200)), run_ns=50_000, seed=tid
        )
        out.append(tl)
        tid += 1
    return out, [(c, audio.tid, s, e) for c, s, e in truth]


def generate(path: Path, minutes: float, threads: int, interval_ns: int = 2 * MS) -> int:
    """Write the capture; returns the number of thread-samples."""
    timelines, truth = build_threads(minutes, threads)
    prepared = [SampledThread(tl) for tl in timelines]
    duration = int(minutes * 60e9)
    ticks = duration // interval_ns + 1
    per_chunk = 500  # one second at 2 ms, as the recorder writes
    meta = synth.meta(interval_ns)
    rows = 0
    jitter = np.random.default_rng(11)
    import pandas as pd

    with CaptureWriter(path, meta) as writer:
        writer.append("threads", synth.threads_table(timelines, T0))
        for first in range(0, ticks, per_chunk):
            tick = np.arange(first, min(first + per_chunk, ticks), dtype=np.int64)
            frames = []
            for j, thread in enumerate(prepared):
                # Reads land a few us apart and late by a varying amount, as the real sampler's do
                # (and as incompressible in the file).
                late = jitter.integers(0, 40_000, size=len(tick))
                frame = thread.read(T0 + tick * interval_ns + j * 2_000 + late)
                frame.insert(0, "tick", tick.astype(np.uint32))
                frames.append(frame)
            chunk = pd.concat(frames, ignore_index=True)
            writer.append("samples", chunk)
            rows += len(chunk)
        writer.append("truth", pd.DataFrame(truth, columns=["cause", "tid", "start_ns", "end_ns"]))
        writer.close({"ticks": int(ticks), "missed_ticks": 0, "duration_ns": duration})
    return rows


CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
sys.path.insert(0, {repo!r})
import forensics
cap = forensics.load({path!r})
if {what!r} == "stalls":
    from analyses.stalls import find_stalls
    out = find_stalls(cap)
    n = len(out)
else:
    from analyses.summary import summarize
    out = summarize(cap)
    n = len(out.views["worst"])
elapsed = time.perf_counter() - t0
# VmHWM, not ru_maxrss: Linux carries ru_maxrss across fork+exec from the parent.
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
print(json.dumps({{"seconds": elapsed, "rss_kib": hwm, "rows": n}}))
"""


PACKAGES = ("analyses", "capture", "forensics")


def child_env() -> dict[str, str]:
    """The children's environment: the repo's modules first, their bytecode read (compile_project)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def compile_project() -> None:
    """Write the project's bytecode (__pycache__, git-ignored) before the timed runs, as `pip install` or
    an editable install's first run does; the libraries' is written when they are installed."""
    command = [sys.executable, "-m", "compileall", "-q", *(str(REPO / p) for p in PACKAGES)]
    subprocess.run(command, check=True, env=child_env())


def run_api(what: str, path: Path, env: dict[str, str]) -> dict[str, float]:
    code = CHILD.format(repo=str(REPO), path=str(path), what=what)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    return json.loads(result.stdout.strip().splitlines()[-1])


def run_cli(what: str, path: Path, env: dict[str, str]) -> dict[str, float]:
    """The command as a user runs it; peak RSS of the child from wait4() (the parent stays small: the
    capture is generated in another process, as ru_maxrss is inherited across fork+exec)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "forensics", what, str(path), "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        cwd=REPO,  # `-m` puts the working directory first on sys.path: this repo's code, wherever run from
    )
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"forensics {what} failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    return {"seconds": elapsed, "rss_kib": usage.ru_maxrss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=100)
    parser.add_argument("--keep", type=Path, help="Capture path to reuse if it exists (else generate and keep).")
    parser.add_argument("--generate-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    tmp = None
    if args.keep:
        path = args.keep
    else:
        tmp = tempfile.TemporaryDirectory(dir="/var/tmp")
        path = Path(tmp.name) / "bench.ssf"
    if args.generate_only:
        rows = generate(path, args.minutes, args.threads)
        print(f"generated {rows:,} thread-samples: {path}", flush=True)
        return
    if not path.exists():
        t = time.perf_counter()
        command = [sys.executable, __file__, "--generate-only", "--keep", str(path)]
        command += ["--minutes", str(args.minutes), "--threads", str(args.threads)]
        subprocess.run(command, check=True)
        print(f"(generation took {time.perf_counter() - t:.0f} s)", flush=True)
    import forensics

    rows = int((forensics.load(path).trailer or {}).get("rows", {}).get("samples", 0))
    size = path.stat().st_size
    compile_project()
    env = child_env()
    results: dict[str, dict[str, float]] = {}
    for what in ("stalls", "summarize"):
        results[f"api {what}"] = run_api(what, path, env)
        results[f"cli {what}"] = run_cli(what, path, env)
    report = {
        "thread_samples": rows,
        "bytecode": "compiled before the runs",
        "file_bytes": size,
        "minutes": args.minutes,
        "threads": args.threads,
        "results": results,
        "bars": {"seconds": 60, "rss_gib": 4},
    }
    print(f"{rows:,} thread-samples, {size / 2**20:.0f} MiB on disk ({size / max(rows, 1):.1f} B/sample)")
    print(f"{'run':<16}{'seconds':>10}{'peak RSS':>12}{'samples/s':>14}  bar (60 s, 4 GiB)")
    ok = True
    for name, r in results.items():
        rate = rows / r["seconds"]
        within = r["seconds"] <= 60 and r["rss_kib"] <= 4 * 2**20
        ok &= within
        verdict = "ok" if within else "OVER"
        print(f"{name:<16}{r['seconds']:>10.1f}{r['rss_kib'] / 2**20:>10.2f} G{rate:>14,.0f}  {verdict}")
    (OUT / "analyses_bench.json").write_text(json.dumps(report, indent=2))
    if tmp is not None:
        tmp.cleanup()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
