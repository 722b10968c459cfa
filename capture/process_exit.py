"""How a process that wrote parquet ends: the capture writer (samplers/writer_process.py) and the flight
recorder's watcher (forensics/flight/watch.py)."""

from __future__ import annotations

import contextlib
import os
import sys


def exit_without_teardown(code: int) -> None:
    """End a process that wrote parquet, once all it writes is written and closed: flush Python's own
    streams and leave at once, without the interpreter's teardown. Arrow's thread pools torn down at exit
    can abort the process ("terminate called without an active exception", SIGABRT; apache/arrow#34314):
    a CI run saw the capture writer do so after its capture was whole, trailer and all, and catch-load,
    rightly judging the writer by its exit, reported the recording as failed."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
