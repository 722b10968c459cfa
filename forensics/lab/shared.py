"""Memory shared by the engine and its helper processes: a control block and the series' audio buffers.

One memfd (memfd_create(2)), mapped by the engine and passed to each helper by file descriptor: nothing
to name in /dev/shm and nothing left behind when the lab is killed. The control block holds the futex
words of the lock episode (32-bit, aligned: futex(2) wants an aligned int) and the times the helpers
report back. Words are written by one side and read by the other; every hand-over goes through a
syscall (an eventfd write or a futex wake), which orders the memory accesses around it.
"""

from __future__ import annotations

import ctypes
import mmap
import os

ALIGN = 64


class Control(ctypes.Structure):
    _fields_ = [
        # futex words (int32)
        ("stop", ctypes.c_int32),  # 1: helpers leave their loop
        ("arm_seq", ctypes.c_int32),  # lock: the episode number the holder is asked to hold for
        ("held_seq", ctypes.c_int32),  # lock: the holder holds the lock for this episode number
        ("released_seq", ctypes.c_int32),  # lock: the holder released the lock of this episode number
        ("waiting_seq", ctypes.c_int32),  # lock: lab-audio waits for the lock of this episode number...
        ("_pad", ctypes.c_int32),
        # times and counters (int64, CLOCK_MONOTONIC ns)
        ("waiting_since_ns", ctypes.c_int64),  # lock: ... since then (0: not yet)
        ("hold_ns", ctypes.c_int64),  # lock: the holder releases this long after lab-audio began to wait
        ("held_ns", ctypes.c_int64),  # lock: when the holder took the lock
        ("released_ns", ctypes.c_int64),  # lock: when the holder released it
        ("hog_until_ns", ctypes.c_int64),  # runqueue: the competitor burns until then
        ("cycle", ctypes.c_int64),  # series: callback number being processed
        ("done_cycle", ctypes.c_int64),  # series: the last stage finished this callback number
        ("done_ns", ctypes.c_int64),  # series: ... at this time
    ]


def _round_up(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class SharedArea:
    """The control block plus `buffers` audio buffers of (channels, quantum) float64."""

    def __init__(self, buffers: int, channels: int, quantum: int, fd: int | None = None) -> None:
        self.buffer_bytes = channels * quantum * 8
        self.size = _round_up(ctypes.sizeof(Control)) + buffers * _round_up(self.buffer_bytes)
        self.owner = fd is None
        if fd is None:
            fd = os.memfd_create("lab-shared", os.MFD_CLOEXEC)
            os.ftruncate(fd, self.size)
        self.fd = fd
        self._map = mmap.mmap(fd, self.size, flags=mmap.MAP_SHARED)
        self.control = Control.from_buffer(self._map)
        self._base = ctypes.addressof(self.control)
        self.shape = (channels, quantum)
        self.buffers = buffers

    def address(self, field: str) -> int:
        return self._base + getattr(Control, field).offset

    def buffer(self, index: int):  # -> np.ndarray; numpy is imported only by the processes that filter
        import numpy as np

        offset = _round_up(ctypes.sizeof(Control)) + index * _round_up(self.buffer_bytes)
        return np.ndarray(self.shape, dtype=np.float64, buffer=self._map, offset=offset)
