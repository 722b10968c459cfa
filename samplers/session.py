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
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from capture.errors import ForensicsError
from samplers.recorder import Recorder, RecorderOptions, Status
from samplers.targets import TargetSpec

F_SETPIPE_SZ = 1031  # fcntl.h: a 1 MiB pipe holds ~25 ticks of 100 threads if the writer stalls


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
        if out.is_dir():
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
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=package_env(),
            pass_fds=engine_fds[:1] if engine_fds else (),
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
        self._ready = False

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

    def stop_engine(self) -> None:
        """End the engine source: it sends its last rows and an end event, then closes its pipe."""
        if self.engine is None or self.engine.poll() is not None:
            return
        self.engine.terminate()
        try:
            self.engine.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.engine.kill()
            self.engine.wait()

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Block until the writer has imported everything (call before launching a command to record)."""
        if self._ready:
            return
        assert self.writer.stdout is not None
        ready, _, _ = select.select([self.writer.stdout], [], [], timeout_s)
        if not ready or self.writer.stdout.read(1) != b"R":
            raise ForensicsError("the capture writer process did not start (its error is above)")
        self._ready = True

    def record(self, meta: dict[str, Any]) -> dict[str, Any]:
        assert self.writer.stdin is not None
        self.wait_ready()
        try:
            return self.recorder.run(self.writer.stdin.fileno(), meta)
        except BrokenPipeError:
            raise ForensicsError(
                "the capture writer process died (its error is above); the capture may be partial"
            ) from None

    def add_table(self, name: str, rows: dict[str, list[Any]]) -> None:
        self.recorder.add_table(name, rows)

    def add_meta(self, patch: dict[str, Any]) -> None:
        self.recorder.add_meta(patch)

    def finish(self, trailer: dict[str, Any]) -> None:
        assert self.writer.stdin is not None
        self.stop_engine()
        try:
            self.recorder.finish(trailer)
            self.writer.stdin.close()
        except BrokenPipeError:
            raise ForensicsError("the capture writer process died before the end; the capture has no trailer") from None
        assert self.writer.stdout is not None
        report = self.writer.stdout.read()
        code = self.writer.wait()
        with contextlib.suppress(ValueError):
            trailer.update(json.loads(report))
        if code != 0:
            raise ForensicsError(
                f"the capture writer exited with status {code}; {self.options.output} may be incomplete"
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
