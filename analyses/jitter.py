"""Wake-up jitter of periodic threads: the distribution of periods between wake-ups, and lost wake-ups.

A periodic thread should wake every P. The histogram of the intervals between its wake-ups shows the
jitter around P; a peak at 2P, 3P... is the signature of a lost wake-up (the thread slept through a
period: a lost interrupt, a timer that fired late by a whole period, a cycle that ran past its successor's
start), as the 1999 RTC/audio measurements showed with peaks at exact multiples of the IRQ period.

Sources, best first: the lab's `cycles` table (callback starts, exact); else /proc: a wake-up is a window
whose switch-in counter moved, timed at the end of that window, so each interval is known to one sampling
interval (a 5.333 ms period reads as 4 or 6 ms at 2 ms sampling) and the histogram bins are one interval
wide. A period shorter than the sampling interval cannot be timed from /proc at all (said so, not guessed).

The engine's own view (engine_jitter), where the capture has engine cycles (JACK, PipeWire): the spacing of
the driver's cycle starts (engine_cycles.t_ns) against the nominal period (quantum / rate; peaks at 2x, 3x
are cycles the engine lost), where each cycle ended against that period, and the xruns the engine reported.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyses.engine import SUMMARY_COLUMNS, cycle_starts, engine_cycle_summary, xrun_figures
from analyses.rules import LOST_WAKEUP_TOLERANCE, lost_wakeups_resolvable, wakeups_timed
from analyses.source import capture_interval_ns
from analyses.span import in_span
from analyses.threads import select_threads, thread_profiles
from analyses.windows import _group_starts, thread_windows
from capture.format import Capture

MULTIPLES = (2, 3, 4)


def wakeup_intervals(
    cap: Capture, threads: pd.DataFrame, *, t_range: tuple[int | None, int | None] | None = None
) -> tuple[pd.DataFrame, dict[int, str]]:
    """(intervals, source per tid): one row per interval between consecutive wake-ups: tid, t_ns, period_ns."""
    sources: dict[int, str] = {}
    frames = []
    cycles = cap.cycles
    tids = threads["tid"].astype(int).tolist()
    exact = set(cycles["tid"].astype(int).unique()) & set(tids) if not cycles.empty else set()
    for tid in sorted(exact):
        starts = np.sort(cycles.loc[cycles["tid"] == tid, "start_ns"].to_numpy(np.int64))
        if t_range is not None:
            starts = starts[(starts >= (t_range[0] or starts.min())) & (starts <= (t_range[1] or starts.max()))]
        if len(starts) > 1:
            frames.append(pd.DataFrame({"tid": tid, "t_ns": starts[1:], "period_ns": np.diff(starts)}))
            sources[tid] = "lab cycles (exact callback starts)"
    rest = [t for t in tids if t not in exact]
    if rest:
        w = thread_windows(
            cap, tids=rest, t_range=t_range, columns=["pid", "run_ns", "wait_ns", "slices", "state"], with_sched=False
        )
        woke = w[w["switches"].to_numpy() > 0]
        tid = woke["tid"].to_numpy()
        t = woke["end_ns"].to_numpy()
        first = _group_starts(tid)
        period = np.r_[0, np.diff(t)] if len(t) else np.zeros(0, dtype=np.int64)
        keep = ~first
        frames.append(pd.DataFrame({"tid": tid[keep], "t_ns": t[keep], "period_ns": period[keep]}))
        for t_ in rest:
            sources[t_] = "/proc switch-ins (timed to one sampling interval)"
    if not frames:
        return pd.DataFrame(columns=["tid", "t_ns", "period_ns"]), sources
    return pd.concat(frames, ignore_index=True), sources


def jitter(
    cap: Capture,
    *,
    pattern: str | None = None,
    t_range: tuple[int | None, int | None] | None = None,
    bins: int = 24,
    tids: tuple[int, ...] = (),
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(stats, histogram) for the periodic threads (or those matching `pattern`).

    stats: tid comm source nominal_ns n p50_ns p99_ns min_ns max_ns std_ns jitter_pct lost_2x lost_3x lost_4x
    flag. histogram: tid lo_ns hi_ns count multiple (k when the bin holds k x the period, k >= 2) beyond
    (in the last bin: how many of its intervals lay past it).
    """
    interval = capture_interval_ns(cap)
    profiles = thread_profiles(cap, t_range=t_range)
    chosen = (
        select_threads(profiles, pattern=pattern, tids=tids)
        if pattern or tids
        else profiles[profiles["periodic"].to_numpy(bool)]
    )
    if chosen.empty:
        return pd.DataFrame(), pd.DataFrame()
    intervals, sources = wakeup_intervals(cap, chosen, t_range=t_range)
    stats, hists = [], []
    for row in chosen.itertuples(index=False):  # one iteration per periodic thread
        mine = intervals.loc[intervals["tid"] == row.tid, "period_ns"].to_numpy(dtype=np.float64)
        source = sources.get(int(row.tid), "")
        exact = source.startswith("lab")
        # One period per thread for every view: the profile's (the lab's clock where the capture has it).
        nominal = float(row.period_ns)
        if np.isnan(nominal) and exact and len(mine):
            nominal = float(np.median(mine))
        if np.isnan(nominal) or len(mine) < 2:
            continue
        resolution = 0.0 if exact else float(interval)
        if not exact and not wakeups_timed(nominal, interval):
            stats.append(
                {"tid": row.tid, "comm": row.comm, "source": source, "nominal_ns": nominal, "n": len(mine),
                 "flag": "period shorter than the sampling interval: record at a shorter --interval or with eBPF"}
            )  # fmt: skip
            continue
        figures, hist = _period_figures(mine, nominal, resolution, bins)
        if not lost_wakeups_resolvable(nominal, resolution):  # the spread is the sampling's rounding
            figures.update({f"lost_{k}x": np.nan for k in MULTIPLES})
            figures["flag"] = (
                "lost wake-ups unknown: the period is under twice the sampling interval (record with eBPF "
                "or at a shorter --interval)"
            )
            hist = hist.assign(multiple=0)
        stats.append({"tid": row.tid, "comm": row.comm, "source": source, **figures})
        hists.append(hist.assign(tid=row.tid, comm=row.comm)[HIST_COLUMNS])
    stats_df = pd.DataFrame(stats)
    hist_df = pd.concat(hists, ignore_index=True) if hists else pd.DataFrame()
    return stats_df, hist_df


