"""EbpfSampler: per-thread run time, runqueue wait, switches, faults, last state and CPU kept by the kernel.

`catch-load --sampler ebpf` replaces the tick's /proc reads (two `pread`s per thread) by one copy of a BPF
array the probes of sampler.bpf.c update at each switch, wake-up and fault. The array is mapped into this
process (BPF_F_MMAPABLE): a tick is one memcpy of the used slots, no system call, no per-thread Python.

    sampler = EbpfSampler(slots=4096)
    sampler.start()                       # raises EbpfUnavailable (one line: why) when it cannot run
    slot = sampler.add(tid, seed)         # before the thread's first read; seed: its /proc counters now
    raw = sampler.read()                  # the bytes of slots [0, sampler.used), SLOT_SIZE each
    sampler.remove(tid)                   # the thread exited: its slot is reused later
    sampler.stop()

Runs in the RECORDER process (the tick reads the mapping); the writer decodes the bytes
(samplers/ebpf/sampler_rows.py). Compiles with the same machinery as the event collector: BCC imported by
bcc_import, headers of this kernel or the generated stub (kernel_stub), tracefs mounted when missing.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import platform
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from samplers import frames
from samplers.ebpf.collector import EbpfUnavailable, compile_bpf, program_run_stats
from samplers.ebpf.ringbuf import FixedRecordRing, mmap_reader_supported

SAMPLER_SOURCE = Path(__file__).with_name("sampler.bpf.c")
# struct tstat of sampler.bpf.c: run_ns wait_ns since_ns switches faults event_ns (u64), tid prev_state
# (u32), cpu (u16), phase pad0 (u8), maj_flt (u32).
SLOT = struct.Struct("<QQQQQQIIHBBI")
SLOT_SIZE = SLOT.size  # 64
DEFAULT_SLOTS = 8192  # threads recorded at once; 512 KiB mapped
PID_MAX_LIMIT = 4 * 1024 * 1024  # the kernel's largest pid_max (include/linux/threads.h, 64-bit)
TARGETS = 1024  # processes whose new tasks the probes count (sampler.bpf.c `born`); beyond, every scan lists
# The scheduler's counters that /proc/<pid>/task/<tid>/schedstat prints, and the major faults its stat prints,
# copied at each switch-out.
TASK_COUNTERS = {
    "OFF_SUM_EXEC": "se.sum_exec_runtime",
    "OFF_RUN_DELAY": "sched_info.run_delay",
    "OFF_PCOUNT": "sched_info.pcount",
    "OFF_MAJ_FLT": "maj_flt",
}
PHASE_UNKNOWN, PHASE_ON_CPU, PHASE_RUNNABLE, PHASE_OFF, PHASE_EXITED = 0, 1, 2, 3, 4
# The kernel's tick (sampler.bpf.c KERNEL_TICK): struct tick_rec, one per slot changed and one closing each tick
# (index TICK_INDEX; its words: t_ns, layout id, slots changed, records refused so far).
TICK_REC = np.dtype([("index", "<u4"), ("used", "<u4"), ("words", "<u8", (8,))])
TICK_INDEX = 0xFFFFFFFF
TICK_PART = 512  # slots a part of the kernel's tick walks (sampler.bpf.c); 33 tail calls at most
TICK_RING_PAGES = 512  # 2 MiB: ~26 000 records, ~0.95 s of the Bitwig-shaped target's ticks (55 records each)
_U64 = struct.Struct("<Q")


@dataclass
class Seed:
    """A thread's /proc counters when it is added, so the kernel's counters continue them."""

    run_ns: int = 0
    wait_ns: int = 0
    switches: int = 0
    faults: int = 0
    majflt: int = 0


def task_offsets(load: Callable[[str], Any], vmlinux: str, cache_dir: Path | None) -> dict[str, int]:
    """TASK_COUNTERS' offsets in struct task_struct. Parsing the kernel's BTF takes seconds in Python, so the
    result is kept in the cache directory, keyed by the kernel release and the BTF's size and mtime."""
    from samplers.ebpf.btf import BtfError

    try:
        info = os.stat(vmlinux)
    except OSError as err:
        raise BtfError(f"cannot read {vmlinux} ({err.strerror}): the kernel has no BTF") from err
    from samplers.ebpf.kernel_stub import toolkit_cache_dir

    base = cache_dir or toolkit_cache_dir()
    cached = base / "btf-offsets" / f"{platform.release()}-{info.st_size}-{info.st_mtime_ns}.json"
    with contextlib.suppress(OSError, ValueError):
        offsets = json.loads(cached.read_text())
        if set(offsets) == set(TASK_COUNTERS):
            return {k: int(v) for k, v in offsets.items()}
    btf = load(vmlinux)
    offsets = {}
    for macro, path in TASK_COUNTERS.items():
        offset, size = btf.member("task_struct", path)
        if size != 8:
            raise BtfError(f"task_struct.{path} is {size} bytes, not 8")
        offsets[macro] = offset
    with contextlib.suppress(OSError):
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}")
        tmp.write_text(json.dumps(offsets))
        os.replace(tmp, cached)
    return offsets


def _pid_max(proc: str) -> int:
    """The kernel's pid_max: tids are below it, so it sizes the probes' tid index (sampler.bpf.c `slot_of`)."""
    try:
        return min(int(Path(proc, "sys/kernel/pid_max").read_text()), PID_MAX_LIMIT)
    except (OSError, ValueError) as err:
        raise EbpfUnavailable(f"cannot read {proc}/sys/kernel/pid_max ({err})") from err


