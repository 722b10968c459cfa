"""The environment of the toolkit's own child processes (samplers.package_env): the writer, the engine sources,
the flight watcher and the lab's workload."""

from __future__ import annotations

import os
import subprocess
import sys

from samplers import package_env
from tests.helpers import REPO


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
