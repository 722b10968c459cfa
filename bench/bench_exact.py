"""Costs of the exact sources, measured side by side in one run (root; `python bench/bench_exact.py`).

1. taskstats: one TASKSTATS_CMD_GET per thread (query_raw) against os.pread of schedstat and stat on held
   fds, the /proc hot loop's reads, same threads, interleaved rounds.
2. BCC: stub-tree generation (cold cache), compile + load + attach (warm).
3. Ring buffer: event rate sustained without loss. A target process whose two threads ping-pong one byte
   over pipes (each exchange: 2 wake-ups + 2 switches + ...), for `--seconds`, at a few ring sizes; the
   events/s recorded, lost and missed.
4. Recording cost per second on a periodic target (a 1.33 ms "audio" thread + a worker, like a 64-frame
   engine): CPU of /proc sampling alone (2 ms preads), + taskstats per tick, + the eBPF collector
   (user space: poll and decode; kernel: the probes' run time from bpf_prog_info with
   kernel.bpf_stats_enabled=1, restored after).
5. The same through catch-load on the lab (`--sections lab`): `catch-load --lab` with the same seed and
   episodes in four modes, interleaved, `--repeats` times: /proc alone (--taskstats none), + taskstats
   for every thread (--taskstats all --delayacct), + eBPF (--ebpf), and all of them. Per second of
   recording: the recorder's and the writer's CPU (trailer), the target's own CPU (the lab's threads'
   schedstat run time, which includes probe time charged to them), the probes' kernel CPU machine-wide
   (trailer ebpf.probe_run_time_ns, kernel.bpf_stats_enabled=1 for the bench), events per second and
   every lost or missed event.

Results go to stdout and bench/out/exact.json. Keep runs short: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from samplers.ebpf import EbpfCollector, EbpfOptions, kernel_stub  # noqa: E402
from samplers.sysctl_guard import SysctlGuard  # noqa: E402
from samplers.taskstats import TaskstatsClient, parse_reply, taskstats_table  # noqa: E402

PINGPONG = r"""
import os, sys, threading, time
seconds, rate = float(sys.argv[1]), float(sys.argv[2])  # rate: exchanges/s, 0 = as fast as it goes
a_r, a_w = os.pipe(); b_r, b_w = os.pipe()
print("ready", flush=True); sys.stdin.readline()
start = time.monotonic(); end = start + seconds
count = 0
def pong():
    while True:
        if os.read(a_r, 1) == b"q": return
        os.write(b_w, b"x")
t = threading.Thread(target=pong); t.start()
while time.monotonic() < end:
    os.write(a_w, b"x"); os.read(b_r, 1); count += 1
    if rate and count % 16 == 0:  # pace in small bursts
        ahead = count / rate - (time.monotonic() - start)
        if ahead > 0: time.sleep(ahead)
os.write(a_w, b"q"); t.join()
print(count, flush=True)
"""

IDLE_THREADS = r"""
import sys, threading
n = int(sys.argv[2])
stop = threading.Event()
threads = [threading.Thread(target=stop.wait) for _ in range(n)]
for t in threads: t.start()
print("ready", flush=True); sys.stdin.readline(); stop.set()
"""

PERIODIC = r"""
import os, sys, threading, time
seconds = float(sys.argv[1])
period = 1_333_333
print("ready", flush=True); sys.stdin.readline()
stop = time.monotonic_ns() + int(seconds * 1e9)
work = threading.Event()
def worker():
    while time.monotonic_ns() < stop:
        work.wait(0.01); work.clear()
        x = 0
        for i in range(300): x += i
def audio():
    next_t = time.monotonic_ns()
    while next_t < stop:
        next_t += period
        x = 0
        for i in range(200): x += i
        work.set()
        delay = next_t - time.monotonic_ns()
        if delay > 0: time.sleep(delay / 1e9)
threads = [threading.Thread(target=worker), threading.Thread(target=audio)]
for t in threads: t.start()
for t in threads: t.join()
print("done", flush=True)
"""


def cpu_ns() -> int:
    """CPU (user + sys) of this whole process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return int((r.ru_utime + r.ru_stime) * 1e9)


def thread_cpu_ns() -> int:
    return time.thread_time_ns()


