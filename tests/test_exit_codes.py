"""Exit codes (README, "Exit codes"): 0 done, also when the reader of stdout went away; 1 done and found
what --fail-on names; 2 a usage or input error, in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import REPO, child_env

EPISODES = "captures/lab-episodes.ssf"
CLEAN = "captures/lab-clean.ssf"


@pytest.mark.parametrize(
    "command",
    [["dump", EPISODES], ["info", EPISODES], ["stalls", EPISODES, "--episodes"], ["doctor", "--no-live"]],
)
def test_a_closed_pipe_is_no_error(command):
    # `forensics ... | head -1`: the reader reads one line and goes away.
    proc = subprocess.Popen(
        [sys.executable, "-m", "forensics", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env(),
        cwd=REPO,
        bufsize=0,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(1)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0, err
    assert "Traceback" not in err and "Broken pipe" not in err


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["stalls", EPISODES, "--fail-on", "incident"], 1),
        (["stalls", EPISODES, "--fail-on", "lock", "--episodes"], 1),
        (["stalls", EPISODES, "--fail-on", "incident", "--json"], 1),
        (["stalls", EPISODES, "--fail-on", "incident", "--span", "0.1s..0.5s"], 0),
        (["stalls", EPISODES, "--fail-on", "reclaim"], 0),
        (["stalls", CLEAN, "--fail-on", "episode"], 0),
        (["stalls", EPISODES], 0),
    ],
)
def test_fail_on_exits_1_when_it_finds_what_was_asked(run_module, args, code):
    result = run_module("forensics", *args)
    assert result.returncode == code, result.stderr
    assert result.stdout  # the output is printed either way


@pytest.mark.parametrize(
    "args",
    [
        ["nosuchcommand"],
        ["stalls", EPISODES, "--nosuchoption"],
        ["stalls", "/nonexistent.ssf"],
        ["stalls", EPISODES, "--span", "nosuchmarker.."],
        ["stalls", EPISODES, "--min-stall", "5"],
    ],
)
def test_usage_and_input_errors_exit_2_in_one_line(run_module, args):
    result = run_module("forensics", *args)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
