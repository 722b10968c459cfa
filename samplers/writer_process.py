"""The writer process: parses the recorder's raw frames in bulk and appends chunks to the capture.

Run as `python -m samplers.writer_process OUTPUT` with the frame pipe on stdin. It owns the capture
file. On EOF without a TRAILER frame (the recorder was killed), it flushes everything it received and
exits, leaving a capture without a trailer: readable, with a warning.

It also derives what only a parse can tell: a thread renamed itself (the comm inside its stat line),
or changed its scheduling policy or priority (stat fields 40 and 41).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import json
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from capture.errors import ForensicsError
from capture.format import (
    SCHED_FIELDS,
    SCHED_SCHEMA,
    SYSTEM_SCHEMA,
    THREADS_SCHEMA,
    TIERS_SCHEMA,
    CaptureWriter,
)
from capture.process_exit import exit_without_teardown
from capture.segments import SegmentedWriter
from capture.vocabulary import policy_name
from samplers import frames
from samplers.engine import merge_sources
from samplers.heap import hold_freed_heap
from samplers.procfs import STAT_NUM_THREADS, STAT_NUMERIC, parse_sched_texts, parse_schedstat_blob, parse_stat_blob
from samplers.system import PRESSURE_FILES, system_rows
from samplers.unseen import UnseenThreads

# At most this much of the recording sits only in the writer's memory. The writer outlives a killed
# recorder and flushes on EOF; this bounds the loss when both are killed at once to about 2 s (this, GATHER_S
# and the recorder's last hand-over).
FLUSH_EVERY_NS = 1_000_000_000
FLUSH_ROWS = 200_000
# The frames are taken in at most every GATHER_S (the frame-drain thread still empties the pipe as they come,
# and the pipe's end is taken at once: frames._chunks): each hand-over's handling runs cold after a sleep, so
# the frames of many hand-overs taken in one go cost less than each on its own. At 0.1 s (five of the eBPF
# sampler's 20 ms hand-overs, 361-385 against 417-432 ms of CPU for 8 s of the Bitwig shape) it gathered
# nothing once the recorder handed over every 125 ms (KERNEL_TICK_WAKE_NS); at 1 s, a chunk's frames in one go:
# the writer's median 5.2 -> 4.7 % of a core on the Bitwig shape, eleven pairs (README "The eBPF sampler"). The
# chunks end at the same ticks: the capture is the same. The flight watcher allows for it (FLUSH_LAG_NS).
GATHER_S = 1.0


class CaptureLost(ForensicsError):
    """The capture's name no longer leads to the file written: nothing of the recording is left."""


class _Layout:
    __slots__ = ("group", "id", "known", "pids", "sched", "sched_tids", "tids")

    def __init__(self, spec: dict[str, Any]) -> None:
        self.id = int(spec["id"])
        self.group = int(spec.get("group", self.id))  # the phases of one tier layout (frames.LAYOUT)
        self.known = {int(pid): int(n) for pid, n in (spec.get("known") or {}).items()}
        self.tids = np.asarray(spec["tids"], dtype=np.int32)
        self.pids = np.asarray(spec["pids"], dtype=np.int32)
        self.sched = np.asarray(spec["sched"], dtype=np.int64)
        self.sched_tids = self.tids[self.sched]


