"""Per-thread delay accounting through taskstats (generic netlink), parsed by the struct the kernel sends.

Why taskstats: it is the only per-thread source that splits off-CPU time by cause without eBPF and
without CONFIG_SCHEDSTATS: runqueue delay (cpu), synchronous block IO (blkio), swap-in, direct reclaim
(freepages), thrashing, compaction, write-protect copy and IRQ time, each as a count and a total in ns.

Interface (all raw work is cheap enough for the 2 ms hot loop; parsing happens off the tick):

    client = TaskstatsClient()              # opens the socket, resolves the "TASKSTATS" family id
    raw = client.query_raw(tid)             # bytes of the kernel's reply, or None: the thread is gone
    fields = parse_reply(raw)               # {"cpu_count": ..., "blkio_delay_total": ...} (see below)
    table = taskstats_table(rows, delayacct=True)   # rows of (tick, t_ns, tid, raw) -> "taskstats" table

Protocol (include/uapi/linux/taskstats.h, kernel/taskstats.c): TASKSTATS_CMD_GET with the attribute
TASKSTATS_CMD_ATTR_PID set to a thread id answers with a nested TASKSTATS_TYPE_AGGR_PID holding
TASKSTATS_TYPE_PID (the tid) and TASKSTATS_TYPE_STATS (struct taskstats). The command needs
CAP_NET_ADMIN (GENL_ADMIN_PERM in taskstats_ops): without it the kernel answers EPERM. A thread that
has exited answers ESRCH, which is normal and comes back as None.

The struct is versioned and, by the header's rule, only grows at the end, so it is parsed by the version
AND the length the kernel sent: a field is returned only when it lies wholly inside the sent bytes;
absent means unknown, never zero. Two exceptions to "only grows at the end", both handled:
- version 1 had `__u16 padding[3]` where later versions put ac_exitcode/ac_flag/ac_nice, so cpu_count
  sat at offset 8 instead of 16;
- version 15 (kernel 6.15: "delayacct: add delay max/min to record delay peak") inserted *_delay_max/min
  after each *_delay_total in the middle of the struct; version 16 (commit "taskstats: fix struct
  taskstats breaks backward compatibility since version 15") moved them to the end.
Sizes by version: 1-6 vary, 7-8: 328, 9: 344, 10: 352, 11: 368, 12: 400, 13: 416, 14: 432, 15 and 16: 560.
Later versions append after the v16 fields (e.g. *_delay_max_ts timespecs); those bytes are ignored.

Units (from the header): *_delay_total, *_delay_max/min, cpu_run_*_total in ns; ac_etime/ac_utime/ac_stime
in us; ac_btime/ac_btime64 seconds since the epoch. Delay fields other than cpu_* stay 0 unless
`kernel.task_delayacct=1` (kernel/delayacct.c: the static key `delayacct_key`); cpu_count and
cpu_delay_total come from sched_info (CONFIG_SCHED_INFO) and move regardless. `taskstats_table` nulls
the delay columns when delay accounting was off, so an analysis reads "unknown", not a silent zero.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from capture.errors import ForensicsError
from capture.format import TASKSTATS_SCHEMA

# --------------------------------------------------------------------------------------------------
# Netlink constants (include/uapi/linux/netlink.h, genetlink.h, taskstats.h)

NETLINK_GENERIC = 16
NLMSG_ERROR = 2
NLM_F_REQUEST = 1
GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID = 1
CTRL_ATTR_FAMILY_NAME = 2
NLA_TYPE_MASK = 0x3FFF  # strips NLA_F_NESTED / NLA_F_NET_BYTEORDER

TASKSTATS_GENL_NAME = b"TASKSTATS"
TASKSTATS_GENL_VERSION = 1
TASKSTATS_CMD_GET = 1
TASKSTATS_CMD_ATTR_PID = 1
TASKSTATS_TYPE_PID = 1
TASKSTATS_TYPE_TGID = 2
TASKSTATS_TYPE_STATS = 3
TASKSTATS_TYPE_AGGR_PID = 4
TASKSTATS_TYPE_AGGR_TGID = 5

_NLMSGHDR = struct.Struct("<IHHII")  # len, type, flags, seq, pid
_GENLHDR = struct.Struct("<BBH")  # cmd, version, reserved
_NLATTR = struct.Struct("<HH")  # len, type
_RECV_SIZE = 8192  # a v16 reply is 596 bytes; room for versions to come


class TaskstatsUnavailable(ForensicsError):
    """The taskstats interface cannot be used here (no family, no permission); the message says why."""


# --------------------------------------------------------------------------------------------------
# struct taskstats layouts

# (name, C type) in declaration order. "!8" marks __attribute__((aligned(8))) on that member.
_U8, _U16, _U32, _U64 = "B", "H", "I", "Q"

_HEAD_V2 = [
    ("version", _U16),
    ("ac_exitcode", _U32),
    ("ac_flag", _U8),
    ("ac_nice", _U8),
    ("cpu_count", _U64 + "!8"),
    ("cpu_delay_total", _U64),
]
_HEAD_V1 = [("version", _U16), ("_padding", "3H"), ("cpu_count", _U64), ("cpu_delay_total", _U64)]
_DELAY_MAX_MIN = ("cpu", "blkio", "swapin", "freepages", "thrashing", "compact", "wpcopy", "irq")


def _mid_fields(with_max_min: bool) -> list[tuple[str, str]]:
    """Everything after cpu_delay_total; `with_max_min` gives version 15's interleaved max/min."""

    def delay(name: str) -> list[tuple[str, str]]:
        fields = [(f"{name}_count", _U64), (f"{name}_delay_total", _U64)]
        if with_max_min:
            fields += [(f"{name}_delay_max", _U64), (f"{name}_delay_min", _U64)]
        return fields

    cpu_extra = [("cpu_delay_max", _U64), ("cpu_delay_min", _U64)] if with_max_min else []
    fields: list[tuple[str, str]] = [
        *cpu_extra,
        *delay("blkio"),
        *delay("swapin"),
        ("cpu_run_real_total", _U64),
        ("cpu_run_virtual_total", _U64),
        # version 1 ends here
        ("ac_comm", "32s"),
        ("ac_sched", _U8 + "!8"),
        ("_ac_pad", "3B"),
        ("ac_uid", _U32 + "!8"),
        ("ac_gid", _U32),
        ("ac_pid", _U32),
        ("ac_ppid", _U32),
        ("ac_btime", _U32),
        ("ac_etime", _U64 + "!8"),
        ("ac_utime", _U64),
        ("ac_stime", _U64),
        ("ac_minflt", _U64),
        ("ac_majflt", _U64),
        ("coremem", _U64),
        ("virtmem", _U64),
        ("hiwater_rss", _U64),
        ("hiwater_vm", _U64),
        ("read_char", _U64),
        ("write_char", _U64),
        ("read_syscalls", _U64),
        ("write_syscalls", _U64),
        ("read_bytes", _U64),
        ("write_bytes", _U64),
        ("cancelled_write_bytes", _U64),
        ("nvcsw", _U64),
        ("nivcsw", _U64),
        ("ac_utimescaled", _U64),
        ("ac_stimescaled", _U64),
        ("cpu_scaled_run_real_total", _U64),
        *delay("freepages"),  # version 7/8 end here (328 bytes)
        *delay("thrashing"),  # v9
        ("ac_btime64", _U64),  # v10
        *delay("compact"),  # v11
        ("ac_tgid", _U32),  # v12
        ("ac_tgetime", _U64),
        ("ac_exe_dev", _U64),
        ("ac_exe_inode", _U64),
        *delay("wpcopy"),  # v13
        ("irq_count", _U64),  # v14
        ("irq_delay_total", _U64),
    ]
    if with_max_min:
        fields += [("irq_delay_max", _U64), ("irq_delay_min", _U64)]
    else:  # v16: all maxima and minima moved to the end
        for name in _DELAY_MAX_MIN:
            fields += [(f"{name}_delay_max", _U64), (f"{name}_delay_min", _U64)]
    return fields


