"""The five decisive views of a capture or a span of it (summarize-load).

1. timeline    on-CPU time of the busiest threads per time bin
2. breakdown   per thread: run vs wait (on CPU, runnable waiting for a CPU, off CPU), switches, faults
3. placement   per watched thread (real-time or periodic): CPUs and core types used over time, migrations,
               time on slow cores, time sharing its CPU with another busy thread, policy/rtprio changes
4. faults      minor and major faults per bin, and the thread that took most of them
5. worst       the worst stall episodes with their verdicts (`analyses.stalls`)

With `tids` (`--tid N`) views 1, 2, 3 and 5 hold only those threads (3 whatever their policy and
period); view 4 stays the whole machine's (its `by` column names who took the faults).

Views 1-4 sum raw window deltas into bins of about a fiftieth of the span (so the tick-lag of the counters
does not matter), on the thread profiles' own pass over the capture (_OnePass); view 5 reads only the
watched threads. "Sharing its CPU": in the same tick another recorded thread whose last CPU (stat field
39) was the same one was on CPU for at least half of its window, or was in state R at the read (running
there, or queued for it).
The CPU of a sleeping thread is where it last ran, which is where it will most likely wake: good enough
for placement, not for exact co-scheduling (eBPF gives that).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analyses.rules import StallRules
from analyses.source import STATE_R, capture_interval_ns, capture_origin_ns
from analyses.stalls import find_stalls
from analyses.threads import SamplesTap, policy_label, select_threads, thread_profiles
from analyses.windows import RawWindows, iter_raw_windows
from capture.format import Capture
from capture.vocabulary import RT_POLICIES

SPARK = " ▁▂▃▄▅▆▇█"
CPU_GLYPHS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
BUSY_FRACTION = 0.5


def nice_bin_ns(span_ns: int, interval_ns: int, bins: int = 60) -> int:
    """A round bin width (1, 2 or 5 x 10^k ns) giving about `bins` bins, never below the interval."""
    raw = max(span_ns / max(bins, 1), interval_ns, 1)
    exponent = int(np.floor(np.log10(raw)))
    for mult in (1, 2, 5, 10):
        width = mult * 10**exponent
        if width >= raw:
            return int(width)
    return int(10 ** (exponent + 1))


def sparkline(values: np.ndarray, top: float | None = None) -> str:
    """Values scaled to 0..top as block glyphs (one character per bin)."""
    values = np.nan_to_num(np.asarray(values, dtype=np.float64))
    top = float(values.max()) if top is None else float(top)
    if top <= 0:
        return SPARK[0] * len(values)
    levels = np.clip(np.ceil(values / top * (len(SPARK) - 1)), 0, len(SPARK) - 1).astype(int)
    return "".join(SPARK[i] for i in levels)


@dataclass
class Summary:
    bin_ns: int
    origin_ns: int | None
    views: dict[str, pd.DataFrame] = field(default_factory=dict)


def summarize(
    cap,
    *,
    t_range: tuple[int | None, int | None] | None = None,
    top: int = 8,
    worst: int = 10,
    bins: int = 50,
    rules: StallRules | None = None,
    tids: tuple[int, ...] = (),
) -> Summary:
    """The five views (module docstring) as DataFrames in `Summary.views`; `tids`: only those threads in
    the per-thread views (1, 2, 3, 5), the faults over time stay the machine's."""
    interval = capture_interval_ns(cap)
    one_pass = _OnePass(cap, tids)
    profiles = thread_profiles(cap, t_range=t_range, tap=SamplesTap(STREAM_COLUMNS, STREAM_BATCH_ROWS, one_pass.take))
    origin = capture_origin_ns(cap)
    if profiles.empty or origin is None:
        return Summary(bin_ns=interval, origin_ns=origin, views={})
    start = int(profiles["first_ns"].min())
    span = int(profiles["last_ns"].max()) - start
    bin_ns = nice_bin_ns(span, interval, bins)
    watched = select_threads(profiles, tids=tids)
    watched_tids = watched["tid"].to_numpy(dtype=np.int32)
    acc = one_pass.sums(start, bin_ns, watched_tids)
    if acc is None:
        acc = _stream(cap, t_range, start, bin_ns, watched_tids, only_watched=bool(tids))
    names = profiles.set_index("tid")["comm"]
    views: dict[str, pd.DataFrame] = {}
    per_bin = acc["per_bin"]  # every thread's: the faults over time are the machine's
    mine = per_bin[per_bin["tid"].isin(watched_tids)] if tids else per_bin
    shown = profiles[profiles["tid"].isin(watched_tids)] if tids else profiles
    views["timeline"], views["timeline_bins"] = _timeline(mine, names, start, bin_ns, top, nbins=_bins(per_bin))
    views["breakdown"] = _breakdown(shown, mine)
    views["placement"], views["placement_changes"] = _placement(acc, watched, start, bin_ns, per_bin)
    views["faults"], views["faults_bins"] = _faults(per_bin, names, start, bin_ns)
    stalls = find_stalls(cap, tids=tids, rules=rules, t_range=t_range, profiles=profiles)
    views["worst"] = stalls.sort_values("stall_ns", ascending=False).head(worst) if len(stalls) else stalls
    return Summary(bin_ns=bin_ns, origin_ns=origin, views=views)


