"""The recorder's side of an engine source: a child process that writes frames, read without blocking.

The source runs in its own process so that parsing the engine's stream never holds the recorder's GIL
during a tick, and so that a source that fails (the daemon went away, a protocol surprise) cannot take
the recording down with it: the recorder only forwards the frames it reads, between ticks.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from samplers import frames
from samplers.procfs import ProcPaths

F_SETPIPE_SZ = 1031  # fcntl.h: room for several seconds of engine rows while the recorder is busy
STOP_TIMEOUT_S = 3.0
PIPEWIRE_LIBRARY = b"libpipewire-0.3.so"


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


class EngineProcess:
    """`python -m MODULE ARGS`, its stdout a non-blocking pipe of frames."""

    def __init__(self, module: str, args: list[str]) -> None:
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # the source runs this copy of the toolkit
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            env=env,
            start_new_session=True,  # Ctrl-C goes to the recorder, which stops the source in order
        )
        assert self.proc.stdout is not None
        self.fd = self.proc.stdout.fileno()
        with contextlib.suppress(OSError):
            fcntl.fcntl(self.fd, F_SETPIPE_SZ, 1 << 20)
        os.set_blocking(self.fd, False)
        self.buffer = bytearray()
        self.eof = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> list[tuple[int, bytes]]:
        """The whole frames that arrived since the last call (never blocks)."""
        while not self.eof:
            try:
                chunk = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                self.eof = True
                break
            self.buffer += chunk
        return self._frames()

    def _frames(self) -> list[tuple[int, bytes]]:
        out = []
        offset = 0
        while len(self.buffer) - offset >= frames.FRAME.size:
            kind, length = frames.FRAME.unpack_from(self.buffer, offset)
            end = offset + frames.FRAME.size + length
            if end > len(self.buffer):
                break
            out.append((kind, bytes(self.buffer[offset + frames.FRAME.size : end])))
            offset = end
        del self.buffer[:offset]
        return out

    def stop(self) -> list[tuple[int, bytes]]:
        """Ask the source to end (it writes its last rows and an `engine_source_ended` event), read to
        its end, reap it. A source that does not end within STOP_TIMEOUT_S is killed."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        out: list[tuple[int, bytes]] = []
        while not self.eof and time.monotonic() < deadline:
            select.select([self.fd], [], [], 0.1)
            out += self.poll()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return out


def event_of(kind: int, payload: bytes) -> dict[str, object] | None:
    """The event row a frame carries, if it is an EVENT frame."""
    return json.loads(payload) if kind == frames.EVENT else None


class EngineSources:
    """The engine sources of one recording: whether and when to start them, and what they send.

    `mode` "on" starts the PipeWire source at once; "auto" starts it once a target is a PipeWire client
    or the daemon itself; "off" never. The source's clients become targets (`adopt`).
    """

    def __init__(self, mode: str, procfs: ProcPaths, exclude: set[int]) -> None:
        self.mode = mode
        self.procfs = procfs
        self.exclude = exclude
        self.process: EngineProcess | None = None
        self.notes: list[str] = []  # one line each, for the user: what could not be recorded
        self.checked: set[int] = set()

    def consider(self, pids: list[int]) -> None:
        """New targets: in auto mode, the first that uses PipeWire starts the source (its daemon's socket
        taken from that process's environment, where it differs from ours)."""
        if self.process is not None or self.mode == "off" or (self.mode == "auto" and not pids):
            return
        if self.mode == "on":
            self._start(dict(os.environ))
            return
        for pid in pids:
            if pid in self.checked:
                continue
            self.checked.add(pid)
            if uses_pipewire(self.procfs, pid):
                env = {**os.environ, **process_environment(self.procfs, pid)}
                self._start(env)
                return

    def _start(self, env: dict[str, str]) -> None:
        from samplers.engine.pipewire import socket_path

        self.process = EngineProcess("samplers.engine.pipewire", [socket_path(env)])
        self.exclude.add(self.process.pid)

    def poll(self) -> tuple[list[bytes], list[int]]:
        """(frames to store, pids to record) that arrived since the last call."""
        return self._sort(self.process.poll()) if self.process is not None else ([], [])

    def stop(self) -> list[bytes]:
        if self.process is None:
            return []
        stored, _ = self._sort(self.process.stop())
        return stored

    def _sort(self, received: list[tuple[int, bytes]]) -> tuple[list[bytes], list[int]]:
        stored: list[bytes] = []
        pids: list[int] = []
        for kind, payload in received:
            if kind == frames.ENGINE_TARGETS:
                pids += json.loads(payload)["pids"]
                continue
            event = event_of(kind, payload)
            if event is not None and event["kind"] == "engine_source_unavailable":
                self.notes.append(str(event["text"]))
            stored.append(frames.encode(kind, payload))
        return stored, pids
