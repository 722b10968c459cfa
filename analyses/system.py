"""The summary a 2004 jackd + fluidsynth kernel benchmark reported, from a capture.

    XRUNs                      deadline misses (lab cycles), and the span they are counted in
    XRUN rate                  deadline misses per hour (lab cycles)
    Delay rate (> spare time)  cycles whose delay exceeded the spare time of the period, per hour
    Delay rate (> 1000 us)     per hour
    Delay maximum              us
    Cycle maximum              us (longest callback)
    Average DSP load           mean cycle time / period
    Average CPU user / system / nice / IO-wait / IRQ / soft-IRQ load   % of all CPU time (/proc/stat)
    Average interrupt rate, context-switch rate                      per second (/proc/stat intr, ctxt)

Spare time of a cycle = period - that cycle's run time. With the lab's cycles table the delay and cycle
figures are exact; else with an engine's own cycles (JACK, PipeWire) they are the engine's: its deadline
misses are the cycles that ended after their period and those its driver never began (a gap in its cycle
starts: analyses.engine.cycle_starts), a delay how late its driver began a cycle; otherwise they are
estimated for the main periodic thread from /proc (see
`analyses.cycles`) and say so in their `source`. A figure the capture cannot give is NaN with the reason.
With `tids` (`--tid N`) those threads are timed: their own lab callbacks, else one of them from /proc
(the periodic one with the highest priority, else the first asked for); the machine's figures (CPU
loads, interrupt and context-switch rates, the engine's own) stay the whole machine's.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from analyses.cycles import lab_cycles, proc_cycles
from analyses.engine import cycle_starts, engine_cycle_ends, engine_cycles, engine_period_medians, xrun_figures
from analyses.rules import wakeups_timed
from analyses.source import capture_interval_ns
from analyses.span import in_span
from analyses.threads import thread_names, thread_profiles
from capture.format import Capture

HOUR_NS = 3_600_000_000_000
CPU_FIELDS = ("user", "system", "nice", "iowait", "irq", "softirq", "steal")


# The figures timed wake-up by wake-up (name, unit): unknown together where the wake-ups cannot be timed.
WAKEUP_FIGURES = (
    ("Delay rate (> spare time)", "/hour"),
    ("Delay rate (> 1000 us)", "/hour"),
    ("Delay maximum", "us"),
    ("Cycle maximum", "us"),
    ("Average DSP load", "%"),
)


def main_periodic_thread(profiles: pd.DataFrame) -> pd.Series | None:
    """The thread a benchmark would time: the periodic one with the highest real-time priority, then the
    most wake-ups."""
    periodic = profiles[profiles["periodic"].to_numpy(dtype=bool)]
    if periodic.empty:
        return None
    ranked = periodic.sort_values(["max_rtprio", "switches"], ascending=False)
    return ranked.iloc[0]


def timed_thread(profiles: pd.DataFrame, tids: tuple[int, ...] = ()) -> pd.Series | None:
    """The thread whose wake-ups are timed from /proc: the main periodic thread, or with `tids` the
    periodic one of those (highest priority, then most wake-ups), else the first of them in `profiles`."""
    if not tids:
        return main_periodic_thread(profiles)
    asked = profiles[profiles["tid"].isin(tids).to_numpy()]
    if asked.empty:
        return None
    main = main_periodic_thread(asked)
    if main is not None:
        return main
    present = set(asked["tid"].tolist())
    first = next(t for t in tids if t in present)
    return asked[asked["tid"].to_numpy() == first].iloc[0]


def _who(cap: Capture, tids: tuple[int, ...]) -> str:
    names = thread_names(cap).set_index("tid")["comm"]
    return ", ".join(f"{names.get(t, '?')} ({t})" for t in tids)


def cpu_loads(cap: Capture, t_range: tuple[int | None, int | None] | None = None) -> dict[str, float]:
    """% of all CPU time per /proc/stat field, and interrupt / context-switch rates per second."""
    system = cap.system
    if system.empty:
        return {}
    machine = system[system["cpu"] == -1].sort_values("t_ns")
    if t_range is not None:
        lo, hi = t_range
        if lo is not None:
            machine = machine[machine["t_ns"] >= lo]
        if hi is not None:
            machine = machine[machine["t_ns"] <= hi]
    if len(machine) < 2:
        return {}
    first, last = machine.iloc[0], machine.iloc[-1]
    fields = [f for f in (*CPU_FIELDS, "idle") if f in machine]
    delta = {f: float(last[f]) - float(first[f]) for f in fields}
    total = sum(delta.values())
    seconds = (int(last["t_ns"]) - int(first["t_ns"])) / 1e9
    out = {f"cpu_{f}_pct": (100.0 * delta[f] / total if total > 0 else np.nan) for f in CPU_FIELDS if f in delta}
    for name in ("intr", "ctxt"):
        if name in machine and not pd.isna(first[name]) and not pd.isna(last[name]) and seconds > 0:
            out[f"{name}_per_s"] = (float(last[name]) - float(first[name])) / seconds
    out["seconds"] = seconds
    return out


def system_figures(
    cap: Capture,
    *,
    t_range: tuple[int | None, int | None] | None = None,
    profiles: pd.DataFrame | None = None,
    tids: tuple[int, ...] = (),
) -> pd.DataFrame:
    """One row per figure: figure, value, unit, source (module docstring; `tids`: the threads timed)."""
    profiles = thread_profiles(cap, t_range=t_range) if profiles is None else profiles
    rows: list[dict[str, object]] = []

    def add(figure: str, value: float, unit: str, source: str) -> None:
        rows.append({"figure": figure, "value": value, "unit": unit, "source": source})

    duration = float(profiles["last_ns"].max() - profiles["first_ns"].min()) if len(profiles) else float("nan")
    cycles = lab_cycles(cap, tids or None)
    if t_range is not None and len(cycles):
        lo, hi = t_range
        keep = np.ones(len(cycles), dtype=bool)
        if lo is not None:
            keep &= cycles["start_ns"].to_numpy() >= lo
        if hi is not None:
            keep &= cycles["end_ns"].to_numpy() <= hi
        cycles = cycles[keep]
    if len(cycles):
        period = float(cycles["period_ns"].iloc[0])
        span = float(cycles["end_ns"].max() - cycles["start_ns"].min())
        per_hour = HOUR_NS / span if span > 0 else np.nan
        spare = period - cycles["cycle_ns"].to_numpy()
        delay = cycles["delay_ns"].to_numpy()
        source = f"lab cycles ({len(cycles)})"
        if tids:  # the threads asked for that have callbacks
            timed = set(cap.cycles["tid"].tolist())
            source = f"lab cycles of {_who(cap, tuple(t for t in tids if t in timed))} ({len(cycles)})"
        # The count and the span it is from first: a rate per hour from a few seconds is an extrapolation.
        add("XRUNs (deadline misses)", float(cycles["missed"].sum()), f"in {span / 1e9:.1f} s", source)
        add("XRUN rate (deadline misses)", float(cycles["missed"].sum()) * per_hour, "/hour", source)
        add("Delay rate (> spare time)", float((delay > spare).sum()) * per_hour, "/hour", source)
        add("Delay rate (> 1000 us)", float((delay > 1_000_000).sum()) * per_hour, "/hour", source)
        add("Delay maximum", float(delay.max()) / 1e3, "us", source)
        add("Cycle maximum", float(cycles["cycle_ns"].max()) / 1e3, "us", source)
        add("Average DSP load", 100.0 * float(cycles["cycle_ns"].mean()) / period, "%", source)
    elif not tids and _engine_cycle_figures(cap, t_range, add):
        pass  # the engine's own cycles (its driver's starts, its clients' finishes) time the graph
    else:
        main = timed_thread(profiles, tids)
        if main is None:
            reason = (
                f"unknown: {_who(cap, tids)}: no lab cycles, and no samples in this span"
                if tids
                else "unknown: no lab cycles and no periodic thread"
            )
            for figure, unit in (
                ("XRUNs (deadline misses)", ""),
                ("XRUN rate (deadline misses)", "/hour"),
                *WAKEUP_FIGURES,
            ):
                add(figure, np.nan, unit, reason)
        else:
            add("XRUNs (deadline misses)", np.nan, "", "unknown: needs cycle ends (lab cycles)")
            add("XRUN rate (deadline misses)", np.nan, "/hour", "unknown: needs cycle ends (lab cycles)")
            _proc_wakeup_figures(cap, main, bool(tids), t_range, add)
    _engine_figures(cap, t_range, add)
    loads = cpu_loads(cap, t_range)
    labels = {
        "user": "Average CPU user load",
        "system": "Average CPU system load",
        "nice": "Average CPU nice load",
        "iowait": "Average CPU IO-wait load",
        "irq": "Average CPU IRQ load",
        "softirq": "Average CPU soft-IRQ load",
        "steal": "Average CPU steal (hypervisor)",
    }
    for field, label in labels.items():
        value = loads.get(f"cpu_{field}_pct", np.nan)
        add(label, value, "%", "/proc/stat" if not pd.isna(value) else "unknown: no system table")
    add(
        "Average interrupt rate",
        loads.get("intr_per_s", np.nan),
        "/s",
        "/proc/stat intr" if "intr_per_s" in loads else "unknown: no system table",
    )
    add(
        "Average context-switch rate",
        loads.get("ctxt_per_s", np.nan),
        "/s",
        "/proc/stat ctxt" if "ctxt_per_s" in loads else "unknown: no system table",
    )
    add("Duration", duration / 1e9, "s", "samples")
    return pd.DataFrame(rows)


def _engine_cycle_figures(
    cap: Capture, t_range: tuple[int | None, int | None] | None, add: Callable[[str, float, str, str], None]
) -> bool:
    """The benchmark's XRUN, delay and cycle rows from the engine's own cycles, where the capture has two
    or more in the span (the engine with the most): False without them. A deadline missed is a cycle
    that ended after its period or one the driver never started (a gap in its cycle starts:
    analyses.engine.cycle_starts); a cycle's delay is how late its driver began it, its cycle time from
    its start to its last client's finish."""
    cycles = cap.engine_cycles
    cycles = cycles[in_span(cycles["t_ns"].to_numpy(), t_range)]
    if len(cycles) < 2:
        return False
    engine = str(cycles["engine"].astype(str).value_counts().idxmax())
    cycles = cycles[(cycles["engine"].astype(str) == engine).to_numpy()]
    begun = cycle_starts(cycles)
    ended = engine_cycle_ends(cycles, cap.engine_nodes)
    period = float(engine_period_medians(cycles).get(engine, np.nan))  # NaN: no finite positive period
    span = float(begun["t_ns"].max() - begun["t_ns"].min()) + period
    per_hour = HOUR_NS / span if span > 0 else np.nan
    never = int(begun["missed_before"].sum())
    ended_late = int(ended["missed"].sum(skipna=True))
    unknown = int(ended["missed"].isna().sum())
    source = f"{engine} cycles: {ended_late} ended late, {never} never began"
    add("XRUNs (deadline misses)", float(ended_late + never), f"in {span / 1e9:.1f} s", source)
    add("XRUN rate (deadline misses)", float(ended_late + never) * per_hour, "/hour", source)
    delay = begun["late_ns"].dropna().to_numpy(np.float64)
    run = pd.to_numeric(ended["end_rel_ns"], errors="coerce").dropna().to_numpy(np.float64)
    timing = f"{engine} engine cycles ({len(begun)}, {len(run)} with an end)"
    if unknown:  # their lateness unknown: not among the deadline misses
        source += f" ({unknown} unknown)"
    if len(delay):
        spare = period - float(np.median(run)) if len(run) else np.nan
        add("Delay rate (> spare time)", float((delay > spare).sum()) * per_hour, "/hour", timing)
        add("Delay rate (> 1000 us)", float((delay > 1_000_000).sum()) * per_hour, "/hour", timing)
        add("Delay maximum", float(delay.max()) / 1e3, "us", timing)
    if len(run):
        add("Cycle maximum", float(run.max()) / 1e3, "us", timing)
        add("Average DSP load", 100.0 * float(run.mean()) / period, "%", timing)
    else:
        for figure, unit in (("Cycle maximum", "us"), ("Average DSP load", "%")):
            add(figure, np.nan, unit, "unknown: no engine cycle seen fully finished")
    return True


