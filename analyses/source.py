"""Reading just the sample columns an analysis needs, in compact dtypes, optionally for some threads only.

A 10-minute, 100-thread capture at 2 ms holds 30 million thread-samples; all columns as int64 would be
several GB. Analyses therefore name the columns they use, read the capture chunk by chunk (chunks are
appended in time order by the recorder), drop the rows of threads they do not need before anything is
concatenated, and turn the state letter into a one-byte code.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from analyses import rules
from capture.format import Capture, to_pandas
from capture.vocabulary import STATE_ALPHABET

# The state letter (stat field 3) as a one-byte code: its index in the shared alphabet; 0 = not known.
STATE_CODE = {letter: np.int8(i) for i, letter in enumerate(STATE_ALPHABET)}
STATE_R, STATE_S, STATE_D = STATE_CODE["R"], STATE_CODE["S"], STATE_CODE["D"]

# Compact dtypes for the columns analyses read (ns counters stay int64: they exceed 2**31 in seconds).
COMPACT_DTYPES: dict[str, str] = {
    "tick": "int64",
    "t_ns": "int64",
    "tid": "int32",
    "pid": "int32",
    "run_ns": "int64",
    "wait_ns": "int64",
    "slices": "int64",
    "minflt": "int64",
    "majflt": "int64",
    "utime": "int64",
    "stime": "int64",
    "nice": "int8",
    "cpu": "int16",
    "rtprio": "int16",
    "policy": "int8",
    "blkio_ticks": "int64",
}


def state_codes(values: pd.Series | Sequence[str | None]) -> np.ndarray:
    """State letters -> int8 codes (0 for missing or unknown letters), vectorised through categories."""
    series = values if isinstance(values, pd.Series) else pd.Series(values, dtype="object")
    cat = series.astype("category") if not isinstance(series.dtype, pd.CategoricalDtype) else series
    categories = [str(c)[:1] if c is not None else "?" for c in cat.cat.categories]
    lookup = np.array([STATE_CODE.get(c, np.int8(0)) for c in categories] + [np.int8(0)], dtype=np.int8)
    codes = cat.cat.codes.to_numpy()
    return lookup[np.where(codes < 0, len(categories), codes)]


def _compact(frame: pd.DataFrame) -> pd.DataFrame:
    out = {}
    for name in frame.columns:
        column = frame[name]
        if name == "state":
            out[name] = state_codes(column)
        elif name in COMPACT_DTYPES:
            if column.hasnans if hasattr(column, "hasnans") else False:
                out[name] = column.astype("Int64")
            else:
                out[name] = column.to_numpy(dtype=COMPACT_DTYPES[name], na_value=0)
        else:
            out[name] = column
    return pd.DataFrame(out, copy=False)


def in_span(t_ns: np.ndarray, span: tuple[int | None, int | None] | None) -> np.ndarray:
    """Which times fall in [start, end] of `span` (None, or a None side: open); `--span` gives it
    (analyses.span), and every reader of samples keeps its rows by it."""
    keep = np.ones(len(t_ns), dtype=bool)
    if span is None:
        return keep
    if span[0] is not None:
        keep &= t_ns >= span[0]
    if span[1] is not None:
        keep &= t_ns <= span[1]
    return keep


def thread_order(tid: np.ndarray, key: np.ndarray) -> np.ndarray:
    """np.lexsort((key, tid)): rows in (tid, key) order, ties kept in place. Rows come chunk by chunk in time
    order, each chunk by thread, so a stable sort by tid alone (a radix sort of the integers) mostly gives
    it, in a third of lexsort's time: taken when each thread's keys (its ticks or times) then rise."""
    order = np.argsort(_narrow(tid), kind="stable")
    sorted_tid, sorted_key = tid[order], key[order]
    if np.any((sorted_tid[1:] == sorted_tid[:-1]) & (sorted_key[1:] < sorted_key[:-1])):
        return np.lexsort((key, tid))
    return order


def _narrow(tid: np.ndarray) -> np.ndarray:
    """The tids as uint16 offsets from the smallest where they span fewer than 2^16 (the same order, ties
    too): numpy's stable sort of 16-bit integers is a radix sort of two passes, half the time of int32's
    (2 M rows: 30 against 62 ms, the conversion included; twice a batch in `summarize`, issue 12)."""
    if not len(tid) or tid.dtype.kind not in "iu":
        return tid
    low, high = int(tid.min()), int(tid.max())
    if high - low >= 2**16:
        return tid
    return (tid - low).astype(np.uint16)


class Near:
    """Times within any of some spans [start, end] (in any order; they may overlap): which rows of a chunk
    to keep (called with their t_ns), and whether a chunk whose rows lie in [first, last] has any."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray) -> None:
        order = np.argsort(starts, kind="stable")
        self.starts = np.asarray(starts, dtype=np.int64)[order]
        self.open_until = np.maximum.accumulate(np.asarray(ends, dtype=np.int64)[order])  # covers overlaps too

    def __call__(self, t_ns: np.ndarray) -> np.ndarray:
        """The last span starting at or before t must still be open at t."""
        k = np.searchsorted(self.starts, t_ns, side="right") - 1
        return (k >= 0) & (t_ns <= self.open_until[np.maximum(k, 0)])

    def overlaps(self, first_ns: int, last_ns: int) -> bool:
        k = int(np.searchsorted(self.starts, last_ns, side="right")) - 1
        return k >= 0 and int(self.open_until[k]) >= first_ns


