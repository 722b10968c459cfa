"""The pipe protocol between the recorder (hot loop) and the writer process (parse and store).

The recorder's tick only reads bytes and hands them over: one `os.write` per tick of a frame that holds
the raw text of every read, unparsed. The writer parses in bulk and appends Parquet chunks. Keeping the
two in separate processes keeps the writer's parsing and compression off the tick (and off the GIL the
tick needs), and a recorder killed with SIGKILL still leaves the writer to flush what it received.

frame := u8 type | u32 payload length | payload
"""

from __future__ import annotations

import json
import os
import queue
import struct
import threading
from collections.abc import Iterator
from typing import Any

FRAME = struct.Struct("<BI")

META = 1  # JSON: patch to the capture metadata
LAYOUT = 2  # JSON: {"id", "tids", "pids", "sched": [index into tids...]}: the thread order of TICK frames
TICK = 3  # binary, see TICK_HEADER
THREAD = 4  # JSON: a row of the threads table
EVENT = 5  # JSON: a row of the events table
SYSTEM = 6  # binary, see SYSTEM_HEADER
TABLE = 7  # JSON: {"name": table, "rows": {column: [values]}}: small tables (lab truth, cycles)
TRAILER = 8  # JSON: the trailer; the writer finishes the file and exits
PROCESSES = 9  # JSON: {"t_ns", "statm": [[pid, "statm text"], ...]}: process memory, at the system rate
TASKSTATS = 10  # binary, see TASKSTATS_HEADER: raw netlink replies of one tick
ENGINE_TARGETS = 11  # JSON {"engine", "pids"}: an engine source's clients; the recorder adopts them (not stored)

# TASKSTATS payload: tick and row count, then u32 tid, int64 t_ns (when the query was sent) and u32 reply
# length (0: the thread was gone) per row, then the replies, one contiguous run of bytes.
TASKSTATS_HEADER = struct.Struct("<II")

# TICK payload: header, then int64 t_ns per thread of the layout, u32 index of each thread without a
# row this tick (its read failed: it exited), u32 length of each live thread's stat text, u32 length
# of each `sched` read (0 when it failed), then the schedstat texts of the live threads, their stat
# texts, the sched texts: each section one contiguous run of bytes.
TICK_HEADER = struct.Struct("<IIqIIII")  # tick, layout id, tick start ns, n_dead, n_sched, len ss, len st
# SYSTEM payload: t_ns, then the lengths of /proc/stat and of /proc/pressure/{cpu,io,memory} texts.
SYSTEM_HEADER = struct.Struct("<qIIII")


def encode_json(kind: int, obj: Any) -> bytes:
    payload = json.dumps(obj, separators=(",", ":")).encode()
    return FRAME.pack(kind, len(payload)) + payload


def encode(kind: int, payload: bytes) -> bytes:
    return FRAME.pack(kind, len(payload)) + payload


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _chunks(fd: int, bufsize: int, drain_in_thread: bool) -> Iterator[bytes]:
    if not drain_in_thread:
        while chunk := os.read(fd, bufsize):
            yield chunk
        return
    # A thread keeps the pipe empty while the consumer parses and compresses a chunk: a full pipe
    # would block the recorder's tick (1 MiB is only ~8 ticks of 300 threads).
    chunks: queue.SimpleQueue[bytes] = queue.SimpleQueue()

    def drain() -> None:
        while chunk := os.read(fd, bufsize):
            chunks.put(chunk)
        chunks.put(b"")

    threading.Thread(target=drain, name="frame-drain", daemon=True).start()
    while chunk := chunks.get():
        yield chunk


def read_frames(fd: int, bufsize: int = 1 << 20, drain_in_thread: bool = False) -> Iterator[tuple[int, bytes]]:
    """Frames from a pipe until EOF. A frame cut short by the recorder's death is dropped."""
    buf = bytearray()
    for chunk in _chunks(fd, bufsize, drain_in_thread):
        buf += chunk
        offset = 0
        while len(buf) - offset >= FRAME.size:
            kind, length = FRAME.unpack_from(buf, offset)
            end = offset + FRAME.size + length
            if end > len(buf):
                break
            yield kind, bytes(buf[offset + FRAME.size : end])
            offset = end
        del buf[:offset]
