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
import time
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

FRAME = struct.Struct("<BI")

META = 1  # JSON: patch to the capture metadata
# LAYOUT, JSON: {"id", "tids", "pids", "sched": [index into tids...], "group", "known": {pid: threads}}: the
# thread order of TICK frames. Read tiers publish one layout per phase, a group; "known" counts every thread
# of the group per process (a phase reads only some of them).
LAYOUT = 2
TICK = 3  # binary, see TICK_HEADER
THREAD = 4  # JSON: a row of the threads table
EVENT = 5  # JSON: a row of the events table
SYSTEM = 6  # binary, see SYSTEM_HEADER
TABLE = 7  # JSON: {"name": table, "rows": {column: [values]}}: small tables (lab truth, cycles)
TRAILER = 8  # JSON: the trailer; the writer finishes the file and exits
PROCESSES = 9  # JSON: {"t_ns", "statm": [[pid, "statm text"], ...]}: process memory, at the system rate
TASKSTATS = 10  # binary, see TASKSTATS_HEADER: raw netlink replies of one tick
# 11 is not used: it carried an engine source's clients through the recorder; they now go on a pipe of
# their own (samplers/engine/source.py). Not reused, so that an old stream cannot be misread.
EBPF_TICK = 12  # binary, see EBPF_TICK_HEADER: the eBPF sampler's slots as read at one tick
STAT_SLOW = 13  # binary, see EBPF_TICK_HEADER: stat texts of some threads (the eBPF sampler's slow reads)
TIERS = 14  # JSON {"rows": [{t_ns, tid, pid, tier, interval_ns, why}]}: read-tier changes (samplers/tiers.py)
EBPF_DELTA = 15  # binary, see EBPF_DELTA_HEADER: the eBPF sampler's slots that changed since the frame before
EBPF_TICKS = 16  # binary, see EBPF_TICKS_HEADER: the kernel's ticks drained at one wake-up, as slot frames

# EBPF_TICK payload: header (tick, layout id, read ns, byte count), then the slots [0, used) of the eBPF
# sampler's array as copied (samplers/ebpf/sampler.py SLOT). STAT_SLOW payload: header (tick, layout id,
# read ns, row count n), then u32 layout index and u32 text length per row, then the texts back to back.
EBPF_TICK_HEADER = struct.Struct("<IIqI")
# EBPF_DELTA payload: header (tick, layout id, read ns, slot count `used`, base tick, n), then the u32 index of
# each of the n slots whose bytes differ from the base tick's, then those n slots. The base is the slot frame
# (EBPF_TICK or EBPF_DELTA) handed over just before, of the same `used`: the writer rebuilds every slot from
# it (samplers/ebpf/sampler_rows.py). The first three fields are EBPF_TICK_HEADER's.
EBPF_DELTA_HEADER = struct.Struct("<IIqIII")
# EBPF_TICKS payload: header (n ticks, k slot records, base tick, base slot count, -1: none), then the n ticks'
# read ns (i64), then five u32 per tick, column by column: tick, layout id, slot count `used`, its records, whole
# (1) or not; then the k u32 slot indices and the k slots, tick after tick. A whole tick's records are its
# slots [0, used) (an EBPF_TICK's); another's the slots that differ from the tick before in the frame, the
# first's from the base (an EBPF_DELTA's, whose base tick is the one before). Under the kernel's tick: one frame
# per wake-up of the recorder, not one per tick (samplers/ebpf/sampler.py KernelTicks).
EBPF_TICKS_HEADER = struct.Struct("<IIIi")

# TASKSTATS payload: tick and row count, then u32 tid, int64 t_ns (when the query was sent) and u32 reply
# length (0: the thread was gone) per row, then the replies, one contiguous run of bytes.
TASKSTATS_HEADER = struct.Struct("<II")

# TICK payload: header, then int64 t_ns per thread of the layout, u32 index of each thread without a
# row this tick (its read failed: it exited), u32 length of each live thread's stat text (0: not re-read,
# its schedstat did not move, so its last text holds: samplers/tiers.py), u32 length
# of each `sched` read (0 when it failed), then the schedstat texts of the live threads, their stat
# texts, the sched texts: each section one contiguous run of bytes.
TICK_HEADER = struct.Struct("<IIqIIII")  # tick, layout id, tick start ns, n_dead, n_sched, len ss, len st
# SYSTEM payload: t_ns, then the lengths of /proc/stat and of /proc/pressure/{cpu,io,memory} texts.
SYSTEM_HEADER = struct.Struct("<qIIII")