def _bins(per_bin: pd.DataFrame) -> int:
    return int(per_bin["bin"].max()) + 1 if len(per_bin) else 0


# The sample columns of summarize's pass over raw windows, and its batches (iter_raw_windows' own size: the
# batches, and so the order of the policy changes, are the same whether the pass is its own or rides on the
# thread profiles' pass).
STREAM_COLUMNS = ("run_ns", "wait_ns", "slices", "state", "minflt", "majflt", "cpu", "policy", "rtprio")
STREAM_BATCH_ROWS = 2_000_000
FINE_BINS = 4096  # bins of a batch summed before the bin width is known: at most this many, of 10^k ns


@dataclass(frozen=True)
class _BatchSums:
    """One batch of windows' part of _stream's sums, by bins of `bin_ns` from the pass's origin: per (tid,
    bin) every thread's; for the rows placed (_placed), per (tid, bin, cpu) the wall time, per tid the
    placement totals and per (tid, core type) the wall time, and their policy changes (None: no row)."""

    bin_ns: int
    per_bin: pd.DataFrame
    per_cpu: pd.Series | None = None
    totals: pd.DataFrame | None = None
    cores: pd.Series | None = None
    changes: pd.DataFrame | None = None


def _placed(w: pd.DataFrame, tids: np.ndarray, *, only_tids: bool) -> np.ndarray:
    """The windows whose placement summarize lays out: those of `tids` (the watched threads), and any real-
    time one unless `only_tids`."""
    mine = np.isin(w["tid"].to_numpy(), tids)
    if not only_tids:
        mine |= np.isin(w["policy"].to_numpy(), RT_POLICIES)
    return mine


