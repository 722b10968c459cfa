"""The capture file: the one format samplers write and analyses read.

A capture must outlive the machine and the tool version that made it, survive a killed recorder, and be
queryable by other tools. So it is a small versioned container of standard columnar chunks:

    header   MAGIC (8 bytes) | u16 format version | u16 flags (0)
    record*  tag (4 ASCII bytes) | u32 payload length | u32 CRC-32 | payload
               the CRC covers the tag, the length and the payload (version 2); version 1's covered
               the payload only, so a flipped bit in a tag went unseen
               META  JSON object; later META records update earlier keys (the recorder adds to it)
               TABL  u16 name length | table name (UTF-8) | a chunk of that table: one Arrow IPC file
                     (version 3), one Parquet file (versions 1 and 2); capture/chunks.py
               TRLR  JSON object: achieved timing and counts. Written last, and only by a clean end.

All integers are little-endian. Chunks are appended as recording goes, each flushed to the kernel when
written, so a recorder killed with SIGKILL leaves every finished chunk readable. A reader that meets a
record cut short or with a bad CRC warns, and goes on at the next valid record (a known tag, a length
inside the file and a matching CRC: a false match is a 1 in 2^32 event; found in time linear in the
bytes passed over, see _Records), naming per table the time span of the rows the hole took (Damage).
It counts the rows it read against the trailer's: a shortfall, or rows beyond it, is a warning too; a
table chunk held twice byte for byte (a file joined to itself) is read once, with a warning. A record whose CRC
is right but whose content is not what its tag says (hand-made, or a bug) is skipped with a warning.
A capture without a trailer reads back with a warning: the figures the trailer would hold (achieved
interval, missed ticks) are then unknown.

Each chunk holds cumulative counters exactly as read, sorted by (tid, tick) inside it, so that a mostly
idle thread's values lie together and compress to a few bits per sample. `forensics export --format
parquet` writes plain Parquet files for DuckDB or Spark.

Version policy: readers read every version from 1 up to FORMAT_VERSION and refuse others (newer, or
the never-written 0) with a plain message. Adding a table or a nullable column does not bump the
version; changing the meaning or unit of an existing column, or the container's layout, does.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import fcntl
import functools
import json
import mmap
import os
import stat
import struct
import sys
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

import numpy as np
import pyarrow as pa

from capture.chunks import chunk_head, encode_chunk, read_chunk_columns
from capture.errors import CaptureFormatError, CaptureWarning
from capture.shape import META, REQUIRED_COLUMNS, TRAILER, Obj, conform
from capture.vocabulary import file_kind

if TYPE_CHECKING:
    import pandas as pd

# pandas is imported where a table is read back, not here: the recorder writes with pyarrow alone and its
# start-up stays light (README "Recording: catch-load"; bench/recorder_startup.py measures it).

MAGIC = b"\x89SSF\r\n\x1a\n"  # PNG-style: a high byte and CR/LF/^Z catch text-mode and 7-bit damage.
FORMAT_VERSION = 3
OLDEST_VERSION = 1
_HEADER = struct.Struct("<8sHH")
_RECORD = struct.Struct("<4sII")
TAG_META = b"META"
TAG_TABLE = b"TABL"
TAG_TRAILER = b"TRLR"
SUFFIX = ".ssf"

# --------------------------------------------------------------------------------------------------
# Schemas of the tables the toolkit itself writes. Columns and units are documented in the README.
# Unknown tables in a capture (from other recorders or later minor versions) are still loaded.

SAMPLES_SCHEMA = pa.schema(
    [
        ("tick", pa.uint32()),  # tick number: scheduled at start + tick * interval (missed ticks skip numbers)
        ("t_ns", pa.int64()),  # CLOCK_MONOTONIC ns when this thread's counters were read
        ("tid", pa.int32()),
        ("pid", pa.int32()),
        ("run_ns", pa.int64()),  # schedstat 1: ns on a CPU (cumulative)
        ("wait_ns", pa.int64()),  # schedstat 2: ns runnable on a run queue, not running (cumulative)
        ("slices", pa.int64()),  # schedstat 3: times switched in (cumulative)
        ("state", pa.dictionary(pa.int8(), pa.string())),  # stat 3: R S D T t X Z P I ...
        ("minflt", pa.int64()),  # stat 10 (cumulative)
        ("majflt", pa.int64()),  # stat 12 (cumulative)
        ("utime", pa.int64()),  # stat 14, clock ticks (meta clk_tck)
        ("stime", pa.int64()),  # stat 15, clock ticks
        ("nice", pa.int8()),  # stat 19
        ("cpu", pa.int16()),  # stat 39: CPU last run on
        ("rtprio", pa.int16()),  # stat 40
        ("policy", pa.int8()),  # stat 41: 0 OTHER, 1 FIFO, 2 RR, 3 BATCH, 5 IDLE, 6 DEADLINE
        ("blkio_ticks", pa.int64()),  # stat 42: delayacct_blkio_ticks (0 unless kernel.task_delayacct=1)
        # stat 22, clock ticks after boot. A thread is (tid, starttime): the kernel reuses a tid once its
        # thread has gone, and the new thread's counters start again (null in captures before it).
        ("starttime", pa.int64()),
    ]
)

# /proc/<pid>/task/<tid>/sched, read only for the threads that need it (--sched). Time fields are ns,
# converted exactly from the kernel's "ms.nnnnnn" text. Fields the kernel did not print are null.
SCHED_FIELDS: dict[str, str] = {
    # column name -> field name in the file (without the "se." / "se.statistics." prefix)
    "nr_switches": "nr_switches",
    "nr_voluntary_switches": "nr_voluntary_switches",
    "nr_involuntary_switches": "nr_involuntary_switches",
    "nr_migrations": "nr_migrations",
    "sum_exec_runtime_ns": "sum_exec_runtime",
    # CONFIG_SCHEDSTATS and kernel.sched_schedstats=1 only:
    "wait_sum_ns": "wait_sum",
    "wait_max_ns": "wait_max",
    "wait_count": "wait_count",
    "sum_sleep_runtime_ns": "sum_sleep_runtime",
    "sum_block_runtime_ns": "sum_block_runtime",  # D state only, 5.16+
    "iowait_sum_ns": "iowait_sum",
    "iowait_count": "iowait_count",
    "sleep_max_ns": "sleep_max",
    "block_max_ns": "block_max",
    "exec_max_ns": "exec_max",
    "nr_wakeups": "nr_wakeups",
    "nr_wakeups_sync": "nr_wakeups_sync",
    "nr_wakeups_migrate": "nr_wakeups_migrate",
    "policy": "policy",
    "prio": "prio",
}
SCHED_SCHEMA = pa.schema(
    [("tick", pa.uint32()), ("t_ns", pa.int64()), ("tid", pa.int32())] + [(name, pa.int64()) for name in SCHED_FIELDS]
)

SYSTEM_SCHEMA = pa.schema(
    [
        ("t_ns", pa.int64()),
        ("cpu", pa.int16()),  # -1: the whole machine ("cpu" line of /proc/stat); else one CPU
        # /proc/stat jiffies (cumulative, clock ticks)
        ("user", pa.int64()),
        ("nice", pa.int64()),
        ("system", pa.int64()),
        ("idle", pa.int64()),
        ("iowait", pa.int64()),
        ("irq", pa.int64()),
        ("softirq", pa.int64()),
        ("steal", pa.int64()),
        # whole-machine rows only (null on per-CPU rows)
        ("ctxt", pa.int64()),  # context switches since boot
        ("intr", pa.int64()),  # interrupts since boot
        ("procs_running", pa.int64()),
        ("procs_blocked", pa.int64()),
        ("psi_cpu_some_us", pa.int64()),  # /proc/pressure/*: cumulative stall µs ("total=")
        ("psi_io_some_us", pa.int64()),
        ("psi_io_full_us", pa.int64()),
        ("psi_memory_some_us", pa.int64()),
        ("psi_memory_full_us", pa.int64()),
    ]
)

THREADS_SCHEMA = pa.schema(
    [
        ("t_ns", pa.int64()),  # when this row was learned (a thread's first row: when it was first seen)
        ("tid", pa.int32()),
        ("pid", pa.int32()),
        ("comm", pa.string()),  # thread name, /proc/<pid>/task/<tid>/comm (latest row wins)
        ("process", pa.string()),  # process name, /proc/<pid>/comm
        ("cmdline", pa.string()),  # null when recorded with --redact
        ("starttime", pa.int64()),  # stat 22, clock ticks after boot: tells a reused tid apart
        ("policy", pa.int8()),  # when first seen; changes are `policy_changed` events (and in samples)
        ("rtprio", pa.int16()),
    ]
)

EVENTS_SCHEMA = pa.schema(
    [
        ("t_ns", pa.int64()),
        ("kind", pa.string()),  # marker, process_appeared, process_exited, thread_appeared, thread_exited,
        # thread_renamed, policy_changed, target_missing, ...
        ("pid", pa.int32()),
        ("tid", pa.int32()),
        ("text", pa.string()),
    ]
)

# Per target process, at the system rate (20 Hz): /proc/<pid>/statm, converted from pages to KiB.
PROCESSES_SCHEMA = pa.schema(
    [
        ("t_ns", pa.int64()),
        ("pid", pa.int32()),
        ("vsize_kib", pa.int64()),  # statm size
        ("rss_kib", pa.int64()),  # statm resident
        ("shared_kib", pa.int64()),  # statm shared (file-backed resident pages)
    ]
)

# Per thread per chunk written: when it was first and last read in that chunk and how many rows it
# has there. Small (threads x chunks), so thread lifetimes never need a scan of the samples.
THREAD_SEEN_SCHEMA = pa.schema(
    [("tid", pa.int32()), ("first_ns", pa.int64()), ("last_ns", pa.int64()), ("rows", pa.int64())]
)

_DICT_STR = pa.dictionary(pa.int32(), pa.string())
# Read tiers (README, "Read tiers"): one row per thread when it is found and at every change of tier. From
# t_ns on, the thread is read every interval_ns (the fast tier: every tick; the slow tier: once per phase).
TIERS_SCHEMA = pa.schema(
    [
        ("t_ns", pa.int64()),
        ("tid", pa.int32()),
        ("pid", pa.int32()),
        ("tier", _DICT_STR),  # fast | slow
        ("interval_ns", pa.int64()),
        ("why", _DICT_STR),  # start | engine | realtime | --fast | ran | quiet | all fast
    ]
)
# The ticks of a recording by the eBPF sampler (samplers/ebpf/sampler_rows.py), whose samples hold a thread's
# row only where it changed (and every 25 ticks): analyses/source.py fills the other ticks from these.
SAMPLER_TICKS_SCHEMA = pa.schema([("tick", pa.uint32()), ("t_ns", pa.int64())])

TRUTH_SCHEMA = pa.schema(
    [("cause", pa.string()), ("tid", pa.int32()), ("start_ns", pa.int64()), ("end_ns", pa.int64())]
)
CYCLES_SCHEMA = pa.schema(
    [("tid", pa.int32()), ("start_ns", pa.int64()), ("end_ns", pa.int64()), ("deadline_ns", pa.int64())]
)

# --------------------------------------------------------------------------------------------------
# Exact sources (README, "Exact sources"): written only when the recording had them; see samplers/taskstats.py and
# samplers/ebpf/tables.py for how each column is filled.

# Per-thread taskstats (generic netlink) at the tick, for the threads it was read for. Delay totals
# and maxima in ns, cumulative as the kernel keeps them; null where the kernel's struct version lacks
# the field, or where delay accounting was off for that thread (unknown, not zero).
TASKSTATS_SCHEMA = pa.schema(
    [
        ("tick", pa.uint32()),
        ("t_ns", pa.int64()),  # CLOCK_MONOTONIC ns when the query was sent
        ("tid", pa.int32()),
        ("pid", pa.int32()),  # ac_tgid (struct version 12+; else null)
        ("version", pa.int16()),  # struct taskstats version the kernel sent
    ]
    + [
        (name, pa.int64())
        for name in (
            "cpu_count",
            "cpu_delay_ns",
            "blkio_count",
            "blkio_delay_ns",
            "swapin_count",
            "swapin_delay_ns",
            "freepages_count",
            "freepages_delay_ns",
            "thrashing_count",
            "thrashing_delay_ns",
            "compact_count",
            "compact_delay_ns",
            "wpcopy_count",
            "wpcopy_delay_ns",
            "irq_count",
            "irq_delay_ns",
            "cpu_delay_max_ns",
            "blkio_delay_max_ns",
            "swapin_delay_max_ns",
            "freepages_delay_max_ns",
            "thrashing_delay_max_ns",
            "compact_delay_max_ns",
            "wpcopy_delay_max_ns",
            "irq_delay_max_ns",
        )
    ]
    + [
        (name, pa.int64())
        for name in (
            "age_us",
            "run_ns",
            "nvcsw",
            "nivcsw",
            "minflt",
            "majflt",
            "read_bytes",
            "write_bytes",
        )
    ]
)


SCHED_SWITCH_SCHEMA = pa.schema(
    [
        ("t_ns", pa.int64()),
        ("cpu", pa.int16()),
        ("prev_tid", pa.int32()),
        ("prev_pid", pa.int32()),
        ("prev_comm", _DICT_STR),
        ("prev_prio", pa.int16()),
        ("prev_state", pa.int64()),
        ("prev_state_char", _DICT_STR),
        ("next_tid", pa.int32()),
        ("next_pid", pa.int32()),
        ("next_comm", _DICT_STR),
        ("next_prio", pa.int16()),
    ]
)
SCHED_WAKEUP_SCHEMA = pa.schema(
    [
        ("t_ns", pa.int64()),
        ("cpu", pa.int16()),
        ("kind", _DICT_STR),
        ("tid", pa.int32()),
        ("pid", pa.int32()),
        ("comm", _DICT_STR),
        ("prio", pa.int16()),
        ("target_cpu", pa.int16()),
        ("waker_tid", pa.int32()),
        ("waker_pid", pa.int32()),
        ("waker_comm", _DICT_STR),
        ("waker_context", _DICT_STR),
        ("waker_function", _DICT_STR),
    ]
)
PAGE_FAULTS_SCHEMA = pa.schema(
    [
        ("t_ns", pa.int64()),
        ("cpu", pa.int16()),
        ("tid", pa.int32()),
        ("pid", pa.int32()),
        ("address", pa.uint64()),
        ("ip", pa.uint64()),
        ("error_code", pa.int64()),
    ]
)
BLOCK_RQ_SCHEMA = pa.schema(
    [
        ("t_ns", pa.int64()),
        ("cpu", pa.int16()),
        ("kind", _DICT_STR),
        ("dev", pa.uint32()),
        ("major", pa.int32()),
        ("minor", pa.int32()),
        ("sector", pa.uint64()),
        ("nr_sector", pa.int64()),
        ("bytes", pa.int64()),
        ("rwbs", _DICT_STR),
        ("error", pa.int32()),
        ("tid", pa.int32()),
        ("pid", pa.int32()),
        ("comm", _DICT_STR),
    ]
)
EBPF_LOST_SCHEMA = pa.schema([("t_ns", pa.int64()), ("kind", _DICT_STR), ("lost_total", pa.int64())])

EBPF_SCHEMAS: dict[str, pa.Schema] = {
    "sched_switch": SCHED_SWITCH_SCHEMA,
    "sched_wakeup": SCHED_WAKEUP_SCHEMA,
    "page_faults": PAGE_FAULTS_SCHEMA,
    "block_rq": BLOCK_RQ_SCHEMA,
    "ebpf_lost": EBPF_LOST_SCHEMA,
}

# --------------------------------------------------------------------------------------------------
# Engine sources (JACK, PipeWire): the engine's own records, in the capture's clock (CLOCK_MONOTONIC ns;
# engine clocks are converted, the measured offset is in meta["sources"]["engine"]). A column a source
# cannot fill is null, never a made-up zero. `engine` is "jack" or "pipewire".

# One row per engine cycle the source observed (PipeWire: every profiler record; JACK: where observable).
ENGINE_CYCLES_SCHEMA = pa.schema(
    [
        ("t_ns", pa.int64()),  # the driver's cycle start (signal/wake-up of the driver), capture clock
        ("engine", _DICT_STR),
        ("driver", pa.string()),  # driver node/client name
        ("cycle", pa.int64()),  # engine's own cycle counter, null when it has none
        ("quantum_frames", pa.int32()),
        ("rate_hz", pa.int32()),
        ("period_ns", pa.int64()),  # nominal period = quantum / rate
        ("delay_ns", pa.int64()),  # how late the driver woke vs its nominal time, null if unknown
        ("end_ns", pa.int64()),  # when the last node of the cycle finished, capture clock, null if unknown
        ("xruns_total", pa.int64()),  # engine's cumulative xrun counter at this cycle, null if none
    ]
)
# One row per node (client) per cycle: the engine's own per-client timing.
ENGINE_NODES_SCHEMA = pa.schema(
    [
        ("t_ns", pa.int64()),  # the cycle's t_ns (joins engine_cycles)
        ("engine", _DICT_STR),
        ("node_id", pa.int32()),
        ("name", _DICT_STR),  # client/node name
        ("signal_ns", pa.int64()),  # when the node was signalled (made runnable), capture clock
        ("awake_ns", pa.int64()),  # when it woke up
        ("finish_ns", pa.int64()),  # when it finished its process call
        ("status", pa.int16()),  # engine's status code (PipeWire: activation status; JACK: state)
        # PipeWire: the engine counted this node late/xrun in this cycle. JACK: null (jack2 says it per
        # cycle in no record; captures before resignal_ns hold the recorder's own flag here).
        ("xrun", pa.bool_()),
        # JACK: the client's next signal as first read, and its finish stamp in that read (null: it had
        # never finished); null when not seen. Lateness is derived from these (analyses.engine).
        ("resignal_ns", pa.int64()),
        ("finish_at_resignal_ns", pa.int64()),
    ]
)
# One row per xrun the ENGINE reported (never inferred by us).
XRUNS_SCHEMA = pa.schema(
    [
        ("t_ns", pa.int64()),  # when the engine reported it, capture clock
        ("engine", _DICT_STR),
        ("delay_us", pa.float64()),  # delay the engine reports (JACK xrun callback delayed_usecs), null if none
        ("client", pa.string()),  # the client the engine blamed, null if it named none
        ("source", _DICT_STR),  # "callback" | "server-log" | "profiler" | ...
        ("text", pa.string()),  # the raw line/record it came from, when there is one
    ]
)
# Clients (nodes) and their processes: at start (event "present") and as they come and go.
ENGINE_CLIENTS_SCHEMA = pa.schema(
    [
        ("t_ns", pa.int64()),
        ("engine", _DICT_STR),
        ("event", _DICT_STR),  # "present" | "registered" | "unregistered"
        ("name", pa.string()),
        ("pid", pa.int32()),  # null when the engine does not say
        ("node_id", pa.int32()),  # PipeWire node id; null on JACK
    ]
)
# Ports and connections: a snapshot at start and at every graph change ("connected"/"disconnected"/"snapshot").
ENGINE_GRAPH_SCHEMA = pa.schema(
    [
        ("t_ns", pa.int64()),
        ("engine", _DICT_STR),
        ("event", _DICT_STR),
        ("src_client", pa.string()),
        ("src_port", pa.string()),
        ("dst_client", pa.string()),
        ("dst_port", pa.string()),
    ]
)
# Engine-level status at ~20 Hz and on change: buffer size, rate, the engine's own (smoothed) DSP load.
ENGINE_STATUS_SCHEMA = pa.schema(
    [
        ("t_ns", pa.int64()),
        ("engine", _DICT_STR),
        ("quantum_frames", pa.int32()),
        ("rate_hz", pa.int32()),
        ("dsp_load_percent", pa.float64()),  # JACK cpu_load(): smoothed by JACK, not a per-cycle figure
    ]
)
ENGINE_SCHEMAS: dict[str, pa.Schema] = {
    "engine_cycles": ENGINE_CYCLES_SCHEMA,
    "engine_nodes": ENGINE_NODES_SCHEMA,
    "xruns": XRUNS_SCHEMA,
    "engine_clients": ENGINE_CLIENTS_SCHEMA,
    "engine_graph": ENGINE_GRAPH_SCHEMA,
    "engine_status": ENGINE_STATUS_SCHEMA,
}

SCHEMAS: dict[str, pa.Schema] = {
    "samples": SAMPLES_SCHEMA,
    "sched": SCHED_SCHEMA,
    "system": SYSTEM_SCHEMA,
    "threads": THREADS_SCHEMA,
    "events": EVENTS_SCHEMA,
    "processes": PROCESSES_SCHEMA,
    "thread_seen": THREAD_SEEN_SCHEMA,
    "tiers": TIERS_SCHEMA,
    "sampler_ticks": SAMPLER_TICKS_SCHEMA,
    "truth": TRUTH_SCHEMA,
    "cycles": CYCLES_SCHEMA,
    "taskstats": TASKSTATS_SCHEMA,
    **EBPF_SCHEMAS,
    **ENGINE_SCHEMAS,
}

# --------------------------------------------------------------------------------------------------
# The flight recorder's own capture (flight.ssf, README "Flight recorder"): the long run's counters beside
# the windows it saved. Times are the capture clock (CLOCK_MONOTONIC ns).

# One row per window the triggers asked for: saved, or skipped (a limit, a write error) with why.
FLIGHT_WINDOWS_SCHEMA = pa.schema(
    [
        ("t_ns", pa.int64()),  # the first trigger of the window
        ("start_ns", pa.int64()),  # the window: [first trigger - before, last trigger + after]
        ("end_ns", pa.int64()),
        ("triggers", pa.int32()),  # triggers merged into it
        ("kind", pa.string()),  # the first trigger's kind: xrun | late | marker | rule
        ("text", pa.string()),  # the first trigger's description
        ("status", pa.string()),  # saved | skipped
        ("file", pa.string()),  # the window's file name (in the output directory), null when skipped
        ("bytes", pa.int64()),
        ("verdict", pa.string()),  # the window's first verdict (root thread and cause), null when skipped
        ("reason", pa.string()),  # why it was skipped
    ]
)
# One row per minute of the recording the watcher saw (a partial first and last minute included).
FLIGHT_MINUTES_SCHEMA = pa.schema(
    [
        ("t_ns", pa.int64()),  # the minute's start: recording start + k minutes
        ("covered_ns", pa.int64()),  # how much of the minute the ring's segments covered
        ("xruns", pa.int64()),  # xruns the engine reported (reports less than a period apart count once)
        ("missed_deadlines", pa.int64()),  # engine cycles that ended after their period
        ("stalls", pa.int64()),  # episodes matching a --trigger rule (null without a rule)
        ("markers", pa.int64()),
    ]
)
# Bursts of xruns and missed deadlines: events less than the burst gap apart are one burst.
FLIGHT_BURSTS_SCHEMA = pa.schema(
    [
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("xruns", pa.int64()),
        ("missed_deadlines", pa.int64()),
        ("gap_before_ns", pa.int64()),  # from the previous burst's end; null for the first
    ]
)
SCHEMAS.update(
    {
        "flight_windows": FLIGHT_WINDOWS_SCHEMA,
        "flight_minutes": FLIGHT_MINUTES_SCHEMA,
        "flight_bursts": FLIGHT_BURSTS_SCHEMA,
    }
)


# --------------------------------------------------------------------------------------------------
# Writing


def _to_arrow(name: str, data: pa.Table | pd.DataFrame | Mapping[str, Any]) -> pa.Table:
    schema = SCHEMAS.get(name)
    if isinstance(data, pa.Table):
        table = data
    elif "pandas" in sys.modules and isinstance(data, sys.modules["pandas"].DataFrame):
        table = pa.Table.from_pandas(data, preserve_index=False)
    else:
        table = pa.table(dict(data))
    if schema is not None:
        # Each name list once: `schema.names` and `table.column_names` build a new list at every access (a
        # membership test in them per column was a tenth of this function on the samples chunks).
        names, have = schema.names, set(table.column_names)
        for column in names:
            if column not in have:
                table = table.append_column(column, pa.nulls(table.num_rows, schema.field(column).type))
        wanted = set(names)
        extra = [c for c in table.column_names if c not in wanted]
        table = table.select(names + extra)
        known = pa.schema([schema.field(n) for n in names] + [table.schema.field(c) for c in extra])
        if not table.schema.equals(known, check_metadata=True):  # a cast to the same types still walks each
            table = table.cast(known)
    return table


_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class CaptureWriter:
    """Appends records to a capture file; every record is flushed to the kernel as it is written."""

    def __init__(self, path: str | os.PathLike[str], meta: Mapping[str, Any]) -> None:
        self.path = Path(path)
        try:
            # Created, never opened over an existing name: a link planted at a predictable name in a
            # shared directory is not followed (O_NOFOLLOW) and nothing is truncated (O_EXCL). The
            # recorder removes an old capture first when told to (--force).
            self._fd = os.open(self.path, _CREATE_FLAGS, 0o644)
        except FileExistsError:
            raise CaptureFormatError(
                f"{self.path} exists already: give another name, or --force to replace it"
            ) from None
        except OSError as err:
            raise CaptureFormatError(f"cannot write the capture {self.path}: {err.strerror}") from err
        # Held until the file is closed (or the writer exits): a reader of a file without a trailer can tell
        # a writer still finishing it (_being_written) from one that was killed.
        with contextlib.suppress(OSError):
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.bytes_written = 0
        self.rows_written: dict[str, int] = {}
        self._write(_HEADER.pack(MAGIC, FORMAT_VERSION, 0))
        self.update_meta(dict(meta, format_version=FORMAT_VERSION))

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        self.bytes_written += len(data)

    def _record(self, tag: bytes, payload: bytes) -> None:
        self._write(_RECORD.pack(tag, len(payload), record_crc(FORMAT_VERSION, tag, len(payload), payload)) + payload)

    def update_meta(self, patch: Mapping[str, Any]) -> None:
        self._record(TAG_META, json.dumps(patch, sort_keys=True, default=_json_default).encode())

    def append(self, name: str, data: pa.Table | pd.DataFrame | Mapping[str, Any]) -> None:
        table = _to_arrow(name, data)
        if table.num_rows == 0:
            return
        self.append_chunk(name, table)
        if name == "samples":  # the index of thread lifetimes that keeps readers from scanning samples
            self.append("thread_seen", thread_seen(table))

    def append_chunk(self, name: str, table: pa.Table) -> None:
        """`table` as one chunk of the table `name`, as it is: `append` first gives it its schema's columns
        and types. For a table of another recorder, or a chunk made by hand to see what a reader does."""
        encoded_name = name.encode()
        self._record(TAG_TABLE, struct.pack("<H", len(encoded_name)) + encoded_name + encode_chunk(table))
        self.rows_written[name] = self.rows_written.get(name, 0) + table.num_rows

    def name_lost(self) -> str | None:
        """Why the capture's name no longer leads to the file being written (it, or its directory, was
        removed or renamed, or another file took the name), or None. Writes to an open file succeed
        whatever happens to its name: only this check tells a recording that reached no file."""
        if self._fd < 0:
            return None
        mine = os.fstat(self._fd)
        try:
            there = os.lstat(self.path)
        except FileNotFoundError:
            if not self.path.parent.is_dir():
                return f"its directory {self.path.parent} was removed or renamed during the recording"
            return "it was removed or renamed during the recording"
        except OSError as err:
            return f"its name cannot be reached any more ({err.strerror})"
        if (there.st_dev, there.st_ino) != (mine.st_dev, mine.st_ino):
            return "another file took its name during the recording"
        return None

    def close(self, trailer: Mapping[str, Any] | None = None) -> None:
        """Finish the file. `trailer=None` leaves it as a killed recorder would (for tests)."""
        if self._fd < 0:
            return
        if trailer is not None:
            body = dict(trailer, rows=dict(self.rows_written))
            self._record(TAG_TRAILER, json.dumps(body, sort_keys=True, default=_json_default).encode())
        os.close(self._fd)
        self._fd = -1

    def abandon(self) -> None:
        """Close without writing more (after a write error): what was written reads back, flagged."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(None if exc[0] is not None else {})


