"""The machine's cumulative counters over spans: the system table's machine row (cpu -1: /proc/stat's
first line, PSI totals) or one CPU's row, read at the system sampler's interval.

A counter's growth over [start, end] is taken between the last read at or before start and the first at
or after end: the reads bracket the span, so the growth covers it (and the bracket's `span_ns` says by how
much more). /proc/stat counts in USER_HZ ticks (10 ms each): a growth of one tick is somewhere in 0-20 ms.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd


def machine_growth(
    system: pd.DataFrame | None,
    starts: Sequence[int] | np.ndarray,
    ends: Sequence[int] | np.ndarray,
    columns: Iterable[str],
    cpu: int = -1,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Per span: (span_ns, {column: growth}) between the reads of the machine row (`cpu` -1) or of one
    CPU's row that bracket it. NaN where no two reads bracket the span; a column the table lacks, or a
    null read, grows by 0; a counter that went backwards grows by 0."""
    starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    names = list(columns)
    span = np.full(len(starts), np.nan)
    growth = {name: np.full(len(starts), np.nan) for name in names}
    if system is None or system.empty or not len(starts):
        return span, growth
    machine = system[system["cpu"] == cpu].sort_values("t_ns", kind="stable")
    t = machine["t_ns"].to_numpy(np.int64)
    before = np.searchsorted(t, starts, side="right") - 1
    after = np.searchsorted(t, ends, side="left")
    ok = (before >= 0) & (after < len(t))
    span[ok] = t[after[ok]] - t[before[ok]]
    for name in names:
        if name not in machine.columns:
            growth[name][ok] = 0.0
            continue
        values = pd.to_numeric(machine[name], errors="coerce").to_numpy(dtype=np.float64)
        grew = values[after[ok]] - values[before[ok]]
        growth[name][ok] = np.clip(np.nan_to_num(grew), 0.0, None)
    return span, growth


def held_one_cpu_ns(
    system: pd.DataFrame | None,
    start: int,
    end: int,
    jiffy_ns: int,
    columns: Sequence[str] = ("steal", "irq", "softirq"),
) -> float:
    """The least time the machine (hypervisor steal, interrupts) certainly took from one CPU between the
    reads around [start, end]: a thread waits on one CPU at a time, so only one CPU's time can have held
    it, and a growth of k ticks is at least k - 1 whole ticks (USER_HZ counting). From the per-CPU rows;
    from the machine row (all CPUs together: a looser bound) where the capture has none; 0 without reads."""
    if system is None or system.empty:
        return 0.0
    cpus = sorted(int(c) for c in pd.unique(system["cpu"]) if int(c) >= 0) or [-1]
    best = 0.0
    for cpu in cpus:
        span, grew = machine_growth(system, [start], [end], columns, cpu=cpu)
        if np.isnan(span[0]):
            continue
        ticks = sum(max(float(grew[name][0]) - 1.0, 0.0) for name in columns)
        best = max(best, ticks * jiffy_ns)
    return best