def encode_json(kind: int, obj: Any) -> bytes:
    payload = json.dumps(obj, separators=(",", ":")).encode()
    return FRAME.pack(kind, len(payload)) + payload


def int_list_text(values: Iterable[int]) -> str:
    """Ints as json.dumps writes them in a list, without the brackets: a piece for encode_layout."""
    return ",".join(map(str, values))


def encode_layout(layout_id: int, group: int, lists: Mapping[str, Sequence[str]], known: dict[int, int]) -> bytes:
    """A LAYOUT frame, {"id", "group", each of `lists`, "known"}, its int lists given as int_list_text
    pieces to put one after the other: what the phases of a tier layout share is made text once, not once
    per phase (the JSON was most of a layout's cost). The same bytes as encode_json(LAYOUT, spec)."""
    body = ",".join(f'"{name}":[{",".join(piece for piece in pieces if piece)}]' for name, pieces in lists.items())
    known_text = json.dumps(known, separators=(",", ":"))
    payload = f'{{"id":{layout_id},"group":{group},{body},"known":{known_text}}}'.encode()
    return FRAME.pack(LAYOUT, len(payload)) + payload


def encode(kind: int, payload: bytes) -> bytes:
    return FRAME.pack(kind, len(payload)) + payload


def encode_tick(
    tick: int,
    layout_id: int,
    t_ns: int,
    times: Sequence[int],
    missing: Sequence[int],
    schedstat: Sequence[bytes],
    stat: Sequence[bytes],
    sched: Sequence[bytes],
) -> bytes:
    """A whole TICK frame, frame header included, in one join (the recorder's hot path: no copy of the
    payload to prepend the header). `times`: per thread of the layout; `missing`: indices of threads
    without a row; `schedstat`, `stat`: the live threads' texts; `sched`: one per `sched` thread (b"" failed).
    """
    ss_blob = b"".join(schedstat)
    st_blob = b"".join(stat)
    times_b = array("q", times).tobytes()
    missing_b = array("I", missing).tobytes()
    stat_lengths = array("I", map(len, stat)).tobytes()
    sched_lengths = array("I", map(len, sched)).tobytes()
    length = (
        _TICK_HEADER_SIZE
        + len(times_b)
        + len(missing_b)
        + len(stat_lengths)
        + len(sched_lengths)
        + len(ss_blob)
        + len(st_blob)
        + sum(map(len, sched))
    )
    header = TICK_HEADER.pack(tick, layout_id, t_ns, len(missing), len(sched), len(ss_blob), len(st_blob))
    return b"".join(
        (FRAME.pack(TICK, length), header, times_b, missing_b, stat_lengths, sched_lengths, ss_blob, st_blob, *sched)
    )


_TICK_HEADER_SIZE = TICK_HEADER.size


@dataclass
class Tick:
    """A TICK payload taken apart (decode_tick)."""

    tick: int
    layout_id: int
    t_ns: int  # when the tick started
    times: np.ndarray  # int64 ns per thread of the layout (when its counters were read)
    missing: np.ndarray  # u32 indices of the threads without a row this tick
    stat_lengths: np.ndarray  # u32 length of each live thread's stat text
    schedstat: bytes  # the live threads' schedstat texts, back to back
    stat: bytes  # the live threads' stat texts, back to back (split by stat_lengths: a comm may hold "\n")
    sched_lengths: np.ndarray  # u32 per `sched` thread of the layout: its text's length, 0 when not read
    sched_blob: bytes  # those texts back to back (the writer parses them in place: no bytes object each)

    @property
    def sched(self) -> list[bytes]:
        """One text per `sched` thread of the layout; b"" where it was not read."""
        ends = self.sched_lengths.cumsum().tolist()
        return [self.sched_blob[end - n : end] for end, n in zip(ends, self.sched_lengths.tolist(), strict=True)]


def decode_tick(payload: bytes, threads: int) -> Tick:
    """The TICK payload of a layout of `threads` threads (the writer's side of encode_tick)."""
    tick, layout_id, t_ns, n_missing, n_sched, len_ss, len_st = TICK_HEADER.unpack_from(payload)
    offset = TICK_HEADER.size
    times = array_at(payload, "<i8", threads, offset)
    offset += 8 * threads
    missing = array_at(payload, "<u4", n_missing, offset)
    offset += 4 * n_missing
    stat_lengths = array_at(payload, "<u4", threads - n_missing, offset)
    offset += 4 * (threads - n_missing)
    sched_lengths = array_at(payload, "<u4", n_sched, offset)
    offset += 4 * n_sched
    schedstat = payload[offset : offset + len_ss]
    offset += len_ss
    stat = payload[offset : offset + len_st]
    offset += len_st
    # The sched texts run to the payload's end (encode_tick): one slice for all, not one per text.
    return Tick(tick, layout_id, t_ns, times, missing, stat_lengths, schedstat, stat, sched_lengths, payload[offset:])


