"""The engine: a periodic callback thread (lab-audio), its stages, its helpers, and the ground truth log.

Threads and processes, and why they are shaped so (the toolkit reads them; the lab must be what it says):

    lab-main     the process's main thread. Starts everything, then sleeps in Thread.join until the callback
                 thread ends (a futex wait that a signal interrupts to run the SIGINT/SIGTERM handler).
    lab-audio    the callback thread: SCHED_FIFO when permitted, wakes at every period boundary on an
                 absolute clock, runs the episode planned for this callback (if any), then the DSP stages
                 (all of them for `chain`, the first for `series`), logs start and end.
    lab-stage-K  `series` only: stage K in a process of its own, woken by stage K-1 through an eventfd,
                 like the clients of an audio graph linked in series: N wake-ups per cycle against 1.
    lab-hog      the runqueue competitor (a process: it must burn CPU while lab-audio wants it).
    lab-holder   the lock holder (a process: a busy SCHED_OTHER worker that holds what lab-audio waits for).

Python's GIL would turn any CPU work in a second thread of this process into a wait of lab-audio's (a wait
the toolkit would rightly call a lock). So the engine process has exactly two threads and lab-main never
runs while lab-audio does; everything that must run in parallel is a helper process.

Timing: period k starts at origin + k * quantum / rate (integer ns). A callback that ends after the next
boundary makes the engine skip the periods already past (as an engine does after an xrun) rather than run
late callbacks back to back, so one stall is one missed deadline plus skipped periods, all in the log.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from forensics.lab import linux
from forensics.lab.dsp import FirStage, OutputDigest, input_buffer, noise_table
from forensics.lab.engine_env import lab_env
from forensics.lab.episodes import (
    IoEpisode,
    LockEpisode,
    MajorFaultEpisode,
    MinorFaultEpisode,
    RunEpisode,
    RunqueueEpisode,
)
from forensics.lab.schedule import PlannedEpisode, Schedule
from forensics.lab.settings import LabSettings

TRUTH_VERSION = 1
START_DELAY_NS = 20_000_000  # from the callback thread's setup to period 0
HELPER_READY_TIMEOUT_S = 30.0  # a helper imports numpy: slow on a loaded CI machine, never this slow
HELPER_EXIT_TIMEOUT_S = 3.0
DONE_TIMEOUT_MS = 2_000  # series: the last stage must finish a callback within this
NON_FIFO_COMPETITORS = 3


class LabError(RuntimeError):
    """The lab could not go on (a helper died or did not answer); the message says which and why."""


@dataclass
class Helper:
    role: str
    name: str
    proc: subprocess.Popen[bytes]
    in_fd: int
    ready: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] = field(default_factory=dict)
    _buffer: bytes = b""

    def read_line(self, deadline: float) -> dict[str, Any] | None:
        """The next JSON line from the helper, None at EOF; LabError after `deadline` (time.monotonic())."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while b"\n" not in self._buffer:
            left_ms = max(0, int((deadline - time.monotonic()) * 1000))
            if not poller.poll(left_ms):
                raise LabError(f"{self.name} (pid {self.proc.pid}) did not answer in time")
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)


def _percentiles(values: np.ndarray) -> dict[str, int | None]:
    if values.size == 0:
        return {"p50": None, "p99": None, "max": None}
    p50, p99 = np.percentile(values, [50, 99])
    return {"p50": int(p50), "p99": int(p99), "max": int(values.max())}