def _labels(column: pd.Series, mine: np.ndarray) -> np.ndarray:
    """The rows' labels as str, of the rows kept: a categorical's labels by its codes (astype(str) of the rows
    made one string per row: 0.54 of 11.9 s of `summarize` on 40 s of the Bitwig shape by the eBPF sampler)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = column.cat.codes.to_numpy()[mine]
        labels = np.array([*column.cat.categories.astype(str), "nan"], dtype=object)
        return labels[np.where(codes < 0, len(labels) - 1, codes)]
    return column[mine].astype(str).to_numpy()


def _batch_sums(w: pd.DataFrame, origin: int, bin_ns: int, mine: np.ndarray) -> _BatchSums:
    tid = w["tid"].to_numpy()
    on = w["run_delta_ns"].to_numpy()
    wall = w["wall_ns"].to_numpy()
    bin_index = (w["end_ns"].to_numpy() - origin) // bin_ns
    sums = {
        "on": on,
        "rq": w["wait_delta_ns"].to_numpy(),
        "wall": wall,
        "switches": w["switches"].to_numpy(),
        "minflt": w["minflt"].to_numpy(),
        "majflt": w["majflt"].to_numpy(),
    }
    per_bin = bin_sums(tid, bin_index, sums)
    if not mine.any():
        return _BatchSums(bin_ns, per_bin)
    # Placement of watched threads: which CPU, slow cores, a busy neighbour on the same CPU.
    tick = w["tick"].to_numpy().astype(np.int64)
    cpu = w["cpu"].to_numpy().astype(np.int64)
    key = tick * 65536 + np.clip(cpu, 0, 65535)
    # A busy neighbour: on CPU for half its window, or in R at the read (running or queued there). The
    # state catches a CPU hog whose run time the tick has not accounted yet (raw deltas lag).
    busy = (on >= BUSY_FRACTION * wall) | (w["state"].to_numpy() == STATE_R)
    busy_keys, busy_counts = np.unique(key[busy], return_counts=True)
    pos = np.clip(np.searchsorted(busy_keys, key[mine]), 0, max(len(busy_keys) - 1, 0))
    found = (busy_keys[pos] == key[mine]) if len(busy_keys) else np.zeros(mine.sum(), dtype=bool)
    others = np.where(found, busy_counts[pos] if len(busy_keys) else 0, 0) - busy[mine]
    shared = others > 0
    sub = pd.DataFrame(
        {
            "tid": tid[mine],
            "bin": bin_index[mine],
            "cpu": cpu[mine],
            "wall": wall[mine],
            "on": on[mine],
            "rq": w["wait_delta_ns"].to_numpy()[mine],
            "slow_wall": np.where(w["slow_core"].to_numpy()[mine], wall[mine], 0),
            "slow_on": np.where(w["slow_core"].to_numpy()[mine], on[mine], 0),
            "shared_wall": np.where(shared, wall[mine], 0),
            "shared_rq": np.where(shared, w["wait_delta_ns"].to_numpy()[mine], 0),
            "migrations": (w["cpu"].to_numpy()[mine] != w["cpu_start"].to_numpy()[mine]).astype(np.int64),
        }
    )
    core = _labels(w["core_type"], mine)
    changed = (w["policy"].to_numpy() != w["policy_start"].to_numpy()) | (
        w["rtprio"].to_numpy() != w["rtprio_start"].to_numpy()
    )
    changed &= mine
    changes = None
    if changed.any():
        changes = pd.DataFrame(
            {
                "tid": tid[changed],
                "t_ns": w["end_ns"].to_numpy()[changed],
                "from": [
                    policy_label(p, r)
                    for p, r in zip(
                        w["policy_start"].to_numpy()[changed], w["rtprio_start"].to_numpy()[changed], strict=True
                    )
                ],
                "to": [
                    policy_label(p, r)
                    for p, r in zip(w["policy"].to_numpy()[changed], w["rtprio"].to_numpy()[changed], strict=True)
                ],
            }
        )
        # By thread in time order, as windows ordered by (tid, tick) give them (RawWindows any_order need not).
        changes = changes.sort_values(["tid", "t_ns"], kind="stable", ignore_index=True)
    return _BatchSums(
        bin_ns,
        per_bin,
        per_cpu=sub.groupby(["tid", "bin", "cpu"], sort=False)["wall"].sum(),
        totals=sub.drop(columns=["bin", "cpu"]).groupby("tid").sum(),
        cores=pd.DataFrame({"tid": tid[mine], "core": core, "wall": wall[mine]}).groupby(["tid", "core"])["wall"].sum(),
        changes=changes,
    )


def _of_tids(values: pd.Series | pd.DataFrame, tids: np.ndarray | None) -> pd.Series | pd.DataFrame:
    """The rows of `tids` (all with None) of a frame or series whose index (first level) is the tid."""
    if tids is None:
        return values
    index = values.index
    return values[(index.get_level_values(0) if isinstance(index, pd.MultiIndex) else index).isin(tids)]


def _rebinned(values: pd.Series | pd.DataFrame, factor: int) -> pd.Series | pd.DataFrame:
    """Sums indexed by (tid, bin, ...) with every `factor` consecutive bins made one (the index rebuilt)."""
    index = values.index
    levels = [index.get_level_values(i) for i in range(index.nlevels)]
    levels[1] = levels[1] // factor
    return values.set_axis(pd.MultiIndex.from_arrays(levels, names=index.names))


def _joined(parts: list[_BatchSums], bin_ns: int, tids: np.ndarray | None = None) -> dict[str, pd.DataFrame]:
    """The batches' sums as _stream returns them, by bins of `bin_ns` (a multiple of each batch's bin width,
    from the same origin: floor division by one then the other is floor division by their product), the
    placement of the rows of `tids` only (all placed rows with None). A batch with none of those rows adds
    no placement, as a batch with no row placed."""
    per_bin, per_cpu, totals, changes = [], [], [], []
    for part in parts:
        per_bin.append(part.per_bin if part.bin_ns == bin_ns else _rebinned(part.per_bin, bin_ns // part.bin_ns))
        if part.totals is None or part.per_cpu is None or part.cores is None:
            continue
        mine = _of_tids(part.totals, tids)
        if mine.empty:
            continue
        per_cpu.append(_rebinned(_of_tids(part.per_cpu, tids), bin_ns // part.bin_ns))
        totals.append(mine)
        cores = _of_tids(part.cores, tids)
        core_of = pd.DataFrame(
            {"tid": cores.index.get_level_values(0), "core": cores.index.get_level_values(1), "wall": cores.to_numpy()}
        )
        totals.append(core_of.groupby(["tid", "core"])["wall"].sum().unstack(fill_value=0).add_prefix("core:"))
        if part.changes is not None:
            changed = part.changes[np.isin(part.changes["tid"].to_numpy(), tids)] if tids is not None else part.changes
            if len(changed):
                changes.append(changed)
    out: dict[str, pd.DataFrame] = {}
    out["per_bin"] = (
        pd.concat(per_bin).groupby(level=[0, 1]).sum().reset_index()
        if per_bin
        else pd.DataFrame(columns=["tid", "bin", "on", "rq", "wall", "switches", "minflt", "majflt"])
    )
    out["per_cpu"] = pd.concat(per_cpu).groupby(level=[0, 1, 2]).sum().reset_index() if per_cpu else pd.DataFrame()
    out["totals"] = pd.concat(totals).groupby(level=0).sum() if totals else pd.DataFrame()
    out["changes"] = (
        pd.concat(changes, ignore_index=True) if changes else pd.DataFrame(columns=["tid", "t_ns", "from", "to"])
    )
    return out


def _stream(
    cap: Capture,
    t_range: tuple[int | None, int | None] | None,
    start: int,
    bin_ns: int,
    watched: np.ndarray,
    *,
    only_watched: bool = False,
) -> dict[str, pd.DataFrame]:
    """Per bin every thread's sums; the placement of the `watched` threads (and of any real-time one,
    unless `only_watched`). A pass of its own, where none rode on the thread profiles' (_OnePass)."""
    parts = [
        _batch_sums(w, start, bin_ns, _placed(w, watched, only_tids=only_watched))
        for w in iter_raw_windows(cap, STREAM_COLUMNS, t_range=t_range, batch_rows=STREAM_BATCH_ROWS)
    ]
    return _joined(parts, bin_ns)


