"""Shared fixtures. Tests that need root or an apt package run in CI (root); they skip only where the
facility cannot exist, and say why."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO, bcc_missing, child_env, root_missing


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
            env=child_env(),
            cwd=REPO,
            check=check,
            input=input,
        )

    return run


# In CI (CI=true: root, every apt package installed by .ci/run) a skipped test means a facility the
# suite needs is missing: that is a failure, not a pass. Tests whose skip depends on the machine's
# state rather than on a facility (e.g. a sysctl already set by someone else) say so with
# @pytest.mark.may_skip.
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "may_skip: a skip here reflects machine state, not a missing facility")


# @pytest.mark.needs_root and @pytest.mark.needs_bcc: the one way a test says it needs root or BCC. It
# skips (with the reason) where the facility is missing; in CI such a skip fails (above).
def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker, missing in (("needs_root", root_missing), ("needs_bcc", bcc_missing)):
        if item.get_closest_marker(marker) is not None:
            reason = missing()
            if reason is not None:
                pytest.skip(reason)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    # An expected failure (xfail, with its reason in the test) is reported as skipped too: it is not a
    # missing facility, so it stays what it is.
    expected_failure = hasattr(report, "wasxfail")
    if (
        os.environ.get("CI") == "true"
        and report.skipped
        and not expected_failure
        and item.get_closest_marker("may_skip") is None
    ):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where every facility must exist: {reason}"


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A temporary directory other users can traverse (pytest's own is closed to them); what a test made
    unwritable inside it is opened again to be removed."""
    path = Path(tempfile.mkdtemp(prefix="forensics-open-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for sub in path.rglob("*"):
            if sub.is_dir() and not sub.is_symlink():
                sub.chmod(0o755)
        shutil.rmtree(path, ignore_errors=True)
