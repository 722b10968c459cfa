"""CPU spikes: windows where a thread burned far more CPU than it usually does, or was busy past a deadline.

For each thread, its *typical* on-CPU time per window is the median over the windows in which it ran at
all (a callback thread runs in about one window of three at 5.3 ms / 2 ms; the idle ones would make every
median zero). A window is a spike of that thread when

- it stands out: on CPU >= `factor` (5) x typical, and >= `min_ns` (a quarter interval by default, so that
  a thread that usually runs 5 us does not spike at 25 us), or
- it breaks a deadline: a run of consecutive busy windows (on CPU or runnable for at least half of each)
  whose busy time adds up to `deadline_ns` or more. By default the deadline of a periodic thread is its
  period (a callback busy for a whole period cannot have finished in time); other threads get one only
  from `--deadline`.

Adjacent spike windows of a thread merge. For each spike: the threads that burned CPU in the same windows,
ranked, with the CPU and core type they were on; that is how "Load MAX" becomes a thread name.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyses import rules
from analyses.source import capture_interval_ns
from analyses.threads import policy_label, select_threads, thread_profiles
from analyses.windows import _group_starts, thread_windows
from capture.format import Capture

SPIKE_COLUMNS = [
    "spike", "tid", "comm", "start_ns", "end_ns", "windows", "on_cpu_ns", "busy_ns", "peak_on_cpu_ns",
    "typical_ns", "ratio", "deadline_ns", "reason", "cpus", "core_types", "policy",
]  # fmt: skip
BURNER_COLUMNS = ["spike", "rank", "tid", "comm", "on_cpu_ns", "share", "cpu", "core_type", "policy"]


def find_spikes(
    cap: Capture,
    *,
    pattern: str | None = None,
    factor: float = rules.SPIKE_FACTOR,
    min_ns: int | None = None,
    deadline_ns: int | None = None,
    top: int = 5,
    limit: int | None = 50,
    t_range: tuple[int | None, int | None] | None = None,
    busy_fraction: float = rules.DEFAULT_RULES.busy_fraction,
    tids: tuple[int, ...] = (),
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(spikes, burners): one row per spike (module docstring) and its `top` CPU burners, ranked.

    `pattern` limits which threads can spike (all threads still count as burners); `limit` keeps the
    most severe spikes (by ratio to typical), listed in time order.
    """
    interval = capture_interval_ns(cap)
    min_ns = rules.spike_min_ns(interval) if min_ns is None else min_ns
    profiles = thread_profiles(cap, t_range=t_range)
    if profiles.empty:
        return _empty(SPIKE_COLUMNS), _empty(BURNER_COLUMNS)
    windows = thread_windows(
        cap,
        t_range=t_range,
        columns=["pid", "run_ns", "wait_ns", "slices", "cpu", "policy", "rtprio", "state"],
        with_sched=False,
    )
    if windows.empty:
        return _empty(SPIKE_COLUMNS), _empty(BURNER_COLUMNS)
    watched = profiles if pattern is None and not tids else select_threads(profiles, pattern=pattern, tids=tids)
    tid = windows["tid"].to_numpy()
    on = windows["on_cpu_ns"].to_numpy()
    busy = on + windows["runqueue_ns"].to_numpy()
    wall = windows["wall_ns"].to_numpy()
    active = on > 0
    typical = pd.Series(on[active]).groupby(tid[active]).median()
    typical_w = typical.reindex(tid).to_numpy(dtype=np.float64)
    stands_out = active & (on >= factor * np.nan_to_num(typical_w, nan=np.inf)) & (on >= min_ns)
    # Deadline: consecutive busy windows whose busy time reaches the deadline.
    period = profiles.set_index("tid")["period_ns"].reindex(tid).to_numpy(dtype=np.float64)
    deadline = np.full(len(tid), np.nan) if deadline_ns is None else np.full(len(tid), float(deadline_ns))
    if deadline_ns is None:
        deadline = period
    hot = rules.is_hot(busy, wall, busy_fraction)
    run_key = np.cumsum(hot & (np.r_[True, ~hot[:-1]] | _group_starts(tid)))
    run_busy = pd.Series(np.where(hot, busy, 0)).groupby(run_key).transform("sum").to_numpy()
    late = hot & ~np.isnan(deadline) & (run_busy >= np.nan_to_num(deadline, nan=np.inf))
    spike = (stands_out | late) & np.isin(tid, watched["tid"].to_numpy())
    if not spike.any():
        return _empty(SPIKE_COLUMNS), _empty(BURNER_COLUMNS)
    starts = spike & (np.r_[True, ~spike[:-1]] | _group_starts(tid))
    spike_id = np.cumsum(starts) - 1
    w = windows[spike].assign(
        spike=spike_id[spike],
        busy=busy[spike],
        typical=typical_w[spike],
        deadline=deadline[spike],
        late=late[spike],
        stands_out=stands_out[spike],
    )
    g = w.groupby("spike", sort=True)
    spikes = g.agg(
        tid=("tid", "first"),
        start_ns=("start_ns", "min"),
        end_ns=("end_ns", "max"),
        windows=("tid", "size"),
        on_cpu_ns=("on_cpu_ns", "sum"),
        busy_ns=("busy", "sum"),
        peak_on_cpu_ns=("on_cpu_ns", "max"),
        typical_ns=("typical", "first"),
        deadline_ns=("deadline", "first"),
        late=("late", "any"),
        stands_out=("stands_out", "any"),
        tick_first=("tick", "min"),
        tick_last=("tick", "max"),
        policy_code=("policy", "last"),
        rtprio=("rtprio", "last"),
    )
    spikes["cpus"] = g["cpu"].agg(lambda s: ",".join(str(c) for c in sorted(set(s.tolist()))))
    spikes["core_types"] = g["core_type"].agg(lambda s: ",".join(sorted({str(c) for c in s.tolist()})))
    spikes["ratio"] = (spikes["peak_on_cpu_ns"] / spikes["typical_ns"]).round(1)
    # "outlier": far above the thread's typical CPU; "deadline": busy through its deadline.
    spikes["reason"] = np.where(
        spikes["late"] & spikes["stands_out"],
        "outlier+deadline",
        np.where(spikes["late"], "deadline", "outlier"),
    )
    if limit is not None and len(spikes) > limit:
        spikes = spikes.sort_values(["late", "ratio"], ascending=False).head(limit).sort_index()
    spikes = spikes.reset_index()
    spikes["spike"] = np.arange(1, len(spikes) + 1)  # numbered from 1, as incidents and markers are
    names = profiles.set_index("tid")["comm"]
    spikes["comm"] = names.reindex(spikes["tid"]).fillna("?").to_numpy()
    spikes["policy"] = [
        policy_label(p, r) for p, r in zip(spikes["policy_code"].tolist(), spikes["rtprio"].tolist(), strict=True)
    ]
    spikes["deadline_ns"] = spikes["deadline_ns"].astype("Float64").round(0).astype("Int64")
    burners = _burners(windows, spikes, names, top)
    return spikes[SPIKE_COLUMNS], burners