@dataclass(frozen=True)
class _Field:
    name: str
    offset: int
    size: int
    fmt: str  # struct format of the member, little-endian applied by the caller


def _layout(members: Sequence[tuple[str, str]]) -> list[_Field]:
    """Offsets by the C rules (natural alignment, or 8 where the header says aligned(8))."""
    fields: list[_Field] = []
    offset = 0
    for name, ctype in members:
        fmt, _, forced = ctype.partition("!")
        size = struct.calcsize("<" + fmt)
        base = fmt.lstrip("0123456789")
        align = int(forced) if forced else (1 if base == "s" else struct.calcsize("<" + base))
        offset = (offset + align - 1) // align * align
        fields.append(_Field(name, offset, size, fmt))
        offset += size
    return fields


_V1_TAIL = _mid_fields(False)
LAYOUT_V1 = _layout(_HEAD_V1 + _V1_TAIL[: [name for name, _ in _V1_TAIL].index("ac_comm")])
LAYOUT_V15 = _layout(_HEAD_V2 + _mid_fields(True))
LAYOUT_V16 = _layout(_HEAD_V2 + _mid_fields(False))  # also versions 2-14 (prefixes) and 17+ (extended)


def layout_for(version: int) -> list[_Field]:
    if version <= 1:
        return LAYOUT_V1
    if version == 15:
        return LAYOUT_V15
    return LAYOUT_V16