class CaptureSink:
    """Consumes frames; turns TICK frames into `samples` and `sched` chunks."""

    def __init__(
        self,
        output: str,
        clock: Callable[[], int] = time.monotonic_ns,
        ebpf: Any = None,
        ring: dict[str, int] | None = None,
        defer_ebpf_rows: bool | None = None,
    ) -> None:
        self.output = output
        # The eBPF sampler's rows made after the recording (samplers/ebpf/deferred_rows.py), except in a flight
        # ring, whose watcher reads each segment's rows while the recording goes on.
        self.defer_ebpf_rows = ring is None if defer_ebpf_rows is None else defer_ebpf_rows
        self.ebpf_deferred: Any = None  # samplers.ebpf.deferred_rows.DeferredRows when deferred
        self.flushed_at_ns: int | None = None  # the writer's clock at its last flush (deferred: nothing ticks)
        self.ring = ring  # {"segment_ns", "keep_ns"}: `output` is a ring directory (capture/segments.py)
        self.ebpf = ebpf  # an EbpfPump, started, or None
        self.ebpf_stats: dict[str, Any] | None = None
        self.taskstats_rows: list[tuple[int, int, int, bytes | None]] = []
        self.sources: dict[str, Any] = {}
        self.writer: CaptureWriter | SegmentedWriter | None = None
        self.layouts: dict[int, _Layout] = {}
        self.pending: list[tuple[_Layout, int, int, bytes]] = []  # (layout, tick, tick_ns, payload)
        self.pending_rows = 0
        self.pending_since: int | None = None
        self.system: list[dict[str, Any]] = []
        self.process_rows: list[tuple[int, int, int, int, int]] = []
        self.page_kib = os.sysconf("SC_PAGE_SIZE") // 1024
        self.events: list[dict[str, Any]] = []
        self.tier_rows: list[dict[str, Any]] = []
        # Per thread, its last stat values (state, numbers), carried into rows whose stat was not re-read.
        self.last_stat: dict[int, tuple[str, np.ndarray]] = {}
        self.threads: list[dict[str, Any]] = []
        self.last_policy: dict[int, tuple[int, int]] = {}
        self.comm_of: dict[int, str] = {}
        self.clock = clock
        self.finished = False
        self.final: dict[str, Any] = {}
        self.cpu_at_ready = time.process_time_ns()
        self.unseen = UnseenThreads()
        # Thread rows that came while ticks were pending, as (ticks pending then, pid): UnseenThreads is fed in
        # the order the frames came, the ticks' thread counts being taken from their stat lines at the flush.
        self.found_while_pending: list[tuple[int, int]] = []
        # Frames of the engine sources (samplers/engine/source.py), each read from its own pipe by a
        # thread; None marks one pipe's end.
        self.engine_frames: queue.SimpleQueue[tuple[int, bytes] | None] = queue.SimpleQueue()
        self.engine_pipes_open = 0
        self.engine_rows: dict[str, list[dict[str, list[Any]]]] = {}
        self.ebpf_rows: Any = None  # samplers.ebpf.sampler_rows.EbpfRows under --sampler ebpf

    def follow_engine(self, fd: int) -> None:
        """Read one engine source's pipe to its end (a frame cut short by the source's death is dropped)."""

        def drain() -> None:
            for frame in frames.read_frames(fd):
                self.engine_frames.put(frame)
            self.engine_frames.put(None)

        self.engine_pipes_open += 1
        threading.Thread(target=drain, name=f"engine-drain-{fd}", daemon=True).start()

    def take_engine(self, wait_end_s: float = 0.0) -> None:
        """Handle the engine frames received so far (until every pipe's end, waiting up to wait_end_s)."""
        if not self.engine_pipes_open:
            return
        deadline = time.monotonic() + wait_end_s
        while True:
            try:
                item = (
                    self.engine_frames.get(timeout=max(0.0, deadline - time.monotonic()))
                    if wait_end_s
                    else (self.engine_frames.get_nowait())
                )
            except queue.Empty:
                return
            if item is None:
                self.engine_pipes_open -= 1
                if not self.engine_pipes_open:
                    return
                continue
            kind, payload = item
            if kind == frames.TABLE:  # buffered: written with the next chunk, not as a chunk each
                spec = json.loads(payload)
                self.engine_rows.setdefault(spec["name"], []).append(spec["rows"])
            elif kind == frames.META:
                patch = json.loads(payload)
                self.sources = merge_sources(self.sources, patch.get("sources", {}))
                if self.writer is not None:
                    self.writer.update_meta({**patch, "sources": self.sources})
            elif kind == frames.EVENT:
                self.events.append(json.loads(payload))

    # frame handling -------------------------------------------------------------------------------
    def handle(self, kind: int, payload: bytes) -> None:
        if self.engine_pipes_open and kind != frames.TRAILER:
            self.take_engine()
        if kind == frames.TICK:
            tick, layout_id, tick_ns, *_ = frames.TICK_HEADER.unpack_from(payload)
            layout = self.layouts[layout_id]
            self.pending.append((layout, tick, tick_ns, payload))
            self.pending_rows += len(layout.tids)
            if self.pending_since is None:
                self.pending_since = tick_ns
            if self.pending_rows >= FLUSH_ROWS or tick_ns - self.pending_since >= FLUSH_EVERY_NS:
                self.flush()
        elif kind in (frames.EBPF_TICK, frames.EBPF_DELTA, frames.STAT_SLOW, frames.EBPF_TICKS):
            if self.ebpf_deferred is not None:
                self._keep_ebpf(kind, payload)
            else:
                self._take_ebpf(kind, payload)
        elif kind == frames.LAYOUT:
            spec = json.loads(payload)
            layout = _Layout(spec)
            if self.ebpf_rows is not None:
                self.ebpf_rows.layout(spec)
            elif self.ebpf_deferred is not None:
                self.ebpf_deferred.keep(kind, payload)
            in_use = {p[0].id for p in self.pending}
            self.layouts = {
                layout.id: layout,
                **{k: v for k, v in self.layouts.items() if k in in_use or v.group == layout.group},
            }
        elif kind == frames.META:
            patch = json.loads(payload)
            self.sources = merge_sources(self.sources, patch.get("sources", {}))
            ebpf_sampler = patch.get("ebpf_sampler") if self.ebpf_rows is None and self.ebpf_deferred is None else None
            if ebpf_sampler is not None and not self.defer_ebpf_rows:
                from samplers.ebpf.sampler_rows import rows_for

                self.ebpf_rows = rows_for(ebpf_sampler)
            if self.writer is None:
                self.writer = (
                    CaptureWriter(self.output, patch)
                    if self.ring is None
                    else SegmentedWriter(self.output, patch, **self.ring)
                )
                if "engine" in self.sources:  # the engine source spoke first
                    self.writer.update_meta({"sources": self.sources})
                if self.ebpf is not None:  # what the recorder could not know: the probes are live
                    self.sources["ebpf"] = True
                    self.writer.update_meta({"sources": self.sources, "ebpf": self.ebpf.meta()})
            else:  # meta patches replace top-level keys: send "sources" whole, merged
                self.writer.update_meta({**patch, "sources": self.sources} if "sources" in patch else patch)
            if ebpf_sampler is not None and self.defer_ebpf_rows:  # after the writer: its errors come first
                from samplers.ebpf.deferred_rows import DeferredRows

                self.ebpf_deferred = DeferredRows(ebpf_sampler, self.output)
        elif kind == frames.THREAD:
            row = json.loads(payload)
            if self.ebpf_deferred is not None:  # noted where the stat lines after it are compared, when made
                self.ebpf_deferred.keep(kind, payload)
            else:
                self._known_as(row)
            self.threads.append(row)
            if self.pending:
                self.found_while_pending.append((len(self.pending), row["pid"]))
            else:
                self.unseen.thread_found(row["pid"])
            if self.ebpf is not None:
                self.ebpf.add_pid(row["pid"])
        elif kind == frames.EVENT:
            self.events.append(json.loads(payload))
        elif kind == frames.TIERS:
            self.tier_rows += json.loads(payload)["rows"]
        elif kind == frames.SYSTEM:
            self._system(payload)
        elif kind == frames.PROCESSES:
            spec = json.loads(payload)
            for pid, text in spec["statm"]:
                size, resident, shared = (int(v) for v in text.split()[:3])
                if size:  # a zombie has no memory map left and reads all zeros: not a measurement
                    self.process_rows.append((spec["t_ns"], pid, size, resident, shared))
        elif kind == frames.TASKSTATS:
            self._taskstats(payload)
        elif kind == frames.TABLE:
            spec = json.loads(payload)
            if not spec.get("stream"):  # a table streamed in pieces (an engine's rows) needs no ordering
                self.flush()
            assert self.writer is not None
            self.writer.append(spec["name"], spec["rows"])
        elif kind == frames.TRAILER:
            trailer = json.loads(payload)
            self.take_engine(wait_end_s=10.0)  # the session stopped the source before sending this
            self.stop_ebpf()
            self.flush()
            # The cost of the recording, not of the imports before it started, nor of the rows made after it.
            trailer["writer_cpu_ns"] = time.process_time_ns() - self.cpu_at_ready
            if self.ebpf_deferred is not None:
                trailer["writer_decode_cpu_ns"] = self._make_deferred_rows()
            if self.ebpf_stats is not None:
                trailer["ebpf"] = self.ebpf_stats
            if self.ebpf_rows is not None and self.ebpf_rows.deltas_dropped:  # ticks not stored (never expected)
                trailer.setdefault("ebpf_sampler", {})["deltas_dropped"] = self.ebpf_rows.deltas_dropped
            unseen = self.unseen.lower_bounds()
            trailer["threads_unseen_min"] = sum(unseen.values())
            trailer["threads_unseen_min_by_pid"] = {str(pid): n for pid, n in unseen.items() if n}
            assert self.writer is not None
            lost = self.writer.name_lost()
            if lost is not None:  # the recording reached no file anyone can open: say so, not "recorded"
                raise CaptureLost(f"the capture {self.output} is lost: {lost}")
            self.writer.close(trailer)
            self.finished = True
            self.final = {
                "ebpf": self.ebpf_stats,
                "writer_cpu_ns": trailer["writer_cpu_ns"],
                "writer_decode_cpu_ns": trailer.get("writer_decode_cpu_ns"),
                "threads_unseen_min": trailer["threads_unseen_min"],
                "bytes": self.writer.bytes_written,
                "rows": self.writer.rows_written,
            }

    def _known_as(self, row: dict[str, Any]) -> None:
        """A thread row's name and policy: what its next stat line is compared with (_derive_thread_changes)."""
        self.comm_of[row["tid"]] = row["comm"]
        if row.get("policy") is not None:
            self.last_policy[row["tid"]] = (row["policy"], row["rtprio"])

    def _taskstats(self, payload: bytes) -> None:
        tick, rows = frames.decode_taskstats(payload)
        for tid, t_ns, reply in rows:
            self.taskstats_rows.append((tick, t_ns, tid, reply))

    def stop_ebpf(self) -> None:
        if self.ebpf is not None and self.ebpf_stats is None:
            tables, self.ebpf_stats = self.ebpf.stop()
            self._write_ebpf(tables)

    def _write_ebpf(self, tables: dict[str, pa.Table]) -> None:
        if self.writer is not None:
            for name, table in tables.items():
                self.writer.append(name, table)

    def _system(self, payload: bytes) -> None:
        t_ns, (stat_raw, *psi) = frames.decode_system(payload)
        pressure = dict(zip(PRESSURE_FILES, psi, strict=True))
        self.system.extend(system_rows(t_ns, stat_raw, pressure))

    # parsing in bulk ------------------------------------------------------------------------------
    def flush(self) -> None:
        if self.writer is None:
            return
        self.flushed_at_ns = self.clock()
        if self.pending:
            self._flush_ticks()
        if self.ebpf_rows is not None:
            self._flush_ebpf_rows()
        elif self.ebpf_deferred is not None:
            self.ebpf_deferred.spill()
        if self.taskstats_rows:
            from samplers.taskstats import taskstats_table

            self.writer.append(
                "taskstats",
                taskstats_table(
                    self.taskstats_rows, self.sources.get("delayacct"), self.sources.get("delayacct_since_ns")
                ),
            )
            self.taskstats_rows = []
        if self.ebpf is not None and self.ebpf_stats is None:
            self._write_ebpf(self.ebpf.take())
        if self.system:
            columns = {name: [row.get(name) for row in self.system] for name in SYSTEM_SCHEMA.names}
            self.writer.append("system", columns)
            self.system = []
        if self.process_rows:
            t, pid, size, resident, shared = (np.array(c, dtype=np.int64) for c in zip(*self.process_rows, strict=True))
            kib = self.page_kib  # statm counts pages
            self.writer.append(
                "processes",
                {"t_ns": t, "pid": pid, "vsize_kib": size * kib, "rss_kib": resident * kib, "shared_kib": shared * kib},
            )
            self.process_rows = []
        if self.threads:
            names = THREADS_SCHEMA.names
            self.writer.append("threads", {n: [r.get(n) for r in self.threads] for n in names})
            self.threads = []
        for name, parts in self.engine_rows.items():
            engine_columns = sorted({c for part in parts for c in part})
            n = [len(next(iter(part.values()), [])) for part in parts]
            self.writer.append(
                name,
                {
                    c: [v for part, k in zip(parts, n, strict=True) for v in part.get(c, [None] * k)]
                    for c in engine_columns
                },
            )
        self.engine_rows = {}
        if self.tier_rows:
            self.writer.append("tiers", {n: [r.get(n) for r in self.tier_rows] for n in TIERS_SCHEMA.names})
            self.tier_rows = []
        if self.events:
            names = ("t_ns", "kind", "pid", "tid", "text")
            self.writer.append("events", {n: [r.get(n) for r in self.events] for n in names})
            self.events = []
        if isinstance(self.writer, SegmentedWriter):  # everything received is written: a clean cut
            self.writer.rotate_if_due()

    def _flush_ticks(self) -> None:
        assert self.writer is not None
        ticks: list[int] = []
        t_ns: list[np.ndarray] = []
        tids: list[np.ndarray] = []
        pids: list[np.ndarray] = []
        schedstat_sections: list[bytes] = []
        stat_sections: list[bytes] = []
        stat_lengths: list[np.ndarray] = []
        # Per tick with sched threads: its tick, the threads' read times and tids, its texts' lengths and bytes.
        sched_ticks: list[int] = []
        sched_times: list[np.ndarray] = []
        sched_tids: list[np.ndarray] = []
        sched_lengths: list[np.ndarray] = []
        sched_blobs: list[bytes] = []
        rows_of_tick: list[int] = []
        dead: list[tuple[int, int]] = []  # (position of the tick, pid) of each thread a tick had no row of
        # No numpy call per tick but decode_tick's where no thread is missing (nearly always): at 2 ms, for a
        # few threads, the calls were most of the writer's CPU.
        for position, (layout, tick, _tick_ns, payload) in enumerate(self.pending):
            n = len(layout.tids)
            frame = frames.decode_tick(payload, n)
            times, layout_tids, layout_pids = frame.times, layout.tids, layout.pids
            if len(frame.missing):
                alive = np.ones(n, dtype=bool)
                alive[frame.missing] = False
                times, layout_tids, layout_pids = times[alive], layout_tids[alive], layout_pids[alive]
                dead += [(position, pid) for pid in layout.pids[frame.missing].tolist()]
            # Lengths, not newlines, split the stat texts: PR_SET_NAME accepts "\n" in a comm and
            # /proc/<pid>/stat prints the comm unescaped (fs/proc/array.c, proc_task_name(..., false)).
            stat_lengths.append(frame.stat_lengths)
            schedstat_sections.append(frame.schedstat)
            stat_sections.append(frame.stat)
            ticks.append(tick)
            rows_of_tick.append(len(layout_tids))
            t_ns.append(times)
            tids.append(layout_tids)
            pids.append(layout_pids)
            if len(layout.sched):
                sched_ticks.append(tick)
                sched_times.append(frame.times[layout.sched])
                sched_tids.append(layout.sched_tids)
                sched_lengths.append(frame.sched_lengths)
                sched_blobs.append(frame.sched_blob)
        layouts = [entry[0] for entry in self.pending]
        self.pending = []
        self.pending_rows = 0
        self.pending_since = None

        tid_col = np.concatenate(tids)
        pid_col = np.concatenate(pids)
        position_col = np.repeat(np.arange(len(rows_of_tick)), rows_of_tick)
        tick_col = np.asarray(ticks, dtype=np.uint32)[position_col]
        lengths = np.concatenate(stat_lengths).astype(np.int64)
        stat_blob = b"".join(stat_sections)
        schedstat = parse_schedstat_blob(b"".join(schedstat_sections), len(tid_col))
        read = lengths > 0
        # A process leader's stat line carries num_threads (field 20): parsed with the rest, for UnseenThreads.
        leader_lines = np.flatnonzero((tid_col == pid_col)[read])
        states_read, numbers_read = parse_stat_blob(stat_blob, lengths[read], STAT_NUM_THREADS, leader_lines)
        self._count_threads(
            layouts, dead, position_col[read][leader_lines], pid_col[read][leader_lines],
            numbers_read[leader_lines, -1], position_col, pid_col,
        )  # fmt: skip
        numbers_read = numbers_read[:, :-1]
        states, numbers, source, keep = self._carry_stat(tid_col, tick_col, read, states_read, numbers_read)
        columns: dict[str, Any] = {
            "tick": tick_col,
            "t_ns": np.concatenate(t_ns),
            "tid": tid_col,
            "pid": pid_col,
            "run_ns": schedstat[:, 0],
            "wait_ns": schedstat[:, 1],
            "slices": schedstat[:, 2],
        }
        for i, name in enumerate(STAT_NUMERIC):
            columns[name] = numbers[:, i]
        if not keep.all():  # a skipped stat with nothing to carry (cannot happen from the recorder): no row
            columns = {name: values[keep] for name, values in columns.items()}
            states, source = states[keep], source[keep]
        # Codes, not one Python str per row: the state letters of a chunk are a handful.
        letters, codes = np.unique(states, return_inverse=True)
        columns["state"] = pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int8)), pa.array(letters.tolist()))
        blkio = columns["blkio_ticks"]
        columns["blkio_ticks"] = pa.array(blkio, mask=blkio < 0)  # -1: kernel too old to have field 42
        line_ends = np.cumsum(lengths)
        self._derive_thread_changes(stat_blob, line_ends - lengths, lengths, source, columns)
        self.writer.append("samples", columns)
        if sched_ticks:
            lengths = np.concatenate(sched_lengths).astype(np.int64)
            read = lengths > 0  # 0: not read at that tick, or the read failed
            if read.any():
                per_tick = [len(a) for a in sched_lengths]
                self._write_sched(
                    b"".join(sched_blobs),
                    (np.cumsum(lengths) - lengths)[read],
                    lengths[read],
                    np.repeat(np.asarray(sched_ticks, dtype=np.uint32), per_tick)[read],
                    np.concatenate(sched_times)[read],
                    np.concatenate(sched_tids)[read],
                )

    def _count_threads(
        self,
        layouts: list[_Layout],
        dead: list[tuple[int, int]],
        leader_positions: np.ndarray,
        leader_pids: np.ndarray,
        num_threads: np.ndarray,
        positions: np.ndarray,
        pids: np.ndarray,
    ) -> None:
        """The flushed ticks' leaders' num_threads (a leader whose stat line was re-read: -1 where the line was
        too short), each against the threads of its process that its tick read, fed to UnseenThreads in the
        order the frames came, the thread rows that came between the ticks (found_while_pending) in their
        places. `positions`, `pids`: every row's tick (its place among the flushed ticks) and process."""
        found, self.found_while_pending = self.found_while_pending, []
        rows_read: dict[int, int] = {}
        if len(leader_positions):
            # Rows per (tick, process), one key per pair: the ticks' positions above, the pids below.
            key = positions.astype(np.int64) << 32 | pids.astype(np.int64)
            pairs, counts = np.unique(key, return_counts=True)
            leader_keys = leader_positions.astype(np.int64) << 32 | leader_pids.astype(np.int64)
            rows_read = dict(
                zip(leader_keys.tolist(), counts[np.searchsorted(pairs, leader_keys)].tolist(), strict=True)
            )
        gone = collections.Counter(dead)
        next_found = 0
        for position, pid, count in zip(
            leader_positions.tolist(), leader_pids.tolist(), num_threads.tolist(), strict=True
        ):
            while next_found < len(found) and found[next_found][0] <= position:  # came before this tick
                self.unseen.thread_found(found[next_found][1])
                next_found += 1
            if count < 0:
                continue
            # A tier phase reads only some of a process's threads: those known are the ones followed.
            known = layouts[position].known.get(pid)
            read = known - gone[(position, pid)] if known is not None else rows_read[position << 32 | pid]
            self.unseen.tick(pid, count, read)
        for _, pid in found[next_found:]:
            self.unseen.thread_found(pid)

    def _take_ebpf(self, kind: int, payload: bytes) -> None:
        """A frame of the eBPF sampler into its rows (during the recording, or after it from the frames kept)."""
        assert self.ebpf_rows is not None
        if kind == frames.STAT_SLOW:
            self.ebpf_rows.stat(payload)
            return
        if kind == frames.EBPF_TICKS:
            for tick_ns in self.ebpf_rows.batch(payload):  # a chunk ends where it would with a frame per tick
                self._ebpf_tick_taken(tick_ns)
            return
        tick_ns = frames.EBPF_TICK_HEADER.unpack_from(payload)[2]  # the delta's header begins alike
        if kind == frames.EBPF_DELTA:
            self.ebpf_rows.delta(payload)
        else:
            self.ebpf_rows.tick(payload)
        self._ebpf_tick_taken(tick_ns)

    def _ebpf_tick_taken(self, tick_ns: int) -> None:
        assert self.ebpf_rows is not None
        self.pending_since = tick_ns if self.pending_since is None else self.pending_since
        if self.ebpf_rows.rows_pending >= FLUSH_ROWS or tick_ns - self.pending_since >= FLUSH_EVERY_NS:
            self.flush()

    def _flush_ebpf_rows(self) -> None:
        """The eBPF sampler's rows (samplers/ebpf/sampler_rows.py); renames and policy changes from its stat reads."""
        assert self.writer is not None
        columns, slow = self.ebpf_rows.take()
        self.pending_since = None
        self._thread_changes_from_stat(slow)
        for name, table in (columns or {}).items():
            self.writer.append(name, table)

    def _keep_ebpf(self, kind: int, payload: bytes) -> None:
        """A frame of the eBPF sampler, kept for after the recording; the other tables flushed every
        FLUSH_EVERY_NS of the writer's clock (no tick is taken to time them)."""
        self.ebpf_deferred.keep(kind, payload)
        now = self.clock()
        if self.flushed_at_ns is None:
            self.flushed_at_ns = now
        elif now - self.flushed_at_ns >= FLUSH_EVERY_NS:
            self.flush()

    def _make_deferred_rows(self) -> int:
        """The eBPF sampler's rows, made from its frames kept during the recording as they would have been made
        live: in the order they came, each chunk ending at the same tick (_ebpf_tick_taken), its renames and
        policy changes compared with the names and policies of the thread rows that came before it (not noted
        while kept: handle()). Returns the CPU it took (ns)."""
        from samplers.ebpf.sampler_rows import rows_for

        started = time.process_time_ns()
        deferred, self.ebpf_deferred = self.ebpf_deferred, None
        assert deferred is not None
        self.ebpf_rows = rows_for(deferred.meta)  # its trailer counts (deltas_dropped) as made live
        for kind, payload in deferred.frames():
            if kind == frames.THREAD:
                self._known_as(json.loads(payload))
            elif kind == frames.LAYOUT:
                self.ebpf_rows.layout(json.loads(payload))
            else:
                self._take_ebpf(kind, payload)
        deferred.close()
        self.flush()  # the last chunk's rows, and the thread changes
        return time.process_time_ns() - started

    def _thread_changes_from_stat(self, slow: dict[str, Any] | None) -> None:
        if slow is not None:
            names = ("tick", "t_ns", "tid", "pid")
            stat_columns = {name: slow[name] for name in names}
            for i, name in enumerate(STAT_NUMERIC):
                stat_columns[name] = slow["numbers"][:, i]
            lengths = slow["lengths"]
            line_starts = np.cumsum(lengths) - lengths
            every_row = np.arange(len(lengths))  # each row read its own stat text
            self._derive_thread_changes(slow["blob"], line_starts, lengths, every_row, stat_columns)

    def _carry_stat(
        self, tids: np.ndarray, ticks: np.ndarray, read: np.ndarray, states_read: np.ndarray, numbers_read: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Stat values for every row: those read, and for a row whose stat was not re-read (its schedstat
        had not moved: samplers/tiers.py) the thread's last values, from this chunk or the one before.

        Returns (states, numbers, source, keep): source is the row whose stat text a row's values come
        from (-1: carried from an earlier chunk); keep is False for a row with no values to carry."""
        n = len(tids)
        states = np.full(n, "?", dtype="<U1")
        numbers = np.full((n, len(STAT_NUMERIC)), -1, dtype=np.int64)
        states[read] = states_read
        numbers[read] = numbers_read
        source = np.where(read, np.arange(n), -1)
        keep = np.ones(n, dtype=bool)
        order = np.lexsort((ticks, tids))  # by thread, then time
        sorted_tids = tids[order]
        first = np.ones(n, dtype=bool)
        first[1:] = sorted_tids[1:] != sorted_tids[:-1]
        if not read.all():
            index = np.arange(n)
            group_start = np.maximum.accumulate(np.where(first, index, 0))
            last_read = np.maximum.accumulate(np.where(read[order], index, -1))
            fill = ~read[order]
            inside = fill & (last_read >= group_start)  # an earlier row of the thread in this chunk
            rows, from_rows = order[inside], order[last_read[inside]]
            states[rows], numbers[rows], source[rows] = states[from_rows], numbers[from_rows], from_rows
            before = fill & ~inside
            if before.any():
                rows = order[before]
                unique, inverse = np.unique(sorted_tids[before], return_inverse=True)
                carried = [self.last_stat.get(tid) for tid in unique.tolist()]
                have = np.array([c is not None for c in carried])
                known = [c for c in carried if c is not None]
                if known:
                    where = np.cumsum(have) - 1
                    ok = have[inverse]
                    states[rows[ok]] = np.array([c[0] for c in known])[where[inverse[ok]]]
                    numbers[rows[ok]] = np.stack([c[1] for c in known])[where[inverse[ok]]]
                keep[rows[~have[inverse]]] = False
        last = np.append(first[1:], True)
        for i in np.flatnonzero(last).tolist():
            row = int(order[i])
            if keep[row]:
                self.last_stat[int(sorted_tids[i])] = (str(states[row]), numbers[row].copy())
        return states, numbers, source, keep

    def _derive_thread_changes(
        self,
        stat_blob: bytes,
        line_starts: np.ndarray,
        lengths: np.ndarray,
        source: np.ndarray,
        columns: dict[str, Any],
    ) -> None:
        """Policy/priority changes at every tick they happen; renames as of each thread's last row here.

        The comm is only compared once a chunk (extracting it from every row would cost a Python step
        per sample); a thread that renames itself is seen within one chunk, 0.5 s.
        """
        tid_col = columns["tid"]
        if not len(tid_col):
            return
        order = np.lexsort((columns["tick"], tid_col))  # by thread, then time
        tids = tid_col[order]
        policy = columns["policy"][order]
        rtprio = columns["rtprio"][order]
        first_of_tid = np.ones(len(tids), dtype=bool)
        first_of_tid[1:] = tids[1:] != tids[:-1]
        last_of_tid = np.append(first_of_tid[1:], True)
        changed = np.zeros(len(tids), dtype=bool)
        changed[1:] = ~first_of_tid[1:] & ((policy[1:] != policy[:-1]) | (rtprio[1:] != rtprio[:-1]))
        # Per thread, on Python ints: with a numpy scalar per step this and the names' loop below took 18 ms of
        # the writer's ~200 in a replay of 8 s of the eBPF sampler's Bitwig-shaped stream (534 threads a chunk);
        # 9.5 ms so (bench/writer_replay.py's stream, the method timed alone).
        heads = np.flatnonzero(first_of_tid)
        head_values = zip(tids[heads].tolist(), policy[heads].tolist(), rtprio[heads].tolist(), strict=True)
        last_policy = self.last_policy
        # Against the previous chunk (or the discovery); a thread not known yet has no change to show.
        changed[heads] = [last_policy.get(t, (p, r)) != (p, r) for t, p, r in head_values]
        for i in np.flatnonzero(changed).tolist():  # rare: a policy or priority set
            row = int(order[i])
            tid = int(tids[i])
            before = (int(policy[i - 1]), int(rtprio[i - 1])) if not first_of_tid[i] else last_policy[tid]
            self.events.append(
                {
                    "t_ns": int(columns["t_ns"][row]),
                    "kind": "policy_changed",
                    "pid": int(columns["pid"][row]),
                    "tid": tid,
                    "text": f"{policy_name(before[0])}/{before[1]} -> {policy_name(int(policy[i]))}/{int(rtprio[i])}",
                }
            )
        lasts = np.flatnonzero(last_of_tid)
        last_tids = tids[lasts].tolist()
        now_policy = zip(policy[lasts].tolist(), rtprio[lasts].tolist(), strict=True)
        last_policy.update(zip(last_tids, now_policy, strict=True))
        # The names, as of each thread's last row here whose stat was read in this chunk (source >= 0; one not
        # re-read cannot have changed its name): the text between the line's first '(' and its last ')'.
        rows = order[lasts]
        text_rows = source[rows]
        read = text_rows >= 0
        if not read.any():
            return
        text_rows = text_rows[read]
        starts = line_starts[text_rows]
        ends = starts + lengths[text_rows]
        comm_of = self.comm_of
        for tid, row, start, end in zip(
            tids[lasts[read]].tolist(), rows[read].tolist(), starts.tolist(), ends.tolist(), strict=True
        ):
            line = stat_blob[start:end]
            comm = line[line.find(b"(") + 1 : line.rfind(b")")].decode(errors="replace")
            previous = comm_of.get(tid)
            if previous is not None and previous != comm:
                t, pid = int(columns["t_ns"][row]), int(columns["pid"][row])
                # A main thread's name is its process's name (/proc/<pid>/comm is the leader's comm).
                self.threads.append(
                    {"t_ns": t, "tid": tid, "pid": pid, "comm": comm, **({"process": comm} if tid == pid else {})}
                )
                self.events.append(
                    {"t_ns": t, "kind": "thread_renamed", "pid": pid, "tid": tid, "text": f"{previous} -> {comm}"}
                )
            comm_of[tid] = comm

    def _write_sched(
        self,
        blob: bytes,
        starts: np.ndarray,
        lengths: np.ndarray,
        ticks: np.ndarray,
        times: np.ndarray,
        tids: np.ndarray,
    ) -> None:
        """The sched rows of a chunk: text i at starts[i] in `blob`, read at times[i] by thread tids[i]."""
        assert self.writer is not None
        parsed = parse_sched_texts(blob, starts, lengths, list(SCHED_FIELDS.values()))
        columns: dict[str, Any] = {"tick": ticks, "t_ns": times.astype(np.int64), "tid": tids.astype(np.int32)}
        for column, field in SCHED_FIELDS.items():
            values = parsed.get(field)
            columns[column] = pa.nulls(len(ticks), pa.int64()) if values is None else pa.array(values, type=pa.int64())
        self.writer.append("sched", pa.table(columns, schema=SCHED_SCHEMA))

    def abandon(self) -> None:
        """After a write error: close the file as it is (what reached it reads back), write no more."""
        if self.ebpf_deferred is not None:
            with contextlib.suppress(OSError):
                self.ebpf_deferred.close()
        if self.ebpf is not None and self.ebpf_stats is None:
            with contextlib.suppress(Exception):
                self.ebpf.stop()
        if self.writer is not None:
            self.writer.abandon()

    def close(self) -> None:
        """EOF: keep what arrived. No trailer unless the recorder sent one."""
        if self.finished:
            return
        self.take_engine(wait_end_s=2.0)
        self.stop_ebpf()
        self.flush()
        if self.writer is not None:
            if self.ebpf_deferred is not None:
                self._make_deferred_rows()
            self.writer.close(None)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    ebpf = "--ebpf" in args
    engine_fds: list[int] = []
    while "--engine-fd" in args:  # one per engine source that may run
        at = args.index("--engine-fd")
        engine_fds.append(int(args[at + 1]))
        args = args[:at] + args[at + 2 :]
    ring: dict[str, int] | None = None
    if "--ring" in args:  # --ring SEGMENT_NS KEEP_NS: OUTPUT is the ring's directory
        at = args.index("--ring")
        ring = {"segment_ns": int(args[at + 1]), "keep_ns": int(args[at + 2])}
        args = args[:at] + args[at + 3 :]
    paths = [a for a in args if a != "--ebpf"]
    if len(paths) != 1:
        print(
            "usage: python -m samplers.writer_process OUTPUT [--ebpf] [--engine-fd FD ...] [--ring SEGMENT_NS KEEP_NS]"
            " < frames",
            file=sys.stderr,
        )
        return 2
    # Ctrl-C (and SIGHUP when the terminal closes) reaches the whole foreground process group: the
    # writer must not die before the recorder has sent its trailer. It ends on EOF instead.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    pump = _start_ebpf() if ebpf else None
    # Parsing and compression can wait; the target threads and the recorder's tick cannot. The frame
    # drain thread keeps the pipe empty even when this process gets less CPU.
    with contextlib.suppress(OSError):
        os.nice(10)
    _hold_freed_memory()
    sink = CaptureSink(paths[0], ebpf=pump, ring=ring)
    for fd in engine_fds:
        sink.follow_engine(fd)
    _import_ahead()
    # Tell the recorder we are ready: until the imports above are done (and the probes attached),
    # frames would only fill the pipe and block its first ticks.
    os.write(sys.stdout.fileno(), b"R")
    try:
        for kind, payload in frames.read_frames(sys.stdin.fileno(), drain_in_thread=True, gather_s=GATHER_S):
            sink.handle(kind, payload)
            if sink.finished:
                break
        sink.close()
    except (OSError, ForensicsError) as err:
        # The recorder words it as one line (a full disk, a directory gone, no permission).
        with contextlib.suppress(BrokenPipeError):
            wrote = sink.writer is not None and sink.writer.bytes_written > 0
            report = {"error": _why(err, paths[0]), "wrote": wrote, "lost": isinstance(err, CaptureLost)}
            os.write(sys.stdout.fileno(), json.dumps(report).encode())
        sink.abandon()
        return 1
    if sink.finished:  # the recorder prints these in its summary (unless it ended before we did)
        with contextlib.suppress(BrokenPipeError):
            os.write(sys.stdout.fileno(), json.dumps(sink.final).encode())
    return 0


def _why(err: BaseException, output: str) -> str:
    if isinstance(err, ForensicsError):
        return str(err)
    assert isinstance(err, OSError)
    text = f"cannot write {output}: {err.strerror or err}"
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        text += " (the file system is full: free space, or record to another disk with -o)"
    return text


def _hold_freed_memory() -> None:
    """Keep what a chunk frees for the next one instead of handing it back to the kernel. Each chunk allocates
    and frees the same few megabytes (numpy's columns, Arrow's buffers); handed back, every chunk faults them in
    again, zeroed: Arrow's mimalloc purges its freed 2 MiB huge pages after 10 ms, glibc unmaps each block over
    its mmap threshold. Those faults were 17 % of the writer's CPU on the Bitwig shape (perf, bench/writer_replay.py
    --paced), 0.2 % with Arrow on the system allocator and these two thresholds. The writer's memory then stays
    at its peak (a chunk's: FLUSH_ROWS rows). set_memory_pool() moves only what pyarrow allocates: the C++ side's
    own (the IPC writer's compressed buffers) follows ARROW_DEFAULT_MEMORY_POOL, which the session that starts
    this process sets (samplers/session.py writer_env)."""
    pa.set_memory_pool(pa.system_memory_pool())
    hold_freed_heap()


def _import_ahead() -> None:
    """Import before the ready signal what the first frames and the first chunk would import: the eBPF sampler's
    rows builder and its frames' keeper (at its META frame), Arrow's group-by (capture/format.py thread_seen)
    and the pandas bridge `pa.array` loads for a list of str (letters_column). Imported there, they cost 48-79 ms
    of CPU and a stall of the first chunk inside the recording (bench/ebpf_sampler_bench.py counts the writer
    from its ready signal); here, the start-up the recorder waits for anyway, once."""
    import pyarrow.acero
    import pyarrow.pandas_compat  # noqa: F401

    import samplers.ebpf.deferred_rows
    import samplers.ebpf.sampler_rows  # noqa: F401


def _start_ebpf() -> Any:
    """The eBPF collector, attached before the first tick; None (and one line why) if it cannot run."""
    from samplers.ebpf.collector import EbpfUnavailable
    from samplers.ebpf.pump import EbpfPump

    pump = EbpfPump()
    try:
        pump.start()
    except EbpfUnavailable as err:
        print(f"catch-load: eBPF: {err}", file=sys.stderr)
        return None
    for message in pump.messages:
        print(f"catch-load: eBPF: {message}", file=sys.stderr)
    return pump


if __name__ == "__main__":
    exit_without_teardown(main())  # capture.process_exit: Arrow's teardown can abort a process that wrote parquet
