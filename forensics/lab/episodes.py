"""What the callback thread does during an episode of each cause, and what it needs set up beforehand.

Each episode runs inside one callback, in the thread named lab-audio, for the episode length D, and returns
its own record (start and end in CLOCK_MONOTONIC ns plus the cause's evidence). How each cause is made real:

- run: a Python loop burns D of the thread's CPU time (the GIL is uncontended: no other engine thread runs).
- runqueue: a competitor process is woken on the callback thread's CPU at a priority that preempts it
  (SCHED_FIFO one above the callback thread's, which also preempts a SCHED_OTHER callback thread) and
  burns until D has passed; the callback thread is pinned to that CPU for the episode, or the scheduler
  would move it to the other CPU (a real placement fix, not the stall we want). Without the right to use
  SCHED_FIFO, three SCHED_OTHER competitors share the CPU with it and it keeps computing for D: it then
  waits about three quarters of D.
- io: synchronous disk IO until D has passed: O_DIRECT reads (the default; O_DIRECT bypasses the page cache,
  so every read goes to the device), O_DIRECT writes, or 4 KiB writes each followed by fdatasync. The thread
  sleeps in D state in io_schedule (so delay accounting counts it as blkio delay).
- fault: touches fresh anonymous pages (madvise MADV_NOHUGEPAGE, so one fault is one 4 KiB page and not a
  2 MiB THP) until D has passed and at least --fault-pages pages; each touch is a minor fault. With
  --fault-kind major it reads pages of a file mapping whose pages were evicted (posix_fadvise DONTNEED),
  with MADV_RANDOM so that readahead does not turn the next pages into minor faults.
- lock: the callback thread waits on a futex held by the lock holder, a busy SCHED_OTHER process that took
  it before the callback started and lets go D after the callback began to wait (a priority inversion:
  a real-time thread waits for a normal one). The holder's futex_wake is what wakes it.
"""

from __future__ import annotations

import mmap
import os
import tempfile
import time
from typing import Any

from capture.errors import ForensicsError
from forensics.lab import linux
from forensics.lab.settings import LabSettings, check_io_dir
from forensics.lab.shared import SharedArea

PAGE = mmap.PAGESIZE
IO_FILE_BYTES = 16 << 20
FSYNC_CHUNK_BYTES = 4096
FAULT_ARENA_BYTES = 1 << 30  # virtual only: pages become memory when touched, and are given back after
FAULT_CHUNK_PAGES = 64  # pages touched between two looks at the clock (~80 us of minor faults)
RELEASE_PAGES_PER_CYCLE = 2048  # ~0.5 ms of MADV_DONTNEED in the idle part of a cycle
MAJOR_FILE_BYTES = 32 << 20
MAJOR_CHUNK_PAGES = 4