# Per capture read, the first and last t_ns of each samples chunk (by number; None: no rows), noted by
# every pass that decodes it. A later pass that keeps only a time range or rows near some spans (the
# suspects of `stalls`: a few ms around each lock or runqueue episode) skips the chunks that hold none
# of them without decoding them: 1-2 s of the 30 M-sample `stalls` (issue 12: analyses speed).
_CHUNK_TIMES: weakref.WeakKeyDictionary[Capture, dict[int, tuple[int, int] | None]] = weakref.WeakKeyDictionary()


def _chunk_filter(
    cap: Capture, t_range: tuple[int | None, int | None] | None, near: Callable[[np.ndarray], np.ndarray] | None
) -> Callable[[int], bool] | None:
    """Which chunks may hold rows kept by `t_range` and `near` (a Near), by the chunk times known; None:
    every chunk."""
    known = _CHUNK_TIMES.get(cap)
    if not known or (t_range is None and not isinstance(near, Near)):
        return None
    lo = t_range[0] if t_range is not None and t_range[0] is not None else None
    hi = t_range[1] if t_range is not None and t_range[1] is not None else None

    def holds_some(number: int) -> bool:
        if number not in known:
            return True  # never decoded (or it failed to): read it
        times = known[number]
        if times is None:
            return False
        first, last = times
        if (lo is not None and last < lo) or (hi is not None and first > hi):
            return False
        return not isinstance(near, Near) or near.overlaps(first, last)

    return holds_some