def thread_seen(samples: pa.Table) -> pa.Table:
    """One row per thread of a samples chunk: first and last read time, and its row count there; the threads in
    the order each first appears. By numpy on the two columns: Arrow's group_by starts its executor for each
    chunk, 3-5 ms a chunk in the writer (cold after a sleep) against 0.1-0.3 ms (bench/writer_replay.py)."""
    if samples.column("tid").null_count or samples.column("t_ns").null_count:  # not from a recorder: Arrow's way
        grouped = (
            samples.select(["tid", "t_ns"])
            .group_by("tid")
            .aggregate([("t_ns", "min"), ("t_ns", "max"), ("t_ns", "count")])
        )
        columns = [grouped["tid"], grouped["t_ns_min"], grouped["t_ns_max"], grouped["t_ns_count"].cast(pa.int64())]
        return pa.Table.from_arrays(columns, schema=THREAD_SEEN_SCHEMA)
    tid = samples.column("tid").to_numpy()
    t_ns = samples.column("t_ns").to_numpy()
    n = len(tid)
    order = None
    if n > 1 and np.any(tid[1:] < tid[:-1]):  # the eBPF writer's rows come ordered by tid; /proc's by tick
        order = np.argsort(tid, kind="stable")
        tid, t_ns = tid[order], t_ns[order]
    starts = np.flatnonzero(np.r_[True, tid[1:] != tid[:-1]]) if n else np.zeros(0, dtype=np.int64)
    first = np.minimum.reduceat(t_ns, starts) if n else t_ns[:0]
    last = np.maximum.reduceat(t_ns, starts) if n else t_ns[:0]
    rows = np.diff(np.r_[starts, n]).astype(np.int64)
    tids = tid[starts]
    if order is not None:  # each thread where it first appears (a stable sort keeps its first row first)
        appears = np.argsort(order[starts], kind="stable")
        tids, first, last, rows = tids[appears], first[appears], last[appears], rows[appears]
    return pa.table({"tid": tids, "first_ns": first, "last_ns": last, "rows": rows}, schema=THREAD_SEEN_SCHEMA)


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, set | frozenset | tuple):
        return sorted(value) if isinstance(value, set | frozenset) else list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


