"""Reading jack2's shared memory passively: per-client cycle timing and each client's pid and refnum.

jack2 has no public per-cycle API, but every cycle its clients write their timing into the graph
manager's shared segment, which every client (ours included) maps:

    class JackGraphManager : JackShmMem, JackAtomicState<JackConnectionManager> {
        unsigned int fPortMax;
        JackClientTiming fClientTiming[CLIENT_NUM];   // CLIENT_NUM = 64
        JackPort fPortArray[...]; }
    struct JackClientTiming {                         // packed: 28 bytes
        jack_time_t fSignaledAt, fAwakeAt, fFinishedAt;   // microseconds of jack_get_time()
        jack_client_state_t fStatus; }                // NotTriggered 0, Triggered 1, Running 2, Finished 3

(common/JackGraphManager.h, common/JackConnectionManager.h: ResumeRefNum stamps the finishing client's
fFinishedAt and the signaled clients' fSignaledAt; SuspendRefNum stamps fAwakeAt). The driver's own
fFinishedAt is when it resumed the graph: the cycle's start. Reading the segment wakes nobody.

The offset of the array depends on compile-time constants (PORT_NUM_MAX, CLIENT_NUM) through the size of
the connection manager, so it is not computed: it is found (the driver's slot holds times near now,
right after a plausible fPortMax) and then checked (statuses in range, times advancing by about one
period). Anything else: `JackShmUnavailable` with one sentence, and no cycle data (never a guess).

Client pids: libjack's jack_get_client_pid is "not implemented on library side" in jack2. The server
keeps a JackClientControl segment per client (packed: jack_shm_info_t 14 bytes, char fName[65], bool
fCallback[64], transport state 4, two bools, int fRefNum, int fPID); those segments are unlinked after
they are attached, so they are read through /proc/<jackd>/mem (root, or ptrace rights on jackd).
"""

from __future__ import annotations

import mmap
import os
import re
import struct
import time
from dataclasses import dataclass

import numpy as np

CLIENT_NUM = 64
TIMING = struct.Struct("<QQQi")  # packed JackClientTiming
TIMING_ARRAY_BYTES = CLIENT_NUM * TIMING.size
STATES = {0: "NotTriggered", 1: "Triggered", 2: "Running", 3: "Finished"}
FINISHED = 3
PORT_NAME_FIELD = 321  # REAL_JACK_PORT_NAME_SIZE + 1 (client 64 + port 256 + NUL)
REFNUM_AFTER_NAME = 3 * PORT_NAME_FIELD  # fName, fAlias1, fAlias2, then int fRefNum
CONTROL_NAME_AT = 14  # after the packed jack_shm_info_t
CONTROL_NAME_FIELD = 65
CONTROL_REFNUM_AT = CONTROL_NAME_AT + CONTROL_NAME_FIELD + 64 + 4 + 2  # fCallback[64], state, 2 bools
_DTYPE = np.dtype([("signaled", "<u8"), ("awake", "<u8"), ("finished", "<u8"), ("status", "<i4")])
_SEGMENT = re.compile(r"/dev/shm/jack-(\d+)-(\d+)( \(deleted\))?$")


class JackShmUnavailable(Exception):
    """The shared segment could not be read or did not look like the jack2 layout this reads."""


@dataclass
class ClientControl:
    name: str
    refnum: int
    pid: int


def _mappings(pid: int | str) -> list[tuple[int, int, str, int]]:
    """(start, end, path, inode) of the jack shm segments a process maps."""
    rows = []
    with open(f"/proc/{pid}/maps") as fh:
        for line in fh:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and _SEGMENT.search(parts[5].rstrip("\n")):
                start, end = (int(x, 16) for x in parts[0].split("-"))
                rows.append((start, end, parts[5].rstrip("\n"), int(parts[4])))
    return rows