HIST_COLUMNS = ["tid", "comm", "lo_ns", "hi_ns", "count", "multiple", "beyond"]


def _period_figures(mine: np.ndarray, nominal: float, resolution: float, bins: int) -> tuple[dict, pd.DataFrame]:
    """The figures of one series of intervals against its nominal period, and its histogram (lo_ns hi_ns
    count multiple beyond). resolution 0: the intervals are exact; else they are timed to that resolution (ns)."""
    exact = resolution == 0
    tolerance = max(LOST_WAKEUP_TOLERANCE * nominal, resolution)
    lost = {k: int((np.abs(mine - k * nominal) <= tolerance).sum()) for k in MULTIPLES}
    flags = [f"{n} at {k}x the period" for k, n in lost.items() if n]
    figures = {
        "nominal_ns": nominal,
        "n": len(mine),
        "p50_ns": float(np.percentile(mine, 50)),
        "p99_ns": float(np.percentile(mine, 99)),
        "min_ns": float(mine.min()),
        "max_ns": float(mine.max()),
        "std_ns": float(mine.std()),
        # At window resolution the spread is mostly the sampling's own rounding: not a jitter figure.
        "jitter_pct": 100.0 * float(mine.std()) / nominal if exact else np.nan,
        **{f"lost_{k}x": n for k, n in lost.items()},
        "flag": ("lost wake-ups: " + ", ".join(flags)) if flags else "",
    }
    # One interval far beyond the period (a recording gap, a stalled source: 1.6 s among 5.3 ms cycles
    # measured in captures/jack-starved-ebpf.ssf) would stretch the bins over it and put every ordinary
    # interval in one: the bins stop a period past the last multiple looked for, the last one holds all
    # beyond it (`beyond`: how many of its count lay past that edge).
    ceiling = (max(MULTIPLES) + 1) * nominal
    beyond = int((mine > ceiling).sum())
    mine = np.minimum(mine, ceiling)
    width = resolution if resolution else max((mine.max() - mine.min()) / bins, 1.0)
    top = max(mine.max(), (max(MULTIPLES) if any(lost.values()) else 1) * nominal)
    edges = np.arange(max(mine.min() - width / 2, 0), top + width, width)
    if not exact:  # centre bins on multiples of the interval: that is all /proc can time
        edges = np.arange(0, top + 1.5 * width, width) - width / 2
        edges = edges[edges >= 0] if (edges >= 0).any() else edges
    counts, edges = np.histogram(mine, bins=edges)
    centre = (edges[:-1] + edges[1:]) / 2
    multiple = np.zeros(len(counts), dtype=np.int64)
    for k in MULTIPLES:
        multiple[np.abs(centre - k * nominal) <= max(width / 2, tolerance)] = k
    nonzero = (counts > 0) | (multiple > 0)
    past = np.zeros(len(counts), dtype=np.int64)
    if beyond:
        past[np.clip(np.searchsorted(edges, ceiling, side="right") - 1, 0, len(counts) - 1)] = beyond
    hist = pd.DataFrame(
        {
            "lo_ns": edges[:-1][nonzero],
            "hi_ns": edges[1:][nonzero],
            "count": counts[nonzero],
            "multiple": multiple[nonzero],
            "beyond": past[nonzero],
        }
    )
    return figures, hist


