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
        self.writer = subprocess.Popen(
            [sys.executable, "-m", "samplers.writer_process", str(out), *(["--ebpf"] if options.ebpf else [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=package_env(),
        )
        assert self.writer.stdin is not None
        with contextlib.suppress(OSError):
            fcntl.fcntl(self.writer.stdin.fileno(), F_SETPIPE_SZ, 1 << 20)
        spec.exclude.update({os.getpid(), self.writer.pid})
        self.recorder = Recorder(spec, options, on_status=on_status)
        self._ready = False

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
        if self.writer.stdin is not None:
            with contextlib.suppress(OSError):
                self.writer.stdin.close()
        try:
            self.writer.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.writer.kill()