def struct_size(layout: Sequence[_Field], last_field: str) -> int:
    """Bytes up to and including `last_field` (for tests against the kernel's per-version sizes)."""
    for f in layout:
        if f.name == last_field:
            return f.offset + f.size
    raise KeyError(last_field)


def parse_taskstats(data: bytes | memoryview) -> dict[str, int]:
    """The numeric fields of one struct taskstats that lie wholly inside `data`.

    Padding and ac_comm are left out (the threads table has the name). Raises ValueError when `data`
    is too short to hold even the version.
    """
    if len(data) < 2:
        raise ValueError(f"taskstats struct of {len(data)} bytes is too short to hold its version")
    (version,) = struct.unpack_from("<H", data, 0)
    out: dict[str, int] = {}
    n = len(data)
    for f in layout_for(version):
        if f.offset + f.size > n:
            break  # fields are in offset order: nothing further fits
        if f.name.startswith("_") or f.name == "ac_comm":
            continue
        (out[f.name],) = struct.unpack_from("<" + f.fmt, data, f.offset)
    out["struct_len"] = n
    return out


def parse_comm(data: bytes | memoryview) -> str | None:
    """ac_comm of a struct taskstats (versions 2+), or None when the struct is too short."""
    for f in LAYOUT_V16:
        if f.name == "ac_comm":
            if len(data) < f.offset + f.size:
                return None
            return bytes(data[f.offset : f.offset + f.size]).split(b"\0", 1)[0].decode(errors="replace")
    return None  # pragma: no cover - ac_comm is in the layout


# --------------------------------------------------------------------------------------------------
# Netlink messages


def _attr(attr_type: int, payload: bytes) -> bytes:
    length = _NLATTR.size + len(payload)
    return _NLATTR.pack(length, attr_type) + payload + b"\0" * (-length % 4)


def _iter_attrs(buf: bytes | memoryview, start: int, end: int) -> Iterable[tuple[int, int, int]]:
    """(type, payload_start, payload_end) of each netlink attribute in buf[start:end]."""
    off = start
    while off + _NLATTR.size <= end:
        length, attr_type = _NLATTR.unpack_from(buf, off)
        if length < _NLATTR.size or off + length > end:
            raise ValueError(f"netlink attribute at byte {off} has a bad length {length}")
        yield attr_type & NLA_TYPE_MASK, off + _NLATTR.size, off + length
        off += (length + 3) & ~3


def _error_code(reply: bytes) -> int | None:
    """The errno of an NLMSG_ERROR reply (0 is an ACK), or None when the reply is not an error."""
    if len(reply) < _NLMSGHDR.size + 4:
        raise ValueError(f"netlink reply of {len(reply)} bytes is too short")
    _, msg_type, _, _, _ = _NLMSGHDR.unpack_from(reply, 0)
    if msg_type != NLMSG_ERROR:
        return None
    (err,) = struct.unpack_from("<i", reply, _NLMSGHDR.size)
    return -err


def parse_reply(raw: bytes) -> dict[str, int]:
    """Fields of a TASKSTATS_CMD_GET reply (see parse_taskstats), plus `tid`/`tgid` from the envelope.

    Raises ValueError on a reply that holds no taskstats (an error message, a truncated message).
    """
    err = _error_code(raw)
    if err is not None:
        raise ValueError(f"netlink error reply: {os.strerror(err) if err else 'ACK'} (errno {err})")
    msg_len = min(_NLMSGHDR.unpack_from(raw, 0)[0], len(raw))
    body = _NLMSGHDR.size + _GENLHDR.size
    for attr_type, start, end in _iter_attrs(raw, body, msg_len):
        if attr_type not in (TASKSTATS_TYPE_AGGR_PID, TASKSTATS_TYPE_AGGR_TGID):
            continue  # e.g. TASKSTATS_TYPE_NULL, a padding attribute some kernels add
        ident: dict[str, int] = {}
        stats: dict[str, int] | None = None
        for inner_type, inner_start, inner_end in _iter_attrs(raw, start, end):
            if inner_type == TASKSTATS_TYPE_PID:
                (ident["tid"],) = struct.unpack_from("<I", raw, inner_start)
            elif inner_type == TASKSTATS_TYPE_TGID:
                (ident["tgid"],) = struct.unpack_from("<I", raw, inner_start)
            elif inner_type == TASKSTATS_TYPE_STATS:
                stats = parse_taskstats(memoryview(raw)[inner_start:inner_end])
        if stats is not None:
            stats.update(ident)
            return stats
    raise ValueError("netlink reply holds no TASKSTATS_TYPE_STATS attribute")


