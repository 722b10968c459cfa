"""The writer's CPU on a recorded frame stream, without cProfile: replays it through CaptureSink.

The frames are what the recorder handed over (bench/profile_recorder.py --frames-out FILE writes them),
so two versions of the writer compare on the same input, whatever the machine's load was when they were
recorded:

    python bench/profile_recorder.py --bitwig --seconds 4 --slow 20ms --frames-out /tmp/bitwig.frames
    python bench/writer_replay.py /tmp/bitwig.frames
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from samplers import frames
from samplers.writer_process import CaptureSink


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("frames", type=Path)
    ap.add_argument("--runs", type=int, default=3, help="replays; the least CPU is printed (and each)")
    args = ap.parse_args()
    with open(args.frames, "rb") as fh:
        parsed = list(frames.read_frames(fh.fileno()))
    cpu = []
    rows = 0
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            sink = CaptureSink(str(Path(tmp) / "replay.ssf"))
            c0 = time.process_time_ns()
            for kind, payload in parsed:
                sink.handle(kind, payload)
            sink.close()
            cpu.append(time.process_time_ns() - c0)
            assert sink.writer is not None
            rows = sink.writer.rows_written.get("samples", 0)
    print(
        f"{args.frames.stat().st_size / 1e6:.1f} MB of frames, {rows} thread-samples: "
        f"writer CPU {min(cpu) / 1e6:.0f} ms "
        f"({min(cpu) / max(rows, 1):.0f} ns per thread-sample; runs {', '.join(f'{c / 1e6:.0f}' for c in cpu)} ms)"
    )


if __name__ == "__main__":
    main()
