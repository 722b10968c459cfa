"""The recorder's reads at one tick of the /proc sampler: raw bytes only, handed over as one TICK frame.

Two implementations of one contract: `read_tick_python` below (the reference) and `samplers/_tick.c`
`read_tick` (the same reads, decisions and frame, compiled at install where a compiler and Python's headers
are: setup.py marks it optional). On the Bitwig shape from /proc the recorder took 74-80 % of a core with the
Python loop, 54-64 % with the compiled one, the reads themselves being 46-54 % of it (the trailer's
tick_reads_cpu_ns; README "The compiled tick and parse").
`tests/test_tick_reads.py` holds the two to the same frames and state on canned /proc trees.

Both take the recorder's per-slot lists and update them in place: `last_ss` and `last_stat` (the texts of
each thread's last reads), `moved` (the tick its schedstat last moved), `sched_base` (its sched file's first
read is still due). They return (the TICK frame or None when no thread was read, the reads made, the rows
stored, [(index in `hot`, read ns)] of the threads whose reads failed: gone).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable

from samplers import frames
from samplers.compiled import compiled_module
from samplers.tiers import counters_may_have_moved

SCHEDSTAT_BYTES = 128  # "run wait slices\n": three u64 at most 61 bytes
STAT_BYTES = 1024  # 52 fields of at most 20 digits plus a 64-byte comm (TASK_COMM_LEN 16, escaped)
SCHED_BYTES = 8192  # about 1.5 KB, 3 KB with schedstats

# Read entries: (fd schedstat, fd stat, stat forced, slot) per thread; (fd sched, slot) per sched read.
HotRead = tuple[int, int, bool, int]
SchedRead = tuple[int, int]
TickResult = tuple[bytes | None, int, int, list[tuple[int, int]]]


# read_tick's arguments: hot, sched, last_ss, last_stat, moved, sched_base, tick, layout id, tick start ns.
TickReader = Callable[
    [list[HotRead], list[SchedRead], list[bytes], list[bytes], list[int], list[bool], int, int, int], TickResult
]


def read_tick_python(
    hot: list[HotRead],
    sched: list[SchedRead],
    last_ss: list[bytes],
    last_stat: list[bytes],
    moved: list[int],
    sched_base: list[bool],
    tick: int,
    layout_id: int,
    t_ns: int,
    clock: Callable[[], int] = time.monotonic_ns,
) -> TickResult:
    pread = os.pread
    times: list[int] = []
    ss: list[bytes] = []
    st: list[bytes] = []
    dead: list[tuple[int, int]] = []
    empty: list[int] = []
    t_app = times.append
    ss_app = ss.append
    st_app = st.append
    for index, (fd_ss, fd_st, forced, slot) in enumerate(hot):
        read_ns = clock()
        t_app(read_ns)
        try:
            schedstat = pread(fd_ss, SCHEDSTAT_BYTES, 0)
            # Unchanged schedstat of a thread not in R at its last read: not switched in since, so stat's
            # counters did not move (the skip, samplers/tiers.py); b"" tells the writer to carry them forward.
            # One in R may be running on: its schedstat lags until the next scheduler tick, so it is re-read.
            if schedstat != last_ss[slot]:
                stat = pread(fd_st, STAT_BYTES, 0)
                last_ss[slot] = schedstat
                moved[slot] = tick
                last_stat[slot] = stat
            elif forced or last_stat[slot][last_stat[slot].rfind(b")") + 2 :][:1] == b"R":
                stat = pread(fd_st, STAT_BYTES, 0)
                last_stat[slot] = stat
            else:
                stat = b""
        except OSError:  # ESRCH: the thread exited since the last tick
            dead.append((index, read_ns))
            continue
        if schedstat:
            ss_app(schedstat)
            st_app(stat)
        else:  # an empty read: no row this tick (procfs does not do this; a canned file might)
            empty.append(index)
    sched_raw: list[bytes] = []
    for fd, slot in sched:
        # b"": no sched row this tick (the next row's deltas cover the gap). Not with every stat read: with
        # the tiers off that is every tick, 2 KB of text a thread (60 MB/s at the Bitwig shape's 121 real-time
        # threads).
        if sched_base[slot] or counters_may_have_moved(moved[slot], last_stat[slot], tick):
            try:
                sched_raw.append(pread(fd, SCHED_BYTES, 0))
                sched_base[slot] = False
            except OSError:
                sched_raw.append(b"")
        else:
            sched_raw.append(b"")
    reads = len(hot) + len(st) - st.count(b"") + len(sched_raw) - sched_raw.count(b"")
    if not times:  # no target thread yet (--match still waiting): nothing to store
        return None, reads, 0, dead
    missing = [index for index, _ in dead] + empty
    return frames.encode_tick(tick, layout_id, t_ns, times, missing, ss, st, sched_raw), reads, len(st), dead


def tick_reader(clock: Callable[[], int]) -> tuple[TickReader, str]:
    """The reads to use, and their name for the capture's metadata ("c" or "python"). The compiled one reads
    CLOCK_MONOTONIC itself: with any other clock (a test's) the Python loop takes it."""
    if clock is time.monotonic_ns:
        compiled = compiled_read_tick()
        if compiled is not None:
            return compiled, "c"

    return functools.partial(read_tick_python, clock=clock), "python"


def compiled_read_tick() -> TickReader | None:
    """samplers/_tick.c's read_tick, or None where it was not built (no compiler at install) or
    FORENSICS_PURE_PYTHON=1 (samplers/compiled.py)."""
    module = compiled_module("_tick")
    if module is None:
        return None
    read: TickReader = module.read_tick
    return read