# --------------------------------------------------------------------------------------------------
# The client


class TaskstatsClient:
    """One generic-netlink socket for TASKSTATS_CMD_GET queries by thread id.

    Not thread-safe: give each thread its own client. Raises TaskstatsUnavailable when the kernel has
    no TASKSTATS family (CONFIG_TASKSTATS off) or netlink sockets are refused.
    """

    def __init__(self) -> None:
        try:
            self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_GENERIC)
            self._sock.bind((0, 0))
        except OSError as err:
            raise TaskstatsUnavailable(f"cannot open a generic netlink socket: {err.strerror}") from err
        self.family_id = self._resolve_family()
        # The request, built once; query_raw only patches the tid (and the sequence number).
        payload = _GENLHDR.pack(TASKSTATS_CMD_GET, TASKSTATS_GENL_VERSION, 0) + _attr(
            TASKSTATS_CMD_ATTR_PID, b"\0\0\0\0"
        )
        self._request = bytearray(_NLMSGHDR.pack(_NLMSGHDR.size + len(payload), self.family_id, NLM_F_REQUEST, 0, 0))
        self._request += payload
        self._tid_offset = _NLMSGHDR.size + _GENLHDR.size + _NLATTR.size
        self._pack_tid = struct.Struct("<I").pack_into

    def _resolve_family(self) -> int:
        payload = _GENLHDR.pack(CTRL_CMD_GETFAMILY, 1, 0) + _attr(CTRL_ATTR_FAMILY_NAME, TASKSTATS_GENL_NAME + b"\0")
        self._sock.send(_NLMSGHDR.pack(_NLMSGHDR.size + len(payload), GENL_ID_CTRL, NLM_F_REQUEST, 1, 0) + payload)
        reply = self._sock.recv(_RECV_SIZE)
        err = _error_code(reply)
        if err is not None:
            self.close()
            if err == errno.ENOENT:
                raise TaskstatsUnavailable("this kernel has no TASKSTATS netlink family (CONFIG_TASKSTATS is off)")
            raise TaskstatsUnavailable(f"cannot resolve the TASKSTATS netlink family: {os.strerror(err)}")
        body = _NLMSGHDR.size + _GENLHDR.size
        for attr_type, start, _ in _iter_attrs(reply, body, len(reply)):
            if attr_type == CTRL_ATTR_FAMILY_ID:
                (family,) = struct.unpack_from("<H", reply, start)
                return int(family)
        self.close()
        raise TaskstatsUnavailable("the netlink controller's answer for TASKSTATS holds no family id")

    def query_raw(self, tid: int) -> bytes | None:
        """The kernel's raw reply for thread `tid`, or None when the thread is gone (ESRCH).

        Raises PermissionError without CAP_NET_ADMIN, OSError for other refusals. The kernel answers
        within send() (genetlink runs the command in the sender's context), so the receive never waits.
        """
        self._pack_tid(self._request, self._tid_offset, tid)
        self._sock.send(self._request)
        reply = self._sock.recv(_RECV_SIZE, socket.MSG_DONTWAIT)
        if reply[4] == NLMSG_ERROR and reply[5] == 0:  # nlmsg_type (u16 LE) == NLMSG_ERROR
            (err,) = struct.unpack_from("<i", reply, _NLMSGHDR.size)
            if err == -errno.ESRCH:
                return None
            raise OSError(-err, f"taskstats query for tid {tid}: {os.strerror(-err)}")
        return reply

    def query(self, tid: int) -> dict[str, int] | None:
        raw = self.query_raw(tid)
        return None if raw is None else parse_reply(raw)

    def check_permission(self) -> None:
        """Query this thread; raise TaskstatsUnavailable with a plain reason when that is refused."""
        try:
            self.query_raw(threading.get_native_id())
        except PermissionError as err:
            raise TaskstatsUnavailable(
                "taskstats needs CAP_NET_ADMIN (run as root): per-thread delay accounting is not recorded"
            ) from err
        except OSError as err:
            raise TaskstatsUnavailable(f"taskstats query refused: {err.strerror}") from err

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> TaskstatsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------------------------------
# The capture table

