"""The writer process: parses the recorder's raw frames in bulk and appends chunks to the capture.

Run as `python -m samplers.writer_process OUTPUT` with the frame pipe on stdin. It owns the capture
file. On EOF without a TRAILER frame (the recorder was killed), it flushes everything it received and
exits, leaving a capture without a trailer: readable, with a warning.

It also derives what only a parse can tell: a thread renamed itself (the comm inside its stat line),
or changed its scheduling policy or priority (stat fields 40 and 41).
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from forensics.capture import SCHED_FIELDS, SCHED_SCHEMA, SYSTEM_SCHEMA, CaptureWriter
from samplers import frames
from samplers.procfs import STAT_NUMERIC, parse_sched, parse_stat_batch, policy_name
from samplers.system import PRESSURE_FILES, system_rows

FLUSH_EVERY_NS = 500_000_000  # at most this much of the recording sits in memory before it is on disk
FLUSH_ROWS = 200_000


class _Layout:
    __slots__ = ("id", "pids", "sched", "tids")

    def __init__(self, spec: dict[str, Any]) -> None:
        self.id = int(spec["id"])
        self.tids = np.asarray(spec["tids"], dtype=np.int32)
        self.pids = np.asarray(spec["pids"], dtype=np.int32)
        self.sched = np.asarray(spec["sched"], dtype=np.int64)


class CaptureSink:
    """Consumes frames; turns TICK frames into `samples` and `sched` chunks."""

    def __init__(self, output: str, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.output = output
        self.writer: CaptureWriter | None = None
        self.layouts: dict[int, _Layout] = {}
        self.pending: list[tuple[_Layout, int, int, bytes]] = []  # (layout, tick, tick_ns, payload)
        self.pending_rows = 0
        self.pending_since: int | None = None
        self.system: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.threads: list[dict[str, Any]] = []
        self.last_comm: dict[int, bytes] = {}
        self.last_policy: dict[int, tuple[int, int]] = {}
        self.comm_of: dict[int, str] = {}
        self.clock = clock
        self.finished = False

    # frame handling -------------------------------------------------------------------------------
    def handle(self, kind: int, payload: bytes) -> None:
        if kind == frames.TICK:
            tick, layout_id, tick_ns, *_ = frames.TICK_HEADER.unpack_from(payload)
            layout = self.layouts[layout_id]
            self.pending.append((layout, tick, tick_ns, payload))
            self.pending_rows += len(layout.tids)
            if self.pending_since is None:
                self.pending_since = tick_ns
            if self.pending_rows >= FLUSH_ROWS or tick_ns - self.pending_since >= FLUSH_EVERY_NS:
                self.flush()
        elif kind == frames.LAYOUT:
            layout = _Layout(json.loads(payload))
            self.layouts = {layout.id: layout, **{k: v for k, v in self.layouts.items() if self._in_use(k)}}
        elif kind == frames.META:
            patch = json.loads(payload)
            if self.writer is None:
                self.writer = CaptureWriter(self.output, patch)
            else:
                self.writer.update_meta(patch)
        elif kind == frames.THREAD:
            row = json.loads(payload)
            self.comm_of[row["tid"]] = row["comm"]
            self.threads.append(row)
        elif kind == frames.EVENT:
            self.events.append(json.loads(payload))
        elif kind == frames.SYSTEM:
            self._system(payload)
        elif kind == frames.TABLE:
            spec = json.loads(payload)
            self.flush()
            assert self.writer is not None
            self.writer.append(spec["name"], spec["rows"])
        elif kind == frames.TRAILER:
            trailer = json.loads(payload)
            self.flush()
            trailer["writer_cpu_ns"] = time.process_time_ns()
            assert self.writer is not None
            self.writer.close(trailer)
            self.finished = True

    def _in_use(self, layout_id: int) -> bool:
        return any(p[0].id == layout_id for p in self.pending)

    def _system(self, payload: bytes) -> None:
        t_ns, n_stat, *n_psi = frames.SYSTEM_HEADER.unpack_from(payload)
        offset = frames.SYSTEM_HEADER.size
        stat_raw = payload[offset : offset + n_stat]
        offset += n_stat
        pressure: dict[str, bytes] = {}
        for kind, n in zip(PRESSURE_FILES, n_psi, strict=True):
            pressure[kind] = payload[offset : offset + n]
            offset += n
        self.system.extend(system_rows(t_ns, stat_raw, pressure))

    # parsing in bulk ------------------------------------------------------------------------------
    def flush(self) -> None:
        if self.writer is None:
            return
        if self.pending:
            self._flush_ticks()
        if self.system:
            columns = {name: [row.get(name) for row in self.system] for name in SYSTEM_SCHEMA.names}
            self.writer.append("system", columns)
            self.system = []
        if self.threads:
            names = ("t_ns", "tid", "pid", "comm", "process", "cmdline", "starttime")
            self.writer.append("threads", {n: [r.get(n) for r in self.threads] for n in names})
            self.threads = []
        if self.events:
            names = ("t_ns", "kind", "pid", "tid", "text")
            self.writer.append("events", {n: [r.get(n) for r in self.events] for n in names})
            self.events = []

    def _flush_ticks(self) -> None:
        assert self.writer is not None
        ticks: list[np.ndarray] = []
        t_ns: list[np.ndarray] = []
        tids: list[np.ndarray] = []
        pids: list[np.ndarray] = []
        schedstat_blobs: list[bytes] = []
        stat_lines: list[bytes] = []
        sched_rows: list[tuple[int, int, int, bytes]] = []
        for layout, tick, _tick_ns, payload in self.pending:
            n = len(layout.tids)
            _, _, _, n_dead, n_sched, len_ss, len_st = frames.TICK_HEADER.unpack_from(payload)
            offset = frames.TICK_HEADER.size
            times = np.frombuffer(payload, dtype="<i8", count=n, offset=offset)
            offset += 8 * n
            dead = np.frombuffer(payload, dtype="<u4", count=n_dead, offset=offset)
            offset += 4 * n_dead
            alive = np.ones(n, dtype=bool)
            if n_dead:
                alive[dead] = False
            n_alive = n - n_dead
            # Lengths, not newlines, split the stat texts: PR_SET_NAME accepts "\n" in a comm and
            # /proc/<pid>/stat prints the comm unescaped (fs/proc/array.c, proc_task_name(..., false)).
            stat_lens = np.frombuffer(payload, dtype="<u4", count=n_alive, offset=offset)
            offset += 4 * n_alive
            sched_lens = np.frombuffer(payload, dtype="<u4", count=n_sched, offset=offset)
            offset += 4 * n_sched
            schedstat_blobs.append(payload[offset : offset + len_ss])
            offset += len_ss
            ends = (offset + np.cumsum(stat_lens)).tolist()
            starts = [offset, *ends[:-1]] if ends else []
            stat_lines.extend(payload[a:b] for a, b in zip(starts, ends, strict=True))
            offset += len_st
            ticks.append(np.full(int(alive.sum()), tick, dtype=np.uint32))
            t_ns.append(times[alive])
            tids.append(layout.tids[alive])
            pids.append(layout.pids[alive])
            for index, length in zip(layout.sched, sched_lens, strict=True):
                if length:
                    sched_rows.append(
                        (tick, int(times[index]), int(layout.tids[index]), payload[offset : offset + length])
                    )
                offset += length
        self.pending = []
        self.pending_rows = 0
        self.pending_since = None

        tick_col = np.concatenate(ticks)
        tid_col = np.concatenate(tids)
        schedstat_tokens = b"".join(schedstat_blobs).split()
        schedstat = np.array(schedstat_tokens).astype(np.int64).reshape(-1, 3)
        if len(stat_lines) != len(tid_col) or len(schedstat) != len(tid_col):
            raise ValueError(
                f"frame damage: {len(tid_col)} threads, {len(stat_lines)} stat and {len(schedstat)} schedstat texts"
            )
        states, numbers = parse_stat_batch(stat_lines)
        columns: dict[str, Any] = {
            "tick": tick_col,
            "t_ns": np.concatenate(t_ns),
            "tid": tid_col,
            "pid": np.concatenate(pids),
            "run_ns": schedstat[:, 0],
            "wait_ns": schedstat[:, 1],
            "slices": schedstat[:, 2],
            "state": pa.array(states.astype(object)).dictionary_encode(),
        }
        for i, name in enumerate(STAT_NUMERIC):
            columns[name] = numbers[:, i]
        blkio = numbers[:, list(STAT_NUMERIC).index("blkio_ticks")]
        columns["blkio_ticks"] = pa.array(blkio, mask=blkio < 0)  # -1: kernel too old to have field 42
        self._derive_thread_changes(stat_lines, columns)
        self.writer.append("samples", columns)
        if sched_rows:
            self._write_sched(sched_rows)

    def _derive_thread_changes(self, stat_lines: list[bytes], columns: dict[str, Any]) -> None:
        """Renames and policy/priority changes, from the last row of each thread in this chunk."""
        tid_col = columns["tid"]
        policy = columns["policy"]
        rtprio = columns["rtprio"]
        # index of the last row of each tid (rows are in tick order)
        _, last_rev = np.unique(tid_col[::-1], return_index=True)
        last_rows = len(tid_col) - 1 - last_rev
        for row in last_rows:
            tid = int(tid_col[row])
            line = stat_lines[row]
            comm = line[line.find(b"(") + 1 : line.rfind(b")")]
            t = int(columns["t_ns"][row])
            pid = int(columns["pid"][row])
            previous = self.last_comm.get(tid)
            if previous is not None and previous != comm:
                text = comm.decode(errors="replace")
                self.threads.append(
                    {
                        "t_ns": t,
                        "tid": tid,
                        "pid": pid,
                        "comm": text,
                        "process": None,
                        "cmdline": None,
                        "starttime": None,
                    }
                )
                self.events.append(
                    {
                        "t_ns": t,
                        "kind": "thread_renamed",
                        "pid": pid,
                        "tid": tid,
                        "text": f"{previous.decode(errors='replace')} -> {text}",
                    }
                )
            self.last_comm[tid] = comm
            sched = (int(policy[row]), int(rtprio[row]))
            before = self.last_policy.get(tid)
            if before is not None and before != sched:
                self.events.append(
                    {
                        "t_ns": t,
                        "kind": "policy_changed",
                        "pid": pid,
                        "tid": tid,
                        "text": f"{policy_name(before[0])}/{before[1]} -> {policy_name(sched[0])}/{sched[1]}",
                    }
                )
            self.last_policy[tid] = sched

    def _write_sched(self, rows: list[tuple[int, int, int, bytes]]) -> None:
        assert self.writer is not None
        parsed = [parse_sched(raw) for *_, raw in rows]
        columns: dict[str, Any] = {
            "tick": np.array([r[0] for r in rows], dtype=np.uint32),
            "t_ns": np.array([r[1] for r in rows], dtype=np.int64),
            "tid": np.array([r[2] for r in rows], dtype=np.int32),
        }
        for column, field in SCHED_FIELDS.items():
            columns[column] = pa.array([p.get(field) for p in parsed], type=pa.int64())
        self.writer.append("sched", pa.table(columns, schema=SCHED_SCHEMA))

    def close(self) -> None:
        """EOF: keep what arrived. No trailer unless the recorder sent one."""
        if self.finished:
            return
        self.flush()
        if self.writer is not None:
            self.writer.close(None)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m samplers.writer_process OUTPUT < frames", file=sys.stderr)
        return 2
    # Ctrl-C reaches the whole foreground process group: the writer must not die before the recorder
    # has sent its trailer. It ends on EOF instead.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sink = CaptureSink(args[0])
    try:
        for kind, payload in frames.read_frames(sys.stdin.fileno()):
            sink.handle(kind, payload)
            if sink.finished:
                break
    finally:
        sink.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
