"""The eBPF sampler's frames kept as they came during a recording, made into `samples` once it has ended.

Making the rows (`EbpfRows.take`, samplers/ebpf/sampler_rows.py) was about half of the writer's CPU on the
Bitwig-shaped target, and the writer the largest part of the whole tool (bench/raw_store_cost.py: the same
frames fed at the recorder's pace cost the writer 5.0-6.0 % of a core, a process that only stores them
1.5-1.7 %). So the writer of a plain recording (not a flight ring: its watcher reads each segment's samples
while the recording goes on) appends the frames to a file with no name beside the capture (O_TMPFILE where
the file system has it: nothing left behind, nothing to follow), and after the trailer feeds them, in the
order they came, to the same `EbpfRows` with the same chunk ends (a chunk's rows end at FLUSH_ROWS rows or
FLUSH_EVERY_NS of tick time, as they did when made live): the rows stored are those made live
(tests/test_ebpf_deferred.py). The stat lines are also read as they come (`take_slow`): thread renames
and policy changes are derived in order with the thread rows, as before. DESIGN.md "The eBPF sampler".

What it costs: the file (about 0.23 MB a second on the Bitwig shape) and, after the recording, the making of
the rows (about 20 ms of CPU per second recorded there), in the trailer as `writer_decode_cpu_ns`. A writer
killed during the recording leaves a capture without the eBPF sampler's rows (the file has no name).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np

from samplers import frames
from samplers.ebpf.sampler_rows import slow_rows


class DeferredRows:
    """The frames of the eBPF sampler (its ticks, stat lines and the layouts they name) as they came."""

    def __init__(self, meta: dict[str, Any], output: str) -> None:
        self.meta = meta  # the recording's `ebpf_sampler` metadata: the rows are made by rows_for(meta)
        directory = os.path.dirname(os.path.abspath(output))
        # Beside the capture, on its file system (a tmpfs /tmp would hold a long recording in memory).
        # Open for the whole recording, closed by close() (the writer's abandon() on an error).
        self.file = tempfile.TemporaryFile(dir=directory, prefix=".ebpf-frames-")  # noqa: SIM115
        self.layouts: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # as EbpfRows keeps them
        self.stats: list[tuple[int, bytes]] = []  # STAT_SLOW payloads not yet read by take_slow, with their tick
        self.bytes = 0

    def keep(self, kind: int, payload: bytes) -> None:
        self.file.write(frames.FRAME.pack(kind, len(payload)))
        self.file.write(payload)
        self.bytes += frames.FRAME.size + len(payload)

    def layout(self, spec: dict[str, Any], payload: bytes) -> None:
        self.keep(frames.LAYOUT, payload)
        self.layouts[int(spec["id"])] = (
            np.asarray(spec["tids"], dtype=np.int64),
            np.asarray(spec["pids"], dtype=np.int64),
            np.asarray(spec["slots"], dtype=np.int64),
        )

    def stat(self, payload: bytes) -> None:
        self.keep(frames.STAT_SLOW, payload)
        self.stats.append((frames.EBPF_TICK_HEADER.unpack_from(payload)[0], payload))

    def take_slow(self) -> dict[str, Any] | None:
        """The stat lines since the last call as rows (sampler_rows.slow_rows), for the thread changes. Each at
        the tick its frame names, not the one EbpfRows places it at (the first taken at or after its read
        time): both grow in the order the lines were read, and only that order and the read time are used."""
        stats, self.stats = self.stats, []
        return slow_rows(stats, self.layouts)

    def frames(self) -> Iterator[tuple[int, bytes]]:
        """The frames kept, in the order they came (call once, after the last keep)."""
        self.file.flush()
        self.file.seek(0)
        yield from frames.read_frames(self.file.fileno())

    def close(self) -> None:
        self.file.close()