def engine_jitter(
    cap: Capture, *, t_range: tuple[int | None, int | None] | None = None, bins: int = 24
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(starts, histogram, ends) per engine and driver; all empty when the capture has no engine cycles.

    starts: engine driver source nominal_ns n p50_ns ... lost_4x flag (the spacing of the driver's cycle
    starts, as the thread stats). histogram: engine driver lo_ns hi_ns count multiple beyond. ends: engine source
    period_ns cycles cycles_with_end end_p50_ns end_p99_ns end_max_ns deadline_misses misses_unknown
    never_begun (cycles the driver never began: analyses.engine.cycle_starts) xruns xrun_reports
    xrun_delay_max_us xruns_from (xruns NaN when the source did not record them).
    """
    cycles = cap.engine_cycles
    if cycles.empty:
        return pd.DataFrame(), pd.DataFrame(), pd.DataFrame()
    cycles = cycles[in_span(cycles["t_ns"].to_numpy(), t_range)].copy()
    cycles["engine"] = cycles["engine"].astype(str)
    cycles["driver"] = cycles["driver"].astype(object).where(cycles["driver"].notna(), "?").astype(str)
    starts, hists = [], []
    for (engine, driver), group in cycles.groupby(["engine", "driver"], sort=True):
        t = np.sort(group["t_ns"].to_numpy(dtype=np.int64))
        # The nominal period is the engine's (quantum / rate), never the median of what was seen: a
        # driver that loses every other cycle would otherwise look on time.
        period = group["period_ns"].dropna()
        if len(t) < 3 or period.empty:
            continue
        figures, hist = _period_figures(np.diff(t).astype(np.float64), float(period.median()), 0.0, bins)
        where = f"{engine} engine cycles (driver's cycle starts, exact)"
        starts.append({"engine": engine, "driver": driver, "source": where, **figures})
        hists.append(hist.assign(engine=engine, driver=driver))
    summary = engine_cycle_summary(cycles, cap.engine_nodes)
    begun = cycle_starts(cycles)
    never = begun.groupby("engine")["missed_before"].sum() if len(begun) else pd.Series(dtype=np.int64)
    rows = []
    for row in summary.to_dict("records"):
        xruns = xrun_figures(cap, t_range, str(row["engine"]))  # its own engine's: JACK's are not PipeWire's
        rows.append(
            {
                "engine": row["engine"],
                "source": f"{row['engine']} engine cycles (last node's finish after the driver's start)",
                **{k: row[k] for k in SUMMARY_COLUMNS if k not in ("engine", "span_ns")},
                "never_begun": int(never.get(row["engine"], 0)),
                "xruns": float(xruns["xruns"]) if xruns else np.nan,
                "xrun_reports": float(xruns["reports"]) if xruns else np.nan,
                "xrun_delay_max_us": xruns["delay_max_us"] if xruns else np.nan,
                "xruns_from": xruns["counted_from"] if xruns else "unknown: no engine source in the capture",
            }
        )
    hist_df = pd.concat(hists, ignore_index=True) if hists else pd.DataFrame()
    return pd.DataFrame(starts), hist_df, pd.DataFrame(rows)
