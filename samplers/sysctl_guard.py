"""Turn kernel switches on for a recording and put the old values back, even after a crash.

`kernel.task_delayacct` (per-thread blkio/swapin/reclaim/... delays, 5.14+; default 0) and
`kernel.sched_schedstats` (wait/sleep/block sums in /proc/<pid>/task/<tid>/sched; exists only with
CONFIG_SCHEDSTATS) cost a little on every context switch, so distributions ship them off. A recording
turns them on and must leave the machine as it found it:

    guard = SysctlGuard({"kernel.task_delayacct": "1", "kernel.sched_schedstats": "1"})
    outcomes = guard.apply()        # one SettingOutcome per switch: set / already / missing / denied / error
    ...record...
    guard.restore()                 # also run by `with guard:`, atexit, and SIGTERM/SIGHUP handlers

Crash safety: before changing anything, apply() writes a state file (owner pid + its start time, boot
id, old and new values) under `default_state_dir()`; restore() deletes it after writing the old values
back. A recorder killed with SIGKILL leaves the file behind: `forensics restore` (restore_leftovers)
puts those values back once its owner is gone, and says what it did.

Rules:
- Restore writes the old value only if the switch still holds the value we set; if someone changed it
  during the recording, it is left alone and the message says so.
- Two recordings at once: the one that ends first hands its old value to the other (live) one, so the
  last one out restores the value from before the first.
- Without root (CAP_SYS_ADMIN: kernel/delayacct.c sysctl_delayacct() and kernel/sched/core.c
  sysctl_schedstats() check it), the outcome is "denied" with one plain line; nothing is raised.

The procfs root is a parameter (tests point it at a temporary directory).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import json
import os
import re
import secrets
import signal
import stat
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from capture.errors import ForensicsError

STATE_PREFIX = "sysctl-"
STATE_SUFFIX = ".json"

# Why each switch matters, for the one-line messages.
PURPOSE = {
    "kernel.task_delayacct": "per-thread IO/reclaim/swap delay accounting",
    "kernel.sched_schedstats": "wait/sleep/block sums in the sched file",
}
WHY_MISSING = {
    "kernel.task_delayacct": "this kernel has no kernel.task_delayacct (before 5.14 delay accounting is always on "
    "with CONFIG_TASK_DELAY_ACCT, or not built at all)",
    "kernel.sched_schedstats": "this kernel has no kernel.sched_schedstats (not built with CONFIG_SCHEDSTATS)",
}


@dataclass(frozen=True)
class SettingOutcome:
    name: str
    status: str  # "set" (we changed it), "already" (it had the value), "missing", "denied", "error"
    old: str | None
    new: str | None
    message: str
    at_ns: int | None = None  # CLOCK_MONOTONIC ns when we changed it ("set" only)

    @property
    def in_force(self) -> bool:
        """True when the switch holds the wanted value for the recording."""
        return self.status in ("set", "already")


# The only settings catch-load changes, with the only values it writes. `forensics restore` writes
# nothing else, whatever a state file says: the file names a setting, and a setting names a path.
ALLOWED_VALUES: dict[str, re.Pattern[str]] = {
    "kernel.task_delayacct": re.compile(r"[01]"),
    "kernel.sched_schedstats": re.compile(r"[01]"),
}
_SYSCTL_NAME = re.compile(r"[a-z0-9_]+(\.[a-z0-9_-]+)+")


def sysctl_path(name: str, proc: str = "/proc") -> Path:
    """/proc/sys/a/b/c for a.b.c; a name that could leave /proc/sys (a slash, "..") is refused."""
    if not _SYSCTL_NAME.fullmatch(name):
        raise ValueError(f"not a sysctl name: {name!r}")
    return Path(proc, "sys", *name.split("."))


def invalid_change(name: object, change: object) -> str | None:
    """Why a state file's entry is not one catch-load could have written (None: it is)."""
    if not isinstance(name, str) or name not in ALLOWED_VALUES:
        return f"{name!r} is not a setting catch-load changes"
    if not isinstance(change, dict):
        return f"{name}: the entry is not an object"
    for key in ("old", "new"):
        value = change.get(key)
        if not isinstance(value, str) or not ALLOWED_VALUES[name].fullmatch(value):
            return f"{name}: {key} value {value!r} is not one catch-load writes"
    return None


