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
from samplers import package_env
from samplers.recorder import CALM_END_NS, Recorder, RecorderOptions, Status
from samplers.targets import TargetSpec


def writer_env() -> dict[str, str]:
    """The writer process's environment: package_env(), with Arrow's C++ default memory pool on the system
    allocator unless the user chose one. pa.set_memory_pool() in the writer (_hold_freed_memory) moves only
    what pyarrow allocates; the IPC writer's compressed buffers come from the C++ default, mimalloc, which
    purges its freed 2 MiB huge pages and faults them in again, zeroed: 3-4 % of the live writer's samples on the
    Bitwig shape (perf -p, 2026-12-06), none with this."""
    env = package_env()
    env.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    return env


F_SETPIPE_SZ = 1031  # fcntl.h: a 1 MiB pipe holds ~25 ticks of 100 threads if the writer stalls
# From a stop request to the writer's exit (END_DRAIN_NS of it for the hand-over): a stop ends the whole
# recording within about 2 s whatever the writer does. A writer still busy then finishes on its own.
WRITER_END_BUDGET_NS = 800_000_000


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
        # One pipe per engine kind that may run (samplers/engine/source.py): the writer reads each to its
        # end, the source writes its rows into it; nothing of it passes through the recorder's tick.
        engine_pipes: dict[str, tuple[int, int]] = {}
        if options.engine is not None:
            engine_pipes["jack"] = os.pipe()
        if options.pipewire != "off":
            engine_pipes["pipewire"] = os.pipe()
        engine_args = [arg for read_end, _ in engine_pipes.values() for arg in ("--engine-fd", str(read_end))]
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
            env=writer_env(),
            pass_fds=tuple(read_end for read_end, _ in engine_pipes.values()),
            # Its own process group: Ctrl-C and the terminal's SIGHUP reach the recorder alone (even
            # while the writer is still importing), and the writer ends on EOF after the trailer.
            process_group=0,
        )
        for read_end, _ in engine_pipes.values():
            os.close(read_end)
        assert self.writer.stdin is not None
        with contextlib.suppress(OSError):
            fcntl.fcntl(self.writer.stdin.fileno(), F_SETPIPE_SZ, 1 << 20)
        spec.exclude.update({os.getpid(), self.writer.pid})
        self.recorder = Recorder(
            spec, options, on_status=on_status, engine_rows_fds={k: w for k, (_, w) in engine_pipes.items()}
        )
        self.recorder.writer_pid = self.writer.pid
        self._ready = False
        self.notes: list[str] = []  # one-line messages about the end (a writer that could not finish)

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

    def finish(self, trailer: dict[str, Any], say: Callable[[str], None] | None = None) -> None:
        """Send the trailer and wait for the writer to finish the file; `say`: one line for the user when that
        takes more than a second (the eBPF sampler's rows are made then)."""
        assert self.writer.stdin is not None
        stopped = self.recorder.stop_requested_ns
        if self.recorder.urgent and stopped is not None:
            deadline = stopped + WRITER_END_BUDGET_NS
        else:
            # The recording ended by itself: the capture must be whole when we return. The eBPF sampler's rows are
            # made after the recording (samplers/ebpf/deferred_rows.py: 2-3 % of its length in CPU on the Bitwig
            # shape), so the wait grows with its length.
            deadline = time.monotonic_ns() + CALM_END_NS + int(trailer.get("duration_ns") or 0) // 10
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
            code = self._wait_writer(deadline, say)
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

    def _wait_writer(self, deadline_ns: int, say: Callable[[str], None] | None) -> int:
        """The writer's exit status, waited for until deadline_ns (subprocess.TimeoutExpired after it)."""
        if say is not None and deadline_ns - time.monotonic_ns() > 1_000_000_000:
            with contextlib.suppress(subprocess.TimeoutExpired):
                return self.writer.wait(timeout=1.0)
            deferred = self.options.sampler == "ebpf" and self.options.ring is None  # writer_process.CaptureSink
            why = " (making the eBPF sampler's rows from the frames it kept)" if deferred else ""
            say(f"the capture writer is finishing {self.options.output}{why}...")
        return self.writer.wait(timeout=max(0.2, (deadline_ns - time.monotonic_ns()) * 1e-9))

    def abandon(self) -> None:
        """Close the pipe without a trailer (an error ended the recording): keep what was written."""
        self.recorder.engines.stop(timeout_s=2.0)
        self.recorder.release()
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
