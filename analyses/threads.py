"""Who is who: one row per thread, with its scheduling class and whether it wakes up periodically.

An audio callback thread is the thread to watch even when it did not get a real-time policy (a JACK
client without rtprio, a plugin host's audio thread still at SCHED_OTHER): what gives it away is its
wake-up pattern. Switch-ins (schedstat field 3) are counted per block of `block_ns` (200 ms); a thread
is periodic when

- it wakes at least 10 times a second (median of at least 2 switch-ins per block); a slow waker's blocks
  are merged so that each holds about 20 wake-ups,
- its count per block is steady: in at least half of the blocks within max(1, 5 %) of the median, and
  those blocks vary by at most a tenth of a Poisson count's spread (var/mean <= 0.1). A thread woken at
  random varies like a Poisson count (+-sqrt(n)); a periodic one by one at most, except in the blocks
  where it stalled (the lab injects an episode every 0.6 s: a third of the blocks),
- and it sleeps: busy (on CPU or runnable) for at most 70 % of the block. A CPU-bound thread sharing a CPU
  is switched in at a steady rate too, by the scheduler's time slices, and is not a periodic waker.

Its period is the steady blocks' time divided by the sampling windows in which it was switched in (a
preempted SCHED_OTHER callback is switched in twice a cycle; a window holds at most one wake-up of a
thread whose period is longer than it), or by their switch-ins when that says the period is shorter
than two windows; the lab's own clock replaces it where the capture holds the lab's callbacks. An
engine thread that is switched in more than once a cycle (it also waits for workers) shows a fraction
of its real period: the limits are in the README.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyses import rules
from analyses.engine import engine_period_medians
from analyses.source import (
    KEPT_COLUMNS,
    KeptRows,
    capture_interval_ns,
    fills_rows,
    iter_samples,
    keep_rows,
    keepable,
    thread_order,
)
from analyses.span import in_span
from capture.errors import ForensicsError
from capture.format import Capture
from capture.vocabulary import RT_POLICIES, policy_name

BLOCK_NS = 200_000_000
MIN_WAKEUPS_PER_BLOCK = 2
MIN_COUNT = 20  # wake-ups per (merged) block
MAX_MERGE = 25  # at most 5 s blocks
MIN_BLOCKS = 5
STEADY_FRACTION = 0.5
MAX_DISPERSION = 0.1
MAX_BUSY_FRACTION = 0.7
WINDOWED_PERIOD_INTERVALS = 2.0  # a period this many sampling intervals long is counted in woken windows


def policy_label(policy: int, rtprio: int, nice: int | None = None) -> str:
    name = policy_name(policy)
    if int(policy) in RT_POLICIES:
        return f"{name} {int(rtprio)}"
    return name if nice is None or int(nice) == 0 else f"{name} nice {int(nice)}"


def thread_names(cap: Capture) -> pd.DataFrame:
    """tid -> comm, process (latest names: a process is named by its leader thread's latest comm; a tid
    that was several threads is named as its latest one)."""
    threads = cap.threads.drop_duplicates("tid", keep="last")
    if threads.empty:
        return pd.DataFrame({"tid": pd.Series(dtype="int32"), "comm": pd.Series(dtype=object), "process": []})
    return pd.DataFrame(
        {
            "tid": threads["tid"].astype("int32").to_numpy(),
            "comm": threads["comm"].astype(object).to_numpy(),
            "process": threads["process"].astype(object).to_numpy(),
        }
    )


# Whole-capture profiles of each Capture read, computed once: every view and every span asks for them.
_WHOLE: weakref.WeakKeyDictionary[Capture, pd.DataFrame] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class SamplesTap:
    """Work that rides on the profiles' pass over the samples, so that the capture is decoded once for both
    (summarize's bins: analyses.summary). `take(batch, likely)` is given each batch as
    iter_samples(cap, columns, t_range=..., batch_rows=batch_rows) gives it, and the threads that the
    first batch says are likely watched (_likely_watched); it is not called when no pass runs (the whole
    capture's profiles already known)."""

    columns: tuple[str, ...]
    batch_rows: int
    take: Callable[[pd.DataFrame, np.ndarray], None]


def thread_profiles(
    cap: Capture,
    *,
    t_range: tuple[int | None, int | None] | None = None,
    block_ns: int = BLOCK_NS,
    tap: SamplesTap | None = None,
) -> pd.DataFrame:
    """One row per thread: names, policy, totals, wake-up rate, `periodic` and `period_ns`.

    The totals (samples, on_cpu_ns, switches...) are those of `t_range`; whether a thread is periodic and
    its period always come from the whole capture (a span selects what is shown, never what is decided:
    README, "Explaining a spike"). `attrs["t_range"]` says which span the totals cover. `tap` rides on the
    pass over `t_range`'s samples, if one runs.
    """
    whole = _WHOLE.get(cap) if block_ns == BLOCK_NS else None
    if whole is None:
        whole = _profiles(cap, t_range=None, block_ns=block_ns, tap=tap if t_range is None else None)
        whole.attrs["t_range"] = None
        if block_ns == BLOCK_NS:
            _WHOLE[cap] = whole
    if t_range is None:
        return whole.copy()
    part = _profiles(cap, t_range=t_range, block_ns=block_ns, tap=tap)
    decided = whole.set_index("tid")
    for column in ("periodic", "period_ns", "period_source", "steady_fraction"):
        values = decided[column].reindex(part["tid"].to_numpy())
        part[column] = values.fillna(False).astype(bool).to_numpy() if column == "periodic" else values.to_numpy()
    part.attrs["t_range"] = t_range
    return part


def _profiles(
    cap: Capture, *, t_range: tuple[int | None, int | None] | None, block_ns: int, tap: SamplesTap | None = None
) -> pd.DataFrame:
    """thread_profiles over `t_range` alone (periods too). Streams the capture (bounded memory): per
    batch, per thread and block, the last cumulative counters."""
    columns = ["pid", "run_ns", "wait_ns", "slices", "policy", "rtprio", "nice", "starttime"]
    # The whole capture's pass also keeps the rows of the threads `stalls` will most likely watch (_keep).
    keeping = t_range is None and block_ns == BLOCK_NS and not fills_rows(cap)
    if keeping:
        columns = list(dict.fromkeys([*columns, *KEPT_COLUMNS]))
    if tap is not None:
        columns = list(dict.fromkeys([*columns, *tap.columns]))
        tapped = list(dict.fromkeys(["tick", "t_ns", "tid", *tap.columns]))  # iter_samples' columns for the tap
    kept: KeptRows | None = None
    likely: np.ndarray | None = None
    origin: int | None = None
    per_block: list[pd.DataFrame] = []
    per_thread: list[pd.DataFrame] = []
    last_slices = pd.Series(dtype=np.float64)  # per tid, the switch-in count of its previous sample
    batches = (
        iter_samples(cap, columns, t_range=t_range)
        if tap is None
        else iter_samples(cap, columns, t_range=t_range, batch_rows=tap.batch_rows)
    )
    for batch in batches:
        if origin is None:
            origin = int(batch["t_ns"].min())
        blocks_of, threads_of, last_slices = _batch_aggregates(batch, origin, block_ns, last_slices)
        per_block.append(blocks_of)
        per_thread.append(threads_of)
        if likely is None and (keeping or tap is not None):
            likely = _likely_watched(cap, batch, blocks_of)
        if keeping and likely is not None:
            kept = _keep(kept, batch, likely)
            keeping = kept is not None
        if tap is not None and likely is not None:
            tap.take(batch[tapped], likely)
        del batch  # not held while the next batch is read
    if keeping and kept is not None:
        keep_rows(cap, kept)
    if not per_thread:
        return _empty_profiles()
    lives = (
        pd.concat(per_thread)
        .groupby(level=[0, 1])
        .agg(
            pid=("pid", "last"),
            samples=("samples", "sum"),
            first_ns=("first_ns", "min"),
            last_ns=("last_ns", "max"),
            run_first=("run_first", "min"),
            run_last=("run_last", "max"),
            wait_first=("wait_first", "min"),
            wait_last=("wait_last", "max"),
            slices_first=("slices_first", "min"),
            slices_last=("slices_last", "max"),
            rt=("rt", "max"),
            max_rtprio=("max_rtprio", "max"),
            policy=("policy", "last"),
            rtprio=("rtprio", "last"),
            nice=("nice", "last"),
        )
    )
    # Each thread's own deltas; a tid that was several threads adds them up (never one across two).
    lives = lives.assign(
        wall_ns=lives["last_ns"] - lives["first_ns"],
        on_cpu_ns=lives["run_last"] - lives["run_first"],
        runqueue_ns=lives["wait_last"] - lives["wait_first"],
        switches=lives["slices_last"] - lives["slices_first"],
    ).sort_values("first_ns", kind="stable")
    threads = lives.groupby(level=0).agg(
        pid=("pid", "last"),
        samples=("samples", "sum"),
        first_ns=("first_ns", "min"),
        last_ns=("last_ns", "max"),
        wall_ns=("wall_ns", "sum"),
        on_cpu_ns=("on_cpu_ns", "sum"),
        runqueue_ns=("runqueue_ns", "sum"),
        switches=("switches", "sum"),
        rt=("rt", "max"),
        max_rtprio=("max_rtprio", "max"),
        policy=("policy", "last"),
        rtprio=("rtprio", "last"),
        nice=("nice", "last"),
    )
    joined = pd.concat(per_block).groupby(level=[0, 1, 2])
    blocks = joined.max().assign(woke=joined["woke"].sum()).reset_index().sort_values(["tid", "life", "block"])
    periodic = _periodicity(blocks, capture_interval_ns(cap))
    periodic = _by_voluntary_switches(cap, blocks, periodic, t_range, origin, block_ns)
    exact = lab_periods(cap)
    known = exact.index.intersection(threads.index)
    if len(known):  # the lab's own clock, where the capture has it: exact and periodic (README, "The lab")
        periodic = periodic.reindex(periodic.index.union(known))
        periodic.loc[known, "periodic"] = True
        periodic.loc[known, "period_ns"] = exact.reindex(known).to_numpy()
        periodic.loc[known, "period_source"] = "lab cycles"
    out = threads.join(periodic, how="left")
    out["wakeups_per_s"] = np.where(out["wall_ns"] > 0, out["switches"] / (out["wall_ns"] / 1e9), np.nan)
    out["periodic"] = out["periodic"].fillna(False).astype(bool)
    out = out.reset_index().rename(columns={"index": "tid"})
    out = out.merge(thread_names(cap), on="tid", how="left")
    out["comm"] = out["comm"].fillna("?")
    out["process"] = out["process"].fillna("?")
    keep = [
        "tid", "pid", "comm", "process", "policy", "rtprio", "nice", "rt", "max_rtprio", "samples",
        "first_ns", "last_ns", "wall_ns", "on_cpu_ns", "runqueue_ns", "switches", "wakeups_per_s",
        "periodic", "period_ns", "period_source", "steady_fraction",
    ]  # fmt: skip
    woken = _woken_block_share(blocks)
    return engine_periods(cap, out[keep], woken_blocks=woken).sort_values("tid").reset_index(drop=True)


def _woken_block_share(blocks: pd.DataFrame) -> pd.Series:
    """tid -> the share of the blocks of its life (first to last, each life of a reused tid apart) in which it
    was switched in (rules.ENGINE_RATE_MIN_WOKEN_BLOCKS). A block with no row of it had no switch-in: a row
    is left out only where its schedstat did not move (the recorder's skip) or it was not read (a slow tier's
    reads are 20-50 ms apart, within a block)."""
    if blocks.empty:
        return pd.Series(dtype=np.float64)
    per_life = blocks.assign(woken=blocks["woke"].to_numpy() > 0).groupby(["tid", "life"])
    lives = per_life.agg(first=("block", "min"), last=("block", "max"), woken=("woken", "sum"))
    lives = lives.assign(spanned=lives["last"] - lives["first"] + 1).groupby(level=0)[["woken", "spanned"]].sum()
    return (lives["woken"] / lives["spanned"]).astype(np.float64)


MAX_KEPT_ROWS = 3_000_000  # about 250 MB of KEPT_COLUMNS


def _likely_watched(cap: Capture, batch: pd.DataFrame, blocks_of: pd.DataFrame) -> np.ndarray:
    """The threads real-time or periodic in the first batch of a pass (its blocks alone decide): those
    select_threads most likely picks once the whole capture is known."""
    tid = batch["tid"].to_numpy()
    rt = np.unique(tid[np.isin(batch["policy"].to_numpy(), RT_POLICIES)])
    decided = _periodicity(blocks_of.reset_index().sort_values(["tid", "life", "block"]), capture_interval_ns(cap))
    periodic = decided.index[decided["periodic"].to_numpy(dtype=bool)].to_numpy()
    return np.union1d(rt, periodic).astype(np.int64)


def _keep(kept: KeptRows | None, batch: pd.DataFrame, likely: np.ndarray) -> KeptRows | None:
    """The rows of the threads `likely` watched (_likely_watched), kept batch by batch while they are what
    load_samples would read for those threads (source.keepable) and at most MAX_KEPT_ROWS; None: keep
    nothing. `stalls` watches the real-time and periodic threads, and without these rows finds theirs by
    decoding every row of the capture again. A thread they miss (real-time or periodic only later) is read
    again, with the rest (source._kept_batches)."""
    wanted = ["tick", "t_ns", "tid", *KEPT_COLUMNS]
    if not keepable(batch, wanted):
        return None
    if kept is None:
        kept = KeptRows(wanted, likely)
    rows = batch[np.isin(batch["tid"].to_numpy(), kept.tids)][wanted]
    kept.rows += len(rows)
    if kept.rows > MAX_KEPT_ROWS:
        return None
    kept.parts.append(rows.reset_index(drop=True))
    return kept


_PER_THREAD = {
    "pid": ("pid", "last"), "samples": ("t_ns", "size"), "first_ns": ("t_ns", "min"), "last_ns": ("t_ns", "max"),
    "run_first": ("run_ns", "min"), "run_last": ("run_ns", "max"), "wait_first": ("wait_ns", "min"),
    "wait_last": ("wait_ns", "max"), "slices_first": ("slices", "min"), "slices_last": ("slices", "max"),
    "rt": ("rt", "max"), "max_rtprio": ("rt_prio", "max"), "policy": ("policy", "last"),
    "rtprio": ("rtprio", "last"), "nice": ("nice", "last"),
}  # fmt: skip
_PER_BLOCK = {"t_last": ("t_ns", "max"), "slices": ("slices", "max"), "busy": ("busy", "max"), "woke": ("woke", "sum")}
_REDUCE = {"min": np.minimum, "max": np.maximum, "sum": np.add}


def _batch_aggregates(
    batch: pd.DataFrame, origin: int, block_ns: int, last_slices: pd.Series
) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series]:
    """One batch's part of _profiles: per (tid, life, block) and per (tid, life) what the whole capture's
    figures are joined from, and each tid's last switch-in count. With plain numpy columns (no nulls) and
    each tid one thread in the batch, the groups are runs of rows in (tid, t_ns) order and are reduced
    by numpy (where the batch's rows already rise in time per thread, without ordering them:
    _aggregates_by_runs); otherwise, and where that order cannot be had cheaply, by pandas
    (_batch_aggregates_pandas).
    Both give the same frames (the same rows, values, dtypes and index; tests/test_fast_paths.py)."""
    names = ["tid", "t_ns", "pid", "run_ns", "wait_ns", "slices", "policy", "rtprio", "nice"]
    if not all(isinstance(batch[name].to_numpy(), np.ndarray) and batch[name].dtype.kind in "iu" for name in names):
        return _batch_aggregates_pandas(batch, origin, block_ns, last_slices)
    life_all = _lives(batch["starttime"])
    tid_all, t_all = batch["tid"].to_numpy(), batch["t_ns"].to_numpy()
    by_runs = _aggregates_by_runs(batch, tid_all, t_all, life_all, origin, block_ns, last_slices)
    if by_runs is not None:
        return by_runs
    order = thread_order(tid_all, t_all)
    tid, t = tid_all[order], t_all[order]
    same_tid = tid[1:] == tid[:-1]
    life = life_all[order]
    if np.any(same_tid & (life[1:] != life[:-1])):  # a tid that was two threads in this batch
        return _batch_aggregates_pandas(batch, origin, block_ns, last_slices)
    column = {
        name: batch[name].to_numpy()[order]
        for name in ("pid", "run_ns", "wait_ns", "slices", "policy", "rtprio", "nice")
    }
    slices = column["slices"]
    tid_start = np.r_[True, ~same_tid]
    previous = np.empty(len(tid), dtype=np.float64)
    previous[1:] = slices[:-1]
    firsts = np.flatnonzero(tid_start)
    previous[firsts] = pd.Series(tid[firsts]).map(last_slices).to_numpy(dtype=np.float64)
    tid_end = np.r_[~same_tid, True]
    ends = np.flatnonzero(tid_end)
    last_slices = pd.Series(slices[ends], index=tid[ends]).combine_first(last_slices)
    rt = np.isin(column["policy"], RT_POLICIES)
    column.update(
        t_ns=t,
        block=(t - origin) // block_ns,
        busy=column["run_ns"] + column["wait_ns"],
        rt=rt,
        rt_prio=np.where(rt, column["rtprio"], -1),
        woke=(slices.astype(np.float64) > previous).astype(np.int64),
    )
    block = column["block"]
    block_start = np.flatnonzero(tid_start | np.r_[True, block[1:] != block[:-1]])
    blocks = _reduce_runs(column, block_start, _PER_BLOCK)
    blocks.index = pd.MultiIndex.from_arrays(
        [tid[block_start], life[block_start], block[block_start]], names=["tid", "life", "block"]
    )
    threads = _reduce_runs(column, firsts, _PER_THREAD)
    threads.index = pd.MultiIndex.from_arrays([tid[firsts], life[firsts]], names=["tid", "life"])
    return blocks, threads, last_slices


def _aggregates_by_runs(
    batch: pd.DataFrame,
    tid: np.ndarray,
    t: np.ndarray,
    life: np.ndarray,
    origin: int,
    block_ns: int,
    last_slices: pd.Series,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series] | None:
    """_batch_aggregates without putting the rows in (tid, t_ns) order: rows come chunk by chunk, each
    chunk by thread in time order, so a batch is runs of rows of one thread and block. Each run is
    reduced where it lies, then the runs (a few thousand) are put in order and reduced again: the same
    frames as reducing the ordered rows, without sorting the batch and gathering 7 columns of it (issue
    12: analyses speed). None (the ordering way) unless each thread's rows rise in time in the batch's
    order, and each tid is one thread (one life) in the batch."""
    n = len(tid)
    if not n:
        return None
    block_all = (t - origin) // block_ns
    tid_change = tid[1:] != tid[:-1]
    if np.any(~tid_change & (t[1:] < t[:-1])):
        return None
    run = np.flatnonzero(np.r_[True, tid_change | (block_all[1:] != block_all[:-1]) | (life[1:] != life[:-1])])
    run_last = np.r_[run[1:], n] - 1
    # The runs in (tid, time) order: by tid, stably (a thread's runs come in time order if it rises).
    ranked = np.argsort(tid[run], kind="stable")
    first, last = run[ranked], run_last[ranked]
    r_tid = tid[first]
    same = r_tid[1:] == r_tid[:-1]
    if np.any(same & ((t[first[1:]] < t[last[:-1]]) | (life[first[1:]] != life[first[:-1]]))):
        return None
    slices = batch["slices"].to_numpy()
    run_ns, wait_ns = batch["run_ns"].to_numpy(), batch["wait_ns"].to_numpy()
    policy, rtprio = batch["policy"].to_numpy(), batch["rtprio"].to_numpy()
    # Each row's previous switch-in count: the row before, except at a run of another thread before it;
    # there, the last row of the thread's run before, or of the batch before (last_slices).
    previous = np.empty(n, dtype=np.float64)
    previous[1:] = slices[:-1]
    starts = np.r_[True, tid_change]
    r_start = starts[first]  # which ordered runs follow another thread's row
    after = np.r_[False, same]  # ordered runs that have a run of their thread before them
    take = r_start & after
    previous[first[take]] = slices[np.r_[0, last[:-1]][take]]
    opening = r_start & ~after
    previous[first[opening]] = pd.Series(r_tid[opening]).map(last_slices).to_numpy(dtype=np.float64)
    thread_end = np.r_[~same, True]
    ends = last[thread_end]
    last_slices = pd.Series(slices[ends], index=r_tid[thread_end]).combine_first(last_slices)
    rt = np.isin(policy, RT_POLICIES)
    per_row = {
        "t_ns": t,
        "run_ns": run_ns,
        "wait_ns": wait_ns,
        "slices": slices,
        "busy": run_ns + wait_ns,
        "rt": rt,
        "rt_prio": np.where(rt, rtprio, -1),
        "woke": (slices.astype(np.float64) > previous).astype(np.int64),
    }
    # Per run, where it lies, every reduction either table makes (min of mins, max of maxes, sum of sums).
    wanted = {key for spec in (_PER_BLOCK, _PER_THREAD) for key in spec.values() if key[1] in _REDUCE}
    runs = {key: _REDUCE[key[1]].reduceat(per_row[key[0]], run)[ranked] for key in sorted(wanted)}
    sizes = (run_last - run + 1)[ranked].astype(np.int64)
    r_life, r_block = life[first], block_all[first]
    block_start = np.flatnonzero(np.r_[True, ~same | (r_block[1:] != r_block[:-1])])
    thread_start = np.flatnonzero(np.r_[True, ~same])
    blocks = pd.DataFrame(
        {name: _REDUCE[how].reduceat(runs[(source, how)], block_start) for name, (source, how) in _PER_BLOCK.items()}
    )
    blocks.index = pd.MultiIndex.from_arrays(
        [r_tid[block_start], r_life[block_start], r_block[block_start]], names=["tid", "life", "block"]
    )
    threads = {}
    for name, (source, how) in _PER_THREAD.items():
        if how == "size":
            threads[name] = np.add.reduceat(sizes, thread_start)
        elif how == "last":
            threads[name] = batch[source].to_numpy()[ends]
        else:
            threads[name] = _REDUCE[how].reduceat(runs[(source, how)], thread_start)
    frame = pd.DataFrame(threads)
    frame.index = pd.MultiIndex.from_arrays([r_tid[thread_start], r_life[thread_start]], names=["tid", "life"])
    return blocks, frame, last_slices


def _lives(starttime: pd.Series) -> np.ndarray:
    """Each row's start time as _batch_aggregates_pandas makes it (-1 where unknown): numbers as they are
    (to_numeric and fillna copy 4 M rows for nothing), anything else through them."""
    if isinstance(starttime.dtype, pd.Int64Dtype):  # nullable, as a column with nulls comes (unknown: -1)
        return starttime.to_numpy(dtype=np.int64, na_value=-1)
    values = starttime.to_numpy()
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        return values.astype(np.int64, copy=False)
    return pd.to_numeric(starttime, errors="coerce").fillna(-1).to_numpy(dtype=np.int64)


def _reduce_runs(column: dict[str, np.ndarray], starts: np.ndarray, spec: dict[str, tuple[str, str]]) -> pd.DataFrame:
    """Per run of rows (each from one of `starts` to the next), the named reductions of spec."""
    ends = np.r_[starts[1:], len(column["t_ns"])] - 1
    out = {}
    for name, (source, how) in spec.items():
        values = column[source]
        if how == "size":
            out[name] = (ends - starts + 1).astype(np.int64)
        elif how == "last":
            out[name] = values[ends]
        else:
            out[name] = _REDUCE[how].reduceat(values, starts)
    return pd.DataFrame(out)


def _batch_aggregates_pandas(
    batch: pd.DataFrame, origin: int, block_ns: int, last_slices: pd.Series
) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series]:
    batch = batch.sort_values(["tid", "t_ns"], kind="stable")
    rt = np.isin(batch["policy"].to_numpy(), RT_POLICIES)
    previous = batch.groupby("tid", sort=False)["slices"].shift(1)
    previous = previous.fillna(batch["tid"].map(last_slices))
    last_slices = batch.groupby("tid", sort=False)["slices"].last().combine_first(last_slices)
    frame = batch.assign(
        block=(batch["t_ns"].to_numpy() - origin) // block_ns,
        busy=batch["run_ns"].to_numpy() + batch["wait_ns"].to_numpy(),
        rt=rt,
        rt_prio=np.where(rt, batch["rtprio"].to_numpy(), -1),
        # A thread is (tid, start time): a reused tid's counters start again from zero (DESIGN.md,
        # "Kernel facts"); captures without start times read as one thread per tid.
        life=pd.to_numeric(batch["starttime"], errors="coerce").fillna(-1).to_numpy(dtype=np.int64),
        # A window (the time since the thread's previous read) in which it was switched in at all.
        woke=(batch["slices"].to_numpy(np.float64) > previous.to_numpy(np.float64)).astype(np.int64),
    )
    blocks = frame.groupby(["tid", "life", "block"], sort=False).agg(**_PER_BLOCK)
    ordered = frame.sort_values("t_ns", kind="stable")
    threads = ordered.groupby(["tid", "life"], sort=False).agg(**_PER_THREAD)
    return blocks, threads, last_slices


