"""Why the kernel's tick (`catch-load --sampler ebpf`) misses ticks: each expiry of its perf event's timer beside
the ticks its BPF program took, and the task each expiry interrupted.

The kernel's tick is a CPU-clock software perf event with a BPF program (samplers/ebpf/sampler.bpf.c
`kernel_tick`) firing every 2 ms on one CPU. A missed tick (the trailer's `missed_ticks`) is a 2 ms step of the
grid with no tick record. Two causes are told apart here:

  - the timer did not expire there (a late interrupt: the next expiry skips whole periods); tracefs'
    `timer:hrtimer_expire_entry`, filtered to the perf event's callback (`perf_swevent_hrtimer`), lists every
    expiry on the grid;
  - the timer expired on time but no tick was taken: an expiry with no tick record within 0.5 ms. The tick
    program's run count (kernel.bpf_stats_enabled) is printed beside the ticks taken: the two equal, but for the
    runs between the last drain and the count's read, so such an expiry is one where the kernel did not call it.

Each expiry is labelled with the task it interrupted (tracefs' own field), so the missed ones can be set beside
the rest. `--detach-probes` takes the sampler's tracepoint programs off after the start: what is left running is
the tick alone (a program that runs with interrupts enabled while the timer fires is skipped by the kernel's
per-CPU recursion guard, bpf_prog_active; with none of ours attached that cause is ruled out).

    sudo python bench/kernel_tick_gaps.py                    # 10 s on the Bitwig-shaped target, CPU 0
    sudo python bench/kernel_tick_gaps.py --no-target        # the machine without it
    sudo python bench/kernel_tick_gaps.py --cpu 1 --detach-probes

Needs root, tracefs and the function `perf_swevent_hrtimer` in /proc/kallsyms. Restores the tracefs event, its
filter and the buffer size it changed. Writes bench/out/kernel_tick_gaps.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
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
sys.path.insert(0, str(HERE))

from ebpf_sampler_bench import build  # noqa: E402

from samplers.ebpf.collector import program_run_stats  # noqa: E402
from samplers.ebpf.sampler import TICK_INDEX, EbpfSampler  # noqa: E402
from samplers.ebpf.tracefs import ensure_tracefs, release_tracefs  # noqa: E402
from samplers.sysctl_guard import SysctlGuard  # noqa: E402

INTERVAL_NS = 2_000_000
TAKEN_WITHIN_NS = 500_000  # a tick record this soon after an expiry is that expiry's (they are microseconds apart)
PROBES = [
    "sched:sched_switch",
    "sched:sched_wakeup",
    "sched:sched_wakeup_new",
    "sched:sched_process_exit",
    "exceptions:page_fault_user",
    "task:task_newtask",
]
_LINE = re.compile(r"^\s*(?P<task>.+?)-(?P<tid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<flags>\S+)\s.*\snow=(?P<now>\d+)")


def callback_address() -> str:
    """perf_swevent_hrtimer's address (the filter needs the number: the field is a pointer)."""
    for line in Path("/proc/kallsyms").read_text().splitlines():
        address, _, name = line.split()[:3]
        if name == "perf_swevent_hrtimer":
            if int(address, 16) == 0:
                raise SystemExit("/proc/kallsyms hides addresses (kernel.kptr_restrict): run as root")
            return "0x" + address
    raise SystemExit("perf_swevent_hrtimer is not in /proc/kallsyms")


class ExpiryTrace:
    """timer:hrtimer_expire_entry for one callback, in the tracefs instance's global buffer; restored on close."""

    def __init__(self, tracefs: str, address: str, buffer_kb: int = 16384) -> None:
        self.root = Path(tracefs)
        self.event = self.root / "events/timer/hrtimer_expire_entry"
        self.saved = {
            "buffer_size_kb": (self.root / "buffer_size_kb").read_text().split()[0],
            "tracing_on": (self.root / "tracing_on").read_text().strip(),
        }
        (self.root / "trace").write_text("")
        (self.root / "buffer_size_kb").write_text(str(buffer_kb))
        (self.event / "filter").write_text(f"function == {address}")
        (self.event / "enable").write_text("1")
        (self.root / "tracing_on").write_text("1")

    def stop(self) -> list[str]:
        (self.event / "enable").write_text("0")
        lines = [line for line in (self.root / "trace").read_text().splitlines() if "hrtimer_expire_entry" in line]
        (self.event / "filter").write_text("0")
        (self.root / "trace").write_text("")
        for name, value in self.saved.items():
            (self.root / name).write_text(value)
        return lines


