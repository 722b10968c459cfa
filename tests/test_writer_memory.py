"""The writer keeps what a chunk frees for the next chunk (samplers/writer_process.py _hold_freed_memory).

Each chunk allocates and frees the same megabytes: numpy's columns (glibc) and Arrow's buffers (its pool).
Handed back to the kernel, every chunk faulted them in again, zeroed: 17 % of the writer's CPU on the Bitwig
shape (perf, bench/writer_replay.py --paced). Run in a child process, so this process keeps its own allocators:
40 MB blocks (over glibc's largest dynamic mmap threshold, 32 MB) allocated, written and freed ten times are
faulted in once, not ten times; Arrow allocates from the same glibc heap.
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
import json, resource, time
import numpy as np
import pyarrow as pa
from samplers import writer_process
if HOLD:
    writer_process._hold_freed_memory()

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

numpy_faults = 0
for _ in range({ROUNDS}):
    before = faults()
    block = np.ones({BLOCK_BYTES} // 8, dtype=np.int64)  # glibc: written through, then freed
    del block
    middle = faults()
    numpy_faults += middle - before
    time.sleep(0.05)
print(json.dumps({{"numpy": numpy_faults, "pool": pa.default_memory_pool().backend_name}}))
"""


def _faults(hold: bool) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD.replace("HOLD", str(hold))],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_minflt and mallopt: Linux with glibc")
def test_the_writer_faults_a_chunks_memory_in_once_not_at_every_chunk() -> None:
    held, handed_back = _faults(hold=True), _faults(hold=False)
    # Without the hold each round faults its block in again (a fault maps a folio of one or more pages, so the
    # counts are compared, not taken as pages): held, the first round or two fault them in and the others reuse
    # them (5 to 10 times fewer faults here).
    assert int(handed_back["numpy"]) > 2 * int(held["numpy"]), (held, handed_back)  # type: ignore[call-overload]
    # Arrow's buffers come from the same allocator, under the same thresholds.
    assert held["pool"] == "system" and handed_back["pool"] != "system"
