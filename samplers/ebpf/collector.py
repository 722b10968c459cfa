"""EbpfCollector: exact scheduler, fault and block events of the target processes, through BCC.

Lives in the recorder's WRITER process (not timing-critical): start it with the target pids, tell it
about processes as they appear, poll it between chunks, stop it at the end.

    collector = EbpfCollector([pid], EbpfOptions())
    messages = collector.start()          # raises EbpfUnavailable (one line: why) when it cannot run
    collector.add_tgids([new_pid])        # processes found later; their threads are learned in the kernel
    tables = collector.poll(timeout_ms=100)   # {"sched_switch": pa.Table, "sched_wakeup": ..., ...}
    stats = collector.stats()             # {"events": {...}, "lost": {...}, "lost_total": n, ...}
    tables = collector.stop()             # the last events; detaches the probes
    collector.meta()                      # what to store in the capture's metadata (rules, options...)

What runs in the kernel: probes.bpf.c (tracepoints only; kprobes/fentry are missing on some kernels).
Filtering happens there: sched_switch events are kept when prev or next belongs to a target process,
wake-ups when the wakee does, faults and block requests when the current task does. Lost events (ring
buffer full) are counted per kind by the probes, reported by stats() and as "ebpf_lost" rows; never hidden.

Needs root (CAP_BPF/CAP_SYS_ADMIN + CAP_PERFMON), BCC (Debian python3-bpfcc, imported through
bcc_import), tracefs (mounted here when missing) and headers of THIS kernel or the generated stub
(kernel_stub). Every missing piece raises EbpfUnavailable with one plain sentence.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from capture.errors import ForensicsError
from samplers.ebpf import tables as T
from samplers.ebpf.bcc_import import BccUnavailable, import_bcc
from samplers.ebpf.kernel_stub import StubUnavailable, configure_bcc_environment
from samplers.ebpf.ringbuf import FixedRecordRing, mmap_reader_supported
from samplers.ebpf.tracefs import (
    DEFAULT_RULES,
    PrevStateRules,
    TracefsStatus,
    ensure_tracefs,
    event_exists,
    prev_state_rules,
    read_format,
    release_tracefs,
)

PROBES_SOURCE = Path(__file__).with_name("probes.bpf.c")
# struct bpf_prog_info (include/uapi/linux/bpf.h): recursion_misses is the __u64 at offset 208 (after
# run_time_ns and run_cnt, 5.12+). The buffer is larger than any kernel's struct: the kernel fills what it has.
_PROG_INFO_SIZE = 512
_RUN_TIME_OFFSET = 192  # run_time_ns, run_cnt, recursion_misses: three __u64 in a row
_RECURSION_MISSES_OFFSET = 208
_RECURSION_MISSES_END = _RECURSION_MISSES_OFFSET + 8


class EbpfUnavailable(ForensicsError):
    """eBPF recording cannot run here; str() is one line saying why (the recording goes on without it)."""


@dataclass
class EbpfOptions:
    sched: bool = True  # sched_switch, sched_waking, sched_wakeup(_new)
    faults: bool = True  # exceptions:page_fault_user (a fault storm is many events: see lost counts)
    block: bool = True  # block:block_rq_issue / block_rq_complete of requests the targets issue
    block_all: bool = False  # every block request on the machine (IO issued by kworkers for the targets)
    wake_context: bool = True  # tell wake-ups done by interrupts (hrtimer, IRQ, softirq) from task wakers
    ringbuf_pages: int = 1024  # 4 MiB with 4 KiB pages: ~43 000 events of headroom
    reader: str = "auto"  # "mmap" (batch, x86-64), "callback" (BCC/libbpf per record), "auto"
    mount_tracefs: bool = True


@dataclass
class _Timing:
    compile_load_s: float = 0.0
    polls: int = 0
    decode_s: float = 0.0


@dataclass
class EbpfStats:
    events: dict[str, int] = field(default_factory=dict)
    lost: dict[str, int] = field(default_factory=dict)

    @property
    def lost_total(self) -> int:
        return sum(self.lost.values())


class EbpfCollector:
    def __init__(
        self,
        tgids: Iterable[int] = (),
        options: EbpfOptions | None = None,
        *,
        proc: str = "/proc",
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.options = options or EbpfOptions()
        self.proc = proc
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._initial = sorted(set(int(t) for t in tgids))
        self.tgids: set[int] = set()
        self._bpf: Any = None
        self._bcc: Any = None
        self._ring: FixedRecordRing | None = None
        self._pending: list[bytes] = []
        self._tracefs: TracefsStatus | None = None
        self.rules: PrevStateRules = DEFAULT_RULES
        self.messages: list[str] = []
        self.timing = _Timing()
        self._ksym_cache: dict[int, str | None] = {}
        self._last_lost: dict[str, int] = {}
        self._last_counters_read = 0.0
        self._stats = EbpfStats()
        self._last_misses: dict[str, int] = {}
        self._last_programs: dict[str, dict[str, int]] = {}
        self.reader = ""
        self.headers = ""
        self.attached: list[str] = []

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> list[str]:
        """Compile, load and attach the probes; add the initial targets. Messages worth printing."""
        if os.geteuid() != 0:
            raise EbpfUnavailable("eBPF recording needs root (CAP_BPF and CAP_PERFMON); recording without it")
        try:
            bcc = import_bcc(self.cache_dir)
        except BccUnavailable as err:
            raise EbpfUnavailable(f"{err}; recording without eBPF") from err
        self._bcc = bcc
        self._tracefs = ensure_tracefs(mount=self.options.mount_tracefs)
        if self._tracefs.path is None:
            raise EbpfUnavailable(f"{self._tracefs.message}; recording without eBPF")
        if self._tracefs.mounted_by_us:
            self.messages.append(self._tracefs.message)
        try:
            self.headers = configure_bcc_environment(self.cache_dir, self.proc)
        except (StubUnavailable, OSError) as err:
            self._release_tracefs()
            raise EbpfUnavailable(f"{err}; recording without eBPF") from err
        self.rules = prev_state_rules(read_format("sched", "sched_switch", self._tracefs.path))
        cflags = self._cflags()
        t0 = time.monotonic()
        try:
            self._bpf = compile_bpf(bcc, PROBES_SOURCE, cflags, "the eBPF probes", "; recording without eBPF")
        except EbpfUnavailable:
            self._release_tracefs()
            raise
        self.timing.compile_load_s = time.monotonic() - t0
        self.attached = [name for name in self._wanted_tracepoints()]
        self._open_reader()
        self.add_tgids(self._initial)
        return list(self.messages)

    def _wanted_tracepoints(self) -> list[str]:
        wanted = []
        if self.options.sched:
            wanted += [
                "sched:sched_switch",
                "sched:sched_waking",
                "sched:sched_wakeup",
                "sched:sched_wakeup_new",
                "sched:sched_process_fork",
                "sched:sched_process_exit",
            ]
        if self.options.faults:
            wanted.append("exceptions:page_fault_user")
        if self.options.block:
            wanted += ["block:block_rq_issue", "block:block_rq_complete"]
        if self.options.sched and self.options.wake_context:
            wanted += [
                "irq:irq_handler_entry",
                "irq:irq_handler_exit",
                "irq:softirq_entry",
                "irq:softirq_exit",
                "timer:hrtimer_expire_entry",
                "timer:hrtimer_expire_exit",
            ]
        return wanted

    def _cflags(self) -> list[str]:
        pages = self.options.ringbuf_pages
        if pages <= 0 or pages & (pages - 1):
            raise EbpfUnavailable(f"ring buffer pages must be a power of two, not {pages}")
        flags = [f"-DRINGBUF_PAGES={pages}"]
        missing = []
        families = {
            "WITH_SCHED": self.options.sched,
            "WITH_FAULTS": self.options.faults,
            "WITH_BLOCK": self.options.block,
            "WITH_WAKE_CONTEXT": self.options.sched and self.options.wake_context,
        }
        for name in self._wanted_tracepoints():
            category, event = name.split(":")
            if not event_exists(category, event, self._tracefs.path if self._tracefs else None):
                missing.append(name)
        # A family whose tracepoints this kernel lacks is left out (and said), not a failed start.
        for macro, members in (
            ("WITH_SCHED", ("sched:",)),
            ("WITH_FAULTS", ("exceptions:",)),
            ("WITH_BLOCK", ("block:",)),
            ("WITH_WAKE_CONTEXT", ("irq:", "timer:")),
        ):
            if families[macro] and any(m.startswith(members) for m in missing):
                families[macro] = False
                gone = ", ".join(m for m in missing if m.startswith(members))
                self.messages.append(f"eBPF: this kernel lacks {gone}: recording without {macro[5:].lower()} events")
        flags += [f"-D{macro}" for macro, on in families.items() if on]
        if self.options.block_all:
            flags.append("-DBLOCK_ALL")
        self._families = families
        return flags

    def _open_reader(self) -> None:
        table = self._bpf[b"events"]
        mode = self.options.reader
        if mode == "auto":
            mode = "mmap" if mmap_reader_supported() else "callback"
        if mode == "mmap":
            self._ring = FixedRecordRing(
                table.map_fd, self.options.ringbuf_pages * os.sysconf("SC_PAGE_SIZE"), T.EVENT_DTYPE
            )
        else:
            import ctypes

            def on_event(_ctx: Any, data: Any, size: int) -> int:
                self._pending.append(ctypes.string_at(data, size))
                return 0

            table.open_ring_buffer(on_event)
        self.reader = mode

    def add_tgids(self, tgids: Iterable[int]) -> None:
        """Make these processes targets: their threads that exist now, and any they create from now on."""
        if self._bpf is None:
            self._initial = sorted(set(self._initial) | {int(t) for t in tgids})
            return
        targets = self._bpf[b"targets"]
        tids = self._bpf[b"tids"]
        for tgid in tgids:
            tgid = int(tgid)
            # The tgid first: a thread created after this is caught by sched_process_fork, and one created
            # before is in the task directory listed next. No gap.
            targets[targets.Key(tgid)] = targets.Leaf(1)
            self.tgids.add(tgid)
            try:
                threads = os.listdir(os.path.join(self.proc, str(tgid), "task"))
            except OSError:
                continue  # gone already
            for tid in threads:
                if tid.isdigit():
                    tids[tids.Key(int(tid))] = tids.Leaf(tgid)

    def remove_tgids(self, tgids: Iterable[int]) -> None:
        """Stop recording these processes (their threads too: a thread's tid stays known otherwise)."""
        if self._bpf is None:
            self._initial = [t for t in self._initial if t not in set(map(int, tgids))]
            return
        gone = {int(t) for t in tgids}
        targets = self._bpf[b"targets"]
        tids = self._bpf[b"tids"]
        for tgid in gone:
            with contextlib.suppress(KeyError):
                del targets[targets.Key(tgid)]
            self.tgids.discard(tgid)
        for key in [k for k, v in tids.items() if v.value in gone]:
            with contextlib.suppress(KeyError):
                del tids[key]

    # -- events ------------------------------------------------------------------------------------
    def _read_records(self, timeout_ms: int) -> np.ndarray:
        # Batch: every call pays a fixed decoding cost (~1 ms), so gather for timeout_ms unless the ring
        # buffer passes a quarter full (room left for a burst while we decode). A 5 ms check interval:
        # 4 MiB fill to a quarter in 33 ms at 300 000 events/s.
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000.0
        if self._ring is not None:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._ring.available() >= self._ring.size // 4:
                    break
                time.sleep(min(remaining, 0.005))
            return self._ring.read()
        while True:
            self._bpf.ring_buffer_consume()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            time.sleep(min(remaining, 0.005))
        if not self._pending:
            return np.empty(0, dtype=T.EVENT_DTYPE)
        raw = b"".join(self._pending)
        self._pending.clear()
        return np.frombuffer(raw, dtype=T.EVENT_DTYPE).copy()

    def poll(self, timeout_ms: int = 0) -> dict[str, pa.Table]:
        """Events since the last call, as tables. Gathers for timeout_ms (returning earlier when the ring
        buffer is a quarter full); poll(0) takes what is there now. Also an "ebpf_lost" table when the
        ring-buffer loss counts grew (checked every 0.5 s)."""
        if self._bpf is None:
            raise RuntimeError("EbpfCollector.poll() before start()")
        records = self._read_records(timeout_ms)
        self.timing.polls += 1
        t0 = time.perf_counter()
        out = T.decode_events(records, self.rules, self._ksym) if len(records) else {}
        self.timing.decode_s += time.perf_counter() - t0
        now = time.monotonic()
        if now - self._last_counters_read >= 0.5:
            lost = self._read_counters()
            if lost:
                out["ebpf_lost"] = T.lost_table(time.monotonic_ns(), lost)
        return out

    def _read_counters(self) -> dict[str, int]:
        """Refresh stats; return the per-kind lost totals when any grew since the last read."""
        self._last_counters_read = time.monotonic()
        counters = self._bpf[b"counters"]
        events: dict[str, int] = {}
        lost: dict[str, int] = {}
        for kind, name in T.KIND_NAMES.items():
            events[name] = int(sum(counters.getvalue(counters.Key(kind * 2))))
            lost[name] = int(sum(counters.getvalue(counters.Key(kind * 2 + 1))))
        self._stats = EbpfStats(events, lost)
        grown = {k: v for k, v in lost.items() if v != self._last_lost.get(k, 0)}
        self._last_lost = lost
        return {k: v for k, v in lost.items() if v} if grown else {}

    def _ksym(self, address: int) -> str | None:
        if address not in self._ksym_cache:
            try:
                name = self._bpf.ksym(address)
                self._ksym_cache[address] = name.decode() if isinstance(name, bytes) else str(name)
            except Exception:  # unknown address, no kallsyms: keep the hex address
                self._ksym_cache[address] = None
        return self._ksym_cache[address]

    def program_stats(self) -> dict[str, dict[str, int]]:
        """Per probe: run_cnt, run_time_ns (both 0 unless kernel.bpf_stats_enabled=1) and recursion_misses."""
        if self._bpf is None or self._bcc is None:
            return {}
        return program_run_stats(self._bcc, self._bpf)

    def _program_infos(self) -> dict[str, bytes]:
        """struct bpf_prog_info of each of our programs (only those whose kernel reports recursion_misses)."""
        if self._bpf is None or self._bcc is None:
            return {}
        return program_infos(self._bcc, self._bpf)

    def program_misses(self) -> dict[str, int]:
        """Times the kernel skipped each of our programs because another BPF program was running on that
        CPU (kernel/trace/bpf_trace.c trace_call_bpf(): bpf_prog_active): an interrupt that hits while a
        probe runs, or any BPF map syscall in progress there. Those events are lost without passing the
        ring buffer. From struct bpf_prog_info.recursion_misses (5.12+); {} where the kernel lacks it."""
        if self._bpf is None or self._bcc is None:
            return dict(self._last_misses)
        misses = {
            name: int(struct.unpack_from("<Q", info, _RECURSION_MISSES_OFFSET)[0])
            for name, info in self._program_infos().items()
        }
        self._last_misses = misses
        return misses

    def stats(self) -> dict[str, Any]:
        """Events written and lost per tracepoint since start (summed over CPUs), and timing.

        lost: the ring buffer was full; missed: the kernel did not run the probe at all (see
        program_misses). Both are events that happened and are not in the tables.
        """
        if self._bpf is not None:
            self._read_counters()
            self.program_misses()
        missed = dict(self._last_misses)
        programs = self.program_stats() if self._bpf is not None else dict(self._last_programs)
        return {
            # CPU the probes took in the kernel, machine-wide, charged to whatever task hit the tracepoint:
            # 0 unless kernel.bpf_stats_enabled=1 during the recording (bench/bench_exact.py sets it).
            "probe_run_time_ns": sum(p["run_time_ns"] for p in programs.values()),
            "probe_runs": sum(p["run_cnt"] for p in programs.values()),
            "events": dict(self._stats.events),
            "lost": dict(self._stats.lost),
            "missed": missed,
            "lost_total": self._stats.lost_total + sum(missed.values()),
            "compile_load_s": round(self.timing.compile_load_s, 4),
            "polls": self.timing.polls,
            "decode_s": round(self.timing.decode_s, 4),
            "odd_records": self._ring.odd_records if self._ring is not None else 0,
        }

    def stop(self) -> dict[str, pa.Table]:
        """Detach the probes and return the events still in the ring buffer."""
        if self._bpf is None:
            return {}
        # Detach first, then drain: nothing arrives after the last read.
        for tracepoint in list(getattr(self._bpf, "tracepoint_fds", {})):
            with contextlib.suppress(Exception):  # already gone: cleanup() below closes the rest
                self._bpf.detach_tracepoint(tracepoint)
        out = self.poll(0)
        self._read_counters()
        self.program_misses()
        self._last_programs = self.program_stats()
        lost = {k: v for k, v in self._stats.lost.items() if v}
        if lost:
            out["ebpf_lost"] = T.lost_table(time.monotonic_ns(), lost)
        if self._ring is not None:
            self._ring.close()
            self._ring = None
        self._bpf.cleanup()
        self._bpf = None
        self._release_tracefs()
        return out

    def _release_tracefs(self) -> None:
        if self._tracefs is not None:
            release_tracefs(self._tracefs)

    def meta(self) -> dict[str, Any]:
        """For the capture's metadata: what was recorded, how, and how to read prev_state."""
        return {
            "options": asdict(self.options),
            "tracepoints": self.attached,
            "families": dict(getattr(self, "_families", {})),
            "prev_state_rules": self.rules.to_json(),
            "headers": self.headers,
            "reader": self.reader,
            "clock": "CLOCK_MONOTONIC (bpf_ktime_get_ns)",
            "targets": sorted(self.tgids),
        }

    def __enter__(self) -> EbpfCollector:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def program_infos(bcc: Any, bpf: Any) -> dict[str, bytes]:
    """struct bpf_prog_info of each program BCC loaded in `bpf` (only those whose kernel reports
    recursion_misses), by tracepoint name ("sched:sched_switch")."""
    import ctypes

    get_info = bcc.libbcc.lib.bpf_obj_get_info
    get_info.restype = ctypes.c_int
    get_info.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)]
    infos: dict[str, bytes] = {}
    for name, function in getattr(bpf, "funcs", {}).items():
        info = (ctypes.c_ubyte * _PROG_INFO_SIZE)()
        length = ctypes.c_uint32(_PROG_INFO_SIZE)
        if get_info(function.fd, info, ctypes.byref(length)) != 0 or length.value < _RECURSION_MISSES_END:
            continue
        text = name.decode() if isinstance(name, bytes) else str(name)
        infos[text.replace("tracepoint__", "").replace("__", ":", 1)] = bytes(info)
    return infos


