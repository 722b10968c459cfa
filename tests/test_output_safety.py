"""Root never writes through another user's files: planted links, taken-over state directories,
state files that name paths, and HTML in thread names.

The attacker is a real unprivileged user (a numeric uid, through setpriv from util-linux): it makes
the directories and plants the links itself. The kernel's own defence (fs.protected_symlinks and
fs.protected_regular, which stop root following another user's link in a sticky directory) is turned
off for these tests, so they show what the toolkit does on its own; the fixture always puts it back.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from forensics.render import Report, Section
from forensics.render.markdown import render_markdown
from samplers.sysctl_guard import SysctlGuard, restore_leftovers
from tests.helpers import REPO, child_env, unprivileged

CAPTURE = REPO / "captures" / "lab-clean.ssf"
ATTACKER = 4243  # no passwd entry needed: setpriv takes numbers
VICTIM = 4242  # an unprivileged user whose own files the attacker aims at
SYSTEM_PYTHON = "/usr/bin/python3"  # the toolkit's python lives under /root, closed to other users
PROTECTIONS = ("fs/protected_symlinks", "fs/protected_regular")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the victim here is root's own writes")


@pytest.fixture
def no_kernel_link_protection() -> Iterator[None]:
    """fs.protected_symlinks=0 and fs.protected_regular=0 for the test, restored however it ends."""
    before = {name: Path("/proc/sys", name).read_text().strip() for name in PROTECTIONS}
    try:
        for name in PROTECTIONS:
            Path("/proc/sys", name).write_text("0\n")
        yield
    finally:
        for name, value in before.items():
            Path("/proc/sys", name).write_text(value + "\n")


def as_user(uid: int, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=env if env is not None else {"PATH": "/usr/bin:/bin"},
        check=False,
    )


def run(module: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = child_env()
    return subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=300, env=env, cwd=cwd or REPO
    )


def one_line_error(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, proc.stderr
    for word in words:
        assert word in errors[0], errors[0]


@pytest.fixture
def scene(open_tmp: Path) -> dict[str, Path]:
    """A sticky world-writable directory (like /tmp), a directory the attacker owns, and two victims:
    a root-owned file and a file of another unprivileged user."""
    tmp_path = open_tmp
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    owned = tmp_path / "attacker"
    owned.mkdir()
    os.chown(owned, ATTACKER, ATTACKER)
    root_file = tmp_path / "root-owned.conf"
    root_file.write_text("root's own data\n")
    user_file = tmp_path / "victim-owned.txt"
    user_file.write_text("the victim's own data\n")
    os.chown(user_file, VICTIM, VICTIM)
    tmp_path.chmod(0o755)
    return {"sticky": sticky, "owned": owned, "root_file": root_file, "user_file": user_file}


def plant(link: Path, target: Path) -> None:
    """The attacker plants `link -> target` (as themselves, in a directory they may write)."""
    done = as_user(ATTACKER, "ln", "-s", str(target), str(link))
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and link.lstat().st_uid == ATTACKER


def untouched(scene: dict[str, Path]) -> None:
    assert scene["root_file"].read_text() == "root's own data\n"
    assert scene["user_file"].read_text() == "the victim's own data\n"


@pytest.mark.parametrize("where", ["sticky", "owned"])
@pytest.mark.parametrize("victim", ["root_file", "user_file"])
def test_report_and_views_never_write_through_a_planted_link(
    no_kernel_link_protection: None, scene: dict[str, Path], where: str, victim: str
) -> None:
    outputs = {
        ("report", "out.md"): ["report", str(CAPTURE)],
        ("summarize", "out.txt"): ["summarize", str(CAPTURE)],
        ("export", "out.json"): ["export", str(CAPTURE), "--format", "perfetto"],
    }
    for (command, name), argv in outputs.items():
        link = scene[where] / name
        plant(link, scene[victim])
        refused = run("forensics", *argv, "-o", str(link))
        one_line_error(refused, "exists already", "--force")
        untouched(scene)
        if command == "report" and where == "sticky":  # the slowest writer once: --force replaces the link
            forced = run("forensics", *argv, "-o", str(link), "--force")
            assert forced.returncode == 0, forced.stderr
            assert not link.is_symlink() and link.read_text().startswith("# ")
            untouched(scene)


def test_an_existing_output_needs_force(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("keep me\n")
    refused = run("forensics", "summarize", str(CAPTURE), "-o", str(text))
    one_line_error(refused, "exists already")
    assert text.read_text() == "keep me\n"
    replaced = run("forensics", "summarize", str(CAPTURE), "-o", str(text), "--force")
    assert replaced.returncode == 0, replaced.stderr
    assert text.read_text() != "keep me\n"
    # No temporary file is left beside it.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_export_tables_never_write_through_links(no_kernel_link_protection: None, scene: dict[str, Path]) -> None:
    # A directory name that is a link to a directory of the victim's: refused, nothing written there.
    victim_dir = scene["root_file"].parent / "root-dir"
    victim_dir.mkdir()
    plant(scene["sticky"] / "tables", victim_dir)
    refused = run("forensics", "export", str(CAPTURE), "--format", "csv", "-o", str(scene["sticky"] / "tables"))
    one_line_error(refused, "not a directory")
    assert list(victim_dir.iterdir()) == []
    # A directory the attacker made, with a link where a table goes: refused, then replaced with --force.
    plant(scene["owned"] / "samples.csv", scene["root_file"])
    refused = run("forensics", "export", str(CAPTURE), "--format", "csv", "-o", str(scene["owned"]))
    one_line_error(refused, "exists already")
    untouched(scene)
    forced = run("forensics", "export", str(CAPTURE), "--format", "csv", "-o", str(scene["owned"]), "--force")
    assert forced.returncode == 0, forced.stderr
    assert not (scene["owned"] / "samples.csv").is_symlink()
    assert (scene["owned"] / "samples.csv").read_text().startswith("tick,")
    untouched(scene)
    assert not [p for p in scene["owned"].iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("where", ["sticky", "owned"])
def test_catch_load_never_writes_through_a_planted_link(
    no_kernel_link_protection: None, scene: dict[str, Path], where: str
) -> None:
    link = scene[where] / "load.ssf"
    plant(link, scene["root_file"])
    refused = run("forensics.cli.catch_load", "-q", "-d", "0.3s", "-o", str(link), "--", "sleep", "1")
    one_line_error(refused, "exists already", "--force")
    untouched(scene)
    forced = run("forensics.cli.catch_load", "-q", "-d", "0.3s", "-o", str(link), "--force", "--", "sleep", "1")
    assert forced.returncode == 0, forced.stderr
    assert not link.is_symlink() and link.read_bytes().startswith(b"\x89SSF")
    untouched(scene)


def test_catch_load_default_name_skips_a_planted_one(no_kernel_link_protection: None, scene: dict[str, Path]) -> None:
    # The default name is predictable: plant it for the next seconds.
    now = time.time()
    for ahead in range(0, 8):
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now + ahead))
        plant(scene["sticky"] / f"catch-{stamp}.ssf", scene["root_file"])
    done = run("forensics.cli.catch_load", "-q", "-d", "0.3s", "--", "sleep", "1", cwd=scene["sticky"])
    assert done.returncode == 0, done.stderr
    made = [p for p in scene["sticky"].iterdir() if not p.is_symlink()]
    assert len(made) == 1 and made[0].name.endswith("-2.ssf"), sorted(p.name for p in scene["sticky"].iterdir())
    assert made[0].read_bytes().startswith(b"\x89SSF")
    untouched(scene)


# -- the sysctl state directory --------------------------------------------------------------------


def _guard_as_victim(code: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), **(env_extra or {})}
    return as_user(VICTIM, SYSTEM_PYTHON, "-c", code, env=env)


def test_state_directory_made_by_another_user_is_refused(
    no_kernel_link_protection: None, scene: dict[str, Path]
) -> None:
    """Without XDG_RUNTIME_DIR the state directory is /tmp/spike-stall-forensics-<uid>: a predictable
    name. Another user makes it first (0777) and plants the links a state-file write would follow."""
    taken = Path(f"/tmp/spike-stall-forensics-{VICTIM}")
    shutil.rmtree(taken, ignore_errors=True)
    try:
        assert as_user(ATTACKER, "mkdir", "-m", "0777", str(taken)).returncode == 0
        assert as_user(ATTACKER, "chmod", "0777", str(taken)).returncode == 0
        for pid in range(2, 200):
            os.symlink(scene["user_file"], taken / f"sysctl-{pid}.json.tmp")
        code = (
            "from capture.errors import ForensicsError\n"
            "from samplers.sysctl_guard import _locked, default_state_dir, restore_leftovers\n"
            "for attempt in (restore_leftovers, lambda: _locked(default_state_dir()).__enter__()):\n"
            "    try:\n"
            "        print('no refusal:', attempt())\n"
            "    except ForensicsError as err:\n"
            "        print('refused:', err)\n"
        )
        done = _guard_as_victim(code)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert len(lines) == 2 and all(line.startswith("refused: ") for line in lines), done.stdout
        assert "belongs to uid 4243" in lines[0]
        untouched(scene)
    finally:
        shutil.rmtree(taken, ignore_errors=True)


def test_state_directory_writable_by_others_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    state.chmod(0o777)
    guard = SysctlGuard({"kernel.task_delayacct": "1"}, proc=str(tmp_path / "proc"), state_dir=state)
    with pytest.raises(Exception, match="others can write in it"):
        restore_leftovers(proc=str(tmp_path / "proc"), state_dir=state)
    (tmp_path / "proc" / "sys" / "kernel").mkdir(parents=True)
    (tmp_path / "proc" / "sys" / "kernel" / "task_delayacct").write_text("0\n")
    with pytest.raises(Exception, match="others can write in it"):
        guard.apply()
    assert (tmp_path / "proc" / "sys" / "kernel" / "task_delayacct").read_text() == "0\n"


def test_private_state_directory_is_used_by_an_unprivileged_user(open_tmp: Path) -> None:
    tmp_path = open_tmp
    runtime = tmp_path / "run"
    runtime.mkdir()
    os.chown(runtime, VICTIM, VICTIM)
    tmp_path.chmod(0o755)
    done = _guard_as_victim(
        "from samplers.sysctl_guard import restore_leftovers\nprint(restore_leftovers())",
        {"XDG_RUNTIME_DIR": str(runtime)},
    )
    assert done.returncode == 0, done.stderr
    assert "nothing to restore" in done.stdout


# -- forensics restore obeys only what catch-load writes ---------------------------------------------


def test_restore_writes_only_allowed_settings_under_proc_sys(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "sys" / "kernel").mkdir(parents=True)
    (proc / "sys" / "kernel" / "task_delayacct").write_text("1\n")
    target = tmp_path / "victim.txt"
    target.write_text("precious\n")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    evil = {
        "pid": 999999999,
        "starttime": 1,
        "boot_id": None,
        "settings": {
            str(target).replace("/", "."): {"old": "OWNED-BY-ATTACKER", "new": "precious"},
            str(target): {"old": "OWNED-BY-ATTACKER", "new": "precious"},
            "..." + str(target): {"old": "0", "new": "1"},
            "kernel.core_pattern": {"old": "|/tmp/x", "new": "core"},
            "kernel.task_delayacct": {"old": "OWNED-BY-ATTACKER", "new": "1"},
        },
    }
    (state / "sysctl-999999999.json").write_text(json.dumps(evil))
    lines = restore_leftovers(proc=str(proc), state_dir=state)
    assert target.read_text() == "precious\n"
    assert (proc / "sys" / "kernel" / "task_delayacct").read_text() == "1\n"
    ignored = [line for line in lines if "ignored" in line]
    assert len(ignored) == 5, lines
    # A genuine entry next to them is still restored.
    (state / "sysctl-999999999.json").write_text(
        json.dumps({**evil, "settings": {"kernel.task_delayacct": {"old": "0", "new": "1"}}})
    )
    lines = restore_leftovers(proc=str(proc), state_dir=state)
    assert (proc / "sys" / "kernel" / "task_delayacct").read_text().strip() == "0", lines


# -- the Markdown report ----------------------------------------------------------------------------


def test_markdown_escapes_thread_names_and_command_lines() -> None:
    hostile = '<img src=x onerror="alert(1)">'
    link = "*[click](javascript:alert(1))*"
    frame = pd.DataFrame({"thread": [hostile, link], "cmdline": [f"run --x {hostile}", "a|b"], "why": [hostile, link]})
    report = Report(
        title=f"report of {hostile}",
        sections=[Section(name="t", title=f"Threads {hostile}", frame=frame, detail="why", note=hostile)],
    )
    text = render_markdown(report)
    assert "<img" not in text and "&lt;img" in text
    assert not re.search(r"(?<!\\)\]\(javascript", text) and "\\[click\\]" in text  # no live link
    assert "a\\|b" in text  # the pipe still cannot split the cell


# -- an unprivileged victim ---------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["sticky", "owned"])
def test_an_unprivileged_users_outputs_never_follow_a_planted_link(
    no_kernel_link_protection: None, open_tmp: Path, where: str
) -> None:
    """The victim is not root: another user plants links to the victim's own file where the victim's
    report, export and capture go (a sticky directory, a directory the attacker owns)."""
    prefix, victim = unprivileged()
    shared = open_tmp / "sticky"
    shared.mkdir()
    shared.chmod(0o1777)
    owned = open_tmp / "attacker"
    owned.mkdir()
    os.chown(owned, ATTACKER, ATTACKER)
    mine = open_tmp / "mine.txt"
    mine.write_text("the victim's own data\n")
    os.chown(mine, victim, victim)
    directory = shared if where == "sticky" else owned
    runs = {
        "report.md": ["-m", "forensics", "report", str(CAPTURE)],
        "trace.json": ["-m", "forensics", "export", str(CAPTURE), "--format", "perfetto"],
        "load.ssf": ["-m", "forensics.cli.catch_load", "-q", "-d", "0.3s"],
    }
    for name, argv in runs.items():
        link = directory / name
        plant(link, mine)
        tail = ["--", "sleep", "1"] if name.endswith(".ssf") else []
        done = subprocess.run(
            [*prefix, sys.executable, *argv, "-o", str(link), *tail],
            capture_output=True, text=True, timeout=300, env=child_env(), cwd="/",
        )  # fmt: skip
        one_line_error(done, "exists already")
        assert mine.read_text() == "the victim's own data\n", name
        assert link.is_symlink()


def test_restore_as_an_unprivileged_user_obeys_no_planted_state_file(
    no_kernel_link_protection: None, scene: dict[str, Path], open_tmp: Path
) -> None:
    """`forensics restore` as the unprivileged victim: a state file another user planted in the
    predictable /tmp directory is refused with the directory; one in the victim's own directory that
    names the victim's file (as a setting, a path, an escape from /proc/sys) writes nothing there."""
    evil = {
        "pid": 999999999,
        "starttime": 1,
        "boot_id": None,
        "settings": {
            str(scene["user_file"]).replace("/", "."): {"old": "OWNED-BY-ATTACKER", "new": "x"},
            str(scene["user_file"]): {"old": "OWNED-BY-ATTACKER", "new": "x"},
            "..." + str(scene["user_file"]).replace("/", "."): {"old": "OWNED-BY-ATTACKER", "new": "x"},
            "kernel.task_delayacct": {"old": "OWNED-BY-ATTACKER", "new": "1"},
        },
    }
    restore = "from samplers.sysctl_guard import restore_leftovers\nprint('\\n'.join(restore_leftovers()))"
    # Planted: the attacker makes the victim's /tmp state directory and a state file in it.
    taken = Path(f"/tmp/spike-stall-forensics-{VICTIM}")
    shutil.rmtree(taken, ignore_errors=True)
    try:
        assert as_user(ATTACKER, "mkdir", "-m", "0777", str(taken)).returncode == 0
        state = json.dumps(evil)
        assert as_user(ATTACKER, "sh", "-c", f"printf '%s' '{state}' > {taken}/sysctl-999999999.json").returncode == 0
        done = _guard_as_victim(restore)
        assert done.returncode != 0 and "belongs to uid 4243" in done.stderr, done.stdout + done.stderr
        untouched(scene)
    finally:
        shutil.rmtree(taken, ignore_errors=True)
    # In the victim's own directory: every entry ignored, nothing written.
    runtime = open_tmp / "run"
    own = runtime / "spike-stall-forensics"
    own.mkdir(parents=True, mode=0o700)
    (own / "sysctl-999999999.json").write_text(json.dumps(evil))
    for path in (runtime, own, own / "sysctl-999999999.json"):
        os.chown(path, VICTIM, VICTIM)
    runtime.chmod(0o700)
    done = _guard_as_victim(restore, {"XDG_RUNTIME_DIR": str(runtime)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("ignored") == 4, done.stdout
    untouched(scene)
