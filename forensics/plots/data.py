"""The DataFrames the pictures draw, asked of the analyses (nothing here decides a verdict or a period).

Timeline: per chosen thread and window, on-CPU / runqueue / blocked ns (`analyses.windows`, reconciled);
"blocked" is the off-CPU time of a window whose read found the thread in D at either end (the same test
`analyses.stalls` uses for io); time asleep in S is the normal wait between callbacks and is left blank.
Windows are summed into wider bins only when a thread has more of them than a picture has pixels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from capture.format import Capture
from forensics.describe import asked_threads

MAX_POINTS = 5000  # windows per thread drawn as they are (10 s at 2 ms); above, summed into bins


@dataclass
class TimelineData:
    title: str
    subtitle: str
    origin_ns: int
    t_range: tuple[int, int]
    interval_ns: int
    bin_ns: int  # width of a drawn window: the sampling interval, or wider bins on a long capture
    threads: pd.DataFrame  # tid comm label watched rt period_ns (drawing order)
    windows: pd.DataFrame  # tid start_ns end_ns wall_ns on_cpu_ns runqueue_ns blocked_ns faults cpu core_type
    stalls: pd.DataFrame  # tid comm start_ns end_ns verdict stall_ns (of the chosen threads)
    markers: pd.DataFrame  # t_ns text
    cycles: pd.DataFrame  # t_ns value_ns missed: one point per callback (or engine cycle)
    deadline_ns: float | None = None
    deadline_label: str = ""
    cycles_label: str = ""
    core_types: dict[int, str] = field(default_factory=dict)  # cpu -> label ("" when uniform)
    slow_types: set[str] = field(default_factory=set)
    cpus: list[int] = field(default_factory=list)
    xruns: pd.DataFrame = field(default_factory=lambda: pd.DataFrame({"t_ns": []}))  # t_ns: engine-reported
    # incident start_ns end_ns root_comm root_verdict: as `forensics stalls` numbers them
    incidents: pd.DataFrame = field(default_factory=lambda: pd.DataFrame({"incident": [], "start_ns": []}))


def _markers(cap: Capture) -> pd.DataFrame:
    events = cap.events
    marks = events[events["kind"] == "marker"] if len(events) else events
    texts = [str(t) if isinstance(t, str) and t else f"#{i + 1}" for i, t in enumerate(marks["text"].tolist())]
    return pd.DataFrame({"t_ns": marks["t_ns"].to_numpy(dtype=np.int64), "text": texts})


def choose_threads(profiles: pd.DataFrame, pattern: str | None, top: int, tids: tuple[int, ...] = ()) -> pd.DataFrame:
    """--thread REGEX and --tid N (either: the threads of both), else the watched threads (real-time,
    periodic) then the busiest others, `top` in all."""
    from analyses.threads import select_threads

    if profiles.empty:
        return profiles.assign(watched=pd.Series(dtype=bool))
    if pattern is not None or tids:
        chosen = select_threads(profiles, pattern=pattern, tids=tids)
        watched = set(select_threads(profiles)["tid"].tolist())
        return chosen.assign(watched=chosen["tid"].isin(watched).to_numpy())
    watched = select_threads(profiles)
    busy = (profiles["on_cpu_ns"] + profiles["runqueue_ns"]).rename("busy")
    ranked = profiles.assign(busy=busy.to_numpy()).sort_values("busy", ascending=False)
    # Watched threads first (periodic ones, the callbacks, then by priority), then the busiest of the rest.
    first = ranked[ranked["tid"].isin(watched["tid"])].sort_values(["periodic", "max_rtprio", "busy"], ascending=False)
    rest = ranked[~ranked["tid"].isin(watched["tid"]) & (ranked["busy"] > 0)]
    chosen = pd.concat([first, rest]).head(max(top, 1))
    return chosen.assign(watched=chosen["tid"].isin(watched["tid"]).to_numpy())


def _binned(windows: pd.DataFrame, origin: int, bin_ns: int) -> pd.DataFrame:
    """Windows summed into bins of bin_ns per thread (ns add up; cpu: the last one, a placement sample)."""
    key = (windows["end_ns"].to_numpy() - origin) // bin_ns
    frame = windows.assign(bin=key)
    g = frame.groupby(["tid", "bin"], sort=True)
    out = g[["wall_ns", "on_cpu_ns", "runqueue_ns", "blocked_ns", "faults"]].sum()
    out = out.join(g[["cpu", "core_type"]].last()).reset_index()
    out["start_ns"] = origin + out["bin"] * bin_ns
    out["end_ns"] = out["start_ns"] + bin_ns
    return out.drop(columns=["bin"])


def timeline_data(
    cap: Capture,
    name: str,
    *,
    pattern: str | None = None,
    top: int = 4,
    t_range: tuple[int | None, int | None] | None = None,
    profiles: pd.DataFrame | None = None,
    stalls: pd.DataFrame | None = None,
    tids: tuple[int, ...] = (),
    incidents: pd.DataFrame | None = None,
) -> TimelineData:
    """`stalls`, `incidents`: those already found (the report's), else found here: the incidents as
    `forensics stalls` finds and numbers them, from the whole capture's episodes."""
    from analyses.cycles import lab_cycles, proc_cycles
    from analyses.engine import cycle_starts, engine_cycles
    from analyses.incidents import find_incidents
    from analyses.rules import blocked_ns, wakeups_timed
    from analyses.source import STATE_D, capture_interval_ns, capture_origin_ns
    from analyses.span import in_span, overlaps_span
    from analyses.stalls import find_stalls
    from analyses.summary import nice_bin_ns
    from analyses.system import main_periodic_thread
    from analyses.threads import policy_label, select_threads, thread_profiles
    from analyses.windows import core_type_map, thread_windows
    from capture.errors import ForensicsError

    origin = capture_origin_ns(cap)
    if origin is None:
        raise ForensicsError(f"{name} holds no samples: there is nothing to plot")
    interval = capture_interval_ns(cap)
    profiles = thread_profiles(cap, t_range=t_range) if profiles is None else profiles
    if profiles.empty:
        raise ForensicsError(f"{name} holds no samples in that span: there is nothing to plot")
    chosen = choose_threads(profiles, pattern, top, tids)
    if chosen.empty:
        raise ForensicsError(f"no thread of {name} matches {asked_threads(pattern, tids)}: see `forensics summarize`")
    lo = int(t_range[0]) if t_range and t_range[0] is not None else int(profiles["first_ns"].min())
    hi = int(t_range[1]) if t_range and t_range[1] is not None else int(profiles["last_ns"].max())
    drawn = chosen["tid"].astype(int).tolist()
    w = thread_windows(cap, tids=drawn, t_range=t_range, with_sched=False)
    state, state_start = w["state"].to_numpy(), w["state_start"].to_numpy()
    blocked = blocked_ns(state, state_start, w["off_cpu_ns"].to_numpy(), STATE_D)
    faults = np.zeros(len(w), dtype=np.int64)
    for column in ("minflt", "majflt"):
        if column in w:
            faults += w[column].to_numpy(dtype=np.int64)
    windows = pd.DataFrame(
        {
            "tid": w["tid"].to_numpy(),
            "start_ns": w["start_ns"].to_numpy(),
            "end_ns": w["end_ns"].to_numpy(),
            "wall_ns": w["wall_ns"].to_numpy(),
            "on_cpu_ns": w["on_cpu_ns"].to_numpy(),
            "runqueue_ns": w["runqueue_ns"].to_numpy(),
            "blocked_ns": blocked,
            "faults": faults,
            "cpu": w["cpu"].to_numpy(),
            "core_type": w["core_type"].astype(str).to_numpy(),
        }
    )
    bin_ns = interval
    most = int(windows.groupby("tid").size().max()) if len(windows) else 0
    if most > MAX_POINTS:
        bin_ns = nice_bin_ns(hi - lo, interval, MAX_POINTS // 2)
        windows = _binned(windows, origin, bin_ns)
    whole = None if stalls is None or t_range is not None else stalls
    if stalls is None:
        # The whole capture's episodes, decided as `forensics stalls` decides them (with /proc's suspects):
        # the incidents are grouped from them; the span picks those drawn.
        whole = find_stalls(cap, profiles=profiles)
        stalls = whole[overlaps_span(whole["start_ns"], whole["end_ns"], t_range)] if len(whole) else whole
        if pattern is not None or tids:
            extra = find_stalls(
                cap, pattern=pattern, tids=tids, t_range=t_range, profiles=profiles, with_suspects=False
            )
            stalls = pd.concat([stalls, extra]).drop_duplicates(["tid", "start_ns"]) if len(extra) else stalls
    if incidents is None:
        whole = find_stalls(cap, profiles=profiles) if whole is None else whole
        incidents, _ = find_incidents(cap, whole, select_threads(profiles), interval_ns=interval)
    if len(incidents):
        incidents = incidents[overlaps_span(incidents["start_ns"], incidents["end_ns"], (lo, hi))]
    stalls = stalls[stalls["tid"].isin(drawn)] if len(stalls) else stalls
    threads = chosen.assign(
        label=[
            _thread_label(r.comm, r.tid, policy_label(r.policy, r.rtprio, r.nice), r.period_ns)
            for r in chosen.itertuples(index=False)
        ]
    )[["tid", "comm", "label", "watched", "rt", "period_ns"]].reset_index(drop=True)

    # Deadline: the engine's own cycles (their ends, exact), else the lab's callbacks (exact), else the main
    # periodic thread's period (/proc estimate).
    cycles = pd.DataFrame({"t_ns": [], "value_ns": [], "missed": []})
    deadline, deadline_label, cycles_label = None, "", ""
    engine = engine_cycles(cap, (lo, hi))
    if len(engine) and engine["engine"].nunique() > 1:  # JACK through PipeWire: the engine with the most cycles
        engine = engine[engine["engine"] == engine["engine"].value_counts().idxmax()]
    engine = engine[engine["end_rel_ns"].notna().to_numpy()]  # a point needs an end
    xruns = cap.xruns
    xruns = pd.DataFrame({"t_ns": xruns["t_ns"].to_numpy(dtype=np.int64)})
    xruns = _in_range(xruns, lo, hi)
    lab = lab_cycles(cap) if engine.empty else pd.DataFrame()
    if len(lab):
        lab = lab[(lab["start_ns"] >= lo) & (lab["start_ns"] <= hi)]
    if len(engine):
        name_ = str(engine["engine"].iloc[0])
        period = float(engine["period_ns"].median())
        missed = engine["missed"].to_numpy(dtype=bool)
        t_ns = engine["t_ns"].to_numpy(dtype=np.int64)
        end_rel = engine["end_rel_ns"].to_numpy(dtype=np.float64)
        cycles = pd.DataFrame({"t_ns": t_ns, "value_ns": end_rel, "missed": missed})
        deadline = period
        deadline_label = f"deadline = period {period / 1e6:.3f} ms ({name_} quantum / rate)"
        begun = cycle_starts(cap.engine_cycles[in_span(cap.engine_cycles["t_ns"].to_numpy(), (lo, hi))])
        never = int(begun.loc[begun["engine"] == name_, "missed_before"].sum()) if len(begun) else 0
        cycles_label = (
            f"cycle end after the driver's start ({name_} engine cycles, exact; {int(missed.sum())} late"
            f"{f', {never} never began' if never else ''}"
            f"{f'; {len(xruns)} xrun reports' if len(xruns) else ''})"
        )
    elif len(lab):
        period = float(lab["period_ns"].iloc[0])
        cycles = pd.DataFrame(
            {"t_ns": lab["start_ns"].to_numpy(), "value_ns": lab["end_rel_ns"].to_numpy(), "missed": lab["missed"]}
        )
        deadline = period
        deadline_label = f"deadline = period {period / 1e6:.3f} ms"
        cycles_label = f"callback end after its cycle began (lab cycles, exact; {int(lab['missed'].sum())} late)"
    else:
        main = main_periodic_thread(profiles)
        if main is not None and not pd.isna(main["period_ns"]):
            period = float(main["period_ns"])
            deadline = period
            deadline_label = f"deadline = period of {main['comm']} {period / 1e6:.3f} ms (from its wake-ups)"
            if not wakeups_timed(period, interval):
                cycles_label = (
                    f"{main['comm']}: no per-wake-up estimate: read every {interval / 1e6:.3g} ms, it woke every "
                    f"{period / 1e6:.3g} ms (a window holds several wake-ups; record with eBPF or a shorter "
                    "--interval)"
                )
            else:
                est = proc_cycles(cap, int(main["tid"]), t_range=t_range)
                est = est[~est["ambiguous"].to_numpy(dtype=bool)]
                busy = (est["delay_ns"] + est["cycle_ns"]).to_numpy(dtype=np.float64)
                cycles = pd.DataFrame({"t_ns": est["start_ns"].to_numpy(), "value_ns": busy, "missed": busy > period})
                cycles_label = (
                    f"{main['comm']}: scheduling delay + CPU per wake-up (estimate from /proc, to one sampling "
                    "interval)"
                )
    mapping, slow = core_type_map(cap.cpus)
    cpus_meta = cap.cpus.get("online") or sorted(set(windows["cpu"].astype(int).tolist()))
    host = cap.host
    trailer = cap.trailer
    timing = "no trailer: achieved timing unknown"
    if trailer is not None:
        parts = [
            f"interval {label} {trailer[key] / 1e6:.2f} ms"
            for key, label in (("interval_p50_ns", "p50"), ("interval_p99_ns", "p99"))
            if trailer.get(key) is not None
        ]
        if trailer.get("missed_ticks") is not None:
            parts.append(f"{trailer['missed_ticks']} missed ticks")
        timing = ", ".join(parts) or "achieved timing not recorded"
    subtitle = (
        f"{host.get('hostname', '?')}, kernel {host.get('kernel_release', '?')}, {len(cpus_meta)} CPUs"
        f"{' (hybrid)' if len(set(mapping.values())) > 1 else ''}; sampled every {interval / 1e6:g} ms ({timing})"
    )
    if cycles_label and cycles.empty:  # no cycle panel is drawn: say why in the header
        subtitle += "\n" + cycles_label
    span_s = (hi - lo) / 1e9
    plural = "s" if len(threads) != 1 else ""
    return TimelineData(
        title=f"{name}: where the time of {len(threads)} thread{plural} went ({span_s:.1f} s)",
        subtitle=subtitle,
        origin_ns=origin,
        t_range=(lo, hi),
        interval_ns=interval,
        bin_ns=bin_ns,
        threads=threads,
        windows=windows,
        stalls=stalls.reset_index(drop=True) if len(stalls) else stalls,
        markers=_in_range(_markers(cap), lo, hi),
        cycles=cycles,
        deadline_ns=deadline,
        deadline_label=deadline_label,
        cycles_label=cycles_label,
        core_types=mapping,
        slow_types=slow,
        cpus=[int(c) for c in cpus_meta],
        xruns=xruns,
        incidents=incidents.reset_index(drop=True),
    )


def _in_range(frame: pd.DataFrame, lo: int, hi: int) -> pd.DataFrame:
    t = frame["t_ns"].to_numpy()
    return frame[(t >= lo) & (t <= hi)].reset_index(drop=True)


def _thread_label(comm: Any, tid: Any, policy: str, period: Any) -> str:
    periodic = "" if pd.isna(period) else f", wakes every {float(period) / 1e6:.2f} ms"
    return f"{comm} (tid {int(tid)}, {policy}{periodic})"


@dataclass
class JitterData:
    title: str
    stats: pd.DataFrame  # analyses.jitter stats
    histogram: pd.DataFrame  # analyses.jitter histogram
    interval_ns: int
    # analyses.jitter.engine_jitter starts and histogram: the driver's cycle starts (empty: no engine cycles)
    engine_stats: pd.DataFrame = field(default_factory=pd.DataFrame)
    engine_histogram: pd.DataFrame = field(default_factory=pd.DataFrame)


def jitter_data(
    cap: Capture,
    name: str,
    *,
    pattern: str | None = None,
    t_range: tuple[int | None, int | None] | None = None,
    tids: tuple[int, ...] = (),
) -> JitterData:
    from analyses.jitter import engine_jitter, jitter
    from analyses.source import capture_interval_ns
    from capture.errors import ForensicsError

    stats, hist = jitter(cap, pattern=pattern, t_range=t_range, tids=tids)
    # The engine's own cycle starts lead (a thread pattern or --tid picks threads: then only those).
    engine_stats, engine_hist = pd.DataFrame(), pd.DataFrame()
    if not (pattern or tids):
        engine_stats, engine_hist, _ = engine_jitter(cap, t_range=t_range)
    has_engine = len(engine_stats) > 0 and len(engine_hist) > 0
    if (stats.empty or hist.empty) and not has_engine:
        hint = "" if pattern or tids else " (try --thread REGEX)"
        raise ForensicsError(f"{name} has no periodic thread whose wake-ups can be timed{hint}: no jitter to plot")
    return JitterData(
        title=f"{name}: intervals between wake-ups",
        stats=stats,
        histogram=hist,
        interval_ns=capture_interval_ns(cap),
        engine_stats=engine_stats if has_engine else pd.DataFrame(),
        engine_histogram=engine_hist if has_engine else pd.DataFrame(),
    )


@dataclass
class CompareData:
    title: str
    figures: pd.DataFrame  # analyses.compare: figure a b unit change_pct
    cycles_a: pd.DataFrame  # lab cycles (end_rel_ns, period_ns) or empty
    cycles_b: pd.DataFrame
    name_a: str
    name_b: str


def compare_data(a: Capture, b: Capture, name_a: str, name_b: str) -> CompareData:
    from analyses.compare import compare
    from analyses.cycles import lab_cycles

    return CompareData(
        title=f"A = {name_a}   against   B = {name_b}",
        figures=compare(a, b),
        cycles_a=lab_cycles(a),
        cycles_b=lab_cycles(b),
        name_a=name_a,
        name_b=name_b,
    )