# --------------------------------------------------------------------------------------------------
# Reading


def record_crc(version: int, tag: bytes, length: int, payload: bytes | memoryview) -> int:
    """The CRC-32 a record of `version` carries: of the payload (1); of tag, length and payload (2)."""
    if version < 2:
        return zlib.crc32(payload)
    return zlib.crc32(payload, zlib.crc32(tag + struct.pack("<I", length)))


KNOWN_TAGS = (TAG_META, TAG_TABLE, TAG_TRAILER)


@dataclass(frozen=True)
class Damage:
    """Rows of `table` lost to damage: they lay after `after_ns` and before `before_ns` (the table's own
    last row read before the hole and first row read after it; None: no such row, or the two disagree)."""

    table: str
    after_ns: int | None
    before_ns: int | None


@dataclass
class _Hole:
    start: int  # [start, end): the bytes skipped
    end: int
    # The tables of the records the hole held, when their headers still chain from start to end (a damaged
    # payload, a cut record); None when they do not say.
    tables: frozenset[str] | None = None


@dataclass
class _Contents:
    meta: dict[str, Any] = field(default_factory=dict)
    trailer: dict[str, Any] | None = None
    chunks: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # name -> [(offset, length)]
    rows: dict[str, int] = field(default_factory=dict)  # rows per table, from each chunk's Parquet footer
    warnings: list[str] = field(default_factory=list)
    version: int = FORMAT_VERSION
    size: int = 0  # of the file
    # (record offset, table, chunk offset, chunk length) in file order: to name what a hole took
    order: list[tuple[int, str, int, int]] = field(default_factory=list)
    holes: list[_Hole] = field(default_factory=list)
    damage: list[Damage] = field(default_factory=list)
    seen: dict[tuple[int, int], list[int]] = field(default_factory=dict)  # (length, CRC) -> table record offsets
    copies: dict[str, list[int]] = field(default_factory=dict)  # table -> [chunks, rows] dropped as copies


