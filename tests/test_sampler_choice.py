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
from tests.recording import catch_load_argv, record_capture


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
def _sleeping_threads(count: int, mark: str = "") -> Iterator[int]:
    """A process with `count` threads besides its main one, all asleep; its pid. `mark`: a comment in its
    command line, for --match."""
    script = (
        f"import sys, threading  # {mark}\n"
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
    return record_capture(out, "-p", str(pid), "-d", "1s", *args, timeout=120, prefix=prefix)


def _info_sources(cap: forensics.Capture) -> dict[str, str]:
    """`forensics info`'s rows on where the figures came from."""
    from forensics.describe import describe_capture

    sections = describe_capture(cap)["sections"]
    return next(rows for rows in sections.values() if "schedstat + stat" in rows)


@pytest.mark.needs_root
@pytest.mark.needs_bcc
def test_catch_load_reads_a_big_target_with_the_ebpf_sampler_by_default(tmp_path: Path) -> None:
    """The default on a target of 121 threads (root, BCC here), by -p or by --match: the eBPF sampler, every
    thread stored, --sched and --taskstats none as under --sampler ebpf; --sched given keeps /proc; `forensics
    info` says why."""
    mark = f"sampler-choice-{tmp_path.name}"
    with _sleeping_threads(AUTO_EBPF_ABOVE_THREADS + 20, mark) as pid:
        cap = _record(tmp_path / "auto.ssf", pid)
        sched_given = _record(tmp_path / "sched.ssf", pid, "--sched", "rt")
        matched = record_capture(tmp_path / "match.ssf", "--match", mark, "-d", "1s", timeout=120)
    recording = cap.meta["recording"]
    assert recording["sampler"] == "ebpf", recording
    assert recording["sampler_why"] == f"{AUTO_EBPF_ABOVE_THREADS + 21} threads, more than {AUTO_EBPF_ABOVE_THREADS}"
    assert cap.sources["sched"] == "none" and cap.sources["taskstats"] is False
    assert cap.samples["tid"].nunique() == AUTO_EBPF_ABOVE_THREADS + 21
    assert _info_sources(cap)["sampler"] == f"ebpf (auto: {recording['sampler_why']})"
    kept = sched_given.meta["recording"]
    assert kept["sampler"] == "proc" and kept["sampler_why"].endswith("but --sched given: /proc's own")
    assert sched_given.sources["sched"] == "rt"
    assert (
        matched.meta["recording"]["sampler"] == "ebpf"
        and matched.meta["recording"]["sampler_why"] == (recording["sampler_why"])
    )


@pytest.mark.needs_root
def test_where_the_ebpf_sampler_cannot_start_auto_records_from_proc_and_says_why(tmp_path: Path) -> None:
    """Root without its capabilities (a container's root, say): the eBPF sampler's load fails for real, and the
    recording goes on from /proc with the reason in the capture; a small target is /proc from the start."""
    no_caps = ("setpriv", "--inh-caps=-all", "--bounding-set=-all")
    out = tmp_path / "nocaps.ssf"
    with _sleeping_threads(AUTO_EBPF_ABOVE_THREADS + 20) as pid:
        said = subprocess.run(  # not -q: the choice on a big target is said
            [*no_caps, *catch_load_argv("-o", str(out), "-p", str(pid), "-d", "1s")],
            capture_output=True,
            text=True,
            timeout=120,
            env=child_env(),
            stdin=subprocess.DEVNULL,
        )
    assert said.returncode == 0, said.stderr[-3000:]
    cap = forensics.load(out)
    recording = cap.meta["recording"]
    assert recording["sampler"] == "proc", recording
    assert "but the eBPF sampler cannot start: " in recording["sampler_why"], recording
    assert f"catch-load: reading the threads with the /proc sampler ({recording['sampler_why']})" in said.stderr
    assert cap.samples["tid"].nunique() == AUTO_EBPF_ABOVE_THREADS + 21
    with _sleeping_threads(3) as pid:
        small = _record(tmp_path / "small.ssf", pid)
    assert small.meta["recording"]["sampler"] == "proc"
    assert small.meta["recording"]["sampler_why"] == f"4 threads, at most {AUTO_EBPF_ABOVE_THREADS}"
    assert _info_sources(small)["sampler"] == f"proc (auto: 4 threads, at most {AUTO_EBPF_ABOVE_THREADS})"