def engine_periods(cap: Capture, profiles: pd.DataFrame, woken_blocks: pd.Series | None = None) -> pd.DataFrame:
    """Threads of an engine's processes switched in k times a cycle (PipeWire's data loop: by its timer,
    then by its clients' finish) show a period between a k-th of the engine's and the engine's (the
    wake-ups of one cycle that fall in one sampling window count once): where the capture has the
    engine's own cycles, such a thread's period is the engine's (its stall limits then follow the cycle,
    and it is a link of the chain: analyses.incidents). Which measured periods are so is
    rules.runs_engine_cycle; threads at their engine's period (within rules.ENGINE_PERIOD_FRACTION) or at
    other periods are left as measured.

    Each engine source (the `engine` column: JACK and PipeWire can be recorded together, at different
    periods) gives its median period to its own clients' processes (and JACK's to jackd's, the driver's
    thread). A process that is a client of both (PipeWire's JACK layer) takes the shorter period that fits
    it: the fewer wake-ups a cycle; one that agrees with either engine's period keeps its own.

    `woken_blocks` (tid -> share of its life's blocks with a switch-in, _woken_block_share; None: not known)
    keeps a thread that was busy a while and then asleep from running the cycle by its mean rate."""
    names = set(cap.table_names)
    if not {"engine_cycles", "engine_clients"} <= names:
        return profiles
    cycles = cap.table("engine_cycles", columns=["engine", "period_ns"])
    if cycles.empty:
        return profiles
    periods = engine_period_medians(cycles)  # shortest first: it wins a tie
    if periods.empty:
        return profiles
    clients = cap.table("engine_clients", columns=["engine", "pid"])
    client_pids = pd.to_numeric(clients["pid"], errors="coerce")
    jackd = (cap.engine_sources.get("jack") or {}).get("jackd_pid")
    measured = pd.to_numeric(profiles["period_ns"], errors="coerce").to_numpy(dtype=np.float64)
    periodic = profiles["periodic"].to_numpy(dtype=bool)
    # (A profile without a rate or a policy, as a test's few columns: no thread is an engine's by its rate.)
    rate = pd.to_numeric(profiles.get("wakeups_per_s", pd.Series(np.nan, index=profiles.index)), errors="coerce")
    rate = rate.to_numpy(dtype=np.float64)
    life_ns = pd.to_numeric(profiles.get("wall_ns", pd.Series(np.nan, index=profiles.index)), errors="coerce")
    life_ns = life_ns.to_numpy(dtype=np.float64)
    woken = None if woken_blocks is None else woken_blocks.reindex(profiles["tid"]).to_numpy(dtype=np.float64)
    timeshared = ~profiles["rt"].to_numpy(dtype=bool) if "rt" in profiles else np.zeros(len(profiles), dtype=bool)
    pid = profiles["pid"]
    agrees = np.zeros(len(profiles), dtype=bool)
    fixed = np.full(len(profiles), np.nan)
    by_rate = np.zeros(len(profiles), dtype=bool)
    for engine, period in periods.items():
        pids = set(client_pids[clients["engine"].astype(object) == engine].dropna().astype(np.int64))
        if engine == "jack" and jackd:
            pids.add(int(jackd))
        of_engine = pid.isin(pids).to_numpy()
        mine = of_engine & periodic
        # Threads that already agree with their engine's period (as one graph's threads do) keep their own.
        agrees |= mine & (np.abs(measured - period) <= rules.ENGINE_PERIOD_FRACTION * period)
        fits = mine & rules.runs_engine_cycle(measured, float(period)) & np.isnan(fixed)
        fixed[fits] = period
        # An engine without real-time priority (jackd --no-realtime, or no rtprio for its user) on a busy
        # machine: its threads share the CPUs with the load, their switch-ins per block wander with every wait
        # for a CPU, and /proc finds no period, though they run the cycle by their mean rate. Unwatched, their
        # waits were never episodes: a jackd --no-realtime graph beside three CPU hogs had 79 of 189 xruns
        # rooted at an `unknown` driver. With the engine's period they are the engine's periodic threads and
        # their 2-3 ms waits for a CPU are found (2 unknown). A real-time thread without a period is watched
        # already and keeps none: the driver skipping cycles is what makes it irregular, and a period would
        # make each skipped cycle a late wake-up (analyses.incidents links it by its rate all the same).
        # One such thread a process, the one switched in most, and none in a process with a thread at the
        # cycle already (by its period, or real-time at the cycle's rate): a client runs its cycle in one
        # thread (jack2 JackClient::Execute), the server in its driver's, and beside it jackd --no-realtime has
        # a thread woken by its clients' requests and notifications (158-236 switch-ins a second through
        # xruns at 5.333 and 2.667 ms periods). Only a thread switched in through its life runs a cycle by its
        # mean rate: that request thread, recorded from the server's start, is busy while clients register
        # and then asleep (rules.ENGINE_RATE_MIN_WOKEN_BLOCKS).
        by_its_rate = of_engine & ~periodic & np.isnan(fixed)
        by_its_rate &= rules.runs_engine_cycle_by_rate(rate, period, life_ns, woken)
        at_cycle = pid[of_engine & (~np.isnan(fixed) | (by_its_rate & ~timeshared))].unique()
        fits = by_its_rate & timeshared & ~pid.isin(at_cycle).to_numpy()
        most = pd.DataFrame({"tid": profiles["tid"], "pid": pid, "rate": rate})[fits]
        most = most.sort_values("rate", ascending=False, kind="stable").drop_duplicates("pid")
        fits = profiles["tid"].isin(most["tid"]).to_numpy()
        fixed[fits] = period
        by_rate |= fits
    fix = ~np.isnan(fixed) & ~agrees
    if not fix.any():
        return profiles
    out = profiles.copy()
    out.loc[fix, "period_ns"] = fixed[fix]
    out.loc[by_rate, "periodic"] = True
    out.loc[by_rate, "period_source"] = "engine cycle, by switch-in rate"
    return out


