"""Helpers the tests share: this checkout's paths, the environment for child processes, canned /proc text,
and the facility checks behind the needs_root / needs_bcc markers (tests/conftest.py applies them)."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"

# /proc/<pid>/task/<tid>/sched as kernels print it (tests/data/): 6.18 without CONFIG_SCHEDSTATS, and 5.10
# with schedstats on (the "se.statistics." prefix, float-ms fields).
SCHED_618 = (DATA / "sched_6.18.txt").read_bytes()
SCHED_SCHEDSTATS_5_10 = (DATA / "sched_schedstats_5.10.txt").read_bytes()


def child_env() -> dict[str, str]:
    """The environment for a child process: it runs this checkout's code, not whatever copy is installed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def root_missing() -> str | None:
    """Why a test that needs root cannot run here (None: it can)."""
    return None if os.geteuid() == 0 else "needs root (CI runs as root)"


@functools.cache
def bcc_missing() -> str | None:
    """Why a test that needs BCC cannot run here (None: it can)."""
    from samplers.ebpf.bcc_import import BccUnavailable, import_bcc

    try:
        import_bcc()
    except BccUnavailable as err:
        return f"BCC is not installed ({err}); .ci/run installs python3-bpfcc"
    return None


def reap(process: subprocess.Popen[Any], timeout_s: float = 5.0) -> None:
    """Wait for a process already asked to end; kill it if it has not within timeout_s."""
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def stop_process(process: subprocess.Popen[Any], timeout_s: float = 5.0) -> None:
    """SIGTERM a process the test started (if it still runs), then reap it."""
    if process.poll() is None:
        process.terminate()
        reap(process, timeout_s)