def program_run_stats(bcc: Any, bpf: Any) -> dict[str, dict[str, int]]:
    """Per program: run_cnt, run_time_ns (both 0 unless kernel.bpf_stats_enabled=1) and recursion_misses."""
    out: dict[str, dict[str, int]] = {}
    for name, info in program_infos(bcc, bpf).items():
        run_time, run_cnt, misses = struct.unpack_from("<QQQ", info, _RUN_TIME_OFFSET)
        out[name] = {"run_time_ns": run_time, "run_cnt": run_cnt, "recursion_misses": misses}
    return out


def compile_bpf(bcc: Any, source: Path, cflags: list[str], what: str, then: str = "") -> Any:
    """bcc.BPF of `source`; a compile or load failure is EbpfUnavailable naming `what` and the reason libbcc
    printed (BCC raises a bare Exception and prints why on fd 2, or on fd 1 for missing kernel headers)."""
    try:
        with output_captured() as compiler_output:
            return bcc.BPF(text=source.read_bytes(), cflags=cflags)
    except Exception as err:
        reason = compiler_reason(compiler_output)
        detail = f": {reason}" if reason else ""
        raise EbpfUnavailable(f"{what} did not compile or load ({err}{detail}){then}") from err


def compiler_reason(printed: list[str]) -> str:
    """What libbcc printed that says why a compile or load failed: its first line mentioning an error, else its
    first own line ("Unable to find kernel headers..."; not the shell's "sh: 1: modprobe: not found" from its
    attempt to load kheaders), else ""."""
    lines = [line.strip() for line in printed if line.strip()]
    own = [line for line in lines if not line.startswith("sh: ")]
    return next((line for line in lines if "error" in line.lower()), (own or lines or [""])[0])


@contextlib.contextmanager
def output_captured() -> Iterator[list[str]]:
    """libbcc prints compiler and verifier messages on fd 2, and "Unable to find kernel headers" on fd 1
    (std::cout, src/cc/frontends/clang/kbuild_helper.cc): kept, both, to explain a failure in one line. Fd 1
    is also the writer process's pipe to the recorder (its ready signal and report), where a line of libbcc's
    would break the protocol."""
    lines: list[str] = []
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
        try:
            yield lines
        finally:
            for fd, copy in zip((1, 2), saved, strict=True):
                os.dup2(copy, fd)
                os.close(copy)
            tmp.seek(0)
            lines.extend(tmp.read().decode(errors="replace").splitlines())


def merge_tables(batches: Iterable[dict[str, pa.Table]]) -> dict[str, pa.Table]:
    """Concatenate the per-poll tables of several polls, table by table (for tests and small tools)."""
    grouped: dict[str, list[pa.Table]] = {}
    for batch in batches:
        for name, table in batch.items():
            grouped.setdefault(name, []).append(table)
    return {name: pa.concat_tables(parts).unify_dictionaries() for name, parts in grouped.items()}
