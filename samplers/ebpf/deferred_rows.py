"""The eBPF sampler's frames kept as they came during a recording, made into `samples` once it has ended.

Making the rows (`EbpfRows.take`, samplers/ebpf/sampler_rows.py) was about half of the writer's CPU on the
Bitwig-shaped target, and the writer the largest part of the whole tool (bench/raw_store_cost.py: the same
frames fed at the recorder's pace cost the writer 5.0-6.0 % of a core, a process that only stores them
1.5-1.7 %). So the writer of a plain recording (not a flight ring: its watcher reads each segment's samples
while the recording goes on) appends the frames to a file with no name beside the capture (O_TMPFILE where
the file system has it: nothing left behind, nothing to follow), and after the trailer feeds them, in the
order they came, to the same `EbpfRows` with the same chunk ends (a chunk's rows end at FLUSH_ROWS rows or
FLUSH_EVERY_NS of tick time, as they did when made live). The thread rows are kept among them, so the renames
and policy changes derived from the stat lines at each chunk's end compare with the names and policies known
at that point, as live. The capture holds the tables made live (tests/test_ebpf_deferred.py). DESIGN.md "The
eBPF sampler".

What it costs: the file (2.05 MB a second on the Bitwig shape, 0.29 MB past RAW_BYTES) and, after the
recording, the making of the rows (20-30 ms of CPU per second recorded there), in the trailer as
`writer_decode_cpu_ns`. A writer killed during the recording leaves a capture without the eBPF sampler's rows
(the file has no name).
"""

from __future__ import annotations

import os
import struct
import tempfile
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from samplers import frames

# The frames are kept in blocks of about a flush (a second): 2.05 MB a second as they came on the Bitwig shape,
# 0.29 MB with zstd at level 1 for 0.34 % of a core measured alone (lz4: 0.58 MB, 0.30 %; zstd 3: 0.28 MB,
# 0.42 %; 8 s of frames, bench/profile_recorder.py --frames-out, 2026-12-06), 0.4-0.6 point more of the whole
# tool in a recording (bench/ebpf_sampler_bench.py, four pairs: writer 1.1-1.2 -> 1.6-1.8 %). So the first
# RAW_BYTES are kept as they came (about two minutes of that shape: most recordings around a plugin load), and
# the blocks after those compressed, a 30 min recording keeping ~0.75 GB instead of 3.7.
RAW_BYTES = 256 << 20
_CODEC_LEVEL = 1
_BLOCK = struct.Struct("<II")  # the block's size as it came, then as kept (0: as it came)


class DeferredRows:
    """The frames of the eBPF sampler (its ticks, stat lines, the layouts they name) and the thread rows between
    them, as they came."""

    def __init__(self, meta: dict[str, Any], output: str) -> None:
        self.meta = meta  # the recording's `ebpf_sampler` metadata: the rows are made by rows_for(meta)
        directory = os.path.dirname(os.path.abspath(output))
        # Beside the capture, on its file system (a tmpfs /tmp would hold a long recording in memory). Open for
        # the whole recording, closed by close() (the writer's abandon() on an error).
        self.file = tempfile.TemporaryFile(dir=directory, prefix=".ebpf-frames-")  # noqa: SIM115
        self.codec = pa.Codec("zstd", compression_level=_CODEC_LEVEL)
        self.block: list[bytes] = []  # the frames since the last spill()
        self.bytes = 0  # as they came, and as kept in the file
        self.bytes_kept = 0
        self.blocks = 0

    def keep(self, kind: int, payload: bytes) -> None:
        self.block.append(frames.FRAME.pack(kind, len(payload)))
        self.block.append(payload)
        self.bytes += frames.FRAME.size + len(payload)

    def spill(self) -> None:
        """The frames kept since the last call, to the file as one block, compressed past RAW_BYTES (at each
        writer flush)."""
        if not self.block:
            return
        data = b"".join(self.block)
        self.block = []
        if self.bytes_kept + len(data) <= RAW_BYTES:
            self.file.write(_BLOCK.pack(len(data), 0))
            self.file.write(data)
            self.bytes_kept += _BLOCK.size + len(data)
        else:
            packed = self.codec.compress(data, asbytes=True)
            self.file.write(_BLOCK.pack(len(data), len(packed)))
            self.file.write(packed)
            self.bytes_kept += _BLOCK.size + len(packed)
        self.blocks += 1

    def frames(self) -> Iterator[tuple[int, bytes]]:
        """The frames kept, in the order they came (call once, after the last keep)."""
        self.spill()
        self.file.flush()
        self.file.seek(0)
        while head := self.file.read(_BLOCK.size):
            size, packed_size = _BLOCK.unpack(head)
            if packed_size:
                data = self.codec.decompress(self.file.read(packed_size), decompressed_size=size, asbytes=True)
            else:
                data = self.file.read(size)
            offset = 0
            while offset < len(data):
                kind, length = frames.FRAME.unpack_from(data, offset)
                start = offset + frames.FRAME.size
                yield kind, data[start : start + length]
                offset = start + length

    def close(self) -> None:
        self.file.close()