def read_sysctl(name: str, proc: str = "/proc") -> str | None:
    try:
        return sysctl_path(name, proc).read_text().strip()
    except OSError:
        return None


def _write_sysctl(name: str, value: str, proc: str) -> None:
    # os.write, not open().write(): the error of a buffered write would surface at close, or be lost.
    fd = os.open(sysctl_path(name, proc), os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode() + b"\n")
    finally:
        os.close(fd)


def default_state_dir() -> Path:
    """/run/spike-stall-forensics for root; $XDG_RUNTIME_DIR (or /tmp) per user otherwise.

    A tmpfs on purpose: a reboot resets the sysctls and empties the directory together. The /tmp name
    is predictable: `secure_state_dir` refuses it when someone else made it first.
    """
    if os.geteuid() == 0:
        return Path("/run/spike-stall-forensics")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime, "spike-stall-forensics")
    return Path(f"/tmp/spike-stall-forensics-{os.getuid()}")


def _boot_id(proc: str) -> str | None:
    return read_sysctl("kernel.random.boot_id", proc)


def _process_starttime(pid: int, proc: str) -> int | None:
    """Field 22 of /proc/<pid>/stat (clock ticks after boot): tells a reused pid apart."""
    try:
        raw = Path(proc, str(pid), "stat").read_bytes()
    except OSError:
        return None
    tokens = raw[raw.rfind(b")") + 2 :].split()
    try:
        return int(tokens[19])
    except (IndexError, ValueError):
        return None


def _owner_alive(state: Mapping[str, Any], proc: str) -> bool:
    if state.get("boot_id") is not None and state.get("boot_id") != _boot_id(proc):
        return False  # written before the last reboot
    pid = state.get("pid")
    if not isinstance(pid, int):
        return False
    start = _process_starttime(pid, proc)
    return start is not None and start == state.get("starttime")


