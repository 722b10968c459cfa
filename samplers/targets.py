"""Which processes to record: explicit pids, a name/command-line regex, descendants, a launched command.

Discovery runs every DISCOVERY_NS (250 ms) between ticks, never inside the reads. A process is known by
(pid, starttime): a pid reused by a new process after the target exited is not the target (stat field
22, starttime, differs). Processes and threads that vanish between listing and reading are normal.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field

from capture.errors import ForensicsError
from samplers.procfs import ProcPaths, StatLine, parse_stat

RECHECK_SCANS = 8  # about 2 s at one scan per 250 ms
_CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class TargetSpec:
    pids: list[int] = field(default_factory=list)
    match: re.Pattern[str] | None = None
    children: bool = False
    command_pid: int | None = None  # the launched command; its descendants are always followed
    exclude: set[int] = field(default_factory=set)  # the recorder and its writer
    # The recorder's own process: its ancestors (the `timeout` or `bash -c` that launched it, whose
    # command line holds the --match pattern too) are never targets unless named by pid.
    recorder_pid: int = field(default_factory=os.getpid)

    def describe(self) -> dict[str, object]:
        return {
            "pids": self.pids,
            "match": self.match.pattern if self.match else None,
            "children": self.children,
            "command_pid": self.command_pid,
        }


@dataclass
class ProcessInfo:
    pid: int
    starttime: int
    ppid: int
    comm: str
    cmdline: str
    why: str  # "pid", "match", "child", "command", "engine client" (samplers/engine/source.py names it)


# A process inside execve() has its new memory before its arguments: /proc/<pid>/cmdline reads empty from the
# memory's swap (exec_mmap) until create_elf_tables() (fs/exec.c, fs/binfmt_elf.c), and its comm is the old
# one until just after the swap. subprocess.Popen returns inside that window (its error pipe is closed at
# do_close_on_exec, in begin_new_exec): catch-load's launched command was recorded with an empty command line
# when the first discovery came that soon (tests/test_record_e2e.py, 3 of 7 runs on a quiet machine). So an
# empty command line of a young process (_young: an exec follows its fork) that is not a kernel thread is read
# again, for up to this long, between ticks; a process whose exec takes longer
# keeps the empty one. An old process with an empty command line (its arguments blanked, or exiting after its
# memory was released) is not waited for.
EXEC_SETTLE_NS = 10_000_000
_PF_KTHREAD = (
    0x00200000  # task flags (stat field 9, include/linux/sched.h): a kernel thread's command line is empty for good
)


def read_process(procfs: ProcPaths, pid: int) -> tuple[StatLine, str] | None:
    """(stat, cmdline) of a live process, or None if it is gone or a zombie (nothing left to sample)."""
    deadline = time.monotonic_ns() + EXEC_SETTLE_NS
    while True:
        stat = _live_stat(procfs, pid)
        if stat is None:
            return None
        try:
            raw = procfs.read(pid, "cmdline")
        except OSError:
            raw = b""
        if raw or time.monotonic_ns() >= deadline or stat.flags & _PF_KTHREAD or not _young(stat.starttime):
            break
        time.sleep(0.0002)  # inside execve(): its arguments are being set up
    cmdline = raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    return stat, cmdline


def _young(starttime: int) -> bool:
    """Started at most RECHECK_SCANS discoveries ago (about 2 s): a process that will exec has done it by then
    (discovery's look again before exec, read_process's wait inside it)."""
    # stat field 22 counts clock ticks of CLOCK_BOOTTIME (fs/proc/array.c: task->start_boottime).
    return time.clock_gettime(time.CLOCK_BOOTTIME) * _CLK_TCK - starttime <= RECHECK_SCANS * _CLK_TCK / 4


def _live_stat(procfs: ProcPaths, pid: int) -> StatLine | None:
    """The process's stat line, or None if it is gone or a zombie."""
    try:
        stat = parse_stat(procfs.read(pid, "stat"))
    except (OSError, ValueError):
        return None
    return None if stat.state in ("Z", "X", "x") else stat