def iter_samples(
    cap: Capture,
    columns: Iterable[str],
    *,
    tids: Iterable[int] | None = None,
    t_range: tuple[int | None, int | None] | None = None,
    batch_rows: int = 4_000_000,
    near: Callable[[np.ndarray], np.ndarray] | None = None,
) -> Iterator[pd.DataFrame]:
    """Batches of samples (compact dtypes, state as int8 codes) of about `batch_rows` rows, in time order.

    Chunks are concatenated into large batches because per-chunk pandas overhead dominates on captures of
    many small chunks. `t_range` keeps rows whose t_ns falls in [start, end] (None = open); `near`, given
    the t_ns of a chunk's rows, says which of them to keep (before the other columns are converted); a
    Near also skips the chunks it keeps nothing of, where their times are known (_CHUNK_TIMES).
    """
    wanted = list(dict.fromkeys(["tick", "t_ns", "tid", *columns]))
    tid_set = np.asarray(sorted(set(tids)), dtype=np.int32) if tids is not None else None
    fill = _Fill.of(cap)
    if fill is None:
        tid_values = pa.array(tid_set, type=pa.int32()) if tid_set is not None else None
        prepare = functools.partial(_prepare, wanted=wanted, tid_values=tid_values, t_range=t_range, near=near)
        chunks = cap.prepared_chunks("samples", wanted, prepare, only=_chunk_filter(cap, t_range, near))
        if chunks is not None:
            yield from _iter_arrow(chunks, wanted, batch_rows, _CHUNK_TIMES.setdefault(cap, {}))
            return
    pending: list[pd.DataFrame] = []
    rows = 0
    read = wanted if fill is None or "state" in wanted else [*wanted, "state"]  # the fill reads the state
    keep_times = None
    if fill is not None and (t_range is not None or near is not None):
        # The filled rows of a tick have its time: only the ticks kept are filled (the add_suspects pass of
        # `stalls` filled all 60 s of an eBPF capture of the Bitwig shape to keep a few ms around each episode).
        def keep_times(t_ns: np.ndarray) -> np.ndarray:
            kept = in_span(t_ns, t_range)
            if near is not None:
                kept &= near(t_ns)
            return kept

    for chunk in cap.iter_chunks("samples", columns=read):
        last_tick = int(chunk["tick"].max()) if len(chunk) else None
        if tid_set is not None:
            chunk = chunk[np.isin(chunk["tid"].to_numpy(), tid_set)]
        if fill is not None and last_tick is not None:
            chunk = fill(chunk, last_tick, keep_times)
        if len(read) > len(wanted):
            chunk = chunk[wanted]
        if t_range is not None:
            chunk = chunk[in_span(chunk["t_ns"].to_numpy(), t_range)]
        if near is not None and len(chunk):
            chunk = chunk[near(chunk["t_ns"].to_numpy())]
        if chunk.empty:
            continue
        pending.append(_compact(chunk))
        rows += len(chunk)
        if rows >= batch_rows:
            yield pd.concat(pending, ignore_index=True)
            pending, rows = [], 0
    if pending:
        yield pd.concat(pending, ignore_index=True)


@dataclass(frozen=True)
class _Prepared:
    """One chunk of samples as _iter_arrow joins it: its first and last t_ns (None: no rows), before any
    row is dropped, and the columns of the rows kept (None: none), as _column makes them."""

    times: tuple[int, int] | None
    rows: int
    columns: dict[str, Any] | None


def _prepare(
    table: pa.Table,
    *,
    wanted: list[str],
    tid_values: pa.Array | None,
    t_range: tuple[int | None, int | None] | None,
    near: Callable[[np.ndarray], np.ndarray] | None,
) -> _Prepared:
    """A chunk's rows kept (of the threads `tid_values`, in `t_range`, `near`) and converted. A function of
    the chunk alone, run on the decoding worker (Capture.prepared_chunks) while the analysis works on the
    chunks before: 0.7 s of the reader's 30 M-sample pass (issue 12: analyses speed). The rows of other
    threads are dropped before any column is converted."""
    bounds = pc.min_max(table.column("t_ns"))
    first, last = bounds["min"].as_py(), bounds["max"].as_py()
    times = (int(first), int(last)) if first is not None and last is not None else None
    if tid_values is not None and table.num_rows:
        table = table.filter(pc.is_in(table.column("tid"), value_set=tid_values))
    if t_range is not None and table.num_rows:
        table = table.filter(pa.array(in_span(_column("t_ns", table.column("t_ns")), t_range)))
    if near is not None and table.num_rows:
        table = table.filter(pa.array(near(_column("t_ns", table.column("t_ns")))))
    if not table.num_rows:
        return _Prepared(times, 0, None)
    return _Prepared(times, table.num_rows, {name: _column(name, table.column(name)) for name in wanted})


def _iter_arrow(
    chunks: Iterator[tuple[int, _Prepared]],
    wanted: list[str],
    batch_rows: int,
    chunk_times: dict[int, tuple[int, int] | None] | None = None,
) -> Iterator[pd.DataFrame]:
    """iter_samples on a file's chunks, straight from Arrow: the same rows, columns and dtypes as going
    through pandas frames (iter_chunks, then _compact), without their per-chunk cost (_prepare). A batch
    of columns that all came out as plain numpy arrays of one dtype is joined by numpy; anything else goes
    the pandas way. Each chunk's first and last t_ns go into `chunk_times`."""
    pending: list[dict[str, Any]] = []
    rows = 0
    for number, chunk in chunks:
        if chunk_times is not None and number not in chunk_times:
            chunk_times[number] = chunk.times
        if chunk.columns is None:
            continue
        pending.append(chunk.columns)
        rows += chunk.rows
        if rows >= batch_rows:
            batch = _join(pending, wanted)
            pending, rows = [], 0  # the chunks' arrays are freed while the batch is worked on
            yield batch
    if pending:
        batch = _join(pending, wanted)
        pending = []
        yield batch