def _scratch_file(directory: str, size: int, what: str) -> tuple[int, str]:
    """An unlinked file of `size` random bytes, written and synced: no data of it is in flight any more,
    and nothing is left behind whatever way the lab ends."""
    fs_type = check_io_dir(directory, what)
    try:
        fd, path = tempfile.mkstemp(prefix="lab-io-", dir=directory)
    except OSError as err:
        raise ForensicsError(f"cannot create a scratch file in --io-dir {directory}: {err.strerror}") from None
    try:
        os.unlink(path)
        block = os.urandom(1 << 20)
        for _ in range(size // len(block)):
            os.write(fd, block)
        os.fsync(fd)
    except OSError as err:
        os.close(fd)
        raise ForensicsError(f"cannot write a scratch file in --io-dir {directory}: {err.strerror}") from None
    return fd, fs_type


class RunEpisode:
    """Burns D of the thread's own CPU time (CLOCK_THREAD_CPUTIME_ID), not D of wall time: a callback
    that computes for D. SCHED_FIFO, nothing preempts it and both are the same; a SCHED_OTHER callback
    thread on a loaded machine is preempted now and then, and the episode lasts longer than D."""

    cause = "run"

    def run(self, end_ns: int) -> dict[str, Any]:
        thread_time_ns, monotonic_ns = time.thread_time_ns, time.monotonic_ns
        # D of CPU time, and at least D of wall time (the two clocks differ by a few ppm: NTP slews one)
        burn_until = thread_time_ns() + (end_ns - monotonic_ns())
        while thread_time_ns() < burn_until or monotonic_ns() < end_ns:
            pass
        return {}


class IoEpisode:
    cause = "io"

    def __init__(self, settings: LabSettings) -> None:
        self.mode = settings.io_mode
        fd, self.fs_type = _scratch_file(settings.io_dir, IO_FILE_BYTES, "io")
        self.chunk = FSYNC_CHUNK_BYTES if self.mode == "fsync" else settings.io_kib * 1024
        self._buffer = mmap.mmap(-1, self.chunk)  # page-aligned, as O_DIRECT wants
        self._buffer.write(os.urandom(self.chunk))
        if self.mode == "fsync":
            self.fd = fd
        else:
            flags = os.O_RDONLY if self.mode == "read" else os.O_WRONLY
            try:
                self.fd = os.open(f"/proc/self/fd/{fd}", flags | os.O_DIRECT)
            except OSError as err:
                raise ForensicsError(
                    f"the filesystem of --io-dir {settings.io_dir} ({self.fs_type}) refuses O_DIRECT "
                    f"({err.strerror}); use --io-mode fsync or another --io-dir"
                ) from None
            os.close(fd)
        self._offset = 0

    def run(self, end_ns: int) -> dict[str, Any]:
        monotonic_ns = time.monotonic_ns
        ops = 0
        buffers = [self._buffer]
        while monotonic_ns() < end_ns:
            if self.mode == "read":
                os.preadv(self.fd, buffers, self._offset)
            else:
                os.pwritev(self.fd, buffers, self._offset)
                if self.mode == "fsync":
                    os.fdatasync(self.fd)
            ops += 1
            self._offset = (self._offset + self.chunk) % IO_FILE_BYTES
        return {"io_mode": self.mode, "io_ops": ops, "io_bytes": ops * self.chunk}

    def describe(self) -> dict[str, Any]:
        return {"mode": self.mode, "chunk_bytes": self.chunk, "filesystem": self.fs_type}


class MinorFaultEpisode:
    cause = "fault"

    def __init__(self, settings: LabSettings) -> None:
        import numpy as np

        self.min_pages = settings.fault_pages
        self._arena = mmap.mmap(-1, FAULT_ARENA_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        # With THP on "always", one touch would fault in 2 MiB: 512 pages for one fault.
        self._arena.madvise(mmap.MADV_NOHUGEPAGE)
        self._bytes = np.frombuffer(self._arena, dtype=np.uint8)
        self._pages = FAULT_ARENA_BYTES // PAGE
        self._next = 0
        self._to_release: list[tuple[int, int]] = []  # page ranges touched and not yet given back

    def _release(self, first: int, count: int) -> None:
        self._arena.madvise(mmap.MADV_DONTNEED, first * PAGE, count * PAGE)

    def run(self, end_ns: int) -> dict[str, Any]:
        monotonic_ns = time.monotonic_ns
        touched = 0
        first = self._next
        while touched < self.min_pages or monotonic_ns() < end_ns:
            if self._next + FAULT_CHUNK_PAGES > self._pages:  # arena used up (a very long episode): wrap
                self._to_release.append((first, self._next - first))
                self.release_all()
                self._next = first = 0
            start = self._next * PAGE
            self._bytes[start : start + FAULT_CHUNK_PAGES * PAGE : PAGE] = 1
            self._next += FAULT_CHUNK_PAGES
            touched += FAULT_CHUNK_PAGES
        self._to_release.append((first, self._next - first))
        return {"fault_kind": "minor", "pages": touched}

    def idle(self) -> None:
        """Give touched pages back a little at a time, in the idle part of later cycles: freeing 15 000 pages
        at once takes ~4 ms, which would make the next callback late for a reason no episode records."""
        if not self._to_release:
            return
        first, count = self._to_release[0]
        step = min(count, RELEASE_PAGES_PER_CYCLE)
        self._release(first, step)
        if step == count:
            self._to_release.pop(0)
        else:
            self._to_release[0] = (first + step, count - step)
        if not self._to_release and self._next > self._pages // 2:
            self._next = 0

    def release_all(self) -> None:
        for first, count in self._to_release:
            self._release(first, count)
        self._to_release.clear()

    def describe(self) -> dict[str, Any]:
        # After an episode, lab-audio gives the pages back in the idle part of the next cycles, this many a
        # cycle (~0.5 ms of run time each, outside every episode window and callback).
        return {
            "kind": "minor",
            "min_pages": self.min_pages,
            "page_bytes": PAGE,
            "release_pages_per_cycle": RELEASE_PAGES_PER_CYCLE,
        }


class MajorFaultEpisode:
    cause = "fault"

    def __init__(self, settings: LabSettings) -> None:
        import numpy as np

        self.min_pages = settings.fault_pages
        self._fd, self.fs_type = _scratch_file(settings.io_dir, MAJOR_FILE_BYTES, "major fault")
        self._map = mmap.mmap(self._fd, MAJOR_FILE_BYTES, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        # No readahead (filemap_fault skips it for VM_RAND_READ): one page read from disk per fault.
        self._map.madvise(mmap.MADV_RANDOM)
        self._bytes = np.frombuffer(self._map, dtype=np.uint8)
        self._pages = MAJOR_FILE_BYTES // PAGE
        self._next = 0
        self.evict()

    def evict(self) -> None:
        """Drop the file's pages from this mapping and from the page cache, so the next touch reads the disk."""
        self._map.madvise(mmap.MADV_DONTNEED)
        os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_DONTNEED)
        self._next = 0
        self._dirty = False

    def run(self, end_ns: int) -> dict[str, Any]:
        monotonic_ns = time.monotonic_ns
        touched = 0
        checksum = 0
        while touched < self.min_pages or monotonic_ns() < end_ns:
            if self._next + MAJOR_CHUNK_PAGES > self._pages:
                self.evict()
            start = self._next * PAGE
            checksum += int(self._bytes[start : start + MAJOR_CHUNK_PAGES * PAGE : PAGE].sum())
            self._next += MAJOR_CHUNK_PAGES
            touched += MAJOR_CHUNK_PAGES
        self._dirty = True
        return {"fault_kind": "major", "pages": touched}

    def idle(self) -> None:
        if self._dirty:
            self.evict()

    def release_all(self) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"kind": "major", "min_pages": self.min_pages, "page_bytes": PAGE, "filesystem": self.fs_type}


class RunqueueEpisode:
    """The callback side; the competitors are helper processes (forensics.lab.helpers._competitor)."""

    cause = "runqueue"

    def __init__(self, area: SharedArea, pinned: bool) -> None:
        self.area = area
        self.pinned = pinned
        self.competitors: list[tuple[int, int, int]] = []  # (pid, tid, eventfd) of each competitor
        self._cpu = -1
        self._saved: set[int] = set()

    def prepare(self) -> None:
        """Before the episode's clock starts: put the competitors on this CPU. The affinity calls took
        0.42 ms the first time in one recording (the wait then began 0.42 ms after the truth said), ~40 us
        later; they are set-up, not the episode."""
        self._cpu = linux.sched_getcpu()
        self._saved = os.sched_getaffinity(0)
        if not self.pinned:
            os.sched_setaffinity(0, {self._cpu})
        for _pid, tid, _fd in self.competitors:
            os.sched_setaffinity(tid, {self._cpu})  # it sleeps: this only changes where it will wake up

    def run(self, end_ns: int) -> dict[str, Any]:
        self.area.control.hog_until_ns = end_ns
        for _pid, _tid, fd in self.competitors:
            # A SCHED_FIFO competitor of higher priority preempts us on the way out of this write
            # (wake-up preemption) and runs until end_ns: we wait, runnable, on the run queue.
            os.eventfd_write(fd, 1)
        monotonic_ns = time.monotonic_ns
        while monotonic_ns() < end_ns:  # only SCHED_OTHER competitors leave us any CPU before end_ns
            pass
        if not self.pinned:
            os.sched_setaffinity(0, self._saved)
        return {
            "cpu": self._cpu,
            "competitor_pid": self.competitors[0][0] if self.competitors else None,
            "competitor_tid": self.competitors[0][1] if self.competitors else None,
            "competitors": len(self.competitors),
        }


class LockEpisode:
    """The callback side; the holder is a helper process (forensics.lab.helpers._holder)."""

    cause = "lock"
    RESPONSE_TIMEOUT_NS = 5_000_000_000

    def __init__(self, area: SharedArea) -> None:
        self.area = area
        self.holder_pid = 0
        self.holder_tid = 0
        self.holder_fd = -1
        self.armed_seq = 0

    def arm(self, seq: int, hold_ns: int) -> None:
        """Have the holder take the lock now (in the idle time before the episode's callback) and keep it
        until lab-audio has waited hold_ns for it; return once it holds it."""
        control = self.area.control
        control.waiting_since_ns = 0
        control.hold_ns = hold_ns
        control.arm_seq = seq
        os.eventfd_write(self.holder_fd, 1)
        self._wait_for("held_seq", seq)
        self.armed_seq = seq

    def _wait_for(self, field: str, seq: int) -> None:
        control = self.area.control
        address = self.area.address(field)
        deadline = time.monotonic_ns() + self.RESPONSE_TIMEOUT_NS
        while True:
            current = getattr(control, field)
            if current == seq:
                return
            if time.monotonic_ns() > deadline:
                raise RuntimeError(f"the lock holder (pid {self.holder_pid}) did not answer within 5 s")
            linux.futex_wait(address, current, 100_000_000)

    def run(self, end_ns: int) -> dict[str, Any]:
        """Wait for the lock armed for this episode; the holder lets go hold_ns after we began to wait."""
        control = self.area.control
        control.waiting_since_ns = time.monotonic_ns()
        control.waiting_seq = self.armed_seq
        self._wait_for("released_seq", self.armed_seq)  # asleep on the futex until the holder's futex_wake
        control = self.area.control
        return {
            "holder_pid": self.holder_pid,
            "holder_tid": self.holder_tid,
            "held_ns": control.held_ns,
            "released_ns": control.released_ns,
        }
