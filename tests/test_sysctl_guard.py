"""SysctlGuard: set for a recording, restore at the end, on SIGTERM, and after a crash (forensics restore)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from samplers.sysctl_guard import SysctlGuard, read_sysctl, restore_leftovers
from tests.helpers import REPO, child_env

RunModule = Callable[..., subprocess.CompletedProcess[str]]


def canned_proc(tmp_path: Path, delayacct: str = "0", schedstats: str | None = None) -> Path:
    proc = tmp_path / "proc"
    kernel = proc / "sys" / "kernel"
    kernel.mkdir(parents=True)
    (kernel / "task_delayacct").write_text(delayacct + "\n")
    if schedstats is not None:
        (kernel / "sched_schedstats").write_text(schedstats + "\n")
    return proc


def fake_live_process(proc: Path, pid: int, starttime: int) -> None:
    """A /proc/<pid>/stat saying that pid runs, started at `starttime` (field 22)."""
    (proc / str(pid)).mkdir(parents=True, exist_ok=True)
    fields = ["S"] + ["0"] * 18 + [str(starttime)] + ["0"] * 30
    (proc / str(pid) / "stat").write_text(f"{pid} (recorder) {' '.join(fields)}\n")


def test_round_trip_on_canned_proc(tmp_path: Path) -> None:
    proc = canned_proc(tmp_path, delayacct="0", schedstats="0")
    state = tmp_path / "state"
    guard = SysctlGuard({"kernel.task_delayacct": "1", "kernel.sched_schedstats": "1"}, proc=str(proc), state_dir=state)
    outcomes = {o.name: o for o in guard.apply()}
    assert outcomes["kernel.task_delayacct"].status == "set"
    assert outcomes["kernel.sched_schedstats"].status == "set"
    assert read_sysctl("kernel.task_delayacct", str(proc)) == "1"
    saved = json.loads(guard.state_path.read_text())
    assert saved["settings"]["kernel.task_delayacct"] == {"old": "0", "new": "1"}
    messages = guard.restore()
    assert read_sysctl("kernel.task_delayacct", str(proc)) == "0"
    assert read_sysctl("kernel.sched_schedstats", str(proc)) == "0"
    assert not guard.state_path.exists()
    assert any("restored 1 -> 0" in m for m in messages)
    assert guard.restore() == []  # idempotent


def test_missing_switch_and_already_set(tmp_path: Path) -> None:
    proc = canned_proc(tmp_path, delayacct="1")
    with SysctlGuard(
        {"kernel.task_delayacct": "1", "kernel.sched_schedstats": "1"}, proc=str(proc), state_dir=tmp_path / "s"
    ) as guard:
        assert guard.outcomes["kernel.task_delayacct"].status == "already"
        assert guard.outcomes["kernel.task_delayacct"].in_force
        missing = guard.outcomes["kernel.sched_schedstats"]
        assert missing.status == "missing" and not missing.in_force
        assert "CONFIG_SCHEDSTATS" in missing.message
        assert not guard.state_path.exists()  # nothing changed, nothing to remember
    assert read_sysctl("kernel.task_delayacct", str(proc)) == "1"


def test_value_changed_by_someone_else_is_left_alone(tmp_path: Path) -> None:
    proc = canned_proc(tmp_path, delayacct="0")
    guard = SysctlGuard({"kernel.task_delayacct": "1"}, proc=str(proc), state_dir=tmp_path / "s")
    guard.apply()
    (proc / "sys" / "kernel" / "task_delayacct").write_text("7\n")
    messages = guard.restore()
    assert read_sysctl("kernel.task_delayacct", str(proc)) == "7"
    assert "left at 7" in messages[0]


def test_second_recording_inherits_the_old_value(tmp_path: Path) -> None:
    proc = canned_proc(tmp_path, delayacct="0")
    state = tmp_path / "s"
    guard = SysctlGuard({"kernel.task_delayacct": "1"}, proc=str(proc), state_dir=state)
    guard.apply()
    # Another recorder (pid 999999) started later saw 1 and also holds the switch.
    fake_live_process(proc, 999999, 4242)
    other = state / "sysctl-999999.json"
    other.write_text(
        json.dumps(
            {
                "pid": 999999,
                "starttime": 4242,
                "boot_id": None,
                "settings": {"kernel.task_delayacct": {"old": "1", "new": "1"}},
            }
        )
    )
    messages = guard.restore()
    assert read_sysctl("kernel.task_delayacct", str(proc)) == "1"  # still needed by the other
    assert "999999" in messages[0]
    assert json.loads(other.read_text())["settings"]["kernel.task_delayacct"]["old"] == "0"
    # The other one dies without restoring: `forensics restore` puts back the value from before both.
    shutil.rmtree(proc / "999999")
    lines = restore_leftovers(proc=str(proc), state_dir=state)
    assert read_sysctl("kernel.task_delayacct", str(proc)) == "0"
    assert any("restored 1 -> 0" in line for line in lines)


def test_leftover_of_a_running_recorder_is_kept(tmp_path: Path) -> None:
    proc = canned_proc(tmp_path, delayacct="1")
    state = tmp_path / "s"
    state.mkdir()
    fake_live_process(proc, 424242, 77)
    (state / "sysctl-424242.json").write_text(
        json.dumps(
            {
                "pid": 424242,
                "starttime": 77,
                "boot_id": None,
                "settings": {"kernel.task_delayacct": {"old": "0", "new": "1"}},
            }
        )
    )
    lines = restore_leftovers(proc=str(proc), state_dir=state)
    assert "still running" in lines[0]
    assert read_sysctl("kernel.task_delayacct", str(proc)) == "1"
    lines = restore_leftovers(proc=str(proc), state_dir=state, force=True)
    assert read_sysctl("kernel.task_delayacct", str(proc)) == "0"
    assert not list(state.glob("sysctl-*.json"))


def test_a_deeply_nested_state_file_is_ignored_like_any_unreadable_one(tmp_path: Path) -> None:
    """64 KiB of "[" is valid JSON's start and a RecursionError in json.loads: ignored, not a traceback
    from `forensics restore`; the other state files are still restored."""
    proc = canned_proc(tmp_path, delayacct="1")
    state = tmp_path / "s"
    state.mkdir()
    (state / "sysctl-111111.json").write_text("[" * (1 << 16))
    (state / "sysctl-999999.json").write_text(
        json.dumps(
            {"pid": 999999, "starttime": 1, "boot_id": None,
             "settings": {"kernel.task_delayacct": {"old": "0", "new": "1"}}}
        )
    )  # fmt: skip
    restore_leftovers(proc=str(proc), state_dir=state)
    assert read_sysctl("kernel.task_delayacct", str(proc)) == "0"


_CHILD = """
import os, signal, sys, time
from samplers.sysctl_guard import SysctlGuard
guard = SysctlGuard({"kernel.task_delayacct": "1"}, proc=sys.argv[1], state_dir=sys.argv[2])
print(guard.apply()[0].status, flush=True)
if sys.argv[3] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
guard.install_signal_handlers()
print("ready", flush=True)
time.sleep(60)
"""


def _child(proc: Path, state: Path, mode: str) -> subprocess.Popen[str]:
    env = child_env()
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(proc), str(state), mode],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )


def test_sigterm_restores_then_dies_by_it(tmp_path: Path) -> None:
    proc = canned_proc(tmp_path, delayacct="0")
    state = tmp_path / "s"
    child = _child(proc, state, "term")
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "set"
    assert child.stdout.readline().strip() == "ready"
    assert read_sysctl("kernel.task_delayacct", str(proc)) == "1"
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=30) == -signal.SIGTERM
    assert read_sysctl("kernel.task_delayacct", str(proc)) == "0"
    assert not list(state.glob("sysctl-*.json"))


def test_crash_then_forensics_restore(tmp_path: Path, run_module: RunModule) -> None:
    proc = canned_proc(tmp_path, delayacct="0")
    state = tmp_path / "s"
    child = _child(proc, state, "kill")
    assert child.wait(timeout=30) == -signal.SIGKILL
    assert read_sysctl("kernel.task_delayacct", str(proc)) == "1"  # left changed by the crash
    result = run_module("forensics", "restore", "--state-dir", str(state), "--proc", str(proc))
    assert result.returncode == 0, result.stderr
    assert "kernel.task_delayacct: restored 1 -> 0" in result.stdout
    assert read_sysctl("kernel.task_delayacct", str(proc)) == "0"
    again = run_module("forensics", "restore", "--state-dir", str(state), "--proc", str(proc))
    assert again.stdout.strip() == "nothing to restore: no recording left kernel settings changed"


# --------------------------------------------------------------------------------------------------
# The real switches (root)

root = pytest.mark.needs_root  # changing kernel.task_delayacct


@root
def test_real_round_trip(tmp_path: Path) -> None:
    before = read_sysctl("kernel.task_delayacct")
    assert before is not None
    wanted = "0" if before == "1" else "1"
    with SysctlGuard({"kernel.task_delayacct": wanted}, state_dir=tmp_path) as guard:
        assert guard.outcomes["kernel.task_delayacct"].status == "set"
        assert read_sysctl("kernel.task_delayacct") == wanted
    assert read_sysctl("kernel.task_delayacct") == before


@pytest.mark.may_skip
@root
def test_real_crash_then_restore(tmp_path: Path, run_module: RunModule) -> None:
    before = read_sysctl("kernel.task_delayacct")
    if before != "0":
        pytest.skip("kernel.task_delayacct is already 1 on this machine: a crash would change nothing")
    child = _child(Path("/proc"), tmp_path, "kill")
    try:
        assert child.wait(timeout=30) == -signal.SIGKILL
        assert read_sysctl("kernel.task_delayacct") == "1"
        result = run_module("forensics", "restore", "--state-dir", str(tmp_path))
        assert "restored 1 -> 0" in result.stdout, result.stdout + result.stderr
    finally:
        restore_leftovers(state_dir=tmp_path)  # never leave the machine changed, even on failure
    assert read_sysctl("kernel.task_delayacct") == "0"


@root
def test_without_privileges_says_so_and_changes_nothing(tmp_path: Path) -> None:
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is needed to drop capabilities")
    before = read_sysctl("kernel.task_delayacct")
    wanted = "0" if before == "1" else "1"
    code = (
        "from samplers.sysctl_guard import SysctlGuard\n"
        f"g = SysctlGuard({{'kernel.task_delayacct': '{wanted}'}}, state_dir={str(tmp_path)!r})\n"
        "o = g.apply()[0]\nprint(o.status)\nprint(o.message)\ng.restore()\n"
    )
    env = child_env()
    # uid 0 without capabilities: kernel/delayacct.c sysctl_delayacct() wants CAP_SYS_ADMIN.
    result = subprocess.run(
        [setpriv, "--bounding-set=-all", "--inh-caps=-all", "--", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    status, message = result.stdout.strip().splitlines()
    assert status == "denied"
    assert "needs root" in message and "recording without" in message
    assert read_sysctl("kernel.task_delayacct") == before
    assert not list(tmp_path.glob("sysctl-*.json"))
