"""Two captures side by side (A/B arms: N clients in series vs one chain, before vs after a tuning).

Figures, each with A, B and the change in % of A:
    cycle end p50 / p99   from the engine's own cycles when the capture has them (JACK, PipeWire: start
                          to the last client's finish), else the lab's cycles (end - nominal start of each
                          cycle; a graph's cycle ends with its last stage)
    deadline misses       count, and per hour (engine: cycles that ended late and cycles its driver never
                          began, a gap in its cycle starts; the latter also on a row of their own)
    wake-ups per cycle    switch-ins of the periodic threads (the graph's) / cycles (lab cycles, else periods
                          of the main periodic thread): N clients in series wake N threads a cycle, a
                          chain one; and of all recorded threads
    CPU of the targets    on-CPU time of all recorded threads, % of one core
    runnable wait         % of the targets' CPU time spent waiting for a CPU
    minor faults / s, context switches / s (machine), incidents (as `forensics stalls` finds them) and
                          per minute, stall episodes and their verdicts
    RSS peak / at end     resident memory of the target processes together (the `processes` table, read
                          at 20 Hz: each process's last read of every 50 ms round, summed), MiB;
                          unknown for a capture without that table (recorded before it existed)
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyses.cycles import lab_cycles
from analyses.engine import cycle_starts, engine_cycles, xrun_figures
from analyses.incidents import find_incidents
from analyses.source import capture_interval_ns
from analyses.stalls import find_stalls
from analyses.system import cpu_loads, main_periodic_thread
from analyses.threads import select_threads, thread_profiles
from analyses.windows import iter_raw_windows
from capture.format import Capture

HOUR_NS = 3_600_000_000_000


def capture_figures(cap: Capture) -> dict[str, tuple[float, str]]:
    """figure -> (value, unit) for one capture; NaN where the capture cannot say."""
    profiles = thread_profiles(cap)
    out: dict[str, tuple[float, str]] = {}
    if profiles.empty:
        return out
    duration = float(profiles["last_ns"].max() - profiles["first_ns"].min())
    out["duration"] = (duration / 1e9, "s")
    out["threads recorded"] = (float(len(profiles)), "")
    on = float(profiles["on_cpu_ns"].sum())
    rq = float(profiles["runqueue_ns"].sum())
    switches = float(profiles["switches"].sum())
    minflt = 0.0
    for w in iter_raw_windows(cap, ["pid", "run_ns", "wait_ns", "slices", "minflt"]):
        minflt += float(w["minflt"].sum())
    cycles = lab_cycles(cap)
    engine = engine_cycles(cap)
    if len(engine) and engine["engine"].nunique() > 1:  # JACK through PipeWire: the engine with the most cycles
        engine = engine[engine["engine"] == engine["engine"].value_counts().idxmax()]
    if len(engine):  # the engine's own cycle ends come first: they are what the user's xruns come from
        span = float(engine["t_ns"].max() - engine["t_ns"].min())
        # Cycles the engine ran in the span (the source may not have seen every one end).
        n_cycles = duration / float(engine["period_ns"].astype("float64").median())  # NaN: no period known
        ends = engine["end_rel_ns"].dropna().to_numpy(dtype=np.int64)  # NA: only the engine's late flag is known
        out["cycle end p50"] = (float(np.percentile(ends, 50)) / 1e3 if len(ends) else np.nan, "us")
        out["cycle end p99"] = (float(np.percentile(ends, 99)) / 1e3 if len(ends) else np.nan, "us")
        # A cycle the driver never began missed its deadline too (a gap in its starts: cycle_starts).
        begun = cycle_starts(cap.engine_cycles)
        never = float(begun.loc[begun["engine"] == str(engine["engine"].iloc[0]), "missed_before"].sum())
        misses = float(engine["missed"].sum()) + never
        out["deadline misses"] = (misses, "")
        out["  never began"] = (never, "cycles (a gap in the driver's starts)")
        out["deadline misses per hour"] = (misses * HOUR_NS / span if span else np.nan, "/h")
        cycles_source = f"{engine['engine'].iloc[0]} engine cycles"
    elif len(cycles):
        n_cycles = float(len(cycles))
        span = float(cycles["end_ns"].max() - cycles["start_ns"].min())
        out["cycle end p50"] = (float(np.percentile(cycles["end_rel_ns"], 50)) / 1e3, "us")
        out["cycle end p99"] = (float(np.percentile(cycles["end_rel_ns"], 99)) / 1e3, "us")
        out["deadline misses"] = (float(cycles["missed"].sum()), "")
        out["deadline misses per hour"] = (float(cycles["missed"].sum()) * HOUR_NS / span if span else np.nan, "/h")
        cycles_source = "lab cycles"
    else:
        main = main_periodic_thread(profiles)
        n_cycles = duration / float(main["period_ns"]) if main is not None else np.nan
        for name in ("cycle end p50", "cycle end p99", "deadline misses", "deadline misses per hour"):
            out[name] = (np.nan, "us" if "p" in name.split()[-1] else "")
        cycles_source = "periods of the main periodic thread" if main is not None else "none"
    out["cycles"] = (n_cycles, cycles_source)
    xruns = xrun_figures(cap)
    if xruns is not None:
        out["engine xruns"] = (float(xruns["xruns"]), f"reported by {xruns['engine']} ({xruns['counted_from']})")
    periodic_switches = float(profiles.loc[profiles["periodic"].to_numpy(bool), "switches"].sum())
    out["wake-ups per cycle"] = (periodic_switches / n_cycles if n_cycles else np.nan, "periodic threads")
    out["  all recorded threads"] = (switches / n_cycles if n_cycles else np.nan, "switch-ins per cycle")
    out["CPU of the targets"] = (100.0 * on / duration if duration else np.nan, "% of a core")
    out["runnable wait"] = (100.0 * rq / on if on else np.nan, "% of CPU time")
    out["minor faults"] = (minflt / (duration / 1e9) if duration else np.nan, "/s")
    loads = cpu_loads(cap)
    out["context switches (machine)"] = (loads.get("ctxt_per_s", np.nan), "/s")
    peak, end = rss_mib(cap)
    out["RSS peak"] = (peak, "MiB, target processes")
    out["RSS at end"] = (end, "MiB, target processes")
    stalls = find_stalls(cap, profiles=profiles)
    # Incidents as `forensics stalls` finds them (one per late cycle or run of them, whatever the number
    # of clients that waited in it): the arms' rates compare late cycles, not episodes.
    incidents, _ = find_incidents(cap, stalls, select_threads(profiles), interval_ns=capture_interval_ns(cap))
    out["incidents"] = (float(len(incidents)), "")
    out["incidents per minute"] = (len(incidents) * 60e9 / duration if duration else np.nan, "/min")
    out["stall episodes"] = (float(len(stalls)), "")
    counts = stalls["verdict"].value_counts() if len(stalls) else pd.Series(dtype=int)
    for verdict in ("run", "runqueue", "io", "fault", "lock", "unknown"):
        out[f"  {verdict}"] = (float(counts.get(verdict, 0)), "episodes")
    return out


RSS_ROUND_NS = 50_000_000  # the recorder reads every target's memory once per 50 ms round (20 Hz)


def rss_mib(cap: Capture) -> tuple[float, float]:
    """(peak, at end) of the target processes' summed RSS, MiB; NaN where the capture has no memory reads.

    A process counts in a round when it was read in it: one that exited leaves the sum, one that
    started joins it."""
    memory = cap.processes
    if memory.empty or "rss_kib" not in memory:
        return np.nan, np.nan
    t = memory["t_ns"].to_numpy(np.int64)
    rounds = memory.assign(round=(t - t.min()) // RSS_ROUND_NS).sort_values("t_ns", kind="stable")
    per_round = rounds.groupby(["round", "pid"])["rss_kib"].last().groupby(level=0).sum()
    if per_round.empty:
        return np.nan, np.nan
    return float(per_round.max()) / 1024.0, float(per_round.iloc[-1]) / 1024.0


def compare(a: Capture, b: Capture) -> pd.DataFrame:
    """figure, a, b, unit, change_pct ((b - a) / a)."""
    fa, fb = capture_figures(a), capture_figures(b)
    rows = []
    for figure in dict.fromkeys([*fa, *fb]):
        va, unit = fa.get(figure, (np.nan, ""))
        vb, unit_b = fb.get(figure, (np.nan, unit))
        if figure == "cycles":
            unit = unit if unit == unit_b else f"{unit} / {unit_b}"
        change = 100.0 * (vb - va) / va if va and not np.isnan(va) and not np.isnan(vb) else np.nan
        rows.append({"figure": figure, "a": va, "b": vb, "unit": unit, "change_pct": change})
    return pd.DataFrame(rows)
