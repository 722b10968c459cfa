"""A recording: the writer process, the recorder's run, and the end of the file, as one object.

session = RecordingSession(spec, options)
trailer = session.record(meta)        # until the targets exit, the duration ends, or stop()
session.add_table("truth", rows)      # optional, before finish
session.finish(trailer)               # trailer written, writer waited for
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from capture.errors import ForensicsError
from samplers.recorder import CALM_END_NS, Recorder, RecorderOptions, Status
from samplers.targets import TargetSpec

F_SETPIPE_SZ = 1031  # fcntl.h: a 1 MiB pipe holds ~25 ticks of 100 threads if the writer stalls
# From a stop request to the writer's exit (END_DRAIN_NS of it for the hand-over): a stop ends the whole
# recording within about 2 s whatever the writer does. A writer still busy then finishes on its own.
WRITER_END_BUDGET_NS = 800_000_000


def package_env() -> dict[str, str]:
    """The environment for child processes: they import this copy of the toolkit, not another."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class RecordingSession:
    def __init__(
        self, spec: TargetSpec, options: RecorderOptions, on_status: Callable[[Status], None] | None = None
    ) -> None:
        self.spec = spec
        self.options = options
        out = Path(options.output)
        if out.is_dir() and options.ring is None:  # a ring's segments go into a directory
            raise ForensicsError(f"--output {out} is a directory; give a file name")
        if not out.parent.exists():
            raise ForensicsError(f"cannot write {out}: directory {out.parent} does not exist")
        if not os.access(out.parent, os.W_OK):
            raise ForensicsError(f"cannot write {out}: no permission to write in {out.parent}")
        engine_args: list[str] = []
        engine_fds: tuple[int, int] | None = None
        if options.engine is not None:
            # The engine source's rows go straight to the writer, its client pids to the recorder's
            # discovery: nothing of it passes through the tick (see samplers/engine/jack.py).
            engine_fds = os.pipe()
            engine_args = ["--engine-fd", str(engine_fds[0])]
        self.writer = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "samplers.writer_process",
                str(out),
                *(["--ebpf"] if options.ebpf else []),
                *engine_args,
                *(["--ring", str(options.ring["segment_ns"]), str(options.ring["keep_ns"])] if options.ring else []),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=package_env(),
            pass_fds=engine_fds[:1] if engine_fds else (),
            # Its own process group: Ctrl-C and the terminal's SIGHUP reach the recorder alone (even
            # while the writer is still importing), and the writer ends on EOF after the trailer.
            process_group=0,
        )
        assert self.writer.stdin is not None
        with contextlib.suppress(OSError):
            fcntl.fcntl(self.writer.stdin.fileno(), F_SETPIPE_SZ, 1 << 20)
        spec.exclude.update({os.getpid(), self.writer.pid})
        self.engine: subprocess.Popen[bytes] | None = None
        if engine_fds is not None and options.engine is not None:
            os.close(engine_fds[0])
            self.engine = self._start_engine(options.engine, engine_fds[1], spec)
        self.recorder = Recorder(spec, options, on_status=on_status)
        self.recorder.writer_pid = self.writer.pid
        self._ready = False
        self.notes: list[str] = []  # one-line messages about the end (a writer that could not finish)

    @staticmethod
    def _start_engine(engine: dict[str, Any], rows_fd: int, spec: TargetSpec) -> subprocess.Popen[bytes]:
        pids_read, pids_write = os.pipe()
        os.set_blocking(pids_read, False)
        args = [sys.executable, "-m", f"samplers.engine.{engine['kind']}", "--rows-fd", str(rows_fd)]
        args += ["--pids-fd", str(pids_write), "--wait-s", str(engine.get("wait_s", 0.0))]
        keep = [rows_fd, pids_write]
        if engine.get("server"):
            args += ["--server", engine["server"]]
        if engine.get("explicit"):
            args.append("--explicit")
        if engine.get("log_fd") is not None:
            args += ["--log-fd", str(engine["log_fd"])]
            keep.append(engine["log_fd"])
        if engine.get("log_file"):
            args += ["--log-file", engine["log_file"]]
        process = subprocess.Popen(args, pass_fds=keep, env=package_env())
        for fd in keep:
            os.close(fd)
        spec.engine_pids_fd = pids_read
        spec.engine_follow = bool(engine.get("follow"))
        spec.exclude.add(process.pid)
        return process

    def stop_engine(self, timeout_s: float = 10.0) -> None:
        """End the engine source: it sends its last rows and an end event, then closes its pipe."""
        if self.engine is None or self.engine.poll() is not None:
            return
        self.engine.terminate()
        try:
            self.engine.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.engine.kill()
            self.engine.wait()

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Block until the writer has imported everything (call before launching a command to record)."""
        if self._ready:
            return
        assert self.writer.stdout is not None
        deadline = time.monotonic() + timeout_s
        ready: list[Any] = []
        while not ready and time.monotonic() < deadline:
            # A stop request meanwhile (Ctrl-C during the writer's imports) is kept: the recording then
            # ends at its first tick, and the capture says it was interrupted.
            ready, _, _ = select.select([self.writer.stdout], [], [], 0.1)
        if not ready or self.writer.stdout.read(1) != b"R":
            code: int | None = None
            if ready:  # its end of the pipe closed: it is gone, or going
                with contextlib.suppress(subprocess.TimeoutExpired):
                    code = self.writer.wait(timeout=5)
            if code is None:
                why = f"not ready after {timeout_s:.0f} s"
            elif code < 0:  # a signal leaves no error of its own: name it
                why = f"it was killed by {signal.Signals(-code).name}"
            else:
                why = f"it exited with status {code}; its error, if any, is above"
            raise ForensicsError(f"the capture writer process did not start ({why})")
        self._ready = True

    def record(self, meta: dict[str, Any]) -> dict[str, Any]:
        assert self.writer.stdin is not None
        self.wait_ready()
        try:
            return self.recorder.run(self.writer.stdin.fileno(), meta)
        except BrokenPipeError:
            raise self.writer_failed() from None

    def writer_failed(self) -> ForensicsError:
        """The writer went away mid-recording: why, in one line (its own error, or the signal)."""
        try:
            code = self.writer.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return ForensicsError(f"the capture writer stopped reading; {self.options.output} may be incomplete")
        last: dict[str, Any] = {}
        why = _writer_error(self.writer, last) or (
            f"it was killed by {signal.Signals(-code).name}" if code < 0 else f"it exited with status {code}"
        )
        kept = f"{self.options.output} holds what it wrote before" if last.get("wrote", True) else "nothing was written"
        return ForensicsError(f"the capture writer stopped: {why}; {kept}")

    def add_table(self, name: str, rows: dict[str, list[Any]]) -> None:
        self.recorder.add_table(name, rows)

    def add_meta(self, patch: dict[str, Any]) -> None:
        self.recorder.add_meta(patch)

    def finish(self, trailer: dict[str, Any]) -> None:
        assert self.writer.stdin is not None
        # A stop by signal is bounded (WRITER_END_BUDGET_NS): the engine source gets a share of it.
        self.stop_engine(timeout_s=0.3 if self.recorder.urgent else 10.0)
        stopped = self.recorder.stop_requested_ns
        if self.recorder.urgent and stopped is not None:
            deadline = stopped + WRITER_END_BUDGET_NS
        else:  # the recording ended by itself: the capture must be whole when we return
            deadline = time.monotonic_ns() + CALM_END_NS
        try:
            sent = self.recorder.finish(trailer, max(deadline - time.monotonic_ns(), 200_000_000))
            self.writer.stdin.close()
        except BrokenPipeError:
            raise self.writer_failed() from None
        if not sent:
            self.notes.append(
                f"the capture writer did not take the end of the recording in time: {self.options.output} "
                "ends without its trailer (the ticks it holds read back; their count is unknown)"
            )
        try:
            code = self.writer.wait(timeout=max(0.2, (deadline - time.monotonic_ns()) * 1e-9))
        except subprocess.TimeoutExpired:
            self.notes.append(
                f"the capture writer (pid {self.writer.pid}) is still finishing {self.options.output}; "
                "it completes the file on its own"
            )
            return
        error = _writer_error(self.writer, trailer)
        if code != 0:
            why = error or (f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}")
            if trailer.pop("lost", False):  # the writer's line says it all: there is no file to read
                raise ForensicsError(str(why))
            if not trailer.pop("wrote", True):
                raise ForensicsError(f"the capture writer stopped: {why}; nothing was written")
            raise ForensicsError(
                f"the capture writer failed at the end ({why}); {self.options.output} may be incomplete"
            )

    def abandon(self) -> None:
        """Close the pipe without a trailer (an error ended the recording): keep what was written."""
        self.stop_engine()
        if self.writer.stdin is not None:
            with contextlib.suppress(OSError):
                self.writer.stdin.close()
        try:
            self.writer.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.writer.kill()


def _writer_error(writer: subprocess.Popen[bytes], report: dict[str, Any] | None = None) -> str | None:
    """The writer's last words on its stdout: a JSON object, with "error" when it failed."""
    if writer.stdout is None:
        return None
    ready, _, _ = select.select([writer.stdout], [], [], 0.5)
    if not ready:
        return None
    try:
        last = json.loads(writer.stdout.read() or b"{}")
    except ValueError:
        return None
    if not isinstance(last, dict):
        return None
    error = last.pop("error", None)
    if report is not None:
        report.update(last)
    return str(error) if error else None