def _column(name: str, column: pa.ChunkedArray) -> np.ndarray | pd.api.extensions.ExtensionArray | pd.Series:
    """One column of a chunk as _compact makes it from that chunk's pandas frame (capture.format.to_pandas)."""
    if pa.types.is_integer(column.type) and not column.null_count:
        values = column.to_numpy()
        return values.astype(COMPACT_DTYPES[name], copy=False) if name in COMPACT_DTYPES else values
    if name == "state" and (codes := _state_codes(column)) is not None:
        return codes
    if pa.types.is_integer(column.type) and column.type != pa.uint64():
        # Nullable Int64, as to_pandas and _compact make it (what lies under the mask is never read).
        values = column.fill_null(0).to_numpy().astype(np.int64, copy=False)
        return pd.arrays.IntegerArray(values, column.is_null().to_numpy(zero_copy_only=False))
    out = _compact(to_pandas(pa.table({name: column})))[name]
    return out.array if isinstance(out.dtype, pd.Int64Dtype) else out


def _state_codes(column: pa.ChunkedArray) -> np.ndarray | None:
    """state_codes of a dictionary-encoded state column, code by code from each chunk's dictionary (what
    its categories would be); None (the pandas way) for anything else."""
    if not pa.types.is_dictionary(column.type):
        return None
    out = np.zeros(len(column), dtype=np.int8)
    at = 0
    for chunk in column.chunks:
        values = chunk.dictionary.to_pylist()
        if any(v is None for v in values) or len(set(values)) != len(values):
            return None
        lookup = np.array([STATE_CODE.get(str(v)[:1], np.int8(0)) for v in values] + [np.int8(0)], dtype=np.int8)
        index = chunk.indices.fill_null(len(values)).to_numpy(zero_copy_only=False).astype(np.int64)
        out[at : at + len(chunk)] = lookup[index]
        at += len(chunk)
    return out


def _join(parts: list[dict[str, Any]], wanted: list[str]) -> pd.DataFrame:
    """The chunks' columns as one frame, as pd.concat(..., ignore_index=True) of their frames makes it: a
    column that is a numpy array of one dtype in every chunk, or nullable Int64 in every chunk, is joined
    as pd.concat joins it; any other mix goes through pd.concat."""
    joined: dict[str, Any] = {}
    for name in wanted:
        values = [part[name] for part in parts]
        first = values[0]
        if isinstance(first, np.ndarray) and all(isinstance(v, np.ndarray) and v.dtype == first.dtype for v in values):
            joined[name] = np.concatenate(values) if len(values) > 1 else first
        elif isinstance(first, pd.arrays.IntegerArray) and all(
            isinstance(v, pd.arrays.IntegerArray) and v.dtype == first.dtype for v in values
        ):
            joined[name] = type(first)._concat_same_type(values) if len(values) > 1 else first
        else:
            frames = [pd.DataFrame(part, copy=False) for part in parts]
            return pd.concat(frames, ignore_index=True)
    return pd.DataFrame(joined, copy=False)


