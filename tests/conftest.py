"""Shared fixtures. Tests that need root or an apt package run in CI (root); they skip only where the
facility cannot exist, and say why."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # Children run this checkout's code, not whatever copy is installed.
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


@pytest.fixture
def run_module() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run `python -m MODULE ARGS...` from this checkout and capture its output."""

    def run(
        module: str, *args: str, timeout: float = 120, check: bool = False, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", module, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_env(),
            cwd=REPO,
            check=check,
            input=input,
        )

    return run