class _OnePass:
    """_stream's sums from the thread profiles' pass (threads.SamplesTap), so that summarize decodes the
    capture once for both (issue 12: analyses speed). Neither the first time, the bin width nor the watched
    threads are known during that pass: each batch is summed by bins of a power of ten ns (the finest one
    not wider than the sampling interval that gives at most FINE_BINS bins from the first read), which
    divides the final width (1, 2 or 5 x 10^k, at least a fiftieth of the span: nice_bin_ns), and the
    placement is taken for the threads real-time or periodic in the first batch (or those asked for), and
    any real-time row. `sums` then gives what _stream gives, or None where the pass cannot: its first time
    is not the profiles' first, a batch's bins do not divide the width, or a watched thread is not among
    those placed (periodic only after the first batch): _stream reads the capture again."""

    def __init__(self, cap: Capture, tids: tuple[int, ...]) -> None:
        self.windows_of = RawWindows(cap, any_order=True)  # _batch_sums' sums need no order
        self.finest_ns = 10 ** int(np.floor(np.log10(max(capture_interval_ns(cap), 1))))
        self.tids = np.asarray(tids, dtype=np.int64) if tids else None
        self.placing: np.ndarray | None = None
        self.origin: int | None = None
        self.parts: list[_BatchSums] = []

    def take(self, batch: pd.DataFrame, likely: np.ndarray) -> None:
        if self.origin is None:
            self.origin = int(batch["t_ns"].min())
            self.placing = likely if self.tids is None else self.tids
        assert self.placing is not None
        w = self.windows_of(batch)
        if not len(w):
            return
        bin_ns = self.finest_ns
        while (int(w["end_ns"].max()) - self.origin) // bin_ns >= FINE_BINS:
            bin_ns *= 10
        self.parts.append(
            _batch_sums(w, self.origin, bin_ns, _placed(w, self.placing, only_tids=self.tids is not None))
        )

    def sums(self, start: int, bin_ns: int, watched: np.ndarray) -> dict[str, pd.DataFrame] | None:
        if self.origin != start or self.placing is None or any(bin_ns % part.bin_ns for part in self.parts):
            return None
        if not np.isin(watched, self.placing).all():
            return None
        return _joined(self.parts, bin_ns, watched)


