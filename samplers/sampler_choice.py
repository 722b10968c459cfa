"""--sampler auto (catch-load's default): which sampler reads the targets' threads, decided once, at the start.

The /proc sampler reads two files per thread per tick, plus the sched file of a real-time thread that ran. On a
small target that costs little and keeps every thread at full resolution. On a big one it does not scale: on
the Bitwig shape (bench/bitwig_shape.c, 534 threads) the /proc recorder and writer took 91-118 % of a core with
the read tiers on (README "The Bitwig shape"), where the real-time threads' reads alone (schedstat, and stat
and sched after each run) cost 17.7-22.3 % in a bare C loop (bench/fast_tier_floor.py). The eBPF sampler's
cost grows with the threads' switches, not threads x ticks: 3.8-5.2 % of a core on the same target, 2 ms kept
(README "The eBPF sampler"). So auto takes the eBPF sampler where the targets are known to be big at the start
(more threads than AUTO_EBPF_ABOVE_THREADS, the size at which the read tiers switch on) and it can run (root;
BCC and the kernel's BTF, which only its start can tell: catch-load falls back to /proc when it fails, and
says why). The size is that of the -p processes, or of those --match finds at the start. Anything else is read
from /proc: a target whose size is unknown at the start (a command to launch, --match with nothing found yet)
gets the read tiers if it grows.

An option that only the /proc sampler has (--sched, --slow-interval, --fast) keeps it: the user asked for what
it reads.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from samplers.procfs import ProcPaths
from samplers.targets import list_tids
from samplers.tiers import AUTO_TIERS_ABOVE_THREADS

AUTO_EBPF_ABOVE_THREADS = AUTO_TIERS_ABOVE_THREADS
PROC = "proc"
EBPF = "ebpf"


@dataclass(frozen=True)
class SamplerChoice:
    """What auto chose and why (the capture's meta["recording"]["sampler_why"]); `threads`: the targets' threads
    counted at the start (None: not known then)."""

    sampler: str
    why: str
    threads: int | None = None


def _counted(threads: int | None) -> str:
    return f"{threads} thread{'' if threads == 1 else 's'}"


def choose_sampler(
    procfs: ProcPaths, pids: Iterable[int], *, proc_options: Iterable[str] = (), euid: int | None = None
) -> SamplerChoice:
    """The sampler for these target processes (none: they start later). `proc_options`: the /proc sampler's own
    options given on the command line (they keep it). EBPF is a candidate: its start can still fail."""
    pids = list(pids)
    if not pids:
        return SamplerChoice(PROC, "the targets start later: their size is not known at the start")
    threads = sum(len(list_tids(procfs, pid)) for pid in pids)  # a process that exited meanwhile has none
    counted = _counted(threads)
    if threads <= AUTO_EBPF_ABOVE_THREADS:
        return SamplerChoice(PROC, f"{counted}, at most {AUTO_EBPF_ABOVE_THREADS}", threads)
    given = list(proc_options)
    if given:
        return SamplerChoice(PROC, f"{counted}, but {' and '.join(given)} given: /proc's own", threads)
    if (os.geteuid() if euid is None else euid) != 0:
        return SamplerChoice(PROC, f"{counted}, but not root: the eBPF sampler needs root", threads)
    return SamplerChoice(EBPF, f"{counted}, more than {AUTO_EBPF_ABOVE_THREADS}", threads)


def could_not_start(choice: SamplerChoice, why: str) -> SamplerChoice:
    """The eBPF candidate whose start failed (`why`, one line): /proc after all."""
    return SamplerChoice(PROC, f"{_counted(choice.threads)}, but the eBPF sampler cannot start: {why}", choice.threads)
