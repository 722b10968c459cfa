"""Would raw tracepoints make the eBPF sampler's probes cheaper? What a scheduler event costs a thread with a
minimal program on `sched:sched_switch` and `sched:sched_wakeup` attached as tracepoints (TRACEPOINT_PROBE, as
samplers/ebpf/sampler.bpf.c does) against the same attached as raw tracepoints (RAW_TRACEPOINT_PROBE: no record
built before the program runs; the task's pid read through its BTF offset), and against none.

The same ping-pong as bench/probe_overhead.py (bench/pingpong.c: two threads on one CPU, each round trip two
switches and two wake-ups); each way in a process of its own (BCC's cleanup in one process left the later
runs slower), the order rotated each round; the median CPU time a round trip, less none's, over the four
events. The programs do the least the sampler's do (an array lookup, a store), so the difference is the
attachment's own cost.

    sudo python bench/raw_tracepoint_cost.py               # 6 rounds of 4 s each way
    sudo python bench/raw_tracepoint_cost.py --rounds 9 --seconds 5

Needs root, BCC, 2 CPUs. Measured here (2026-12-06, quiet machine, two runs of 6 and 3 rounds): tracepoint
+168 and +149 ns an event, raw tracepoint +148 and +165, the round trips' ranges overlapping: no difference
beyond the noise, so not worth the sched_switch state mapping (`__trace_sched_switch_state()`) that a raw
tracepoint would make ours to redo per kernel. The tracepoints' ~150 ns an event is the attachment's, either way.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from ebpf_sampler_bench import build  # noqa: E402  (bench/ is sys.path[0] when run as a script)

PING_CPU = 1
EVENTS_PER_TRIP = 4  # two wake-ups, two switches
TRACEPOINTS = r"""
BPF_ARRAY(seen, u64, 4);
TRACEPOINT_PROBE(sched, sched_switch) {
    u32 k = args->next_pid & 3; u64 *v = seen.lookup(&k); if (v) *v += args->prev_state; return 0;
}
TRACEPOINT_PROBE(sched, sched_wakeup) {
    u32 k = args->pid & 3; u64 *v = seen.lookup(&k); if (v) *v += 1; return 0;
}
"""
RAW = r"""
BPF_ARRAY(seen, u64, 4);
RAW_TRACEPOINT_PROBE(sched_switch) {  // (preempt, prev, next, prev_state) since 5.18
    u32 pid = 0; bpf_probe_read_kernel(&pid, 4, (char *)ctx->args[2] + PID_OFFSET);
    u32 k = pid & 3; u64 *v = seen.lookup(&k); if (v) *v += ctx->args[3]; return 0;
}
RAW_TRACEPOINT_PROBE(sched_wakeup) {  // (p)
    u32 pid = 0; bpf_probe_read_kernel(&pid, 4, (char *)ctx->args[0] + PID_OFFSET);
    u32 k = pid & 3; u64 *v = seen.lookup(&k); if (v) *v += 1; return 0;
}
"""
SOURCES = {"none": None, "tracepoint": TRACEPOINTS, "raw": RAW}


def one(way: str, seconds: float) -> float:
    """CPU ns a round trip with `way`'s programs attached (run in a process of its own by main())."""
    from samplers.ebpf.bcc_import import import_bcc
    from samplers.ebpf.btf import Btf
    from samplers.ebpf.kernel_stub import configure_bcc_environment

    bpf = None
    source = SOURCES[way]
    if source is not None:
        bcc = import_bcc(None)
        configure_bcc_environment(None)
        pid_offset = Btf.load().member("task_struct", "pid")[0]
        bpf = bcc.BPF(text=source, cflags=[f"-DPID_OFFSET={pid_offset}"])
    ping = subprocess.Popen(
        [str(build("pingpong")), str(PING_CPU), str(seconds)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert ping.stdin is not None and ping.stdout is not None
    ping.stdout.readline()  # "ready"
    ping.stdin.write("go\n")
    ping.stdin.flush()
    trips, _, cpu_ns = (int(v) for v in ping.stdout.readline().split())
    ping.wait()
    if bpf is not None:
        bpf.cleanup()
    return cpu_ns / trips


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--one", choices=sorted(SOURCES), help=argparse.SUPPRESS)  # a child's run
    args = ap.parse_args()
    if args.one:
        print(one(args.one, args.seconds))
        return
    if os.geteuid() != 0 or (os.cpu_count() or 1) < 2:
        raise SystemExit("raw_tracepoint_cost: needs root and 2 CPUs")
    build("pingpong")
    print(f"load average at start {os.getloadavg()[0]:.2f}", flush=True)
    ways = list(SOURCES)
    trips: dict[str, list[float]] = {way: [] for way in ways}
    for r in range(args.rounds):
        for way in ways[r % 3 :] + ways[: r % 3]:
            argv = [sys.executable, __file__, "--one", way, "--seconds", str(args.seconds)]
            trips[way].append(float(subprocess.run(argv, check=True, capture_output=True, text=True).stdout))
        print(f"round {r + 1}: " + ", ".join(f"{w} {trips[w][-1]:.0f} ns a round trip" for w in ways), flush=True)
    none = statistics.median(trips["none"])
    for way in ("tracepoint", "raw"):
        extra = (statistics.median(trips[way]) - none) / EVENTS_PER_TRIP
        low, high = min(trips[way]), max(trips[way])
        print(f"{way}: {extra:+.0f} ns an event over none (round trips {low:.0f}-{high:.0f} ns)")


if __name__ == "__main__":
    main()
