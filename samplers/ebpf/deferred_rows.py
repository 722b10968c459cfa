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

What it costs: the file (about 0.23 MB a second on the Bitwig shape) and, after the recording, the making of
the rows (20-30 ms of CPU per second recorded there), in the trailer as `writer_decode_cpu_ns`. A writer
killed during the recording leaves a capture without the eBPF sampler's rows (the file has no name).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from typing import Any

from samplers import frames


class DeferredRows:
    """The frames of the eBPF sampler (its ticks, stat lines, the layouts they name) and the thread rows between
    them, as they came; the names and policies known when keeping began (the rows' making compares the stat
    lines' with them, as the thread rows came)."""

    def __init__(self, meta: dict[str, Any], output: str, comm_of: dict[int, str], policy_of: dict[int, Any]) -> None:
        self.meta = meta  # the recording's `ebpf_sampler` metadata: the rows are made by rows_for(meta)
        self.comm_of = dict(comm_of)
        self.policy_of = dict(policy_of)
        directory = os.path.dirname(os.path.abspath(output))
        # Beside the capture, on its file system (a tmpfs /tmp would hold a long recording in memory). Open for
        # the whole recording, closed by close() (the writer's abandon() on an error).
        self.file = tempfile.TemporaryFile(dir=directory, prefix=".ebpf-frames-")  # noqa: SIM115
        self.bytes = 0

    def keep(self, kind: int, payload: bytes) -> None:
        self.file.write(frames.FRAME.pack(kind, len(payload)))
        self.file.write(payload)
        self.bytes += frames.FRAME.size + len(payload)

    def frames(self) -> Iterator[tuple[int, bytes]]:
        """The frames kept, in the order they came (call once, after the last keep)."""
        self.file.flush()
        self.file.seek(0)
        yield from frames.read_frames(self.file.fileno())

    def close(self) -> None:
        self.file.close()