def secure_state_dir(state_dir: Path, create: bool = True) -> None:
    """Make (or check) the state directory: a real directory of this user that no one else can write.

    Anything else is refused in one line: in a directory another user made (or can write), that user
    could plant state files that `restore` obeys, or links that our writes follow."""
    if create:
        try:
            os.mkdir(state_dir, 0o755)
        except FileExistsError:
            pass
        except OSError as err:
            raise ForensicsError(f"cannot make the state directory {state_dir}: {err.strerror}") from None
    try:
        info = os.lstat(state_dir)
    except OSError as err:
        raise ForensicsError(f"cannot use the state directory {state_dir}: {err.strerror}") from None
    problem = None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        problem = "it is not a directory (a link or a file)"
    elif info.st_uid != os.geteuid():
        problem = f"it belongs to uid {info.st_uid}, not to you (uid {os.geteuid()})"
    elif info.st_mode & 0o022:
        problem = f"others can write in it (mode {stat.S_IMODE(info.st_mode):o})"
    if problem is not None:
        raise ForensicsError(
            f"refusing the state directory {state_dir}: {problem}; remove it, or set XDG_RUNTIME_DIR to a "
            "private directory"
        )


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    """Serialise guards of concurrent recordings (flock on a lock file in the state directory)."""
    secure_state_dir(state_dir)
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(state_dir / ".lock", flags, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    # A new file with a random name (O_EXCL: never through a link), renamed over the old one.
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        with open(fd, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _read_states(state_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    states = []
    for path in sorted(state_dir.glob(f"{STATE_PREFIX}*{STATE_SUFFIX}")):
        try:
            # O_NONBLOCK: a named pipe planted under a state file's name must not block the open; anything but
            # a regular file is then ignored like any unreadable one.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
            with open(fd, "rb") as fh:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    continue
                state = json.loads(fh.read(1 << 16))
        except (OSError, ValueError, RecursionError):  # a crafted file (64 KiB of "[") is ignored too
            continue
        if isinstance(state, dict):
            states.append((path, state))
    return states


class SysctlGuard:
    """Sets sysctls for the life of a recording; see the module docstring for the guarantees."""

    def __init__(
        self,
        wanted: Mapping[str, str],
        *,
        proc: str = "/proc",
        state_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.wanted = dict(wanted)
        self.proc = proc
        self.state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
        self.state_path = self.state_dir / f"{STATE_PREFIX}{os.getpid()}{STATE_SUFFIX}"
        self.outcomes: dict[str, SettingOutcome] = {}
        self._changed: dict[str, dict[str, str]] = {}  # name -> {"old": ..., "new": ...}
        self._previous_handlers: dict[int, Any] = {}
        self._restored = False

    # -- apply -------------------------------------------------------------------------------------
    def apply(self) -> list[SettingOutcome]:
        """Set every wanted switch; never raises for a missing switch or a refusal (see the outcomes)."""
        to_change: dict[str, dict[str, str]] = {}
        for name, value in self.wanted.items():
            current = read_sysctl(name, self.proc)
            if current is None:
                self.outcomes[name] = SettingOutcome(
                    name, "missing", None, None, f"{name}: {WHY_MISSING.get(name, 'absent')}"
                )
            elif current == value:
                self.outcomes[name] = SettingOutcome(name, "already", current, value, f"{name} is already {value}")
            else:
                to_change[name] = {"old": current, "new": value}
        if not to_change:
            return list(self.outcomes.values())
        try:
            with _locked(self.state_dir):
                # The state file goes first: a crash between the two leaves a file that restores harmlessly.
                self._changed = dict(to_change)
                self._save_state()
                for name, change in to_change.items():
                    self.outcomes[name] = self._set_one(name, change["old"], change["new"])
                    if self.outcomes[name].status != "set":
                        del self._changed[name]
                self._save_state()
        except OSError as err:  # the state directory itself cannot be written (no root): say so
            for name, change in to_change.items():
                if name not in self.outcomes:
                    self.outcomes[name] = self._refused(name, change["old"], change["new"], err)
        if self._changed:
            atexit.register(self.restore)
        return [self.outcomes[name] for name in self.wanted]

    def _set_one(self, name: str, old: str, new: str) -> SettingOutcome:
        try:
            _write_sysctl(name, new, self.proc)
        except OSError as err:
            return self._refused(name, old, new, err)
        changed_at = time.monotonic_ns()
        after = read_sysctl(name, self.proc)
        if after != new:
            return SettingOutcome(name, "error", old, new, f"{name}: wrote {new} but it reads back {after}")
        purpose = PURPOSE.get(name, name)
        message = f"{name}: {old} -> {new} for this recording ({purpose}); restored at the end"
        if name == "kernel.task_delayacct":
            message += " (threads that exist already get no delay accounting: the kernel sets it up at fork)"
        return SettingOutcome(name, "set", old, new, message, at_ns=changed_at)

    def _refused(self, name: str, old: str, new: str, err: OSError) -> SettingOutcome:
        purpose = PURPOSE.get(name, name)
        if err.errno in (errno.EPERM, errno.EACCES, errno.EROFS):
            return SettingOutcome(
                name, "denied", old, new, f"{name} stays {old}: changing it needs root; recording without {purpose}"
            )
        return SettingOutcome(
            name, "error", old, new, f"{name} stays {old}: {err.strerror or err}; recording without {purpose}"
        )

    def _save_state(self) -> None:
        if not self._changed:
            with contextlib.suppress(FileNotFoundError):
                self.state_path.unlink()
            return
        _write_json(
            self.state_path,
            {
                "pid": os.getpid(),
                "starttime": _process_starttime(os.getpid(), self.proc),
                "boot_id": _boot_id(self.proc),
                "written_at": time.time(),
                "settings": self._changed,
            },
        )

    # -- restore -----------------------------------------------------------------------------------
    def restore(self) -> list[str]:
        """Put back what apply() changed (idempotent). One message per switch."""
        if self._restored or not self._changed:
            self._restored = True
            return []
        self._restored = True
        with _locked(self.state_dir):
            others = [
                (path, state)
                for path, state in _read_states(self.state_dir)
                if path != self.state_path and _owner_alive(state, self.proc)
            ]
            messages = []
            failed: dict[str, dict[str, str]] = {}
            for name, change in self._changed.items():
                heir = next(
                    (
                        (p, s)
                        for p, s in reversed(others)
                        if isinstance(s.get("settings"), dict) and invalid_change(name, s["settings"].get(name)) is None
                    ),
                    None,
                )
                if heir is not None:
                    # Another recording still wants this switch: it inherits our old value and restores last.
                    heir_path, heir_state = heir
                    heir_state["settings"][name]["old"] = change["old"]
                    _write_json(heir_path, heir_state)
                    messages.append(
                        f"{name}: left at {change['new']} for the recording of pid {heir_state['pid']}, "
                        f"which will restore {change['old']}"
                    )
                    continue
                done, message = restore_one(name, change["old"], change["new"], self.proc)
                messages.append(message)
                if done:
                    continue
                failed[name] = change
            self._changed = failed
            self._save_state()  # removes the file when everything was restored
        return messages

    # -- lifetime ----------------------------------------------------------------------------------
    def install_signal_handlers(self, signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGHUP)) -> None:
        """Restore on these signals, then behave as before (chain to the old handler, or die by it).

        Call from the main thread (Python delivers signals there). SIGINT needs nothing: KeyboardInterrupt
        unwinds through `with guard:` or the caller's finally.
        """
        for signum in signals:
            self._previous_handlers[signum] = signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.restore()
        previous = self._previous_handlers.get(signum, signal.SIG_DFL)
        if callable(previous):
            previous(signum, frame)
            return
        if previous == signal.SIG_IGN:
            return
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def __enter__(self) -> SysctlGuard:
        self.apply()
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()


def restore_one(name: str, old: str, new: str, proc: str = "/proc") -> tuple[bool, str]:
    """Write `old` back if the switch still holds `new`. (done, message); done is False only when the
    write was refused, so the caller keeps its state file for a later `forensics restore`."""
    problem = invalid_change(name, {"old": old, "new": new})
    if problem is not None:
        return True, f"not restored: {problem}"
    current = read_sysctl(name, proc)
    if current is None:
        return True, f"{name}: no longer present; nothing to restore"
    if current == old:
        return True, f"{name} is {old} already"
    if current != new:
        return True, f"{name}: left at {current} (changed from {new} by someone else during the recording; was {old})"
    try:
        _write_sysctl(name, old, proc)
    except OSError as err:
        return False, f"{name}: could not restore {old} ({err.strerror}); run `forensics restore` as root"
    return True, f"{name}: restored {new} -> {old}"


def restore_leftovers(
    proc: str = "/proc", state_dir: str | os.PathLike[str] | None = None, force: bool = False
) -> list[str]:
    """Restore what recorders that died left changed (their state files). Messages, one per line.

    A state file whose owner is still running is left alone (that recorder restores at its end),
    unless `force`.
    """
    directory = Path(state_dir) if state_dir is not None else default_state_dir()
    if not os.path.lexists(directory):
        return ["nothing to restore: no recording left kernel settings changed"]
    secure_state_dir(directory, create=False)
    messages: list[str] = []
    with _locked(directory):
        for path, state in _read_states(directory):
            pid = state.get("pid")
            if _owner_alive(state, proc) and not force:
                messages.append(
                    f"recording pid {pid} is still running; it restores its settings when it ends "
                    "(use --force to restore now)"
                )
                continue
            if state.get("boot_id") is not None and state.get("boot_id") != _boot_id(proc):
                messages.append(f"state of pid {pid} is from before the last reboot: the kernel reset those settings")
                path.unlink()
                continue
            all_done = True
            settings = state.get("settings")
            for name, change in settings.items() if isinstance(settings, dict) else ():
                problem = invalid_change(name, change)
                if problem is not None:
                    messages.append(f"{path.name}: ignored: {problem}")
                    continue
                done, message = restore_one(name, change["old"], change["new"], proc)
                messages.append(f"{message} (left by pid {pid})" if done else message)
                all_done = all_done and done
            if all_done:
                path.unlink()
    if not messages:
        messages.append("nothing to restore: no recording left kernel settings changed")
    return messages