def thread_group(procfs: ProcPaths, pid: int) -> int | None:
    """The process (Tgid) a task id belongs to: /proc/<tid> exists for every thread, though `ls /proc`
    lists processes only; None when it is gone."""
    try:
        status = procfs.read(pid, "status")
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith(b"Tgid:"):
            try:
                return int(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def missing_process(pid: int) -> ForensicsError:
    return ForensicsError(
        f"no process {pid} (it does not exist or has exited); list candidates with `ps -eLo pid,tid,comm,rtprio`"
    )


def ancestors(procfs: ProcPaths, pid: int) -> set[int]:
    """The processes above `pid` (its parent, the parent's parent... up to init), from stat field 4."""
    found: set[int] = set()
    while True:
        try:
            parent = parse_stat(procfs.read(pid, "stat")).ppid
        except (OSError, ValueError):
            return found
        if parent <= 0 or parent in found:
            return found
        found.add(parent)
        pid = parent


def list_pids(procfs: ProcPaths) -> list[int]:
    try:
        return [int(name) for name in os.listdir(procfs.root) if name.isdigit()]
    except OSError as err:
        raise ForensicsError(f"cannot list {procfs.root}: {err.strerror}") from err


def list_tids(procfs: ProcPaths, pid: int) -> list[int]:
    try:
        return [int(name) for name in os.listdir(procfs.path(pid, "task")) if name.isdigit()]
    except OSError:
        return []  # the process is gone: normal


class Discovery:
    """Finds target processes now and as they appear. Knows nothing of fds or ticks."""

    def __init__(self, spec: TargetSpec, procfs: ProcPaths) -> None:
        self.spec = spec
        self.procfs = procfs
        self.targets: dict[int, int] = {}  # pid -> starttime of processes being recorded
        self._seen: dict[int, int] = {}  # pid -> starttime of every process looked at (not only targets)
        self._ppid: dict[int, int] = {}
        # A process caught between fork and exec still carries its parent's name: look again at new
        # non-matching processes for a few scans before deciding they are not targets.
        self._recheck: dict[int, int] = {}
        self.ancestors = ancestors(procfs, spec.recorder_pid)

    @property
    def follows_new_processes(self) -> bool:
        return self.spec.match is not None or self.spec.children or self.spec.command_pid is not None

    def initial(self) -> list[ProcessInfo]:
        """The targets that exist now. An explicit pid that does not exist is an error."""
        found: list[ProcessInfo] = []
        for pid in self.spec.pids:
            info = read_process(self.procfs, pid)
            if info is None:
                raise missing_process(pid)
            found.append(self._accept(pid, info, "pid"))
        if self.spec.command_pid is not None:
            info = read_process(self.procfs, self.spec.command_pid)
            if info is not None:
                found.append(self._accept(self.spec.command_pid, info, "command"))
        found.extend(self.scan())
        return found

    def _accept(self, pid: int, info: tuple[StatLine, str], why: str) -> ProcessInfo:
        stat, cmdline = info
        self.targets[pid] = stat.starttime
        self._seen[pid] = stat.starttime
        self._ppid[pid] = stat.ppid
        return ProcessInfo(pid, stat.starttime, stat.ppid, stat.comm, cmdline, why)

    def scan(self) -> list[ProcessInfo]:
        """New processes that became targets since the last scan (by match or as descendants)."""
        if not self.follows_new_processes:
            return []
        pids = list_pids(self.procfs)
        alive = set(pids)
        for gone in [p for p in self._seen if p not in alive]:
            del self._seen[gone]
            self._ppid.pop(gone, None)
        new: list[ProcessInfo] = []
        fresh: list[tuple[int, tuple[StatLine, str]]] = []
        for pid in sorted(pids):  # ascending: parents usually before children
            if pid in self.spec.exclude or pid in self.ancestors or pid in self.targets:
                continue
            if pid in self._seen and pid not in self._recheck:
                continue
            info = read_process(self.procfs, pid)
            if info is None:
                continue
            self._seen[pid] = info[0].starttime
            self._ppid[pid] = info[0].ppid
            fresh.append((pid, info))
        follow_children = self.spec.children or self.spec.command_pid is not None
        changed = True
        pending = fresh
        while changed and pending:  # a child may be listed before its parent became a target
            changed = False
            rest = []
            for pid, info in pending:
                stat, cmdline = info
                why = None
                if self.spec.match is not None and (
                    self.spec.match.search(stat.comm) or self.spec.match.search(cmdline)
                ):
                    why = "match"
                elif follow_children and stat.ppid in self.targets:
                    why = "child"
                if why:
                    new.append(self._accept(pid, info, why))
                    self._recheck.pop(pid, None)
                    changed = True
                else:
                    rest.append((pid, info))
            pending = rest
        for pid, info in pending:
            if pid not in self._recheck and not _young(info[0].starttime):
                continue  # it has long exec'd, if it ever will
            left = self._recheck.get(pid, RECHECK_SCANS + 1) - 1
            if left > 0:
                self._recheck[pid] = left
            else:
                self._recheck.pop(pid, None)
        for gone in [p for p in self._recheck if p not in alive]:
            del self._recheck[gone]
        return new

    def adopt(self, pid: int, why: str) -> ProcessInfo | None:
        """A process another source names as a target (an engine's client), unless gone or known."""
        if pid in self.targets or pid in self.spec.exclude or pid in self.ancestors:
            return None
        info = read_process(self.procfs, pid)
        return None if info is None else self._accept(pid, info, why)

    def still_alive(self, pid: int) -> bool:
        """False once the process exited, became a zombie, or its pid was reused (its stat line: its command line
        is not needed here)."""
        stat = _live_stat(self.procfs, pid)
        return stat is not None and stat.starttime == self.targets.get(pid)

    def drop(self, pid: int) -> None:
        self.targets.pop(pid, None)