def start_child(code: str, seconds: float, *args: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(seconds), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    child.stdout.readline()
    return child


def go(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None
    child.stdin.write("go\n")
    child.stdin.flush()


def tids_of(pid: int) -> list[int]:
    return [int(t) for t in os.listdir(f"/proc/{pid}/task")]


# --------------------------------------------------------------------------------------------------


def bench_taskstats(rounds: int, threads: int = 20) -> dict[str, Any]:
    child = start_child(IDLE_THREADS, 0, str(threads))  # threads that exist and hold still
    try:
        tids = tids_of(child.pid)
        fds = [
            os.open(f"/proc/{child.pid}/task/{t}/{name}", os.O_RDONLY) for t in tids for name in ("schedstat", "stat")
        ]
        client = TaskstatsClient()
        t_ts = t_pread = 0
        rows = []
        for tick in range(rounds):
            t0 = time.perf_counter_ns()
            for fd in fds:
                os.pread(fd, 4096, 0)
            t1 = time.perf_counter_ns()
            raws = [client.query_raw(t) for t in tids]
            t2 = time.perf_counter_ns()
            t_pread += t1 - t0
            t_ts += t2 - t1
            rows += [(tick, t2, tid, raw) for tid, raw in zip(tids, raws, strict=True)]
        t0 = time.perf_counter_ns()
        for _, _, _, raw in rows[:200]:
            parse_reply(raw)  # type: ignore[arg-type]
        one_by_one = (time.perf_counter_ns() - t0) / 200
        t0 = time.perf_counter_ns()
        taskstats_table(rows, delayacct=True)
        batch = (time.perf_counter_ns() - t0) / len(rows)
        for fd in fds:
            os.close(fd)
        client.close()
    finally:
        go(child)
        child.wait()
    n = rounds * len(tids)
    return {
        "threads": len(tids),
        "rounds": rounds,
        "taskstats_query_us": round(t_ts / n / 1000, 2),
        "parse_reply_us": round(one_by_one / 1000, 2),
        "taskstats_table_us_per_reply": round(batch / 1000, 2),
        "pread_schedstat_plus_stat_us": round(t_pread / n / 1000, 2),
        "query_over_two_preads": round(t_ts / max(t_pread, 1), 2),
    }


def bench_compile() -> dict[str, Any]:
    cache = Path(tempfile.mkdtemp(prefix="ssf-bench-stub-"))
    try:
        t0 = time.perf_counter()
        kernel_stub.build_stub_tree(cache)
        stub_s = time.perf_counter() - t0
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    timings = []
    for _ in range(3):
        collector = EbpfCollector([os.getpid()])
        t0 = time.perf_counter()
        collector.start()
        timings.append(time.perf_counter() - t0)
        compile_load = collector.timing.compile_load_s
        collector.stop()
    return {
        "stub_tree_cold_s": round(stub_s, 4),
        "start_s_runs": [round(t, 3) for t in timings],
        "compile_load_s_last": round(compile_load, 3),
    }


def bench_ringbuf(seconds: float, rates: list[int], pages: int, poll_ms: int) -> list[dict[str, Any]]:
    """Event rate against loss: a ping-pong target paced at each rate (0: unpaced), one ring size."""
    results = []
    for rate in rates:
        child = start_child(PINGPONG, seconds, str(rate))
        collector = EbpfCollector([child.pid], EbpfOptions(ringbuf_pages=pages, faults=False, block=False))
        collector.start()
        rows = 0
        cpu0 = thread_cpu_ns()
        t0 = time.monotonic()
        go(child)
        while child.poll() is None:
            rows += sum(t.num_rows for name, t in collector.poll(poll_ms).items() if name != "ebpf_lost")
        wall = time.monotonic() - t0
        rows += sum(t.num_rows for name, t in collector.stop().items() if name != "ebpf_lost")
        user_cpu = thread_cpu_ns() - cpu0
        assert child.stdout is not None
        exchanges = int(child.stdout.readline())
        stats = collector.stats()
        written = sum(stats["events"].values())
        lost = sum(stats["lost"].values())
        results.append(
            {
                "paced_exchanges_per_s": rate or "unpaced",
                "ringbuf_kib": pages * os.sysconf("SC_PAGE_SIZE") // 1024,
                "poll_ms": poll_ms,
                "seconds": round(wall, 2),
                "exchanges_per_s": round(exchanges / wall),
                "events_written_per_s": round(written / wall),
                "events_lost_per_s": round(lost / wall),
                "lost_fraction": round(lost / max(written + lost, 1), 4),
                "missed": sum(stats["missed"].values()),
                "rows": rows,
                "reader": collector.reader,
                "reader_cpu_pct_of_core": round(100 * user_cpu / (wall * 1e9), 1),
                "reader_ns_per_event": round(user_cpu / max(rows, 1)),
            }
        )
    return results


def bench_recording_cost(seconds: float, repeats: int) -> dict[str, Any]:
    """CPU per second of recording for each source on the same periodic target; modes interleaved,
    `repeats` times, medians reported (the machine is shared: single runs are noisy)."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for _ in range(repeats):
        for entry in _recording_cost_once(seconds):
            runs.setdefault(entry["mode"], []).append(entry)
    summary: dict[str, Any] = {}
    for mode, entries in runs.items():
        keys = [k for k, v in entries[0].items() if isinstance(v, int | float) and k != "seconds"]
        summary[mode] = {k: float(np.median([e[k] for e in entries])) for k in keys}
        summary[mode]["runs"] = entries
    return summary


def _recording_cost_once(seconds: float) -> list[dict[str, Any]]:
    results = []
    for mode in ("proc", "proc+taskstats", "ebpf"):
        child = start_child(PERIODIC, seconds)
        tids = tids_of(child.pid)  # 1 main + 2 threads
        collector = None
        guard = None
        if mode == "ebpf":
            guard = SysctlGuard({"kernel.bpf_stats_enabled": "1"})  # run_time_ns of each probe; restored below
            guard.apply()
            collector = EbpfCollector([child.pid])
            collector.start()
        fds = [
            os.open(f"/proc/{child.pid}/task/{t}/{name}", os.O_RDONLY) for t in tids for name in ("schedstat", "stat")
        ]
        client = TaskstatsClient() if mode == "proc+taskstats" else None
        rows = 0
        c0, t0 = thread_cpu_ns(), time.monotonic_ns()
        go(child)
        if collector is None:
            next_tick = time.monotonic_ns()
            while child.poll() is None:
                for fd in fds:
                    os.pread(fd, 4096, 0)
                if client is not None:
                    for t in tids:
                        client.query_raw(t)
                next_tick += 2_000_000
                delay = next_tick - time.monotonic_ns()
                if delay > 0:
                    time.sleep(delay / 1e9)
        else:
            while child.poll() is None:
                rows += sum(t.num_rows for t in collector.poll(50).values())
        wall = (time.monotonic_ns() - t0) / 1e9
        cpu = thread_cpu_ns() - c0
        entry: dict[str, Any] = {
            "mode": mode,
            "seconds": round(wall, 2),
            "user_cpu_pct_of_core": round(100 * cpu / (wall * 1e9), 2),
        }
        if collector is not None:
            progs = collector.program_stats()
            kernel_ns = sum(p["run_time_ns"] for p in progs.values())
            runs = sum(p["run_cnt"] for p in progs.values())
            stats = collector.stats()
            collector.stop()
            entry.update(
                {
                    "events_per_s": round(sum(stats["events"].values()) / wall),
                    "lost": sum(stats["lost"].values()),
                    "probe_runs_per_s_machine_wide": round(runs / wall),
                    "probe_kernel_cpu_pct_of_core": round(100 * kernel_ns / (wall * 1e9), 3),
                    "probe_ns_per_run": round(kernel_ns / max(runs, 1)),
                }
            )
        if guard is not None:
            guard.restore()
        if client is not None:
            client.close()
        for fd in fds:
            os.close(fd)
        child.wait()
        results.append(entry)
    return results


LAB_MODES = {
    "proc": ["--taskstats", "none"],
    "proc+taskstats": ["--taskstats", "all", "--delayacct"],
    "proc+ebpf": ["--taskstats", "none", "--ebpf"],
    "all": ["--taskstats", "all", "--delayacct", "--ebpf"],
}
LAB_ARGS = ["--episodes", "run:4,runqueue:4,io:4,fault:4,lock:4", "--spacing", "500ms", "--episode-ms", "12"]


def _lab_once(mode: str, out: Path) -> dict[str, Any]:
    import forensics

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    argv = [sys.executable, "-m", "forensics.cli.catch_load", "-q", "-o", str(out), *LAB_MODES[mode], "--lab"]
    subprocess.run([*argv, *LAB_ARGS], check=True, cwd=REPO, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cap = forensics.load(out)
    trailer = cap.trailer or {}
    seconds = trailer["duration_ns"] / 1e9
    samples = cap.table("samples", columns=["tid", "run_ns"])
    target_ns = int((samples.groupby("tid")["run_ns"].max() - samples.groupby("tid")["run_ns"].min()).sum())
    ebpf = trailer.get("ebpf") or {}
    events = sum((ebpf.get("events") or {}).values())
    pct = 100.0 / (seconds * 1e9)  # ns of CPU -> % of one core
    tree_ns = int(((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1e9)
    return {
        "mode": mode,
        "seconds": round(seconds, 2),
        "recorder_pct": round(trailer["sampler_cpu_ns"] * pct, 2),
        "writer_pct": round(trailer.get("writer_cpu_ns", 0) * pct, 2),
        "recorder_plus_writer_pct": round((trailer["sampler_cpu_ns"] + trailer.get("writer_cpu_ns", 0)) * pct, 2),
        "target_pct": round(target_ns * pct, 2),
        "probe_kernel_pct": round(ebpf.get("probe_run_time_ns", 0) * pct, 3),
        "process_tree_pct": round(tree_ns * pct, 2),
        "events_per_s": round(events / seconds),
        "lost": sum((ebpf.get("lost") or {}).values()),
        "missed": sum((ebpf.get("missed") or {}).values()),
        "lost_by_kind": {k: v for k, v in (ebpf.get("lost") or {}).items() if v},
        "missed_by_probe": {k: v for k, v in (ebpf.get("missed") or {}).items() if v},
        "missed_ticks": trailer.get("missed_ticks"),
        "taskstats_rows": len(cap.table("taskstats", columns=["tid"])) if "taskstats" in cap.table_names else 0,
    }


def bench_lab_cost(repeats: int) -> dict[str, Any]:
    """catch-load --lab in each mode, interleaved; medians per mode and the extra over /proc alone."""
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in LAB_MODES}
    with (
        tempfile.TemporaryDirectory(prefix="ssf-bench-lab-") as tmp,
        SysctlGuard({"kernel.bpf_stats_enabled": "1"}, state_dir=Path(tmp)),
    ):
        for k in range(repeats):
            for mode in LAB_MODES:
                runs[mode].append(_lab_once(mode, Path(tmp) / f"{mode}-{k}.ssf"))
    summary: dict[str, Any] = {}
    for mode, entries in runs.items():
        keys = [key for key, value in entries[0].items() if isinstance(value, int | float) and key != "seconds"]
        summary[mode] = {key: round(float(np.median([e[key] for e in entries])), 3) for key in keys}
        summary[mode]["lost_total"] = sum(e["lost"] for e in entries)
        summary[mode]["missed_total"] = sum(e["missed"] for e in entries)
    base = summary["proc"]
    for mode in LAB_MODES:
        summary[mode]["extra_over_proc_pct"] = {
            key: round(summary[mode][key] - base[key], 3)
            for key in ("recorder_plus_writer_pct", "target_pct", "probe_kernel_pct", "process_tree_pct")
        }
    summary["runs"] = runs
    return summary


def main() -> None:
    if os.geteuid() != 0:
        sys.exit("bench_exact needs root (taskstats, eBPF)")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each loaded run (default 2)")
    parser.add_argument("--rounds", type=int, default=500, help="taskstats/pread rounds over 21 threads (default 500)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs of each recording mode (default 3)")
    parser.add_argument(
        "--sections",
        default="taskstats,bcc,ringbuf,recording,lab",
        help="comma-separated: taskstats, bcc, ringbuf, recording, lab (default: all)",
    )
    parser.add_argument(
        "--rates", default="2000,10000,30000,60000,0", help="ring buffer: paced exchanges/s (0: unpaced)"
    )
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    report: dict[str, Any] = {"kernel": os.uname().release, "cpus": os.cpu_count()}
    if "taskstats" in sections:
        report["taskstats"] = bench_taskstats(args.rounds)
    if "bcc" in sections:
        report["bcc"] = bench_compile()
    if "ringbuf" in sections:
        rates = [int(r) for r in args.rates.split(",")]
        report["ringbuf"] = bench_ringbuf(args.seconds, rates, pages=1024, poll_ms=50)
        report["ringbuf_small"] = bench_ringbuf(args.seconds, rates, pages=16, poll_ms=50)
    if "recording" in sections:
        report["recording_cost"] = bench_recording_cost(args.seconds, args.repeats)
    if "lab" in sections:
        report["lab_recording_cost"] = bench_lab_cost(args.repeats)
    text = json.dumps(report, indent=2)
    print(text)
    out = REPO / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "exact.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
