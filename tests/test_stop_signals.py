"""Every way of stopping catch-load ends the recording in bounded time, and the capture says what it holds.

Real recorder, real writer process, real signals: SIGTERM, SIGINT, SIGHUP (a closed terminal), with
the writer stopped (SIGSTOP), with an interval far longer than the test, and with --delayacct (whose
sysctl must be back as it was). "Bounded" tells the urgent end from a wait, on any machine: a signal
bounds the end at END_DRAIN_NS (0.4 s) after it (samplers/recorder.py), while an end without one waits up
to CALM_END_NS (60 s) for a writer; so the bound here is 15 s, far above the first on a loaded machine
and far below the second. The figure itself (0.4-0.8 s on a quiet machine) is `bench/stop_latency.py`'s.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import forensics
from capture.format import MAGIC
from tests.helpers import REPO, child_env, one_error_line
from tests.recording import catch_load_argv

STOP_BOUND_S = 15.0  # see the module's docstring: an urgent end, not a calm end's wait
DELAYACCT = Path("/proc/sys/kernel/task_delayacct")
# A target with many threads: each tick carries ~80 KB, so a stopped writer makes the recorder's
# backlog overflow within seconds and ticks are dropped (and must be counted as lost).
MANY_THREADS = (
    "import threading, time\n"
    "for _ in range(200):\n"
    "    threading.Thread(target=time.sleep, args=(120,), daemon=True).start()\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)


def _env() -> dict[str, str]:
    return child_env()


@pytest.fixture
def target() -> Iterator[int]:
    proc = subprocess.Popen([sys.executable, "-c", MANY_THREADS], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield proc.pid
    proc.kill()
    proc.wait()


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def _start(out: Path, *args: str) -> tuple[subprocess.Popen[str], int]:
    """catch-load recording into `out`, once its capture has begun; (recorder, writer pid)."""
    recorder = subprocess.Popen(
        [*catch_load_argv(), "-q", "-o", str(out), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=REPO,
    )
    deadline = time.monotonic() + 90  # imports on a loaded machine
    while time.monotonic() < deadline:
        if out.exists() and out.stat().st_size > len(MAGIC) + 64:
            break
        assert recorder.poll() is None, recorder.communicate()
        time.sleep(0.05)
    else:
        recorder.kill()
        pytest.fail("the recording did not start in 90 s")
    writers = _children(recorder.pid)
    assert len(writers) == 1, writers
    return recorder, writers[0]


def _stop(recorder: subprocess.Popen[str], signum: int) -> tuple[float, str]:
    """Seconds from the signal to the recorder's exit (not to the end of its output: a writer still
    finishing the file holds the same stderr open until it is done), and its stderr."""
    sent = time.monotonic()
    recorder.send_signal(signum)
    try:
        recorder.wait(timeout=30)
    except subprocess.TimeoutExpired:
        recorder.kill()
        pytest.fail(f"{signal.Signals(signum).name} did not end the recording in 30 s")
    took = time.monotonic() - sent
    _, stderr = recorder.communicate(timeout=60)
    return took, stderr


def _wait_gone(pid: int, timeout_s: float = 60) -> None:
    """The writer may finish the file after the recorder has gone (it says so)."""
    deadline = time.monotonic() + timeout_s
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                break  # a zombie: its parent (the recorder) is gone; the file is complete
        except OSError:
            break
        time.sleep(0.05)


def _check_capture(out: Path) -> dict[str, object]:
    """The trailer says what the capture holds: its ticks are the ticks in the file."""
    cap = forensics.load(out)
    assert cap.trailer is not None, cap.warnings
    trailer = cap.trailer
    samples = cap.table("samples", ["tick"])
    in_file = int(samples["tick"].nunique())
    assert trailer["ticks_in_capture"] == in_file
    assert trailer["ticks"] - trailer["lost_ticks"] == in_file
    assert trailer["rows"]["samples"] == len(samples)
    return trailer


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_stop_with_the_writer_stopped(tmp_path: Path, target: int, signum: int) -> None:
    out = tmp_path / "stopped.ssf"
    # Every thread every tick (no slow read tier): enough bytes that the pipe (1 MiB) and the backlog
    # (16 MiB) overflow within the 4 s the writer is stopped, so ticks are dropped.
    recorder, writer = _start(out, "-p", str(target), "--slow-interval", "off")
    os.kill(writer, signal.SIGSTOP)
    try:
        time.sleep(4)
        took, stderr = _stop(recorder, signum)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the recorder resumes it at the end itself
            os.kill(writer, signal.SIGCONT)
    assert took < STOP_BOUND_S, (took, stderr)
    assert recorder.returncode == 0, stderr
    assert "Traceback" not in stderr
    _wait_gone(writer)
    trailer = _check_capture(out)
    assert trailer["end_reason"] == f"interrupted ({signal.Signals(signum).name})"
    assert trailer["lost_ticks"] > 0  # what the stopped writer never took is counted, not hidden
    info = subprocess.run(
        [sys.executable, "-m", "forensics", "info", str(out)], capture_output=True, text=True, env=_env(), cwd=REPO
    )
    assert f"lost {trailer['lost_ticks']}" in info.stdout


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_stop_with_a_huge_interval(tmp_path: Path, target: int, signum: int) -> None:
    out = tmp_path / "huge.ssf"
    recorder, writer = _start(out, "-p", str(target), "-i", "60s")
    time.sleep(1)
    took, stderr = _stop(recorder, signum)
    assert took < STOP_BOUND_S, (took, stderr)
    assert recorder.returncode == 0, stderr
    _wait_gone(writer)
    trailer = _check_capture(out)
    assert trailer["ticks"] == 1


def test_duration_ends_a_huge_interval(tmp_path: Path, target: int) -> None:
    out = tmp_path / "duration.ssf"
    started = time.monotonic()
    recorder, writer = _start(out, "-p", str(target), "-i", "60s", "-d", "1s")
    _, stderr = recorder.communicate(timeout=30)
    assert recorder.returncode == 0, stderr
    assert time.monotonic() - started < 90  # not the 60 s interval after the start-up
    _wait_gone(writer)
    assert _check_capture(out)["end_reason"] == "duration reached"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_stop_with_delayacct_restores_the_sysctl(tmp_path: Path, target: int, signum: int) -> None:
    before = DELAYACCT.read_text().strip()
    out = tmp_path / "delayacct.ssf"
    recorder, writer = _start(out, "--delayacct", "-p", str(target))
    try:
        time.sleep(1)
        if before == "0":
            assert DELAYACCT.read_text().strip() == "1"
        took, stderr = _stop(recorder, signum)
        assert took < STOP_BOUND_S, (took, stderr)
        assert recorder.returncode == 0, stderr
        # Put back, unless another user of the machine changed it meanwhile (the guard then says so).
        assert DELAYACCT.read_text().strip() == before or "left at" in stderr, stderr
    finally:
        if recorder.poll() is None:
            recorder.kill()
        DELAYACCT.write_text(before + "\n")  # never leave the machine changed, even on failure
    _wait_gone(writer)
    _check_capture(out)


def test_command_exit_status_is_catch_loads(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "forensics.cli.catch_load",
            "-q",
            "-o",
            str(tmp_path / "cmd.ssf"),
            "--",
            "sh",
            "-c",
            "sleep 0.5; exit 3",
        ],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    assert forensics.load(tmp_path / "cmd.ssf").trailer["command_exit_code"] == 3


def test_a_killed_writer_is_explained_inone_error_line(tmp_path: Path, target: int) -> None:
    out = tmp_path / "killed.ssf"
    recorder, writer = _start(out, "-p", str(target))
    os.kill(writer, signal.SIGKILL)
    _, stderr = recorder.communicate(timeout=30)
    assert recorder.returncode == 2
    one_error_line(stderr, "capture writer stopped", "SIGKILL")


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=192k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_isone_error_line(tiny_disk: Path, target: int) -> None:
    out = tiny_disk / "full.ssf"
    recorder = subprocess.run(
        [*catch_load_argv(), "-q", "-o", str(out), "-p", str(target), "-d", "20s"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=REPO,
        timeout=120,
    )
    assert recorder.returncode == 2
    one_error_line(recorder.stderr, "No space left on device")
    # What reached the disk before it filled reads back, with a warning rather than a traceback.
    assert out.read_bytes().startswith(MAGIC)