# Records longer than this are checked from prefix CRCs kept every _CHECKPOINT bytes once damage was met.
_CHECKPOINT = 4096
_DIRECT = 2 * _CHECKPOINT
_HOLE_RECORDS = 64  # a hole is told apart record by record up to this many records


@functools.cache
def _shift_tables() -> tuple[tuple[list[int], ...], ...]:
    """Level j: four byte tables of what 2**j zero bytes do to a CRC-32 register. zlib's crc32 is linear
    in the value it starts from: crc32(data, v) == crc32(data, 0) ^ shift(v, len(data))."""
    crc_table = []
    for byte in range(256):
        c = byte
        for _ in range(8):
            c = (c >> 1) ^ (0xEDB88320 if c & 1 else 0)
        crc_table.append(c)

    def tables(columns: list[int]) -> tuple[list[int], ...]:
        out = []
        for k in range(4):
            table = [0] * 256
            for b in range(1, 256):
                low = b & -b
                table[b] = table[b ^ low] ^ columns[8 * k + low.bit_length() - 1]
            out.append(table)
        return tuple(out)

    # One zero byte: v -> table[v & 0xFF] ^ (v >> 8).
    levels = [tables([crc_table[1 << i] if i < 8 else 1 << (i - 8) for i in range(32)])]
    for _ in range(31):
        last = levels[-1]
        levels.append(tables([_apply(last, _apply(last, 1 << i)) for i in range(32)]))
    return tuple(levels)


def _apply(t: tuple[list[int], ...], v: int) -> int:
    return t[0][v & 0xFF] ^ t[1][(v >> 8) & 0xFF] ^ t[2][(v >> 16) & 0xFF] ^ t[3][v >> 24]


def crc_shift(value: int, length: int) -> int:
    """What `length` zero bytes do to a CRC-32 started from `value` (beyond what they do to 0)."""
    for t0, t1, t2, t3 in _shift_tables():
        if not length:
            break
        if length & 1:
            value = t0[value & 0xFF] ^ t1[(value >> 8) & 0xFF] ^ t2[(value >> 16) & 0xFF] ^ t3[value >> 24]
        length >>= 1
    return value


class _Records:
    """The records of a mapped capture, and the next intact one after damage, in time linear in the file.

    Checking a record's CRC reads its payload, as long as its header claims; a crafted file of tags that
    each claim the rest of the file made finding the next intact record quadratic (issue 23 item 8). So
    once damage was met, a long record is checked from prefix CRCs: with Z(q) the CRC-32 of the file's
    first q bytes, the payload [a, e) started from h has crc32(payload, h) == Z(e) ^ crc_shift(Z(a) ^ h,
    e - a). Z is kept every _CHECKPOINT bytes, computed once as far as a record reaches; Z at any offset
    costs at most _CHECKPOINT bytes more. Before any damage records are checked directly (each byte once).
    """

    def __init__(self, buf: mmap.mmap, size: int, version: int) -> None:
        self.buf, self.size, self.version = buf, size, version
        self.view = memoryview(buf)
        self.damaged = False
        self._prefix = [0]  # Z at k * _CHECKPOINT
        self._next = dict.fromkeys((*KNOWN_TAGS, MAGIC), -1)  # the next offset of each, once looked for
        self._found = -1

    def close(self) -> None:
        self.view.release()

    def header_at(self, offset: int) -> int | None:
        """The version of a capture header at `offset` (one capture joined after another), or None."""
        if self.buf[offset : offset + len(MAGIC)] != MAGIC or offset + _HEADER.size > self.size:
            return None
        _, version, _ = _HEADER.unpack_from(self.buf, offset)
        return version if OLDEST_VERSION <= version <= FORMAT_VERSION else None

    def at(self, offset: int) -> tuple[bytes, int, int, bool] | None:
        """(tag, length, CRC, CRC ok) of the record at `offset`; None when it leaves the file."""
        if offset + _RECORD.size > self.size:
            return None
        tag, length, crc = _RECORD.unpack_from(self.buf, offset)
        a = offset + _RECORD.size
        e = a + length
        if e > self.size:
            return None
        if offset == self._found:  # the record resync() just checked
            return tag, length, crc, True
        if length <= _DIRECT or not self.damaged:
            return tag, length, crc, record_crc(self.version, tag, length, self.view[a:e]) == crc
        start = zlib.crc32(tag + struct.pack("<I", length)) if self.version >= 2 else 0
        return tag, length, crc, self._z(e) ^ crc_shift(self._z(a) ^ start, length) == crc

    def _z(self, q: int) -> int:
        k = q // _CHECKPOINT
        prefix = self._prefix
        while len(prefix) <= k:
            j = len(prefix)
            prefix.append(zlib.crc32(self.view[(j - 1) * _CHECKPOINT : j * _CHECKPOINT], prefix[-1]))
        return zlib.crc32(self.view[k * _CHECKPOINT : q], prefix[k])

    def resync(self, start: int) -> int | None:
        """The offset of the next intact record with a known tag, or of a capture header, at or after
        `start`; None when none follows. Each tag is looked for once per stretch of the file."""
        self.damaged = True
        found = self._next
        while True:
            for tag, where in found.items():
                if where < start:
                    at = self.buf.find(tag, start)
                    found[tag] = self.size if at < 0 else at
            at = min(found.values())
            if at >= self.size:
                return None
            if self.header_at(at) is not None or ((record := self.at(at)) is not None and record[3]):
                self._found = at
                return at
            start = at + 1

    def tables_between(self, start: int, end: int) -> frozenset[str] | None:
        """The tables of the records from `start` to `end` when their headers still chain across exactly
        (their payloads damaged, or the last one cut by the end of the file), else None."""
        names: set[str] = set()
        offset = start
        for _ in range(_HOLE_RECORDS):
            if offset >= end:
                return frozenset(names)
            if offset + _RECORD.size > self.size:
                return None
            tag, length, _ = _RECORD.unpack_from(self.buf, offset)
            body = offset + _RECORD.size
            following = body + length
            if tag not in KNOWN_TAGS or (following > end and end < self.size):
                return None
            if tag == TAG_TABLE:
                name = _table_name(self.buf[body : min(following, body + 2 + 0xFFFF, self.size)])
                if name is None or not name.isidentifier():
                    return None
                names.add(name)
            offset = following
        return None


def _json_object(payload: bytes, what: str, offset: int, contents: _Contents) -> dict[str, Any] | None:
    try:
        value = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        contents.warnings.append(f"the {what} record at byte {offset} is not JSON: skipped")
        return None
    if not isinstance(value, dict):
        contents.warnings.append(f"the {what} record at byte {offset} is not a JSON object: skipped")
        return None
    return value


def _typed(value: dict[str, Any], spec: Obj, what: str, offset: int, contents: _Contents) -> dict[str, Any]:
    """`value` without the keys the toolkit reads that do not have the type it needs (capture/shape.py)."""
    malformed: list[str] = []
    kept = conform(value, spec, malformed)
    contents.warnings.extend(
        f"the {what} record at byte {offset} has a malformed {key!r}: ignored (read as unknown)" for key in malformed
    )
    return kept


def _table_name(payload: bytes) -> str | None:
    """The table a TABL payload names (u16 length, UTF-8), or None when it names none readable."""
    if len(payload) < 2:
        return None
    (name_len,) = struct.unpack_from("<H", payload)
    if 2 + name_len > len(payload):
        return None
    try:
        return payload[2 : 2 + name_len].decode() or None
    except UnicodeDecodeError:
        return None