def _proc_wakeup_figures(
    cap: Capture,
    main: pd.Series,
    asked: bool,
    t_range: tuple[int | None, int | None] | None,
    add: Callable[[str, float, str, str], None],
) -> None:
    """The figures timed wake-up by wake-up, from the /proc windows of `main` (the thread timed; `asked`: given
    by --tid): unknown, and why, where its windows hold several wake-ups each."""
    who = f"{main['comm']} ({int(main['tid'])})"
    period = float(main["period_ns"])
    interval = capture_interval_ns(cap)
    if np.isfinite(period) and not wakeups_timed(period, interval):
        reason = (
            f"unknown: read every {interval / 1e6:.3g} ms, {who} woke every {period / 1e6:.3g} ms: "
            "/proc cannot time its wake-ups"
        )
        for figure, unit in WAKEUP_FIGURES:
            add(figure, np.nan, unit, reason)
        return
    est = proc_cycles(cap, int(main["tid"]), t_range=t_range)
    clean = est[~est["ambiguous"].to_numpy(dtype=bool)]
    if not len(clean):
        return
    span = float(main["wall_ns"])
    per_hour = HOUR_NS / span if span > 0 else np.nan
    source = f"/proc estimate, {who}, {len(clean)} wake-ups"
    delay = clean["delay_ns"].to_numpy()
    # A thread asked for by --tid may have no period: no spare time, no DSP load.
    aperiodic = asked and not np.isfinite(period)
    if aperiodic:
        add("Delay rate (> spare time)", np.nan, "/hour", f"unknown: {who} is not periodic")
    else:
        spare = period - float(np.median(clean["cycle_ns"]))
        add("Delay rate (> spare time)", float((delay > spare).sum()) * per_hour, "/hour", source)
    add("Delay rate (> 1000 us)", float((delay > 1_000_000).sum()) * per_hour, "/hour", source)
    add("Delay maximum", float(delay.max()) / 1e3, "us", source)
    add("Cycle maximum", float(clean["cycle_ns"].max()) / 1e3, "us", source)
    if aperiodic:
        add("Average DSP load", np.nan, "%", f"unknown: {who} is not periodic")
    else:
        add("Average DSP load", 100.0 * float(clean["cycle_ns"].mean()) / period, "%", source)


