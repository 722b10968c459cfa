"""Running catch-load from tests: this checkout's code, in a child process, as a user would; and the
checks the lab recordings share."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import forensics
from tests.helpers import REPO, child_env, wait_for_quiet_machine

WORKLOAD = str(REPO / "tests" / "workloads" / "known_work.py")


def catch_load_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "forensics.cli.catch_load", *args]


def start_catch_load(*args: str, **popen: Any) -> subprocess.Popen[str]:
    """catch-load ARGS in the background (stdout/stderr piped as text unless given)."""
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    popen.setdefault("text", True)
    return subprocess.Popen(catch_load_argv(*args), env=child_env(), cwd=REPO, **popen)


def record_workload(
    tmp_path: Path, *catch_args: str, workload_args: tuple[str, ...] = ()
) -> tuple[forensics.Capture, dict[str, Any], subprocess.CompletedProcess[str]]:
    """Record tests/workloads/known_work.py to its end; return the capture, its own report, the run."""
    out = tmp_path / "rec.ssf"
    report = tmp_path / "report.json"
    result = subprocess.run(
        catch_load_argv(
            "-o", str(out), *catch_args, "--", sys.executable, WORKLOAD, "--report", str(report), *workload_args
        ),
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    return forensics.load(out), json.loads(report.read_text()), result


def record_lab_capture(
    out: Path, *args: str, attempts: int = 3, max_not_as_injected: float = 0.3, timeout: float = 300
) -> forensics.Capture:
    """record_capture of a lab run, again (up to `attempts` times, each to a file of its own) while the
    lab's own record says the machine kept it from making more than `max_not_as_injected` of some cause's
    episodes (hypervisor steal, a disk too fast to wait for: analyses.truth.as_injected). The accuracy
    checks need episodes that were what their cause says; whether they were is measured by the lab, not
    by the verdicts, and each attempt's figures print. Each attempt first waits out a burst of steal."""
    import pandas as pd

    from analyses.truth import as_injected

    cap = None
    for attempt in range(1, attempts + 1):
        path = out if attempt == 1 else out.with_name(f"{out.stem}-{attempt}{out.suffix}")
        wait_for_quiet_machine()
        cap = record_capture(path, *args, timeout=timeout)
        truth = cap.truth
        if truth.empty:
            return cap
        share = pd.Series(~as_injected(truth)).groupby(truth["cause"].to_numpy()).mean()
        print(f"{path.name}: share of episodes not as injected per cause {share.round(2).to_dict()}")
        if share.max() <= max_not_as_injected:
            return cap
    assert cap is not None
    return cap


def record_capture(out: Path, *args: str, timeout: float = 300) -> forensics.Capture:
    """`catch-load -q -o OUT ARGS` to its end (ARGS: catch-load's options, then e.g. --lab and the lab's)."""
    result = subprocess.run(
        catch_load_argv("-q", "-o", str(out), *args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_env(),
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return forensics.load(out)


def assert_verdicts_only_on_late_callbacks(cap: forensics.Capture) -> None:
    """A lab run without episodes: every verdict on lab-audio sits on a callback the lab logged as late
    (analyses.truth.late_cycles: a real stall of the machine, which must be reported), and there are no
    more verdicts than such callbacks (at least one allowed)."""
    from analyses.rules import LAB_INTERVAL_NS
    from analyses.stalls import find_stalls
    from analyses.truth import late_cycles, steal_around, within_log

    audio = cap.cycles["tid"].iloc[0]
    stalls = find_stalls(cap)
    stalls = stalls[stalls["tid"] == audio]
    stalls = stalls[within_log(stalls, cap.cycles)]  # not lab-audio's start-up or its exit after the last callback
    late = late_cycles(cap.cycles, interval_ns=cap.interval_ns or LAB_INTERVAL_NS)
    stolen = steal_around(cap.system, stalls)  # the host took a vCPU meanwhile: the machine's stall
    for episode, machine in zip(stalls.itertuples(index=False), stolen, strict=True):
        near = (late["start_ns"] < episode.end_ns + 6_000_000) & (late["end_ns"] > episode.start_ns - 2_000_000)
        assert near.any() or machine, f"verdict {episode.verdict} at {episode.start_ns} on a callback logged on time"
    assert len(stalls) - int(stolen.sum()) <= max(1, len(late))