def _steps_missed(times_ns: np.ndarray) -> int:
    """The 2 ms grid steps with nothing between these sorted times."""
    if len(times_ns) < 2:
        return 0
    return int((np.round(np.diff(times_ns) / INTERVAL_NS) - 1).clip(0).sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--cpu", type=int, default=0, help="the CPU the tick runs on (catch-load: --cpu, else 0)")
    ap.add_argument("--no-target", action="store_true", help="without the Bitwig-shaped target")
    ap.add_argument("--detach-probes", action="store_true", help="the tick alone: the tracepoint programs taken off")
    args = ap.parse_args()
    address = callback_address()
    target = None
    if not args.no_target:
        target = subprocess.Popen(
            [str(build()), "121", "408", "4", str(args.seconds + 60)], stdout=subprocess.PIPE, text=True
        )
        assert target.stdout is not None
        target.stdout.readline()  # "ready N": every thread started
    status = ensure_tracefs()
    if status.path is None:
        raise SystemExit(f"no tracefs: {status.message}")
    try:
        with SysctlGuard({"kernel.bpf_stats_enabled": "1"}, state_dir=Path(tempfile.mkdtemp())):
            sampler = EbpfSampler(64, tick_ns=INTERVAL_NS, tick_cpu=args.cpu)
            sampler.start()
            if not sampler.kernel_tick:
                raise SystemExit(f"no kernel tick: {sampler.tick_why}")
            try:
                sampler.tick_conf(0)
                if args.detach_probes:
                    for name in PROBES:
                        sampler._bpf.detach_tracepoint(name.encode())
                trace = ExpiryTrace(status.path, address)
                taken: list[int] = []
                try:
                    end = time.monotonic() + args.seconds
                    while time.monotonic() < end:
                        time.sleep(0.05)
                        records = sampler.drain_ticks()
                        taken += records[records["index"] == TICK_INDEX]["words"][:, 0].tolist()
                finally:
                    lines = trace.stop()
                runs = program_run_stats(sampler._bcc, sampler._bpf)
            finally:
                sampler.stop()
    finally:
        release_tracefs(status)
        if target is not None:
            target.kill()
            target.wait()

    ticks = np.array(taken, dtype=np.int64)
    # The tick CPU's expiries, each line parsed once.
    expiries_seen = [(m, line) for line in lines if (m := _LINE.match(line)) is not None and int(m["cpu"]) == args.cpu]
    spans = [int(match["now"]) for match, _ in expiries_seen]
    if spans:  # the ticks over the trace's span only (it starts after the tick does, and stops before the count)
        ticks = ticks[(ticks >= min(spans)) & (ticks <= max(spans) + TAKEN_WITHIN_NS)]
    by_task: collections.Counter[tuple[bool, str]] = collections.Counter()
    expiries = missed = 0
    missed_examples: list[str] = []
    for match, line in expiries_seen:
        now = int(match["now"])
        if not len(ticks) or now < ticks[0] or now > ticks[-1]:
            continue  # outside the span the ring was drained over
        expiries += 1
        at = int(np.searchsorted(ticks, now))
        was_taken = at < len(ticks) and ticks[at] - now <= TAKEN_WITHIN_NS
        task = re.sub(r"[-_]?\d+$", "", match["task"]) or match["task"]  # audio-62 -> audio: one row per kind
        by_task[(was_taken, task)] += 1
        if not was_taken:
            missed += 1
            if len(missed_examples) < 5:
                missed_examples.append(line.strip())
    result = {
        "seconds": args.seconds,
        "cpu": args.cpu,
        "target": not args.no_target,
        "probes_detached": args.detach_probes,
        "ticks_taken": len(ticks),
        "grid_steps_missed": _steps_missed(ticks),
        "expiries": expiries,
        "grid_steps_without_expiry": _steps_missed(np.array(sorted(spans), dtype=np.int64)),
        "expiries_without_tick": missed,
        "tick_program_runs": runs.get("kernel_tick", {}).get("run_cnt", 0),
        "interrupted_task": {
            task: {"expiries": by_task[(True, task)] + by_task[(False, task)], "without_tick": by_task[(False, task)]}
            for task in sorted({t for _, t in by_task}, key=lambda t: -(by_task[(True, t)] + by_task[(False, t)]))
        },
        "examples_without_tick": missed_examples,
    }
    print(
        f"{result['seconds']:.0f} s, tick on CPU {args.cpu}, target {'on' if result['target'] else 'off'}, "
        f"probes {'detached' if args.detach_probes else 'attached'}: {expiries} timer expiries, "
        f"{len(ticks)} ticks taken ({result['tick_program_runs']} program runs), "
        f"{result['grid_steps_missed']} grid steps missed: {result['grid_steps_without_expiry']} without a timer "
        f"expiry, {missed} expiries without a tick"
    )
    print(f"{'interrupted task':>24} {'expiries':>9} {'no tick':>8}")
    for task, row in result["interrupted_task"].items():
        print(f"{task[:24]:>24} {row['expiries']:>9} {row['without_tick']:>8}")
    for line in missed_examples:
        print("  " + line)
    OUT.mkdir(exist_ok=True)
    (OUT / "kernel_tick_gaps.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