def _engine_figures(
    cap: Capture, t_range: tuple[int | None, int | None] | None, add: Callable[[str, float, str, str], None]
) -> None:
    """The engine's own figures, beside those from cycles: xruns it reported, and its cycle maxima."""
    xruns = xrun_figures(cap, t_range)
    if xruns is None:
        return
    span = xruns["span_ns"] / 1e9
    source = f"{xruns['engine']} ({xruns['counted_from']}, {xruns['reports']} reports over {span:.1f} s)"
    add("XRUN count (engine)", float(xruns["xruns"]), "", source)
    add("XRUN rate (engine)", xruns["per_hour"], "/hour", source)
    add(
        "XRUN delay maximum (engine)",
        xruns["delay_max_us"],
        "us",
        source if xruns["delay_max_us"] == xruns["delay_max_us"] else "unknown: the engine reported no delay",
    )
    cycles = engine_cycles(cap, t_range)
    if len(cycles):
        csource = f"{xruns['engine']} engine cycles ({len(cycles)})"
        ends = cycles["end_rel_ns"].dropna()
        if len(ends):
            add("Cycle maximum (engine)", float(ends.max()) / 1e3, "us", csource)
        else:  # only late flags known: a client never seen finishing in any cycle
            add("Cycle maximum (engine)", np.nan, "us", "unknown: no cycle seen fully finished")
        add("Deadline misses (engine)", float(cycles["missed"].sum()), "", csource)
        begun = cycle_starts(cap.engine_cycles[in_span(cap.engine_cycles["t_ns"].to_numpy(), t_range)])
        add("Cycles never begun (engine)", float(begun["missed_before"].sum()), "", f"{xruns['engine']} cycle starts")
    else:
        add("Cycle maximum (engine)", np.nan, "us", "unknown: the capture has no engine cycle ends")
