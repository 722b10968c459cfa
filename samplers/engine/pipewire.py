"""PipeWire source: the daemon's profiler stream and its graph's clients, as engine tables.

Mechanism: a small native client of the daemon's socket, in pure Python (no libpipewire bindings exist
in Debian 12), run as its own process (`python -m samplers.engine.pipewire --rows-fd N --recorder-fd M
--parent-pid P SOCKET`, launched as every engine source is: samplers/engine/source.py) that writes frames
(samplers/frames.py) straight to the writer and the graph's client pids to the recorder. It binds the
`PipeWire:Interface:Profiler` global, as pw-top and pw-profiler do, and reads the registry for nodes and
clients.

Why not parse `pw-profiler`: on 0.3.65 its TSV keeps no absolute time (every follower column is relative
to the driver's signal, and the 4 driver columns are a period, an end, the clock's delay and an estimate),
drops the xrun count, the quantum and the rate, names followers only on its stdout, logs one driver, and
writes through a fully buffered FILE (4 KiB chunks: ~20 ms of arrival jitter). The profile events it
reads carry all of that, in CLOCK_MONOTONIC.

Cost on the graph: none added to a cycle. The profiler module (src/modules/module-profiler.c) copies
each cycle's activation records into a ring buffer inside the driver's cycle whenever any client has
bound the Profiler (pw-top does the same), and sends them from the daemon's main loop on a 1 s timer
(sooner past 16 KiB). This client holds no node in the graph, so no cycle waits for it.

Clock: pw_node_activation's signal/awake/finish times are CLOCK_MONOTONIC (impl-node.c and
pipewire-jack write them with clock_gettime(CLOCK_MONOTONIC)), the capture's clock: offset 0, checked
on every batch (a record must not end after it arrived). The driver's `clock.nsec` is in the driver's
own clock, named in the record (`clock.name`); it is used only when that name says monotonic.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from samplers import frames
from samplers.engine import spa_pod as pod
from samplers.engine.source import die_with_recorder, tell_recorder

ENGINE = "pipewire"
# spa/include/spa/param/profiler.h (0.3.65): properties of a SPA_TYPE_OBJECT_Profiler object.
PROFILER_INFO = 0x10001  # Struct(Long count, Float cpu_load x3[, Int xrun_count])
PROFILER_CLOCK = 0x10002  # Struct(Int flags, Int id, String name, Long nsec, Fraction rate, Long position,
#                           Long duration, Long delay, Double rate_diff, Long next_nsec)
PROFILER_DRIVER_BLOCK = 0x10003  # Struct(Int id, String name, Long prev_signal, Long signal, Long awake,
#                                  Long finish, Int status[, Fraction latency][, Int xrun_count (1.x)])
PROFILER_FOLLOWER_BLOCK = 0x20001  # same fields; its prev_signal is the driver's signal
# src/pipewire/private.h: pw_node_activation.status
STATUS_NAMES = {0: "not-triggered", 1: "triggered", 2: "awake", 3: "finished", 4: "inactive"}
FINISHED = 3
# Native protocol (src/pipewire/core.h, client.h, extensions/profiler.h; connection.c: header v3)
CORE_ID, CLIENT_ID, REGISTRY_ID, PROFILER_ID = 0, 1, 2, 3
CORE_HELLO, CORE_SYNC, CORE_PONG, CORE_GET_REGISTRY = 1, 2, 3, 5
CLIENT_UPDATE_PROPERTIES = 2
REGISTRY_BIND = 1
EV_CORE_INFO, EV_CORE_DONE, EV_CORE_PING, EV_CORE_ERROR = 0, 1, 2, 3
EV_GLOBAL, EV_GLOBAL_REMOVE = 0, 1
EV_PROFILE = 0
PROFILER_TYPE = "PipeWire:Interface:Profiler"
SYNC_SEQ = 1
_HEADER = struct.Struct("<IIII")  # id, opcode << 24 | size, seq, n_fds
STATUS_EVERY_NS = 50_000_000  # engine_status at ~20 Hz, and on every change
FLUSH_EVERY_NS = 1_000_000_000  # rows leave this process at least this often (the profiler's own pace)
RESOLVE_NS = 2_000_000_000  # how long a late node's finish is waited for before it stays unknown
DAEMON_GONE = "the PipeWire daemon went away (connection closed)"
RECONNECT_S = 0.1  # a gone daemon's socket is tried this often: a restarted one is attached within it


def socket_path(env: dict[str, str]) -> str:
    """Where a client with this environment connects (local-socket.c: PIPEWIRE_RUNTIME_DIR, then
    XDG_RUNTIME_DIR, then USERPROFILE, then /run/pipewire; the name from PIPEWIRE_REMOTE or pipewire-0).
    With no socket there yet (a daemon that starts after us), the runtime directory's: where a daemon of
    this environment will listen."""
    name = env.get("PIPEWIRE_REMOTE") or "pipewire-0"
    if name.startswith("/"):
        return name
    runtime = [os.path.join(env[key], name) for key in ("PIPEWIRE_RUNTIME_DIR", "XDG_RUNTIME_DIR", "USERPROFILE")
               if env.get(key)]  # fmt: skip
    system = os.path.join("/run/pipewire", name)
    for path in [*runtime, system]:
        if os.path.exists(path):
            return path
    return runtime[0] if runtime else system


# ---- profile records ------------------------------------------------------------------------------
@dataclass
class Block:
    id: int
    name: str
    prev_signal: int
    signal: int
    awake: int
    finish: int
    status: int
    xrun_count: int | None = None  # the node's own counter: a 9th field from 1.x on (profiler.h), else None


@dataclass
class Record:
    """One cycle as the profiler module reports it."""

    count: int
    cpu_load: tuple[float, float, float]
    xrun_count: int | None  # absent before the info struct grew it
    clock_name: str
    clock_nsec: int
    rate_denom: int
    duration: int
    next_nsec: int
    driver: Block
    followers: list[Block] = field(default_factory=list)
    has_latency: bool = False


def block_from_fields(values: list[Any]) -> Block:
    xruns = int(values[8]) if len(values) > 8 and isinstance(values[8], int) else None
    prev_signal, signal, awake, finish, status = (int(v) for v in values[2:7])
    return Block(int(values[0]), str(values[1]), prev_signal, signal, awake, finish, status, xruns)


def parse_profile(value: Any) -> list[Record]:
    """The records of one profile event (a Struct of Profiler objects, one per cycle)."""
    records: list[Record] = []
    for obj in value if isinstance(value, list) else [value]:
        if not isinstance(obj, pod.PodObject):
            continue
        info = clock = driver = None
        followers: list[Block] = []
        has_latency = False
        for key, item in obj.props:
            if key == PROFILER_INFO:
                info = item
            elif key == PROFILER_CLOCK:
                clock = item
            elif key == PROFILER_DRIVER_BLOCK:
                driver = block_from_fields(item)
                has_latency = len(item) > 7
            elif key == PROFILER_FOLLOWER_BLOCK:
                followers.append(block_from_fields(item))
        if info is None or clock is None or driver is None:
            continue
        records.append(
            Record(
                count=int(info[0]),
                cpu_load=(float(info[1]), float(info[2]), float(info[3])),
                xrun_count=int(info[4]) if len(info) > 4 else None,
                clock_name=str(clock[2]),
                clock_nsec=int(clock[3]),
                rate_denom=int(clock[4][1]),
                duration=int(clock[6]),
                next_nsec=int(clock[9]),
                driver=driver,
                followers=followers,
                has_latency=has_latency,
            )
        )
    return records


def _monotonic_clock(name: str) -> bool:
    return "monotonic" in name.lower()


class ProfileTables:
    """Turns profiler records into rows of engine_cycles, engine_nodes, xruns and engine_status.

    A record comes from one of two places (module-profiler.c hooks both): the driver's `complete`
    (every follower finished; the driver's signal time is the cycle's start) or its `incomplete`, emitted
    at the start of the next cycle when the graph has not finished (impl-node.c node_ready: "graph not
    finished"). Then the driver's finish time still holds the unfinished cycle's start (resume_node
    wrote it), its clock already describes the next cycle, and the followers that did not finish show
    status triggered/awake. pw-top counts each follower or driver block whose status is not `finished`
    as an error: the same rule marks `xrun` here, and each such cycle is an xrun row naming the nodes
    that were awake (running late) or, if none, triggered (woken late). The driver's xrun counter
    (info, when the version has it) is a second, separate report.

    A node still awake when its cycle was reported unfinished writes its finish time when its late
    process call returns; the first later record whose finish time for that node is past its wake-up
    carries it. Rows wait (at most RESOLVE_NS) for that, so the late cycle's row has its real finish.
    """

    def __init__(self) -> None:
        self.cycles: dict[str, list[Any]] = {k: [] for k in CYCLE_COLUMNS}
        self.nodes: dict[str, list[Any]] = {k: [] for k in NODE_COLUMNS}
        self.xruns: dict[str, list[Any]] = {k: [] for k in XRUN_COLUMNS}
        self.status: dict[str, list[Any]] = {k: [] for k in STATUS_COLUMNS}
        self.last_xrun_count: dict[int, int] = {}
        self.last_node_xruns: dict[int, int] = {}
        self.last_status: tuple[int, int] | None = None
        self.last_status_ns = 0
        self.seen: dict[str, Any] = {
            "info_xrun_count": None,
            "block_latency": None,
            "block_xrun_count": None,
            "clock_names": set(),
        }
        self.records = 0
        self.incomplete = 0
        self.repeated = 0  # incomplete records that repeat the previous one's report
        self.resolved = 0  # late finishes found in a later record
        self.completed_late = 0  # `complete` records of a cycle first reported unfinished
        self.last_start: int | None = None
        self.last_report_clock: int | None = None
        # node id -> (node row, cycle row, its awake time, the cycle's start): awaiting the late finish
        self.late: dict[int, tuple[int, int, int, int]] = {}
        self.waiting: dict[int, set[int]] = {}  # cycle row -> node ids of it still unresolved

    def add(self, rec: Record) -> None:
        self.records += 1
        self.seen["info_xrun_count"] = rec.xrun_count is not None
        self.seen["block_latency"] = rec.has_latency
        self.seen["block_xrun_count"] = rec.driver.xrun_count is not None
        self.seen["clock_names"].add(rec.clock_name)
        unfinished = [f for f in rec.followers if f.status != FINISHED]
        complete = not unfinished and rec.driver.status == FINISHED
        start = rec.driver.signal if complete else rec.driver.finish
        rate = rec.rate_denom
        period = rec.duration * 1_000_000_000 // rate if rate else None
        self._resolve(rec, start)
        # Observed on 0.3.65 with a late pw-jack client: each `incomplete` record is followed, within
        # microseconds, by a second one with the same driver clock (the same report) or the same start
        # (the same cycle): kept out of the tables, counted in meta.
        if not complete and (
            rec.clock_nsec == self.last_report_clock
            or (period and self.last_start is not None and 0 <= start - self.last_start < period // 2)
        ):
            self.repeated += 1
            return
        if complete and start == self.last_start:  # the cycle reported unfinished has now finished
            self._completed_late(rec, start)
            return
        self.last_start = start
        same_clock = _monotonic_clock(rec.clock_name)
        # Dummy/ALSA drivers put the nominal wake-up time of the cycle in clock.nsec (node-driver.c:
        # nsec = next_time): the driver's own signal minus it is how late it woke.
        delay = start - rec.clock_nsec if complete and same_clock else None
        ends = [f.finish for f in rec.followers if f.finish >= start]
        reported_at = rec.clock_nsec if same_clock and not complete else start
        cycle_row = len(self.cycles["t_ns"])
        c = self.cycles
        c["t_ns"].append(start)
        c["driver"].append(rec.driver.name)
        c["cycle"].append(rec.count)
        c["quantum_frames"].append(rec.duration)
        c["rate_hz"].append(rate)
        c["period_ns"].append(period)
        c["delay_ns"].append(delay)
        c["end_ns"].append(max(ends) if complete and ends else None)
        c["xruns_total"].append(rec.xrun_count)
        n = self.nodes
        for f in rec.followers:
            # A time from before this cycle's start belongs to an earlier cycle (the activation record
            # keeps the last value written): not this cycle's, so unknown here.
            awake = f.awake if f.awake >= start else None
            if f.status == 2 and awake is not None:  # running late: its finish comes in a later record
                self.late[f.id] = (len(n["t_ns"]), cycle_row, awake, start)
                self.waiting.setdefault(cycle_row, set()).add(f.id)
            n["t_ns"].append(start)
            n["node_id"].append(f.id)
            n["name"].append(f.name)
            n["signal_ns"].append(f.signal if f.signal >= start else None)
            n["awake_ns"].append(awake)
            n["finish_ns"].append(f.finish if f.finish >= start else None)
            n["status"].append(f.status)
            counted = self._node_xruns(f, reported_at)
            n["xrun"].append(f.status != FINISHED or counted)
        if not complete:
            self.incomplete += 1
            self.last_report_clock = rec.clock_nsec
            if any(f.status != 2 for f in unfinished):
                self.waiting.pop(cycle_row, None)  # a node that never ran for this cycle: its end is unknown
            awake_nodes = [f for f in unfinished if f.status == 2]
            blamed = awake_nodes or [f for f in unfinished if f.status == 1]
            parts = [f"{f.name} (node {f.id}) {STATUS_NAMES.get(f.status, f.status)}" for f in unfinished]
            if rec.driver.status != FINISHED:
                parts.append(f"driver {rec.driver.name} {STATUS_NAMES.get(rec.driver.status, rec.driver.status)}")
            self._xrun(
                reported_at,
                ", ".join(f.name for f in blamed) or None,
                f"graph not finished (driver {rec.driver.name}): " + "; ".join(parts),
            )
        if rec.xrun_count is not None:
            before = self.last_xrun_count.get(rec.driver.id)
            if before is not None and rec.xrun_count > before:
                self._xrun(reported_at, None, f"driver {rec.driver.name} xrun count {before} -> {rec.xrun_count}")
            self.last_xrun_count[rec.driver.id] = rec.xrun_count
        key = (rec.duration, rate)
        if key != self.last_status or start - self.last_status_ns >= STATUS_EVERY_NS:
            s = self.status
            s["t_ns"].append(start)
            s["quantum_frames"].append(rec.duration)
            s["rate_hz"].append(rate)
            s["dsp_load_percent"].append(100.0 * rec.cpu_load[0])
            self.last_status = key
            self.last_status_ns = start

    def _node_xruns(self, f: Block, t_ns: int) -> bool:
        """The node's own xrun counter stepped (versions whose blocks carry it): an xrun row naming it."""
        if f.xrun_count is None:
            return False
        before = self.last_node_xruns.get(f.id)
        self.last_node_xruns[f.id] = f.xrun_count
        if before is None or f.xrun_count <= before:
            return False
        self._xrun(t_ns, f.name, f"node {f.name} (node {f.id}) xrun count {before} -> {f.xrun_count}")
        return True

    def _completed_late(self, rec: Record, start: int) -> None:
        """A `complete` record for a cycle already in the table (it was first reported unfinished):
        its nodes' finish times and the cycle's end, where that row has not left yet."""
        self.completed_late += 1
        c, n = self.cycles, self.nodes
        if not c["t_ns"] or c["t_ns"][-1] != start:
            return
        finish = {f.id: f.finish for f in rec.followers if f.finish >= start}
        i = len(n["t_ns"]) - 1
        while i >= 0 and n["t_ns"][i] == start:
            if n["finish_ns"][i] is None and n["node_id"][i] in finish:
                n["finish_ns"][i] = finish[n["node_id"][i]]
                self.late.pop(n["node_id"][i], None)
            i -= 1
        c["end_ns"][-1] = max(finish.values()) if finish else None
        self.waiting.pop(len(c["t_ns"]) - 1, None)

    def _resolve(self, rec: Record, now: int) -> None:
        """Late finishes: a node that was awake in an unfinished cycle, now with a finish after that
        wake-up (if it ran again before this record, that call's end: later by one short call)."""
        for f in rec.followers:
            late = self.late.get(f.id)
            if late is None or f.finish <= late[2]:
                continue
            node_row, cycle_row, _awake, _start = self.late.pop(f.id)
            self.nodes["finish_ns"][node_row] = f.finish
            self.resolved += 1
            waiting = self.waiting.get(cycle_row)
            if waiting is not None:
                waiting.discard(f.id)
                if not waiting:  # every node of that cycle finished: its end is the last finish
                    del self.waiting[cycle_row]
                    first = self.nodes["t_ns"].index(self.cycles["t_ns"][cycle_row])
                    finishes = [
                        v
                        for t, v in zip(self.nodes["t_ns"][first:], self.nodes["finish_ns"][first:], strict=True)
                        if t == self.cycles["t_ns"][cycle_row] and v is not None
                    ]
                    self.cycles["end_ns"][cycle_row] = max(finishes) if finishes else None
        for node_id, (_n, cycle_row, _a, start) in list(self.late.items()):
            if now - start > RESOLVE_NS:  # never finished in sight: its finish stays unknown
                del self.late[node_id]
                self.waiting.pop(cycle_row, None)

    def _xrun(self, t_ns: int, client: str | None, text: str) -> None:
        x = self.xruns
        x["t_ns"].append(t_ns)
        x["delay_us"].append(None)  # the profiler reports no delay for these
        x["client"].append(client)
        x["source"].append("profiler")
        x["text"].append(text)

    def next_daemon(self) -> None:
        """Another daemon follows (after a final take): its record counter, cycles and nodes are new."""
        self.last_xrun_count.clear()
        self.last_node_xruns.clear()
        self.last_status = None
        self.last_status_ns = 0
        self.last_start = None
        self.last_report_clock = None
        self.late.clear()
        self.waiting.clear()

    def take(self, final: bool = False) -> dict[str, dict[str, list[Any]]]:
        """The rows ready since the last take, by table (empty tables left out), with the engine column.
        Rows from the first cycle still awaiting a late finish on are held back, unless `final`."""
        if final:
            self.late.clear()
            self.waiting.clear()
        held_cycles = min((c for _n, c, _a, _s in self.late.values()), default=None)
        held_nodes = min((n for n, _c, _a, _s in self.late.values()), default=None)
        out: dict[str, dict[str, list[Any]]] = {}
        for name, cols, cut in (
            ("engine_cycles", self.cycles, held_cycles),
            ("engine_nodes", self.nodes, held_nodes),
            ("xruns", self.xruns, None),
            ("engine_status", self.status, None),
        ):
            rows = len(cols["t_ns"]) if cut is None else cut
            if rows:
                out[name] = {k: v[:rows] for k, v in cols.items()}
                out[name]["engine"] = [ENGINE] * rows
            for values in cols.values():
                del values[:rows]
        if held_cycles or held_nodes:  # rows moved down: renumber what still waits
            self.late = {
                k: (n - (held_nodes or 0), c - (held_cycles or 0), a, s) for k, (n, c, a, s) in self.late.items()
            }
            self.waiting = {c - (held_cycles or 0): ids for c, ids in self.waiting.items()}
        return out


