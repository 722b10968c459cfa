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
    _set_lane_niceness(item)
    for marker, missing in (("needs_root", root_missing), ("needs_bcc", bcc_missing)):
        if item.get_closest_marker(marker) is not None:
            reason = missing()
            if reason is not None:
                pytest.skip(reason)


# Lanes (pytest-xdist, `-n 3` in pyproject.toml, scheduled below). The tests of these modules record a
# live target (the lab, jackd, PipeWire, eBPF, signals to a recorder) or change the machine's settings
# (sysctls, delay accounting): they run one after the other in one lane ("live"), so that no two
# recordings share the CPUs and no setting changes under another test. Every other test is a check of
# the code (canned /proc text, synthetic timelines, stored captures) whose answer does not depend on the
# machine: those share the other lanes at nice 10 (as root), so that beside a recording they take the CPU
# the recorder leaves, as the README's test under load does with stress-ng. Two check lanes, not one:
# the recordings leave a third of the 2 cores idle (measured: 1370 CPU-s in 860 s with one check lane,
# which then took as long as the live lane).
LIVE_MODULES = frozenset(
    f"test_{name}"
    for name in (
        "accuracy_lab", "discovery", "doctor", "ebpf_live", "ebpf_sampler", "engine_jack", "engine_sources",
        "exact_accuracy_lab", "flight_lab", "flight_live", "incident_causes_real",
        "incidents_real", "lab", "markers", "output_safety", "package_env", "periods", "pipewire_live", "record_e2e",
        "record_exact", "small_lies", "stop_signals", "sysctl_guard", "taskstats", "tid_reuse", "tiers",
        "writer_errors",
    )
)  # fmt: skip


def _is_live_module(path: str) -> bool:
    return Path(path).stem in LIVE_MODULES


def is_live(item: pytest.Item) -> bool:
    return _is_live_module(str(item.fspath))


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """pytest-xdist's scheduler by scope, with every live module in one scope ("live") and each other
    module a scope of its own (its module-scoped fixtures are then made once). A worker takes one scope
    at a time, and the next one only when it has two tests or fewer left: the live lane runs nothing
    else until its end. (`--dist loadgroup` would do this with marks, but its group names go into
    `item._nodeid`, which pytest 9.2 no longer reads: every test was scheduled on its own.)"""
    from xdist.scheduler import LoadScopeScheduling

    class Lanes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "live" if _is_live_module(module) else module

    return Lanes(config, log)  # type: ignore[arg-type]


_NICE_CHECKS = 10  # the checks' niceness beside a recording (stress-ng at nice 10 in the README's load test)
_NICE_START = os.getpriority(os.PRIO_PROCESS, 0)


def _set_lane_niceness(item: pytest.Item) -> None:
    """A live test (and its module's recordings, made in its setup) runs at the worker's own niceness, a
    check of the code at _NICE_CHECKS: only as root, who may lower it again, and only under xdist, where
    the other lane may be recording."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None or os.geteuid() != 0:
        return
    os.setpriority(os.PRIO_PROCESS, 0, _NICE_START if is_live(item) else max(_NICE_START, _NICE_CHECKS))


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