def bin_sums(tid: np.ndarray, bin_index: np.ndarray, sums: dict[str, np.ndarray]) -> pd.DataFrame:
    """What a frame of tid, bin and `sums` gives by .groupby(["tid", "bin"], sort=False).sum(), but for
    the order of its groups, where the rows come by thread in time order (iter_raw_windows' windows): each
    run of rows of one (tid, bin) summed by numpy. A (tid, bin) in two runs (times not rising) has two rows,
    joined with the other batches' by _stream's last groupby. The pandas groupby of 2 M windows was half a
    second a batch (issue 12: analyses speed); nullable columns go the pandas way."""
    if not len(tid) or not all(isinstance(v, np.ndarray) and v.dtype.kind in "iu" for v in sums.values()):
        frame = pd.DataFrame({"tid": tid, "bin": bin_index, **sums})
        return frame.groupby(["tid", "bin"], sort=False).sum()
    starts = np.flatnonzero(np.r_[True, (tid[1:] != tid[:-1]) | (bin_index[1:] != bin_index[:-1])])
    # Summed as int64 and cast back, as pandas gives an int32 column's sums.
    out = pd.DataFrame(
        {name: np.add.reduceat(v, starts, dtype=np.int64).astype(v.dtype, copy=False) for name, v in sums.items()}
    )
    out.index = pd.MultiIndex.from_arrays([tid[starts], bin_index[starts]], names=["tid", "bin"])
    return out


