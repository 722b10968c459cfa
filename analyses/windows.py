"""Per thread, per tick: what the thread did between two reads (a "window").

A window of thread T ends at a read of T's counters and starts at T's previous read. Its columns:

    tid pid tick start_ns end_ns wall_ns      which thread, which tick ends the window, its span
    on_cpu_ns runqueue_ns off_cpu_ns          where the wall time went (reconciled, see below)
    run_delta_ns wait_delta_ns                the raw schedstat deltas they come from
    switches                                  switch-ins (schedstat field 3 delta)
    minflt majflt utime_ns stime_ns           fault counts, user/kernel time (clock ticks as ns)
    blkio_ns                                  delay-accounting block-IO wait (NA unless it was on)
    state state_start                         state letter (int8 code, source.STATE_ALPHABET) at the
                                              read that ends / starts the window: a snapshot
    cpu core_type policy rtprio nice          placement and scheduling class at the read that ends it
    cpu_start policy_start rtprio_start       the same at the read that starts it

Optional, when the capture holds them: vol_switches invol_switches migrations (from the `sched` file), the
schedstats sums wait_sum_ns sleep_ns block_ns iowait_ns (CONFIG_SCHEDSTATS + kernel.sched_schedstats),
and the taskstats delays ts_blkio_ns ts_swapin_ns ts_freepages_ns ts_thrashing_ns ts_compact_ns
ts_cpu_delay_ns (delay accounting, read through taskstats).

Reconciliation. The kernel does not keep these counters live (DESIGN.md, "Kernel facts"): a running
thread's sum_exec_runtime grows only when update_curr() runs, at the scheduler tick and at a switch
(kernel/sched/fair.c, rt.c), so with CONFIG_HZ=250 a read can lag by 4 ms; and run_delay (schedstat 2)
grows only at switch-in (sched_info_arrive in kernel/sched/stats.h), so a thread kept waiting for a CPU for
10 ms shows nothing for 10 ms and then all of it at once. Raw deltas therefore put time in the wrong
window: a window can show more than its wall time (the catch-up) after windows that looked asleep.
`reconcile` moves such late-accounted time back into the windows it was lived in: it takes the cumulative
off-CPU time (wall minus run minus wait), which those lags can only overstate, and replaces it by the
tightest non-decreasing curve below it (a suffix minimum). The time moved is split between on-CPU and
run-queue in the proportion the catch-up window itself shows. Totals per thread are unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import pandas as pd

from analyses.source import COMPACT_DTYPES, STATE_ALPHABET, STATE_R, iter_samples, load_samples, thread_order
from capture.format import Capture

# Columns of the samples table each window column needs.
BASE_COLUMNS = ["pid", "run_ns", "wait_ns", "slices", "state", "cpu", "policy", "rtprio", "starttime"]
FAULT_COLUMNS = ["minflt", "majflt"]
TIME_COLUMNS = ["utime", "stime", "nice", "blkio_ticks"]
ALL_COLUMNS = BASE_COLUMNS + FAULT_COLUMNS + TIME_COLUMNS

# Delay accounting per thread through taskstats (the capture's "taskstats" table: cumulative ns per (tid,
# tick)). Like run_delay, each total grows when its delay ends (delayacct_*_end in kernel/delayacct.c).
TASKSTATS_DELTAS = {
    "blkio_delay_ns": "ts_blkio_ns",
    "swapin_delay_ns": "ts_swapin_ns",
    "freepages_delay_ns": "ts_freepages_ns",
    "thrashing_delay_ns": "ts_thrashing_ns",
    "compact_delay_ns": "ts_compact_ns",
    "cpu_delay_ns": "ts_cpu_delay_ns",
}

SCHED_DELTAS = {
    "nr_voluntary_switches": "vol_switches",
    "nr_involuntary_switches": "invol_switches",
    "nr_migrations": "migrations",
    "wait_sum_ns": "wait_sum_ns",
    "sum_sleep_runtime_ns": "sleep_ns",
    "sum_block_runtime_ns": "block_ns",
    "iowait_sum_ns": "iowait_ns",
}


def _group_starts(tid: np.ndarray) -> np.ndarray:
    """True where a new thread begins in an array sorted by tid."""
    return np.r_[True, tid[1:] != tid[:-1]] if len(tid) else np.zeros(0, dtype=bool)


def _thread_starts(frame: pd.DataFrame) -> np.ndarray:
    """True where a new thread begins in rows sorted by (tid, time): a new tid, or the same tid with
    another start time (the kernel reused it for a new thread). Unknown start times join nothing."""
    starts = _group_starts(frame["tid"].to_numpy())
    if "starttime" in frame and len(frame) > 1:
        start = pd.to_numeric(frame["starttime"], errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
        known = ~np.isnan(start[1:]) & ~np.isnan(start[:-1])
        starts = starts | np.r_[False, known & (start[1:] != start[:-1])]
    return starts


def window_deltas(
    samples: pd.DataFrame,
    *,
    clk_tck: int = 100,
    delayacct: bool | None = None,
    previous: tuple[np.ndarray, np.ndarray] | None = None,
) -> pd.DataFrame:
    """Raw windows from samples sorted by (tid, tick): one row per pair of consecutive reads of a thread.
    `previous` (rows, before): rows in another order, each of `rows` following the read at `before` of its
    thread, not the row before it (the first row of a run of a thread in batch order: _windows_of_runs).

    A thread is (tid, starttime): where the start time changes the tid was reused by a new thread, and
    no window spans the two (their counters need not go backwards: a new thread that ran more than the
    old one looks like a continuation). Without start times (older captures), a counter that goes
    backwards marks the reuse (or a damaged row). Columns not in `samples` are left out (faults,
    times) or NA (blkio without delay accounting: its 0 would be a silent zero, DESIGN.md).
    """
    tid = samples["tid"].to_numpy()
    first = _thread_starts(samples)
    rows, before = previous if previous is not None else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    if len(rows):
        first[rows] = False  # each follows its `before`, of its tid: a thread start only where the start time says
        if "starttime" in samples:
            start = pd.to_numeric(samples["starttime"], errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
            a, b = start[rows], start[before]
            first[rows] = ~np.isnan(a) & ~np.isnan(b) & (a != b)

    def step(values: np.ndarray) -> np.ndarray:
        """Each row's value less its previous read's."""
        out = _step(values)
        if len(rows):
            out[rows] = values[rows] - values[before]
        return out

    d_run = step(samples["run_ns"].to_numpy())
    d_wait = step(samples["wait_ns"].to_numpy())
    d_slices = step(samples["slices"].to_numpy())
    reset = (d_run < 0) | (d_wait < 0) | (d_slices < 0)
    valid = ~first & ~reset
    idx = np.flatnonzero(valid)
    pidx = idx - 1
    if len(rows):
        at = np.searchsorted(idx, rows)
        kept = at < len(idx)
        kept[kept] = idx[at[kept]] == rows[kept]
        pidx[at[kept]] = before[kept]
    t = samples["t_ns"].to_numpy()
    out: dict[str, Any] = {
        "tid": tid[idx],
        "pid": samples["pid"].to_numpy()[idx] if "pid" in samples else np.zeros(len(idx), np.int32),
        "tick": samples["tick"].to_numpy()[idx],
        "start_ns": t[pidx],
        "end_ns": t[idx],
    }
    out["wall_ns"] = out["end_ns"] - out["start_ns"]
    if "starttime" in samples:  # the thread's identity with its tid: reconcile keeps threads apart by it
        out["starttime"] = samples["starttime"].to_numpy()[idx]
    out["run_delta_ns"] = d_run[idx]
    out["wait_delta_ns"] = d_wait[idx]
    out["switches"] = d_slices[idx].astype(np.int32)
    tick_ns = 1_000_000_000 // max(int(clk_tck), 1)
    for name in ("minflt", "majflt"):
        if name in samples:
            out[name] = np.maximum(step(samples[name].to_numpy())[idx], 0).astype(np.int32)
    for name in ("utime", "stime"):
        if name in samples:
            out[f"{name}_ns"] = np.maximum(step(samples[name].to_numpy())[idx], 0) * tick_ns
    if "blkio_ticks" in samples:
        if delayacct:
            values = samples["blkio_ticks"].to_numpy()
            # Clamp: one kernel here jumps field 42 to about uptime x 100 now and then (DESIGN.md).
            blk = np.clip((values[idx] - values[pidx]) * tick_ns, 0, out["wall_ns"])
            out["blkio_ns"] = pd.array(blk, dtype="Int64")
        else:
            out["blkio_ns"] = pd.arrays.IntegerArray(np.zeros(len(idx), np.int64), np.ones(len(idx), dtype=bool))
    if "state" in samples:
        state = samples["state"].to_numpy()
        out["state"] = state[idx]
        out["state_start"] = state[pidx]
    for name in ("cpu", "policy", "rtprio", "nice"):
        if name in samples:
            values = samples[name].to_numpy()
            out[name] = values[idx]
            if name != "nice":  # where the thread was at the window's start: migrations, policy changes
                out[f"{name}_start"] = values[pidx]
    return pd.DataFrame(out, copy=False)


def _step(values: np.ndarray) -> np.ndarray:
    """Each row's value less the row before's (0 at the first): what values - values[prev] gave, by slices
    and not a gather (window_deltas keeps the rows after the first of each thread)."""
    out = np.empty_like(values)
    out[:1] = 0
    np.subtract(values[1:], values[:-1], out=out[1:])
    return out


def reconcile(windows: pd.DataFrame) -> pd.DataFrame:
    """Add on_cpu_ns, runqueue_ns, off_cpu_ns with late-accounted time moved back (module docstring).

    `windows` must hold whole thread histories sorted by (tid, end_ns), as `window_deltas` returns them.
    """
    tid = windows["tid"].to_numpy()
    wall = windows["wall_ns"].to_numpy().astype(np.int64)
    d_run = windows["run_delta_ns"].to_numpy().astype(np.int64)
    d_wait = windows["wait_delta_ns"].to_numpy().astype(np.int64)
    n = len(tid)
    if n == 0:
        return windows.assign(
            on_cpu_ns=np.zeros(0, np.int64), runqueue_ns=np.zeros(0, np.int64), off_cpu_ns=np.zeros(0, np.int64)
        )
    starts = _thread_starts(windows)
    group = np.cumsum(starts) - 1
    off_raw = wall - d_run - d_wait
    cum = np.cumsum(off_raw)
    base = np.r_[0, cum[:-1]][starts]  # cumulative total before each thread's first window
    cum_off = cum - base[group]
    # Suffix minimum within each thread in one pass: lift each thread by group * BIG so that, scanning
    # from the end, entering an earlier thread always lowers the running minimum (values stay < BIG/2).
    big = np.int64(1) << np.int64(42)
    span = np.abs(cum_off).max() if n else 0
    if span >= big // 2:
        suffix_min = (
            pd.Series(cum_off[::-1]).groupby(group[::-1], sort=False).cummin().to_numpy()[::-1].astype(np.int64)
        )
    else:
        lifted = cum_off + group.astype(np.int64) * big
        suffix_min = np.minimum.accumulate(lifted[::-1])[::-1] - group.astype(np.int64) * big
    # Time accounted before the first read of a thread (a negative start) is not ours to place.
    settled = np.maximum(suffix_min, 0)
    if "state" in windows and "state_start" in windows:
        # The suffix minimum puts off-CPU time as early as the counters allow. A window that began and
        # ended with the thread in R and saw no switch-in was busy throughout (on CPU or runnable: to
        # sleep and run again it would have been switched in), so it gets no off time: hold the curve
        # flat across it. (A thread that slept and was woken but not yet switched in by the read is the
        # rare exception; its window is then counted busy.)
        held = (
            (windows["state"].to_numpy() == STATE_R)
            & (windows["state_start"].to_numpy() == STATE_R)
            & (windows["switches"].to_numpy() == 0)
            & ~starts
        )
        if held.any():
            curve = pd.Series(np.where(held, np.nan, settled.astype(np.float64)))
            settled = curve.groupby(group, sort=False).ffill().fillna(0.0).to_numpy().astype(np.int64)
    pending = np.maximum(cum_off - settled, 0)  # lived, not yet accounted as run or wait
    prev_settled = np.where(starts, 0, np.r_[0, settled[:-1]])
    prev_pending = np.where(starts, 0, np.r_[0, pending[:-1]])
    off = np.clip(settled - prev_settled, 0, wall)
    change = pending - prev_pending
    accrued = np.maximum(change, 0)
    released = np.maximum(-change, 0)
    busy_raw = d_run + d_wait
    share_rq = np.divide(d_wait, busy_raw, out=np.zeros(n, dtype=np.float64), where=busy_raw > 0)
    # Accrued time takes the split of the window that later releases it (the next release of the thread).
    release_share = pd.Series(np.where(released > 0, share_rq, np.nan))
    release_share = release_share.groupby(group, sort=False).bfill().fillna(0.0).to_numpy()
    rq_moved = accrued * release_share - released * share_rq
    busy = wall - off
    runqueue = np.clip(np.rint(d_wait + rq_moved), 0, busy).astype(np.int64)
    on_cpu = (busy - runqueue).astype(np.int64)
    return windows.assign(on_cpu_ns=on_cpu, runqueue_ns=runqueue, off_cpu_ns=off.astype(np.int64))


def core_type_map(cpus: Mapping[str, Any]) -> tuple[dict[int, str], set[str]]:
    """cpu -> core type label from the capture's cpus["core_types"], and the labels of the slower cores.

    Hybrid x86 labels the types P-core/E-core (sysfs cpu_core/cpu_atom); ARM big/little from
    cpu_capacity. Where the meta gives capacities or max frequencies, the slower types are those whose
    best CPU is below the fastest type's; otherwise the usual names of efficiency cores.
    """
    types = cpus.get("core_types") or {}
    mapping: dict[int, str] = {}
    for label, members in types.items():
        for cpu in members or []:
            mapping[int(cpu)] = str(label)
    slow: set[str] = set()
    if len(types) > 1:
        speed = cpus.get("capacity") or cpus.get("max_freq_khz") or {}
        if speed:
            best = {
                label: max((float(speed.get(str(c), 0)) for c in members or []), default=0.0)
                for label, members in types.items()
            }
            top = max(best.values())
            slow = {label for label, value in best.items() if 0 < value < top}
        if not slow:
            slow = {label for label in types if any(k in label.lower() for k in ("e-core", "atom", "little", "eff"))}
    return mapping, slow


def _add_core_type(windows: pd.DataFrame, cpus: Mapping[str, Any]) -> pd.DataFrame:
    if "cpu" not in windows:
        return windows
    mapping, slow = core_type_map(cpus)
    cpu = windows["cpu"].to_numpy()
    if mapping:
        size = max(max(mapping) + 1, int(cpu.max()) + 1 if len(cpu) else 1)
        labels = [*sorted(set(mapping.values())), "unknown"]
        code = np.full(size, len(labels) - 1, dtype=np.int8)
        for c, label in mapping.items():
            code[c] = labels.index(label)
        core = pd.Categorical.from_codes(code[np.clip(cpu, 0, size - 1)], categories=labels)
        slow_codes = np.array([label in slow for label in labels])
        on_slow = slow_codes[code[np.clip(cpu, 0, size - 1)]]
    else:
        core = pd.Categorical.from_codes(np.zeros(len(cpu), dtype=np.int8), categories=["uniform"])
        on_slow = np.zeros(len(cpu), dtype=bool)
    return windows.assign(core_type=core, slow_core=on_slow)


def _delta_windows(cap: Capture, table: str, deltas: dict[str, str], tids: np.ndarray | None) -> pd.DataFrame | None:
    """Deltas of a per-(tid, tick) cumulative table (`sched`, `taskstats`) for the threads it was read for.

    A column the kernel did not fill (null: no CONFIG_SCHEDSTATS, delay accounting off) is left out,
    never turned into zeros.
    """
    if table not in cap.table_names:
        return None
    frame = cap.table(table)  # read for few threads (real-time ones by default): small
    if frame.empty:
        return None
    if tids is not None:
        frame = frame[np.isin(frame["tid"].to_numpy(), tids)]
    frame = frame.sort_values(["tid", "tick"], kind="stable")
    tid = frame["tid"].to_numpy()
    first = _group_starts(tid)
    out: dict[str, Any] = {"tid": tid[~first], "tick": frame["tick"].to_numpy().astype(np.int64)[~first]}
    age_ns = None
    if "age_us" in frame:  # taskstats ac_etime: the thread's age at the query
        age_ns = frame["age_us"].astype("Float64").to_numpy(dtype="float64", na_value=np.nan)[~first] * 1000.0
    for source, name in deltas.items():
        if source not in frame:
            continue
        col = frame[source]
        if col.isna().all():
            continue
        values = col.astype("Int64").to_numpy(dtype="float64", na_value=np.nan)
        delta = (values - np.r_[np.nan, values[:-1]])[~first]
        delta = np.where(delta < 0, np.nan, delta)  # a reset (tid reused) is not a negative delay
        if age_ns is not None and source.endswith("_delay_ns"):
            # A thread cannot have waited longer than it has existed: one kernel here jumps blkio by about
            # the uptime in one step (exact.taskstats_deltas, the same rule). Unknown, never 1366 s of IO.
            delta = np.where(delta > age_ns, np.nan, delta)
        out[name] = pd.array(delta, dtype="Float64").astype("Int64")
    result = pd.DataFrame(out)
    return result if len(result.columns) > 2 else None


def thread_windows(
    cap: Capture,
    *,
    tids: Iterable[int] | None = None,
    t_range: tuple[int | None, int | None] | None = None,
    columns: Iterable[str] = ALL_COLUMNS,
    with_sched: bool = True,
) -> pd.DataFrame:
    """Reconciled windows of the chosen threads (all by default), sorted by (tid, end_ns).

    Holds every window of those threads in memory: for whole large captures use `iter_raw_windows`.
    """
    tid_list = None if tids is None else sorted({int(t) for t in tids})
    samples = load_samples(cap, columns, tids=tid_list, t_range=t_range)
    clk_tck = cap.clk_tck
    delayacct = cap.sources.get("delayacct")
    windows = reconcile(window_deltas(samples, clk_tck=clk_tck, delayacct=delayacct))
    del samples
    windows = _add_core_type(windows, cap.cpus)
    if with_sched:
        wanted = None if tid_list is None else np.asarray(tid_list, dtype=np.int32)
        for table, deltas in (("sched", SCHED_DELTAS), ("taskstats", TASKSTATS_DELTAS)):
            extra = _delta_windows(cap, table, deltas, wanted)
            if extra is not None:
                windows = windows.merge(extra, on=["tid", "tick"], how="left", sort=False)
    return windows


def iter_raw_windows(
    cap: Capture,
    columns: Iterable[str],
    *,
    tids: Iterable[int] | None = None,
    t_range: tuple[int | None, int | None] | None = None,
    batch_rows: int = 2_000_000,
) -> Iterator[pd.DataFrame]:
    """Raw (not reconciled) windows of a whole capture, batch by batch, in bounded memory.

    The last read of each thread in one batch is carried into the next, so a window that spans two
    batches is still produced once. Good for aggregates over bins much longer than a tick.
    """
    windows_of = RawWindows(cap)
    for batch in iter_samples(cap, columns, tids=tids, t_range=t_range, batch_rows=batch_rows):
        windows = windows_of(batch)
        if len(windows):
            yield windows


class RawWindows:
    """iter_raw_windows' windows of the batches of iter_samples given in turn (the last read of each thread
    carried to the next batch), for a pass that reads the batches for other work too (summarize's bins ride
    on the thread profiles' pass: analyses.threads.SamplesTap). `any_order`: the windows may come in any
    order (the same windows, by thread in time order or not): a batch whose threads' reads rise in time in
    its own order is not put in (tid, tick) order first (_windows_of_runs)."""

    def __init__(self, cap: Capture, *, any_order: bool = False) -> None:
        self.clk_tck, self.delayacct, self.cpus = cap.clk_tck, cap.sources.get("delayacct"), cap.cpus
        self.carry: pd.DataFrame | None = None
        self.any_order = any_order

    def __call__(self, batch: pd.DataFrame) -> pd.DataFrame:
        runs = self._windows_of_runs(batch) if self.any_order else None
        if runs is not None:
            windows = runs
        else:
            frame = _in_thread_order(batch, self.carry)
            tid = frame["tid"].to_numpy()
            last = np.r_[tid[1:] != tid[:-1], True] if len(tid) else np.zeros(0, dtype=bool)
            self.carry = frame[last].reset_index(drop=True)
            windows = window_deltas(frame, clk_tck=self.clk_tck, delayacct=self.delayacct)
        return _add_core_type(windows, self.cpus) if len(windows) else windows

    def _windows_of_runs(self, batch: pd.DataFrame) -> pd.DataFrame | None:
        """The batch's windows without ordering it: rows come chunk by chunk, each chunk by thread in time
        order, so the carried rows and the batch are runs of one thread's rising reads. Each window is taken
        where its end lies, the first of a run from the thread's read before it (the last of its run before, or
        the carried one: window_deltas' `previous`): the same windows as ordering the rows by (tid, tick) first,
        whose argsort and gather of every column were 1.8 of the 30 M-sample `summarize`'s ~10 s (issue 12:
        analyses speed). None (the ordering way) where a thread's reads do not rise in the batch's order, or a
        column is not plain numpy."""
        joined = _joined_plain(batch, self.carry)
        if joined is None:
            return None
        frame = pd.DataFrame(joined, copy=False)
        tid, tick = joined["tid"], joined["tick"]
        n = len(tid)
        if not n:
            return None
        change = tid[1:] != tid[:-1]
        if np.any(~change & (tick[1:] <= tick[:-1])):
            return None
        run = np.flatnonzero(np.r_[True, change])
        run_last = np.r_[run[1:], n] - 1
        ranked = np.argsort(tid[run], kind="stable")  # a thread's runs in the batch's order: its time order
        first, last = run[ranked], run_last[ranked]
        same = tid[first[1:]] == tid[first[:-1]]
        if np.any(same & (tick[first[1:]] <= tick[last[:-1]])):
            return None
        self.carry = frame.take(last[np.r_[~same, True]]).reset_index(drop=True)
        # Each run with a read of its thread before it follows that read (the last of the thread's run before),
        # in row order as window_deltas takes them.
        follows, before = first[1:][same], last[:-1][same]
        order = np.argsort(follows)
        return window_deltas(
            frame, clk_tck=self.clk_tck, delayacct=self.delayacct, previous=(follows[order], before[order])
        )


def _in_thread_order(batch: pd.DataFrame, carry: pd.DataFrame | None) -> pd.DataFrame:
    """The carried rows and the batch, in (tid, tick) order (source.thread_order). Plain numpy columns are
    joined and ordered by numpy, without pandas' concat and take (most of 1.2 s of the 30 M-sample
    `summarize`; issue 12: analyses speed); any other column goes the pandas way."""
    joined = _joined_plain(batch, carry)
    if joined is not None:
        order = thread_order(joined["tid"], joined["tick"])
        return pd.DataFrame({name: values[order] for name, values in joined.items()}, copy=False)
    frame = batch if carry is None else pd.concat([carry, batch], ignore_index=True)
    return frame.take(thread_order(frame["tid"].to_numpy(), frame["tick"].to_numpy())).reset_index(drop=True)


def _joined_plain(batch: pd.DataFrame, carry: pd.DataFrame | None) -> dict[str, np.ndarray] | None:
    """The carried rows and the batch, column by column as numpy arrays, where every column is plain numpy of
    the same dtype in both; None otherwise (the pandas way)."""
    parts = [batch] if carry is None else [carry, batch]
    plain = all(isinstance(dtype, np.dtype) and dtype.kind in "iufb" for dtype in batch.dtypes)
    if not plain or any(list(part.dtypes.items()) != list(batch.dtypes.items()) for part in parts):
        return None
    if carry is None:
        return {name: batch[name].to_numpy() for name in batch.columns}
    return {name: np.concatenate([carry[name].to_numpy(), batch[name].to_numpy()]) for name in batch.columns}


def state_letters(codes: np.ndarray | pd.Series) -> np.ndarray:
    """int8 state codes -> letters, for output."""
    alphabet = np.array(list(STATE_ALPHABET))
    return alphabet[np.asarray(codes, dtype=np.int64)]


__all__ = [
    "ALL_COLUMNS",
    "BASE_COLUMNS",
    "COMPACT_DTYPES",
    "core_type_map",
    "iter_raw_windows",
    "reconcile",
    "state_letters",
    "thread_windows",
    "window_deltas",
]
