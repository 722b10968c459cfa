"""Audio cycles: exact ones from the lab's `cycles` table, or estimated from /proc for a periodic thread.

Exact (lab): each callback's start, end and deadline. The nominal start of a cycle is its deadline minus
the period (the period being the median spacing of that thread's deadlines); then
    delay  = start - nominal start   (how late the callback began: the jackd benchmark's "delay")
    cycle  = end - start             (how long it ran: "cycle" in jackd terms)
    end    = end - nominal start     (cycle end, what the N-clients-vs-chain comparison measured)
    missed = end > deadline.
A cycle of a graph with several stage threads is grouped by deadline: its end is the last stage's end.

Estimated (/proc, any periodic thread): a wake-up is a window whose switch-in counter moved by one.
    delay ~ the run-queue wait accounted in that window: schedstat's run_delay grows at switch-in by the
            time the thread waited after being woken (sched_info_arrive), so for one wake-up in a
            window it is exactly that wake-up's scheduling delay (plus any later preemption in it);
    cycle ~ on-CPU time from that switch-in up to the next one.
Timer and interrupt latency before the wake-up is invisible to schedstat; windows with two or more
switch-ins are left out (which wake-up waited is unknown).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from analyses.windows import _group_starts, thread_windows
from capture.format import Capture


def lab_cycles(cap: Capture, tids: Iterable[int] | None = None) -> pd.DataFrame:
    """Per cycle (grouped by deadline): start_ns end_ns deadline_ns period_ns delay_ns cycle_ns end_rel_ns
    missed stages. Empty when the capture has no cycles table (or, with `tids`, none of those threads').
    `tids`: the callbacks of those threads only."""
    cycles = cap.cycles
    if tids is not None and not cycles.empty:
        cycles = cycles[cycles["tid"].isin(list(tids)).to_numpy()]
    if cycles.empty:
        return pd.DataFrame(
            columns=["start_ns", "end_ns", "deadline_ns", "period_ns", "delay_ns", "cycle_ns", "end_rel_ns", "missed"]
        )
    cycles = cycles.sort_values(["tid", "deadline_ns"])
    spacing = cycles.groupby("tid")["deadline_ns"].diff()
    period = float(spacing[spacing > 0].median()) if (spacing > 0).any() else np.nan
    grouped = cycles.groupby("deadline_ns").agg(
        start_ns=("start_ns", "min"), end_ns=("end_ns", "max"), stages=("tid", "size")
    )
    grouped = grouped.reset_index()
    nominal = grouped["deadline_ns"] - period
    grouped["period_ns"] = period
    grouped["delay_ns"] = grouped["start_ns"] - nominal
    grouped["cycle_ns"] = grouped["end_ns"] - grouped["start_ns"]
    grouped["end_rel_ns"] = grouped["end_ns"] - nominal
    grouped["missed"] = grouped["end_ns"] > grouped["deadline_ns"]
    return grouped


def proc_cycles(cap: Capture, tid: int, *, t_range: tuple[int | None, int | None] | None = None) -> pd.DataFrame:
    """Per wake-up of one thread, from /proc windows: start_ns (window end) delay_ns cycle_ns ambiguous."""
    w = thread_windows(
        cap, tids=[tid], t_range=t_range, columns=["pid", "run_ns", "wait_ns", "slices", "state"], with_sched=False
    )
    if w.empty:
        return pd.DataFrame(columns=["start_ns", "delay_ns", "cycle_ns", "ambiguous"])
    switches = w["switches"].to_numpy()
    woke = switches > 0
    cycle_id = np.cumsum(woke | _group_starts(w["tid"].to_numpy()))
    # Raw deltas for the delay (accounted exactly at switch-in); reconciled on-CPU for the run time.
    cycle_on = pd.Series(w["on_cpu_ns"].to_numpy()).groupby(cycle_id).sum()
    rows = w[woke]
    out = pd.DataFrame(
        {
            "start_ns": rows["end_ns"].to_numpy(),
            "delay_ns": rows["wait_delta_ns"].to_numpy(),
            "cycle_ns": cycle_on.reindex(cycle_id[woke]).to_numpy(),
            "ambiguous": switches[woke] > 1,
        }
    )
    return out.iloc[1:].reset_index(drop=True) if len(out) > 1 else out.iloc[0:0]
