"""Progress of long work on stderr, only when stderr is a terminal (never in a pipe, a file or CI logs).

One line, rewritten in place (carriage return), at most 99 columns, no colour: `forensics report: finding
stalls (3/7, 2.1 s)`. Cleared when the work ends, so the terminal keeps only the result lines.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

WIDTH = 99


class Progress:
    def __init__(
        self, prog: str, total: int | None = None, *, stream: TextIO | None = None, enabled: bool | None = None
    ):
        self.prog = prog
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.count = 0
        self.started = time.monotonic()
        self._shown = False

    def step(self, what: str) -> None:
        """A new stage of the work begins."""
        self.count += 1
        if not self.enabled:
            return
        where = f"{self.count}/{self.total}, " if self.total else ""
        line = f"{self.prog}: {what} ({where}{time.monotonic() - self.started:.1f} s)"
        self.stream.write("\r" + line[:WIDTH].ljust(WIDTH))
        self.stream.flush()
        self._shown = True

    def done(self) -> None:
        if self.enabled and self._shown:
            self.stream.write("\r" + " " * WIDTH + "\r")
            self.stream.flush()
            self._shown = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.done()