def _table_record(payload: bytes, body_offset: int, offset: int, contents: _Contents) -> None:
    name = _table_name(payload)
    if name is None:
        contents.warnings.append(f"the table record at byte {offset} has no readable table name: skipped")
        return
    name_len = len(name.encode())
    chunk = payload[2 + name_len :]
    try:
        head = chunk_head(chunk)
    except (pa.ArrowException, OSError, ValueError, TypeError):
        contents.warnings.append(
            f"the {name} chunk at byte {offset} is not a readable Arrow IPC or Parquet file: skipped"
        )
        return
    rows, schema = head.rows, head.schema
    wrong = _schema_mismatch(name, schema)
    if wrong:
        contents.warnings.append(f"the {name} chunk at byte {offset} has {wrong}: skipped")
        return
    start, length = body_offset + 2 + name_len, len(chunk)
    contents.chunks.setdefault(name, []).append((start, length))
    contents.rows[name] = contents.rows.get(name, 0) + rows
    contents.order.append((offset, name, start, length))


def _kind(dtype: pa.DataType) -> str:
    if pa.types.is_dictionary(dtype):
        return _kind(dtype.value_type)
    if pa.types.is_integer(dtype):
        return "integer"
    if pa.types.is_floating(dtype):
        return "float"
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return "text"
    return str(dtype)


def _schema_mismatch(name: str, schema: pa.Schema) -> str | None:
    """What makes a chunk unfit for its table (a column of another kind, a required column missing:
    capture/shape.py), or None. Other columns may be missing (older captures lack later nullable ones) and
    extra ones are kept."""
    known = SCHEMAS.get(name)
    if known is None:
        return None
    for column in schema:
        if column.name in known.names and not pa.types.is_null(column.type):
            want = known.field(column.name).type
            if _kind(column.type) != _kind(want):
                return f"a column {column.name!r} of type {column.type}, not {want}"
    if not set(schema.names) & set(known.names):
        return f"none of the {name} table's columns"
    if len(set(schema.names)) < len(schema.names):
        return "two columns of one name"
    lacking = [c for c in REQUIRED_COLUMNS.get(name, ()) if c not in schema.names]
    if lacking:
        return f"no column {', '.join(map(repr, lacking))}, which every row of it needs"
    return None


def _scan(fh: BinaryIO, path: Path, size: int) -> _Contents:
    head = fh.read(_HEADER.size)
    if len(head) < _HEADER.size or not head.startswith(MAGIC):
        raise CaptureFormatError(f"{path} is not a capture file (it does not start with the forensics capture magic)")
    _, version, _flags = _HEADER.unpack(head)
    if version > FORMAT_VERSION:
        raise CaptureFormatError(
            f"{path} is capture format version {version}, newer than this forensics reads "
            f"(up to {FORMAT_VERSION}): upgrade spike-stall-forensics to read it"
        )
    if version < OLDEST_VERSION:
        raise CaptureFormatError(
            f"{path} says capture format version {version}, which no forensics ever wrote "
            f"(this one reads {OLDEST_VERSION} to {FORMAT_VERSION}): the file is damaged or not from this tool"
        )
    contents = _Contents(version=version, size=size)
    if size <= _HEADER.size:
        contents.warnings.append("capture holds no record after its header (the recorder stopped at once?)")
    else:
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            _scan_records(buf, size, version, contents)
    if contents.holes:
        _name_holes(fh, contents)
    _check_counts(contents)
    if contents.trailer is None and _being_written(fh):
        contents.warnings.append(
            "capture is still being written (its writer has it open: a recording, or the rows of the eBPF "
            "sampler made after one); what was written so far reads back: read it again once it is done"
        )
    elif contents.trailer is None:
        contents.warnings.append(
            "capture has no trailer: the recorder did not finish (killed?); what was written reads back, "
            "but the achieved interval and missed ticks are unknown"
        )
    return contents


def _being_written(fh: BinaryIO) -> bool:
    """Whether a CaptureWriter has the file open (its lock, CaptureWriter.__init__); False where no lock can be
    taken at all (a file system without flock)."""
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    return False


def _scan_records(buf: mmap.mmap, size: int, version: int, contents: _Contents) -> None:
    records = _Records(buf, size, version)
    try:
        _read_records(records, contents)
    finally:
        records.close()


def _read_records(records: _Records, contents: _Contents) -> None:
    buf, size = records.buf, records.size
    offset = _HEADER.size
    while offset < size:
        joined = records.header_at(offset)
        if joined is not None:
            contents.warnings.append(
                f"another capture (format {joined}) starts at byte {offset}: two files joined into one? "
                "Read on as one capture"
            )
            records.version = joined
            offset += _HEADER.size
            continue
        record = records.at(offset)
        if record is None or not record[3]:
            again = records.resync(offset + 1)
            if again is None:
                if record is None:
                    contents.warnings.append(
                        f"capture is truncated: the last {size - offset} bytes (from byte {offset}) are a cut record"
                    )
                else:
                    contents.warnings.append(
                        f"capture record at byte {offset} is damaged (CRC mismatch), and no intact record follows: "
                        f"the last {size - offset} bytes are lost"
                    )
                contents.holes.append(_Hole(offset, size, records.tables_between(offset, size)))
                return
            contents.warnings.append(
                f"capture bytes {offset} to {again} are damaged ({'cut' if record is None else 'CRC mismatch'}): "
                "skipped; reading went on at the next intact record"
            )
            contents.holes.append(_Hole(offset, again, records.tables_between(offset, again)))
            offset = again
            continue
        tag, length, crc, _ = record
        body_offset = offset + _RECORD.size
        payload = buf[body_offset : body_offset + length]
        if tag == TAG_META:
            meta = _json_object(payload, "metadata", offset, contents)
            if meta is not None:
                contents.meta.update(_typed(meta, META, "metadata", offset, contents))
        elif tag == TAG_TABLE:
            if not _copy(payload, length, crc, offset, buf, contents):
                _table_record(payload, body_offset, offset, contents)
        elif tag == TAG_TRAILER:
            trailer = _json_object(payload, "trailer", offset, contents)
            if trailer is not None:
                contents.trailer = _typed(trailer, TRAILER, "trailer", offset, contents)
        elif records.version < 2:
            # Version 1 writers knew no other tag, and its CRC did not cover the tag: a damaged one.
            contents.warnings.append(
                f"capture record at byte {offset} has an unknown tag {tag!r} (a damaged tag?): skipped"
            )
            contents.holes.append(_Hole(offset, body_offset + length))
        # Unknown tags of version 2 come from a later minor version: skipped on purpose (forward compatible).
        offset = body_offset + length


def _copy(payload: bytes, length: int, crc: int, offset: int, buf: mmap.mmap, contents: _Contents) -> bool:
    """Whether the table record at `offset` repeats an earlier one byte for byte (a file joined to itself,
    a copy appended twice): counted and dropped, so that each row is read once."""
    earlier = contents.seen.setdefault((length, crc), [])
    for other in earlier:
        start = other + _RECORD.size
        if buf[start : start + length] == payload:
            name = _table_name(payload) or "unnamed"
            try:
                rows = chunk_head(payload[2 + len(name.encode()) :]).rows
            except (pa.ArrowException, OSError, ValueError, TypeError):
                rows = 0
            counts = contents.copies.setdefault(name, [0, 0])
            counts[0] += 1
            counts[1] += rows
            return True
    earlier.append(offset)
    return False


_TIME_COLUMNS = ("t_ns", "start_ns", "first_ns")  # a table's time: when its rows were read, or began


@dataclass(frozen=True)
class _Span:
    first: int
    last: int
    step: int | None  # the widest gap between two consecutive times inside the chunk (None: one time only)


def _chunk_span(fh: BinaryIO, start: int, length: int) -> _Span | None:
    """When a chunk's rows were (its first time column of _TIME_COLUMNS), or None."""
    import pyarrow.compute as pc

    fh.seek(start)
    data = fh.read(length)
    try:
        column = next((c for c in _TIME_COLUMNS if c in chunk_head(data).schema.names), None)
        if column is None:
            return None
        times = read_chunk_columns(data, [column]).column(column).drop_null().cast(pa.int64())
    except (pa.ArrowException, OSError, ValueError, TypeError):
        return None
    if len(times) == 0:
        return None
    distinct = pc.unique(times).sort()
    step = int(pc.max(pc.pairwise_diff(distinct)).as_py()) if len(distinct) > 1 else None
    return _Span(int(distinct[0].as_py()), int(distinct[-1].as_py()), step)


def _origin_ns(fh: BinaryIO, contents: _Contents) -> int | None:
    """What the views count seconds from (analyses.source.capture_origin_ns, which the format cannot
    import): a window's recording origin, else the first sample, else the recording's start."""
    window = contents.meta.get("window")
    if isinstance(window, dict) and isinstance(window.get("origin_ns"), int):
        return int(window["origin_ns"])
    for _, name, start, length in contents.order:
        if name == "samples" and (span := _chunk_span(fh, start, length)) is not None:
            return span.first
    started = (contents.meta.get("recording") or {}).get("started_ns")
    return started if isinstance(started, int) else None