class _Fill:
    """The rows of a capture by the eBPF sampler, which stores a thread's row only where it changed (and every
    `keyframe_ticks`), filled back to one row per thread per tick: each tick between two stored rows gets a
    copy of the earlier one at that tick's read time (nothing in it changed; DESIGN.md "The eBPF sampler").
    Called on the chunks in time order; a thread's last stored row fills at most keyframe_ticks - 1 more."""

    def __init__(self, ticks: np.ndarray, times: np.ndarray, keyframe_ticks: int) -> None:
        self.ticks, self.times, self.keyframe = ticks, times, keyframe_ticks
        self.carry: pd.DataFrame | None = None
        self.done = -1  # the ticks up to this one are filled

    @classmethod
    def of(cls, cap: Capture) -> _Fill | None:
        sampler = cap.meta.get("ebpf_sampler") or {}
        if not sampler.get("keyframe_ticks") or "sampler_ticks" not in cap.table_names:
            return None
        grid = cap.table("sampler_ticks").sort_values("tick")
        ticks = grid["tick"].to_numpy(dtype=np.int64)
        return cls(ticks, grid["t_ns"].to_numpy(dtype=np.int64), int(sampler["keyframe_ticks"]))

    def __call__(
        self, chunk: pd.DataFrame, last_tick: int, keep: Callable[[np.ndarray], np.ndarray] | None = None
    ) -> pd.DataFrame:
        """The chunk's rows filled; `keep`, given the ticks' times, says which ticks' rows to make (the others are
        not made: a reader that keeps some times only, iter_samples' t_range and near, need not fill every tick
        first; the carry to the next chunk is the same)."""
        lo, hi = np.searchsorted(self.ticks, [self.done + 1, last_tick + 1])
        grid, grid_t = self.ticks[lo:hi], self.times[lo:hi]
        self.done = max(self.done, last_tick)
        rows = chunk if self.carry is None else pd.concat([self.carry, chunk], ignore_index=True)
        if rows.empty or not len(grid):
            return chunk
        tid = rows["tid"].to_numpy(dtype=np.int64)
        tick = rows["tick"].to_numpy(dtype=np.int64)
        order = np.lexsort((tick, tid))
        rows, tid, tick = rows.take(order).reset_index(drop=True), tid[order], tick[order]
        made, made_t = grid, grid_t
        if keep is not None:
            kept = keep(grid_t)
            made, made_t = grid[kept], grid_t[kept]
        # No copy of a row that has the thread on a CPU or a run queue: the writer extends such a thread's run or
        # wait to each read, so it is stored at every tick it lives (samplers/ebpf/sampler_rows.py). Its row
        # missing at the next tick means it exited there (its slot marked at sched_process_exit, left out);
        # copied, the killed engine's 121 real-time threads were on CPU 3.4 ms each after they died, a `run`
        # episode on every one.
        running = (rows["state"] == "R").to_numpy(dtype=bool) if "state" in rows else np.zeros(len(rows), bool)
        # Each stored row stands for its thread's ticks from its own up to the thread's next stored row, fewer
        # than keyframe ticks on, and only its own when it has the thread in R: the ticks made in that range,
        # found by two searches per row, not one per thread and tick: the fill of a pass over 40 s of the Bitwig
        # shape (10.6 M rows made, most threads storing one row in 125 ticks) 0.83-0.84 -> 0.62-0.69 s. A later
        # row at the same tick takes it (tests/test_fast_paths.py: the fill against its definition).
        until = tick + np.where(running, 1, self.keyframe)
        same_next = np.r_[tid[1:] == tid[:-1], False]
        until = np.where(same_next, np.minimum(until, np.r_[tick[1:], 0]), until)
        first_made = np.searchsorted(made, tick, side="left")
        count = np.maximum(np.searchsorted(made, until, side="left") - first_made, 0)
        source = np.repeat(np.arange(len(rows)), count)
        index = np.arange(len(source)) - np.repeat(np.cumsum(count) - count - first_made, count)
        out = rows.take(source).reset_index(drop=True)
        out["tick"] = made[index].astype(out["tick"].dtype)
        out["t_ns"] = made_t[index]
        alive = ~same_next & (grid[-1] - tick < self.keyframe)  # each thread's last row, if it can still fill
        self.carry = rows[alive].reset_index(drop=True)
        return out


_TICK_STARTS: weakref.WeakKeyDictionary[Capture, np.ndarray] = weakref.WeakKeyDictionary()


