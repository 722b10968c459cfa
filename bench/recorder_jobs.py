"""What the recorder's work between ticks costs on the Bitwig shape: each periodic job timed in-process.

Starts bench/bitwig_shape.c (121 SCHED_FIFO threads at 5.333 ms, 408 asleep, 4 busy), records it in this
process for --seconds (frames to a file, no writer; /proc tiers at --slow, taskstats auto with delay
accounting taken as off), and wraps the recorder's between-tick methods with a clock: per method, calls,
total, median and largest. What samplers/periodic.py spreads over the ticks: a job beside a tick of about
1 ms at 2 ms must stay under the other half.

    python bench/recorder_jobs.py --seconds 6
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from sampler_bench import build  # noqa: E402

from samplers.recorder import Recorder, RecorderOptions  # noqa: E402
from samplers.targets import TargetSpec  # noqa: E402

TIMED = (
    "_discover", "_scan_threads", "_update_rt_sources", "_publish_layout", "_demote", "_read_system",
    "_hand_over", "_after_tick", "_send_tiers",
)  # fmt: skip


def timed(times: dict[str, list[int]], name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return method(*args, **kwargs)
        finally:
            times[name].append(time.perf_counter_ns() - start)

    return wrapper


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--slow", default="20ms", help="--slow-interval in ms (off: every thread every tick)")
    args = ap.parse_args()
    _, _, bitwig_bin = build()
    target = subprocess.Popen(
        [str(bitwig_bin), "121", "408", "4", str(int(args.seconds) + 60)], stdout=subprocess.DEVNULL
    )
    times: dict[str, list[int]] = collections.defaultdict(list)
    try:
        time.sleep(0.5)
        with tempfile.TemporaryDirectory() as tmp:
            slow_ns = 0 if args.slow == "off" else int(float(args.slow.removesuffix("ms")) * 1e6)
            options = RecorderOptions(
                output=f"{tmp}/x.ssf", duration_ns=int(args.seconds * 1e9), slow_interval_ns=slow_ns, taskstats="auto"
            )
            recorder = Recorder(TargetSpec(pids=[target.pid]), options)
            for name in TIMED:
                setattr(recorder, name, timed(times, name, getattr(recorder, name)))
            fd = os.open(f"{tmp}/frames.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            trailer = recorder.run(
                fd, {"recording": {"interval_ns": options.interval_ns}, "sources": {"delayacct": False}}
            )
            os.close(fd)
    finally:
        target.kill()
        target.wait()
    print(f"{trailer['ticks']} ticks, {trailer['missed_ticks']} missed, load average {os.getloadavg()[0]:.2f}")
    for name, spans in sorted(times.items(), key=lambda item: -sum(item[1])):
        spans.sort()
        print(
            f"{name:20s} calls {len(spans):6d}  total {sum(spans) / 1e6:8.1f} ms  "
            f"p50 {spans[len(spans) // 2] / 1e3:7.1f} us  max {spans[-1] / 1e3:7.1f} us"
        )


if __name__ == "__main__":
    main()
