"""The environment of the toolkit's own child processes (samplers.package_env): the writer (session.writer_env),
the engine sources, the flight watcher and the lab's workload."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from samplers import package_env
from samplers.session import writer_env
from tests.helpers import REPO, child_env, stop_process


def test_a_child_runs_this_checkout() -> None:
    env = package_env({"PYTHONPATH": "/elsewhere"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(REPO), "/elsewhere"]


def test_a_child_starts_no_blas_threads_unless_the_user_asked() -> None:
    """numpy's OpenBLAS starts a thread a core that spins after the import (60-150 ms of CPU at each start of
    the writer on a 2-core machine); no child multiplies matrices. A user's own setting is kept."""
    assert package_env({})["OPENBLAS_NUM_THREADS"] == "1"
    assert package_env({"OPENBLAS_NUM_THREADS": "4"})["OPENBLAS_NUM_THREADS"] == "4"
    # As a child sees it: one thread after numpy's import, where OpenBLAS would add one a core beyond the first.
    code = "import os, numpy; print(len(os.listdir('/proc/self/task')))"
    env = package_env({k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"})
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"


def test_the_writer_s_arrow_allocations_all_go_to_the_system_allocator(tmp_path: Path) -> None:
    """The writer moves pyarrow's pool to the system allocator (_hold_freed_memory), but the C++ side's own
    allocations (the IPC writer's compressed buffers) follow ARROW_DEFAULT_MEMORY_POOL: mimalloc by default,
    whose purged huge pages were faulted in again, zeroed, at each chunk. A recording's writer has it set."""
    from tests.recording import catch_load_argv, writer_of

    assert writer_env()["ARROW_DEFAULT_MEMORY_POOL"] == "system"
    assert writer_env()["PYTHONPATH"].split(os.pathsep)[0] == str(REPO)
    target = subprocess.Popen(["sleep", "30"])
    recorder = subprocess.Popen(
        catch_load_argv("-q", "-p", str(target.pid), "-d", "20s", "-o", str(tmp_path / "x.ssf")),
        env=child_env(),
    )
    try:
        environ = Path(f"/proc/{writer_of(recorder, timeout_s=30)}/environ").read_bytes()
        assert b"\0ARROW_DEFAULT_MEMORY_POOL=system\0" in b"\0" + environ, "not set in the writer's environment"
        # What the variable does: Arrow's C++ default pool in a child started with it.
        code = "import pyarrow; print(pyarrow.default_memory_pool().backend_name)"
        backend = subprocess.run([sys.executable, "-c", code], env=writer_env(), capture_output=True, text=True)
        assert backend.stdout.strip() == "system", backend.stderr
    finally:
        stop_process(recorder)
        target.kill()
        target.wait()