def tick_start_times(cap: Capture) -> np.ndarray:
    """When each tick of the sampler began: the earliest read time (t_ns) among its rows, sorted. Read once
    per capture object and kept while it lives: incidents ask it for every candidate's sampler gap, and
    reading the samples each time cost 20 of 42 s on a 40 s PipeWire recording with eBPF."""
    known = _TICK_STARTS.get(cap)
    if known is not None:
        return known
    fill = _Fill.of(cap)
    if fill is not None:
        # The eBPF sampler's capture: each row has its tick's time, stored or filled (_Fill), and sampler_ticks
        # (the fill's grid) lists the ticks that have rows with their times. Read from it, not from the rows the
        # fill makes: 1 ms against 1.7 s (60 s of the Bitwig shape, 16 M thread-samples; the same ticks and times).
        by_tick = pd.Series(fill.times).groupby(fill.ticks).min()
    else:
        starts = [batch.groupby("tick")["t_ns"].min() for batch in iter_samples(cap, [])]
        by_tick = pd.concat(starts).groupby(level=0).min() if starts else pd.Series([], dtype=np.int64)
    t = np.sort(by_tick.to_numpy(np.int64))
    _TICK_STARTS[cap] = t
    return t


# The sample columns whose rows a pass over every row may keep for some threads (keep_rows): those of the
# windows `stalls` reads (analyses.stalls.WINDOW_COLUMNS).
KEPT_COLUMNS = ["pid", "run_ns", "wait_ns", "slices", "state", "cpu", "policy", "rtprio", "starttime", "minflt",
                "majflt", "blkio_ticks"]  # fmt: skip


class KeptRows:
    """Every row of some threads (`tids`), in the batches iter_samples gave a pass over the whole capture,
    each cut to those threads' rows."""

    def __init__(self, columns: list[str], tids: np.ndarray) -> None:
        self.columns, self.tids = columns, tids
        self.parts: list[pd.DataFrame] = []
        self.rows = 0


# Per capture read, the rows a pass over every row kept (analyses.threads: the thread profiles' pass keeps
# those of the threads it finds real-time or periodic in its first batch, the ones `stalls` most likely
# watches): load_samples of those threads then decodes nothing again (every row of the capture: 2-3 s at
# 30 M samples; issue 12: analyses speed).
_KEPT: weakref.WeakKeyDictionary[Capture, KeptRows] = weakref.WeakKeyDictionary()


def keep_rows(cap: Capture, kept: KeptRows) -> None:
    _KEPT[cap] = kept


def fills_rows(cap: Capture) -> bool:
    """Whether iter_samples fills the capture's rows back (the eBPF sampler's: _Fill), from each thread's
    stored rows: rows of some threads are then not kept from a pass over all."""
    return _Fill.of(cap) is not None


def keepable(batch: pd.DataFrame, columns: Iterable[str]) -> bool:
    """Whether any threads' rows of these columns of a batch are what iter_samples gives for those threads
    alone: plain numpy integers, or nullable ones with no value at all. (A column with a null somewhere in
    a chunk is nullable for every row of it, but not for the rows of a thread that has none.)"""
    for name in columns:
        dtype = batch[name].dtype
        if isinstance(dtype, np.dtype):
            if dtype.kind not in "iu":
                return False
        elif not (isinstance(dtype, pd.Int64Dtype) and batch[name].isna().all()):
            return False
    return True


def _kept_batches(
    cap: Capture, wanted: list[str], tids: Iterable[int] | None, t_range: tuple[int | None, int | None] | None
) -> list[pd.DataFrame] | None:
    """The batches of iter_samples(cap, wanted, tids=tids) from kept rows, cut differently but the same
    rows in the same order; None when rows were not kept for all those threads and columns."""
    kept = _KEPT.get(cap)
    if kept is None or tids is None or t_range is not None or not set(wanted) <= set(kept.columns):
        return None
    asked = np.asarray(sorted({int(t) for t in tids}), dtype=np.int64)
    if not np.isin(asked, kept.tids).all():
        return None
    batches = []
    for part in kept.parts:
        rows = part[np.isin(part["tid"].to_numpy(), asked)]
        if len(rows):
            batches.append(rows[wanted].reset_index(drop=True))
    return batches


