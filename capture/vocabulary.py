"""The words every layer shares: scheduling policy names, the thread state alphabet, durations.

Defined once here, at the bottom, so that the samplers that write a capture, the analyses that read it,
the lab and the CLI name things the same way. Imports nothing of the project (and no numpy: the recorder
imports it).
"""

from __future__ import annotations

import math
import re
import stat

# Scheduling policies as stat field 41 and sched_getscheduler(2) give them (include/uapi/linux/sched.h).
POLICY_NAMES = {0: "OTHER", 1: "FIFO", 2: "RR", 3: "BATCH", 5: "IDLE", 6: "DEADLINE", 7: "EXT"}
RT_POLICIES = (1, 2, 6)  # SCHED_FIFO, SCHED_RR, SCHED_DEADLINE


def policy_name(policy: int) -> str:
    """OTHER, FIFO, RR...; the number itself for a policy this table does not know."""
    return POLICY_NAMES.get(int(policy), str(int(policy)))


# The state letter (stat field 3), as analyses code it in one byte: its index here; 0 = not known.
# Letters from fs/proc/array.c task_state_array: R running/runnable, S sleeping (interruptible),
# D disk sleep (uninterruptible), T stopped, t tracing stop, X dead, Z zombie, P parked, I idle
# (kernel threads); W, K, N from older kernels.
STATE_ALPHABET = "?RSDTtXZPIWKN"

# Durations on the command line and in --span: a number and its unit. A bare number is refused: "5" has
# meant seconds to one tool and milliseconds to another, and a silent guess makes a 1000x error.
DURATION_UNITS_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
DURATION_FORMS = "a number and a unit: ns, us, ms or s (2ms, 500us, 1.5s)"
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*(ns|us|µs|ms|s)?\s*$", re.IGNORECASE)


def parse_duration_ns(text: str) -> int:
    """ "2ms" -> 2_000_000; "500us" -> 500_000; "1.5s" -> 1_500_000_000. ValueError otherwise, and for a
    bare number (DURATION_FORMS says what is accepted)."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a duration: write {DURATION_FORMS}")
    number, unit = match.groups()
    if unit is None:
        raise ValueError(f"{text!r} has no unit: write {DURATION_FORMS}, e.g. {number}ms or {number}s")
    value = float(number) * DURATION_UNITS_NS[unit.lower()]
    if not math.isfinite(value):  # "1e999" parses as infinity
        raise ValueError(f"{text!r} is not a finite duration")
    return round(value)


# What a path is when it is not a regular file, in messages: a capture, a log or an output must be one (a named
# pipe blocks its reader until a writer comes, a device reads forever, a socket cannot be opened).
_FILE_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFLNK: "a symbolic link",
}


def file_kind(mode: int) -> str:
    """ "a named pipe (FIFO)", "a directory"... for a stat st_mode; "a regular file" for one."""
    return "a regular file" if stat.S_ISREG(mode) else _FILE_KINDS.get(stat.S_IFMT(mode), "not a regular file")
