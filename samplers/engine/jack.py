"""The JACK source: a passive JACK client in its own process, feeding the capture writer.

    python -m samplers.engine.jack --rows-fd N --recorder-fd M --parent-pid P [--server NAME]
                                   [--log-fd K | --log-file F] [--wait-s S] [--explicit]

Launched by the recorder's engine sources (samplers/engine/source.py: the pipes, the end), as every
engine source is.

Why a process of its own: libjack runs the callbacks in its threads, and a Python callback needs the
GIL. In the recorder it would take the GIL from the 2 ms tick; in the writer it would wait behind
chunk compression and stamp xruns late. Here the GIL is idle nearly all the time.

Passive: the client sets no process callback, so although it is activated (to receive notifications:
xruns, clients, graph order, through libjack's notification thread) jackd does not put it in the graph
and never wakes it in the cycle (bench/jack_client_cost.py measures it).

What it records (tables of capture.format ENGINE_SCHEMAS, sent as TABLE frames every SEND_NS):
xruns (callback, stamped CLOCK_MONOTONIC on arrival; and the server log's XRun lines when it has the
log), buffer size / rate / cpu_load() at 20 Hz, clients with pids as they come and go, ports and
connections at start and at every graph reorder, and per-cycle client timing read from jack2's shared
graph segment (samplers/engine/jack_shm.py) when its layout is recognised. Every client's pid also goes
to the recorder ({"pids": [...]} on --recorder-fd) so the clients become recording targets.

Clock: jack_get_time() is CLOCK_MONOTONIC_RAW in microseconds on Linux (jack2 linux/JackLinuxTime.c);
the offset to CLOCK_MONOTONIC is measured (bracketed calls) every second and stored in meta.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import os
import queue
import re
import select
import signal
import stat
import sys
import threading
import time
from typing import Any

from samplers import frames
from samplers.engine.choose import (
    SERVER_POLL_S,
    UNTIL_THE_END,
    graph_server,
    jack_server_name,
    jack_servers,
    others_running,
    server_reachable,
)
from samplers.engine.source import die_with_recorder, tell_recorder
from samplers.procfs import ProcPaths
from samplers.targets import Discovery, TargetSpec, read_process

ENGINE = "jack"
STATUS_NS = 50_000_000  # cpu_load() and buffer size at 20 Hz
SEND_NS = 250_000_000
OFFSET_NS = 1_000_000_000
GRAPH_SETTLE_NS = 100_000_000  # one snapshot for a burst of graph-order callbacks
# A registering client's segment is complete a little after the notification: look its pid up again.
PID_RETRY_NS = 100_000_000
PID_TRIES = 10
# While waiting with --match: how often the matching processes are looked at for the graph they joined (a
# scan of /proc, done only while some JACK server runs).
MATCH_SCAN_S = 1.0
SERVER_GONE = "the JACK server went away"  # how an end by the server's shutdown callback begins
XRUN_LINE = re.compile(r"JackEngine::XRun: client = (.+?) was not finished(?:, state = (\w+))?")
DRIVER_XRUN_LINE = re.compile(r"(\w+)::\w+ XRun = (\d+(?:\.\d+)?) usec")


def _split_port(name: str) -> tuple[str, str]:
    client, _, port = name.partition(":")
    return client, port


class JackSource:
    def __init__(
        self,
        server: str | None,
        rows_fd: int,
        recorder_fd: int,
        explicit: bool,
        server_user: tuple[int, int] | None = None,
        parent_pid: int | None = None,
        match: str | None = None,
    ) -> None:
        self.server = server
        self.server_user = server_user  # (uid, gid) of another user's server, opened as that user (root)
        self.match = re.compile(match) if match else None  # --match: the server its processes join (choose.py)
        self._match_scan_at = 0.0
        self.parent_pid = parent_pid
        self.rows_fd = rows_fd
        self.recorder_fd = recorder_fd
        self.explicit = explicit
        self.rows: dict[str, list[dict[str, Any]]] = {}
        self.jack: Any = None
        self.pids_sent: set[int] = set()
        self.lock = threading.Lock()
        self.recording_ended = False  # the recorder asked us to end (SIGTERM)
        self.log_given: str | None = None  # how the server's log is followed when it was given (else found)
        self.gone_clients: list[Any] = []  # clients of servers that went away: never closed, never freed
        self.stop_reason: str | None = None
        # [attached_ns, ended_ns or None] per server attached to (a restarted one is another): in meta.
        self.attachments: list[list[int | None]] = []
        self._forget_server()

    def _forget_server(self) -> None:
        """What belongs to one server: set at the start, and again to follow a restarted one."""
        self.events: queue.SimpleQueue[tuple[str, int, tuple[Any, ...]]] = queue.SimpleQueue()
        self.client: Any = None
        self.get_time: Any = None
        self.offset_ns = 0
        self.offsets: list[int] = []
        self.timing: Any = None
        self.assembler: Any = None
        self.names: dict[int, str] = {}  # refnum -> client name
        self.pids: dict[str, int | None] = {}
        self.jackd_pid: int | None = None
        self.driver_refnum = -1
        # The server's name, not "default" for every unnamed one: libjack opens $JACK_DEFAULT_SERVER.
        self.meta: dict[str, Any] = {"kind": ENGINE, "server": jack_server_name(self.server)}
        self.last: tuple[float, tuple[int, int]] = (0.0, (0, 1))  # period us, (buffer size, rate) as last read

    def _adopt_matched_server(self) -> bool:
        """Waiting with --match: take the server whose graph a matching process joined, whatever its name or
        user (found by the semaphore files it maps, choose.graph_server; another user's are readable as root
        only). At most every MATCH_SCAN_S, and only while some server runs."""
        now = time.monotonic()
        if self.match is None or now < self._match_scan_at:
            return False
        self._match_scan_at = now + MATCH_SCAN_S
        servers = jack_servers()
        if not servers:
            return False
        for info in Discovery(TargetSpec(match=self.match), ProcPaths()).scan():
            found = graph_server(info.pid, servers)
            if found is None:
                continue
            self.match = None  # found: from now on that server, as for a server given by name
            mine = found.uid == os.geteuid()
            self.server = None if mine and found.name == jack_server_name(None) else found.name
            self.server_user = None if mine else (found.uid, found.gid)
            self.meta["server"] = found.name
            self.meta["found_by"] = f"pid {info.pid} ({info.comm}) matched --match and is in its graph"
            return True
        return False

    def server_went_away(self) -> bool:
        return (self.stop_reason or "").startswith(SERVER_GONE)

    @staticmethod
    def _gone_reason(args: tuple[Any, ...]) -> str:
        """An end by the server's shutdown callback, with the reason it gave (the queued event's args)."""
        return f"{SERVER_GONE} ({args[0] or 'no reason given'})"

    def next_server(self) -> None:
        """After the server went away: forget it (its client, clock offsets, clients, graph and cycle
        reader) and keep what outlives it (the pipes, the pids already sent, the log follower), to attach
        to the next server of that name: a restarted jackd. The dead server's client is kept, not closed:
        libjack cleans up after a server that closed (it says so), and a close could wait on it."""
        if self.client is not None:
            self.gone_clients.append(self.client)
        self._forget_server()
        self.stop_reason = "recording ended" if self.recording_ended else None

    # output ------------------------------------------------------------------------------------
    def _row(self, table: str, **row: Any) -> None:
        with self.lock:
            self.rows.setdefault(table, []).append({"engine": ENGINE, **row})

    def _event(self, kind: str, text: str, pid: int | None = None) -> None:
        frame = frames.encode_json(
            frames.EVENT, {"t_ns": time.monotonic_ns(), "kind": kind, "pid": pid, "tid": None, "text": text}
        )
        frames.write_all(self.rows_fd, frame)

    def _send(self) -> None:
        """Hand the rows to the writer. If the writer is gone (the recording was killed), stop."""
        with self.lock:
            rows, self.rows = self.rows, {}
        out = []
        for table, items in rows.items():
            columns = sorted({k for r in items for k in r})
            out.append(
                frames.encode_json(
                    frames.TABLE, {"name": table, "rows": {c: [r.get(c) for r in items] for c in columns}}
                )
            )
        if out:
            try:
                frames.write_all(self.rows_fd, b"".join(out))
            except BrokenPipeError:
                self.stop_reason = "the capture writer is gone"
                raise

    def _uid(self) -> int:
        """The uid libjack names the server's socket by: its user's."""
        return self.server_user[0] if self.server_user else os.geteuid()

    @contextlib.contextmanager
    def _as_server_user(self) -> Any:
        """Another user's server: libjack opened and activated as that user (effective uid and gid), root again
        after. libjack names the server's socket by the effective uid here (jack2 1.9.21: jack_<server>_<uid>_0;
        some versions take the real one: both are set), and binds this client's notification socket, which the
        server must be able to connect to: one made as root is not writable by that user. The rest of the
        source stays root, so it reads what it read before (/proc, this program's own files). A change of the
        effective uid clears the parent-death signal (prctl(2)): set again after."""
        if self.server_user is None:
            yield
            return
        uid, gid = self.server_user
        os.setresgid(gid, gid, 0)
        os.setresuid(uid, uid, 0)
        try:
            yield
        finally:
            os.setresuid(0, 0, 0)
            os.setresgid(0, 0, 0)
            die_with_recorder(self.parent_pid)

    def _send_meta(self) -> None:
        frames.write_all(self.rows_fd, frames.encode_json(frames.META, {"sources": {"engine": self.meta}}))

    def _pid(self, pid: int | None) -> None:
        if pid and pid not in self.pids_sent:
            self.pids_sent.add(pid)
            tell_recorder(self.recorder_fd, pids=[pid])

    # opening -----------------------------------------------------------------------------------
    def open(self, wait_s: float) -> str | None:
        """Connect; None when connected, else one sentence saying what could not be recorded."""
        try:
            import jack
        except OSError as err:  # JACK-Client raises OSError when libjack is missing
            return f"no JACK data recorded: {err} (install libjack-jackd2-0)"
        except ImportError:
            return "no JACK data recorded: the JACK-Client Python package is not installed"
        self.jack = jack
        # libjack's own lines would clutter the terminal, and kept they would grow while a stale socket is
        # retried: dropped (what went wrong is said by this source's own event).
        jack.set_error_function(lambda _m: None)
        jack.set_info_function(lambda _m: None)
        deadline = time.monotonic() + wait_s
        server = jack_server_name(self.server)
        while True:
            # Waiting for a server that is not there yet: a stat of its socket, not a libjack attempt.
            if wait_s == UNTIL_THE_END and not server_reachable(self.server, uid=self._uid()):
                if self._adopt_matched_server():
                    server = jack_server_name(self.server)
                    continue
                if self.stop_reason is not None:
                    running = others_running(server, self._uid())
                    return f"no JACK data recorded: no JACK server {server!r} started during the recording{running}"
                time.sleep(SERVER_POLL_S)
                continue
            try:
                with self._as_server_user():
                    self.client = jack.Client(
                        f"forensics-{os.getpid()}", no_start_server=True, servername=self.server or None
                    )
                break
            except jack.JackOpenError:
                if time.monotonic() >= deadline or self.stop_reason is not None:
                    running = others_running(server, self._uid())
                    return f"no JACK data recorded: no JACK server {server!r} is running{running}"
                time.sleep(SERVER_POLL_S)
        self.meta["version"] = _libjack_version(jack)
        self._open_clock()
        c = self.client
        c.set_xrun_callback(self._on_xrun)
        c.set_shutdown_callback(self._on_shutdown)
        c.set_client_registration_callback(
            lambda name, reg: self.events.put(("client", time.monotonic_ns(), (name, reg)))
        )
        c.set_graph_order_callback(lambda: self.events.put(("graph", time.monotonic_ns(), ())))
        c.set_port_connect_callback(
            lambda a, b, connect: self.events.put(("connect", time.monotonic_ns(), (a.name, b.name, connect)))
        )
        # Activated (libjack delivers notifications only to active clients, JackClient::ClientNotify)
        # but without a process, thread, sync or timebase callback it is not real-time, and jack2 adds
        # only real-time clients to the graph (JackEngine::ClientActivate): never woken in the cycle.
        with self._as_server_user():
            c.activate()
        self.meta.update(
            {
                "client_name": c.name,
                "activated": True,
                "in_graph": False,
                "process_callback": False,
                "dsp_load": "jack_cpu_load(): JACK's smoothed figure (rolling average blended 50/50), not per cycle",
            }
        )
        return None

    def _open_clock(self) -> None:
        import cffi

        ffi = cffi.FFI()
        ffi.cdef("uint64_t jack_get_time(void);")
        lib = ffi.dlopen(ctypes.util.find_library("jack") or "libjack.so.0")
        self.get_time = lib.jack_get_time
        self._measure_offset()
        raw = time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW) // 1000
        # Which clock libjack reads: the one its microseconds agree with.
        self.meta["jack_clock"] = "CLOCK_MONOTONIC_RAW" if abs(raw - self.get_time()) < 1000 else "unknown"

    def _measure_offset(self) -> None:
        """CLOCK_MONOTONIC ns minus jack_get_time() us * 1000, from the tightest of five bracketed reads."""
        best: tuple[int, int] | None = None
        for _ in range(5):
            a = time.monotonic_ns()
            j = self.get_time()
            b = time.monotonic_ns()
            if best is None or b - a < best[0]:
                best = (b - a, (a + b) // 2 - j * 1000)
        assert best is not None
        self.offset_ns = best[1]
        self.offsets.append(best[1])
        self.meta["clock_offset_ns"] = best[1]
        self.meta["clock_offset_uncertainty_ns"] = best[0] // 2

    def to_ns(self, jack_us: int) -> int:
        return jack_us * 1000 + self.offset_ns

    def _open_timing(self) -> None:
        from samplers.engine.cycles import CycleAssembler
        from samplers.engine.jack_shm import GraphTiming, JackShmUnavailable, server_pid

        try:
            timing = GraphTiming(int(self.get_time()))
            timing.check_advancing()
        except JackShmUnavailable as err:
            self.meta["cycles"] = f"not recorded: {err}"
            return
        self.jackd_pid = server_pid(timing.inode)
        driver = timing.refnum_of_port(self._driver_port() or "system:playback_1")
        if driver is None:
            self.meta["cycles"] = "not recorded: the driver's refnum was not found in the graph segment"
            return
        self.timing = timing
        self.driver_refnum = driver
        self.names[driver] = (self._driver_port() or "system:").split(":")[0]
        self.assembler = CycleAssembler(driver, self.to_ns)
        self.meta["cycles"] = (
            "jack2 shared graph segment: per-client signaled/awake/finished of every cycle the poller saw "
            "(JackClientTiming; read only, wakes nothing)"
        )
        self.meta["graph_segment"] = {"path": timing.path, "timing_offset": timing.offset, "port_max": timing.port_max}

    def _driver_port(self) -> str | None:
        ports = self.client.get_ports(is_physical=True)
        return ports[0].name if ports else None

    # callbacks (libjack's notification thread: only stamp and queue) ---------------------------
    def _on_xrun(self, delayed_usecs: float) -> None:
        # JACK-Client passes jack_get_xrun_delayed_usecs(): the delay the DRIVER last measured
        # (JackEngineControl::fXrunDelayedUsecs, set only by driver xruns); an xrun of a client that
        # did not finish repeats the previous value. Stored as reported.
        self._row("xruns", t_ns=time.monotonic_ns(), delay_us=float(delayed_usecs), client=None, source="callback")

    def _on_shutdown(self, status: Any, reason: str) -> None:
        self.events.put(("shutdown", time.monotonic_ns(), (str(reason),)))

    # the loop ----------------------------------------------------------------------------------
    def _status(self, t_ns: int, last: tuple[int, int] | None) -> tuple[int, int]:
        c = self.client
        now = (c.blocksize, c.samplerate)
        self._row(
            "engine_status", t_ns=t_ns, quantum_frames=now[0], rate_hz=now[1], dsp_load_percent=float(c.cpu_load())
        )
        if last is not None and now != last:
            self._event("engine_changed", f"buffer size {last[0]} -> {now[0]}, rate {last[1]} -> {now[1]} Hz")
        return now

    def _clients(self, t_ns: int, event: str, names: list[str]) -> None:
        self._controls()
        for name in names:
            pid = self.pids.get(name)
            self._row("engine_clients", t_ns=t_ns, event=event, name=name, pid=pid)
            self._pid(pid)

    def _controls(self) -> None:
        """Refnums and pids of the clients, from the server's client segments (root) and the ports."""
        from samplers.engine.jack_shm import JackShmUnavailable, client_controls

        if self.jackd_pid is not None:
            try:
                for control in client_controls(self.jackd_pid):
                    self.pids[control.name] = control.pid
                    self.names[control.refnum] = control.name
            except JackShmUnavailable as err:
                self.meta["client_pids"] = f"unknown: {err}"
        if self.timing is not None:
            for port in self.client.get_ports():
                client = _split_port(port.name)[0]
                if client not in self.names.values():
                    ref = self.timing.refnum_of_port(port.name)
                    if ref is not None:
                        self.names[ref] = client

    def _graph(self, t_ns: int) -> list[str]:
        """A snapshot of every port and connection; returns the clients that own ports."""
        owners = []
        for port in self.client.get_ports():
            client, short = _split_port(port.name)
            owners.append(client)
            if port.is_output:
                targets = self.client.get_all_connections(port)
                for dst in targets:
                    d_client, d_port = _split_port(dst.name)
                    self._row(
                        "engine_graph",
                        t_ns=t_ns,
                        event="snapshot",
                        src_client=client,
                        src_port=short,
                        dst_client=d_client,
                        dst_port=d_port,
                    )
                if not targets:
                    self._row("engine_graph", t_ns=t_ns, event="snapshot", src_client=client, src_port=short)
            elif not self.client.get_all_connections(port):
                self._row("engine_graph", t_ns=t_ns, event="snapshot", dst_client=client, dst_port=short)
        return list(dict.fromkeys(owners))

    def _follow_server_log(self) -> str:
        """A server started apart (`jackd ... > jackd.log 2>&1`): its output is a file, read through
        /proc/<jackd>/fd (the file jackd writes, whatever its name here) from its end, for as long as this
        server is followed. Anything else (a terminal, a pipe to a journal or to qjackctl) cannot be read
        beside it: said, with the option that can."""
        pid = self.jackd_pid
        if pid is None:
            return "not followed: jackd's pid is unknown (give --jack-log)"
        found = server_log_fd(pid)
        if found is None:
            return "not followed: jackd's output is not a file (a terminal or a pipe; give --jack-log)"
        fd_path, target = found
        threading.Thread(
            target=follow_log, args=(self, None, fd_path, False, lambda: self.jackd_pid == pid), daemon=True
        ).start()
        return f"followed: jackd's output, {target} (found as {fd_path})"

    @staticmethod
    def _poller_priority() -> str:
        """SCHED_FIFO 1 for this thread only (libjack's threads exist already and keep theirs): a
        SCHED_OTHER poller starves exactly when a client hogs a CPU, and misses the late cycles."""
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        except OSError:
            return "OTHER (SCHED_FIFO not permitted)"
        return "FIFO 1"

    def run(self) -> None:
        t0 = time.monotonic_ns()
        self.meta["poller_policy"] = self._poller_priority()
        self._open_timing()
        present = self._graph(t0)
        self._controls()
        self._pid(self.jackd_pid)
        self._clients(t0, "present", list(dict.fromkeys([*present, *self.pids])))
        self.meta["jackd_pid"] = self.jackd_pid
        self.meta["server_log"] = self.log_given or self._follow_server_log()
        self.attachments.append([time.monotonic_ns(), None])
        self.meta["attachments"] = self.attachments
        self._send_meta()
        self._event("engine_source_started", f"JACK server {self.meta['server']!r} ({self.meta['version']})")
        last_status = self._status(t0, None)
        period_us = 1e6 * last_status[0] / last_status[1]
        self.last = (period_us, last_status)
        poll_s = min(0.002, max(0.0005, period_us / 4e6))
        next_status = t0 + STATUS_NS
        next_send = t0 + SEND_NS
        next_offset = t0 + OFFSET_NS
        graph_due: int | None = None
        controls_due: int | None = None
        pending: dict[str, tuple[int, int]] = {}  # registered clients whose pid is being looked up
        while self.stop_reason is None:
            now = time.monotonic_ns()
            if self.assembler is not None:
                polled_us = int(self.get_time())
                self.assembler.observe(
                    self.timing.read(self.driver_refnum), self._client_refnums(), polled_us, self.last[0]
                )
            while True:
                try:
                    kind, t_ns, args = self.events.get_nowait()
                except queue.Empty:
                    break
                if kind == "shutdown":
                    self.stop_reason = self._gone_reason(args)
                    break
                if kind == "client":
                    name, registered = args
                    if registered:  # stored once its pid is known (or after PID_TRIES lookups)
                        pending[name] = (t_ns, 0)
                        controls_due = now
                    else:
                        if name in pending:  # gone before its pid was found: it still came
                            self._row("engine_clients", t_ns=pending.pop(name)[0], event="registered", name=name)
                        self._row("engine_clients", t_ns=t_ns, event="unregistered", name=name, pid=self.pids.get(name))
                elif kind == "graph":
                    graph_due = graph_due or t_ns + GRAPH_SETTLE_NS
                elif kind == "connect":
                    a, b, connected = args
                    (sc, sp), (dc, dp) = _split_port(a), _split_port(b)
                    event = "connected" if connected else "disconnected"
                    self._row(
                        "engine_graph", t_ns=t_ns, event=event, src_client=sc, src_port=sp, dst_client=dc, dst_port=dp
                    )
            if self.stop_reason is not None:
                break
            if graph_due is not None and now >= graph_due:
                self._graph(now)
                graph_due = None
            if controls_due is not None and now >= controls_due:
                self._controls()
                controls_due = None
                for name, (t_reg, tries) in list(pending.items()):
                    if name in self.pids or tries + 1 >= PID_TRIES or self.jackd_pid is None:
                        del pending[name]
                        pid = self.pids.get(name)
                        self._row("engine_clients", t_ns=t_reg, event="registered", name=name, pid=pid)
                        self._pid(pid)
                    else:
                        pending[name] = (t_reg, tries + 1)
                        controls_due = now + PID_RETRY_NS
            if now >= next_status:
                last_status = self._status(now, last_status)
                period_us = 1e6 * last_status[0] / last_status[1]
                self.last = (period_us, last_status)
                next_status += STATUS_NS
            if now >= next_offset:
                self._measure_offset()
                next_offset = now + OFFSET_NS
            if now >= next_send:
                self._take_cycles(period_us, last_status, flush=False)
                self._send()
                next_send = now + SEND_NS
            time.sleep(poll_s)
        self._server_gone_by_the_end()
        self._finish(period_us, last_status)

    def _server_gone_by_the_end(self) -> None:
        """Asked to end: a server death already queued is still what happened, and so is one libjack had not
        told us of yet (its shutdown callback comes from its own thread once it reads the closed socket: on a
        loaded machine, after the end was asked for; seen in the suite at load 10)."""
        if self.server_went_away():
            return
        with contextlib.suppress(queue.Empty):
            while True:
                kind, _, args = self.events.get_nowait()
                if kind == "shutdown":
                    self.stop_reason = self._gone_reason(args)
                    return
        if self.jackd_pid is not None and read_process(ProcPaths(), self.jackd_pid) is None:  # gone or a zombie
            self.stop_reason = f"{SERVER_GONE} (jackd, pid {self.jackd_pid}, had exited by the recording's end)"

    def _client_refnums(self) -> list[int]:
        return [r for r in self.names if r != self.driver_refnum]

    def _take_cycles(self, period_us: float, status: tuple[int, int], flush: bool) -> None:
        if self.assembler is None:
            return
        cycles, nodes = self.assembler.take(
            int(self.get_time()) if not flush else 1 << 62, period_us, self.names, flush
        )
        driver = self.names.get(self.driver_refnum, "system")
        period_ns = round(1e9 * status[0] / status[1])
        for row in cycles:
            self._row(
                "engine_cycles",
                **row,
                driver=driver,
                quantum_frames=status[0],
                rate_hz=status[1],
                period_ns=period_ns,
            )
        for row in nodes:
            self._row("engine_nodes", **row)

    def _finish(self, period_us: float, status: tuple[int, int]) -> None:
        with contextlib.suppress(Exception):  # after a server death libjack may refuse: the rows still go
            self._take_cycles(period_us, status, flush=True)
        if self.assembler is not None:
            self.meta["cycle_polls"] = self.assembler.polls
            self.meta["cycle_values_unplaced"] = self.assembler.unplaced
            self.meta["cycle_poll_holes"] = self.assembler.holes  # polls a period or more after the one before
        self.meta["clock_offset_drift_ns"] = max(self.offsets) - min(self.offsets) if self.offsets else None
        if self.attachments and self.attachments[-1][1] is None:
            self.attachments[-1][1] = time.monotonic_ns()
        self._send()
        self._send_meta()
        self._event("engine_source_ended", self.stop_reason or "stopped")


def _libjack_version(jack: Any) -> str:
    with contextlib.suppress(Exception):
        return f"jack2 {jack.version_string()}"
    return "unknown"


def server_log_fd(jackd_pid: int, proc: str = "/proc") -> tuple[str, str] | None:
    """(/proc/<jackd>/fd/N, what it names) for jackd's stderr, else its stdout, when it is a regular file."""
    for fd in (2, 1):
        fd_path = f"{proc}/{jackd_pid}/fd/{fd}"
        try:
            if stat.S_ISREG(os.stat(fd_path).st_mode):
                return fd_path, os.readlink(fd_path)
        except OSError:  # gone, or not ours to read: nothing to follow
            continue
    return None


def follow_log(source: JackSource, fd: int | None, path: str | None, echo: bool, following: Any = None) -> None:
    """Read the server's output (a pipe from jackd, or a log file followed from its end) and keep its
    XRun lines. Times are when the line was read: within 50 ms for a file, at once for a pipe. A file is
    followed until the recording ends, or while `following()` holds (a log found for one server)."""
    # Started by the poller (SCHED_FIFO 1) it would inherit its policy: reading a log is no real-time work.
    with contextlib.suppress(OSError):
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))

    def lines() -> Any:
        if fd is not None:
            with os.fdopen(fd, "rb", buffering=0) as fh:
                buf = b""
                while chunk := fh.read(65536):
                    if echo:
                        with contextlib.suppress(OSError):
                            os.write(2, chunk)
                    buf += chunk
                    *done, buf = buf.split(b"\n")
                    yield from done
            return
        assert path is not None
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            buf = b""
            # Not stop_reason: a server that went away sets it, and a restarted one is followed.
            while not source.recording_ended and (following is None or following()):
                chunk = fh.read()
                if not chunk:
                    time.sleep(0.05)
                    continue
                buf += chunk
                *done, buf = buf.split(b"\n")
                yield from done

    for raw in lines():
        t_ns = time.monotonic_ns()
        line = raw.decode(errors="replace").strip()
        if m := XRUN_LINE.search(line):
            source._row("xruns", t_ns=t_ns, delay_us=None, client=m.group(1), source="server-log", text=line)
        elif m := DRIVER_XRUN_LINE.search(line):
            source._row("xruns", t_ns=t_ns, delay_us=float(m.group(2)), client=None, source="server-log", text=line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m samplers.engine.jack")
    parser.add_argument("--server", default=None)
    parser.add_argument("--rows-fd", type=int, required=True)
    parser.add_argument("--recorder-fd", type=int, default=-1)
    parser.add_argument("--parent-pid", type=int, default=None)
    parser.add_argument("--log-fd", type=int, default=None)
    parser.add_argument("--log-file", default=None)
    parser.add_argument("--wait-s", type=float, default=0.0)
    parser.add_argument("--explicit", action="store_true")
    parser.add_argument("--as-user", default=None, metavar="UID:GID", help="open another user's server (root)")
    parser.add_argument("--match", default=None, metavar="REGEX", help="waiting: the server a match joins")
    args = parser.parse_args(argv)
    user = None
    if args.as_user:
        uid, gid = args.as_user.split(":")
        user = (int(uid), int(gid))
    source = JackSource(args.server, args.rows_fd, args.recorder_fd, args.explicit, user, args.parent_pid, args.match)
    if args.log_fd is not None:
        source.log_given = "followed: jackd's output (catch-load started it)"
    elif args.log_file:
        source.log_given = f"followed: {args.log_file} (--jack-log)"

    def stop(_signum: int, _frame: Any) -> None:
        source.recording_ended = True
        source.stop_reason = source.stop_reason or "recording ended"

    signal.signal(signal.SIGTERM, stop)
    die_with_recorder(args.parent_pid)  # no passive client outlives the recording, even a killed one
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the group: the recorder decides the end
    if args.log_fd is not None or args.log_file:
        # From the start: jackd's first lines must not block on a full pipe while we wait for it.
        threading.Thread(
            target=follow_log, args=(source, args.log_fd, args.log_file, args.log_fd is not None), daemon=True
        ).start()
    problem = source.open(args.wait_s)
    if problem is not None:
        if args.explicit:  # asked for with --jack: the recorder says it (samplers.engine.source, notes)
            tell_recorder(args.recorder_fd, note=problem)
        frames.write_all(
            args.rows_fd,
            frames.encode_json(
                frames.EVENT,
                {
                    "t_ns": time.monotonic_ns(),
                    "kind": "engine_source_unavailable",
                    "pid": None,
                    "tid": None,
                    "text": problem,
                },
            )
            + frames.encode_json(frames.META, {"sources": {"engine": {"kind": ENGINE, "unavailable": problem}}}),
        )
        if args.log_fd is not None:  # keep passing jackd's output through until it ends
            with contextlib.suppress(Exception):
                while source.stop_reason is None:
                    select.select([], [], [], 0.2)
        return 0
    while True:
        try:
            source.run()
        except Exception as err:  # a failing libjack call must end the source, never lose what it recorded
            if not isinstance(err, BrokenPipeError):  # a gone writer: the recording was killed, nothing to say
                source.stop_reason = f"the JACK source failed: {type(err).__name__}: {err}"
                with contextlib.suppress(Exception):
                    source._finish(*source.last)
                tell_recorder(args.recorder_fd, note=source.stop_reason)
        if source.recording_ended or not source.server_went_away():
            break
        # A restarted server of the same name is followed: waited for as one started after the recorder
        # (its socket polled every SERVER_POLL_S), with a new engine_source_started event when attached;
        # nothing more is said if the recording ends first.
        source.next_server()
        if source.open(UNTIL_THE_END) is not None:
            break
    if source.client is not None and not source.server_went_away():
        # Close the client while the server is there (it removes the client's semaphore file); a server
        # in trouble can leave jack_client_close hanging: give it a moment, then leave without it.
        closer = threading.Thread(target=source.client.close, daemon=True)
        closer.start()
        closer.join(timeout=2.0)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