def load_samples(
    cap: Capture,
    columns: Iterable[str],
    *,
    tids: Iterable[int] | None = None,
    t_range: tuple[int | None, int | None] | None = None,
) -> pd.DataFrame:
    """All samples of the chosen threads and columns, sorted by (tid, tick)."""
    wanted = list(dict.fromkeys(["tick", "t_ns", "tid", *columns]))
    tids = None if tids is None else list(tids)
    batches = _kept_batches(cap, wanted, tids, t_range)
    if batches is None:
        batches = list(iter_samples(cap, wanted, tids=tids, t_range=t_range))
    if not batches:
        empty = {c: np.zeros(0, dtype=COMPACT_DTYPES.get(c, "int64")) for c in wanted if c != "state"}
        if "state" in wanted:
            empty["state"] = np.zeros(0, dtype=np.int8)
        return pd.DataFrame(empty)[wanted]
    frame = batches[0] if len(batches) == 1 else pd.concat(batches, ignore_index=True)
    order = np.lexsort((frame["tick"].to_numpy(), frame["tid"].to_numpy()))
    return frame.take(order).reset_index(drop=True)


def asked_interval_ns(cap: Capture) -> int:
    """The interval asked for (meta), else the trailer's median tick spacing, else that of the ticks in the
    capture's first samples (_tick_spacing_ns: each tick's first read, not one thread's rows, which the eBPF
    writer stores only where they change), else 2 ms."""
    if cap.interval_ns:
        return cap.interval_ns
    trailer = cap.trailer or {}
    if trailer.get("interval_p50_ns"):
        return int(trailer["interval_p50_ns"])
    spacing = _tick_spacing_ns(cap)
    return int(spacing) if spacing else 2_000_000


def capture_interval_ns(cap: Capture) -> int:
    """The sampling interval the analyses judge the capture by: its windows' length. The interval asked for,
    or the recorder's median read spacing where it missed most ticks (rules.kept_interval_ns: 534 threads
    from /proc on 2 vCPUs left a read every 9-11 ms, and every margin counted in intervals, the period rule's
    windows and the settling of a thread's rhythm, must take those windows)."""
    asked = asked_interval_ns(cap)
    kept = (cap.trailer or {}).get("interval_p50_ns")
    if not isinstance(kept, (int, float)):  # no trailer (the writer not done, or killed): the ticks read
        kept = _tick_spacing_ns(cap)
    return rules.kept_interval_ns(asked, float(kept) if kept is not None else None)


_TICK_SPACING: weakref.WeakKeyDictionary[Capture, float | None] = weakref.WeakKeyDictionary()


def _tick_spacing_ns(cap: Capture) -> float | None:
    """The median spacing of the recorder's ticks in the capture's first samples (each tick's first read), for a
    capture without the trailer's figure; None with fewer than two ticks. Once per capture."""
    if cap in _TICK_SPACING:
        return _TICK_SPACING[cap]
    head = next(iter_samples(cap, ["t_ns"], batch_rows=200_000), None)
    spacing = None
    if head is not None and len(head):
        firsts = head.groupby("tick", sort=True)["t_ns"].min().to_numpy()
        if len(firsts) > 1:
            spacing = float(np.median(np.diff(firsts)))
    _TICK_SPACING[cap] = spacing
    return spacing


def capture_origin_ns(cap: Capture) -> int | None:
    """The first sample's t_ns (times in views are shown relative to it); None for an empty capture. A
    flight recorder's window (README, "Flight recorder") counts from its recording's start instead, so
    its times read as in the whole session."""
    window = cap.meta.get("window")
    if isinstance(window, dict) and isinstance(window.get("origin_ns"), int):
        return int(window["origin_ns"])
    return first_sample_ns(cap)


def first_sample_ns(cap: Capture) -> int | None:
    """The t_ns of the capture's first thread read (the first chunk's earliest: the recorder writes ticks in
    order); None for a capture without samples."""
    for chunk in cap.iter_chunks("samples", columns=["t_ns"]):
        if len(chunk):
            return int(chunk["t_ns"].min())
    return None


EXACT_TABLES = ("sched_switch", "sched_wakeup", "page_faults", "block_rq", "ebpf_lost", "taskstats")


def proc_only(cap: Capture) -> Capture:
    """`cap` as a recording with the /proc sources alone would be: no eBPF tables, no taskstats, delay
    accounting (stat field 42) off. To compare, on one recording, what the exact sources change."""
    sources = dict(cap.sources, ebpf=False, taskstats="none", delayacct=False)
    return cap.without(EXACT_TABLES, meta={"sources": sources})
