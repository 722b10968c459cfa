"""The writer's CPU on a recorded frame stream, without cProfile: replays it through CaptureSink.

The frames are what the recorder handed over (bench/profile_recorder.py --frames-out FILE writes them),
so two versions of the writer compare on the same input, whatever the machine's load was when they were
recorded. The frames are taken apart inside the timed part (the writer's intake: read_frames), from a pipe
a thread of this process fills (not timed: the recorder's side).

    python bench/profile_recorder.py --bitwig --seconds 4 --slow 20ms --frames-out /tmp/bitwig.frames
    python bench/writer_replay.py /tmp/bitwig.frames
    sudo python bench/profile_recorder.py --bitwig --seconds 8 --sampler ebpf --frames-out /tmp/ebpf.frames
    python bench/writer_replay.py /tmp/ebpf.frames --whole    # every eBPF slot frame sent whole, as before deltas
    python bench/writer_replay.py /tmp/ebpf.frames --per-tick --keep /tmp/a.ssf   # a frame per kernel tick
    python bench/writer_replay.py /tmp/ebpf.frames --paced      # the writer process, fed at the recorder's pace

--paced runs the writer as a recording does (`python -m samplers.writer_process`, the frames on its stdin, nice
10, its frame-drain thread) and hands it each wake-up's frames (those up to an EBPF_TICKS frame: one drain of the
kernel's tick) every --wake-ms: what it costs then includes its wake-ups, as in the recording; its CPU is the
trailer's writer_cpu_ns (from its ready signal to the trailer).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from samplers import frames
from samplers.session import F_SETPIPE_SZ, writer_env
from samplers.writer_process import CaptureSink


def whole(stream: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """The stream with each EBPF_DELTA frame replaced by the EBPF_TICK frame of the slots it stands for, and each
    EBPF_TICKS frame by those of its ticks (one frame per tick, every slot)."""
    import numpy as np

    out = []
    base = np.zeros(0, dtype="<u8")
    for kind, payload in _per_tick(stream):
        if kind == frames.EBPF_TICK:
            tick, layout_id, t_ns, length = frames.EBPF_TICK_HEADER.unpack_from(payload)
            start = frames.EBPF_TICK_HEADER.size
            base = np.frombuffer(payload, dtype="<u8", count=length // 8, offset=start).copy()
        elif kind == frames.EBPF_DELTA:
            tick, layout_id, t_ns, used, _, count = frames.EBPF_DELTA_HEADER.unpack_from(payload)
            start = frames.EBPF_DELTA_HEADER.size
            index = frames.array_at(payload, "<u4", count, start)
            base = base.copy()
            base.reshape(used, 8)[index] = frames.array_at(payload, "<u8", count * 8, start + 4 * count).reshape(-1, 8)
            payload = frames.EBPF_TICK_HEADER.pack(tick, layout_id, t_ns, base.nbytes) + base.tobytes()
            kind = frames.EBPF_TICK
        out.append((kind, payload))
    return out


def _per_tick(stream: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """Each EBPF_TICKS frame as the EBPF_TICK and EBPF_DELTA frames of its ticks."""
    import numpy as np

    out = []
    for kind, payload in stream:
        if kind != frames.EBPF_TICKS:
            out.append((kind, payload))
            continue
        drain = frames.decode_ebpf_ticks(payload)
        base_tick, index, words, counts = drain.base_tick, drain.index, drain.words, drain.counts
        ends = np.cumsum(counts).tolist()
        columns = zip(drain.ticks, drain.layouts, drain.times, drain.useds, strict=True)
        for i, (tick, layout_id, t_ns, used) in enumerate(columns):
            part = slice(ends[i] - counts[i], ends[i])
            if drain.wholes[i]:
                header = frames.EBPF_TICK_HEADER.pack(tick, layout_id, t_ns, 64 * counts[i])
                out.append((frames.EBPF_TICK, header + words[part].tobytes()))
            else:
                header = frames.EBPF_DELTA_HEADER.pack(tick, layout_id, t_ns, used, base_tick, counts[i])
                out.append((frames.EBPF_DELTA, header + index[part].tobytes() + words[part].tobytes()))
            base_tick = tick
    return out


def wake_parts(stream: list[tuple[int, bytes]]) -> list[bytes]:
    """The stream's frames, encoded, in the recorder's wake-ups: each part ends with an EBPF_TICKS frame (one
    drain of the kernel's tick)."""
    wakes: list[bytes] = []
    part: list[bytes] = []
    for kind, payload in stream:
        part.append(frames.encode(kind, payload))
        if kind == frames.EBPF_TICKS:
            wakes.append(b"".join(part))
            part = []
    wakes.append(b"".join(part))
    return wakes


def feed_paced(argv: list[str], wakes: list[bytes], wake_ns: int) -> dict:
    """Runs `argv`, a writer ("R" on its stdout when ready, a JSON report there at the end), as a recording
    starts one (this checkout's code, its memory pool, the session's pipe size), handing it one wake-up's
    frames every `wake_ns`; its report."""
    writer = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=writer_env())
    assert writer.stdin is not None and writer.stdout is not None
    fcntl.fcntl(writer.stdin.fileno(), F_SETPIPE_SZ, 1 << 20)  # as the session sets it
    if writer.stdout.read(1) != b"R":
        raise SystemExit(f"{' '.join(argv)}: the writer did not start")
    start = time.monotonic_ns()
    for i, data in enumerate(wakes):
        time.sleep(max(0, start + i * wake_ns - time.monotonic_ns()) / 1e9)
        frames.write_all(writer.stdin.fileno(), data)
    writer.stdin.close()
    report = json.loads(writer.stdout.read() or b"{}")
    writer.wait()
    return report


