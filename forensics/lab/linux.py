"""The few Linux calls the lab needs that the standard library lacks, through ctypes on libc.

Every call here releases the GIL while it is in the kernel: ctypes.CDLL functions drop it around the
foreign call (ctypes docs, "CDLL ... the Python GIL is released during the function call"). That matters:
the lab's callback thread must never wait for the GIL, and a sleep or a futex wait that held it would
make every other thread of the engine wait on it.

No import of numpy, pandas or the forensics package here: the helper processes import this module and
must start fast and hold no library threads.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform

from capture.vocabulary import policy_name

_libc = ctypes.CDLL(None, use_errno=True)

# <linux/prctl.h>
PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_SET_TIMERSLACK = 29

# <linux/time.h>: the sampler reads the same clock (time.monotonic_ns() is CLOCK_MONOTONIC on Linux).
CLOCK_MONOTONIC = 1
TIMER_ABSTIME = 1

# <linux/futex.h>. Not FUTEX_PRIVATE_FLAG: the futex words live in memory shared between processes.
FUTEX_WAIT = 0
FUTEX_WAKE = 1

# syscall numbers of futex(2) per architecture (arch/*/include/uapi/asm/unistd*.h; the generic table is 98).
_SYS_FUTEX = {"x86_64": 202, "i386": 240, "i686": 240, "armv7l": 240, "ppc64le": 221, "ppc64": 221, "s390x": 238}
SYS_FUTEX = _SYS_FUTEX.get(platform.machine(), 98)

MADV_NOHUGEPAGE = 15  # <asm-generic/mman-common.h>; mmap exposes it, kept here for the ctypes path
_NS = 1_000_000_000


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_libc.prctl.restype = ctypes.c_int
_libc.clock_nanosleep.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Timespec), ctypes.c_void_p]
_libc.clock_nanosleep.restype = ctypes.c_int
_libc.sched_getcpu.argtypes = []
_libc.sched_getcpu.restype = ctypes.c_int
_libc.syscall.restype = ctypes.c_long


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def set_thread_name(name: str) -> None:
    """Name the calling thread (/proc/<pid>/task/<tid>/comm). The kernel keeps 15 bytes (TASK_COMM_LEN 16)."""
    buf = ctypes.create_string_buffer(name.encode()[:15])
    _check(_libc.prctl(PR_SET_NAME, ctypes.cast(buf, ctypes.c_void_p).value or 0, 0, 0, 0), "prctl(PR_SET_NAME)")


def thread_name(tid: int | None = None) -> str:
    tid = tid if tid is not None else gettid()
    with open(f"/proc/self/task/{tid}/comm", "rb") as fh:
        return fh.read().decode(errors="replace").strip()


def set_parent_death_signal(signum: int) -> None:
    """Have the kernel send `signum` to this process when the thread that created it exits (prctl(2))."""
    _check(_libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")


def set_timer_slack(ns: int) -> None:
    """Timer slack of the calling thread. SCHED_OTHER threads default to 50 us of slack (prctl(2)): a
    callback thread that falls back to SCHED_OTHER would otherwise wake up to 50 us late on purpose."""
    _check(_libc.prctl(PR_SET_TIMERSLACK, max(1, ns), 0, 0, 0), "prctl(PR_SET_TIMERSLACK)")


def gettid() -> int:
    import threading

    return threading.get_native_id()


def sched_getcpu() -> int:
    return _check(_libc.sched_getcpu(), "sched_getcpu")


def sleep_until(t_ns: int) -> None:
    """Sleep until CLOCK_MONOTONIC reaches t_ns: clock_nanosleep(TIMER_ABSTIME), so the wake-up time does
    not drift by the time spent computing how long to sleep (clock_nanosleep(2))."""
    ts = _Timespec(t_ns // _NS, t_ns % _NS)
    while True:
        rc = _libc.clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, ctypes.byref(ts), None)
        if rc == 0:
            return
        if rc != errno.EINTR:  # clock_nanosleep returns the error number, it does not set errno
            raise OSError(rc, f"clock_nanosleep: {os.strerror(rc)}")


def futex_wait(address: int, expected: int, timeout_ns: int | None = None) -> bool:
    """Sleep while the 32-bit word at `address` equals `expected` (futex(2) FUTEX_WAIT).

    Returns False on timeout, True otherwise (woken, value already changed, or a spurious wake-up: the
    caller re-checks its condition in a loop, as every futex user must).
    """
    ts = None
    if timeout_ns is not None:
        ts = ctypes.byref(_Timespec(timeout_ns // _NS, timeout_ns % _NS))
    rc = _libc.syscall(
        ctypes.c_long(SYS_FUTEX), ctypes.c_void_p(address), ctypes.c_int(FUTEX_WAIT), ctypes.c_int(expected), ts, None
    )
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EAGAIN, errno.EINTR):
        return True
    if err == errno.ETIMEDOUT:
        return False
    raise OSError(err, f"futex(FUTEX_WAIT): {os.strerror(err)}")


def futex_wake(address: int, count: int = 1) -> int:
    """Wake up to `count` waiters on the word at `address` (futex(2) FUTEX_WAKE)."""
    rc = _libc.syscall(
        ctypes.c_long(SYS_FUTEX), ctypes.c_void_p(address), ctypes.c_int(FUTEX_WAKE), ctypes.c_int(count)
    )
    return _check(rc, "futex(FUTEX_WAKE)")


# --------------------------------------------------------------------------------------------------
# Scheduling policy


def set_policy(policy: int, priority: int) -> str | None:
    """Set the calling thread's policy (pid 0 = the calling thread for sched_setscheduler(2)).

    Returns None on success, else why not (EPERM: no CAP_SYS_NICE and RLIMIT_RTPRIO too low).
    """
    try:
        os.sched_setscheduler(0, policy, os.sched_param(priority))
    except PermissionError:
        return "not permitted (needs CAP_SYS_NICE, or an RLIMIT_RTPRIO of at least the priority)"
    except OSError as err:
        return err.strerror or str(err)
    return None


def current_policy(tid: int = 0) -> tuple[str, int]:
    """(policy name, rt priority) of a thread as the kernel reports it."""
    policy = os.sched_getscheduler(tid) & ~getattr(os, "SCHED_RESET_ON_FORK", 0)
    return policy_name(policy), os.sched_getparam(tid).sched_priority


def fifo_permitted(priority: int) -> bool:
    """Whether this process may use SCHED_FIFO at `priority`: try it on the calling thread, then go back."""
    before_policy = os.sched_getscheduler(0)
    before_param = os.sched_getparam(0)
    if set_policy(os.SCHED_FIFO, priority) is not None:
        return False
    os.sched_setscheduler(0, before_policy, before_param)
    return True


def filesystem_of(path: str) -> str:
    """The type of the filesystem `path` is on, from /proc/self/mountinfo (the longest matching mount point)."""
    real = os.path.realpath(path)
    best, best_type = "", "unknown"
    with open("/proc/self/mountinfo", "rb") as fh:
        for line in fh.read().decode(errors="replace").splitlines():
            left, _, right = line.partition(" - ")
            fields = left.split()
            if len(fields) < 5 or not right:
                continue
            mount_point = fields[4].replace("\\040", " ")
            inside = real == mount_point or real.startswith(mount_point.rstrip("/") + "/")
            if inside and len(mount_point) >= len(best):
                best, best_type = mount_point, right.split()[0]
    return best_type


_CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def machine_steal_ns() -> int:
    """The machine's hypervisor steal time so far, all CPUs (/proc/stat's first line, field 8, in USER_HZ
    ticks: 10 ms each, so a difference of two reads is exact to a tick either way). 0 where /proc/stat
    has no steal field (kernels before 2.6.11) or cannot be read."""
    try:
        with open("/proc/stat", "rb") as fh:
            fields = fh.readline().split()
    except OSError:
        return 0
    return int(fields[8]) * (1_000_000_000 // _CLOCK_TICKS_PER_S) if len(fields) > 8 else 0


def io_pressure_us() -> int | None:
    """The machine's IO pressure so far: /proc/pressure/io "some" total, the us during which at least one
    task waited for IO (in io_schedule(): kernel/sched/psi.c). None without PSI (CONFIG_PSI off, psi=0)."""
    try:
        with open("/proc/pressure/io", "rb") as fh:
            first = fh.readline()
    except OSError:
        return None
    total = first.rpartition(b"total=")[2]
    return int(total) if total.strip().isdigit() else None
