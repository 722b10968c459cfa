"""A canned /proc tree on disk: real files, so the recorder's open + pread path runs unchanged."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

# Tids above the kernel's pid_max (4194304 at most): the recorder's sched_getscheduler() on them finds no real thread.
PID_ABOVE_MAX = 5_000_000

# A real stat line of kernel 6.18 (52 fields), with the comm replaced by `{comm}` and the fields the
# tests vary left as placeholders.
STAT_TEMPLATE = (
    "{tid} ({comm}) {state} 1 {pid} {pid} 0 -1 4194368 {minflt} 0 {majflt} 0 {utime} {stime} 0 0 "
    "{prio} {nice} {num_threads} 0 {starttime} 92479488 3389 18446744073709551615 1 1 0 0 0 0 0 16781312 2 0 0 0 "
    "-1 {cpu} {rtprio} {policy} {blkio} 0 0 94755439275440 94755439276056 94755469131776 "
    "140730665576502 140730665576552 140730665576552 140730665578447 0\n"
)


def stat_line(
    tid: int,
    pid: int,
    comm: str = "worker",
    state: str = "S",
    minflt: int = 0,
    majflt: int = 0,
    utime: int = 0,
    stime: int = 0,
    nice: int = 0,
    starttime: int = 1000,
    cpu: int = 0,
    rtprio: int = 0,
    policy: int = 0,
    blkio: int = 0,
    num_threads: int = 3,
) -> str:
    prio = 20 + nice if policy == 0 else -1 - rtprio
    return STAT_TEMPLATE.format(
        tid=tid,
        pid=pid,
        comm=comm,
        state=state,
        minflt=minflt,
        majflt=majflt,
        utime=utime,
        stime=stime,
        nice=nice,
        prio=prio,
        starttime=starttime,
        cpu=cpu,
        rtprio=rtprio,
        policy=policy,
        blkio=blkio,
        num_threads=num_threads,
    )


class FakeProc:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / "stat").write_text(
            "cpu  100 0 50 1000 5 1 2 0 0 0\ncpu0 50 0 25 500 3 1 1 0 0 0\ncpu1 50 0 25 500 2 0 1 0 0 0\n"
            "intr 12345 0 1 2\nctxt 67890\nbtime 1\nprocesses 100\nprocs_running 1\nprocs_blocked 0\n"
        )

    def add_thread(
        self,
        pid: int,
        tid: int,
        comm: str = "worker",
        run_ns: int = 0,
        wait_ns: int = 0,
        slices: int = 0,
        process_comm: str = "engine",
        cmdline: str = "engine --run",
        sched: str | None = None,
        **stat: object,
    ) -> None:
        proc = self.root / str(pid)
        task = proc / "task" / str(tid)
        task.mkdir(parents=True, exist_ok=True)
        if tid == pid or not (proc / "stat").exists():
            (proc / "stat").write_text(stat_line(pid, pid, comm=process_comm))
            (proc / "comm").write_text(process_comm + "\n")
            (proc / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0")
        (task / "comm").write_text(comm + "\n")
        self.set_thread(pid, tid, comm=comm, run_ns=run_ns, wait_ns=wait_ns, slices=slices, **stat)
        if sched is not None:
            (task / "sched").write_text(sched)

    def set_thread(
        self,
        pid: int,
        tid: int,
        comm: str = "worker",
        run_ns: int = 0,
        wait_ns: int = 0,
        slices: int = 0,
        **stat: object,
    ) -> None:
        task = self.root / str(pid) / "task" / str(tid)
        # Changed under a running recorder (tests/test_tiers.py, test_recorder_canned.py), as the kernel
        # would: stat first, then schedstat. The recorder reads schedstat, then stat only if schedstat
        # moved (the skip); the kernel's counters in stat move while the thread runs, which moves its
        # schedstat too, so a schedstat that moved never comes with a stat from before the run. Written the
        # other way, a tick between the two writes read the new schedstat and the old stat, and the old
        # values were carried until the next slow read (CI beside stress-ng: minflt 3 after the bump to 4).
        _rewrite(task / "stat", stat_line(tid, pid, comm=comm, **stat))  # type: ignore[arg-type]
        _rewrite(task / "schedstat", f"{run_ns} {wait_ns} {slices}\n")

    def change_later(
        self, out: Path, delay_s: float, *changes: tuple[int, int, dict[str, object]]
    ) -> tuple[threading.Thread, list[int]]:
        """set_thread(pid, tid, **fields) of each change, `delay_s` after a recording into `out` started (its
        capture file exists), from a thread started here; the list gets CLOCK_MONOTONIC just before them."""
        changed_at: list[int] = []

        def change() -> None:
            deadline = time.monotonic() + 60
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(delay_s)
            changed_at.append(time.monotonic_ns())
            for pid, tid, fields in changes:
                self.set_thread(pid, tid, **fields)  # type: ignore[arg-type]

        thread = threading.Thread(target=change)
        thread.start()
        return thread, changed_at


def _rewrite(path: Path, text: str) -> None:
    """Replace a file's text in place (the recorder holds it open and preads it) with no moment where a
    read finds it empty, as write_text's truncation would leave one: pwrite the new bytes, then cut the
    rest (a read between the two may see a longer old tail after the new line's end)."""
    data = text.encode()
    if not path.exists():
        path.write_bytes(data)
        return
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)