def paced(stream: list[tuple[int, bytes]], wake_ns: int, output: Path) -> dict:
    """The writer process fed `stream` one recorder wake-up every `wake_ns`; its final report (sink.final)."""
    return feed_paced([sys.executable, "-m", "samplers.writer_process", str(output)], wake_parts(stream), wake_ns)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("frames", type=Path)
    ap.add_argument("--runs", type=int, default=3, help="replays; the least CPU is printed (and each)")
    ap.add_argument("--whole", action="store_true", help="eBPF slot frames whole (EBPF_TICK), no deltas")
    ap.add_argument("--per-tick", action="store_true", help="the kernel's ticks one frame each, not one per drain")
    ap.add_argument("--keep", type=Path, help="keep the last replay's capture here (to compare the rows)")
    ap.add_argument("--paced", action="store_true", help="the writer process, a wake-up's frames every --wake-ms")
    ap.add_argument("--wake-ms", type=float, default=20.0, help="the recorder's wake-ups under the kernel's tick")
    args = ap.parse_args()
    with open(args.frames, "rb") as fh:
        parsed = list(frames.read_frames(fh.fileno()))
    if args.whole:
        parsed = whole(parsed)
    elif args.per_tick:
        parsed = _per_tick(parsed)
    if args.paced:
        cpu = []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "replay.ssf"
                report = paced(parsed, int(args.wake_ms * 1e6), out)
                # During the stream and after it: the eBPF sampler's rows are made after the trailer
                # (samplers/ebpf/deferred_rows.py); this bench is about their making, so both count.
                cpu.append(report["writer_cpu_ns"] + (report.get("writer_decode_cpu_ns") or 0))
                if args.keep is not None:
                    os.replace(out, args.keep)
        rows = report["rows"].get("samples", 0)
        print(
            f"paced, a wake-up every {args.wake_ms:g} ms, {rows} thread-samples: writer process CPU "
            f"{min(cpu) / 1e6:.0f} ms (runs {', '.join(f'{c / 1e6:.0f}' for c in cpu)} ms)"
        )
        return
    data = b"".join(frames.encode(kind, payload) for kind, payload in parsed)
    cpu = []
    rows = 0
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            sink = CaptureSink(str(Path(tmp) / "replay.ssf"))
            read_end, write_end = os.pipe()

            def feed(fd: int = write_end) -> None:
                frames.write_all(fd, data)
                os.close(fd)

            feeder = threading.Thread(target=feed, daemon=True)
            feeder.start()
            c0 = time.thread_time_ns()  # this thread's: the writer's work, not the feeder's
            for kind, payload in frames.read_frames(read_end):
                sink.handle(kind, payload)
            sink.close()
            cpu.append(time.thread_time_ns() - c0)
            if args.keep is not None:
                os.replace(Path(tmp) / "replay.ssf", args.keep)
            feeder.join()
            os.close(read_end)
            assert sink.writer is not None
            rows = sink.writer.rows_written.get("samples", 0)
    print(
        f"{len(data) / 1e6:.1f} MB of frames, {rows} thread-samples: "
        f"writer CPU {min(cpu) / 1e6:.0f} ms "
        f"({min(cpu) / max(rows, 1):.0f} ns per thread-sample; runs {', '.join(f'{c / 1e6:.0f}' for c in cpu)} ms)"
    )


if __name__ == "__main__":
    main()