# column -> struct field. Delays and maxima in ns, as the kernel keeps them (cumulative totals).
DELAY_COLUMNS: dict[str, str] = {
    "cpu_count": "cpu_count",
    "cpu_delay_ns": "cpu_delay_total",
    "blkio_count": "blkio_count",
    "blkio_delay_ns": "blkio_delay_total",
    "swapin_count": "swapin_count",
    "swapin_delay_ns": "swapin_delay_total",
    "freepages_count": "freepages_count",  # direct reclaim
    "freepages_delay_ns": "freepages_delay_total",
    "thrashing_count": "thrashing_count",
    "thrashing_delay_ns": "thrashing_delay_total",
    "compact_count": "compact_count",
    "compact_delay_ns": "compact_delay_total",
    "wpcopy_count": "wpcopy_count",  # copy-on-write faults
    "wpcopy_delay_ns": "wpcopy_delay_total",
    "irq_count": "irq_count",
    "irq_delay_ns": "irq_delay_total",
    # lifetime maxima of a single delay (version 15+)
    "cpu_delay_max_ns": "cpu_delay_max",
    "blkio_delay_max_ns": "blkio_delay_max",
    "swapin_delay_max_ns": "swapin_delay_max",
    "freepages_delay_max_ns": "freepages_delay_max",
    "thrashing_delay_max_ns": "thrashing_delay_max",
    "compact_delay_max_ns": "compact_delay_max",
    "wpcopy_delay_max_ns": "wpcopy_delay_max",
    "irq_delay_max_ns": "irq_delay_max",
}
# Columns that move only with kernel.task_delayacct=1 (everything but cpu_*: sched_info keeps those).
DELAYACCT_ONLY = frozenset(c for c in DELAY_COLUMNS if not c.startswith("cpu_"))
OTHER_COLUMNS: dict[str, str] = {
    "age_us": "ac_etime",  # time since the thread started (us): no delay total can exceed it
    # cpu_run_virtual_total is se.sum_exec_runtime: exact ns on CPU, as schedstat's first field.
    # (cpu_run_real_total is utime + stime: tick-sampled, 4 ms steps at HZ=250; not recorded.)
    "run_ns": "cpu_run_virtual_total",
    "nvcsw": "nvcsw",
    "nivcsw": "nivcsw",
    "minflt": "ac_minflt",
    "majflt": "ac_majflt",
    "read_bytes": "read_bytes",  # storage IO actually caused (CONFIG_TASK_IO_ACCOUNTING)
    "write_bytes": "write_bytes",
}

# The table's schema lives with the format (capture/format.py); its columns are these mappings' keys.
assert TASKSTATS_SCHEMA.names[5:] == [*DELAY_COLUMNS, *OTHER_COLUMNS], "taskstats columns out of step with the schema"


def _stats_location(raw: bytes) -> tuple[int, int]:
    """(offset, length) of the struct taskstats inside one reply (walks the netlink attributes)."""
    msg_len = min(_NLMSGHDR.unpack_from(raw, 0)[0], len(raw))
    for attr_type, start, end in _iter_attrs(raw, _NLMSGHDR.size + _GENLHDR.size, msg_len):
        if attr_type in (TASKSTATS_TYPE_AGGR_PID, TASKSTATS_TYPE_AGGR_TGID):
            for inner_type, inner_start, inner_end in _iter_attrs(raw, start, end):
                if inner_type == TASKSTATS_TYPE_STATS:
                    return inner_start, inner_end - inner_start
    raise ValueError("netlink reply holds no TASKSTATS_TYPE_STATS attribute")


_DTYPES: dict[tuple[int, int, int, int], np.dtype] = {}


