"""The recorder: every tick, read every target thread's schedstat and stat (and sched where asked).

The tick does the least work it can: `os.pread(fd, n, 0)` on file descriptors held open (re-reading a
/proc file without reopening it), one CLOCK_MONOTONIC read per thread, and one `os.write` of the raw
bytes to the writer process. Everything else (parsing, compression, discovery of new threads and
processes, system counters, the status line) happens between ticks or in the writer.

Timing: tick k is due at start + k * interval on an absolute clock. A tick that starts more than one
interval late skips the ticks it missed (counted, and their numbers skipped) instead of bunching up.
The achieved interval (the time between tick starts) is what the trailer reports, not the one asked.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import gc
import os
import re
import resource
import select
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from capture.errors import ForensicsError
from capture.vocabulary import RT_POLICIES
from samplers import frames
from samplers.engine.source import EngineSources
from samplers.heap import hold_freed_heap
from samplers.periodic import NEVER_NS, PeriodicJobs
from samplers.procfs import ProcPaths, parse_stat
from samplers.system import PRESSURE_FILES
from samplers.targets import Discovery, ProcessInfo, TargetSpec, list_tids
from samplers.tick_reads import SCHEDSTAT_BYTES, STAT_BYTES, tick_reader
from samplers.ticktimes import TickTimes
from samplers.tiers import (
    AUTO_TIERS_ABOVE_THREADS,
    SLOW_AUTO,
    SLOW_INTERVAL_NS,
    Tiers,
    adds_to_proc,
    counters_may_have_moved,
    earns_fast_tier,
    stat_policy,
)

DISCOVERY_NS = 250_000_000  # new processes (and exits of zombies) are picked up within this
# The periodic jobs between ticks (Recorder._periodic_job, samplers/periodic.py), in the order they run when due
# at once.
JOB_SYSTEM = "system"
JOB_DISCOVERY = "discovery"
JOB_THREAD_SCAN = "thread scan"
JOB_RT_SOURCES = "real-time sources"
JOB_DEMOTE = "demote"
THREAD_SCAN_NS = 50_000_000  # new threads of known processes: one listdir per process, cheap
SYSTEM_NS = 50_000_000  # /proc/stat and PSI: context, not per thread; cheap at 20 Hz
STATUS_NS = 500_000_000
STDIN_NS = 50_000_000
HANDOVER_NS = 10_000_000  # frames go to the writer in batches this far apart
# Under the eBPF sampler's kernel tick the recorder wakes this often to drain the ticks (and hands them over at
# each wake-up): its cost is mostly per wake-up, each numpy call running cold after the sleep (in-process on the
# Bitwig shape, alternating, 10 s each: 6.5-7.4 % of a core at 10 ms, 5.1-5.6 % at 20; the whole tool, nine
# rounds: recorder 3.3-4.6 % at 20 ms, 2.4-3.8 at 40, 2.1-3.1 at 50; pairs of 2026-12-06: 2.5-3.4 at 100
# against 3.2-4.0 at 50 (seven), 0.6 point less at 125 than at 100 at the median (eleven), README "The eBPF
# sampler"). 125 ms is two wake-ups a stat turn (STAT_SLOW_NS, 250 ms; EbpfTicker.stat_frame). Bounded by: the
# ring (TICK_RING_PAGES, 26 000 records) holds ~0.95 s of the Bitwig shape's ticks (55 records a tick, a 125 ms
# drain 5 000 at most); the stat lines are stored at the first tick after their read whatever this is
# (EbpfRows.stat); a wake-up is at most one SLEEP_SLICE_NS, so a stop is seen as soon; the flight watcher
# waits FLUSH_LAG_NS (3 s) for late rows; the last drain at the end is of one wake-up's ticks. The periodic
# work of the loop comes at its wake-ups: a followed process's new threads are listed within this of the
# probes counting them, /proc/stat and PSI are read at 8 Hz.
KERNEL_TICK_WAKE_NS = 125_000_000
SLEEP_SLICE_NS = 50_000_000  # a long wait for the next tick wakes this often to see a stop request
# What may wait for a writer that does not keep up (stopped, slow disk) on top of the pipe's 1 MiB;
# beyond it, new ticks are dropped and counted as lost (the trailer says so), so memory stays bounded.
BACKLOG_BYTES = 16 << 20
# After a stop request, the backlog gets this long to reach the writer; what does not is dropped
# (counted as lost), so every stop ends the recording in bounded time whatever the writer does.
END_DRAIN_NS = 400_000_000
CALM_END_NS = 60_000_000_000  # the end without a signal: a writer that takes longer than this is stuck
# How long the engine sources get to send their last rows at the end: a JACK client's close can wait on a
# server in trouble (the source gives it 2 s itself); after a signal, a share of the session's budget.
ENGINE_STOP_S = 10.0
ENGINE_STOP_URGENT_S = 0.3

PROC_STAT_BYTES = 1 << 20  # /proc/stat grows with CPUs and IRQs: 100+ KB on big machines

PR_SET_TIMERSLACK = 29
DEMOTE_CHECK_NS = 50_000_000  # how often quiet fast threads are looked for (samplers/tiers.py)


@dataclass
class RecorderOptions:
    output: str
    interval_ns: int = 2_000_000
    duration_ns: int | None = None
    sched: str = "rt"  # all | rt | none
    # auto | all | rt | none: per-thread netlink taskstats at the tick (root); auto: rt where a reply holds more
    # than the thread's /proc reads (samplers/tiers.py adds_to_proc)
    taskstats: str = "none"
    ebpf: bool = False  # the writer process attaches the eBPF probes (root, BCC)
    sampler: str = "proc"  # proc | ebpf: the tick reads /proc, or the kernel counters of samplers/ebpf/sampler.py
    # Why --sampler auto chose `sampler` (samplers/sampler_choice.py); None: it was given.
    sampler_why: str | None = None
    # Under --sampler ebpf: "kernel": a BPF program takes the tick and the recorder drains them every 125 ms
    # (the recorder's own tick where that cannot be had); "recorder": the recorder's own tick.
    ebpf_tick: str = "kernel"
    cpu: int | None = None
    rt_priority: int | None = None
    redact: bool = False
    mark_on_new_process: bool = False
    stdin_markers: bool = False
    pipewire: str = "off"  # auto | on | off: record the PipeWire profiler stream (samplers/engine)
    procfs: str = "/proc"
    meta: dict[str, Any] = field(default_factory=dict)
    # The JACK source's choice (samplers/engine/choose.py): {"kind": "jack", "server": name or None,
    # "explicit": bool, "follow": bool, "log_fd": fd of the server's output or None, "log_file": path or
    # None, "wait_s": s}; started with the recorder (samplers/engine/source.py).
    engine: dict[str, Any] | None = None
    # Read tiers (samplers/tiers.py): threads not worth every tick are read this often; 0: all every tick;
    # SLOW_AUTO: all every tick until the targets have more than AUTO_TIERS_ABOVE_THREADS threads.
    slow_interval_ns: int = SLOW_INTERVAL_NS
    fast: re.Pattern[str] | None = None  # threads whose name matches are always read every tick
    # A flight recording (capture/segments.py): {"segment_ns", "keep_ns"}; `output` is then the ring's directory.
    ring: dict[str, int] | None = None


@dataclass
class _Thread:
    tid: int
    pid: int
    fd_schedstat: int
    fd_stat: int
    fd_sched: int = -1
    taskstats: bool = False
    # Read state kept across layouts (samplers/tiers.py). last_schedstat as last read: unchanged means not
    # switched in since (the stat skip); b"" before the first read, so that it reads stat. base_schedstat:
    # what a slow read is compared with to decide a promotion.
    last_schedstat: bytes = b""
    base_schedstat: bytes = b""
    last_stat: bytes = b""
    seen_stat: bytes = b""
    moved_tick: int = -1
    # The sched file and taskstats are read where the counters may have moved (tiers.counters_may_have_moved),
    # and once, whatever they say, when the source starts for the thread: the baseline the first
    # increments are taken from (a real-time thread that never runs has one row, not none).
    sched_base_due: bool = True
    taskstats_base_due: bool = True
    slot: int = -1  # its index in the recorder's per-slot lists since the last _build_slots (-1: none yet)


@dataclass
class Status:
    elapsed_ns: int
    threads: int
    processes: int
    interval_p50_ns: float | None
    interval_p99_ns: float | None
    missed_ticks: int
    ticks: int
    file_bytes: int
    waiting_for: str | None = None
    markers: int = 0  # markers written so far
    last_marker: tuple[int, str] | None = None  # (ns since the start, label) of the latest one
    notes: tuple[str, ...] = ()  # what the engine sources could not record, so far (said once, when it comes)
    tiers_on: bool = False  # the read tiers read some threads less often than every tick (samplers/tiers.py)


class Recorder:
    """Samples the targets of `spec` until they exit, the duration ends, or `stop()` is called."""

    def __init__(
        self,
        spec: TargetSpec,
        options: RecorderOptions,
        on_status: Callable[[Status], None] | None = None,
        clock: Callable[[], int] = time.monotonic_ns,
        engine_rows_fds: dict[str, int] | None = None,
    ) -> None:
        """`engine_rows_fds`: per engine kind that may run, the write end of the writer's pipe for its
        rows (samplers/engine/source.py); the session makes them. Without one, that kind is not recorded."""
        self.spec = spec
        self.options = options
        self.procfs = ProcPaths(options.procfs)
        self.discovery = Discovery(spec, self.procfs)
        self.on_status = on_status
        self.clock = clock
        # The tick's reads: compiled (samplers/_tick.c) where it was built and the clock is the real one.
        self._read_tick, self.tick_code = tick_reader(clock)
        self.threads: dict[int, _Thread] = {}
        self.processes: dict[int, set[int]] = {}
        self.layout_id = 0
        self.layout_base = 0
        self.taskstats_client: Any = None
        self.delay_accounting: bool | None = None  # kernel.task_delayacct at the start (the sources' delayacct)
        self._jobs = PeriodicJobs({})  # the periodic work between ticks (run(), _periodic_job)
        self._demote_since_tick = 0  # the demotion check looks for schedstat moves from this tick on
        self.notes: list[str] = []  # one-line messages for the user (a source that could not be used)
        self._layout_dirty = True
        self.stop_reason: str | None = None
        self.ticks = 0
        self.missed_ticks = 0
        self.tick_times = TickTimes()
        self.reads = 0
        # The CPU of the tick's reads alone (read_tick: the syscalls and what decides them), within sampler_cpu_ns:
        # with the compiled tick, about the floor of those reads; the rest is the recorder's own work.
        self.tick_reads_cpu_ns = 0
        self.sample_rows = 0
        self.threads_seen = 0
        self.processes_seen = 0
        self._pipe = -1
        self._markers: list[tuple[int, str]] = []
        self._system_fds: dict[str, int] = {}
        self._stdin_buffer = b""
        self._outbox: list[bytes] = []
        self._outbox_ticks = 0
        # Handed-over chunks the pipe has not taken yet: (its frames, their bytes, ticks inside; written with
        # writev, never joined), and how much of the first one was written. Whole chunks only are ever
        # dropped, so the stream stays parseable.
        self._backlog: deque[tuple[list[bytes], int, int]] = deque()
        self._backlog_bytes = 0
        self._backlog_offset = 0
        self.lost_ticks = 0  # read, but never handed to the writer (it fell behind, or the end came)
        self.tick_frames = 0  # ticks put in the outbox; less those dropped at the end: in the capture
        self.lost_at_end = 0
        self.writer_pid: int | None = None  # our writer process, resumed at the end if it was stopped
        self.stop_requested_ns: int | None = None
        self.urgent = False
        self._process_names: dict[int, tuple[str | None, str | None]] = {}
        self._statm_fds: dict[int, int] = {}
        self._marker_count = 0
        self._last_marker: tuple[int, str] | None = None
        self.engines = EngineSources(options.pipewire, self.procfs, spec.exclude, engine_rows_fds, options.engine)
        self.ebpf_ticker: Any = None  # samplers.ebpf.sampler.EbpfTicker under --sampler ebpf
        self._ebpf_meta: dict[str, Any] = {}  # what its start() said, for the metadata
        # The eBPF sampler reads every thread's kernel counters in one copy: no read tiers under it.
        slow_interval_ns = options.slow_interval_ns if options.sampler == "proc" else 0
        self._tiers_auto = slow_interval_ns == SLOW_AUTO  # until they switch on (_tiers_when_grown)
        self.tiers = Tiers(options.interval_ns, 0 if self._tiers_auto else slow_interval_ns, options.fast)
        # Per phase of the slow tier: (fd schedstat, fd stat, stat forced, slot) per read, the layout id,
        # and (slot, tid) of the slow threads read there. Slots index the per-thread lists below.
        self.phase_hot: list[list[tuple[int, int, bool, int]]] = [[]]
        self.phase_slow: list[list[tuple[int, int]]] = [[]]
        self.phase_sched: list[list[tuple[int, int]]] = [[]]
        self.phase_taskstats: list[list[tuple[int, int]]] = [[]]  # (tid, slot) read at the phase's ticks
        self.phase_tids: list[list[int]] = [[]]
        self.slot_threads: list[_Thread] = []
        self.slot_tids: list[int] = []
        self.slot_pids: list[int] = []
        self.slot_fd_st: list[int] = []
        self.slot_read_skip: list[tuple[int, int, bool, int]] = []
        self.slot_read_forced: list[tuple[int, int, bool, int]] = []
        self.slot_fd_sched: list[int] = []
        self.slot_taskstats: list[bool] = []
        self.sched_base: list[bool] = []  # per slot: _Thread.sched_base_due
        self.taskstats_base: list[bool] = []
        self.slot_known: dict[int, int] = {}  # threads per process, of every slot (the layouts' "known")
        self.last_ss: list[bytes] = []
        self.base_ss: list[bytes] = []
        self.moved_tick: list[int] = []
        self.last_stat: list[bytes] = []
        self.seen_stat: list[bytes] = []
        self.tick_now = 0
        self.ebpf_sampler_end: dict[str, Any] | None = None  # its probes' figures, for the trailer

    # public control (signal handlers call these; they only set fields) -----------------------------
    def stop(self, reason: str, urgent: bool = False) -> None:
        """End the recording. `urgent` (a signal: someone wants the recorder gone) bounds the end: what
        the writer has not taken within about 2 s is dropped and counted, instead of waited for."""
        if self.stop_reason is None:
            self.stop_reason = reason
            self.stop_requested_ns = time.monotonic_ns()
            self.urgent = urgent

    def add_marker(self, text: str) -> None:
        self._markers.append((self.clock(), text))

    # setup -----------------------------------------------------------------------------------------
    def _send(self, data: bytes) -> None:
        self._outbox.append(data)

    def _hand_over(self) -> None:
        """Write what the outbox holds: one write (and one wake-up of the writer) per HANDOVER_NS, not
        per tick. A pipe write that wakes the reader costs ~10 us of CPU on a VM; batching five ticks
        cuts that fivefold and risks only the last 10 ms if the recorder is killed. The frames go in one
        writev as they are: joining them first copied every byte once more (the Bitwig shape's 56 MB/s).

        The pipe is non-blocking: a writer that does not read (stopped, or stuck on a slow disk) never
        stalls the tick or a stop request; what the pipe cannot take waits in the backlog."""
        if self._outbox:
            parts = self._outbox
            self._outbox = []
            size = sum(map(len, parts))
            self._backlog.append((parts, size, self._outbox_ticks))
            self._backlog_bytes += size
            self._outbox_ticks = 0
        while self._backlog:
            parts, size, _ = self._backlog[0]
            try:
                written = os.writev(self._pipe, _unwritten(parts, self._backlog_offset))
            except BlockingIOError:
                return
            self._backlog_offset += written
            if self._backlog_offset < size:
                continue
            self._backlog.popleft()
            self._backlog_bytes -= size
            self._backlog_offset = 0

    def _hand_over_until(self, deadline_ns: int) -> bool:
        """Hand over what waits, as the writer takes it, until `deadline_ns`; True when nothing is left."""
        self._hand_over()
        while self._backlog and self.clock() < deadline_ns:
            with contextlib.suppress(InterruptedError):
                select.select([], [self._pipe], [], max(0.0, (deadline_ns - self.clock()) * 1e-9))
            self._hand_over()
        return not self._backlog

    def _drain(self, deadline_ns: int) -> bool:
        """Hand over everything before `deadline_ns`; then drop the chunks not started (their ticks are
        lost). A chunk the writer took part of is kept (dropping its rest would cut a frame): what is
        sent later follows it. True when nothing is left waiting."""
        if self._hand_over_until(deadline_ns):
            return True
        started = self._backlog_offset > 0
        kept = [self._backlog.popleft()] if started else []
        dropped = sum(ticks for *_, ticks in self._backlog)
        self.lost_ticks += dropped
        self.lost_at_end += dropped
        self._backlog = deque(kept)
        self._backlog_bytes = sum(size for _, size, _ in kept)
        return not kept

    def _deliver(self, data: bytes, budget_ns: int) -> bool:
        """Send one frame that must arrive (metadata, a table, the trailer) within `budget_ns`."""
        self._send(data)
        return self._drain(self.clock() + budget_ns)

    def _event(self, t_ns: int, kind: str, pid: int | None, tid: int | None, text: str) -> None:
        self._send(frames.encode_json(frames.EVENT, {"t_ns": t_ns, "kind": kind, "pid": pid, "tid": tid, "text": text}))

    def _add_process(self, info: ProcessInfo, t_ns: int, at_start: bool) -> None:
        if info.pid in self.processes:
            return
        self.processes[info.pid] = set()
        self.processes_seen += 1
        cmdline = None if self.options.redact else info.cmdline
        text = f"{info.comm} ({info.why})" + ("" if self.options.redact else f": {info.cmdline[:200]}")
        self._event(t_ns, "process_found" if at_start else "process_appeared", info.pid, None, text)
        if self.options.mark_on_new_process and not at_start:
            self._event(t_ns, "marker", info.pid, None, f"new process {info.pid} {info.comm}")
        self._process_names[info.pid] = (info.comm, cmdline)
        if self.ebpf_ticker is not None:
            self.ebpf_ticker.follow(info.pid)  # before the listing: a thread it misses is counted
        with contextlib.suppress(OSError):  # gone already: its threads will not open either
            self._statm_fds[info.pid] = os.open(self.procfs.path(info.pid, "statm"), os.O_RDONLY | os.O_CLOEXEC)
        try:
            self._add_threads(info.pid, t_ns, at_start)
        except ForensicsError:
            if info.why in ("pid", "command"):
                raise  # asked for by name: the user must know now
            # Found by --match/--children but not ours to read (another user, hidepid): note it, go on.
            self._event(
                t_ns,
                "target_unreadable",
                info.pid,
                None,
                f"{info.comm}: permission denied; record as its user or as root",
            )
            self._process_exited(info.pid, t_ns)

    def _add_threads(self, pid: int, t_ns: int, at_start: bool) -> None:
        known = self.processes.get(pid)
        if known is None:
            return
        for tid in list_tids(self.procfs, pid):
            if tid in known:
                continue
            thread = self._open_thread(pid, tid)
            if thread is None:
                continue  # vanished between listing and opening: normal
            known.add(tid)
            self.threads[tid] = thread
            self.threads_seen += 1
            self._layout_dirty = True
            comm = self.procfs.read_text(pid, "task", tid, "comm", default="?")
            try:
                first = parse_stat(os.pread(thread.fd_stat, STAT_BYTES, 0))
            except (OSError, ValueError):
                first = None
            if self.ebpf_ticker is not None:
                self.ebpf_ticker.add(
                    tid, thread.fd_schedstat, first.minflt if first else 0, first.majflt if first else 0
                )
            process, cmdline = self._process_names.get(pid, (None, None))
            self.tiers.add(tid, pid, (comm or "?").rstrip("\n"), first.policy if first else None, t_ns)
            self._send(
                frames.encode_json(
                    frames.THREAD,
                    {
                        "t_ns": t_ns,
                        "tid": tid,
                        "pid": pid,
                        "comm": (comm or "?").rstrip("\n"),
                        "process": process,
                        "cmdline": cmdline,
                        "starttime": first.starttime if first else None,
                        "policy": first.policy if first else None,
                        "rtprio": first.rtprio if first else None,
                    },
                )
            )
            if not at_start:
                self._event(t_ns, "thread_appeared", pid, tid, (comm or "?").rstrip("\n"))

    def _open_thread(self, pid: int, tid: int) -> _Thread | None:
        fds: list[int] = []
        try:
            for name in ("schedstat", "stat"):
                fds.append(os.open(self.procfs.task(pid, tid, name), os.O_RDONLY | os.O_CLOEXEC))
        except FileNotFoundError:
            for fd in fds:
                os.close(fd)
            return None
        except PermissionError as err:
            for fd in fds:
                os.close(fd)
            raise ForensicsError(
                f"cannot read {err.filename}: permission denied; record as the target's user or as root"
            ) from err
        except OSError as err:
            for fd in fds:
                os.close(fd)
            if err.errno == errno.ESRCH:
                return None
            raise
        thread = _Thread(tid, pid, fds[0], fds[1])
        with contextlib.suppress(OSError):  # the baseline a first slow read is compared with (tiers)
            thread.base_schedstat = os.pread(fds[0], SCHEDSTAT_BYTES, 0)
        if self.options.sched == "all":
            self._open_sched(thread)
        thread.taskstats = self._wants_taskstats(thread, rt=False)
        return thread

    def _wants_taskstats(self, thread: _Thread, rt: bool) -> bool:
        """Whether a thread is queried (--taskstats): all, the real-time ones, or auto: the real-time ones where a
        reply holds more than the thread's /proc reads (tiers.adds_to_proc)."""
        mode = self.options.taskstats
        if self.taskstats_client is None or mode == "none":
            return False
        if mode == "all":
            return True
        return rt and (mode == "rt" or adds_to_proc(self.delay_accounting, sched_read=thread.fd_sched >= 0))

    def _open_sched(self, thread: _Thread) -> None:
        try:
            thread.fd_sched = os.open(self.procfs.task(thread.pid, thread.tid, "sched"), os.O_RDONLY | os.O_CLOEXEC)
            self._base_due(thread, self.sched_base, "sched_base_due")
        except OSError:
            thread.fd_sched = -1  # older kernels or hidepid: the sched columns stay null

    def _base_due(self, thread: _Thread, per_slot: list[bool], name: str) -> None:
        """A source starts for this thread: its next read is the baseline. Set on the slot too when it has one:
        the next _build_slots takes each thread's read state back from its slot."""
        setattr(thread, name, True)
        if 0 <= thread.slot < len(self.slot_threads) and self.slot_threads[thread.slot] is thread:
            per_slot[thread.slot] = True

    def _close_thread(self, thread: _Thread) -> None:
        for fd in (thread.fd_schedstat, thread.fd_stat, thread.fd_sched):
            if fd >= 0:
                os.close(fd)
        thread.fd_sched = -1

    def _thread_exited(self, tid: int, t_ns: int) -> None:
        thread = self.threads.pop(tid, None)
        if thread is None:
            return
        self._close_thread(thread)
        if self.ebpf_ticker is not None:
            self.ebpf_ticker.remove(tid)
        self.tiers.remove(tid)
        self._layout_dirty = True
        members = self.processes.get(thread.pid)
        if members is not None:
            members.discard(tid)
        self._event(t_ns, "thread_exited", thread.pid, tid, "")

    def _process_exited(self, pid: int, t_ns: int) -> None:
        for tid in list(self.processes.get(pid, ())):
            self._thread_exited(tid, t_ns)
        self.processes.pop(pid, None)
        self.discovery.drop(pid)
        if self.ebpf_ticker is not None:
            self.ebpf_ticker.unfollow(pid)
        fd = self._statm_fds.pop(pid, -1)
        if fd >= 0:
            os.close(fd)
        comm, _ = self._process_names.pop(pid, ("?", None))
        self._event(t_ns, "process_exited", pid, None, comm or "?")

    def _publish_layout(self) -> None:
        """One LAYOUT per phase of the slow tier (samplers/tiers.py): the threads read at that phase's
        ticks, fast ones first. The writer keeps the whole group; a tick names its phase's layout.

        The slots (threads sorted by pid, tid, with their read state and fds) change only when a thread
        comes or goes or its sources change (_layout_dirty); a tier change alone rebuilds the phases'
        read lists on the slots as they are."""
        if self._layout_dirty:
            self._build_slots()
        tids, pids, fd_sched = self.slot_tids, self.slot_pids, self.slot_fd_sched
        read_skip, read_forced = self.slot_read_skip, self.slot_read_forced
        group = self.layout_id + 1
        ebpf = self.ebpf_ticker is not None  # --sampler ebpf: no /proc read per thread at the tick
        fast, forced_at, slow_at = self.tiers.phase_split(tids)
        # What every phase shares: the fast threads first, in the same order.
        fast_hot = [read_skip[slot] for slot in fast]
        fast_tids = [tids[slot] for slot in fast]
        fast_pids = [pids[slot] for slot in fast]
        fast_sched = [(fd_sched[slot], slot) for slot in fast if fd_sched[slot] >= 0]
        fast_sched_at = [i for i, slot in enumerate(fast) if fd_sched[slot] >= 0]
        fast_text = {  # the LAYOUT lists' shared part, as JSON text once (frames.encode_layout)
            "tids": frames.int_list_text(fast_tids),
            "pids": frames.int_list_text(fast_pids),
            "sched": frames.int_list_text(fast_sched_at),
        }
        self.phase_hot, self.phase_slow, self.phase_sched, self.phase_tids = [], [], [], []
        self.phase_taskstats = []
        fast_taskstats = [(tids[slot], slot) for slot in fast if self.slot_taskstats[slot]]
        for forced, slow in zip(forced_at, slow_at, strict=True):
            self.layout_id += 1
            hot = fast_hot.copy()
            for k in forced:
                hot[k] = read_forced[fast[k]]
            hot += [read_forced[slot] for slot in slow]
            self.phase_hot.append([] if ebpf else hot)
            self.phase_slow.append([(slot, tids[slot]) for slot in slow])
            self.phase_sched.append(fast_sched + [(fd_sched[slot], slot) for slot in slow if fd_sched[slot] >= 0])
            self.phase_taskstats.append(
                fast_taskstats + [(tids[slot], slot) for slot in slow if self.slot_taskstats[slot]]
            )
            slow_tids = [tids[slot] for slot in slow]
            phase_tids = fast_tids + slow_tids
            self.phase_tids.append(phase_tids)
            slow_sched_at = [len(fast) + i for i, slot in enumerate(slow) if fd_sched[slot] >= 0]
            if ebpf:  # one phase: the tiers are off under the eBPF sampler
                spec: dict[str, Any] = {
                    "id": self.layout_id,
                    "group": group,
                    "tids": phase_tids,
                    "pids": fast_pids + [pids[slot] for slot in slow],
                    "sched": fast_sched_at + slow_sched_at,
                    "known": self.slot_known,
                    "slots": self.ebpf_ticker.layout(phase_tids, [self.slot_fd_st[slot] for slot in fast + slow]),
                }
                self._send(frames.encode_json(frames.LAYOUT, spec))
                self.ebpf_ticker.layout_sent(self.layout_id)
                continue
            lists = {
                "tids": (fast_text["tids"], frames.int_list_text(slow_tids)),
                "pids": (fast_text["pids"], frames.int_list_text([pids[slot] for slot in slow])),
                "sched": (fast_text["sched"], frames.int_list_text(slow_sched_at)),
            }
            self._send(frames.encode_layout(self.layout_id, group, lists, self.slot_known))
        self.layout_base = group
        self._send_tiers()

    def _build_slots(self) -> None:
        """The slots anew: each thread's read state goes back to its _Thread, then into the new order."""
        for slot, thread in enumerate(self.slot_threads):
            thread.last_schedstat, thread.base_schedstat = self.last_ss[slot], self.base_ss[slot]
            thread.last_stat, thread.seen_stat = self.last_stat[slot], self.seen_stat[slot]
            thread.moved_tick = self.moved_tick[slot]
            thread.sched_base_due, thread.taskstats_base_due = self.sched_base[slot], self.taskstats_base[slot]
        order = sorted(self.threads.values(), key=lambda t: (t.pid, t.tid))
        self.slot_threads = order
        for slot, thread in enumerate(order):
            thread.slot = slot
        self.last_ss = [t.last_schedstat for t in order]
        self.base_ss = [t.base_schedstat for t in order]
        self.moved_tick = [t.moved_tick for t in order]
        self.last_stat = [t.last_stat for t in order]
        self.seen_stat = [t.seen_stat for t in order]
        self.slot_tids = [t.tid for t in order]
        self.slot_pids = [t.pid for t in order]
        self.slot_fd_st = [t.fd_stat for t in order]
        self.slot_fd_sched = [t.fd_sched for t in order]
        # The tick's read entries (fd schedstat, fd stat, stat forced, slot), made once per slot.
        self.slot_read_skip = [(t.fd_schedstat, t.fd_stat, False, slot) for slot, t in enumerate(order)]
        self.slot_read_forced = [(t.fd_schedstat, t.fd_stat, True, slot) for slot, t in enumerate(order)]
        known: dict[int, int] = {}
        for t in order:
            known[t.pid] = known.get(t.pid, 0) + 1
        self.slot_known = known
        self.slot_taskstats = [t.taskstats for t in order]
        self.sched_base = [t.sched_base_due for t in order]
        self.taskstats_base = [t.taskstats_base_due for t in order]
        self._layout_dirty = False

    def _send_tiers(self) -> None:
        rows = self.tiers.take_rows()
        if rows:
            self._send(frames.encode_json(frames.TIERS, {"rows": rows}))

    def _after_tick(self, tick: int, phase: int, now: int) -> None:
        """Promotions from this tick's slow reads: it ran long enough since its last slow read
        (tiers.earns_fast_tier), or its stat shows a real-time policy."""
        moved, base, last_ss = self.moved_tick, self.base_ss, self.last_ss
        for slot, tid in self.phase_slow[phase]:
            if moved[slot] == tick:
                if earns_fast_tier(base[slot], last_ss[slot]):
                    self.tiers.ran(tid, now)
                base[slot] = last_ss[slot]
                continue
            text = self.last_stat[slot]
            if text and text != self.seen_stat[slot]:
                self.seen_stat[slot] = text
                self.tiers.policy_seen(tid, stat_policy(text), now)

    def _demote(self, now: int, since_tick: int) -> None:
        """Fast threads whose schedstat moved since the last check ran; the others may be quiet now."""
        slow = self.tiers.is_slow
        for slot, thread in enumerate(self.slot_threads):
            if not slow(thread.tid):
                self.base_ss[slot] = self.last_ss[slot]  # a demoted thread's slow reads start from here
                if self.moved_tick[slot] >= since_tick:
                    self.tiers.ran(thread.tid, now)
        self.tiers.demote_quiet(now)

    # the periodic work between ticks ----------------------------------------------------------------
    def _periodic_job(self, job: str, now: int) -> None:
        """Run one periodic job of the loop and set when it is due next."""
        jobs = self._jobs.due_ns
        mono = self.clock
        if job == JOB_SYSTEM:
            self._read_system(mono())
            jobs[job] += SYSTEM_NS  # on its grid: 20 Hz however late one read came
        elif job == JOB_DISCOVERY:
            self._discover(mono())
            jobs[job] = now + DISCOVERY_NS
            jobs[JOB_THREAD_SCAN] = jobs[JOB_RT_SOURCES] = now  # the new processes' threads, then their sources
            if self.spec.command_pid is not None and self.spec.command_pid not in self.processes:
                self.stop("the command exited")
            elif not self.processes and self.spec.match is None:
                self.stop("every target exited")
        elif job == JOB_THREAD_SCAN:
            self._scan_threads(mono())
            jobs[job] = now + THREAD_SCAN_NS
            self._tiers_when_grown(mono())  # after the new threads' rows: their first tier came first
        elif job == JOB_RT_SOURCES:
            self._update_rt_sources()
            jobs[job] = NEVER_NS
        else:  # JOB_DEMOTE
            self._demote(now, self._demote_since_tick)
            jobs[job] = now + DEMOTE_CHECK_NS
            self._demote_since_tick = self.tick_now + 1

    def _tiers_when_grown(self, t_ns: int) -> None:
        """--slow-interval auto: the tiers switch on, once, when the targets have more than
        AUTO_TIERS_ABOVE_THREADS threads (samplers/tiers.py says why); the metadata says when."""
        if not self._tiers_auto or len(self.threads) <= AUTO_TIERS_ABOVE_THREADS:
            return
        self._tiers_auto = False
        self.tiers = self.tiers.switched_on(SLOW_INTERVAL_NS, t_ns)
        for slot in range(len(self.slot_threads)):  # a thread's first slow read is compared with its last read
            self.base_ss[slot] = self.last_ss[slot]
        self._layout_dirty = True
        jobs = self._jobs.due_ns
        if jobs:  # the loop runs: demotions from now on
            jobs[JOB_DEMOTE] = t_ns + DEMOTE_CHECK_NS
            self._jobs.next_ns = min(jobs.values())
        info = {"asked": "auto", "slow_interval_ns": SLOW_INTERVAL_NS, "on_ns": t_ns, "threads": len(self.threads)}
        self._send(frames.encode_json(frames.META, {"read_tiers": info}))

    def _discover(self, t_ns: int) -> None:
        """Target processes gone and new; engines. Their threads: the thread scan and the sources' update after
        it, each a job of its own (_periodic_job)."""
        for pid in list(self.processes):
            if not self.discovery.still_alive(pid):
                self._process_exited(pid, t_ns)
        for info in self.discovery.scan():
            self._add_process(info, t_ns, at_start=False)
        self._engines(t_ns)

    def _engines(self, t_ns: int) -> None:
        """Start an engine source when a target is its client; record the engines' clients."""
        self.engines.consider(
            list(self.processes), targets_later=self.spec.match is not None or self.spec.command_pid is not None
        )
        pids = self.engines.poll(set(self.processes))
        self.tiers.set_engine_pids(pids, t_ns)  # an engine's threads are read every tick
        for pid in pids:
            info = self.discovery.adopt(pid, "engine client")
            if info is not None:
                self._add_process(info, t_ns, at_start=False)

    def _update_rt_sources(self) -> None:
        """Under --sched rt / --taskstats rt or auto, read those sources for exactly the real-time threads (auto:
        beside the sched file only where taskstats adds to it)."""
        sched_rt = self.options.sched == "rt"
        taskstats_rt = self.options.taskstats in ("rt", "auto") and self.taskstats_client is not None
        if not (sched_rt or taskstats_rt or self.tiers.enabled):
            return
        for thread in self.threads.values():
            try:
                policy = os.sched_getscheduler(thread.tid)
            except OSError:
                continue
            rt = policy in RT_POLICIES
            self.tiers.policy_seen(thread.tid, policy, self.clock())
            if sched_rt and rt and thread.fd_sched < 0:
                self._open_sched(thread)
                self._layout_dirty = thread.fd_sched >= 0 or self._layout_dirty
            elif sched_rt and not rt and thread.fd_sched >= 0:
                os.close(thread.fd_sched)
                thread.fd_sched = -1
                self._layout_dirty = True
            wanted = taskstats_rt and self._wants_taskstats(thread, rt)
            if taskstats_rt and thread.taskstats != wanted:
                thread.taskstats = wanted
                self._base_due(thread, self.taskstats_base, "taskstats_base_due")
                self._layout_dirty = True

    def _read_taskstats(self, tick: int, phase: int) -> None:
        """One netlink query (about 5 us here) per thread whose counters may have moved since its last query
        (tiers.counters_may_have_moved: on the Bitwig shape at 2 ms ~45 of the 121 real-time threads a tick
        instead of all of them): raw replies, parsed by the writer. Only at the ticks the thread is read (a
        slow-tier thread's phase): the analyses join a query's increments to the window its read closes
        (analyses/windows.py _delta_windows), so a query between two reads would lose them. A thread not
        queried at a read has no row there; the next row's increments cover the gap. Under --sampler ebpf
        no schedstat is read at the tick: every thread every tick.
        """
        query = self.taskstats_client.query_raw
        mono = self.clock
        every_tick = self.ebpf_ticker is not None
        moved, last_stat = self.moved_tick, self.last_stat
        tids: list[int] = []
        times: list[int] = []
        replies: list[bytes] = []
        base = self.taskstats_base
        for tid, slot in self.phase_taskstats[phase]:
            if not (every_tick or base[slot] or counters_may_have_moved(moved[slot], last_stat[slot], tick)):
                continue
            base[slot] = False
            tids.append(tid)
            times.append(mono())
            try:
                replies.append(query(tid) or b"")
            except OSError:  # refused for this thread (e.g. another user namespace): no row
                replies.append(b"")
        if tids:
            self._send(frames.encode_taskstats(tick, tids, times, replies))

    def _scan_threads(self, t_ns: int) -> None:
        # Under the eBPF sampler a probe counts the tasks the targets create: none since the last scan, nothing
        # to list (a listdir of 534 tasks every 50 ms was 1-2 % of a core on the Bitwig-shaped target).
        if self.ebpf_ticker is not None and not self.ebpf_ticker.threads_may_be_new():
            return
        for pid in list(self.processes):
            self._add_threads(pid, t_ns, at_start=False)

    def _read_system(self, t_ns: int) -> None:
        statm = []
        for pid, fd in self._statm_fds.items():
            with contextlib.suppress(OSError):  # exited since the last discovery: normal
                statm.append([pid, os.pread(fd, 256, 0).decode()])
        if statm:
            self._send(frames.encode_json(frames.PROCESSES, {"t_ns": t_ns, "statm": statm}))
        if not self._system_fds:
            return
        parts: list[bytes] = []
        for name in ("stat", *PRESSURE_FILES):
            fd = self._system_fds.get(name, -1)
            try:
                parts.append(os.pread(fd, PROC_STAT_BYTES, 0) if fd >= 0 else b"")
            except OSError:
                parts.append(b"")
        self._send(frames.encode_system(t_ns, parts))

    def _poll_stdin(self, t_ns: int) -> None:
        try:
            ready, _, _ = select.select([sys.stdin], [], [], 0)
        except (OSError, ValueError):
            self.options.stdin_markers = False
            return
        if not ready:
            return
        data = os.read(sys.stdin.fileno(), 4096)
        if not data:
            self.options.stdin_markers = False  # stdin closed
            return
        self._stdin_buffer += data
        while b"\n" in self._stdin_buffer:
            line, _, self._stdin_buffer = self._stdin_buffer.partition(b"\n")
            label = line.decode(errors="replace").strip()
            self._markers.append((t_ns, label or f"mark {self._marker_count + len(self._markers) + 1}"))

    def _flush_markers(self) -> None:
        while self._markers:
            t_ns, text = self._markers.pop(0)
            self._marker_count += 1
            self._last_marker = (t_ns, text)
            self._event(t_ns, "marker", None, None, text)

    def _status(self, now: int, start: int) -> Status:
        p50, p99 = self.tick_times.recent_percentiles((50, 99))
        try:
            size = os.stat(self.options.output).st_size
        except OSError:
            size = 0
        waiting = None
        if not self.threads and self.spec.match is not None:
            waiting = f"a process matching {self.spec.match.pattern!r}"
        last = (self._last_marker[0] - start, self._last_marker[1]) if self._last_marker else None
        return Status(
            now - start,
            len(self.threads),
            len(self.processes),
            p50,
            p99,
            self.missed_ticks,
            self.ticks,
            size,
            waiting,
            self._marker_count,
            last,
            tuple(self.engines.notes),
            self.tiers.enabled,
        )

    # the run ----------------------------------------------------------------------------------------
    def prepare(self, started: tuple[Any, dict[str, Any]] | None = None) -> None:
        """Start what is slow and needs no target: under --sampler ebpf, the sampler's compile and attach (0.5-0.8
        s). catch-load calls it before it launches the command to record, so that the command's first moments are
        recorded: when run() did it, a launched command's first row came 0.4 s after its first action (its
        /proc counterpart, 3 ms before). run() calls it otherwise. Raises EbpfUnavailable (one line, why).
        `started`: the sampler start_ebpf_ticker started already (--sampler auto tries it before the session)."""
        opts = self.options
        if opts.sampler != "ebpf" or self.ebpf_ticker is not None:
            return
        self.ebpf_ticker, self._ebpf_meta = started if started is not None else start_ebpf_ticker(opts)

    def release(self) -> None:
        """Undo prepare() where the recording ends before or without run()'s own end (an error, or a command that
        could not be launched): the probes detached, tracefs unmounted if the sampler mounted it. After run()'s
        own stop, nothing more: EbpfSampler.stop() does each part only once."""
        if self.ebpf_ticker is not None:
            self.ebpf_ticker.stop()

    def run(self, writer_pipe: int, base_meta: dict[str, Any]) -> dict[str, Any]:
        """Record until the end. Returns the trailer; `finish` sends it (after any extra tables)."""
        self._pipe = writer_pipe
        opts = self.options
        if opts.cpu is not None:
            try:
                os.sched_setaffinity(0, {opts.cpu})
            except OSError as err:
                raise ForensicsError(f"cannot pin the sampler to CPU {opts.cpu}: {err.strerror}") from err
        sampler_policy = self._set_priority(opts.rt_priority)
        # Read after --delayacct switched it on: whether taskstats beside the sched file adds anything (auto).
        self.delay_accounting = base_meta.get("sources", {}).get("delayacct")
        if opts.taskstats != "none":
            self._open_taskstats()
        sampler_meta: dict[str, Any] = {}
        if opts.sampler == "ebpf":
            self.prepare()  # done already when catch-load launched a command; EbpfUnavailable: one line, why
            sampler_meta = {"ebpf_sampler": self._ebpf_meta}
        base_meta = {
            **base_meta,
            "recording": {
                **base_meta.get("recording", {}),
                "sampler_policy": sampler_policy,
                "sampler": opts.sampler,
                "tick_code": self.tick_code,
                **({"sampler_why": opts.sampler_why} if opts.sampler_why is not None else {}),
            },
            **sampler_meta,
            "sources": {
                **base_meta.get("sources", {}),
                "taskstats": opts.taskstats if self.taskstats_client is not None else False,
            },
        }
        _set_timer_slack_ns(1)  # default 50 us of slack would be 2.5 % of every tick's wake-up
        hold_freed_heap()  # a tick's frame is allocated and freed at every tick (samplers/heap.py)
        for name in ("stat", *PRESSURE_FILES):
            path = self.procfs.path("stat") if name == "stat" else self.procfs.path("pressure", name)
            # No PSI (CONFIG_PSI off, or psi=0 on the kernel command line): those columns stay null.
            with contextlib.suppress(OSError):
                self._system_fds[name] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)

        # Non-blocking: see _hand_over. The writer's pipe is ours alone (made by the session).
        fcntl.fcntl(writer_pipe, fcntl.F_SETFL, fcntl.fcntl(writer_pipe, fcntl.F_GETFL) | os.O_NONBLOCK)
        self._send(frames.encode_json(frames.META, base_meta))
        found_at = self.clock()
        for info in self.discovery.initial():
            self._add_process(info, found_at, at_start=True)
        self._tiers_when_grown(self.clock())
        if not self.processes and self.spec.match is None and self.spec.command_pid is None:
            raise ForensicsError("no target process found")
        self._engines(found_at)
        self._update_rt_sources()
        kernel_ticks = self.ebpf_ticker is not None and self.ebpf_ticker.kernel_ticks is not None
        if kernel_ticks:
            self._publish_layout()  # before tick 0: the kernel's ticks from tick 0 on name it
            # Every thread's stat line (all new) before tick 0, so that tick 0 has their rows: a line is stored at
            # the first tick taken after it was read (EbpfRows.stat).
            ticker = self.ebpf_ticker
            data, gone = ticker.stat_frame(0, self.layout_base, self.clock)
            if data:
                self._send(data)
            for i in gone:
                self._thread_exited(ticker.tids[i], self.clock())
        start = self.clock()  # tick 0: after the initial discovery, which opened every fd

        # Under the kernel's tick (samplers/ebpf/sampler.py KernelTicks) the loop wakes every KERNEL_TICK_WAKE_NS to
        # drain the ticks the kernel took meanwhile; its lateness misses no tick, the kernel's gaps do.
        if kernel_ticks:
            self.ebpf_ticker.begin(start)
        interval = KERNEL_TICK_WAKE_NS if kernel_ticks else opts.interval_ns
        end_at = start + opts.duration_ns if opts.duration_ns else None
        next_handover = start
        next_status = start + STATUS_NS
        next_stdin = start
        next_tier_layout = 0
        # The periodic work between ticks (_periodic_job): when each is due first.
        self._jobs = jobs = PeriodicJobs(
            {
                JOB_SYSTEM: start,
                JOB_DISCOVERY: start + DISCOVERY_NS,
                JOB_THREAD_SCAN: start + THREAD_SCAN_NS,
                JOB_RT_SOURCES: NEVER_NS,  # after each discovery's thread scan
                JOB_DEMOTE: start + DEMOTE_CHECK_NS if self.tiers.enabled else NEVER_NS,
            }
        )
        self._demote_since_tick = 0
        rusage_start = resource.getrusage(resource.RUSAGE_SELF)

        mono = self.clock
        write = self._send
        read_tick = self._read_tick
        thread_time = time.thread_time_ns
        sleep = time.sleep
        tick = 0
        due = start
        gc_was_enabled = gc.isenabled()
        gc.disable()  # a collection pause inside the tick would be a missed tick; nothing here makes cycles
        try:
            while self.stop_reason is None:
                now = mono()
                while now < due and self.stop_reason is None:
                    # In slices: a signal handler only sets stop_reason, and time.sleep resumes after
                    # it (PEP 475), so one long sleep would hide a stop request for a whole interval.
                    wake = min(due, now + SLEEP_SLICE_NS, end_at if end_at is not None else due)
                    sleep((wake - now) * 1e-9)
                    now = mono()
                    if end_at is not None and now >= end_at:
                        self.stop("duration reached")
                if self.stop_reason is not None:
                    break
                late = now - due
                if late >= interval:
                    skipped = late // interval
                    if not kernel_ticks:
                        self.missed_ticks += skipped
                        tick += skipped
                    due += skipped * interval
                if end_at is not None and now >= end_at:
                    self.stop("duration reached")
                    break
                self.tick_now = tick
                # A thread that exited must leave the lists now (its fds are closed); tier changes are
                # applied at most once per slow interval: a layout costs a sort and one frame per phase.
                if self._layout_dirty or (self.tiers.dirty and tick >= next_tier_layout):
                    self._publish_layout()
                    next_tier_layout = tick + self.tiers.period

                # ---- the hot part: raw reads only (samplers/tick_reads.py) ----
                phase = tick % self.tiers.period
                cpu_before = thread_time()
                frame, reads, rows, dead = read_tick(
                    self.phase_hot[phase],
                    self.phase_sched[phase],
                    self.last_ss,
                    self.last_stat,
                    self.moved_tick,
                    self.sched_base,
                    tick,
                    self.layout_base + phase,
                    now,
                )
                self.tick_reads_cpu_ns += thread_time() - cpu_before
                if self.phase_taskstats[phase]:
                    self._read_taskstats(tick, phase)
                # ---- hand over ----
                if frame is not None and self._backlog_bytes > BACKLOG_BYTES:
                    self.lost_ticks += 1  # the writer is far behind: dropped here, said in the trailer
                elif frame is not None:  # None: no target thread yet (--match still waiting)
                    write(frame)
                    self._outbox_ticks += 1
                    self.tick_frames += 1
                ebpf_tids = self.phase_tids[phase] if self.ebpf_ticker is not None else []
                if kernel_ticks:
                    # The stat lines due, then the ticks the kernel took since the last wake-up. The lines go
                    # before those ticks (numbered as the first), and the writer stores them at the first tick
                    # taken after their read, here or in a later drain (EbpfRows.stat): a value is never shown
                    # before it was read, whatever KERNEL_TICK_WAKE_NS (DESIGN.md "The eBPF sampler").
                    if ebpf_tids:
                        ticker = self.ebpf_ticker
                        data, gone = ticker.stat_frame(ticker.kernel_ticks.last_tick + 1, self.layout_base, mono)
                        dead = [(i, now) for i in gone]
                        if data:
                            write(data)
                    self._kernel_ticks()
                elif ebpf_tids:  # --sampler ebpf: hot is empty, the ticker copies the kernel's counters
                    data, gone = self.ebpf_ticker.tick(tick, self.layout_base + phase, mono)
                    dead = [(i, now) for i in gone]
                    if self._send_tick_frame(data):
                        self.sample_rows += len(ebpf_tids) - len(dead)
                    else:
                        self.ebpf_ticker.lost()  # the next slot frame is whole: the writer's base is older
                if now >= next_handover:
                    self._hand_over()
                    next_handover = now + HANDOVER_NS
                if not kernel_ticks:
                    self.tick_times.append(now)
                    self.ticks += 1
                self.reads += reads
                self.sample_rows += rows

                # ---- between ticks ----
                if dead:
                    tids = self.phase_tids[phase]
                    for i, read_ns in dead:
                        self._thread_exited(tids[i], read_ns)
                if self.tiers.enabled:
                    self._after_tick(tick, phase, now)
                    if self.tiers.rows:
                        self._send_tiers()
                if self._markers:
                    self._flush_markers()
                if opts.stdin_markers and now >= next_stdin:
                    self._poll_stdin(mono())
                    next_stdin = now + STDIN_NS
                if now >= jobs.next_ns:  # spread over the ticks (samplers/periodic.py)
                    jobs.run_due(now, due, interval, self._periodic_job, mono)
                if self.on_status is not None and now >= next_status:
                    self.on_status(self._status(mono(), start))
                    next_status += STATUS_NS
                tick += 1
                due += interval
        finally:
            if gc_was_enabled:
                gc.enable()
        end = mono()
        if kernel_ticks:  # the last ones, up to the end
            self.ebpf_ticker.kernel_ticks.end_ns = end
            self._kernel_ticks()
        self._flush_markers()
        rusage_end = resource.getrusage(resource.RUSAGE_SELF)
        for tid, thread in list(self.threads.items()):
            self._close_thread(thread)
            del self.threads[tid]
        for fd in (*self._system_fds.values(), *self._statm_fds.values()):
            os.close(fd)
        self._system_fds.clear()
        self._statm_fds.clear()
        if self.taskstats_client is not None:
            self.taskstats_client.close()
        if self.ebpf_ticker is not None:
            self.reads += self.ebpf_ticker.reads
            self.ebpf_sampler_end = self.ebpf_ticker.stop()
        # Each source writes its last rows and its end to the writer, which reads every pipe to its end
        # before the trailer; a stop by signal leaves them a share of WRITER_END_BUDGET_NS (session.py).
        self.engines.stop(ENGINE_STOP_URGENT_S if self.urgent else ENGINE_STOP_S)
        stopped_at = self.stop_requested_ns or end
        if self.writer_pid is not None:
            # A writer stopped (SIGSTOP, or job control that reached it alone) could never finish the
            # file: it is our child and the recording is over, so it resumes. Harmless if it runs.
            with contextlib.suppress(OSError):
                os.kill(self.writer_pid, signal.SIGCONT)
            # It runs at nice 10 so as not to disturb the tick; the ticks are over, and the end is due.
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, self.writer_pid, 0)
        # An end the recording chose (duration, the targets exited) waits for the writer: a script that
        # reads the capture next must find it whole. A stop request by signal is bounded.
        drain_until = stopped_at + END_DRAIN_NS if self.urgent else self.clock() + CALM_END_NS
        self._drain(max(drain_until, self.clock() + 100_000_000))
        return self._trailer(start, end, rusage_start, rusage_end)

    def _kernel_ticks(self) -> None:
        """Hand over the ticks the kernel took since the last call (--sampler ebpf, KernelTicks)."""
        ticker = self.ebpf_ticker
        done = ticker.collect(self._send_tick_frame)
        for _, t_ns in done:
            self.tick_times.append(t_ns)
        self.ticks += len(done)
        self.sample_rows += ticker.rows_sent
        self.missed_ticks = ticker.missed_ticks

    def _send_tick_frame(self, data: bytes, ticks: int = 1) -> bool:
        """Queue a frame of `ticks` ticks, or drop it when the writer is far behind (said in the trailer)."""
        if self._backlog_bytes > BACKLOG_BYTES:
            self.lost_ticks += ticks
            return False
        self._send(data)
        self._outbox_ticks += ticks
        self.tick_frames += ticks
        return True

    def _open_taskstats(self) -> None:
        from samplers.taskstats import TaskstatsClient, TaskstatsUnavailable

        try:
            client = TaskstatsClient()
            client.check_permission()
        except TaskstatsUnavailable as err:
            self.notes.append(f"taskstats: {err}")
            return
        self.taskstats_client = client

    @staticmethod
    def _set_priority(rt_priority: int | None) -> str:
        """SCHED_FIFO for the sampler: asked for (N), by default (None: priority 1 if permitted), or not (0).

        Why by default: a SCHED_OTHER sampler woken on a CPU where a real-time thread runs waits until
        that thread sleeps (CFS cannot preempt it, and is not pulled away at once), so exactly the
        episodes worth catching lose ticks. At FIFO 1 the kernel's RT push moves the sampler to a free
        CPU instead (kernel/sched/rt.c, push_rt_task). Priority 1 preempts only SCHED_OTHER work.
        """
        if rt_priority == 0:
            return "OTHER"
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(rt_priority or 1))
        except PermissionError:
            if rt_priority is None:
                return "OTHER (SCHED_FIFO not permitted)"
            raise ForensicsError(
                "--rt-priority needs root or CAP_SYS_NICE (or an rtprio limit in /etc/security/limits.conf)"
            ) from None
        return f"FIFO {rt_priority or 1}"

    def add_meta(self, patch: dict[str, Any]) -> None:
        self._deliver(frames.encode_json(frames.META, patch), END_DRAIN_NS if self.urgent else CALM_END_NS)

    def add_table(self, name: str, rows: dict[str, list[Any]]) -> None:
        """A small table recorded beside the samples (the lab's ground truth), before `finish`."""
        table = frames.encode_json(frames.TABLE, {"name": name, "rows": rows})
        self._deliver(table, END_DRAIN_NS if self.urgent else CALM_END_NS)

    def finish(self, trailer: dict[str, Any], budget_ns: int = CALM_END_NS) -> bool:
        """Send the trailer: the writer completes the file and exits. Within `budget_ns` the recorder
        hands it over itself. A writer still behind then (one stopped until the end, or a loaded
        machine: it may have up to a pipe's worth, 1 MiB, to parse first) gets the rest from a child
        process that waits for it, so a stop stays bounded and the capture still ends with its counts
        (the trailer's lost_ticks were settled before). False only when not even that could start: the
        capture then ends without a trailer, and says so."""
        self._send(frames.encode_json(frames.TRAILER, trailer))
        return self._hand_over_until(self.clock() + budget_ns) or self._hand_over_from_child()

    def _hand_over_from_child(self) -> bool:
        """Fork a child that writes what the backlog holds (the rest of a started chunk, then the
        trailer) with blocking writes, then exits; the writer reads to its EOF, which comes when the
        child is done. It lives at most CALM_END_NS (an alarm) and ends on EPIPE if the writer died."""
        first, *later = self._backlog
        rest = b"".join(
            [*_unwritten(first[0], self._backlog_offset, limit=None), *(part for parts, *_ in later for part in parts)]
        )
        try:
            pid = os.fork()
        except OSError:
            return False
        if pid == 0:  # the child: only os calls, then _exit (no Python clean-up of the parent's state)
            try:
                signal.signal(signal.SIGALRM, signal.SIG_DFL)
                signal.alarm(CALM_END_NS // 1_000_000_000)
                os.set_blocking(self._pipe, True)
                view = memoryview(rest)
                while view:
                    view = view[os.write(self._pipe, view) :]
            finally:
                os._exit(0)
        self._backlog.clear()
        self._backlog_bytes = 0
        self._backlog_offset = 0
        return True

    def _trailer(self, start: int, end: int, r0: resource.struct_rusage, r1: resource.struct_rusage) -> dict[str, Any]:
        times = self.tick_times
        cpu_ns = int(((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)) * 1e9)
        return {
            "ended_ns": end,
            "duration_ns": end - start,
            "end_reason": self.stop_reason or "stopped",
            "ticks": self.ticks,
            "missed_ticks": self.missed_ticks,
            # Read, but never handed to the writer: not in the capture. `ticks - lost_ticks` ticks are.
            "lost_ticks": self.lost_ticks,
            "ticks_in_capture": self.tick_frames - self.lost_at_end,
            "interval_p50_ns": times.percentile(50),
            "interval_p99_ns": times.percentile(99),
            "interval_max_ns": times.max_ns if times.count else None,
            "interval_mean_ns": times.mean_ns,
            "sampler_cpu_ns": cpu_ns,
            "sampler_user_ns": int((r1.ru_utime - r0.ru_utime) * 1e9),
            "sampler_system_ns": int((r1.ru_stime - r0.ru_stime) * 1e9),
            "reads": self.reads,
            "tick_reads_cpu_ns": self.tick_reads_cpu_ns,
            "threads_seen": self.threads_seen,
            "processes_seen": self.processes_seen,
            "max_rss_kib": r1.ru_maxrss,
            **({"ebpf_sampler": self.ebpf_sampler_end} if self.ebpf_sampler_end is not None else {}),
        }


def start_ebpf_ticker(opts: RecorderOptions) -> tuple[Any, dict[str, Any]]:
    """The eBPF sampler for these options, compiled and attached, and what its start said for the metadata.
    Raises EbpfUnavailable (one line, why)."""
    from samplers.ebpf.sampler import EbpfTicker

    wake_ns = KERNEL_TICK_WAKE_NS if opts.ebpf_tick == "kernel" else None
    ticker = EbpfTicker(opts.interval_ns, wake_ns=wake_ns, cpu=opts.cpu or 0)
    try:
        return ticker, ticker.start()
    except BaseException:
        ticker.sampler.stop()  # whatever it attached before it failed: --sampler auto records from /proc then
        raise


IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 16  # POSIX's least: 16


def _unwritten(parts: list[bytes], offset: int, limit: int | None = IOV_MAX) -> list[bytes | memoryview]:
    """The frames of a chunk from byte `offset` on (the first one cut where the last write ended), at most
    `limit` of them: what one writev may take (IOV_MAX, 1024 on Linux)."""
    i = 0
    while offset >= len(parts[i]):  # offset < the chunk's size: a part is left
        offset -= len(parts[i])
        i += 1
    first: bytes | memoryview = memoryview(parts[i])[offset:] if offset else parts[i]
    end = None if limit is None else i + limit
    return [first, *parts[i + 1 : end]]


def _set_timer_slack_ns(ns: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(ns), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux or no prctl: only a little more wake-up latency