def encode_taskstats(tick: int, tids: Sequence[int], times: Sequence[int], replies: Sequence[bytes]) -> bytes:
    """A whole TASKSTATS frame: the raw netlink reply per thread (b"": the thread was gone or refused)."""
    payload = b"".join(
        (
            TASKSTATS_HEADER.pack(tick, len(tids)),
            array("I", tids).tobytes(),
            array("q", times).tobytes(),
            array("I", map(len, replies)).tobytes(),
            *replies,
        )
    )
    return encode(TASKSTATS, payload)


def decode_taskstats(payload: bytes) -> tuple[int, list[tuple[int, int, bytes | None]]]:
    """(tick, [(tid, t_ns, reply or None)]) of a TASKSTATS payload (the writer's side of encode_taskstats)."""
    tick, n = TASKSTATS_HEADER.unpack_from(payload)
    offset = TASKSTATS_HEADER.size
    tids = array_at(payload, "<u4", n, offset).tolist()
    offset += 4 * n
    times = array_at(payload, "<i8", n, offset).tolist()
    offset += 8 * n
    lengths = array_at(payload, "<u4", n, offset).tolist()
    offset += 4 * n
    rows: list[tuple[int, int, bytes | None]] = []
    for tid, t_ns, length in zip(tids, times, lengths, strict=True):
        rows.append((tid, t_ns, payload[offset : offset + length] if length else None))
        offset += length
    return tick, rows


def encode_system(t_ns: int, texts: Sequence[bytes]) -> bytes:
    """A whole SYSTEM frame: /proc/stat, then the /proc/pressure files in PRESSURE_FILES order."""
    return encode(SYSTEM, SYSTEM_HEADER.pack(t_ns, *(len(t) for t in texts)) + b"".join(texts))


def decode_system(payload: bytes) -> tuple[int, list[bytes]]:
    """(t_ns, [/proc/stat text, pressure texts...]) of a SYSTEM payload."""
    t_ns, *lengths = SYSTEM_HEADER.unpack_from(payload)
    offset = SYSTEM_HEADER.size
    texts = []
    for length in lengths:
        texts.append(payload[offset : offset + length])
        offset += length
    return t_ns, texts


def encode_ebpf_tick(tick: int, layout_id: int, t_ns: int, slots: bytes) -> bytes:
    header = EBPF_TICK_HEADER.pack(tick, layout_id, t_ns, len(slots))
    return b"".join((FRAME.pack(EBPF_TICK, len(header) + len(slots)), header, slots))


def encode_ebpf_delta(
    tick: int, layout_id: int, t_ns: int, used: int, base_tick: int, count: int, indices: bytes, slots: bytes
) -> bytes:
    header = EBPF_DELTA_HEADER.pack(tick, layout_id, t_ns, used, base_tick, count)
    return b"".join((FRAME.pack(EBPF_DELTA, len(header) + len(indices) + len(slots)), header, indices, slots))