def _name_holes(fh: BinaryIO, contents: _Contents) -> None:
    """For each hole, the tables whose rows it held and when: between that table's own last row read before
    the hole and its first row after. Which tables: those the damaged records' own headers name when they
    still chain across the hole; else those the trailer counts short (all, when it counts none short or
    there is none) whose rows do not run on across the hole at their usual pace."""
    chunks: dict[str, list[tuple[int, int, int]]] = {}  # table -> [(record offset, chunk offset, length)]
    for offset, name, start, length in contents.order:
        chunks.setdefault(name, []).append((offset, start, length))
    offsets = {name: [c[0] for c in found] for name, found in chunks.items()}
    written = (contents.trailer or {}).get("rows")
    counted = {
        name: count
        for name, count in (written.items() if isinstance(written, dict) else ())
        if isinstance(count, int) and not isinstance(count, bool)
    }
    short = {name for name, count in counted.items() if contents.rows.get(name, 0) < count}
    span = functools.cache(lambda start, length: _chunk_span(fh, start, length))
    origin = _origin_ns(fh, contents)

    def neighbours(name: str, hole: _Hole) -> tuple[_Span | None, _Span | None]:
        if name not in chunks:
            return None, None
        i = bisect.bisect_left(offsets[name], hole.start)
        j = bisect.bisect_left(offsets[name], hole.end)
        before = span(*chunks[name][i - 1][1:]) if i > 0 else None
        after = span(*chunks[name][j][1:]) if j < len(chunks[name]) else None
        return before, after

    def runs_on(before: _Span | None, after: _Span | None) -> bool:
        if before is None or after is None:
            return False
        steps = [s for s in (before.step, after.step) if s is not None]
        return bool(steps) and 0 <= after.first - before.last <= 1.5 * max(steps)

    for hole in contents.holes:  # a name no table of this capture has: the damage hit the name itself
        if hole.tables is not None and not hole.tables <= set(chunks) | set(counted) | set(SCHEMAS):
            hole.tables = None
    suspects: dict[int, list[str]] = {}  # hole index -> tables whose rows it may have held
    unknown = [i for i, hole in enumerate(contents.holes) if hole.tables is None and hole.end < contents.size]
    for name in sorted(set(chunks) | short):
        if name in counted and name not in short:
            continue  # every row the trailer counts read back
        found = [i for i in unknown if not runs_on(*neighbours(name, contents.holes[i]))]
        # Short, yet running on across every hole: any of them may hold its rows.
        for i in found or (unknown if name in short else []):
            suspects.setdefault(i, []).append(name)
    for i, hole in enumerate(contents.holes):
        if hole.tables is None and hole.end == contents.size:
            contents.warnings.append(
                f"what the damaged bytes {hole.start} to the end held is unknown: any table may miss rows after "
                "its last one read"
            )
            continue
        names = sorted(hole.tables if hole.tables is not None else suspects.get(i, []))
        parts = []
        for name in names:
            if name not in chunks:  # none of its chunks read back
                contents.damage.append(Damage(name, None, None))
                parts.append(f"{name} rows (none of them read back)")
                continue
            before, after = neighbours(name, hole)
            after_ns = before.last if before is not None else None
            before_ns = after.first if after is not None else None
            if after_ns is not None and before_ns is not None and after_ns > before_ns:
                after_ns = before_ns = None  # the chunks around it are not in time order: when is unknown
            contents.damage.append(Damage(name, after_ns, before_ns))
            parts.append(f"{name} rows {_when(after_ns, before_ns, origin)}")
        if parts:
            contents.warnings.append(
                f"the damaged bytes {hole.start} to {hole.end} held {', '.join(parts)}: those rows are missing "
                "(times since the first sample: each table's last row read before the damage, its first after)"
            )
        else:
            why = (
                "metadata or the trailer only"
                if hole.tables is not None
                else "the trailer's counts all read back"
                if counted and not short
                else "every table reads on across them"
            )
            contents.warnings.append(f"the damaged bytes {hole.start} to {hole.end} held no table's rows: {why}")


def _when(after_ns: int | None, before_ns: int | None, origin: int | None) -> str:
    def s(ns: int) -> str:
        return f"{(ns - origin) / 1e9:.3f} s" if origin is not None else f"{ns} ns (CLOCK_MONOTONIC)"

    if after_ns is None and before_ns is None:
        return "at an unknown time"
    if after_ns is None:
        return f"before {s(before_ns)}"  # type: ignore[arg-type]
    if before_ns is None:
        return f"after {s(after_ns)}"
    return f"between {s(after_ns)} and {s(before_ns)}"


def _check_counts(contents: _Contents) -> None:
    """What was read against what the trailer says was written: a shortfall, copies and rows beyond the
    trailer's count are warnings. A copy of the writer's own index (thread_seen) is dropped quietly: a
    tool that copies a capture appends it as it was and again as the samples it appends derive it."""
    copies = {name: n for name, (n, _) in contents.copies.items() if name != "thread_seen"}
    if copies:
        listed = ", ".join(f"{name} {n}" for name, n in sorted(copies.items()))
        contents.warnings.append(
            f"capture holds {sum(copies.values())} table chunks twice ({listed}): the copies are dropped, "
            "each row is read once (a file joined to itself, or a copy appended?)"
        )
    written = (contents.trailer or {}).get("rows")
    if not isinstance(written, dict):
        return
    short, extra = [], []
    for name, count in sorted(written.items()):
        if not isinstance(count, int) or isinstance(count, bool):
            continue
        read = contents.rows.get(name, 0)
        if read + contents.copies.get(name, [0, 0])[1] < count:  # the copies may be rows the trailer counted
            short.append(f"{name} {read} of {count}")
        elif read > count:
            extra.append(f"{name} {read} of {count}")
    if short:
        contents.warnings.append(
            "capture holds fewer rows than its trailer says were written (" + ", ".join(short) + "): "
            "records are missing or damaged"
        )
    if extra:
        contents.warnings.append(
            "capture holds more rows than its trailer says were written (" + ", ".join(extra) + "): "
            "it holds rows of another recording, or the same rows twice"
        )


_T = TypeVar("_T")


# File bytes of a table's chunks decoded ahead of the reader (Capture._read_arrow_chunks): about a 4 M-row
# batch of samples (~4 B each in the file; decoded, 50-130 B a row of the columns analyses read). One
# chunk ahead left the worker idle while a batch was worked on (README, "Speed on large captures").
DECODE_AHEAD_BYTES = 16 * 2**20
_Decoded = tuple[pa.Table | None, list[str], Any, Exception | None]


def _decode_and_prepare(
    name: str, data: bytes, columns: list[str] | None, prepare: Callable[[pa.Table], Any] | None
) -> _Decoded:
    """_read_chunk, then `prepare` of its table (None: nothing; else the table is not handed back), on the
    decoding worker; an error of `prepare`'s is handed back (its chunk decoded: not a decoding error)."""
    table, nulls = _read_chunk(name, data, columns)
    if prepare is None:
        return table, nulls, None, None
    # Without the table: what `prepare` kept of it is all the reader takes, and chunks wait decoded ahead.
    try:
        return None, nulls, prepare(table), None
    except Exception as err:  # raised again in the reader's thread
        return None, nulls, None, err


def _read_chunk(name: str, data: bytes, columns: list[str] | None) -> tuple[pa.Table, list[str]]:
    """One chunk as its table's schema says: every column of the schema (or the asked-for ones), those it
    lacks (an older capture) as nulls of their type, each cast to its schema's type; and without the rows
    that have a null in a required column (capture/shape.py), whose names come back beside the table."""
    known = SCHEMAS.get(name)
    # One thread: the caller decodes on a worker of its own (_read_arrow_chunks), and Arrow's pool, a task
    # per column of a 50 000-row chunk, cost more than it saved: a 16-column pass over the 30 M-sample
    # capture took 3.1-3.6 s of CPU and 7-12 s of wall time on the loaded 2-core VM, 1.9-2.1 and 2.8-3.3 s
    # without (issue 12: analyses speed). Only the columns asked for are decoded (capture/chunks.py).
    table = read_chunk_columns(data, columns)
    present = table.column_names
    if columns is None:
        columns = list(dict.fromkeys([*(known.names if known is not None else []), *present]))
    for column in columns:
        if column not in present:
            dtype = known.field(column).type if known is not None and column in known.names else pa.null()
            table = table.append_column(column, pa.nulls(table.num_rows, dtype))
    table = table.select(columns)
    if known is None:
        return table, []
    for i, column in enumerate(table.schema):
        want = known.field(column.name).type if column.name in known.names else column.type
        if column.type != want:
            try:
                table = table.set_column(i, column.name, table.column(i).cast(want))
            except (pa.ArrowException, ValueError) as err:
                raise ValueError(f"its column {column.name!r} does not fit {want}: {err}") from err
    nulls = [c for c in REQUIRED_COLUMNS.get(name, ()) if c in columns and table.column(c).null_count]
    if nulls:
        valid = pa.compute.is_valid(table.column(nulls[0]))
        for column in nulls[1:]:
            valid = pa.compute.and_(valid, pa.compute.is_valid(table.column(column)))
        table = table.filter(valid)
    return table, nulls