def _reply_dtype(reply_len: int, offset: int, version: int, length: int) -> np.dtype:
    """A numpy record type for whole replies of one shape: every numeric field the struct holds."""
    key = (reply_len, offset, version, length)
    dtype = _DTYPES.get(key)
    if dtype is None:
        fields = [f for f in layout_for(version) if f.offset + f.size <= length and f.fmt in ("B", "H", "I", "Q")]
        fields = [f for f in fields if not f.name.startswith("_")]
        dtype = np.dtype(
            {
                "names": [f.name for f in fields],
                "formats": ["<" + {"B": "u1", "H": "u2", "I": "u4", "Q": "u8"}[f.fmt] for f in fields],
                "offsets": [offset + f.offset for f in fields],
                "itemsize": reply_len,
            }
        )
        _DTYPES[key] = dtype
    return dtype


def parse_replies(raws: Sequence[bytes]) -> dict[str, np.ndarray]:
    """Many replies at once: field name -> array (float64 with NaN where a reply's struct lacks the field).

    Replies of one length share one layout (the kernel sends one struct version), so each group is one
    numpy view of the concatenated bytes: about 1 us a reply instead of ~25 us field by field.
    """
    n = len(raws)
    out: dict[str, np.ndarray] = {}
    lengths = np.fromiter((len(r) for r in raws), dtype=np.int64, count=n)
    for reply_len in np.unique(lengths):
        rows = np.flatnonzero(lengths == reply_len)
        first = raws[rows[0]]
        offset, length = _stats_location(first)
        (version,) = struct.unpack_from("<H", first, offset)
        block = np.frombuffer(b"".join(raws[i] for i in rows.tolist()), dtype=np.uint8).reshape(
            len(rows), int(reply_len)
        )
        same = block[:, offset : offset + 2].copy().view("<u2").ravel() == version
        if not same.all():  # another version with the same length (never seen): the slow path for those
            for i in rows[~same]:
                for name, value in parse_reply(raws[i]).items():
                    out.setdefault(name, np.full(n, np.nan))[i] = value
            rows = rows[same]
            block = block[same]
        records = np.frombuffer(block.tobytes(), dtype=_reply_dtype(int(reply_len), offset, version, length))
        for name in records.dtype.names or ():
            out.setdefault(name, np.full(n, np.nan))[rows] = records[name]
        out.setdefault("struct_len", np.full(n, np.nan))[rows] = length
    return out


def taskstats_table(
    rows: Iterable[tuple[int, int, int, bytes | None]],
    delayacct: bool | None,
    delayacct_since_ns: int | None = None,
) -> pa.Table:
    """The "taskstats" table from (tick, t_ns, tid, raw reply) rows; rows whose reply is None are dropped.

    `delayacct`: whether kernel.task_delayacct was 1 for the whole recording. When it was not (False or
    unknown), the columns only delay accounting fills are null (unknown), not the kernel's zeros.
    `delayacct_since_ns`: when it was switched on (CLOCK_MONOTONIC), if during this run. A thread that
    started before that never gets delay accounting: the kernel gives a task its delay struct at fork
    only while delay accounting is on (include/linux/delayacct.h delayacct_tsk_init(); measured here:
    an fsync thread created before the switch shows no blkio at all after it). Its delay columns are
    null too. Fields the kernel's struct version lacks are null.
    """
    kept = [row for row in rows if row[3] is not None]
    if not kept:
        return TASKSTATS_SCHEMA.empty_table()
    ticks, t_ns, tids, raws = zip(*kept, strict=True)
    fields = parse_replies(list(raws))
    t = np.asarray(t_ns, dtype=np.int64)
    n = len(t)

    def column(field: str, null: np.ndarray | None = None) -> pa.Array:
        values = fields.get(field, np.full(n, np.nan))
        mask = np.isnan(values) if null is None else (np.isnan(values) | null)
        return pa.array(np.nan_to_num(values).astype(np.int64), mask=mask)

    no_delays = np.full(n, not delayacct)
    if delayacct and delayacct_since_ns is not None and "ac_etime" in fields:
        started = t - fields["ac_etime"] * 1000.0  # ac_etime: us since the thread started (monotonic)
        no_delays = np.nan_to_num(started, nan=-np.inf) < delayacct_since_ns
    data: dict[str, pa.Array] = {
        "tick": pa.array(np.asarray(ticks, dtype=np.uint32)),
        "t_ns": pa.array(t),
        "tid": pa.array(np.asarray(tids, dtype=np.int32)),
        "pid": column("ac_tgid"),
        "version": column("version"),
    }
    for name, field in DELAY_COLUMNS.items():
        data[name] = column(field, no_delays if name in DELAYACCT_ONLY else None)
    for name, field in OTHER_COLUMNS.items():
        data[name] = column(field)
    return pa.table(data).cast(TASKSTATS_SCHEMA)