def _read_counters(pid: int, tid: int) -> tuple[int, int, int, int, int] | None:
    """run_ns, wait_ns, slices (schedstat), voluntary and involuntary switches (status) of one thread."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as fh:
            run_ns, wait_ns, slices = (int(x) for x in fh.read().split()[:3])
        with open(f"/proc/{pid}/task/{tid}/status", "rb") as fh:
            status = fh.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    switches = {}
    for line in status.splitlines():
        if line.startswith((b"voluntary_ctxt_switches", b"nonvoluntary_ctxt_switches")):
            name, _, value = line.partition(b":")
            switches[name.decode()] = int(value)
    return run_ns, wait_ns, slices, switches["voluntary_ctxt_switches"], switches["nonvoluntary_ctxt_switches"]


class LabEngine:
    def __init__(self, settings: LabSettings, schedule: Schedule, echo: Callable[[str], None] = print) -> None:
        self.settings = settings
        self.schedule = schedule
        self.echo = echo
        self.stop_requested = False
        self.stop_signal: int | None = None
        self.error: BaseException | None = None
        self.ended_because = "not started"
        self.helpers: list[Helper] = []
        self.stage_helpers: list[Helper] = []
        self.handlers: dict[str, Any] = {}
        self.episodes: list[dict[str, Any]] = []
        self.cycle_start: list[int] = []
        self.cycle_end: list[int] = []
        self.cycle_period: list[int] = []
        self.skipped_periods = 0
        self.origin_ns = 0
        self.started_ns = time.monotonic_ns()
        self.finished_ns = 0
        self.audio_tid = 0
        self.audio_policy: dict[str, Any] = {}
        self.output: dict[str, Any] = {}
        self.counters: dict[str, Any] = {}
        self.fifo_ok = False
        self.competitor_fifo = False
        self._done_fd = -1
        self._area: Any = None

    # ------------------------------------------------------------------------------------------------
    # lab-main

    def _on_signal(self, signum: int, _frame: object) -> None:
        # Runs in lab-main between two waits; only sets flags (lab-audio checks them every cycle).
        self.stop_requested = True
        if self.stop_signal is None:
            self.stop_signal = signum

    def run(self) -> dict[str, Any]:
        """Run the lab to its end and return the truth document. Ctrl-C / SIGTERM end it early, cleanly."""
        linux.set_thread_name("lab-main")
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            self._prepare()
            if not self.stop_requested:
                self.echo(self.describe_start())
                audio = threading.Thread(target=self._audio_main, name="lab-audio", daemon=True)
                audio.start()
                audio.join()  # a futex wait: interrupted by signals, whose handler runs here
        except BaseException as err:  # recorded; the truth is still written
            self.error = err
        finally:
            self._stop_helpers()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.finished_ns = time.monotonic_ns()
        if self.stop_signal is not None:
            self.ended_because = signal.Signals(self.stop_signal).name
        if self.error is not None:
            self.ended_because = f"error: {self.error}"
        return self.truth_document()

    def _prepare(self) -> None:
        s = self.settings
        from forensics.lab.shared import SharedArea

        self._area = SharedArea(s.stages + 1, s.channels, s.quantum)
        causes = {plan.cause for plan in self.schedule.episodes}
        self.fifo_ok = s.policy == "fifo" and linux.fifo_permitted(s.rtprio)
        if "runqueue" in causes:
            self.competitor_fifo = linux.fifo_permitted(s.rtprio + 1)
        if "run" in causes:
            self.handlers["run"] = RunEpisode()
        if "io" in causes:
            self.handlers["io"] = IoEpisode(s)
        if "fault" in causes:
            self.handlers["fault"] = MajorFaultEpisode(s) if s.fault_kind == "major" else MinorFaultEpisode(s)
        if "runqueue" in causes:
            self.handlers["runqueue"] = RunqueueEpisode(self._area, pinned=s.cpu is not None)
        if "lock" in causes:
            self.handlers["lock"] = LockEpisode(self._area)
        self._spawn_helpers(causes)
        deadline = time.monotonic() + HELPER_READY_TIMEOUT_S
        for helper in self.helpers:
            ready = helper.read_line(deadline)
            if ready is None:
                code = helper.proc.wait()
                raise LabError(f"{helper.name} exited (code {code}) before it was ready; its message is above")
            helper.ready = ready
        if "runqueue" in causes:
            competitors = [h for h in self.helpers if h.role == "competitor"]
            self.handlers["runqueue"].competitors = [(h.proc.pid, h.ready["tid"], h.in_fd) for h in competitors]
        if "lock" in causes:
            holder = next(h for h in self.helpers if h.role == "holder")
            lock = self.handlers["lock"]
            lock.holder_pid, lock.holder_tid, lock.holder_fd = holder.proc.pid, holder.ready["tid"], holder.in_fd

    def _helper_env(self) -> dict[str, str]:
        return lab_env()  # the helpers run this very copy of the lab

    def _spawn(self, role: str, name: str, fifo: bool, rtprio: int, cpus: list[int] | None, **extra: Any) -> Helper:
        s = self.settings
        in_fd = extra.pop("in_fd", None)
        if in_fd is None:
            in_fd = os.eventfd(0)
        config = {
            "role": role,
            "name": name,
            "parent": os.getpid(),
            "shared_fd": self._area.fd,
            "buffers": s.stages + 1,
            "channels": s.channels,
            "quantum": s.quantum,
            "in_fd": in_fd,
            "fifo": fifo,
            "rtprio": rtprio,
            "cpus": cpus,
            **extra,
        }
        fds = [self._area.fd, in_fd] + [v for k, v in extra.items() if k.endswith("_fd") and v is not None]
        proc = subprocess.Popen(
            [sys.executable, "-m", "forensics.lab.helpers", json.dumps(config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            pass_fds=fds,
            env=self._helper_env(),
        )
        helper = Helper(role=role, name=name, proc=proc, in_fd=in_fd)
        self.helpers.append(helper)
        return helper

    def _spawn_helpers(self, causes: set[str]) -> None:
        s = self.settings
        pin = [s.cpu] if s.cpu is not None else None
        if s.topology == "series" and s.stages > 1:
            stage_fds = {k: os.eventfd(0) for k in range(2, s.stages + 1)}
            self._done_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            for k in range(2, s.stages + 1):
                helper = self._spawn(
                    "stage",
                    f"lab-stage-{k}",
                    fifo=self.fifo_ok,
                    rtprio=s.rtprio,
                    cpus=pin,
                    stage=k,
                    in_fd=stage_fds[k],
                    next_fd=stage_fds.get(k + 1),
                    done_fd=self._done_fd if k == s.stages else None,
                    seed=s.seed,
                    taps=s.taps,
                )
                self.stage_helpers.append(helper)
        if "runqueue" in causes:
            count = 1 if self.competitor_fifo else NON_FIFO_COMPETITORS
            for _ in range(count):
                self._spawn("competitor", "lab-hog", fifo=self.competitor_fifo, rtprio=s.rtprio + 1, cpus=pin)
        if "lock" in causes:
            self._spawn("holder", "lab-holder", fifo=False, rtprio=0, cpus=None)

    def _stop_helpers(self) -> None:
        if not self.helpers:
            return
        if self._area is not None:
            self._area.control.stop = 1
        for helper in self.helpers:
            if helper.proc.poll() is None:
                with contextlib.suppress(OSError):
                    os.eventfd_write(helper.in_fd, 1)
        deadline = time.monotonic() + HELPER_EXIT_TIMEOUT_S
        for helper in self.helpers:
            try:
                if helper.ready:
                    helper.result = helper.read_line(deadline) or {}
                helper.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except (LabError, subprocess.TimeoutExpired, ValueError):
                helper.proc.kill()
                helper.proc.wait()
            if helper.proc.stdout is not None:
                helper.proc.stdout.close()

    # ------------------------------------------------------------------------------------------------
    # lab-audio

    def _audio_main(self) -> None:
        s = self.settings
        try:
            linux.set_thread_name("lab-audio")
            # Signals go to lab-main; lab-audio must never run a Python signal handler mid-cycle.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            self.audio_tid = linux.gettid()
            note = None
            if self.fifo_ok:
                note = linux.set_policy(os.SCHED_FIFO, s.rtprio)
            elif s.policy == "fifo":
                note = "not permitted (needs CAP_SYS_NICE, or an RLIMIT_RTPRIO of at least the priority)"
            if s.cpu is not None:
                os.sched_setaffinity(0, {s.cpu})
            linux.set_timer_slack(1)
            policy, rtprio = linux.current_policy()
            self.audio_policy = {
                "requested": s.policy.upper(),
                "policy": policy,
                "rtprio": rtprio,
                "note": note,
                "cpus": sorted(os.sched_getaffinity(0)),
            }
            self._loop()
            if self.ended_because == "not started":
                self.ended_because = "duration" if s.duration_ns is not None else "schedule done"
            if self.stop_signal is not None:
                self.ended_because = signal.Signals(self.stop_signal).name
        except BaseException as err:  # lab-main reports it after the cleanup
            self.error = err
        finally:
            gc.enable()

    def _engine_threads(self) -> list[tuple[str, int, int]]:
        threads = [("lab-audio", os.getpid(), self.audio_tid)]
        threads += [(h.name, h.proc.pid, int(h.ready["tid"])) for h in self.stage_helpers]
        return threads

    def _snapshot(self) -> dict[str, tuple[int, int, int, int, int] | None]:
        return {name: _read_counters(pid, tid) for name, pid, tid in self._engine_threads()}

    def _loop(self) -> None:
        s = self.settings
        series = s.topology == "series" and s.stages > 1
        local_stages = 1 if series else s.stages
        stages = [FirStage(s.seed, k, s.taps, s.channels, s.quantum) for k in range(1, local_stages + 1)]
        if series:
            buffers = [self._area.buffer(0), self._area.buffer(1)]
        else:
            buffers = [np.zeros((s.channels, s.quantum)) for _ in range(local_stages + 1)]
        table = noise_table(s.seed, s.channels, s.quantum, s.rate)
        digest = OutputDigest()
        control = self._area.control
        plans = list(self.schedule.episodes)
        next_plan: PlannedEpisode | None = plans.pop(0) if plans else None
        period_count = self.schedule.periods
        boundary_ns = s.boundary_ns
        first_period_at = s.first_period_at
        monotonic_ns = time.monotonic_ns
        starts, ends, periods = self.cycle_start, self.cycle_end, self.cycle_period
        next_stage_fd = self.stage_helpers[0].in_fd if series else -1
        fault = self.handlers.get("fault")
        lock = self.handlers.get("lock")
        pending_start = pending_period = -1
        cycle = 0
        k = 0

        gc.collect()
        gc.freeze()
        gc.disable()  # a collection in a callback would be a run spike of our own making
        self.counters["start"] = self._snapshot()
        self.counters["start_ns"] = monotonic_ns()
        self.origin_ns = origin = monotonic_ns() + START_DELAY_NS
        while not self.stop_requested and k < period_count:
            boundary = origin + boundary_ns(k)
            linux.sleep_until(boundary)
            if pending_start >= 0:  # series: the previous callback's graph, finished by the last stage
                if not self._wait_done(block=False):
                    self._wait_done(block=True)
                starts.append(pending_start)
                ends.append(control.done_ns)
                periods.append(pending_period)
                pending_start = -1
                if control.done_ns > boundary:  # the graph overran into this period: skip what is past
                    later = first_period_at(monotonic_ns() - origin + 1)
                    self.skipped_periods += later - k
                    k = later
                    continue
            start = monotonic_ns()
            if next_plan is not None and k >= next_plan.period:
                self._run_episode(next_plan, k)
                next_plan = plans.pop(0) if plans else None
            input_buffer(table, cycle, s.quantum, buffers[0])
            for n, stage in enumerate(stages):
                stage.process(buffers[n], buffers[n + 1])
            if series:
                control.cycle = cycle
                os.eventfd_write(next_stage_fd, 1)
                pending_start, pending_period = start, k
                end = monotonic_ns()  # lab-audio's own part; the graph's end comes from the last stage
            else:
                digest.update(buffers[-1])
                end = monotonic_ns()
                starts.append(start)
                ends.append(end)
                periods.append(k)
            cycle += 1
            k += 1
            if origin + boundary_ns(k) <= end:  # overran: skip the periods already past
                later = first_period_at(end - origin + 1)
                self.skipped_periods += later - k
                k = later
            # The idle part of the cycle: get the next episode ready, give back memory of the last one.
            if (
                lock is not None
                and next_plan is not None
                and next_plan.cause == "lock"
                and k >= next_plan.period
                and lock.armed_seq != next_plan.index + 1
            ):
                lock.arm(next_plan.index + 1, s.episode_ns)
            if fault is not None:
                fault.idle()
        if pending_start >= 0:
            self._wait_done(block=True)
            starts.append(pending_start)
            ends.append(control.done_ns)
            periods.append(pending_period)
        self.counters["end"] = self._snapshot()
        self.counters["end_ns"] = monotonic_ns()
        if fault is not None:
            fault.release_all()
        if not series:
            self.output = digest.summary()

    def _run_episode(self, plan: PlannedEpisode, period: int) -> None:
        handler = self.handlers[plan.cause]
        prepare = getattr(handler, "prepare", None)
        if prepare is not None:  # set-up that is not the episode: before its clock starts
            prepare()
        steal_start, pressure_start = linux.machine_steal_ns(), linux.io_pressure_us()
        cpu_start = time.thread_time_ns()
        start = time.monotonic_ns()
        extra = handler.run(start + self.settings.episode_ns)
        end = time.monotonic_ns()
        # The lab's own record of whether the episode was what its cause says (analyses.truth): the
        # thread's CPU time over it (CLOCK_THREAD_CPUTIME_ID: schedstat's run time, which leaves out
        # steal), and the machine's hypervisor steal meanwhile (a thread "running" on a vCPU the host took
        # away is neither on CPU nor waiting by its own counters).
        cpu_ns = time.thread_time_ns() - cpu_start
        steal_ns = linux.machine_steal_ns() - steal_start
        pressure_end = linux.io_pressure_us()
        # And the machine's IO pressure: the time a task really waited for IO, as the kernel counts it.
        io_pressure_ns = (
            (pressure_end - pressure_start) * 1000 if pressure_start is not None and pressure_end is not None else None
        )
        self.episodes.append(
            {
                "cause": plan.cause,
                "tid": self.audio_tid,
                "start_ns": start,
                "end_ns": end,
                "index": plan.index,
                "period": period,
                "planned_ns": self.origin_ns + plan.offset_ns,
                "cpu_ns": cpu_ns,
                "steal_ns": steal_ns,
                "io_pressure_ns": io_pressure_ns,
                **extra,
            }
        )

    def _wait_done(self, block: bool) -> bool:
        """Series: consume the last stage's "done" eventfd; with block, wait for it (a stage may be slow)."""
        try:
            os.eventfd_read(self._done_fd)
            return True
        except BlockingIOError:
            if not block:
                return False
        poller = select.poll()
        poller.register(self._done_fd, select.POLLIN)
        if not poller.poll(DONE_TIMEOUT_MS):
            dead = [h.name for h in self.stage_helpers if h.proc.poll() is not None]
            raise LabError(f"the series stages stopped answering ({', '.join(dead) or 'none exited'})")
        os.eventfd_read(self._done_fd)
        return True

    # ------------------------------------------------------------------------------------------------
    # results

    def describe_start(self) -> str:
        s = self.settings
        if self.fifo_ok:
            policy = f"SCHED_FIFO {s.rtprio}"
        elif s.policy == "fifo":
            policy = "SCHED_OTHER (SCHED_FIFO not permitted: needs CAP_SYS_NICE or RLIMIT_RTPRIO)"
        else:
            policy = "SCHED_OTHER (--policy other)"
        where = f"pinned to CPU {s.cpu}" if s.cpu is not None else "not pinned"
        shape = f"{s.topology} of {s.stages} stage{'s' if s.stages != 1 else ''} x {s.taps} taps"
        counts = self.schedule.counts()
        plan = ", ".join(f"{c} {n}" for c, n in counts.items() if n) or "none (a clean run)"
        lines = [
            f"lab: pid {os.getpid()}, lab-audio {policy}, {where}; {s.quantum} frames at {s.rate} Hz = "
            f"{s.period_ns / 1e6:.3f} ms; {shape}",
            f"lab: episodes of {s.episode_ns / 1e6:g} ms: {plan}; seed {s.seed}; "
            f"ends after {self.schedule.end_ns / 1e9:.2f} s",
        ]
        if self.schedule.dropped:
            lines.append(f"lab: --duration leaves no room for {self.schedule.dropped} of the planned episodes")
        return "\n".join(lines)

    def describe_end(self) -> str:
        st = self.stats()
        elapsed = (self.finished_ns - self.origin_ns) / 1e9 if self.origin_ns else 0.0

        def us(value: int | None) -> str:
            return "unknown" if value is None else f"{value / 1e3:.0f} us"

        audio = self.audio_policy
        got = f"SCHED_{audio.get('policy', '?')} {audio.get('rtprio', '')}".strip()
        lines = [
            f"lab: ended ({self.ended_because}) after {elapsed:.2f} s: {st['cycles']} callbacks ({got}), "
            f"{len(self.episodes)} episodes, {st['deadline_misses']} deadline misses "
            f"({st['misses_in_episode_callbacks']} in episode callbacks, {st['misses_outside_episodes']} outside), "
            f"{st['skipped_periods']} periods skipped",
            f"lab: wake-up jitter p50 {us(st['wakeup_jitter_ns']['p50'])}, p99 {us(st['wakeup_jitter_ns']['p99'])}, "
            f"max {us(st['wakeup_jitter_ns']['max'])}; clean cycle end p50 {us(st['cycle_end_ns']['p50'])}, "
            f"p99 {us(st['cycle_end_ns']['p99'])} after the period start",
        ]
        if "engine_cpu_percent" in st:
            lines.append(
                f"lab: engine CPU {st['engine_cpu_percent']} % of a core; "
                f"{st['wakeups_per_cycle']} wake-ups per cycle ({', '.join(st['engine_threads'])})"
            )
        return "\n".join(lines)

    def stats(self) -> dict[str, Any]:
        s = self.settings
        starts = np.asarray(self.cycle_start, dtype=np.int64)
        ends = np.asarray(self.cycle_end, dtype=np.int64)
        periods = np.asarray(self.cycle_period, dtype=np.int64)
        boundaries = self.origin_ns + periods * s.quantum * 1_000_000_000 // s.rate
        deadlines = self.origin_ns + (periods + 1) * s.quantum * 1_000_000_000 // s.rate
        missed = ends > deadlines
        episode_periods = np.asarray([e["period"] for e in self.episodes], dtype=np.int64)
        in_episode = np.isin(periods, episode_periods)
        clean = ~in_episode
        out: dict[str, Any] = {
            "cycles": int(starts.size),
            "skipped_periods": int(self.skipped_periods),
            "deadline_misses": int(missed.sum()),
            "misses_in_episode_callbacks": int((missed & in_episode).sum()),
            "misses_outside_episodes": int((missed & clean).sum()),
            "wakeup_jitter_ns": _percentiles(starts - boundaries),
            "cycle_end_ns": _percentiles((ends - boundaries)[clean]),  # after the period boundary
            "callback_ns": _percentiles((ends - starts)[clean]),
        }
        first, last = self.counters.get("start"), self.counters.get("end")
        if first and last and self.counters.get("end_ns"):
            elapsed = self.counters["end_ns"] - self.counters["start_ns"]
            names = [n for n in first if first[n] is not None and last.get(n) is not None]
            run = sum(last[n][0] - first[n][0] for n in names)
            voluntary = sum(last[n][3] - first[n][3] for n in names)
            cycles_between = int(((starts >= self.counters["start_ns"]) & (starts <= self.counters["end_ns"])).sum())
            out["engine_threads"] = names
            out["engine_cpu_ns"] = run
            out["engine_cpu_percent"] = round(100.0 * run / elapsed, 2) if elapsed > 0 else None
            out["wakeups_per_cycle"] = round(voluntary / cycles_between, 3) if cycles_between else None
        return out

    def thread_table(self) -> list[dict[str, Any]]:
        pid = os.getpid()
        rows: list[dict[str, Any]] = [{"role": "main", "comm": "lab-main", "pid": pid, "tid": pid}]
        if self.audio_tid:
            rows.append({"role": "audio", "comm": "lab-audio", "pid": pid, "tid": self.audio_tid, **self.audio_policy})
        for helper in self.helpers:
            ready = dict(helper.ready)
            ready.pop("role", None)
            rows.append({"role": helper.role, **ready, "pid": helper.proc.pid})
        return rows

    def truth_document(self) -> dict[str, Any]:
        s = self.settings
        tid = self.audio_tid
        cycles = [
            {"tid": tid, "start_ns": a, "end_ns": b, "deadline_ns": self.origin_ns + s.boundary_ns(p + 1), "period": p}
            for a, b, p in zip(self.cycle_start, self.cycle_end, self.cycle_period, strict=True)
        ]
        output = self.output
        if not output and self.stage_helpers:
            output = self.stage_helpers[-1].result.get("output", {})
        described = {cause: h.describe() for cause, h in self.handlers.items() if hasattr(h, "describe")}
        lab = {
            "version": TRUTH_VERSION,
            "clock": "CLOCK_MONOTONIC",
            "pid": os.getpid(),
            "argv": ["python", "-m", "forensics.lab", *s.to_argv()],
            "settings": s.to_dict(),
            "period_ns": s.period_ns,
            "origin_ns": self.origin_ns,
            "started_ns": self.started_ns,
            "finished_ns": self.finished_ns,
            "ended_because": self.ended_because,
            "audio": {"tid": tid, **self.audio_policy},
            "competitor_policy": "FIFO" if self.competitor_fifo else "OTHER",
            "threads": self.thread_table(),
            "episodes_planned": len(self.schedule.episodes),
            "episodes_dropped_by_duration": self.schedule.dropped,
            "episode_setup": described,
            "stats": self.stats(),
            "output": output,
        }
        return {"episodes": self.episodes, "cycles": cycles, "lab": lab}
