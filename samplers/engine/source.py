"""Engine sources, the recorder's side: one launcher for every kind, their rows straight to the writer.

Each source (samplers/engine/jack.py, samplers/engine/pipewire.py) runs as

    python -m samplers.engine.KIND --rows-fd R --recorder-fd M --parent-pid P [its own arguments]

in a process of its own, so that parsing the engine's stream never holds the recorder's GIL during a tick,
and so that a source that fails (the server went away, a protocol surprise) cannot take the recording
down with it. Two pipes, the same for every kind:
- R, to the writer: the source's frames (samplers.frames: TABLE rows of the engine tables, EVENT rows,
  META patches). The session makes one such pipe per kind that may run, before the writer starts, and
  the writer reads each to its end; nothing of it passes through the recorder or its tick.
- M, to the recorder: one JSON object per line, {"pids": [...]} (the engine's clients, to record) or
  {"note": "..."} (what could not be recorded: catch-load says it when it comes, one line, whichever the
  kind). Read between ticks, never blocking.
The source dies with the recorder (die_with_recorder): a recorder killed with SIGKILL leaves no source
behind, whichever kind.

When each kind starts: JACK at once, from the session's choice (samplers/engine/choose.py; a source that
waits for its server polls for it itself); PipeWire once a target is a PipeWire client or the daemon
(its socket taken from that target's environment), or at once with --pipewire.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from typing import Any

from samplers import package_env
from samplers.procfs import ProcPaths

PIPEWIRE_LIBRARY = b"libpipewire-0.3.so"
PR_SET_PDEATHSIG = 1  # linux/prctl.h
# How long a PipeWire source started for a target waits for the daemon's socket: a daemon found by --match
# is a target a few ms after its exec, before its socket listens (its start-up took ~50 ms here).
PIPEWIRE_STARTING_S = 5.0


def uses_pipewire(procfs: ProcPaths, pid: int) -> bool:
    """The process is a PipeWire client or the daemon: it maps libpipewire (pw-jack's libjack does too)."""
    try:
        return PIPEWIRE_LIBRARY in procfs.read(pid, "maps")
    except OSError:
        return False


def process_environment(procfs: ProcPaths, pid: int) -> dict[str, str]:
    """A process's environment as it started (/proc/PID/environ; root or the same user)."""
    try:
        raw = procfs.read(pid, "environ")
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def die_with_recorder(parent_pid: int | None) -> None:
    """In a source process: end (SIGTERM, as a stop) when the process that launched it dies, even by
    SIGKILL (prctl PR_SET_PDEATHSIG). A recorder that died before the prctl took effect is caught by
    comparing the parent with the one that launched us (prctl(2): the signal is not sent then)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGTERM)


def tell_recorder(fd: int, **message: Any) -> None:
    """In a source process: one line to the recorder (module docstring). A gone recorder is not an error:
    the source ends by its own stop."""
    if fd < 0:
        return
    with contextlib.suppress(OSError):
        os.write(fd, (json.dumps(message) + "\n").encode())


class EngineProcess:
    """One running source: `python -m samplers.engine.KIND` with its two pipes (module docstring)."""

    def __init__(
        self, kind: str, rows_fd: int, args: list[str], env: dict[str, str] | None = None, keep: Iterable[int] = ()
    ) -> None:
        self.kind = kind
        recorder_read, recorder_write = os.pipe()
        os.set_blocking(recorder_read, False)
        passed = [rows_fd, recorder_write, *keep]
        own = ["--rows-fd", str(rows_fd), "--recorder-fd", str(recorder_write), "--parent-pid", str(os.getpid())]
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", f"samplers.engine.{kind}", *own, *args],
                stdin=subprocess.DEVNULL,
                pass_fds=passed,
                env=package_env(env),
                start_new_session=True,  # Ctrl-C and the terminal's SIGHUP go to the recorder, which stops it
            )
        finally:
            for fd in passed:  # the source holds them now: the writer sees the rows pipe end when it ends
                os.close(fd)
        self.fd = recorder_read
        self.reaped = False
        self.buffer = b""
        self.pids: list[int] = []  # every client pid it named, in order
        self.notes: list[str] = []

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> list[int]:
        """The client pids named since the last call (never blocks); notes are kept in `notes`."""
        new: list[int] = []
        if self.reaped:
            return new
        with contextlib.suppress(BlockingIOError, OSError):
            while chunk := os.read(self.fd, 65536):
                self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            new += [int(p) for p in message.get("pids", ())]
            if message.get("note"):
                self.notes.append(str(message["note"]))
        self.pids += new
        return new

    def terminate(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)

    def reap(self, deadline: float) -> None:
        """Wait for its end until `deadline` (time.monotonic), then kill it; read its last lines."""
        if self.reaped:
            return
        try:
            self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.poll()
        os.close(self.fd)
        self.reaped = True


def clients_to_record(pids: list[int], targets: set[int], follow: bool) -> bool:
    """Whether an engine's clients become targets: when the recording follows the engine (it launched the
    server, --jack, a PipeWire source started for a target), or once one of its clients is a target
    anyway (a --match that caught one client: the rest of its graph comes with it)."""
    return follow or any(pid in targets for pid in pids)


class EngineSources:
    """The engine sources of one recording: when each starts, what each names, and their end.

    `rows_fds`: the write end of the writer's pipe for each kind that may run (the session made them);
    a kind without one never runs. `jack`: the session's JACK choice (samplers/engine/choose.py, as a
    dict), started at once. `pipewire`: "on" starts it at once; "auto" once a target is a PipeWire client
    or the daemon itself; "off" never.
    """

    def __init__(
        self,
        pipewire: str,
        procfs: ProcPaths,
        exclude: set[int],
        rows_fds: dict[str, int] | None = None,
        jack: dict[str, Any] | None = None,
    ) -> None:
        self.pipewire = pipewire
        self.procfs = procfs
        self.exclude = exclude
        self.rows_fds = dict(rows_fds or {})
        self.running: dict[str, EngineProcess] = {}
        self.follow: dict[str, bool] = {}
        self.followed: dict[str, int] = {}  # kind -> how many of its pids were handed to the recording
        self.checked: set[int] = set()
        self.stopped = False
        if jack is not None and "jack" in self.rows_fds:
            self._start_jack(jack)

    @property
    def notes(self) -> list[str]:
        """One line each, for the user: what could not be recorded."""
        return [note for process in self.running.values() for note in process.notes]

    def _launch(
        self, kind: str, args: list[str], follow: bool, env: dict[str, str] | None = None, keep: Iterable[int] = ()
    ) -> None:
        process = EngineProcess(kind, self.rows_fds.pop(kind), args, env, keep)
        self.running[kind] = process
        self.follow[kind] = follow
        self.followed[kind] = 0
        self.exclude.add(process.pid)

    def _start_jack(self, jack: dict[str, Any]) -> None:
        args = ["--wait-s", str(jack.get("wait_s", 0.0))]
        keep: list[int] = []
        if jack.get("server"):
            args += ["--server", jack["server"]]
        if jack.get("explicit"):
            args.append("--explicit")
        if jack.get("log_fd") is not None:  # jackd's output, when catch-load launches it
            args += ["--log-fd", str(jack["log_fd"])]
            keep.append(jack["log_fd"])
        if jack.get("log_file"):
            args += ["--log-file", jack["log_file"]]
        if jack.get("user") is not None:  # another user's server (samplers/engine/choose.py)
            args += ["--as-user", "{}:{}".format(*jack["user"])]
        if jack.get("match"):  # waiting: the server a --match process joins, any name or user
            args += ["--match", jack["match"]]
        self._launch("jack", args, bool(jack.get("follow")), keep=keep)

    def consider(self, pids: list[int], targets_later: bool = False) -> None:
        """New targets: in auto mode, the first that uses PipeWire starts its source (the daemon's socket
        taken from that process's environment, where it differs from ours). `targets_later`: the recording
        takes targets that appear later (--match, a command)."""
        if self.stopped or "pipewire" not in self.rows_fds or self.pipewire == "off":
            return
        from samplers.engine.pipewire import socket_path

        if self.pipewire == "on":
            # Asked for: said at once when no daemon answers, unless targets are still to come (--match, a
            # command): then its daemon may start after us, and is waited for as JACK's server is.
            wait_s = float("inf") if targets_later else 0.0
            self._launch("pipewire", ["--wait-s", str(wait_s), socket_path(dict(os.environ))], True)
            return
        for pid in pids:
            if pid in self.checked:
                continue
            self.checked.add(pid)
            if uses_pipewire(self.procfs, pid):
                env = {**os.environ, **process_environment(self.procfs, pid)}
                # A target that uses PipeWire: its daemon is there or starting (a --match found the daemon
                # itself before its socket was up).
                args = ["--wait-s", str(PIPEWIRE_STARTING_S), socket_path(env)]
                self._launch("pipewire", args, True, env=env)
                return

    def poll(self, targets: set[int]) -> list[int]:
        """The engines' client pids to record that were not handed over before (never blocks)."""
        out: list[int] = []
        for kind, process in self.running.items():
            process.poll()
            if not clients_to_record(process.pids, targets, self.follow[kind]):
                continue
            self.follow[kind] = True  # once one client is a target, every client is followed
            out += process.pids[self.followed[kind] :]
            self.followed[kind] = len(process.pids)
        return list(dict.fromkeys(out))

    def stop(self, timeout_s: float) -> None:
        """End every source (each writes its last rows and an end event to the writer), within timeout_s
        in all; close the pipes of kinds that never started, so that the writer sees every pipe end."""
        self.stopped = True
        deadline = time.monotonic() + timeout_s
        for process in self.running.values():
            process.terminate()
        for process in self.running.values():
            process.reap(deadline)
        for fd in self.rows_fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.rows_fds.clear()
