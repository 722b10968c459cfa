"""Running catch-load from tests: this checkout's code, in a child process, as a user would; and the
checks the lab recordings share."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import forensics
from tests.helpers import REPO, child_env, wait_for_quiet_machine

WORKLOAD = str(REPO / "tests" / "workloads" / "known_work.py")


def catch_load_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "forensics.cli.catch_load", *args]


def wait_capture_growing(
    path: Path, recorder: subprocess.Popen[str], timeout_s: float, growths: int = 1, poll_s: float = 0.2
) -> None:
    """Until the capture has grown `growths` times after its first bytes (not necessarily in consecutive
    polls: the writer flushes about once a second): the recorder is past its start-up (eBPF compiled and
    attached) and writes what it records. A handshake on what the recorder did, not a guess of how long
    it takes; fails at once if catch-load exits, and after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last, grown = 0, 0
    while time.monotonic() < deadline:
        if recorder.poll() is not None:
            err = recorder.stderr.read() if recorder.stderr else ""
            raise AssertionError(f"catch-load exited early (code {recorder.returncode}): {err}")
        size = path.stat().st_size if path.exists() else 0
        grown += last > 0 and size > last
        last = size
        if grown >= growths:
            return
        time.sleep(poll_s)
    raise AssertionError(f"catch-load did not start recording in {timeout_s:g} s (capture {last} bytes)")


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


# At most this share of a cause's episodes may go unscored in a lab recording: not as injected (the lab's own
# record: hypervisor steal over it, an io episode that stayed on the CPU) or unobservable (a sampler gap
# over it): analyses.truth. Generous on purpose: steal on this VM comes in bursts of 5-22 % of both vCPUs
# for a minute or two (tests/helpers.py), which can take several episodes of a 15 s recording.
MAX_UNSCORED_SHARE = 0.5
# Before the one re-recording, wait this long at most for a burst of steal to pass: the bursts last a
# minute or two, mostly (tests/helpers.py, QUIET_STEAL_SHARE).
QUIET_WAIT_S = 120.0


def unscored_share(cap: forensics.Capture) -> pd.Series:
    """Per cause: the share of the capture's truth episodes not scorable (not as injected, or
    unobservable): analyses.truth.as_injected and analyses.truth.unobservable."""
    from analyses.truth import as_injected, thread_reads, unobservable

    truth = cap.truth
    if truth.empty:
        return pd.Series(dtype=float)
    reads = thread_reads(cap, truth["tid"].unique())
    unscored = ~as_injected(truth) | unobservable(truth, reads)
    return pd.Series(unscored).groupby(truth["cause"].to_numpy()).mean()


def record_lab_capture(
    out: Path, *args: str, judged: tuple[str, ...] | None = None, timeout: float = 300
) -> forensics.Capture:
    """record_capture of a lab run; once more, after waiting up to QUIET_WAIT_S for a burst of steal to
    pass, when the machine kept more than MAX_UNSCORED_SHARE of some cause's episodes from happening or
    from being seen (unscored_share); `judged`: the causes the caller checks (None: all; a cause it only
    prints may be mostly unscorable). The checks score only the episodes the capture shows happened, and
    print how many they left out; a second recording only saves a run whose first one had nothing left
    to judge."""
    cap = record_capture(out, *args, timeout=timeout)
    share = unscored_share(cap)
    print(f"{out.name}: share of episodes not scorable per cause {share.round(2).to_dict()}")
    if judged is not None:
        share = share.reindex(list(judged)).dropna()
    if share.empty or share.max() <= MAX_UNSCORED_SHARE:
        return cap
    wait_for_quiet_machine(max_wait_s=QUIET_WAIT_S)
    again = out.with_name(f"{out.stem}-2{out.suffix}")
    cap = record_capture(again, *args, timeout=timeout)
    print(f"{again.name}: share of episodes not scorable per cause {unscored_share(cap).round(2).to_dict()}")
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


def _the_machines(stalls: pd.DataFrame) -> np.ndarray:
    """Per stall episode, whether its verdict itself says the time was the machine's: an exact episode
    whose on-CPU time by the switch record the thread's own clock did not count (uncounted_ns: steal,
    interrupts; analyses.exact_stalls) is most of its stall. Its verdict is then `unknown` with that
    evidence (analyses.evidence), which is what happened, not a false alarm."""
    if "uncounted_ns" not in stalls or stalls.empty:
        return np.zeros(len(stalls), dtype=bool)
    uncounted = pd.to_numeric(stalls["uncounted_ns"], errors="coerce").fillna(0).to_numpy(np.float64)
    stall = pd.to_numeric(stalls["stall_ns"], errors="coerce").fillna(0).to_numpy(np.float64)
    return (uncounted > 0) & (uncounted >= 0.5 * stall)


def _around(cap: forensics.Capture, tid: int, start_ns: int, end_ns: int, margin_ns: int = 12_000_000) -> str:
    """The thread's samples and the lab's callbacks around an episode, for the failure message: what a
    reader needs to judge whether the verdict or the truth is wrong (forensics dump shows the same)."""
    samples = cap.samples
    near = samples[(samples["tid"] == tid) & samples["t_ns"].between(start_ns - margin_ns, end_ns + margin_ns)]
    columns = [c for c in ("tick", "t_ns", "run_ns", "wait_ns", "slices", "state", "minflt") if c in near]
    cycles = cap.cycles
    calls = cycles[cycles["end_ns"].between(start_ns - margin_ns, end_ns + margin_ns)]
    return f"samples:\n{near[columns].to_string(index=False)}\ncallbacks:\n{calls.to_string(index=False)}"


def assert_verdicts_only_on_late_callbacks(cap: forensics.Capture) -> None:
    """A lab run without episodes: every verdict on lab-audio sits on a callback the lab logged as late
    (analyses.truth.late_cycles: a real stall of the machine, which must be reported), on hypervisor
    steal, or says itself that the time was the machine's (_the_machines); and there are no more
    verdicts than such callbacks (at least one allowed). A verdict on a callback logged on time fails
    with the thread's samples around it."""
    from analyses.rules import LAB_INTERVAL_NS
    from analyses.stalls import find_stalls
    from analyses.truth import late_cycles, steal_around, within_log

    audio = cap.cycles["tid"].iloc[0]
    stalls = find_stalls(cap)
    stalls = stalls[stalls["tid"] == audio]
    stalls = stalls[within_log(stalls, cap.cycles)]  # not lab-audio's start-up or its exit after the last callback
    late = late_cycles(cap.cycles, interval_ns=cap.interval_ns or LAB_INTERVAL_NS)
    machine = steal_around(cap.system, stalls) | _the_machines(stalls)  # the host took a vCPU meanwhile
    print(f"verdicts on lab-audio: {len(stalls)}; callbacks logged late: {len(late)}; the machine's: {machine.sum()}")
    for episode, machines in zip(stalls.itertuples(index=False), machine, strict=True):
        near = (late["start_ns"] < episode.end_ns + 6_000_000) & (late["end_ns"] > episode.start_ns - 2_000_000)
        what = f"verdict {episode.verdict} at {episode.start_ns} ({episode.evidence}) on a callback logged on time"
        assert near.any() or machines, f"{what}\n{_around(cap, int(audio), episode.start_ns, episode.end_ns)}"
    assert len(stalls) - int(machine.sum()) <= max(1, len(late))