def _burners(windows: pd.DataFrame, spikes: pd.DataFrame, names: pd.Series, top: int) -> pd.DataFrame:
    """The threads with the most CPU in each spike's ticks (all threads, not only the watched ones)."""
    by_tick = windows.sort_values("tick", kind="stable")
    ticks = by_tick["tick"].to_numpy()
    rows = []
    for spike in spikes.itertuples(index=False):  # one slice per spike, found by binary search
        lo = np.searchsorted(ticks, spike.tick_first, side="left")
        hi = np.searchsorted(ticks, spike.tick_last, side="right")
        part = by_tick.iloc[lo:hi]
        if part.empty:
            continue
        ranked = (
            part.groupby("tid")
            .agg(
                on_cpu_ns=("on_cpu_ns", "sum"),
                cpu=("cpu", "last"),
                core_type=("core_type", "last"),
                policy=("policy", "last"),
                rtprio=("rtprio", "last"),
            )
            .sort_values("on_cpu_ns", ascending=False)
        )
        ranked = ranked[ranked["on_cpu_ns"] > 0].head(top)
        total = part["on_cpu_ns"].sum()
        for rank, (tid, r) in enumerate(ranked.iterrows(), start=1):
            rows.append(
                {
                    "spike": spike.spike,
                    "rank": rank,
                    "tid": int(tid),
                    "comm": names.get(tid, "?"),
                    "on_cpu_ns": int(r["on_cpu_ns"]),
                    "share": round(float(r["on_cpu_ns"]) / total, 3) if total else 0.0,
                    "cpu": int(r["cpu"]),
                    "core_type": str(r["core_type"]),
                    "policy": policy_label(r["policy"], r["rtprio"]),
                }
            )
    return pd.DataFrame(rows, columns=BURNER_COLUMNS)


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
