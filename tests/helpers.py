"""Helpers the tests share: this checkout's paths, the environment for child processes, canned /proc text,
and the facility checks behind the needs_root / needs_bcc markers (tests/conftest.py applies them)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
GOLDEN = Path(__file__).resolve().parent / "golden"

# /proc/<pid>/task/<tid>/sched as kernels print it (tests/data/): 6.18 without CONFIG_SCHEDSTATS, and 5.10
# with schedstats on (the "se.statistics." prefix, float-ms fields).
SCHED_618 = (DATA / "sched_6.18.txt").read_bytes()
SCHED_SCHEDSTATS_5_10 = (DATA / "sched_schedstats_5.10.txt").read_bytes()


def child_env(*first: Path | str, base: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The one environment for a child process of the suite: `base` (default: ours) with this checkout
    prepended to PYTHONPATH, so the child runs this checkout's code, not whatever copy is installed;
    `first` paths go before it (a stand-in module a test plants); `extra` variables are set on top."""
    env = dict(os.environ if base is None else base)
    paths = [str(path) for path in first] + [str(REPO)]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(extra)
    return env


NOBODY = 65534


@functools.cache
def unprivileged() -> tuple[tuple[str, ...], int]:
    """A setpriv prefix that runs this Python without root's power over files, and the uid it runs as:
    an unprivileged user (65534) when that user can run this Python; else uid 0 without any capability
    (CI's Python lives under /root, closed to other users), which the kernel checks against a file's
    owner and mode like any user. setpriv keeps root's capabilities up to its own exec, so the probe
    execs a second time, as the toolkit does when it starts its writer."""
    as_nobody = ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups")
    second_exec = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'import pyarrow, click'], check=True)"
    probe = subprocess.run(
        [*as_nobody, sys.executable, "-c", second_exec], capture_output=True, env=child_env(), cwd="/", check=False
    )
    if probe.returncode == 0:
        return as_nobody, NOBODY
    return ("setpriv", "--inh-caps=-all", "--bounding-set=-all"), 0


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


def process_stat(pid: int) -> Any:
    """The parsed /proc/PID/stat (samplers.procfs.StatLine), or None once the process has gone."""
    from samplers.procfs import parse_stat

    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return parse_stat(fh.read())
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None


def children(pid: int, recursive: bool = False) -> list[int]:
    """The live child processes of `pid` (and theirs, with `recursive`), read from /proc."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := process_stat(int(entry))) is not None:
            parents[int(entry)] = stat.ppid
    found: list[int] = []
    wanted = [pid]
    while wanted:
        parent = wanted.pop()
        kids = sorted(child for child, ppid in parents.items() if ppid == parent)
        found += kids
        if recursive:
            wanted += kids
    return found


def running(pid: int) -> bool:
    """True while the process exists and is not a zombie (dead, not yet reaped)."""
    stat = process_stat(pid)
    return stat is not None and stat.state not in ("Z", "X")


def one_error_line(stderr: str, *words: str) -> str:
    """The one `error:` line a failing command printed (no traceback), holding every word given."""
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, stderr
    for word in words:
        assert word in errors[0], errors[0]
    return errors[0]


# The share of the machine's CPU time the host may steal over a probe for the machine to count as quiet.
# This VM's steal comes in bursts at 5-22 % of both vCPUs, mostly of a minute or two but up to 5.5 minutes
# (0.5-1.5 % between them, /proc/stat read every 20 s during CI runs); a recording judged against what it
# injected waits them out.
QUIET_STEAL_SHARE = 0.02
# At most this much waiting for a quiet machine in one test session, all callers together. On a host that
# steals 25-45 % for an hour (vmstat, 2026-12-03: not a burst) every wait ran to its end, 5.5 minutes per
# call, and a suite that took 25 minutes took over 45. Past the budget a wait returns at once: the tests
# after it leave out what the steal disturbed and judge the rest (tests/recording.py).
QUIET_BUDGET_S = 300.0
_quiet_spent_s = 0.0


def steal_share(probe_s: float) -> float:
    """The share of all CPUs' time the hypervisor stole over the next `probe_s` seconds (/proc/stat)."""
    from forensics.lab.linux import machine_steal_ns

    before = machine_steal_ns()
    time.sleep(probe_s)
    return (machine_steal_ns() - before) / (probe_s * 1e9 * (os.cpu_count() or 1))


def wait_for_quiet_machine(max_wait_s: float = 330.0, probe_s: float = 2.0) -> float:
    """Wait, up to `max_wait_s` and what is left of the session's QUIET_BUDGET_S, until the host steals less
    than QUIET_STEAL_SHARE over a probe; returns the last probe's share. Never fails: the test that follows
    measures the steal over what it judges."""
    global _quiet_spent_s
    started = time.monotonic()
    deadline = started + max(0.0, min(max_wait_s, QUIET_BUDGET_S - _quiet_spent_s))
    share = steal_share(probe_s)
    while share >= QUIET_STEAL_SHARE and time.monotonic() < deadline:
        print(f"hypervisor steal {share:.1%} of the machine: waiting for it to pass", flush=True)
        share = steal_share(probe_s)
    _quiet_spent_s += time.monotonic() - started
    if share >= QUIET_STEAL_SHARE:
        print(f"hypervisor steal {share:.1%}: going on ({_quiet_spent_s:.0f} s of waiting spent this session)")
    return share


def assert_matches_golden(output: str, name: str) -> None:
    """`output` equals tests/golden/NAME; FORENSICS_REGOLD=1 writes it there first (to regenerate)."""
    expected = GOLDEN / name
    if os.environ.get("FORENSICS_REGOLD"):
        expected.write_text(output)
    assert output == expected.read_text()
