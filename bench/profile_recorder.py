"""Where the recorder's tick and the writer's parse spend their time (cProfile; not a benchmark).

Records bench/many_threads.c with N threads in-process for S seconds, the frames going to a file instead of
the writer's pipe, under cProfile; then replays that frame file through the writer's CaptureSink under
cProfile. Prints the top functions of each and the CPU per thread-sample of each side.

    python bench/profile_recorder.py --threads 200 --seconds 5 [--fast REGEX] [--slow 20ms|off]
    python bench/profile_recorder.py --bitwig --seconds 5 --slow 20ms   # bench/bitwig_shape.c 121/408/4

SORT=cumulative (any pstats key) orders the functions otherwise than by their own time.

cProfile's own overhead inflates what calls many small functions (the tick's per-thread loop): read the
split between functions, and take the costs from bench/sampler_bench.py.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from sampler_bench import build  # noqa: E402

from samplers import frames  # noqa: E402
from samplers.recorder import Recorder, RecorderOptions  # noqa: E402
from samplers.targets import TargetSpec  # noqa: E402
from samplers.writer_process import CaptureSink  # noqa: E402


def top(profile: cProfile.Profile, n: int = 18) -> str:
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats(os.environ.get("SORT", "tottime")).print_stats(n)
    return "\n".join(line for line in out.getvalue().splitlines() if line.strip())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--fast", default=None, help="--fast REGEX for the recorder (tiers)")
    ap.add_argument("--slow", default="20ms", help="--slow-interval (off: every thread every tick)")
    ap.add_argument("--bitwig", action="store_true", help="bench/bitwig_shape.c (121 RT, 408 asleep, 4 busy)")
    ap.add_argument("--sampler", default="proc", choices=["proc", "ebpf"], help="--sampler (ebpf: root)")
    ap.add_argument("--frames-out", type=Path, help="keep the frames the recorder handed over (bench/writer_replay.py)")
    args = ap.parse_args()
    many_bin, _, bitwig_bin = build()
    hold = str(args.seconds + 30)
    argv = [str(bitwig_bin), "121", "408", "4", hold] if args.bitwig else [str(many_bin), str(args.threads), hold]
    target = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        with tempfile.TemporaryDirectory() as tmp:
            frames_path = Path(tmp) / "frames.bin"
            options = RecorderOptions(
                output=str(Path(tmp) / "x.ssf"),
                duration_ns=int(args.seconds * 1e9),
                slow_interval_ns=0 if args.slow == "off" else int(float(args.slow.removesuffix("ms")) * 1e6),
                fast=re.compile(args.fast) if args.fast else None,
                sampler=args.sampler,
                # catch-load's defaults under --sampler ebpf (forensics/cli/catch_load.py): no per-thread /proc
                # sched or taskstats reads, which the eBPF tick replaces (with them, the profile showed a scan of
                # every thread's policy every 250 ms that a recording never makes)
                **({"sched": "none", "taskstats": "none"} if args.sampler == "ebpf" else {}),
            )
            recorder = Recorder(TargetSpec(pids=[target.pid]), options)
            fd = os.open(frames_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            profile = cProfile.Profile()
            c0 = time.process_time_ns()
            profile.enable()
            trailer = recorder.run(fd, {"recording": {"interval_ns": options.interval_ns}})
            profile.disable()
            rec_cpu = time.process_time_ns() - c0
            recorder.finish(trailer)
            os.close(fd)
            rows = recorder.sample_rows
            print(f"recorder: {trailer['ticks']} ticks, {trailer['missed_ticks']} missed, {rows} thread-samples")
            print(f"recorder CPU under cProfile: {rec_cpu / max(rows, 1):.0f} ns per thread-sample")
            print(top(profile))
            if args.frames_out is not None:
                args.frames_out.write_bytes(frames_path.read_bytes())

            sink = CaptureSink(str(Path(tmp) / "replay.ssf"))
            with open(frames_path, "rb") as fh:
                parsed = list(frames.read_frames(fh.fileno()))
            profile = cProfile.Profile()
            c0 = time.process_time_ns()
            profile.enable()
            for kind, payload in parsed:
                sink.handle(kind, payload)
            sink.close()
            profile.disable()
            wri_cpu = time.process_time_ns() - c0
            print(f"\nwriter CPU under cProfile: {wri_cpu / max(rows, 1):.0f} ns per thread-sample")
            print(top(profile))
    finally:
        target.kill()
        target.wait()


if __name__ == "__main__":
    main()
