"""What the eBPF sampler's writer would cost if it stored the kernel's slot records as they come (issue 12).

The route left to the 5 % bar (DESIGN.md "The eBPF sampler"): keep the writer from turning slots into rows
during the recording (`EbpfRows.take`, about half of it), store each drain's slot records and stat lines as
they came, and build the rows when the capture is read. Before building that, this measures what it would
save: the same recorded frame stream (bench/profile_recorder.py --frames-out) is fed at the recorder's pace
(one drain every --wake-ms, as bench/writer_replay.py --paced does) to

  writer      the writer process as a recording runs it (`python -m samplers.writer_process`): its trailer's
              writer_cpu_ns, from its ready signal to the trailer
  store-only  a process doing only what that route's writer must: take the frames in the same way (the
              frame-drain thread, a gather every GATHER_S), and every FLUSH_EVERY_NS of ticks write one chunk
              of the slot records (tick, slot, the 8 words; by slot, then tick: the counters of a slot lie
              together) and one of the stat frames' bytes, Arrow IPC with the same zstd as every chunk. Its CPU
              from its ready signal to its end, measured the same way. It leaves out the layouts and the other
              tables (a few frames a second), and it is not a capture: the bytes are for their size only.

Rounds alternate the two, beside the Bitwig-shaped target (bench/bitwig_shape.c) unless --no-target: its
121 SCHED_FIFO threads preempt the writer hundreds of times a second, as in a recording.

    sudo python bench/profile_recorder.py --bitwig --seconds 8 --sampler ebpf --frames-out /tmp/ebpf.frames
    python bench/raw_store_cost.py /tmp/ebpf.frames --rounds 5

On an 8 s stream of that target (2026-12-06, 2-core VM, medians of 5 rounds each): beside the target, the writer
460 and 479 ms (5.8 and 6.0 % of a core), store-only 134 and 136 ms (1.7 %); without it, 396 against 117 ms
(5.0 and 1.5 %). The records take 1.84 MB against the capture's 1.09 MB (the writer stores a thread's row only
where it changed, in columns that compress better). So the route would take about 4 points off the writer,
from the whole tool's 7.7-9.0 % (bench/ebpf_sampler_bench.py, same day): the probes 1.5-1.7 and the recorder
1.9-2.3 are left, with store-only's 1.5-1.7 about 5-5.7 %, at the bar or just above it.

Since then the writer keeps the frames during a plain recording and makes the rows after it
(samplers/ebpf/deferred_rows.py): `writer` is its CPU during the stream, and the rows' making after the
trailer is printed apart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from samplers import frames  # noqa: E402


def store_only(output: str) -> int:
    """The store-only writer: frames on stdin, a JSON report ({"cpu_ns", "bytes"}) on stdout at the end."""
    import contextlib

    import numpy as np
    import pyarrow as pa

    from capture.chunks import encode_chunk
    from samplers.writer_process import FLUSH_EVERY_NS, GATHER_S, _hold_freed_memory

    with contextlib.suppress(OSError):
        os.nice(10)  # as the writer
    _hold_freed_memory()
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    written = 0
    drains: list[frames.EbpfTicks] = []
    stats: list[bytes] = []
    since: int | None = None

    def flush() -> None:
        nonlocal written, since
        if drains:
            ticks = np.repeat(
                np.concatenate([np.asarray(d.ticks, dtype=np.uint32) for d in drains]),
                np.concatenate([np.asarray(d.counts, dtype=np.int64) for d in drains]),
            )
            index = np.concatenate([d.index for d in drains])
            words = np.concatenate([d.words for d in drains])
            order = np.argsort(index, kind="stable")  # by slot, ticks rising within one
            columns = {"tick": ticks[order], "slot": index[order]}
            columns.update({f"w{k}": np.ascontiguousarray(words[order, k]) for k in range(words.shape[1])})
            data = encode_chunk(pa.table(columns))
            os.write(fd, data)
            written += len(data)
        if stats:
            data = encode_chunk(pa.table({"payload": pa.array(stats, pa.binary())}))
            os.write(fd, data)
            written += len(data)
        drains.clear()
        stats.clear()
        since = None

    os.write(sys.stdout.fileno(), b"R")
    cpu_at_ready = time.process_time_ns()
    for kind, payload in frames.read_frames(sys.stdin.fileno(), drain_in_thread=True, gather_s=GATHER_S):
        if kind == frames.EBPF_TICKS:
            drain = frames.decode_ebpf_ticks(payload)
            drains.append(drain)
            if drain.times:
                since = drain.times[0] if since is None else since
                if drain.times[-1] - since >= FLUSH_EVERY_NS:
                    flush()
        elif kind == frames.STAT_SLOW:
            stats.append(payload)
        elif kind == frames.TRAILER:
            break
    flush()
    os.close(fd)
    report = {"cpu_ns": time.process_time_ns() - cpu_at_ready, "bytes": written}
    os.write(sys.stdout.fileno(), json.dumps(report).encode())
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("frames", type=Path, nargs="?")
    ap.add_argument("--rounds", type=int, default=5, help="pairs of runs, alternating; medians are printed")
    ap.add_argument("--wake-ms", type=float, default=125.0, help="the recorder's wake-up under the kernel's tick")
    ap.add_argument("--no-target", action="store_true", help="without the Bitwig-shaped target beside")
    ap.add_argument("--store-only", metavar="OUTPUT", help=argparse.SUPPRESS)  # the child process
    args = ap.parse_args()
    if args.store_only:
        raise SystemExit(store_only(args.store_only))
    if args.frames is None:
        ap.error("give the frames file (bench/profile_recorder.py --frames-out FILE)")
    from writer_replay import feed_paced, wake_parts

    with open(args.frames, "rb") as fh:
        stream = list(frames.read_frames(fh.fileno()))
    wakes = wake_parts(stream)
    if not any(kind == frames.EBPF_TICKS for kind, _ in stream):
        raise SystemExit(f"{args.frames}: no eBPF sampler frames (record with --sampler ebpf)")
    target = None
    if not args.no_target:
        from ebpf_sampler_bench import build

        target = subprocess.Popen([str(build()), "121", "408", "4", "3600"], stdout=subprocess.PIPE, text=True)
        assert target.stdout is not None
        target.stdout.readline()  # "ready N"
    writer_ms: list[float] = []
    store_ms: list[float] = []
    after_ms: list[float] = []  # the writer's CPU after the trailer (the rows made then, deferred_rows.py)
    sizes: dict[str, int] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.rounds):
                out = Path(tmp) / f"writer{i}.ssf"
                report = feed_paced(
                    [sys.executable, "-m", "samplers.writer_process", str(out)], wakes, int(args.wake_ms * 1e6)
                )
                writer_ms.append(report["writer_cpu_ns"] / 1e6)  # during the stream only
                after_ms.append((report.get("writer_decode_cpu_ns") or 0) / 1e6)
                sizes["writer"] = out.stat().st_size
                out.unlink()
                raw = Path(tmp) / f"raw{i}.bin"
                report = feed_paced(
                    [sys.executable, __file__, "--store-only", str(raw)], wakes, int(args.wake_ms * 1e6)
                )
                store_ms.append(report["cpu_ns"] / 1e6)
                sizes["store-only"] = report["bytes"]
                raw.unlink()
    finally:
        if target is not None:
            target.kill()
            target.wait()
    seconds = (stream_seconds := _seconds(stream))
    print(
        f"{args.frames}: {seconds:.1f} s of ticks, a drain every {args.wake_ms:g} ms, {args.rounds} rounds"
        f"{'' if args.no_target else ' beside the Bitwig-shaped target'}"
    )
    for name, runs in (("writer", writer_ms), ("store-only", store_ms)):
        median = statistics.median(runs)
        print(
            f"{name:>10}: median {median:.0f} ms = {100 * median / 1e3 / stream_seconds:.2f} % of a core "
            f"(runs {', '.join(f'{r:.0f}' for r in runs)}), {sizes[name] / 1e6:.2f} MB"
        )
    if any(after_ms):
        after = statistics.median(after_ms)
        print(f"{'':>10}  the writer after the stream's end, making the rows: median {after:.0f} ms")


def _seconds(stream: list[tuple[int, bytes]]) -> float:
    times = [
        t for kind, payload in stream if kind == frames.EBPF_TICKS for t in frames.decode_ebpf_ticks(payload).times
    ]
    return (max(times) - min(times)) / 1e9 if times else 0.0


if __name__ == "__main__":
    main()
