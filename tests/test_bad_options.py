"""Bad option values are one-line errors with a non-zero exit, caught before anything is touched.

Each value here was a traceback or a lost file (issue 23): a regular expression that does not compile,
a number that is not finite, a CPU the recorder may not use, and `catch-load --force` removing the old
capture before it had checked the rest of its command line.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import one_error_line

CAPTURE = "captures/lab-episodes.ssf"


def _one_line_error(result, words: str) -> None:  # type: ignore[no-untyped-def]
    """Exit 2 and nothing on stderr but the one error line (tests.helpers.one_error_line) holding `words`."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    one_error_line(result.stderr, words)


# Every command x every bad value is tests/test_bad_option_sweep.py (in-process, under an alarm); these two run
# the console entry as a process, with the words of the message.
@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("stalls", CAPTURE, "--thread", "("), "is not a regular expression"),
        (("lab", "--episode-ms", "nan"), "not a finite number"),
    ],
)
def test_a_bad_value_as_a_process_sees_it(run_module, args, words) -> None:  # type: ignore[no-untyped-def]
    _one_line_error(run_module("forensics", *args), words)


@pytest.mark.parametrize(
    "args",
    [
        ("--lab", "--bogus"),
        ("--cpu", "4096", "--", "true"),
        ("--no-jack", "--jack", "--", "true"),
        ("--lab", "--episode-ms", "nan"),
    ],
)
def test_force_keeps_the_old_capture_when_the_rest_is_refused(run_module, tmp_path, args) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "old.ssf"
    out.write_bytes(b"the capture of yesterday")
    result = run_module("forensics.cli.catch_load", "-q", "-o", str(out), "--force", *args)
    assert result.returncode != 0 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    one_error_line(result.stderr)
    assert out.read_bytes() == b"the capture of yesterday", "refused, yet the old capture is gone"
    assert sorted(os.listdir(tmp_path)) == ["old.ssf"]


def test_without_force_an_existing_capture_is_refused_first(run_module, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "old.ssf"
    out.write_bytes(b"kept")
    result = run_module("forensics.cli.catch_load", "-q", "-o", str(out), "--lab")
    assert result.returncode != 0 and "--force" in result.stderr, result.stderr
    assert out.read_bytes() == b"kept"


@pytest.mark.parametrize(
    "args", [("--no-jack", "--jack", "x", "--lab"), ("--sampler", "ebpf", "--sched", "all", "--lab")]
)
def test_a_refused_lab_recording_leaves_no_truth_file(tmp_path: Path, args: tuple[str, ...]) -> None:
    """The lab's truth file (a temporary file) is made once every option is checked: a refused command
    line left an empty /tmp/lab-truth-*.json behind each time."""
    import subprocess
    import sys

    from tests.helpers import REPO, child_env

    temp = tmp_path / "tmp"
    temp.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "forensics.cli.catch_load", "-q", "-o", str(tmp_path / "x.ssf"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(TMPDIR=str(temp)),
        cwd=REPO,
    )
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert list(temp.iterdir()) == [] and not (tmp_path / "x.ssf").exists()