class EbpfSampler:
    def __init__(
        self,
        slots: int = DEFAULT_SLOTS,
        *,
        proc: str = "/proc",
        cache_dir: str | None = None,
        tick_ns: int | None = None,
        tick_cpu: int = 0,
    ) -> None:
        if not 0 < slots < 0xFFFF:
            raise ValueError(f"{slots} slots: the probes' tid index holds slot + 1 in a u16 (sampler.bpf.c)")
        self.slots = slots
        # The kernel takes the tick every tick_ns on CPU tick_cpu (None: the recorder copies the slots itself).
        self.tick_ns = tick_ns
        self.tick_cpu = tick_cpu
        self.kernel_tick = False  # the kernel's tick runs (start() says why not in tick_why)
        self.tick_why = "not asked for" if tick_ns is None else ""
        self._ring: FixedRecordRing | None = None
        self.proc = proc
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._bpf: Any = None
        self._bcc: Any = None
        self._mm: mmap.mmap | None = None
        self._slot_of: mmap.mmap | None = None  # sampler.bpf.c `slot_of`, mapped: u16 slot + 1 at tid * 2
        self._born: mmap.mmap | None = None  # sampler.bpf.c `born`, mapped (WITH_NEWTASK): one u64
        self.tids = 0  # slot_of's size: the kernel's pid_max at start()
        self._free: list[int] = []
        self.used = 0  # slots [0, used) have been handed out at least once
        self.slot_by_tid: dict[int, int] = {}
        self.full = 0  # threads that could not be added (every slot taken): said in the metadata
        self.beyond_pid_max = 0  # threads not added: tid >= the pid_max of start() (raised since; metadata)
        self.headers = ""
        self.faults = False
        self.newtask = False  # the probes count the targets' new tasks (tasks_born())
        self._targets_full = False
        self.state_mask = 0
        self.rules: dict[str, Any] = {}
        self.compile_load_s = 0.0
        self._tracefs: Any = None

    def start(self) -> None:
        from samplers.ebpf.bcc_import import BccUnavailable, import_bcc
        from samplers.ebpf.kernel_stub import StubUnavailable, configure_bcc_environment
        from samplers.ebpf.tracefs import ensure_tracefs, event_exists, prev_state_rules, read_format

        if os.geteuid() != 0:
            raise EbpfUnavailable("the eBPF sampler needs root (CAP_BPF and CAP_PERFMON)")
        try:
            bcc = import_bcc(self.cache_dir)
        except BccUnavailable as err:
            raise EbpfUnavailable(str(err)) from err
        self._bcc = bcc
        self._tracefs = ensure_tracefs()
        if self._tracefs.path is None:
            raise EbpfUnavailable(self._tracefs.message)
        try:
            self.headers = configure_bcc_environment(self.cache_dir, self.proc)
        except (StubUnavailable, OSError) as err:
            self._release_tracefs()
            raise EbpfUnavailable(str(err)) from err
        rules = prev_state_rules(read_format("sched", "sched_switch", self._tracefs.path))
        self.rules = rules.to_json()
        self.state_mask = rules.state_mask
        self.faults = event_exists("exceptions", "page_fault_user", self._tracefs.path)
        self.newtask = event_exists("task", "task_newtask", self._tracefs.path)
        self.tids = _pid_max(self.proc)
        cflags = [
            f"-DTIDS={self.tids}",
            f"-DSLOTS={self.slots}",
            f"-DSTATE_MASK={self.state_mask:#x}",
            *self._offsets(),
        ]
        if self.faults:
            cflags.append("-DWITH_FAULTS")
        if self.newtask:
            cflags += ["-DWITH_NEWTASK", f"-DTARGETS={TARGETS}"]
        t0 = time.monotonic()
        if self.tick_ns is not None and not mmap_reader_supported():
            self.tick_why = "the ring buffer is read from its mapping on x86 only (ringbuf.py)"
        elif self.tick_ns is not None and self.slots > 33 * TICK_PART:
            self.tick_why = f"more than {33 * TICK_PART} slots"
        elif self.tick_ns is not None:
            tick_flags = ["-DKERNEL_TICK", f"-DTICK_PAGES={TICK_RING_PAGES}"]
            try:
                self._bpf = compile_bpf(bcc, SAMPLER_SOURCE, cflags + tick_flags, "the kernel's tick")
            except EbpfUnavailable as err:  # a kernel without ring buffers (5.8): the recorder ticks
                self.tick_why = str(err)
        try:
            if self._bpf is None:
                self._bpf = compile_bpf(bcc, SAMPLER_SOURCE, cflags, "the eBPF sampler")
        except EbpfUnavailable:
            self._release_tracefs()
            raise
        self.compile_load_s = time.monotonic() - t0
        stats = self._bpf[b"stats"]
        size = -(-self.slots * SLOT_SIZE // mmap.PAGESIZE) * mmap.PAGESIZE
        try:
            self._mm = mmap.mmap(stats.map_fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as err:  # a kernel before 5.5 has no mmapable arrays
            self.stop()
            raise EbpfUnavailable(f"cannot map the eBPF sampler's array ({err.strerror}): kernel 5.5+ needed") from err
        size = -(-(-(-self.tids // 32) * 64) // mmap.PAGESIZE) * mmap.PAGESIZE  # 32 u16 entries an element
        try:
            self._slot_of = mmap.mmap(
                self._bpf[b"slot_of"].map_fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE
            )
        except OSError as err:
            self.stop()
            raise EbpfUnavailable(f"cannot map the eBPF sampler's tid index ({err.strerror})") from err
        if self.newtask:
            try:
                self._born = mmap.mmap(self._bpf[b"born"].map_fd, mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ)
            except OSError as err:
                self.stop()
                raise EbpfUnavailable(f"cannot map the eBPF sampler's task count ({err.strerror})") from err
        if self.tick_ns is not None and not self.tick_why:
            self._start_tick()

    def _start_tick(self) -> None:
        """Attach the kernel's tick: a CPU-clock software perf event of one CPU, every tick_ns (it fires while
        the CPU idles too), and the ring buffer's mapping. Where that fails, tick_why says why; the recorder
        then copies the slots itself."""
        import ctypes

        bcc, bpf = self._bcc, self._bpf
        try:
            part = bpf.load_func(b"kernel_tick_part", bcc.BPF.PERF_EVENT)
            bpf[b"tick_parts"][ctypes.c_int(0)] = ctypes.c_int(part.fd)
            self._ring = FixedRecordRing(bpf[b"ticks"].map_fd, TICK_RING_PAGES * mmap.PAGESIZE, TICK_REC)
            bpf.attach_perf_event(
                ev_type=bcc.PerfType.SOFTWARE,
                ev_config=bcc.PerfSWConfig.CPU_CLOCK,
                fn_name=b"kernel_tick",
                sample_period=self.tick_ns,
                cpu=self.tick_cpu,
            )
        except Exception as err:  # BCC raises plain Exception (no perf events: a container, perf_event_paranoid)
            self.tick_why = f"the kernel's tick could not be attached ({err})"
            if self._ring is not None:
                self._ring.close()
                self._ring = None
            return
        self.kernel_tick = True

    def tick_conf(self, layout_id: int) -> None:
        """Tell the kernel's tick the slot count and the layout id in force (after the layout was sent)."""
        if not self.kernel_tick:
            return
        import ctypes

        table = self._bpf[b"tick_conf"]
        conf = table[ctypes.c_int(0)]
        conf.used = self.used
        conf.layout = layout_id
        table[ctypes.c_int(0)] = conf

    def drain_ticks(self) -> np.ndarray:
        """The kernel's tick records since the last call (TICK_REC), in order."""
        assert self._ring is not None
        return self._ring.read()

    def _offsets(self) -> list[str]:
        """-D switches with the task_struct offsets of the counters /proc's schedstat prints (this kernel's BTF)."""
        from samplers.ebpf.btf import VMLINUX, Btf, BtfError

        try:
            offsets = task_offsets(Btf.load, VMLINUX, self.cache_dir)
        except BtfError as err:
            self._release_tracefs()
            why = f"{err}; the eBPF sampler needs it (CONFIG_SCHED_INFO, CONFIG_DEBUG_INFO_BTF)"
            raise EbpfUnavailable(why) from err
        return [f"-D{macro}={offset}" for macro, offset in offsets.items()]

    def add(self, tid: int, seed: Seed) -> int | None:
        """Give `tid` a slot, seeded; its counters are kept from now on. None when every slot is taken, or the
        tid is beyond the index (pid_max raised since start(): counted, said in the metadata)."""
        assert self._mm is not None, "add() before start()"
        if tid >= self.tids:
            self.beyond_pid_max += 1
            return None
        if tid in self.slot_by_tid:
            self.remove(tid)  # the kernel reused the tid for a new thread: start again from its seed
        if self._free:
            index = self._free.pop()
        elif self.used < self.slots:
            index = self.used
            self.used += 1
        else:
            self.full += 1
            return None
        # The slot first, then the tid's entry: a probe can only find a slot that is ready.
        majflt = seed.majflt & 0xFFFFFFFF  # the slot keeps the low 32 bits (sampler.bpf.c maj_flt)
        self._mm[index * SLOT_SIZE : (index + 1) * SLOT_SIZE] = SLOT.pack(
            seed.run_ns, seed.wait_ns, 0, seed.switches, seed.faults, 0, tid, 0, 0, PHASE_UNKNOWN, 0, majflt
        )
        assert self._slot_of is not None
        struct.pack_into("<H", self._slot_of, tid * 2, index + 1)
        self.slot_by_tid[tid] = index
        return index

    def remove(self, tid: int) -> None:
        index = self.slot_by_tid.pop(tid, None)
        if index is None or self._mm is None:
            return
        if self._slot_of is not None:
            struct.pack_into("<H", self._slot_of, tid * 2, 0)
        # The owner field cleared: the writer drops the slot's bytes, and a probe still holding the index
        # (it looked it up just before the delete) sees a slot that is not its thread's.
        self._mm[index * SLOT_SIZE + 48 : index * SLOT_SIZE + 52] = b"\0\0\0\0"
        self._free.append(index)

    def follow(self, pid: int) -> None:
        """Count the tasks process `pid` creates from now on (before its threads are first listed)."""
        if not self.newtask or self._bpf is None:
            return
        table = self._bpf[b"targets"]
        try:
            table[table.Key(pid)] = table.Leaf(1)
        except Exception:  # the table is full (BCC raises a plain Exception): its new tasks go uncounted
            self._targets_full = True

    def unfollow(self, pid: int) -> None:
        if self.newtask and self._bpf is not None:
            table = self._bpf[b"targets"]
            with contextlib.suppress(KeyError):
                del table[table.Key(pid)]

    def tasks_born(self) -> int | None:
        """How many tasks the followed processes have created so far; None when that is not counted (no
        task_newtask, or more processes than TARGETS): then only a listing finds new threads."""
        if self._born is None or self._targets_full:
            return None
        return int(_U64.unpack_from(self._born, 0)[0])  # one aligned u64: the probe's atomic add is whole

    def read(self) -> bytes:
        """The used slots, as they are now (the tick's one copy)."""
        assert self._mm is not None
        return self._mm[: self.used * SLOT_SIZE]

    @property
    def live(self) -> mmap.mmap:
        """The slots' mapping itself: a slice of it copies those bytes as they are then (StatChoice takes a few
        slots a wake-up; a copy of all 534 of the Bitwig-shaped target took 20 us after the recorder's sleep)."""
        assert self._mm is not None
        return self._mm

    def meta(self) -> dict[str, Any]:
        return {
            "slots": self.slots,
            "headers": self.headers,
            "faults": self.faults,
            "counts_new_tasks": self.newtask,
            "prev_state_rules": self.rules,
            "compile_load_s": round(self.compile_load_s, 3),
            "clock": "CLOCK_MONOTONIC (bpf_ktime_get_ns)",
            # Who took the 2 ms tick: "kernel" (a perf event's BPF program, tick_cpu) or "recorder" (tick_why).
            "tick": {"by": "kernel", "cpu": self.tick_cpu}
            if self.kernel_tick
            else {"by": "recorder", "why": self.tick_why},
        }

    def probe_stats(self) -> dict[str, Any]:
        """The probes' CPU in the kernel so far (0 unless kernel.bpf_stats_enabled=1), charged to whatever task
        hit the tracepoint: part of the sampler's cost that no rusage shows. Runs and recursion misses."""
        if self._bpf is None:
            return {}
        programs = program_run_stats(self._bcc, self._bpf)
        return {
            "probe_run_time_ns": sum(p["run_time_ns"] for p in programs.values()),
            "probe_runs": sum(p["run_cnt"] for p in programs.values()),
            "probe_misses": sum(p["recursion_misses"] for p in programs.values()),
        }

    def stop(self) -> None:
        if self._ring is not None:
            self._ring.close()
            self._ring = None
        for mapping in (self._mm, self._slot_of, self._born):
            if mapping is not None:
                with contextlib.suppress(BufferError):
                    mapping.close()
        self._mm = self._slot_of = self._born = None
        if self._bpf is not None:
            self._bpf.cleanup()
            self._bpf = None
        self._release_tracefs()

    def _release_tracefs(self) -> None:
        from samplers.ebpf.tracefs import release_tracefs

        if self._tracefs is not None:
            release_tracefs(self._tracefs)
            self._tracefs = None


# Every thread's stat line is read once this often, round robin over the ticks (a few threads a tick, never a
# burst): it carries what the probes do not keep (policy, priority, major faults, user/system time), which
# changes rarely. A new thread's is read at once. DESIGN.md "The eBPF sampler".
STAT_SLOW_NS = 250_000_000
# At its turn a thread's stat line is read only where it can have changed (StatChoice), and at least this often
# whatever its slot says: a policy, priority, nice or name set from outside while it sleeps is seen within this
# (plus one wake-up under the kernel's tick). In the metadata (ebpf_sampler.stat_refresh_ns).
STAT_REFRESH_NS = 1_000_000_000
# A thread's row is stored at least this often even when nothing in it changed (samplers/ebpf/sampler_rows.py):
# the longest run of ticks the analyses fill from one stored row, so a thread that exited is shown for at most
# this long after its last change (250 ms; each chunk's first tick stores every thread anyway). At 25 ticks the
# sleepers' keyframes were a fifth of the rows the writer stored on the Bitwig shape (290 213 -> 229 037 rows in
# 8 s at 125; bench/writer_replay.py). In the metadata (ebpf_sampler.keyframe_ticks) for analyses/source.py.
KEYFRAME_TICKS = 125
STAT_BYTES = 1024
SCHEDSTAT_BYTES = 128
# A whole slot frame at least this often (1 s at 2 ms), the frames between carrying only the slots that changed:
# a delta the writer cannot apply (never expected: the recorder sends a whole frame after any it dropped) costs
# it at most this many ticks, counted in the trailer, instead of the rest of the recording.
FULL_FRAME_TICKS = 500
_WORDS = SLOT_SIZE // 8
_PHASE_BYTE = struct.calcsize("<QQQQQQIIH")  # the phase's offset in a slot (SLOT)


class StatChoice:
    """Which threads whose turn it is need their stat line read: not one left the CPU asleep (phase off) whose
    slot's 64 bytes are those copied just before its last stat read, unless that read is refresh_ns old.

    Exact for the counters the line carries (major faults, utime/stime, block-IO ticks; the state and CPU are
    the probes' once the phase is known): a switch-in, a switch-out, a wake-up, a fault and the exit each
    rewrite the slot (a switch counter or a time moves, so bytes equal means no event), so the thread has been
    off the CPU since just before that read and none of them can have moved (`cputime_adjust()` scales
    counters that only move while it runs; the block-IO delay is added at its wake-up, microseconds before
    the wake-up probe). A thread on a CPU or runnable (a slice in progress moves no slot), not seen by the
    probes yet, or without a slot is always read. What can change from outside while it sleeps (policy,
    priority, nice, its name) is seen within refresh_ns. DESIGN.md "The eBPF sampler".

    Plain Python over the few threads of a turn, in one loop (pick): numpy's calls cost more here, cold after
    each sleep (85 us a wake-up warm, 240 after a 20 ms sleep, for the 43 threads of a turn on the Bitwig
    shape)."""

    def __init__(self, refresh_ns: int = STAT_REFRESH_NS) -> None:
        self.refresh_ns = refresh_ns
        self.last: dict[int, tuple[bytes, int]] = {}  # slot -> its bytes just before its last stat read, its time
        self.skipped = 0  # turns that needed no read (in the trailer)

    def due(self, slot: int, live: bytes | mmap.mmap, now_ns: int) -> bool:
        """Whether the thread in `slot` (-1: none) needs its stat line read now (pick() of one)."""
        return bool(self.pick([0], [slot], live, now_ns))

    def pick(self, turn: list[int], slots: list[int], live: bytes | mmap.mmap, now_ns: int) -> list[int]:
        """Of the layout indices `turn`, those whose thread (in slot slots[i]; -1: none) needs its stat line read
        now; `live`: the slots as they are now (bytes or their mapping). The caller reads every one picked
        (noted as read at now_ns)."""
        picked = []
        last_of = self.last
        refresh_ns = self.refresh_ns
        skipped = 0
        for i in turn:
            slot = slots[i]
            if slot >= 0:
                at = slot * SLOT_SIZE
                mine = live[at : at + SLOT_SIZE]
                last = last_of.get(slot)
                if (
                    last is not None
                    and mine[_PHASE_BYTE] == PHASE_OFF
                    and mine == last[0]
                    and now_ns - last[1] < refresh_ns
                ):
                    skipped += 1
                    continue
                last_of[slot] = (mine, now_ns)
            picked.append(i)
        self.skipped += skipped
        return picked

    def read(self, slot: int, live: bytes | mmap.mmap, now_ns: int) -> None:
        """The thread in `slot` (-1: none) is read now whatever due() would say (a new thread)."""
        if slot >= 0:
            self.last[slot] = (live[slot * SLOT_SIZE : (slot + 1) * SLOT_SIZE], now_ns)


class SlotFrames:
    """A tick's slot bytes -> its frame: the slots whose bytes differ from those of the frame handed over before
    (EBPF_DELTA), or every slot (EBPF_TICK) after a dropped frame, when the slot count changed and every
    FULL_FRAME_TICKS. The writer rebuilds every tick's slots from these, byte for byte (sampler_rows.py): on the
    Bitwig-shaped target a tick changes about 48 slots of 534, and the writer's intake shrinks as much.

    frame(): the recorder's own copy of the slots, compared here. The kernel's tick compares them itself and
    KernelTicks sends a drain's ticks in one frame, by the same rule for whole frames (follow())."""

    def __init__(self, full_every_ticks: int = FULL_FRAME_TICKS) -> None:
        self.full_every_ticks = full_every_ticks
        self.base: np.ndarray | None = None  # the slots of the frame handed over last, as u64 words (frame())
        self.base_slots: int | None = None  # their count (None: the writer's are not those of the last frame)
        self.base_tick = 0
        self.full_due = 0
        self.full_frames = 0
        self._differs = np.zeros(0, dtype=bool)

    def follow(self, tick: int, slots: int) -> bool:
        """Whether the frame of `tick` (of `slots` slots) goes whole; it is the base of the next frame from now."""
        whole = self.base_slots != slots or tick >= self.full_due
        if whole:
            self.full_due = tick + self.full_every_ticks
            self.full_frames += 1
        self.base_slots, self.base_tick = slots, tick
        return whole

    def _encode(
        self, tick: int, layout_id: int, t_ns: int, words: np.ndarray, changed: np.ndarray | None, base_tick: int
    ) -> bytes:
        """words: the tick's slots as u64 words (flat or one row per slot); changed: the slots that differ from
        the frame of base_tick, or None for a whole frame."""
        slots = words.size // _WORDS
        if changed is None:
            out = frames.encode_ebpf_tick(tick, layout_id, t_ns, words.tobytes())
        else:
            out = frames.encode_ebpf_delta(
                tick,
                layout_id,
                t_ns,
                slots,
                base_tick,
                len(changed),
                changed.astype("<u4").tobytes(),
                words.reshape(-1, _WORDS).take(changed, axis=0).tobytes(),
            )
        return out

    def frame(self, tick: int, layout_id: int, t_ns: int, raw: bytes) -> bytes:
        words = np.frombuffer(raw, dtype="<u8")
        base, base_tick = self.base, self.base_tick
        changed = None
        if not self.follow(tick, len(words) // _WORDS):  # whole while base is None (base_slots is None too)
            assert base is not None
            # One bool per word, eight per slot: viewed as one u64 per slot, nonzero where any word differs
            # (7 us for 534 slots, 5 more than sending them all; a Python loop over the slots costs 50).
            if len(self._differs) != len(words):
                self._differs = np.empty(len(words), dtype=bool)
            np.not_equal(words, base, out=self._differs)
            changed = self._differs.view("<u8").nonzero()[0]
        out = self._encode(tick, layout_id, t_ns, words, changed, base_tick)
        self.base = words
        return out

    def lost(self) -> None:
        """The frame just made was not handed over (the writer is behind): the next is whole, since the writer's
        last slots are older than this base."""
        self.base = None
        self.base_slots = None


@dataclass(frozen=True)
class TickBatch:
    """What one drain of the kernel's ticks makes (KernelTicks.take)."""

    done: list[tuple[int, int]]  # (tick, t_ns) of every tick taken from tick 0 on, sent or not
    frame: bytes  # the EBPF_TICKS frame of the ticks to send (b"": none)
    ticks: int  # ticks in the frame
    rows: int  # their layouts' threads, summed


# KernelTicks._number: how much less late than its anchor a tick may be and still be numbered right, a fraction of
# the period (250 us at 2 ms). The kernel's tick after a period its timer skipped came 0.25-34 us from the least late
# tick before it (10 000-30 000 stamps, quiet and beside stress-ng, 2026-12-07); the latest tick seen was 1.6 ms
# late, within the 1.75 ms a tick may be later than the anchor at 2 ms.
ANCHOR_MARGIN_PERIODS = 8


class KernelTicks:
    """The kernel's ticks (sampler.bpf.c KERNEL_TICK) -> one EBPF_TICKS frame per drain, the ticks the recorder's
    own ticks would send as EBPF_TICK / EBPF_DELTA frames, made with numpy over the drain, not tick by tick.

    A delta tick carries the last record of each slot since the tick sent before (the records of the ticks not
    sent too: before tick 0, without a thread, or a drain's last tick caught halfway, carried to the next
    drain); a whole tick (SlotFrames.follow) the mirror of the slots as of that tick, every record up to it
    applied. Ticks are numbered by their kernel time from tick 0's (the recorder's start), so a tick the kernel
    did not take or could not store (its closing record refused: the ring was full) is a gap, counted as
    missed; the records of a tick whose closing record was refused go with the next tick."""

    def __init__(self, slots: int, interval_ns: int, slot_frames: SlotFrames) -> None:
        self.interval_ns = interval_ns
        self.slot_frames = slot_frames
        # The slots as of the last record applied. Records are applied only when a whole tick needs them (every
        # FULL_FRAME_TICKS, after a drop), waiting until then in _unapplied, in order (a slot's last one wins).
        self._mirror = np.zeros((slots, _WORDS), dtype="<u8")
        self._unapplied: list[tuple[np.ndarray, np.ndarray]] = []
        # Records in no tick sent yet: the last of each slot (slot order), going with the next tick sent.
        self._carry_at = np.zeros(0, dtype=np.int64)
        self._carry_words = np.zeros((0, _WORDS), dtype="<u8")
        self.start_ns: int | None = None  # tick 0's time
        self.end_ns: int | None = None  # the recording's end: later ticks are not sent
        self.last_tick = -1
        self.anchor_ns = self.anchor_tick = 0
        self.missed = 0
        self.refused = 0  # the kernel's count of records its ring refused, at the last closing record

    def mirror(self, used: int) -> np.ndarray:
        """The slots [0, used) as of the last record taken, (used x 8) u64 words."""
        self._apply(np.zeros(0, dtype=np.int64), self._mirror[:0])
        return self._mirror[:used]

    def take(self, records: np.ndarray, layout_rows: dict[int, int]) -> TickBatch:
        """The ticks closed in `records` (TICK_REC, in the ring's order); `layout_rows`: the threads of each
        layout id (a tick of none is not sent, as the recorder's own tick sends none)."""
        index = records["index"]
        closing = np.flatnonzero(index == TICK_INDEX)
        heads = records["words"][closing, :4].tolist()  # t_ns, layout id, slots changed, records refused so far
        useds = records["used"][closing].tolist()
        done: list[tuple[int, int]] = []
        sent: list[tuple[int, int, int, int]] = []  # tick, t_ns, layout id, slot count
        sent_at: list[int] = []  # each one's closing record, by its rank among them
        rows = 0
        refused_before = self.refused
        for k, ((t_ns, layout_id, _, refused), used) in enumerate(zip(heads, useds, strict=True)):
            self.refused = refused
            if self.start_ns is None or t_ns < self.start_ns or (self.end_ns is not None and t_ns > self.end_ns):
                continue
            tick = self._number(t_ns)
            done.append((tick, t_ns))
            threads = layout_rows.get(layout_id, 0)
            if threads:  # else no target thread yet (--match still waiting): nothing to store
                sent.append((tick, t_ns, layout_id, used))
                sent_at.append(k)
                rows += threads
        frames_of = self.slot_frames
        base_tick, base_slots = frames_of.base_tick, frames_of.base_slots
        wholes = []  # the ticks sent whole, by rank
        for j, (tick, _, _, used) in enumerate(sent):
            if frames_of.follow(tick, used):
                wholes.append(j)
        tail = int(closing[-1]) + 1 if len(closing) else 0  # the records after it: a tick caught halfway
        slot = np.flatnonzero(index[:tail] != TICK_INDEX)
        at = index[slot].astype(np.int64)
        words = records["words"][slot]
        goes: np.ndarray | None = None  # the rank of the tick sent each record goes with
        if len(sent) == len(closing) and not len(self._carry_at) and self.refused == refused_before:
            # Each tick sent, nothing carried, no record refused: a tick's records are its changes, one per slot
            # in slot order (the kernel walks the slots once), as the frame has them.
            d_at, d_words = at, words
            ends = closing.tolist()
            counts = [end - before - 1 for before, end in zip([-1, *ends], ends, strict=False)]
            if wholes:
                goes = np.repeat(np.arange(len(sent)), counts)
            if tail < len(index):
                self._carry_at, self._carry_words = index[tail:].astype(np.int64), records["words"][tail:]
                at, words = np.concatenate([at, self._carry_at]), np.concatenate([words, self._carry_words])
        else:
            at = np.concatenate([at, index[tail:].astype(np.int64)])
            words = np.concatenate([words, records["words"][tail:]])
            # The first tick sent from the one whose closing record ends the record's tick (len(sent): none in
            # this drain, carried). Non-decreasing in the ring's order.
            tick_of = np.searchsorted(closing, np.concatenate([slot, np.arange(tail, len(index))]))
            goes = np.searchsorted(np.array(sent_at, dtype=np.int64), np.arange(len(closing) + 1))[tick_of]
            # The last record of each (tick sent, slot), the carried ones first (older, with the first tick sent),
            # by tick then slot.
            n_slots = len(self._mirror)
            key = np.concatenate([self._carry_at, goes * n_slots + at])
            total = len(key)
            key, last = np.unique(key[::-1], return_index=True)
            d_words = np.concatenate([self._carry_words, words])[total - 1 - last]
            d_goes, d_at = np.divmod(key, n_slots)
            carried = int(np.searchsorted(d_goes, len(sent)))
            self._carry_at, self._carry_words = d_at[carried:], d_words[carried:]
            d_at, d_words = d_at[:carried], d_words[:carried]
            counts = np.bincount(d_goes[:carried], minlength=len(sent)).tolist()
        whole = [0] * len(sent)
        if wholes:
            # Every slot, from the mirror as of each such tick: every record up to its closing one applied.
            assert goes is not None
            starts = np.concatenate([[0], np.cumsum(counts)]).tolist()
            pieces_at: list[np.ndarray] = []
            pieces_words: list[np.ndarray] = []
            applied = taken = 0
            for j in wholes:
                used = sent[j][3]
                cut = int(np.searchsorted(goes, j, side="right"))
                self._apply(at[applied:cut], words[applied:cut])
                applied = cut
                pieces_at += [d_at[taken : starts[j]], np.arange(used, dtype=np.int64)]
                pieces_words += [d_words[taken : starts[j]], self._mirror[:used].copy()]
                taken = starts[j + 1]
                counts[j], whole[j] = used, 1
            d_at = np.concatenate([*pieces_at, d_at[taken:]])
            d_words = np.concatenate([*pieces_words, d_words[taken:]])
            at, words = at[applied:], words[applied:]
        if len(at):
            self._unapplied.append((at, words))
            if len(self._unapplied) > 64:  # a bound on what waits (64 drains: about 2 MB on the Bitwig shape)
                self._apply(np.zeros(0, dtype=np.int64), self._mirror[:0])
        if not sent:
            return TickBatch(done, b"", 0, 0)
        ticks, times, layouts, useds_sent = zip(*sent, strict=True)
        frame = frames.encode_ebpf_ticks(
            base_tick,
            -1 if base_slots is None else base_slots,
            np.array(times, dtype="<i8").tobytes(),
            np.array([ticks, layouts, useds_sent, counts, whole], dtype="<u4").tobytes(),
            d_at.astype("<u4").tobytes(),
            d_words.tobytes(),
        )
        return TickBatch(done, frame, len(sent), rows)

    def _apply(self, at: np.ndarray, words: np.ndarray) -> None:
        """The records waiting, then these, onto the mirror, in order: where a slot appears twice its last record
        wins (an assignment through repeated indices leaves which one unspecified in numpy)."""
        if self._unapplied:
            at = np.concatenate([*(a for a, _ in self._unapplied), at])
            words = np.concatenate([*(w for _, w in self._unapplied), words])
            self._unapplied = []
        if len(at):
            at, last_from_end = np.unique(at[::-1], return_index=True)
            self._mirror[at] = words[len(words) - 1 - last_from_end]

    def _number(self, t_ns: int) -> int:
        """The tick's number, counting the ticks missed before it. The perf event's timer stays on its grid
        (hrtimer_forward_now: expiries period apart, an overrun skips periods) and fires late by its latency, so
        a tick is numbered by whole periods since an anchor tick, the least late seen: a tick less late than the
        anchor becomes the anchor. Whole periods counted from a margin (ANCHOR_MARGIN_PERIODS) before the anchor: exact
        for a tick from that much less late than the anchor to a period minus that much later. Without the
        margin (floor from the anchor itself) a tick less late than the anchor by a few microseconds after a
        period the timer skipped took the number of the one before the skip: a missed tick uncounted and every
        later one numbered one short (a CI run: 1 period between two on-time ticks 4 ms apart). A tick that
        would take the number of the one before came earlier on the grid than that: it becomes the anchor."""
        if self.last_tick < 0:
            assert self.start_ns is not None
            tick = (t_ns - self.start_ns) // self.interval_ns
            self.anchor_ns, self.anchor_tick = t_ns, tick
        else:
            margin = self.interval_ns // ANCHOR_MARGIN_PERIODS
            periods, late_ns = divmod(t_ns - self.anchor_ns + margin, self.interval_ns)
            tick = self.anchor_tick + periods
            if tick <= self.last_tick:
                tick = self.last_tick + 1
                self.anchor_ns, self.anchor_tick = t_ns, tick
            elif late_ns < margin:  # less late than the anchor: the new reference
                self.anchor_ns, self.anchor_tick = t_ns, tick
            self.missed += tick - self.last_tick - 1
        self.last_tick = tick
        return tick


class EbpfTicker:
    """The recorder's side of `--sampler ebpf`: a tick is one copy of the slots plus a few stat reads, or, where
    the kernel takes the tick (kernel_tick), a wake-up every wake_ns drains the kernel's ticks (collect())."""

    def __init__(
        self, interval_ns: int, slots: int = DEFAULT_SLOTS, *, wake_ns: int | None = None, cpu: int = 0
    ) -> None:
        self.interval_ns = interval_ns
        self.wake_ns = wake_ns  # None: the recorder ticks; else the kernel does, the recorder waking this often
        self.sampler = EbpfSampler(slots, tick_ns=interval_ns if wake_ns is not None else None, tick_cpu=cpu)
        self.stat_every_ticks = max(1, STAT_SLOW_NS // interval_ns)
        self.stat_fds: list[int] = []
        self.tids: list[int] = []
        self.tid_slots: list[int] = []  # each layout thread's slot (-1: none)
        self.stat_choice = StatChoice()
        self._urgent: set[int] = set()  # tids whose stat is read at the next tick (just added)
        self._next = 0
        self.reads = 0
        self.slot_frames = SlotFrames()
        self.kernel_ticks: KernelTicks | None = None
        self.layout_rows: dict[int, int] = {}  # layout id -> its threads (a tick of none is not sent)
        self.rows_sent = 0  # the rows of the frame the last collect() handed over
        self._born_listed = -1  # tasks_born() at the last listing of the targets' threads (-1: none yet)

    def start(self) -> dict[str, Any]:
        """Compile and attach; the metadata to record (raises EbpfUnavailable, one line why)."""
        self.sampler.start()
        if self.sampler.kernel_tick and self.wake_ns is not None:
            self.kernel_ticks = KernelTicks(self.sampler.slots, self.interval_ns, self.slot_frames)
            self.stat_every_ticks = max(1, STAT_SLOW_NS // self.wake_ns)  # stat reads at each wake-up
        return {
            **self.sampler.meta(),
            "stat_slow_ns": STAT_SLOW_NS,
            "stat_refresh_ns": self.stat_choice.refresh_ns,
            "keyframe_ticks": KEYFRAME_TICKS,
        }

    def add(self, tid: int, fd_schedstat: int, minflt: int, majflt: int = 0) -> None:
        """Start keeping `tid`'s counters, continuing its /proc values of now."""
        try:
            run, wait, switches = (int(v) for v in os.pread(fd_schedstat, SCHEDSTAT_BYTES, 0).split()[:3])
        except (OSError, ValueError):
            run = wait = switches = 0  # exited already: the failed stat read at the next tick says so
        self.sampler.add(tid, Seed(run, wait, switches, minflt, majflt))
        self._urgent.add(tid)

    def remove(self, tid: int) -> None:
        self.sampler.remove(tid)
        self._urgent.discard(tid)

    def layout(self, tids: list[int], stat_fds: list[int]) -> list[int]:
        """The threads of the next ticks, in layout order; their slots (-1: none, every slot taken)."""
        self.tids = tids
        self.stat_fds = stat_fds
        self._next = 0
        slot_of = self.sampler.slot_by_tid
        slots = [slot_of.get(tid, -1) for tid in tids]
        self.tid_slots = slots
        return slots

    def layout_sent(self, layout_id: int) -> None:
        """The layout of layout() went to the writer as `layout_id`: the kernel's ticks name it from now on."""
        self.layout_rows[layout_id] = len(self.tids)
        self.sampler.tick_conf(layout_id)

    def begin(self, start_ns: int) -> None:
        """Tick 0 is at start_ns: the kernel's ticks before it are not sent."""
        if self.kernel_ticks is not None:
            self.kernel_ticks.start_ns = start_ns

    def collect(self, send: Callable[[bytes, int], bool]) -> list[tuple[int, int]]:
        """The kernel's ticks since the last call, as one frame given to `send` with its tick count (False:
        dropped, the writer is behind); (tick, t_ns) of each, and the rows sent in `rows_sent`."""
        assert self.kernel_ticks is not None
        batch = self.kernel_ticks.take(self.sampler.drain_ticks(), self.layout_rows)
        self.rows_sent = 0
        if batch.frame:
            if send(batch.frame, batch.ticks):
                self.rows_sent = batch.rows
            else:
                self.slot_frames.lost()
        self.reads += 1  # the ring's one read
        return batch.done

    @property
    def missed_ticks(self) -> int:
        return self.kernel_ticks.missed if self.kernel_ticks is not None else 0

    def tick(self, tick: int, layout_id: int, mono: Callable[[], int]) -> tuple[bytes, list[int]]:
        """One tick's frames (STAT_SLOW, then EBPF_TICK or EBPF_DELTA) and the layout indices whose stat read
        failed. A caller that drops them calls lost()."""
        out, dead = self.stat_frame(tick, layout_id, mono)
        self.reads += 1
        return out + self.slot_frames.frame(tick, layout_id, mono(), self.sampler.read()), dead

    def stat_frame(self, tick: int, layout_id: int, mono: Callable[[], int]) -> tuple[bytes, list[int]]:
        """The STAT_SLOW frame of the stat lines due (b"": none) and the layout indices whose read failed. The
        frame's time is that of the last read: the writer stores the lines at the first tick from `tick` on taken
        at or after it (EbpfRows.stat), so a value is never shown before it was read. Under the kernel's tick
        `tick` is the first not drained yet; the recorder's own tick reads them before its copy of the slots. Of
        the threads whose turn it is, only those StatChoice says can have changed are read."""
        n = len(self.tids)
        picked: list[int] = []
        t_stat = mono()
        if n:
            live = self.sampler.live  # each slot as it is just before the reads (StatChoice compares them next turn)
            slot_of = self.tid_slots
            choice = self.stat_choice
            if self._urgent:
                picked = [i for i, tid in enumerate(self.tids) if tid in self._urgent]
                for i in picked:
                    choice.read(slot_of[i], live, t_stat)
            count = -(-n // self.stat_every_ticks)
            start = self._next
            picked += choice.pick([(start + k) % n for k in range(min(count, n))], slot_of, live, t_stat)
            self._next = (start + count) % n
        self._urgent.clear()
        indices: list[int] = []
        texts: list[bytes] = []
        dead: list[int] = []
        pread = os.pread
        fds = self.stat_fds
        for i in picked:
            try:
                text = pread(fds[i], STAT_BYTES, 0)
            except OSError:  # ESRCH: exited
                dead.append(i)
                continue
            if text:
                indices.append(i)
                texts.append(text)
        self.reads += len(picked)
        return (frames.encode_stat_slow(tick, layout_id, mono(), indices, texts) if indices else b""), dead

    def lost(self) -> None:
        """The frames of the last tick() were dropped."""
        self.slot_frames.lost()

    def follow(self, pid: int) -> None:
        """A target process: count the tasks it creates (before listing its threads for the first time)."""
        self.sampler.follow(pid)

    def unfollow(self, pid: int) -> None:
        self.sampler.unfollow(pid)

    def threads_may_be_new(self) -> bool:
        """Whether a target may have a thread its last listing did not show: the probes counted a task created
        by one since the last call (or do not count). Called just before listing them, so that a task created
        meanwhile is counted for the next call."""
        born = self.sampler.tasks_born()
        if born is None:
            return True
        moved = born != self._born_listed
        self._born_listed = born
        return moved

    def stop(self) -> dict[str, Any]:
        """Detach; the probes' figures for the trailer."""
        stats = {**self.sampler.probe_stats(), "slots_full": self.sampler.full}
        if self.sampler.beyond_pid_max:
            stats["tids_beyond_pid_max"] = self.sampler.beyond_pid_max
        stats["full_frames"] = self.slot_frames.full_frames  # slot frames sent whole (SlotFrames)
        stats["stat_reads_skipped"] = self.stat_choice.skipped  # turns whose thread could not have changed
        if self.kernel_ticks is not None:
            stats["kernel_ticks_missed"] = self.kernel_ticks.missed
            # Records the ring refused: never expected from a ring full (it holds ~1 s of the Bitwig shape, drained
            # every KERNEL_TICK_WAKE_NS), yet seen at a few a run under load at any wake-up (README).
            stats["kernel_records_refused"] = self.kernel_ticks.refused
        self.sampler.stop()
        return stats
