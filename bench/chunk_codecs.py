"""A table chunk's encoding, Parquet (capture format versions 1 and 2) against Arrow IPC (version 3): the CPU
to encode and to read back, and the bytes, on the same tables.

The tables are the chunks of the captures given, or those the writer makes of a recorded frame stream
(bench/profile_recorder.py --frames-out FILE writes one; replayed through CaptureSink, as
bench/writer_replay.py does). CPU is the process's (Arrow may use threads), the least of --runs passes.

    python bench/chunk_codecs.py captures/*.ssf
    sudo python bench/profile_recorder.py --bitwig --seconds 8 --sampler ebpf --frames-out /tmp/ebpf.frames
    python bench/chunk_codecs.py --frames /tmp/ebpf.frames

On the 8 s eBPF Bitwig-shaped stream (2026-12-06, quiet machine; 58 chunks, 234 369 rows): Parquet 55 ms to
encode (40 ms of it with compression off: the encoding itself), 27 ms to read, 1.38 MB; Arrow IPC with zstd 3
27 ms, 13 ms, 1.17 MB; with zstd 1 26 ms, 15 ms, 1.31 MB; with lz4 9 ms, 7 ms, 1.95 MB. On the chunks of
captures/ (854 small chunks, 452 453 rows): Parquet 386 ms, 269 ms, 4.31 MB; Arrow zstd 3 213 ms, 133 ms,
4.81 MB (11 % more bytes where chunks are small, the schema being stored in each).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
import pyarrow.ipc as ipc

from capture.chunks import encode_chunk, parquet_chunk, read_chunk_columns


def _ipc(table: pa.Table, codec: str, level: int | None) -> bytes:
    sink = pa.BufferOutputStream()
    options = ipc.IpcWriteOptions(compression=pa.Codec(codec, level), use_threads=False)
    with ipc.new_file(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


CODECS = {
    "parquet (v2)": parquet_chunk,
    "arrow zstd 3 (v3)": encode_chunk,
    "arrow zstd 1": lambda t: _ipc(t, "zstd", 1),
    "arrow lz4": lambda t: _ipc(t, "lz4_frame", None),
}


def tables_of_captures(paths: list[Path]) -> list[tuple[str, pa.Table]]:
    import forensics

    out = []
    for path in paths:
        capture = forensics.load(path)
        for name in capture.table_names:
            chunks = capture.arrow_chunks(name)
            out += [(name, table) for _, table in chunks or ()]
    return out


def tables_of_frames(path: Path) -> list[tuple[str, pa.Table]]:
    import capture.format as capture_format
    from samplers import frames
    from samplers.writer_process import CaptureSink

    with open(path, "rb") as fh:
        parsed = list(frames.read_frames(fh.fileno()))
    out: list[tuple[str, pa.Table]] = []
    real = capture_format.encode_chunk

    def keep(table: pa.Table) -> bytes:
        out.append(("", table))
        return real(table)

    capture_format.encode_chunk = keep  # type: ignore[assignment]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sink = CaptureSink(str(Path(tmp) / "replay.ssf"))
            for kind, payload in parsed:
                sink.handle(kind, payload)
            sink.close()
    finally:
        capture_format.encode_chunk = real  # type: ignore[assignment]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("captures", nargs="*", type=Path)
    ap.add_argument("--frames", type=Path, help="a frame stream (bench/profile_recorder.py --frames-out)")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    if args.frames is None and not args.captures:
        ap.error("give captures or --frames FILE")
    tables = tables_of_frames(args.frames) if args.frames else tables_of_captures(args.captures)
    rows = sum(t.num_rows for _, t in tables)
    print(f"{len(tables)} chunks, {rows} rows")
    print(f"{'codec':20s} {'encode ms':>10s} {'read ms':>8s} {'MB':>7s}")
    for name, encode in CODECS.items():
        best_encode = best_read = float("inf")
        for _ in range(args.runs):
            t0 = time.process_time_ns()
            encoded = [encode(table) for _, table in tables]
            t1 = time.process_time_ns()
            for data in encoded:
                read_chunk_columns(data)
            t2 = time.process_time_ns()
            best_encode, best_read = min(best_encode, t1 - t0), min(best_read, t2 - t1)
        size = sum(len(data) for data in encoded)
        print(f"{name:20s} {best_encode / 1e6:10.1f} {best_read / 1e6:8.1f} {size / 1e6:7.2f}")


if __name__ == "__main__":
    main()