def encode_ebpf_ticks(
    base_tick: int, base_used: int, times: bytes, columns: bytes, indices: bytes, slots: bytes
) -> bytes:
    header = EBPF_TICKS_HEADER.pack(len(times) // 8, len(indices) // 4, base_tick, base_used)
    size = len(header) + len(times) + len(columns) + len(indices) + len(slots)
    return b"".join((FRAME.pack(EBPF_TICKS, size), header, times, columns, indices, slots))


@dataclass(frozen=True)
class EbpfTicks:
    """An EBPF_TICKS payload taken apart (decode_ebpf_ticks): per tick, its columns as lists; the slot records
    of all of them, tick after tick (`counts` each), as u32 indices and rows of eight u64 words."""

    base_tick: int
    times: list[int]
    ticks: list[int]
    layouts: list[int]
    useds: list[int]
    counts: list[int]
    wholes: list[int]
    index: np.ndarray
    words: np.ndarray


def decode_ebpf_ticks(payload: bytes) -> EbpfTicks:
    """The writer's side of encode_ebpf_ticks."""
    n, k, base_tick, _ = EBPF_TICKS_HEADER.unpack_from(payload)
    at = EBPF_TICKS_HEADER.size
    times = array_at(payload, "<i8", n, at).tolist()
    ticks, layouts, useds, counts, wholes = array_at(payload, "<u4", 5 * n, at + 8 * n).reshape(5, n).tolist()
    at += 28 * n
    index = array_at(payload, "<u4", k, at)
    words = array_at(payload, "<u8", 8 * k, at + 4 * k).reshape(k, 8)
    return EbpfTicks(base_tick, times, ticks, layouts, useds, counts, wholes, index, words)


def encode_stat_slow(tick: int, layout_id: int, t_ns: int, indices: Sequence[int], texts: Sequence[bytes]) -> bytes:
    header = EBPF_TICK_HEADER.pack(tick, layout_id, t_ns, len(indices))
    return encode(
        STAT_SLOW,
        b"".join((header, array("I", indices).tobytes(), array("I", map(len, texts)).tobytes(), *texts)),
    )


def array_at(payload: bytes, dtype: str, count: int, offset: int) -> np.ndarray:
    import numpy as np  # the writer's side only: the recorder never imports numpy

    # np.frombuffer refuses count=0 at the very end of the buffer (a tick where no thread had a row).
    return np.frombuffer(payload, dtype=dtype, count=count, offset=offset) if count else np.zeros(0, dtype=dtype)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _chunks(fd: int, bufsize: int, drain_in_thread: bool, gather_s: float) -> Iterator[list[bytes]]:
    """The pipe's bytes as they came, in lists of reads (never empty ones)."""
    if not drain_in_thread:
        while chunk := os.read(fd, bufsize):
            yield [chunk]
        return
    # A thread keeps the pipe empty while the consumer parses and compresses a chunk: a full pipe
    # would block the recorder's tick (1 MiB is only ~8 ticks of 300 threads).
    chunks: queue.SimpleQueue[bytes] = queue.SimpleQueue()
    ended = threading.Event()

    def drain() -> None:
        while chunk := os.read(fd, bufsize):
            chunks.put(chunk)
        chunks.put(b"")
        ended.set()

    threading.Thread(target=drain, name="frame-drain", daemon=True).start()
    woke = time.monotonic() - gather_s
    while True:
        # The consumer wakes at most every gather_s and takes what came meanwhile in one go (read_frames); at
        # the pipe's end at once: the recording's last frames (its trailer, or all a killed recorder sent) are
        # not held back by a long gather_s.
        ended.wait(max(0.0, woke + gather_s - time.monotonic()))
        parts = [chunks.get()]
        woke = time.monotonic()
        while parts[-1] and not chunks.empty():
            parts.append(chunks.get())
        if parts[-1]:
            yield parts
            continue
        if len(parts) > 1:
            yield parts[:-1]
        return  # the end of the pipe


def read_frames(
    fd: int, bufsize: int = 1 << 20, drain_in_thread: bool = False, gather_s: float = 0.0
) -> Iterator[tuple[int, bytes]]:
    """Frames from a pipe until EOF. A frame cut short by the recorder's death is dropped. `gather_s` (with
    `drain_in_thread`): take the frames that arrived at most this often, in one go.

    Each payload is one copy of the bytes read: the reads are held until the first frame among them is whole,
    joined once with what was left of the last, and each frame sliced out of that (a bytearray appended to,
    sliced and cut in place copied each byte four times: ~47 MB a second at the Bitwig shape). Held, not
    joined at each read: a frame of many reads is joined once, not once per read."""
    held: list[bytes] = []  # reads since the last whole frame, the part of a frame left from before first
    held_size = 0
    need = FRAME.size  # what the first frame in `held` needs (its header, then all of it) to be taken
    for parts in _chunks(fd, bufsize, drain_in_thread, gather_s):
        held += parts
        held_size += sum(map(len, parts))
        if held_size < need:
            continue
        data = b"".join(held) if len(held) > 1 else held[0]
        offset = 0
        while held_size - offset >= FRAME.size:
            kind, length = FRAME.unpack_from(data, offset)
            end = offset + FRAME.size + length
            if end > held_size:
                break
            yield kind, data[offset + FRAME.size : end]
            offset = end
        rest = data[offset:]
        held = [rest] if rest else []
        held_size = len(rest)
        need = FRAME.size + FRAME.unpack_from(rest)[1] if held_size >= FRAME.size else FRAME.size
