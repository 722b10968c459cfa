"""The writer keeps what a chunk frees for the next chunk (samplers/writer_process.py _hold_freed_memory).

Each chunk allocates and frees the same megabytes: numpy's columns (glibc) and Arrow's buffers (its pool).
Handed back to the kernel, every chunk faulted them in again, zeroed: 17 % of the writer's CPU on the Bitwig
shape (perf, bench/writer_replay.py --paced). Run in a child process, so this process keeps its own allocators:
a 40 MB block (over glibc's largest dynamic mmap threshold, 32 MB) allocated, written and freed ten times stays
resident after each free and is reused by the next round, where without the hold each free hands it back.

Resident memory is what is asserted, not page faults: a fault maps a folio of one page or of 512 (a huge page,
when the kernel finds one free), so fault counts depend on the machine's fragmentation. A CI run after a 2 GiB
benchmark counted 486 faults held against 210 handed back: the handed-back blocks got huge pages, the heap did
not. What the hold is for, the block staying mapped from one chunk to the next, shows in the resident size.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import child_env

ROUNDS = 10
BLOCK_BYTES = 40 << 20

CHILD = f"""
import json, os, time
import numpy as np
import pyarrow as pa
from samplers import writer_process
if HOLD:
    writer_process._hold_freed_memory()

PAGE = os.sysconf("SC_PAGE_SIZE")

def resident():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * PAGE

base = resident()
kept, peaks = [], []
for _ in range({ROUNDS}):
    block = np.ones({BLOCK_BYTES} // 8, dtype=np.int64)  # glibc: written through, then freed
    peaks.append(resident() - base)
    del block
    kept.append(resident() - base)
    time.sleep(0.05)
print(json.dumps({{"kept": kept, "peaks": peaks, "pool": pa.default_memory_pool().backend_name}}))
"""


def _rounds(hold: bool) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD.replace("HOLD", str(hold))],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/statm and mallopt: Linux with glibc")
def test_the_writer_keeps_a_chunks_memory_for_the_next_chunk() -> None:
    held, handed_back = _rounds(hold=True), _rounds(hold=False)
    block = BLOCK_BYTES
    # Held: after every free the block is still resident, and the next round reuses it (no round's peak is a
    # second block above the first's).
    assert all(kept >= 0.9 * block for kept in held["kept"]), held  # type: ignore[attr-defined]
    assert max(held["peaks"]) < 1.5 * block, held  # type: ignore[call-overload]
    # Handed back: each free unmaps it.
    assert all(kept < 0.5 * block for kept in handed_back["kept"]), handed_back  # type: ignore[attr-defined]
    # Arrow's buffers come from the same allocator, under the same thresholds.
    assert held["pool"] == "system" and handed_back["pool"] != "system"