def _timeline(
    per_bin: pd.DataFrame, names: pd.Series, start: int, bin_ns: int, top: int, *, nbins: int | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`nbins`: the timeline's width (default: up to the last bin of `per_bin`)."""
    if per_bin.empty:
        return pd.DataFrame(), pd.DataFrame()
    nbins = _bins(per_bin) if nbins is None else nbins
    totals = per_bin.groupby("tid")["on"].sum().sort_values(ascending=False)
    chosen = totals[totals > 0].head(top).index
    long = per_bin[per_bin["tid"].isin(chosen)][["tid", "bin", "on"]]
    grid = long.pivot_table(index="tid", columns="bin", values="on", aggfunc="sum", fill_value=0)
    grid = grid.reindex(columns=range(nbins), fill_value=0).reindex(chosen)
    rows = []
    for tid, values in grid.iterrows():  # one row per top thread (a handful)
        v = values.to_numpy(dtype=np.float64)
        peak = int(np.argmax(v))
        rows.append(
            {
                "tid": int(tid),
                "comm": names.get(tid, "?"),
                "on_cpu_ns": int(v.sum()),
                "peak_bin_ns": int(v[peak]),
                "peak_at_ns": start + peak * bin_ns,
                "peak_pct": 100.0 * v[peak] / bin_ns,
                "timeline": sparkline(v),  # scaled to the thread's own peak bin (peak_pct says how busy)
            }
        )
    bins = long.assign(
        bin_start_ns=start + long["bin"].to_numpy() * bin_ns, comm=names.reindex(long["tid"]).to_numpy()
    )[["tid", "comm", "bin_start_ns", "on"]].rename(columns={"on": "on_cpu_ns"})
    return pd.DataFrame(rows), bins.sort_values(["tid", "bin_start_ns"]).reset_index(drop=True)


def _breakdown(profiles: pd.DataFrame, per_bin: pd.DataFrame) -> pd.DataFrame:
    sums = per_bin.groupby("tid")[["on", "rq", "wall", "switches", "minflt", "majflt"]].sum()
    out = profiles.set_index("tid")[["comm", "policy", "rtprio", "nice", "periodic", "wakeups_per_s"]].join(sums)
    out = out.fillna({"on": 0, "rq": 0, "wall": 0, "switches": 0, "minflt": 0, "majflt": 0})
    wall = out["wall"].where(out["wall"] > 0)
    out["off"] = np.maximum(out["wall"] - out["on"] - out["rq"], 0)
    out["on_pct"] = 100.0 * out["on"] / wall
    out["runqueue_pct"] = 100.0 * out["rq"] / wall
    out["off_pct"] = 100.0 * out["off"] / wall
    out["policy"] = [
        policy_label(p, r, n)
        for p, r, n in zip(out["policy"].tolist(), out["rtprio"].tolist(), out["nice"].tolist(), strict=True)
    ]
    out = out.rename(columns={"on": "on_cpu_ns", "rq": "runqueue_ns", "off": "off_cpu_ns", "wall": "wall_ns"})
    out = out.reset_index().sort_values(["on_cpu_ns", "runqueue_ns"], ascending=False)
    cols = [
        "tid", "comm", "policy", "on_cpu_ns", "runqueue_ns", "off_cpu_ns", "on_pct", "runqueue_pct", "off_pct",
        "switches", "wakeups_per_s", "minflt", "majflt", "wall_ns",
    ]  # fmt: skip
    for c in ("on_cpu_ns", "runqueue_ns", "off_cpu_ns", "wall_ns", "switches", "minflt", "majflt"):
        out[c] = out[c].astype(np.int64)
    return out[cols].reset_index(drop=True)


def _placement(
    acc: dict[str, pd.DataFrame], watched: pd.DataFrame, start: int, bin_ns: int, per_bin: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame]:
    totals = acc["totals"]
    per_cpu = acc["per_cpu"]
    if totals.empty:
        return pd.DataFrame(), acc["changes"]
    nbins = int(per_bin["bin"].max()) + 1 if len(per_bin) else 0
    info = watched.set_index("tid")
    rows = []
    for tid, t in totals.iterrows():  # one row per watched thread
        mine = per_cpu[per_cpu["tid"] == tid]
        by_cpu = mine.groupby("cpu")["wall"].sum()
        cpu_text = " ".join(f"{int(c)}:{100.0 * v / max(by_cpu.sum(), 1):.0f}%" for c, v in by_cpu.items())
        main_cpu = mine.sort_values("wall").groupby("bin")["cpu"].last().reindex(range(nbins))
        strip = "".join(
            " " if pd.isna(c) else CPU_GLYPHS[int(c)] if int(c) < len(CPU_GLYPHS) else "+" for c in main_cpu.tolist()
        )
        cores = {k[5:]: v for k, v in t.items() if str(k).startswith("core:") and v > 0}
        core_text = " ".join(f"{k}:{100.0 * v / max(t['wall'], 1):.0f}%" for k, v in cores.items())
        policy_now = info["policy"].get(tid) if tid in info.index else None
        rtprio_now = info["rtprio"].get(tid) if tid in info.index else 0
        rows.append(
            {
                "tid": int(tid),
                "comm": info["comm"].get(tid, "?") if tid in info.index else "?",
                "policy": policy_label(policy_now, rtprio_now) if policy_now is not None else "?",
                "cpus": cpu_text,
                "core_types": core_text or "uniform",
                "migrations": int(t["migrations"]),
                "slow_core_ns": int(t["slow_wall"]),
                "slow_core_pct": 100.0 * t["slow_wall"] / max(t["wall"], 1),
                "on_cpu_slow_ns": int(t["slow_on"]),
                "shared_ns": int(t["shared_wall"]),
                "shared_pct": 100.0 * t["shared_wall"] / max(t["wall"], 1),
                "runqueue_shared_ns": int(t["shared_rq"]),
                "cpu_over_time": strip,
            }
        )
    changes = acc["changes"]
    if len(changes):
        changes = changes.assign(comm=changes["tid"].map(info["comm"]).fillna("?"))[
            ["t_ns", "tid", "comm", "from", "to"]
        ]
    return pd.DataFrame(rows), changes


FAULT_BIN_COLUMNS = ["bin_start_ns", "minflt", "majflt", "top_comm", "top_tid", "top_share"]


def _faults(per_bin: pd.DataFrame, names: pd.Series, start: int, bin_ns: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    if per_bin.empty:  # no window (samples of one read each): empty, with the columns the views lay out
        return pd.DataFrame(), pd.DataFrame(columns=FAULT_BIN_COLUMNS)
    nbins = int(per_bin["bin"].max()) + 1
    faults = per_bin.assign(total=per_bin["minflt"] + per_bin["majflt"])
    by_bin = faults.groupby("bin")[["minflt", "majflt", "total"]].sum().reindex(range(nbins), fill_value=0)
    topper = faults.sort_values("total").groupby("bin").last()
    out = by_bin.assign(
        bin_start_ns=start + by_bin.index.to_numpy() * bin_ns,
        top_tid=topper["tid"].reindex(by_bin.index).astype("Int64"),
        top_share=(topper["total"].reindex(by_bin.index) / by_bin["total"].where(by_bin["total"] > 0)).round(3),
    )
    none = by_bin["total"].to_numpy() == 0
    out["top_tid"] = out["top_tid"].where(~none, pd.NA)
    out["top_comm"] = out["top_tid"].map(lambda t: names.get(t, "?") if not pd.isna(t) else None)
    out = out.reset_index(drop=True)[FAULT_BIN_COLUMNS]
    total = by_bin["total"].to_numpy()
    peak = int(np.argmax(total)) if len(total) else 0
    overview = pd.DataFrame(
        [
            {
                "minflt": int(by_bin["minflt"].sum()),
                "majflt": int(by_bin["majflt"].sum()),
                "peak_bin_faults": int(total[peak]) if len(total) else 0,
                "peak_at_ns": start + peak * bin_ns,
                "peak_thread": out["top_comm"].iloc[peak] if len(out) else None,
                "faults_over_time": sparkline(total),
            }
        ]
    )
    return overview, out