class Capture:
    """A capture read back: `.meta`, `.trailer`, and tables as pandas DataFrames, loaded on first use.

    `.samples`  one row per thread per tick, cumulative counters as read (see SAMPLES_SCHEMA)
    `.sched`    rows of /proc/<pid>/task/<tid>/sched for the threads it was read for
    `.threads`  one row per thread: tid pid comm process cmdline starttime policy rtprio first_ns last_ns
                exit_ns (names as last seen, policy as first seen)
    `.events`   t_ns kind pid tid text
    `.system`   /proc/stat per CPU (cpu = -1: the machine), context switches, interrupts, PSI
    `.processes` memory of each target process over time (t_ns pid vsize_kib rss_kib shared_kib)
    `.truth`    lab ground truth (cause tid start_ns end_ns); empty unless the lab was recorded
    `.cycles`   lab callbacks (tid start_ns end_ns deadline_ns); empty unless the lab was recorded
    `.warnings` what the reader found wrong with the file, one sentence each
    `.damage`   rows lost to damaged bytes (Damage: the table, and the times they lay between)
    """

    def __init__(
        self,
        path: Path | None,
        meta: dict[str, Any],
        trailer: dict[str, Any] | None,
        chunks: dict[str, list[tuple[int, int]]],
        tables: dict[str, pd.DataFrame] | None = None,
        capture_warnings: list[str] | None = None,
        damage: list[Damage] | None = None,
    ) -> None:
        self.path = path
        self.meta = meta
        self.trailer = trailer
        self.warnings = list(capture_warnings or [])
        self.damage = list(damage or [])  # rows lost to damaged bytes: which table, between which times
        self._chunks = chunks
        self._tables: dict[str, pd.DataFrame] = dict(tables or {})

    @classmethod
    def from_frames(
        cls,
        meta: Mapping[str, Any] | None = None,
        trailer: Mapping[str, Any] | None = None,
        **tables: pd.DataFrame,
    ) -> Capture:
        """An in-memory capture, for tests and for analyses that derive one capture from another."""
        return cls(None, dict(meta or {}), dict(trailer) if trailer is not None else {}, {}, tables)

    def without(self, tables: Iterable[str], meta: Mapping[str, Any] | None = None) -> Capture:
        """The same capture as if it had been recorded without `tables` (and with `meta` keys updated):
        the file's other chunks are shared, nothing is copied. For comparing what each source adds."""
        dropped = set(tables)
        return Capture(
            self.path,
            {**self.meta, **(meta or {})},
            self.trailer,
            {name: spans for name, spans in self._chunks.items() if name not in dropped},
            {name: frame for name, frame in self._tables.items() if name not in dropped | {"threads_summary"}},
            self.warnings,
            [d for d in self.damage if d.table not in dropped],
        )

    @property
    def table_names(self) -> list[str]:
        return sorted(set(self._chunks) | set(self._tables))

    def table(self, name: str, columns: Iterable[str] | None = None) -> pd.DataFrame:
        """The whole table `name` (empty with its schema's columns when the capture has none)."""
        if columns is None and name in self._tables:
            return self._tables[name]
        cols = list(columns) if columns is not None else None
        if name in self._tables:
            return self._tables[name][cols]
        frame = self._read_table(name, cols)
        if cols is None:
            self._tables[name] = frame
        return frame

    def iter_chunks(self, name: str, columns: Iterable[str] | None = None) -> Iterator[pd.DataFrame]:
        """The table chunk by chunk, for work that need not hold a whole large capture at once."""
        cols = list(columns) if columns is not None else None
        if name in self._tables:
            frame = self._tables[name]
            # Columns an in-memory table lacks read as missing, as a file's older chunks do.
            yield frame if cols is None else frame.reindex(columns=cols)
            return
        for _, table in self._read_arrow_chunks(name, cols):
            yield _to_pandas(table)

    def arrow_chunks(
        self, name: str, columns: Iterable[str] | None = None, *, only: Callable[[int], bool] | None = None
    ) -> Iterator[tuple[int, pa.Table]] | None:
        """The file's chunks of the table as iter_chunks reads them, before they become pandas frames
        (to_pandas makes each the frame iter_chunks yields), each with its number (file order, from 0);
        with `only`, just the chunks it takes by number (the others are not read). None when the table is
        held in memory."""
        if name in self._tables:
            return None
        return self._read_arrow_chunks(name, list(columns) if columns is not None else None, only)

    def prepared_chunks(
        self,
        name: str,
        columns: Iterable[str] | None,
        prepare: Callable[[pa.Table], _T],
        *,
        only: Callable[[int], bool] | None = None,
    ) -> Iterator[tuple[int, _T]] | None:
        """arrow_chunks, each chunk's table given to `prepare` on the decoding worker (a function of the table
        alone: the analyses' conversion to numpy), what it returns yielded; an error it raises is raised
        here, at its chunk."""
        if name in self._tables:
            return None
        return self._read_arrow_chunks(name, list(columns) if columns is not None else None, only, prepare)

    def _read_arrow_chunks(
        self,
        name: str,
        columns: list[str] | None,
        only: Callable[[int], bool] | None = None,
        prepare: Callable[[pa.Table], Any] | None = None,
    ) -> Iterator[tuple[int, Any]]:
        """The chunks decoded in file order (and prepared), those ahead on a worker thread while the caller
        works on this one: Parquet decoding (zstd, delta-packed integers) releases the GIL, and it is 1-3 s
        a pass over 30 M samples (issue 12: analyses speed). Up to DECODE_AHEAD_BYTES of the file are
        decoded ahead (always the next chunk), so that the worker keeps decoding while the caller works on a
        batch of many chunks (iter_samples joins 2-4 M rows): one chunk ahead left it idle then, and the
        caller waited for each chunk of the next batch in turn. Errors and warnings are the caller's, chunk
        by chunk."""
        if self.path is None or name not in self._chunks:
            return
        spans = ((i, *span) for i, span in enumerate(self._chunks[name]) if only is None or only(i))
        with open_capture(self.path) as fh, ThreadPoolExecutor(1, thread_name_prefix="decode") as pool:
            ahead: collections.deque[tuple[int, int, int, Future[_Decoded]]] = collections.deque()
            ahead_bytes = 0

            def decode_ahead() -> None:
                nonlocal ahead_bytes
                while not ahead or ahead_bytes < DECODE_AHEAD_BYTES:  # the next chunk at least
                    span = next(spans, None)
                    if span is None:
                        return
                    number, offset, length = span
                    fh.seek(offset)
                    data = fh.read(length)
                    ahead.append(
                        (number, offset, length, pool.submit(_decode_and_prepare, name, data, columns, prepare))
                    )
                    ahead_bytes += length

            try:
                decode_ahead()
                while ahead:
                    number, offset, length, decoding = ahead.popleft()
                    ahead_bytes -= length
                    decode_ahead()
                    try:
                        table, nulls, prepared, failed = decoding.result()
                    except (pa.ArrowException, OSError, ValueError) as err:
                        # Its footer read at load, but a page does not decode (a hand-made chunk): skip it.
                        self._warn(f"the {name} chunk at byte {offset} does not decode ({err}): skipped")
                        continue
                    if nulls:
                        self._warn(
                            f"the {name} chunk at byte {offset} has rows with no {', '.join(map(repr, nulls))} "
                            "(null): those rows are left out"
                        )
                    if failed is not None:
                        raise failed
                    yield number, table if prepare is None else prepared
            finally:  # a reader that stops early (the first chunk's times) waits for no chunk it did not take
                for *_, pending in ahead:
                    pending.cancel()

    def _warn(self, message: str) -> None:
        """A warning about this capture found while reading a table: said once, and kept in .warnings."""
        message = f"{self.path}: {message}"
        if message not in self.warnings:
            self.warnings.append(message)
            warnings.warn(message, CaptureWarning, stacklevel=4)

    def _concat(self, name: str, tables: list[pa.Table]) -> pa.Table:
        """The chunks as one table. Chunks whose columns have types the others' cannot take (a hand-made
        capture: a number column written as text) are skipped with a warning: of the groups of chunks
        that agree, the one with the table's own types (capture.format's schema), then the fewest text
        columns, then the most rows is kept."""
        try:
            return pa.concat_tables(tables, promote_options="permissive")
        except pa.ArrowException:
            pass
        schema = SCHEMAS.get(name)

        def own_types(table: pa.Table) -> bool:
            return schema is None or all(
                table.schema.field(c).type == schema.field(c).type for c in table.column_names if c in schema.names
            )

        groups: list[list[pa.Table]] = []
        for table in tables:
            for group in groups:
                try:
                    pa.concat_tables([group[0].slice(0, 0), table.slice(0, 0)], promote_options="permissive")
                except pa.ArrowException:
                    continue
                group.append(table)
                break
            else:
                groups.append([table])

        def text_columns(table: pa.Table) -> int:  # a number written as text is the usual odd one out
            return sum(pa.types.is_string(f.type) or pa.types.is_large_string(f.type) for f in table.schema)

        best = max(
            groups, key=lambda g: (all(own_types(t) for t in g), -text_columns(g[0]), sum(t.num_rows for t in g))
        )
        skipped = len(tables) - len(best)
        self._warn(f"{skipped} {name} chunk(s) have columns of other types than the rest of the table: skipped")
        return pa.concat_tables(best, promote_options="permissive")

    def _read_table(self, name: str, columns: list[str] | None) -> pd.DataFrame:
        import pandas as pd

        tables = [table for _, table in self._read_arrow_chunks(name, columns)]
        if not tables:
            schema = SCHEMAS.get(name)
            if schema is None:
                return pd.DataFrame(columns=columns or [])
            if columns is not None:
                schema = pa.schema([schema.field(c) for c in columns if c in schema.names])
            return _to_pandas(schema.empty_table())
        table = self._concat(name, tables)
        # Time order (chunks are stored by thread inside, for compression); only by the keys loaded.
        keys = ["tick", "tid"] if name in ("samples", "sched") else ["t_ns"]
        keys = [k for k in keys if k in table.column_names]
        if keys:
            table = table.sort_by([(k, "ascending") for k in keys])
        return _to_pandas(table)

    # Named tables --------------------------------------------------------------------------------
    @property
    def samples(self) -> pd.DataFrame:
        return self.table("samples")

    @property
    def sched(self) -> pd.DataFrame:
        return self.table("sched")

    @property
    def system(self) -> pd.DataFrame:
        return self.table("system")

    @property
    def events(self) -> pd.DataFrame:
        return self.table("events")

    @property
    def processes(self) -> pd.DataFrame:
        return self.table("processes")

    @property
    def truth(self) -> pd.DataFrame:
        return self.table("truth")

    @property
    def cycles(self) -> pd.DataFrame:
        return self.table("cycles")

    # Engine tables (see ENGINE_SCHEMAS): empty with their columns when the capture has no engine source.
    @property
    def engine_cycles(self) -> pd.DataFrame:
        return self.table("engine_cycles")

    @property
    def engine_nodes(self) -> pd.DataFrame:
        return self.table("engine_nodes")

    @property
    def xruns(self) -> pd.DataFrame:
        return self.table("xruns")

    @property
    def engine_clients(self) -> pd.DataFrame:
        return self.table("engine_clients")

    @property
    def engine_graph(self) -> pd.DataFrame:
        return self.table("engine_graph")

    @property
    def engine_status(self) -> pd.DataFrame:
        return self.table("engine_status")

    @property
    def threads(self) -> pd.DataFrame:
        """One row per thread, a thread being (tid, starttime): the kernel hands a tid out again once its
        thread has gone, so one tid may be several threads here, each with its own names, when first and
        last seen, and when it exited (README, "Reading a capture")."""
        import pandas as pd

        if "threads_summary" in self._tables:
            return self._tables["threads_summary"]
        rows = self.table("threads")
        if rows.empty:
            summary = rows.assign(
                first_ns=pd.Series(dtype="int64"), last_ns=pd.Series(dtype="Int64"), exit_ns=pd.Series(dtype="Int64")
            )
        else:
            rows = _incarnations(rows)
            keys = ["tid", "_thread"]
            first = rows.groupby(keys, sort=True)["t_ns"].min().rename("first_ns")
            ordered = rows.sort_values("t_ns", kind="stable").groupby(keys, sort=True)
            latest = ordered.last().drop(columns=["t_ns", "policy", "rtprio"], errors="ignore")
            summary = latest.join(first)
            if "policy" in rows.columns:  # as first seen (older captures lack the columns)
                summary = summary.join(ordered[["policy", "rtprio"]].first())
            summary = summary.reset_index().sort_values(["tid", "first_ns"], kind="stable")
            summary["last_ns"] = self._last_seen(summary)
            summary["exit_ns"] = _exits(summary, self.events)
            summary = summary.drop(columns="_thread").reset_index(drop=True)
            # A process's name is its leader thread's comm: follow renames of the leader (the latest one
            # of a reused pid).
            leaders = summary[summary["tid"] == summary["pid"]].drop_duplicates("pid", keep="last")
            by_leader = summary["pid"].map(leaders.set_index("pid")["comm"]).astype(object)
            summary["process"] = by_leader.where(by_leader.notna(), summary["process"].astype(object))
        columns = ["tid", "pid", "comm", "process", "cmdline", "starttime", "policy", "rtprio"]
        columns += ["first_ns", "last_ns", "exit_ns"]
        summary = summary[[c for c in columns if c in summary.columns]]
        self._tables["threads_summary"] = summary
        return summary

    def _last_seen(self, summary: pd.DataFrame) -> pd.Series:
        """Each thread's last sample: from the thread_seen index (per tid), and for a tid that was several
        threads, from the samples' start times (unknown where a capture's samples lack them)."""
        import pandas as pd

        seen = self.table("thread_seen")
        if seen.empty:  # a capture written without the index: one pass over the samples, chunk by chunk
            seen = pd.concat(
                [
                    c.groupby("tid")["t_ns"].max().rename("last_ns").reset_index()
                    for c in self.iter_chunks("samples", ["tid", "t_ns"])
                ]
                or [pd.DataFrame({"tid": [], "last_ns": []})]
            )
        by_tid = seen.groupby("tid")["last_ns"].max()
        last = summary["tid"].map(by_tid).astype("Int64")
        reused = summary["tid"].duplicated(keep=False).to_numpy()
        if not reused.any():
            return last
        last[reused] = pd.NA
        tids = summary.loc[reused, "tid"].unique()
        per_thread = [
            c[c["tid"].isin(tids)].groupby(["tid", "starttime"])["t_ns"].max()
            for c in self.iter_chunks("samples", ["tid", "starttime", "t_ns"])
        ]
        if per_thread:
            maxima = pd.concat(per_thread).groupby(level=[0, 1]).max()
            pairs = pd.MultiIndex.from_arrays([summary["tid"], pd.to_numeric(summary["starttime"], errors="coerce")])
            found = pd.Series(maxima.reindex(pairs).to_numpy(), index=summary.index).astype("Int64")
            last[reused] = found[reused]
        return last

    @property
    def complete(self) -> bool:
        """True when the recorder finished cleanly and wrote its trailer."""
        return self.trailer is not None

    # Typed views of `meta` (written by samplers.metadata): what analyses read, in one place.

    @property
    def interval_ns(self) -> int | None:
        """The sampling interval asked for, ns (None when the metadata does not say)."""
        interval = (self.meta.get("recording") or {}).get("interval_ns")
        return int(interval) if interval else None

    @property
    def sources(self) -> dict[str, Any]:
        """Which data sources the recording had: delayacct, schedstats, taskstats, ebpf, psi..."""
        return dict(self.meta.get("sources") or {})

    @property
    def engine_sources(self) -> dict[str, dict[str, Any]]:
        """Each engine source's metadata by kind ("jack", "pipewire"; samplers/engine): sources["engines"],
        else, in a capture from before it, the one sources["engine"]."""
        sources = self.sources
        engines = sources.get("engines")
        if isinstance(engines, dict) and engines:
            return {str(k): v for k, v in engines.items() if isinstance(v, dict)}
        engine = sources.get("engine")
        return {str(engine.get("kind")): engine} if isinstance(engine, dict) else {}

    @property
    def cpus(self) -> dict[str, Any]:
        """The CPUs: online (list), core_types (cpu -> label) and what else the recorder learned."""
        return dict(self.meta.get("cpus") or {})

    @property
    def host(self) -> dict[str, Any]:
        """The machine: kernel, clk_tck, page size..."""
        return dict(self.meta.get("host") or {})

    @property
    def clk_tck(self) -> int:
        """Clock ticks per second of utime/stime/blkio_ticks (USER_HZ; 100 when the metadata lacks it)."""
        return int(self.host.get("clk_tck") or 100)

    def __repr__(self) -> str:
        where = str(self.path) if self.path else "in memory"
        return f"<Capture {where} tables={self.table_names}>"