def lab_periods(cap: Capture) -> pd.Series:
    """tid -> period_ns from the lab's cycles (the spacing of their deadlines per period number, on the
    lab's absolute clock; periods it skipped after a late callback count): exact, where the capture
    holds the lab's callbacks."""
    cycles = cap.cycles
    if cycles.empty or "period" not in cycles:
        return pd.Series(dtype=np.float64)
    cycles = cycles.sort_values(["tid", "deadline_ns"])
    by_tid = cycles.groupby("tid")
    steps = by_tid["period"].diff()
    spacing = cycles.assign(gap=by_tid["deadline_ns"].diff() / steps.where(steps > 0))
    spacing = spacing[spacing["gap"] > 0]
    return spacing.groupby("tid")["gap"].median().astype(np.float64)


def _periodicity(blocks: pd.DataFrame, interval_ns: int) -> pd.DataFrame:
    """Per tid: periodic flag, period_ns, period_source and the fraction of steady blocks (module
    docstring)."""
    tid = blocks["tid"].to_numpy()
    block = blocks["block"].to_numpy()
    same = np.r_[False, (tid[1:] == tid[:-1]) & (block[1:] == block[:-1] + 1)]
    if "life" in blocks:  # consecutive blocks of one thread, not of a tid reused meanwhile
        life = blocks["life"].to_numpy()
        same[1:] &= life[1:] == life[:-1]
    prev = np.r_[0, np.arange(len(tid) - 1)]
    counts = blocks["slices"].to_numpy() - blocks["slices"].to_numpy()[prev]
    spans = blocks["t_last"].to_numpy() - blocks["t_last"].to_numpy()[prev]
    busy = blocks["busy"].to_numpy() - blocks["busy"].to_numpy()[prev]
    ok = same & (counts >= 0) & (spans > 0)
    woke = blocks["woke"].to_numpy()
    d = pd.DataFrame(
        {"tid": tid[ok], "block": block[ok], "count": counts[ok], "span": spans[ok], "busy": busy[ok], "woke": woke[ok]}
    )
    if d.empty:
        return pd.DataFrame(columns=["periodic", "period_ns", "period_source", "steady_fraction"])
    # Slow wakers get longer blocks (k consecutive ones) so that a block holds about MIN_COUNT wake-ups:
    # a Poisson count of n varies by +-sqrt(n), so "steady within +-1" only separates the two from ~20 up.
    rate = d.groupby("tid")["count"].transform("median").to_numpy()
    k = np.clip(np.ceil(MIN_COUNT / np.maximum(rate, 1.0)), 1, MAX_MERGE).astype(np.int64)
    d["group"] = d["block"].to_numpy() // k
    d["k"] = k
    grouped = d.groupby(["tid", "group"]).agg(
        count=("count", "sum"),
        span=("span", "sum"),
        busy=("busy", "sum"),
        woke=("woke", "sum"),
        n=("count", "size"),
        k=("k", "first"),
    )
    d = grouped[grouped["n"] == grouped["k"]].reset_index()  # whole groups only
    if d.empty:
        return pd.DataFrame(columns=["periodic", "period_ns", "period_source", "steady_fraction"])
    d["busy"] = d["busy"] / d["span"]
    d["rate"] = d["count"] / d["k"]  # wake-ups per BLOCK_NS, for the rate test
    median = d.groupby("tid")["count"].transform("median")
    tolerance = np.maximum(1.0, 0.05 * median)
    d["steady"] = (d["count"] - median).abs() <= tolerance
    steady = d[d["steady"]]
    agg = d.groupby("tid").agg(n=("count", "size"), rate=("rate", "median"), busy=("busy", "median"))
    agg["steady_fraction"] = d.groupby("tid")["steady"].mean()
    sums = steady.groupby("tid").agg(span=("span", "sum"), count=("count", "sum"), woke=("woke", "sum"))
    spread = steady.groupby("tid")["count"].agg(lambda c: c.var(ddof=0) / c.mean() if c.mean() > 0 else np.inf)
    agg = agg.join(sums, how="left").join(spread.rename("dispersion"), how="left")
    agg["periodic"] = (
        (agg["n"] >= MIN_BLOCKS)
        & (agg["rate"] >= MIN_WAKEUPS_PER_BLOCK)
        & (agg["steady_fraction"] >= STEADY_FRACTION)
        & (agg["dispersion"] <= MAX_DISPERSION)
        & (agg["busy"] <= MAX_BUSY_FRACTION)
    )
    # Every switch-in counts in `count`, also those that end a preemption: a SCHED_OTHER callback
    # preempted mid-cycle is switched in twice a period, and span / count reads short (3.9 ms for the
    # lab's 5.333 ms under load). A window holds at most one wake-up of a thread whose period is longer
    # than the window, so the windows with a switch-in count its wake-ups, and a preemption inside a
    # woken window is not counted again. That count is used when it says the period is at least two
    # windows long (a thread waking every window could have any shorter period: the raw count is kept).
    by_count = agg["span"] / agg["count"].where(agg["count"] > 0)
    by_window = agg["span"] / agg["woke"].where(agg["woke"] > 0)
    windowed = by_window >= WINDOWED_PERIOD_INTERVALS * interval_ns
    agg["period_ns"] = np.where(agg["periodic"], np.where(windowed, by_window, by_count), np.nan)
    source = np.where(windowed, "/proc windows with a switch-in", "/proc switch-ins").astype(object)
    agg["period_source"] = np.where(agg["periodic"].to_numpy(bool), source, np.array(None, dtype=object))
    return agg[["periodic", "period_ns", "period_source", "steady_fraction"]]


