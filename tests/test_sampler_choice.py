"""--sampler auto (samplers/sampler_choice.py): the eBPF sampler for a target known to be big at the start where it
can start, /proc otherwise; the capture and `forensics info` say which and why."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import forensics
from samplers.procfs import ProcPaths
from samplers.sampler_choice import AUTO_EBPF_ABOVE_THREADS, EBPF, PROC, choose_sampler, could_not_start
from tests.fakeproc import FakeProc
from tests.helpers import child_env, stop_process
from tests.recording import catch_load_argv

REPO = Path(__file__).resolve().parent.parent


def _fake(tmp_path: Path, threads: dict[int, int]) -> ProcPaths:
    """A /proc with these processes (pid -> its thread count)."""
    fake = FakeProc(tmp_path / "proc")
    for pid, count in threads.items():
        for tid in range(pid, pid + count):
            fake.add_thread(pid, tid)
    return ProcPaths(str(tmp_path / "proc"))


def test_a_target_of_at_most_the_bar_is_read_from_proc(tmp_path: Path) -> None:
    procfs = _fake(tmp_path, {1000: AUTO_EBPF_ABOVE_THREADS - 10, 5000: 10})
    choice = choose_sampler(procfs, [1000, 5000], euid=0)
    assert (choice.sampler, choice.threads) == (PROC, AUTO_EBPF_ABOVE_THREADS)
    assert choice.why == f"{AUTO_EBPF_ABOVE_THREADS} threads, at most {AUTO_EBPF_ABOVE_THREADS}"


def test_a_bigger_target_gets_the_ebpf_sampler_as_root_only(tmp_path: Path) -> None:
    procfs = _fake(tmp_path, {1000: AUTO_EBPF_ABOVE_THREADS, 5000: 1})
    root = choose_sampler(procfs, [1000, 5000], euid=0)
    assert (root.sampler, root.threads) == (EBPF, AUTO_EBPF_ABOVE_THREADS + 1)
    user = choose_sampler(procfs, [1000, 5000], euid=1000)
    assert user.sampler == PROC and "not root" in user.why


def test_the_proc_samplers_own_options_keep_it(tmp_path: Path) -> None:
    procfs = _fake(tmp_path, {1000: 300})
    choice = choose_sampler(procfs, [1000], proc_options=["--sched", "--fast"], euid=0)
    assert choice.sampler == PROC and choice.why == "300 threads, but --sched and --fast given: /proc's own"


def test_targets_that_start_later_and_a_failed_start_are_read_from_proc(tmp_path: Path) -> None:
    later = choose_sampler(_fake(tmp_path, {}), [], euid=0)
    assert later.sampler == PROC and later.threads is None and "not known" in later.why
    failed = could_not_start(choose_sampler(_fake(tmp_path, {1000: 150}), [1000], euid=0), "no BCC")
    assert (failed.sampler, failed.threads) == (PROC, 150) and failed.why.endswith("cannot start: no BCC")


@contextmanager
def _sleeping_threads(count: int) -> Iterator[int]:
    """A process with `count` threads besides its main one, all asleep; its pid."""
    script = (
        "import sys, threading\n"
        f"stop = threading.Event()\n"
        f"threads = [threading.Thread(target=stop.wait) for _ in range({count})]\n"
        "[t.start() for t in threads]\n"
        "print('ready', flush=True)\n"
        "sys.stdin.read()\n"
        "stop.set()\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env()
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        yield process.pid
    finally:
        stop_process(process)


def _record(out: Path, pid: int, *args: str, prefix: tuple[str, ...] = ()) -> forensics.Capture:
    result = subprocess.run(
        [*prefix, *catch_load_argv("-q", "-o", str(out), "-p", str(pid), "-d", "1s", *args)],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return forensics.load(out)


def _info(path: Path) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "forensics", "info", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.needs_root
@pytest.mark.needs_bcc
def test_catch_load_reads_a_big_target_with_the_ebpf_sampler_by_default(tmp_path: Path) -> None:
    """The default on a target of 121 threads (root, BCC here): the eBPF sampler, every thread stored, --sched
    and --taskstats none as under --sampler ebpf; --sched given keeps /proc; `forensics info` says why."""
    with _sleeping_threads(AUTO_EBPF_ABOVE_THREADS + 20) as pid:
        cap = _record(tmp_path / "auto.ssf", pid)
        sched_given = _record(tmp_path / "sched.ssf", pid, "--sched", "rt")
    recording = cap.meta["recording"]
    assert recording["sampler"] == "ebpf", recording
    assert recording["sampler_why"] == f"{AUTO_EBPF_ABOVE_THREADS + 21} threads, more than {AUTO_EBPF_ABOVE_THREADS}"
    assert cap.sources["sched"] == "none" and cap.sources["taskstats"] is False
    assert cap.samples["tid"].nunique() == AUTO_EBPF_ABOVE_THREADS + 21
    info = _info(tmp_path / "auto.ssf")
    assert f"sampler           ebpf (auto: {recording['sampler_why']})" in info, info
    kept = sched_given.meta["recording"]
    assert kept["sampler"] == "proc" and kept["sampler_why"].endswith("but --sched given: /proc's own")
    assert sched_given.sources["sched"] == "rt"


@pytest.mark.needs_root
def test_where_the_ebpf_sampler_cannot_start_auto_records_from_proc_and_says_why(tmp_path: Path) -> None:
    """Root without its capabilities (a container's root, say): the eBPF sampler's load fails for real, and the
    recording goes on from /proc with the reason in the capture; a small target is /proc from the start."""
    no_caps = ("setpriv", "--inh-caps=-all", "--bounding-set=-all")
    with _sleeping_threads(AUTO_EBPF_ABOVE_THREADS + 20) as pid:
        cap = _record(tmp_path / "nocaps.ssf", pid, prefix=no_caps)
    recording = cap.meta["recording"]
    assert recording["sampler"] == "proc", recording
    assert "but the eBPF sampler cannot start: " in recording["sampler_why"], recording
    assert cap.samples["tid"].nunique() == AUTO_EBPF_ABOVE_THREADS + 21
    with _sleeping_threads(3) as pid:
        small = _record(tmp_path / "small.ssf", pid)
    assert small.meta["recording"]["sampler"] == "proc"
    assert small.meta["recording"]["sampler_why"] == f"4 threads, at most {AUTO_EBPF_ABOVE_THREADS}"