def _incarnations(rows: pd.DataFrame) -> pd.DataFrame:
    """`_thread`: which thread of its tid a `threads` row is about. A discovery row carries the thread's
    start time; a later row (a rename) belongs to the thread its tid was when it was written."""
    import pandas as pd

    if "starttime" not in rows.columns:
        return rows.assign(_thread=-1)
    ordered = rows.sort_values(["tid", "t_ns"], kind="stable")
    start = pd.to_numeric(ordered["starttime"], errors="coerce")
    tids = ordered["tid"].to_numpy()
    thread = start.groupby(tids).ffill().groupby(tids).bfill()  # rows before any start: the tid's first
    return ordered.assign(_thread=thread.fillna(-1).astype("int64"))


def _exits(summary: pd.DataFrame, events: pd.DataFrame) -> pd.Series:
    """Each thread's exit: a thread_exited event of its tid, given to the thread that tid was then (the
    latest one first seen before it; the first one for an exit read before any was seen)."""
    import pandas as pd

    exits = events.loc[events["kind"] == "thread_exited", ["tid", "t_ns"]]
    if exits.empty:
        return pd.Series(pd.NA, index=summary.index, dtype="Int64")
    exits = exits.astype({"tid": "int64", "t_ns": "int64"}).sort_values("t_ns", kind="stable")
    threads = pd.DataFrame(
        {"tid": summary["tid"].astype("int64"), "first_ns": summary["first_ns"].astype("int64"), "row": summary.index}
    ).sort_values("first_ns", kind="stable")
    found = pd.merge_asof(exits, threads, left_on="t_ns", right_on="first_ns", by="tid", direction="backward")
    early = found["row"].isna()
    if early.any():
        found.loc[early, "row"] = found.loc[early, "tid"].map(threads.drop_duplicates("tid").set_index("tid")["row"])
    found = found.dropna(subset=["row"])
    return found.groupby(found["row"].astype("int64"))["t_ns"].min().reindex(summary.index).astype("Int64")


def _to_pandas(table: pa.Table) -> pd.DataFrame:
    """Arrow to pandas, keeping ns exact: an integer column with nulls becomes nullable Int64, not float."""
    import pandas as pd

    nullable = [f.name for f in table.schema if pa.types.is_integer(f.type) and table.column(f.name).null_count > 0]
    frame = table.drop_columns(nullable).to_pandas() if nullable else table.to_pandas()
    for name in nullable:
        frame[name] = table.column(name).to_pandas(types_mapper=lambda _t: pd.Int64Dtype()).array
    return frame[table.column_names] if nullable else frame


to_pandas = _to_pandas


def open_capture(path: Path) -> BinaryIO:
    """`path` opened for reading, if it is a regular file. Anything else is a one-line error at once: a named
    pipe would block the open (and every read) until some writer came, a device reads forever, a socket
    cannot be opened. The type is checked before the open and again on what was opened (O_NONBLOCK: a pipe
    swapped in between does not block either)."""

    def refuse(mode: int) -> CaptureFormatError:
        return CaptureFormatError(f"{path} is {file_kind(mode)}, not a capture file")

    try:
        if not stat.S_ISREG(mode := os.stat(path).st_mode):
            raise refuse(mode)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError as err:
        raise CaptureFormatError(f"no such capture: {path}") from err
    except PermissionError as err:
        raise CaptureFormatError(f"cannot read {path}: permission denied") from err
    except (OSError, ValueError) as err:  # ELOOP, ENAMETOOLONG, a NUL in the name...
        raise CaptureFormatError(f"cannot read {path}: {getattr(err, 'strerror', None) or err}") from err
    if not stat.S_ISREG(mode := os.fstat(fd).st_mode):
        os.close(fd)
        raise refuse(mode)
    return os.fdopen(fd, "rb")


def load(path: str | os.PathLike[str]) -> Capture:
    """Open a capture. Tables are read when first used; problems with the file raise ForensicsError."""
    p = Path(path)
    with open_capture(p) as fh:
        contents = _scan(fh, p, os.fstat(fh.fileno()).st_size)
    window = contents.meta.get("window")
    inherited = (window.get("damage") if isinstance(window, dict) else None) or []  # checked by capture.shape
    for lost in inherited:  # a flight window cut from a damaged recording (capture.window.cut)
        contents.damage.append(Damage(lost["table"], lost.get("after_ns"), lost.get("before_ns")))
    if inherited:
        tables = ", ".join(sorted({lost["table"] for lost in inherited}))
        contents.warnings.append(
            f"the recording this window was cut from had lost {tables} rows to damaged bytes in or near it: "
            "its views say where there is no verdict"
        )
    for message in contents.warnings:
        warnings.warn(f"{p}: {message}", CaptureWarning, stacklevel=2)
    return Capture(
        p, contents.meta, contents.trailer, contents.chunks, capture_warnings=contents.warnings, damage=contents.damage
    )