def _by_voluntary_switches(
    cap: Capture,
    blocks: pd.DataFrame,
    periodic: pd.DataFrame,
    t_range: tuple[int | None, int | None] | None,
    origin: int | None,
    block_ns: int,
) -> pd.DataFrame:
    """Threads the switch-ins left aperiodic, judged again by their voluntary switches where the capture
    has the `sched` file (real-time threads by default): a thread preempted mid-cycle is switched in again
    without having woken, and a higher-priority load breaks its count (recorded: a JACK client at FIFO 5
    beside a real-time benchmark (load average 5.6), 499 switch-ins a second at a 5.35 ms period, 232
    voluntary switches and 267 preemptions a second; its lock waits went unseen). A voluntary switch is
    the thread going to sleep, once a cycle whatever preempted it; the same tests apply to its count per
    block, and a window whose count grew is a window in which it slept (a row exists wherever its
    schedstat moved: the skip)."""
    if "sched" not in cap.table_names or origin is None or blocks.empty:
        return periodic
    decided = periodic["periodic"].reindex(blocks["tid"].unique()).fillna(False).astype(bool)
    left = decided.index[~decided.to_numpy()]
    if not len(left):
        return periodic
    lives = blocks.groupby("tid")["life"].nunique()
    left = [int(t) for t in left if lives.get(t, 2) == 1]  # a reused tid: its rows are not one thread's
    sched = cap.table("sched", columns=["t_ns", "tid", "nr_voluntary_switches"])
    sched = sched[sched["tid"].isin(left).to_numpy() & in_span(sched["t_ns"].to_numpy(np.int64), t_range)]
    if sched.empty:
        return periodic
    sched = sched.sort_values(["tid", "t_ns"], kind="stable")
    vol = pd.to_numeric(sched["nr_voluntary_switches"], errors="coerce").astype(np.float64)
    slept = (vol > vol.groupby(sched["tid"]).shift(1)).astype(np.int64)
    frame = pd.DataFrame(
        {"tid": sched["tid"].to_numpy(), "block": (sched["t_ns"].to_numpy() - origin) // block_ns,
         "t_last": sched["t_ns"].to_numpy(), "slices": vol.to_numpy(), "woke": slept.to_numpy()}
    )  # fmt: skip
    frame = frame[np.isfinite(frame["slices"].to_numpy())]
    per_block = frame.groupby(["tid", "block"]).agg(
        t_last=("t_last", "max"), slices=("slices", "max"), woke=("woke", "sum")
    )
    busy = blocks.set_index(["tid", "block"])[["busy", "life"]]
    per_block = per_block.join(busy, how="inner").reset_index().sort_values(["tid", "block"])
    again = _periodicity(per_block, capture_interval_ns(cap))
    found = again.index[again["periodic"].to_numpy(dtype=bool)]
    if not len(found):
        return periodic
    again = again.loc[found].assign(period_source="/proc voluntary switches (sched)")
    return pd.concat([periodic.drop(index=found, errors="ignore"), again])


