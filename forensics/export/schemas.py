"""The schemas of `forensics export --format csv|parquet`: one per exported table, versioned, explicit types.

Exports of many captures are read together (a DuckDB glob, `pyarrow.dataset`, Spark), so a column has one
type whatever the capture held: a column that is all null in one capture is still int64 there, and a
table the capture lacks is still written, empty, with its columns. The types are written, never inferred.

Tables recorded in the capture take the capture's schema (capture/format.py, `SCHEMAS`) with dictionary
columns as plain text; the derived tables (windows, verdicts, threads) are declared here.

Version policy (EXPORT_VERSION, in each Parquet file's metadata under `spike_stall_forensics.export`):
adding a table or a column does not bump it (readers of a glob get nulls for the older files); renaming
a column, changing its type, unit or meaning does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from capture.format import SCHEMAS as CAPTURE_SCHEMAS

if TYPE_CHECKING:
    import pandas as pd

EXPORT_VERSION = 1
VERSION_KEY = b"spike_stall_forensics.export"

_I8, _I16, _I32, _I64 = pa.int8(), pa.int16(), pa.int32(), pa.int64()
_STR, _F64, _BOOL = pa.string(), pa.float64(), pa.bool_()

# Per thread per tick: analyses/windows.py's reconciled windows, plus blocked_ns (see its docstring).
WINDOWS = pa.schema(
    [
        ("tid", _I32),
        ("pid", _I32),
        ("tick", _I64),
        ("start_ns", _I64),
        ("end_ns", _I64),
        ("wall_ns", _I64),
        ("starttime", _I64),
        ("run_delta_ns", _I64),
        ("wait_delta_ns", _I64),
        ("switches", _I64),
        ("minflt", _I64),
        ("majflt", _I64),
        ("utime_ns", _I64),
        ("stime_ns", _I64),
        ("blkio_ns", _I64),
        ("state", _STR),
        ("state_start", _STR),
        ("cpu", _I16),
        ("cpu_start", _I16),
        ("policy", _I8),
        ("policy_start", _I8),
        ("rtprio", _I16),
        ("rtprio_start", _I16),
        ("nice", _I8),
        ("on_cpu_ns", _I64),
        ("runqueue_ns", _I64),
        ("off_cpu_ns", _I64),
        ("core_type", _STR),
        ("slow_core", _BOOL),
        ("vol_switches", _I64),
        ("invol_switches", _I64),
        ("migrations", _I64),
        ("blocked_ns", _I64),
        # taskstats delays per window (null without taskstats)
        ("ts_blkio_ns", _I64),
        ("ts_swapin_ns", _I64),
        ("ts_freepages_ns", _I64),
        ("ts_thrashing_ns", _I64),
        ("ts_compact_ns", _I64),
        ("ts_cpu_delay_ns", _I64),
    ]
)

# The stall episodes of `forensics stalls` (analyses/stalls.py, find_stalls), one *_ns column per cause.
VERDICTS = pa.schema(
    [
        ("tid", _I32),
        ("pid", _I32),
        ("comm", _STR),
        ("start_ns", _I64),
        ("end_ns", _I64),
        ("duration_ns", _I64),
        ("verdict", _STR),
        ("stall_ns", _I64),
        ("excess_ns", _I64),
        ("share", _F64),
        ("run_ns", _I64),
        ("runqueue_ns", _I64),
        ("io_ns", _I64),
        ("fault_ns", _I64),
        ("lock_ns", _I64),
        ("reclaim_ns", _I64),
        ("unknown_ns", _I64),
        # Of unknown_ns: on CPU by the eBPF switch record, not counted by the thread's own clock (steal,
        # interrupts); null from /proc (no switch record).
        ("uncounted_ns", _I64),
        ("idle_ns", _I64),
        ("minflt", _I64),
        ("majflt", _I64),
        ("d_reads", _I64),
        ("s_reads", _I64),
        ("reads", _I64),
        ("cpus", _STR),
        ("core_types", _STR),
        ("policy", _STR),
        ("period_ns", _I64),
        ("windows", _I64),
        ("blkio_ns", _I64),
        ("iowait_ns", _I64),
        ("ts_blkio_ns", _I64),
        ("invol_switches", _I64),
        ("basis", _STR),
        ("waker_tid", _I32),
        ("waker", _STR),
        ("priority_inversion", _BOOL),
        ("ran_instead_tid", _I32),
        ("ran_instead", _STR),
        ("block_requests", _I64),
        ("suspect", _STR),
        ("suspect_tid", _I32),  # the thread `suspect` names (/proc), null when it names none
        ("evidence", _STR),
        ("sources", _STR),  # '; '-joined
        ("undecided", _STR),  # '; '-joined
        ("why", _STR),
    ]
)

# One row per thread (Capture.threads): names as last seen, policy as first seen, lifetime.
THREADS = pa.schema(
    [f for f in CAPTURE_SCHEMAS["threads"] if f.name != "t_ns"]
    + [pa.field("first_ns", _I64), pa.field("last_ns", _I64), pa.field("exit_ns", _I64)]
)

# The lab's ground truth carries columns beyond the capture's schema (forensics/lab/truth.py: the keys each cause
# writes); declared here so that they stack too.
RECORDED_EXTRA: dict[str, list[tuple[str, pa.DataType]]] = {
    "truth": [
        ("index", _I64),
        ("period", _I64),
        ("planned_ns", _I64),
        ("cpu", _I64),
        ("competitor_pid", _I32),
        ("competitor_tid", _I32),
        ("competitors", _I64),
        ("fault_kind", _STR),
        ("pages", _I64),
        ("io_mode", _STR),
        ("io_ops", _I64),
        ("io_bytes", _I64),
        ("holder_pid", _I32),
        ("holder_tid", _I32),
        ("held_ns", _I64),
        ("released_ns", _I64),
    ],
    "cycles": [("period", _I64)],
}

DERIVED = {"windows": WINDOWS, "verdicts": VERDICTS, "threads": THREADS}
# The capture's own tables, exported as recorded (thread_seen is the file's index; threads is derived).
RECORDED = tuple(name for name in CAPTURE_SCHEMAS if name not in ("thread_seen", "threads"))
TABLES = ("samples", "windows", "verdicts", "threads", *(name for name in RECORDED if name != "samples"))


def _plain(dtype: pa.DataType) -> pa.DataType:
    return dtype.value_type if pa.types.is_dictionary(dtype) else dtype


def export_schema(name: str) -> pa.Schema:
    """The schema table `name` is exported with (KeyError: not an exported table)."""
    if name in DERIVED:
        schema = DERIVED[name]
    else:
        fields = [(f.name, _plain(f.type)) for f in CAPTURE_SCHEMAS[name]] + RECORDED_EXTRA.get(name, [])
        schema = pa.schema(fields)
    return schema.with_metadata({VERSION_KEY: str(EXPORT_VERSION).encode()})


def _column(values: pd.Series, dtype: pa.DataType) -> pa.Array:
    import pandas as pd

    if isinstance(values.dtype, pd.CategoricalDtype) or (pa.types.is_string(dtype) and values.dtype != object):
        values = values.astype(object)
    if pa.types.is_integer(dtype) and values.dtype.kind == "f":
        # A float column holds whole numbers with NaN for missing (pandas' float for an int with gaps).
        values = values.round().astype("Int64")
    if pa.types.is_string(dtype):
        values = values.map(lambda v: v if v is None or isinstance(v, str) or pd.isna(v) else str(v))
    return pa.array(values, type=dtype, from_pandas=True)


def undeclared(name: str, frame: pd.DataFrame) -> list[str]:
    """Columns of `frame` that table `name`'s export schema does not declare (a test keeps this empty)."""
    names = export_schema(name).names
    return [c for c in frame.columns if c not in names]


def conform(name: str, frame: pd.DataFrame) -> pa.Table:
    """`frame` as table `name`'s export schema: its columns in order (missing ones null), each of its type.
    A column not declared yet (added to an analysis, not here) is kept after them with the type pyarrow
    infers, rather than lost; tests/test_export.py fails until it is declared."""
    schema = export_schema(name)
    arrays = [
        _column(frame[f.name], f.type) if f.name in frame.columns else pa.nulls(len(frame), f.type) for f in schema
    ]
    fields = list(schema)
    for column in undeclared(name, frame):
        array = pa.Array.from_pandas(
            frame[column].astype(object) if frame[column].dtype == "category" else frame[column]
        )
        arrays.append(array)
        fields.append(pa.field(column, array.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=schema.metadata))
