"""Starting and ending the watcher process from catch-load (README, "Flight recorder")."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

# The watcher saves what is left and writes flight.ssf after the recording: it may analyse a last window.
FINISH_TIMEOUT_S = 120.0


def ring_directory(out: Path) -> Path:
    """Where the segments go: a hidden directory inside the output directory."""
    return out / ".ring"


class WatcherProcess:
    """The watcher (`python -m forensics.flight.watch`), its status as it last reported it."""

    def __init__(self, config: dict[str, Any], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "forensics.flight.watch", json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            process_group=0,  # Ctrl-C reaches the recorder alone; the watcher ends at the end of its stdin
        )
        assert self.process.stdout is not None
        os.set_blocking(self.process.stdout.fileno(), False)
        self.status: dict[str, Any] = {}
        self._partial = b""
        self.finished = False
        self.note: str | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def read_status(self) -> dict[str, Any]:
        """The watcher's latest counts (non-blocking)."""
        assert self.process.stdout is not None
        with contextlib.suppress(BlockingIOError, OSError, ValueError):
            while chunk := os.read(self.process.stdout.fileno(), 65536):
                self._partial += chunk
        *lines, self._partial = self._partial.split(b"\n")
        for line in lines:
            with contextlib.suppress(ValueError):
                value = json.loads(line)
                if isinstance(value, dict):
                    self.status = value
        return self.status

    def finish(self, timeout_s: float = FINISH_TIMEOUT_S) -> dict[str, Any]:
        """End of the recording: the watcher saves what is left and writes flight.ssf; its last status.
        A watcher still busy after `timeout_s` (a loaded machine) is left to finish on its own: `note` says so."""
        if self.finished:
            return self.status
        self.finished = True
        assert self.process.stdout is not None
        os.set_blocking(self.process.stdout.fileno(), True)
        try:
            rest, _ = self.process.communicate(timeout=timeout_s)  # closes its stdin: the recording ended
        except subprocess.TimeoutExpired:
            self.note = (
                f"the flight recorder's watcher (pid {self.pid}) is still saving windows; it writes "
                "flight.ssf when done (windows saved so far are whole)"
            )
            return {**self.read_status(), "done": False}
        self._partial += (rest or b"") + b"\n"
        return self.read_status()


_SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9}
_SIZE_UNITS |= {"kib": 1024, "mib": 1024**2, "gib": 1024**3, "t": 10**12, "tb": 10**12}


def parse_size_bytes(text: str) -> int:
    """ "500MB" -> 500_000_000, "2GiB", "1e9"; ValueError (one line) otherwise."""
    spec = text.strip().lower()
    number = spec.rstrip("abcdefghijklmnopqrstuvwxyz ")
    unit = spec[len(number) :].strip()
    try:
        value = float(number) * _SIZE_UNITS[unit]
    except (ValueError, KeyError):
        raise ValueError(f"{text!r} is not a size (examples: 500MB, 2GB, 1GiB)") from None
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{text!r} must be a size above zero")
    return int(value)