def _empty_profiles() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "tid": pd.Series(dtype="int32"),
            "pid": pd.Series(dtype="int32"),
            "comm": pd.Series(dtype=object),
            "process": pd.Series(dtype=object),
            "policy": pd.Series(dtype="int8"),
            "rtprio": pd.Series(dtype="int16"),
            "nice": pd.Series(dtype="int8"),
            "rt": pd.Series(dtype=bool),
            "max_rtprio": pd.Series(dtype="int16"),
            "samples": pd.Series(dtype="int64"),
            "first_ns": pd.Series(dtype="int64"),
            "last_ns": pd.Series(dtype="int64"),
            "wall_ns": pd.Series(dtype="int64"),
            "on_cpu_ns": pd.Series(dtype="int64"),
            "runqueue_ns": pd.Series(dtype="int64"),
            "switches": pd.Series(dtype="int64"),
            "wakeups_per_s": pd.Series(dtype="float64"),
            "periodic": pd.Series(dtype=bool),
            "period_ns": pd.Series(dtype="float64"),
            "period_source": pd.Series(dtype=object),
            "steady_fraction": pd.Series(dtype="float64"),
        }
    )


def select_threads(
    profiles: pd.DataFrame, *, pattern: str | None = None, everything: bool = False, tids: tuple[int, ...] = ()
) -> pd.DataFrame:
    """Threads of interest: all (`everything`), those named by tid (`tids`) or whose thread or process
    name matches `pattern`, or by default the real-time threads and the periodic ones. Adds a `why`
    column that says which name matched."""
    if everything:
        return profiles.assign(why="all threads")
    if tids or pattern is not None:
        by_tid = profiles["tid"].isin(tids).to_numpy()
        by_comm = np.zeros(len(profiles), dtype=bool)
        by_process = np.zeros(len(profiles), dtype=bool)
        if pattern is not None:
            regex = re.compile(pattern)
            by_comm = profiles["comm"].astype(str).map(lambda s: bool(regex.search(s))).to_numpy(bool)
            by_process = profiles["process"].astype(str).map(lambda s: bool(regex.search(s))).to_numpy(bool)
        why = np.where(
            by_tid,
            "--tid",
            np.where(
                by_comm, f"thread name matches {pattern!r}", f"process name matches {pattern!r} (not the thread's)"
            ),
        )
        keep = by_tid | by_comm | by_process
        return profiles[keep].assign(why=why[keep])
    rt = profiles["rt"].to_numpy(dtype=bool)
    periodic = profiles["periodic"].to_numpy(dtype=bool)
    chosen = profiles[rt | periodic].copy()
    why = np.where(rt & periodic, "real-time, periodic", np.where(rt, "real-time", "periodic"))
    chosen["why"] = why[rt | periodic]
    return chosen


def check_tids(cap: Capture, tids: Iterable[int], name: str) -> None:
    """The one check of `--tid N` (every command that takes it): each tid asked for must be a thread of
    the capture (at any time in it: a --span may still leave it out). Raises a one-line ForensicsError
    naming those it lacks."""
    wanted = sorted({int(t) for t in tids})
    if not wanted:
        return
    known = set(pd.to_numeric(cap.threads["tid"], errors="coerce").dropna().astype(np.int64).tolist())
    missing = [t for t in wanted if t not in known]
    if missing:  # a thread sampled but never named (a capture without its threads table)
        known |= set(thread_profiles(cap)["tid"].astype(np.int64).tolist())
        missing = [t for t in wanted if t not in known]
    if missing:
        asked = ", ".join(f"--tid {t}" for t in missing)
        which = "no such thread" if len(missing) == 1 else "no such threads"
        raise ForensicsError(f"{asked}: {which} in {name} (`forensics dump --table threads` lists them)")
