"""A writer that cannot write says why in one line, and a recording that reached no file says so.

The writer process creates the capture once it has imported everything, a moment after catch-load
checked the output's directory: what happens to the directory meanwhile (no longer writable, removed)
reaches the writer as EACCES or ENOENT. The writer is held (SIGSTOP) at that moment so the change
lands between the check and the create every time. A directory removed during the recording leaves
the writer writing to a file no one can open: catch-load must fail, not print "capture: ..." (it
exited 0 with no capture before). A full disk (ENOSPC) is in test_stop_signals.py.

EACCES needs a writer without root's power over files: an unprivileged user (uid 65534) where that
user can run this Python; else uid 0 without any capability (CI's Python lives under /root, closed to
other users), which the kernel checks against a directory's mode like any user.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import REPO, child_env, one_error_line, stop_process, unprivileged
from tests.recording import catch_load_argv, writer_of

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: to run catch-load as another user")


def _start(prefix: tuple[str, ...], out: Path, *args: str) -> tuple[subprocess.Popen[str], int]:
    """catch-load into `out`, its writer held before it creates the file."""
    recorder = subprocess.Popen(
        [*prefix, *catch_load_argv("-q", "-o", str(out), *args, "--", "sleep", "30")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        cwd="/",
    )
    writer = writer_of(recorder)
    os.kill(writer, signal.SIGSTOP)
    assert not out.exists(), "the writer created the capture before it could be held"
    return recorder, writer


def _end(recorder: subprocess.Popen[str], timeout_s: float = 120) -> str:
    """stderr and stdout, once catch-load has ended."""
    try:
        stdout, stderr = recorder.communicate(timeout=timeout_s)
    finally:
        stop_process(recorder)
    return stderr + stdout


def test_a_directory_no_longer_writable_isone_error_line(open_tmp: Path) -> None:
    prefix, uid = unprivileged()
    where = open_tmp / "out"
    where.mkdir()
    os.chown(where, uid, uid)
    out = where / "x.ssf"
    recorder, writer = _start(prefix, out, "-d", "5s")
    where.chmod(0o555)
    os.kill(writer, signal.SIGCONT)
    stderr = _end(recorder)
    assert recorder.returncode == 2, stderr
    one_error_line(stderr, str(out), "Permission denied", "nothing was written")
    assert not out.exists()


def test_a_directory_removed_before_the_file_isone_error_line(open_tmp: Path) -> None:
    where = open_tmp / "out"
    where.mkdir()
    out = where / "x.ssf"
    recorder, writer = _start((), out, "-d", "5s")
    where.rmdir()
    os.kill(writer, signal.SIGCONT)
    stderr = _end(recorder)
    assert recorder.returncode == 2, stderr
    one_error_line(stderr, str(out), "No such file or directory", "nothing was written")


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ("directory removed", "its directory"),
        ("file removed", "it was removed or renamed"),
        ("file replaced", "another file took its name"),
    ],
)
def test_a_capture_lost_during_the_recording_isone_error_line(open_tmp: Path, change: str, words: str) -> None:
    where = open_tmp / "out"
    where.mkdir()
    out = where / "x.ssf"
    recorder = subprocess.Popen(
        catch_load_argv("-o", str(out), "-d", "3s", "--", "sleep", "30"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        cwd=REPO,
    )
    deadline = time.monotonic() + 90
    while not (out.exists() and out.stat().st_size > 0):
        assert time.monotonic() < deadline and recorder.poll() is None, recorder.communicate()
        time.sleep(0.05)
    if change == "directory removed":
        shutil.rmtree(where)
    else:
        out.unlink()
        if change == "file replaced":
            out.write_text("someone else's\n")
    stderr = _end(recorder)
    assert recorder.returncode == 2, stderr
    one_error_line(stderr, f"the capture {out} is lost", words)
    assert "capture: " not in stderr and "recorded" not in stderr  # no summary of a capture not there


def test_a_writer_killed_while_starting_is_named(open_tmp: Path) -> None:
    out = open_tmp / "x.ssf"
    recorder, writer = _start((), out, "-d", "5s")
    os.kill(writer, signal.SIGKILL)
    stderr = _end(recorder)
    assert recorder.returncode == 2, stderr
    line = one_error_line(stderr, "did not start", "killed by SIGKILL")
    assert "above" not in line  # nothing is above: a killed writer says nothing of its own
