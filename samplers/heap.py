"""glibc's heap kept rather than handed back (mallopt(3)), for the processes that allocate and free the same
blocks over and over: the writer (a chunk's columns) and the recorder (a tick's frame, 100+ KB on the Bitwig
shape). Handed back, each block over the mmap threshold is mapped, faulted in zeroed and unmapped anew: that was
17 % of the writer's CPU (samplers/writer_process.py _hold_freed_memory); in the recorder its share was not
measured apart. The memory stays at its peak."""

from __future__ import annotations

import contextlib
import ctypes

# mallopt(3): below M_MMAP_THRESHOLD a block comes from the heap, and the heap's free top is handed back once it
# exceeds M_TRIM_THRESHOLD.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
HELD_MMAP_BELOW = 64 << 20
HELD_TRIM_ABOVE = 256 << 20


def hold_freed_heap() -> None:
    with contextlib.suppress(OSError, AttributeError):  # not glibc (musl has no mallopt): the defaults
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, HELD_MMAP_BELOW)
        libc.mallopt(_M_TRIM_THRESHOLD, HELD_TRIM_ABOVE)