class GraphTiming:
    """The graph manager's JackClientTiming array of the server this process is a client of."""

    def __init__(self, jack_now_us: int) -> None:
        own = [m for m in _mappings("self") if not m[2].endswith("(deleted)")]
        if not own:
            raise JackShmUnavailable("this process maps no jack2 shared segment (not jack2, or not connected)")
        _start, _end, path, inode = max(own, key=lambda m: m[1] - m[0])  # the graph manager is by far the largest
        self.path = path
        self.inode = inode
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as err:
            raise JackShmUnavailable(f"cannot open {path}: {err.strerror}") from None
        try:
            self.size = os.fstat(fd).st_size
            self._map = mmap.mmap(fd, self.size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        self.offset, self.port_max = self._locate(jack_now_us)

    def _locate(self, now_us: int) -> tuple[int, int]:
        """Find the array: the driver's slot 0 holds fSignaledAt/fFinishedAt within the last 10 s, right
        after fPortMax. Packed structs: the array may start at any 4-byte boundary."""
        found: list[tuple[int, int]] = []
        for align in (0, 4):
            words = np.frombuffer(self._map, dtype="<u8", count=(self.size - align) // 8, offset=align)
            near = np.flatnonzero((words > now_us - 10_000_000) & (words <= now_us + 1_000_000))
            for index in near.tolist():
                offset = align + 8 * index
                if offset < 4 or offset + TIMING_ARRAY_BYTES > self.size:
                    continue
                (port_max,) = struct.unpack_from("<I", self._map, offset - 4)
                slots = np.frombuffer(self._map, dtype=_DTYPE, count=CLIENT_NUM, offset=offset)
                if 16 <= port_max <= 1 << 20 and self._plausible(slots, now_us):
                    found.append((offset, port_max))
        found = self._outside_each_other(found)
        if len(found) != 1:
            raise JackShmUnavailable(
                f"the client timing array of {self.path} was not found where jack2 1.9 keeps it "
                f"({len(found)} candidates): per-cycle data is not recorded"
            )
        return found[0]

    @staticmethod
    def _outside_each_other(found: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Drop a candidate that starts inside an earlier one's array: it is the same array read shifted.
        Once jack_get_time() passes 2**36 us (19.1 h of uptime) the high half of a time word is >= 16 and
        passes as fPortMax; 8 or 16 bytes into the last used client's slot, read while jack2 has reset
        its status to NotTriggered (0), the shifted slots are that client's times followed by zeros:
        plausible (3 candidates in tests/test_engine_units.py's segment). A CI run beside stress-ng
        reported 2 candidates and recorded no cycles; this shift is the one way found to make a second."""
        kept: list[tuple[int, int]] = []
        for offset, port_max in sorted(found):
            if not kept or offset >= kept[-1][0] + TIMING_ARRAY_BYTES:
                kept.append((offset, port_max))
        return kept

    @staticmethod
    def _plausible(slots: np.ndarray, now_us: int) -> bool:
        if not ((slots["status"] >= 0) & (slots["status"] <= 3)).all():
            return False
        times = np.concatenate([slots["signaled"], slots["awake"], slots["finished"]])
        used = times[times != 0]
        return bool(len(used) and ((used > now_us - 3_600_000_000) & (used <= now_us + 1_000_000)).all())

    def check_advancing(self, wait_s: float = 0.05) -> None:
        """The driver's cycle start must move within a few periods, or this is not a live timing array."""
        before = self.read()[0]["finished"]
        time.sleep(wait_s)
        if self.read()[0]["finished"] == before:
            raise JackShmUnavailable("the driver's cycle time in the graph segment does not advance")

    def read(self, driver: int = 0) -> np.ndarray:
        """A copy of the 64 slots (one memcpy of 1.8 KB: the clients keep writing while we read), with the
        driver's cycle start read again after the copy. The copy is not atomic: the driver preempts a
        poller below its priority when it wakes, starts a cycle and signals its clients, and the rest of
        the copy then holds the clients' new values beside the old start; filed under the previous cycle,
        a client's new finish fell after the next start: a late flag jack2 never notified. jack2 stamps
        the start before it signals (JackConnectionManager::ResumeRefNum), so a start read after the copy
        is never older than a signal in it."""
        slots = np.frombuffer(self._map[self.offset : self.offset + TIMING_ARRAY_BYTES], dtype=_DTYPE).copy()
        at = self.offset + driver * TIMING.size + 16  # fFinishedAt: after fSignaledAt and fAwakeAt
        slots[driver]["finished"] = int.from_bytes(self._map[at : at + 8], "little")
        return slots

    def refnum_of_port(self, port_name: str) -> int | None:
        """The refnum of the client owning a port, from the port array after the timing array."""
        at = self._map.find(port_name.encode() + b"\0", self.offset + TIMING_ARRAY_BYTES)
        if at < 0:
            return None
        (refnum,) = struct.unpack_from("<i", self._map, at + REFNUM_AFTER_NAME)
        return refnum if 0 <= refnum < CLIENT_NUM else None

    def close(self) -> None:
        self._map.close()


def server_pid(graph_inode: int, proc: str = "/proc") -> int | None:
    """jackd's pid: a process named jackd/jackdbus that maps the same graph segment."""
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/comm") as fh:
                comm = fh.read().strip()
            if comm not in ("jackd", "jackdbus") and not comm.startswith("jackd"):
                continue
            if any(m[3] == graph_inode for m in _mappings(name)):
                return int(name)
        except OSError:
            continue
    return None


def client_controls(jackd_pid: int) -> list[ClientControl]:
    """Every external client's name, refnum and pid, from the server's JackClientControl segments."""
    out: list[ClientControl] = []
    # Small segments: the clients' controls (unlinked once attached, but a new client's may not be yet)
    # and the engine control; each is checked below (a name, a refnum in range, a live pid).
    controls = [m for m in _mappings(jackd_pid) if m[1] - m[0] <= 1 << 16]
    if not controls:
        return out
    try:
        mem = os.open(f"/proc/{jackd_pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as err:
        raise JackShmUnavailable(f"cannot read jackd's memory for client pids: {err.strerror}") from None
    try:
        for start, _end, _path, _inode in controls:
            try:
                raw = os.pread(mem, CONTROL_REFNUM_AT + 8, start)
            except OSError:
                continue
            name = raw[CONTROL_NAME_AT : CONTROL_NAME_AT + CONTROL_NAME_FIELD].split(b"\0", 1)[0]
            refnum, pid = struct.unpack_from("<ii", raw, CONTROL_REFNUM_AT)
            text = name.decode(errors="replace")
            if text and text.isprintable() and 0 <= refnum < CLIENT_NUM and pid > 0 and os.path.exists(f"/proc/{pid}"):
                out.append(ClientControl(text, refnum, pid))
    finally:
        os.close(mem)
    return out