CYCLE_COLUMNS = (
    "t_ns",
    "driver",
    "cycle",
    "quantum_frames",
    "rate_hz",
    "period_ns",
    "delay_ns",
    "end_ns",
    "xruns_total",
)
NODE_COLUMNS = ("t_ns", "node_id", "name", "signal_ns", "awake_ns", "finish_ns", "status", "xrun")
XRUN_COLUMNS = ("t_ns", "delay_us", "client", "source", "text")
STATUS_COLUMNS = ("t_ns", "quantum_frames", "rate_hz", "dsp_load_percent")


# ---- the protocol client ---------------------------------------------------------------------------
class Connection:
    """A PipeWire native-protocol client (version 3 header) on a connected unix socket."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            self.sock.connect(path)
        except OSError:
            self.sock.close()
            raise
        creds = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        self.daemon_pid: int = struct.unpack("3i", creds)[0]
        self.seq = 0
        self.buffer = bytearray()

    def send(self, obj_id: int, opcode: int, body: bytes) -> None:
        self.seq += 1
        self.sock.sendall(_HEADER.pack(obj_id, (opcode << 24) | len(body), self.seq, 0) + body)

    def receive(self) -> list[tuple[int, int, memoryview]] | None:
        """The whole messages that arrived (None: the daemon closed the connection)."""
        fds_size = socket.CMSG_SPACE(28 * 4)
        data, ancdata, _flags, _addr = self.sock.recvmsg(1 << 20, fds_size)
        for level, kind, payload in ancdata:  # memory the daemon shares with nodes: not ours to keep
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                for fd in struct.unpack(f"{len(payload) // 4}i", payload[: len(payload) // 4 * 4]):
                    with contextlib.suppress(OSError):
                        os.close(fd)
        if not data:
            return None
        self.buffer += data
        messages = []
        offset = 0
        view = memoryview(self.buffer)
        while len(self.buffer) - offset >= _HEADER.size:
            obj_id, op_size, _seq, _n_fds = _HEADER.unpack_from(self.buffer, offset)
            size = op_size & 0xFFFFFF
            end = offset + _HEADER.size + size
            if end > len(self.buffer):
                break
            messages.append((obj_id, op_size >> 24, bytes(view[offset + _HEADER.size : end])))
            offset = end
        view.release()
        del self.buffer[:offset]
        return [(i, o, memoryview(b)) for i, o, b in messages]

    def close(self) -> None:
        self.sock.close()


# ---- the source process ------------------------------------------------------------------------------
class PipeWireSource:
    """Reads the daemon and writes frames to `out` (a file descriptor) until stopped or disconnected."""

    def __init__(
        self,
        path: str,
        out: int,
        clock: Callable[[], int] = time.monotonic_ns,
        recorder_fd: int = -1,
        wait_s: float = 0.0,
    ) -> None:
        self.path = path
        self.wait_s = wait_s  # how long a daemon that is not there yet is waited for (its socket tried)
        self.out = out
        self.recorder_fd = recorder_fd
        self.clock = clock
        self.tables = ProfileTables()
        self.stop_reason: str | None = None
        self.nodes: dict[int, tuple[str, int | None]] = {}  # global id -> (node.name, client global id)
        self.client_pids: dict[int, int | None] = {}  # client global id -> pid
        self.version: str | None = None
        self.synced = False
        self.profiler_global: int | None = None
        self.bound = False
        self.targets_sent: set[int] = set()
        self.clients_rows: dict[str, list[Any]] = {k: [] for k in ("t_ns", "event", "name", "pid", "node_id")}
        graph_columns = ("t_ns", "event", "src_client", "src_port", "dst_client", "dst_port")
        self.graph_rows: dict[str, list[Any]] = {k: [] for k in graph_columns}
        self.ports: dict[int, str] = {}  # port global id -> port.name
        self.links: dict[int, tuple[str, str, str, str]] = {}  # link global id -> its two ends
        self.min_lag_ns: int | None = None
        self.max_lag_ns: int | None = None
        self.batches = 0
        self.daemon_pid: int | None = None
        self.attachments: list[list[int | None]] = []  # [bound_ns, ended_ns or None]: when it recorded

    # output
    def _write(self, data: bytes) -> None:
        frames.write_all(self.out, data)

    def _event(self, kind: str, text: str) -> None:
        row = {"t_ns": self.clock(), "kind": kind, "pid": self.daemon_pid, "tid": None, "text": text}
        self._write(frames.encode_json(frames.EVENT, row))
        if kind == "engine_source_unavailable":  # a target uses PipeWire and it is not recorded: say so
            tell_recorder(self.recorder_fd, note=text)

    def _flush(self, final: bool = False) -> None:
        out = b""
        for name, rows in self.tables.take(final).items():
            out += frames.encode_json(frames.TABLE, {"name": name, "rows": rows, "stream": True})
        for name, table in (("engine_clients", self.clients_rows), ("engine_graph", self.graph_rows)):
            if table["t_ns"]:
                rows = {k: list(v) for k, v in table.items()}
                rows["engine"] = [ENGINE] * len(rows["t_ns"])
                out += frames.encode_json(frames.TABLE, {"name": name, "rows": rows, "stream": True})
                for values in table.values():
                    values.clear()
        if out:
            self._write(out)

    def _send_targets(self) -> None:
        """The processes that own nodes of the graph (and the daemon, for its drivers): recording targets."""
        pids = {pid for _name, client in self.nodes.values() if (pid := self._pid(client)) is not None}
        pids.discard(os.getpid())
        if new := pids - self.targets_sent:
            self.targets_sent |= new
            tell_recorder(self.recorder_fd, pids=sorted(new))

    def meta(self) -> dict[str, Any]:
        seen = self.tables.seen
        return {
            "kind": ENGINE,
            "version": self.version,
            "attachments": self.attachments,
            "socket": self.path,
            "daemon_pid": self.daemon_pid,
            "mechanism": "native-protocol client bound to PipeWire:Interface:Profiler (no node in the graph)",
            "clock": "CLOCK_MONOTONIC (pw_node_activation times)",
            "clock_offset_ns": 0,
            # arrival minus the last finish time of each batch: never negative when the clocks agree
            "clock_check_lag_ns": {"min": self.min_lag_ns, "max": self.max_lag_ns, "batches": self.batches},
            "driver_clock_names": sorted(seen["clock_names"]),
            "profiler_info_has_xrun_count": seen["info_xrun_count"],
            "profiler_blocks_have_latency": seen["block_latency"],
            "profiler_blocks_have_xrun_count": seen["block_xrun_count"],
            "records": self.tables.records,
            "incomplete_records": self.tables.incomplete,
            "repeated_incomplete_records": self.tables.repeated,
            "late_finishes_resolved": self.tables.resolved,
            "late_completions": self.tables.completed_late,
            "xrun_rule": "a node block whose status is not finished (pw-top's ERR); the driver's xrun count; "
            "a node's own xrun count where the blocks carry one",
            "cycle_column": "module-profiler's record counter",
            "dsp_load": "the driver's cpu_load[0]: PipeWire's fast running average of (finish - signal) / period",
        }

    def _send_meta(self) -> None:
        self._write(frames.encode_json(frames.META, {"sources": {"engine": self.meta()}}))

    # protocol
    def _pid(self, client: int | None) -> int | None:
        if client is None:
            return self.daemon_pid  # a node the daemon made itself (a driver from a module)
        return self.client_pids.get(client)

    def _global(self, body: memoryview) -> None:
        value, _ = pod.parse(body)
        gid, _perms, kind, _version, props_pod = value[:5]
        props = dict(zip(props_pod[1::2], props_pod[2::2], strict=False)) if props_pod else {}
        event = "registered" if self.synced else "present"
        if kind == PROFILER_TYPE:
            self.profiler_global = gid
        elif kind == "PipeWire:Interface:Client":
            pid = props.get("application.process.id") or props.get("pipewire.sec.pid")
            self.client_pids[gid] = int(pid) if pid and str(pid).isdigit() else None
        elif kind == "PipeWire:Interface:Port":
            self.ports[gid] = str(props.get("port.name") or f"port {gid}")
        elif kind == "PipeWire:Interface:Link":
            ends = [props.get(f"link.{side}.{what}") for side in ("output", "input") for what in ("node", "port")]
            if all(str(e).isdigit() for e in ends):
                out_node, out_port, in_node, in_port = (int(str(e)) for e in ends)
                self.links[gid] = (
                    self.nodes.get(out_node, (f"node {out_node}", None))[0],
                    self.ports.get(out_port, f"port {out_port}"),
                    self.nodes.get(in_node, (f"node {in_node}", None))[0],
                    self.ports.get(in_port, f"port {in_port}"),
                )
                self._graph_row("connected" if self.synced else "snapshot", self.links[gid])
        elif kind == "PipeWire:Interface:Node":
            name = props.get("node.name") or f"node {gid}"
            client = int(props["client.id"]) if str(props.get("client.id", "")).isdigit() else None
            self.nodes[gid] = (name, client)
            self._client_row(event, name, self._pid(client), gid)
            self._send_targets()

    def _global_remove(self, body: memoryview) -> None:
        (gid,) = pod.parse(body)[0][:1]
        if gid in self.links:
            self._graph_row("disconnected", self.links.pop(gid))
        self.ports.pop(gid, None)
        if gid in self.nodes:
            name, client = self.nodes.pop(gid)
            self._client_row("unregistered", name, self._pid(client), gid)
        self.client_pids.pop(gid, None)

    def _graph_row(self, event: str, link: tuple[str, str, str, str]) -> None:
        r = self.graph_rows
        r["t_ns"].append(self.clock())
        r["event"].append(event)
        for column, value in zip(("src_client", "src_port", "dst_client", "dst_port"), link, strict=True):
            r[column].append(value)

    def _client_row(self, event: str, name: str, pid: int | None, node_id: int) -> None:
        r = self.clients_rows
        r["t_ns"].append(self.clock())
        r["event"].append(event)
        r["name"].append(name)
        r["pid"].append(pid)
        r["node_id"].append(node_id)

    def _profile(self, body: memoryview) -> None:
        arrived = self.clock()
        value, _ = pod.parse(body)
        records = parse_profile(value[0] if value else [])
        last = 0
        for rec in records:
            self.tables.add(rec)
            last = max([last, rec.driver.finish, *(f.finish for f in rec.followers)])
        if records:
            lag = arrived - last
            self.min_lag_ns = lag if self.min_lag_ns is None else min(self.min_lag_ns, lag)
            self.max_lag_ns = lag if self.max_lag_ns is None else max(self.max_lag_ns, lag)
            self.batches += 1

    def _dispatch(self, conn: Connection, obj_id: int, opcode: int, body: memoryview) -> None:
        if obj_id == CORE_ID:
            if opcode == EV_CORE_INFO:
                info, _ = pod.parse(body)
                self.version = str(info[4])
            elif opcode == EV_CORE_PING:
                ping, _ = pod.parse(body)
                conn.send(CORE_ID, CORE_PONG, pod.struct_(pod.int_(ping[0]), pod.int_(ping[1])))
            elif opcode == EV_CORE_DONE:
                # Only the answer to our sync: the daemon also sends done(-1, 0) once the access
                # module has granted this client its permissions (the globals come after that).
                done, _ = pod.parse(body)
                self.synced = self.synced or (done[0] == CORE_ID and done[1] == SYNC_SEQ)
            elif opcode == EV_CORE_ERROR:
                err, _ = pod.parse(body)
                if err[0] in (CORE_ID, PROFILER_ID, REGISTRY_ID):
                    self.stop_reason = f"the daemon refused: {err[3]} (object {err[0]}, {err[2]})"
        elif obj_id == REGISTRY_ID:
            if opcode == EV_GLOBAL:
                self._global(body)
            elif opcode == EV_GLOBAL_REMOVE:
                self._global_remove(body)
        elif obj_id == PROFILER_ID and opcode == EV_PROFILE:
            self._profile(body)

    def run(self) -> int:
        """Record until SIGTERM/SIGINT. Never raises for the daemon's sake. A daemon that goes away is
        waited for (its socket tried every RECONNECT_S): a restarted one is attached again, as a restarted
        jackd is (samplers/engine/jack.py), with events and `attachments` of its own."""
        try:
            conn = Connection(self.path)
        except OSError as err:
            waited = self._wait_for_daemon(self.wait_s)
            if waited is None:
                self._event(
                    "engine_source_unavailable",
                    f"PipeWire: cannot connect to {self.path}: {err.strerror or err}: no engine cycles recorded"
                    if not self.wait_s
                    else f"PipeWire: no daemon answered at {self.path} during the recording: no engine cycles recorded",
                )
                return 0
            conn = waited
        while True:
            ended = self._record(conn)
            if ended is None:
                return 0
            self._flush(final=True)
            if self.attachments and self.attachments[-1][1] is None:
                self.attachments[-1][1] = self.clock()
            self._send_meta()
            self._event("engine_source_ended", f"PipeWire: {ended}")
            if ended != DAEMON_GONE or not self.bound:
                return 0
            next_conn = self._wait_for_daemon()
            if next_conn is None:
                return 0
            self._forget_daemon()
            conn = next_conn

    def _wait_for_daemon(self, wait_s: float = float("inf")) -> Connection | None:
        """A connection to a daemon on our socket (the next one, or one still starting), or None when the
        recording ends first or `wait_s` passed."""
        deadline = time.monotonic() + wait_s
        while self.stop_reason is None and time.monotonic() < deadline:
            time.sleep(RECONNECT_S)
            with contextlib.suppress(OSError):
                return Connection(self.path)
        return None

    def _forget_daemon(self) -> None:
        """What belongs to one daemon (its globals, its profiler, its record counter); what outlives it
        (the tables' totals, the pids already sent, the attachments) is kept."""
        self.nodes.clear()
        self.client_pids.clear()
        self.ports.clear()
        self.links.clear()
        self.version = None
        self.synced = False
        self.profiler_global = None
        self.bound = False
        self.tables.next_daemon()

    def _record(self, conn: Connection) -> str | None:
        """One daemon, from the hello to its end: why it ended (None: it could not be recorded)."""
        self.daemon_pid = conn.daemon_pid
        ended = "the recording ended"
        try:
            conn.send(CORE_ID, CORE_HELLO, pod.struct_(pod.int_(3)))
            props = {"application.name": "catch-load", "application.process.id": str(os.getpid())}
            conn.send(CLIENT_ID, CLIENT_UPDATE_PROPERTIES, pod.struct_(pod.dict_(props)))
            conn.send(CORE_ID, CORE_GET_REGISTRY, pod.struct_(pod.int_(3), pod.int_(REGISTRY_ID)))
            conn.send(CORE_ID, CORE_SYNC, pod.struct_(pod.int_(CORE_ID), pod.int_(SYNC_SEQ)))
            last_flush = self.clock()
            while self.stop_reason is None:
                # A stop is seen within 0.1 s: after a signal the source has 0.3 s for its last rows.
                ready, _, _ = select.select([conn.sock], [], [], 0.1)
                if ready:
                    messages = conn.receive()
                    if messages is None:
                        ended = DAEMON_GONE
                        break
                    for obj_id, opcode, body in messages:
                        self._dispatch(conn, obj_id, opcode, body)
                if self.synced and not self.bound:
                    if self.profiler_global is None:
                        self._event(
                            "engine_source_unavailable",
                            "PipeWire: the daemon has no profiler (module-profiler not loaded): "
                            "no engine cycles recorded",
                        )
                        self._flush()
                        return None  # said by the event: no end to tell
                    bind = pod.struct_(
                        pod.int_(self.profiler_global), pod.string(PROFILER_TYPE), pod.int_(3), pod.int_(PROFILER_ID)
                    )
                    conn.send(REGISTRY_ID, REGISTRY_BIND, bind)
                    self.bound = True
                    self.attachments.append([self.clock(), None])
                    self._send_meta()
                    self._event("engine_source_started", f"PipeWire {self.version}: profiler bound at {self.path}")
                now = self.clock()
                if now - last_flush >= FLUSH_EVERY_NS:
                    self._flush()
                    last_flush = now
            else:
                ended = self.stop_reason
        except (OSError, pod.PodError, IndexError, ValueError, TypeError) as err:
            ended = f"the PipeWire connection failed: {err}"
        finally:
            conn.close()
        return ended


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m samplers.engine.pipewire")
    parser.add_argument("--rows-fd", type=int, default=1)  # frames: the writer's pipe (stdout alone, for a bench)
    parser.add_argument("--recorder-fd", type=int, default=-1)
    parser.add_argument("--parent-pid", type=int, default=None)
    parser.add_argument("--wait-s", type=float, default=0.0)  # inf: as long as the recording runs
    parser.add_argument("socket")
    args = parser.parse_args(argv)
    source = PipeWireSource(args.socket, args.rows_fd, recorder_fd=args.recorder_fd, wait_s=args.wait_s)

    def on_signal(_signum: int, _frame: Any) -> None:
        source.stop_reason = source.stop_reason or "the recording ended"

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the recorder decides when this ends
    die_with_recorder(args.parent_pid)
    try:
        return source.run()
    except BrokenPipeError:  # the writer is gone: nothing left to tell
        return 0


if __name__ == "__main__":
    sys.exit(main())
