"""The engine's own view (engine tables of the capture): its cycles, and the xruns it reported.

Per cycle of an engine (JACK, PipeWire):
    end_rel = end - start    the cycle's end is the last node's finish (engine_cycles.end_ns where the
                             engine source filled it, else the latest finish_ns of the cycle's nodes
                             when every one of them has one); start is the driver's cycle start (t_ns)
    missed  = end_rel > period_ns; where the end is unknown, whether a node of the cycle was late
              (node_lateness); unknown (NA) when neither says.
The engine's clock is already the capture's (the sources convert it), so these are plain differences.

Per node and cycle, late (node_lateness): PipeWire says it (engine_nodes.xrun, its own status and xrun
count). jack2 says it in no record: its test (the next cycle started before the client finished,
rules.jack_client_late) is made here from the times the JACK source read (finish, the next signal and
the finish stamp then, the next start: the next row of engine_cycles). Captures recorded before the
source kept those times (no resignal_ns) hold the recorder's own flag in `xrun`: their lateness is
derived from the times too, and the flag is read only where no finish was seen (it was the recorder's
reading of the re-signal, which those files hold nowhere else).

node_lateness(nodes, cycles)      per node row: late (nullable), next_start_ns (the very next cycle start,
                                  NA when the capture does not hold it: a late flag is then not jack2's
                                  test at that start)
engine_cycle_ends(cycles, nodes)  every cycle: t_ns engine period_ns end_rel_ns missed (both nullable)
engine_cycle_summary(...)         per engine: cycles, ends known, end p50/p99/max, misses, unknown misses,
                                  cycles the driver never started (rules.missed_cycles)
engine_period_medians(cycles)     engine -> the median period of its cycles, shortest first: each engine's
                                  own (JACK and PipeWire may run at once, each at its period)
cycle_starts(cycles)              every recorded cycle start: its number (the engine's counter, else
                                  counted on the driver's clock) and the cycles due before it that never
                                  started
engine_cycles(cap)                the cycles of a capture whose end or lateness is known, with end_ns
engine_xruns(cap)                 one row per xrun the engine reported: its reports merged (jack2 notifies
                                  once for the driver's late wake-up and once per client not finished;
                                  PipeWire once per unfinished cycle: rules.same_xrun), the clients it
                                  blamed (jack2's "was not finished" log lines, PipeWire's unfinished
                                  nodes), the largest delay it reported
distinct_xrun_times(cap)          the time of each xrun (its first report)
xrun_figures(cap, t_range, engine)  what an engine reported (every engine that recorded, without
                                  `engine`): reports (rows), xruns (engine_xruns), their span and rate,
                                  the largest delay it reported, the clients it named
engine_overview(cap)              the engine, its version and settings, its cycle ends and xruns: what
                                  the report's engine section shows

A cycle's end is the engine's (the last client's finish), never inferred from thread data.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from analyses.rules import (
    CYCLE_GRID_TOLERANCE,
    SERVER_LOG_LAG_NS,
    SERVER_LOG_LEAD_NS,
    XRUN_REPORT_GAP_PERIODS,
    ended_late,
    jack_client_late,
    missed_cycles,
    next_start_seen,
    overrun_goes_on,
    same_xrun,
)
from analyses.span import in_span
from capture.format import Capture

HOUR_NS = 3_600_000_000_000
CYCLE_COLUMNS = ["t_ns", "engine", "period_ns", "end_rel_ns", "missed"]
SUMMARY_COLUMNS = [
    "engine",
    "period_ns",
    "cycles",
    "cycles_with_end",
    "end_p50_ns",
    "end_p99_ns",
    "end_max_ns",
    "deadline_misses",
    "misses_unknown",
    "span_ns",
]


def node_lateness(nodes: pd.DataFrame, cycles: pd.DataFrame) -> pd.DataFrame:
    """Per row of `nodes` (same index): late (boolean, NA unknown) and next_start_ns (Int64: the cycle's
    very next start, NA where the capture does not hold it)."""
    recorded = (
        nodes["xrun"].astype("boolean") if "xrun" in nodes else pd.Series(pd.NA, index=nodes.index, dtype="boolean")
    )
    if nodes.empty:
        return pd.DataFrame({"late": recorded, "next_start_ns": pd.Series(dtype="Int64", index=nodes.index)})
    engine = nodes["engine"].astype(str).to_numpy()
    # The next start of each cycle among the cycles of its engine that the capture holds.
    starts = cycles[["t_ns", "period_ns"]].assign(engine=cycles["engine"].astype(str))
    starts = starts.drop_duplicates(["engine", "t_ns"]).sort_values(["engine", "t_ns"], kind="stable")
    starts["following_ns"] = starts.groupby("engine", sort=False)["t_ns"].shift(-1)
    at = starts.set_index(["engine", "t_ns"]).reindex(pd.MultiIndex.from_arrays([engine, nodes["t_ns"].to_numpy()]))

    def ns(frame: pd.DataFrame, column: str) -> np.ndarray:
        if column not in frame:  # a capture from before the source recorded it
            return np.full(len(frame), np.nan)
        return pd.to_numeric(frame[column], errors="coerce").astype("Float64").to_numpy(np.float64, na_value=np.nan)

    following = ns(at, "following_ns")
    very_next = next_start_seen(nodes["t_ns"].to_numpy(np.float64), following, ns(at, "period_ns"))
    awake, finish = ns(nodes, "awake_ns"), ns(nodes, "finish_ns")
    late, known = jack_client_late(
        np.where(np.isnan(awake), ns(nodes, "signal_ns"), awake),
        finish,
        ns(nodes, "resignal_ns"),
        ns(nodes, "finish_at_resignal_ns"),
        following,
        very_next,
    )
    derived = pd.Series(late, index=nodes.index, dtype="boolean").where(known)
    # An older JACK capture's own flag, where no finish was seen: its reading of the re-signal.
    derived = derived.fillna(recorded.where(np.isnan(finish)))
    return pd.DataFrame(
        {
            "late": derived.where(engine == "jack", recorded),
            "next_start_ns": pd.Series(following, index=nodes.index).where(very_next).astype("Int64"),
        }
    )


def engine_cycle_ends(cycles: pd.DataFrame, nodes: pd.DataFrame) -> pd.DataFrame:
    """One row per engine cycle: t_ns, engine, period_ns, end_rel_ns (nullable), missed (nullable)."""
    if cycles.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in CYCLE_COLUMNS})
    out = cycles[["t_ns", "engine", "period_ns", "end_ns"]].copy()
    out["engine"] = out["engine"].astype(str)
    out["end_ns"] = pd.to_numeric(out["end_ns"]).astype("Int64")
    if not nodes.empty:
        late = node_lateness(nodes, cycles)["late"].astype("boolean")
        per_cycle = nodes.assign(
            engine=nodes["engine"].astype(str), late_true=late.fillna(False), late_known=late.notna()
        ).groupby(["engine", "t_ns"])
        # The last finish ends the cycle only when every node of it finished: a node never seen finishing
        # (a client signaled and never woken, observed: jalv starved or stuck through a whole recording)
        # leaves the end unknown, not the other nodes' last finish (early: an on-time cycle the engine
        # reported as an xrun). Its lateness then comes from the nodes' flags.
        complete = per_cycle["finish_ns"].count() == per_cycle.size()
        last = per_cycle["finish_ns"].max().where(complete).rename("last_finish_ns")
        # True if any node was counted late, False if all were counted on time, else NA (a node whose
        # lateness is unknown may have been the late one). Aggregated, not applied per cycle: a Python
        # call per cycle was half of `compare`'s time (12.8 of 25 s on two 25 s JACK captures).
        any_late = per_cycle["late_true"].any()
        late = pd.Series(pd.NA, index=any_late.index, dtype="boolean").rename("node_late")
        late[per_cycle["late_known"].all().to_numpy()] = False
        late[any_late.to_numpy()] = True
        out = out.join(last, on=["engine", "t_ns"]).join(late, on=["engine", "t_ns"])
        out["end_ns"] = out["end_ns"].fillna(pd.to_numeric(out["last_finish_ns"]).astype("Int64"))
    else:
        out["node_late"] = pd.NA
    out["end_rel_ns"] = (out["end_ns"] - out["t_ns"]).astype("Int64")
    by_end = ended_late(out["end_rel_ns"], out["period_ns"])
    out["missed"] = by_end.astype("boolean").where(out["end_rel_ns"].notna(), out["node_late"].astype("boolean"))
    return out[CYCLE_COLUMNS].reset_index(drop=True)


def engine_period_medians(cycles: pd.DataFrame) -> pd.Series:
    """engine -> the median period_ns of its cycles (finite and positive only), shortest first (a tie by
    name). JACK and PipeWire can be recorded together at different periods: one median over both
    engines' cycles is the period of whichever recorded more rows (JACK's poller sees only some of its
    cycles), and the other engine's cycles would be judged against it. The one rule of an engine's period
    from its cycles: the threads' engine periods (analyses.threads.engine_periods), `forensics system`'s
    engine figures, the xruns' report gap and the incidents' cycles take it from here."""
    if cycles.empty:
        return pd.Series(dtype=np.float64)
    # float64: a period the source left unknown (NA) is NaN, left out of the median.
    period = pd.to_numeric(cycles["period_ns"], errors="coerce").astype(np.float64)
    engine = cycles["engine"].astype(str)
    # Series.median per engine: the value a median over a one-engine capture's cycles always was.
    medians = {str(e): float(period[(engine == e).to_numpy()].median()) for e in sorted(set(engine))}
    out = pd.Series(medians, dtype=np.float64)
    out = out[np.isfinite(out.to_numpy()) & (out.to_numpy() > 0)]
    order = sorted(out.index, key=lambda e: (out[e], e))
    return out.reindex(order)


def cycle_starts(cycles: pd.DataFrame) -> pd.DataFrame:
    """One row per recorded cycle start (engine_cycles), by engine and time: t_ns engine period_ns, cycle
    (the engine's own counter, else counted from the engine's first recorded cycle on the driver's clock:
    jack2 exposes none), counted (whether `cycle` is ours), missed_before (cycles due since the previous
    recorded start that never started: rules.missed_cycles), late_ns (how much later than the previous
    start plus the periods run since it this one began; NaN for the first)."""
    columns = ["t_ns", "engine", "period_ns", "cycle", "counted", "missed_before", "late_ns"]
    if cycles.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
    out = []
    for engine, group in cycles.assign(engine=cycles["engine"].astype(str)).groupby("engine", sort=True):
        group = group.sort_values("t_ns", kind="stable")
        t = group["t_ns"].to_numpy(np.int64)
        period = pd.to_numeric(group["period_ns"], errors="coerce").to_numpy(np.float64)
        gap = np.diff(t).astype(np.float64)
        missed = np.r_[0, missed_cycles(gap, period[1:])] if len(t) else np.zeros(0, np.int64)
        # Cycles run between two recorded starts: k on the driver's grid of whole periods (the record
        # missed k - 1), else one (the driver's late start, after the cycles it never started).
        ratio = gap / period[1:]
        on_grid = np.abs(ratio - np.round(ratio)) <= CYCLE_GRID_TOLERANCE
        ran = np.where(on_grid & np.isfinite(ratio), np.maximum(np.round(np.nan_to_num(ratio)), 1), 1)
        late = np.r_[np.nan, np.maximum(gap - ran * period[1:], 0.0)] if len(t) else np.zeros(0)
        own = group["cycle"] if "cycle" in group else pd.Series(np.nan, index=group.index)
        counter = pd.to_numeric(own, errors="coerce").to_numpy(np.float64)
        counted = bool(np.isnan(counter).any())
        if counted:
            counter = np.r_[0.0, np.cumsum(ran)] if len(t) else counter
        out.append(
            pd.DataFrame(
                {
                    "t_ns": t,
                    "engine": str(engine),
                    "period_ns": period,
                    "cycle": counter.astype(np.int64),
                    "counted": counted,
                    "missed_before": missed,
                    "late_ns": late,
                }
            )
        )
    return pd.concat(out, ignore_index=True)[columns]


def engine_cycle_summary(cycles: pd.DataFrame, nodes: pd.DataFrame) -> pd.DataFrame:
    """Per engine: cycles, cycles with a known end, end p50/p99/max (ns), deadline misses, cycles whose
    miss is unknown, and the span of the cycles (ns, for rates)."""
    ends = engine_cycle_ends(cycles, nodes)
    periods = engine_period_medians(ends) if len(ends) else pd.Series(dtype=np.float64)
    rows = []
    for engine, group in ends.groupby("engine", sort=True):
        known = group["end_rel_ns"].dropna().to_numpy(dtype=np.int64)
        rows.append(
            {
                "engine": engine,
                "period_ns": float(periods.get(str(engine), np.nan)),  # the one rule of an engine's period
                "cycles": len(group),
                "cycles_with_end": len(known),
                "end_p50_ns": float(np.percentile(known, 50)) if len(known) else np.nan,
                "end_p99_ns": float(np.percentile(known, 99)) if len(known) else np.nan,
                "end_max_ns": float(known.max()) if len(known) else np.nan,
                "deadline_misses": int(group["missed"].sum(skipna=True)),
                "misses_unknown": int(group["missed"].isna().sum()),
                "span_ns": int(group["t_ns"].max() - group["t_ns"].min()),
            }
        )
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def engine_cycles(cap: Capture, t_range: tuple[int | None, int | None] | None = None) -> pd.DataFrame:
    """The cycles whose end or lateness is known: t_ns end_ns period_ns end_rel_ns missed engine
    (end_ns and end_rel_ns are NA where only the engine's late flag is known)."""
    ends = engine_cycle_ends(cap.engine_cycles, cap.engine_nodes)
    columns = ["t_ns", "end_ns", "period_ns", "end_rel_ns", "missed", "engine"]
    if ends.empty:
        return pd.DataFrame(columns=columns)
    ends = ends[in_span(ends["t_ns"].to_numpy(), t_range) & ends["missed"].notna().to_numpy()].copy()
    ends["end_ns"] = (ends["t_ns"] + ends["end_rel_ns"]).astype("Int64")
    return ends[columns].reset_index(drop=True)


def cycle_observation(cap: Capture) -> tuple[int, int]:
    """(cycles observed, cycles with an end): how much of the engine's timing the source saw."""
    cycles = cap.table("engine_cycles", ["t_ns", "end_ns"])
    return len(cycles), int(cycles["end_ns"].notna().sum())


XRUN_COLUMNS = ["t_ns", "end_ns", "engine", "reports", "client", "delay_us", "source"]
# How far _xruns_of widens its bisection bounds beyond the join's own (ns): more than a float sum of a
# capture time and a lead can round off.
_BISECT_MARGIN_NS = 1_000_000
NODE_STATUS = re.compile(r"(?:^|: |; )([^;:]+?) \(node \d+\) (triggered|awake|not-triggered|inactive)")


def engine_xruns(cap: Capture, t_range: tuple[int | None, int | None] | None = None) -> pd.DataFrame:
    """One row per xrun the engine reported (XRUN_COLUMNS): its first and last report (t_ns, end_ns), how
    many reports were merged into it, the clients the engine blamed in them (None: it named none), the
    largest delay it reported, and where the reports came from ("callback", "server-log", "profiler").

    Reports of one engine a short gap apart are one xrun (rules.same_xrun). The server log's lines are
    read late from a followed file: where the engine's own count (callbacks, the profiler) is recorded,
    each log line joins the latest xrun whose reports began before it (within rules.SERVER_LOG_LAG_NS of
    its last report), else the first that begins within rules.SERVER_LOG_LEAD_NS after it, and only adds
    whom the engine blamed; a line that joins none is an xrun of its own."""
    if "xruns" not in cap.table_names:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in XRUN_COLUMNS})
    reports = cap.table("xruns")
    reports = reports[in_span(reports["t_ns"].to_numpy(), t_range)]
    # The engine tables read once, then split per engine.
    status = cap.table("engine_status", ["engine", "quantum_frames", "rate_hz"]).dropna()
    cycles = cap.table("engine_cycles", ["t_ns", "engine", "period_ns", "end_ns"])
    status_engine, cycle_engine = status["engine"].astype(str).to_numpy(), cycles["engine"].astype(str).to_numpy()
    medians = engine_period_medians(cycles[["engine", "period_ns"]])  # where an engine's status gives no period
    rows: list[dict[str, Any]] = []
    for engine, mine in reports.groupby(reports["engine"].astype(str), sort=True):
        engine = str(engine)
        period_ns = _period_ns(status[status_engine == engine], float(medians.get(engine, np.nan)))
        rows += _xruns_of(
            mine.sort_values("t_ns", kind="stable"), engine, period_ns, _cycles_of(cycles[cycle_engine == engine])
        )
    out = pd.DataFrame(rows, columns=XRUN_COLUMNS).sort_values("t_ns", kind="stable").reset_index(drop=True)
    # None where it named none (pandas 3 would infer a string column holding NaN).
    out["client"] = pd.Series([c if isinstance(c, str) else None for c in out["client"]], dtype=object)
    return out


def _period_ns(status: pd.DataFrame, median_ns: float) -> float:
    """An engine's period: its last status (`status`: its engine_status rows with a quantum and a rate),
    else `median_ns`, the median of its cycles' periods (engine_period_medians)."""
    if len(status) and status["rate_hz"].iloc[-1]:
        return float(1e9 * status["quantum_frames"].iloc[-1] / status["rate_hz"].iloc[-1])
    return median_ns


def _cycles_of(cycles: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An engine's recorded cycles (`cycles`: its engine_cycles rows), by start: every start, and the
    starts and ends of those that ended within their period."""
    cycles = cycles.sort_values("t_ns", kind="stable")
    t = cycles["t_ns"].to_numpy(np.int64)
    end = pd.to_numeric(cycles["end_ns"], errors="coerce").to_numpy(np.float64)
    period = pd.to_numeric(cycles["period_ns"], errors="coerce").to_numpy(np.float64)
    on_time = np.isfinite(end) & np.isfinite(period) & ~ended_late(end - t, period)
    return t, t[on_time], end[on_time]


def _xruns_of(
    reports: pd.DataFrame,
    engine: str,
    period_ns: float,
    cycles: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> list[dict[str, Any]]:
    """engine_xruns' rows of one engine's reports (sorted by time); `cycles`: _cycles_of the engine."""
    log = (reports["source"].astype(str) == "server-log").to_numpy()
    counted = np.flatnonzero(~log) if (~log).any() else np.arange(len(reports))
    late_lines = np.flatnonzero(log) if (~log).any() else np.zeros(0, np.int64)
    t_all = reports["t_ns"].to_numpy(np.int64)
    t = t_all[counted]
    same = same_xrun(np.diff(t), period_ns)
    if cycles is not None and len(t) > 1 and not same.all():
        starts, ok_starts, ok_ends = cycles
        between = np.searchsorted(starts, t[1:]) - np.searchsorted(starts, t[:-1], side="right")
        # A recovery between two reports: a cycle begun after the first that ended on time before the second.
        lo = np.searchsorted(ok_starts, t[:-1], side="right")
        hi = np.searchsorted(ok_starts, t[1:])
        recovered = np.array([int((ok_ends[a:b] <= t2).sum()) for a, b, t2 in zip(lo, hi, t[1:], strict=True)])
        same |= overrun_goes_on(between, recovered)
    group = np.cumsum(np.r_[True, ~same]) - 1 if len(t) else np.zeros(0, np.int64)
    # Each xrun as the positions of its reports in `reports`, in the order they joined it; its first and
    # last report's times kept beside it (plain ints: a pandas lookup per part and per line was quadratic).
    members: list[list[int]] = [[] for _ in range(int(group.max()) + 1 if len(group) else 0)]
    for position, g in zip(counted.tolist(), group.tolist(), strict=True):
        members[g].append(position)
    first_t = [int(t_all[m[0]]) for m in members]
    last_t = [int(t_all[m[-1]]) for m in members]
    # A log line joins the latest xrun that began before it (or within a report gap after it: a pipe is
    # read at once, a callback arrives through libjack's notification thread) and ended at most
    # SERVER_LOG_LAG_NS before it.
    lead_ns = XRUN_REPORT_GAP_PERIODS * period_ns if np.isfinite(period_ns) else 0.0
    # Which xruns a line can join, by bisection on the counted xruns' first and last times (runs of sorted
    # reports: both ascending), not by a scan of every xrun per line. A line only moves the times of the
    # xrun it joins or begins, to its own time, and lines come in time order: such an xrun has begun by
    # the next line (it joins no later one as "ahead") and can fit a later line only while its last time
    # is within SERVER_LOG_LAG_NS of it, so it is kept among the candidates (`moved`) until then. The
    # bounds are widened by a margin (the float sum of a time and lead_ns rounds) and the candidates tested
    # as written, in order: the bisection only leaves out xruns that cannot fit.
    first0, last0 = np.array(first_t, np.int64), np.array(last_t, np.int64)
    reach_ns = int(np.ceil(lead_ns)) + _BISECT_MARGIN_NS
    moved: list[int] = []
    for position in late_lines.tolist():
        at = int(t_all[position])
        moved = [k for k in moved if at <= last_t[k] + SERVER_LOG_LAG_NS]
        lo = int(np.searchsorted(last0, at - SERVER_LOG_LAG_NS - _BISECT_MARGIN_NS))
        hi = int(np.searchsorted(first0, at + reach_ns, side="right"))
        candidates = sorted(set(range(lo, hi)).union(moved))
        fits = [k for k in candidates if first_t[k] <= at + lead_ns and at <= last_t[k] + SERVER_LOG_LAG_NS]
        # Else the first xrun that begins within SERVER_LOG_LEAD_NS after it: its callbacks were held up.
        a = int(np.searchsorted(first0, at, side="right"))
        b = int(np.searchsorted(first0, at + SERVER_LOG_LEAD_NS, side="right"))
        ahead = [k for k in range(a, b) if at < first_t[k] <= at + SERVER_LOG_LEAD_NS]
        if fits or ahead:
            k = max(fits, key=lambda k: first_t[k]) if fits else min(ahead, key=lambda k: first_t[k])
            members[k].append(position)
            first_t[k], last_t[k] = min(first_t[k], at), max(last_t[k], at)
        else:
            k = len(members)
            members.append([position])
            first_t.append(at)
            last_t.append(at)
        if k not in moved:
            moved.append(k)
    parts = [reports.iloc[m] for m in members]
    rows = []
    for part in parts:
        blamed = [str(c) for c in part["client"].tolist() if c is not None and not pd.isna(c)]
        # PipeWire's profiler rows say each unfinished node's status (samplers/engine/pipewire.py: "NAME
        # (node ID) awake" running late, "triggered" woken late): the status in the xrun's first report
        # that names it, beside the name.
        states: dict[str, str] = {}
        for text in part["text"].tolist() if "text" in part else []:
            for name, state in NODE_STATUS.findall(text) if isinstance(text, str) else []:
                if name in blamed:
                    states.setdefault(name, state)
        blamed = [f"{n} ({states[n]})" if n in states else n for n in dict.fromkeys(blamed)]
        delays = pd.to_numeric(part["delay_us"], errors="coerce").dropna()
        rows.append(
            {
                "t_ns": int(part["t_ns"].min()),
                "end_ns": int(part["t_ns"].max()),
                "engine": engine,
                "reports": len(part),
                "client": ", ".join(dict.fromkeys(blamed)) or None,  # in the order blamed, each once
                "delay_us": float(delays.max()) if len(delays) else float("nan"),
                "source": ", ".join(sorted(set(part["source"].astype(str)))),
            }
        )
    return rows


def xrun_figures(
    cap: Capture, t_range: tuple[int | None, int | None] | None = None, engine: str | None = None
) -> dict[str, Any] | None:
    """None when no engine source recorded (or `engine`'s did not: it could not run, or the capture has
    none); else the figures above, of `engine`'s reports alone, or of every engine's that recorded (each
    engine's reports counted as it counts them: rates NaN when the span is 0)."""
    recorded = {kind: meta for kind, meta in cap.engine_sources.items() if not meta.get("unavailable")}
    if engine is not None:
        recorded = {kind: meta for kind, meta in recorded.items() if kind == engine}
    if not recorded:
        return None
    xruns = cap.table("xruns")
    xruns = xruns[in_span(xruns["t_ns"].to_numpy(), t_range)]
    status = cap.table("engine_status", ["t_ns", "engine", "quantum_frames", "rate_hz"])
    status = status[in_span(status["t_ns"].to_numpy(), t_range)]
    distinct = engine_xruns(cap, t_range)
    if engine is not None:
        xruns = xruns[(xruns["engine"].astype(str) == engine).to_numpy()]
        status = status[(status["engine"].astype(str) == engine).to_numpy()]
        distinct = distinct[(distinct["engine"].astype(str) == engine).to_numpy()]
    span_ns = float(status["t_ns"].max() - status["t_ns"].min()) if len(status) > 1 else float("nan")
    counted = _counted(xruns)
    delays = xruns["delay_us"].dropna()
    blamed = xruns["client"].dropna()
    return {
        "engine": ", ".join(sorted(str(meta.get("kind", "?")) for meta in recorded.values())),
        "reports": len(counted),
        "xruns": len(distinct),
        "span_ns": span_ns,
        "per_hour": len(distinct) * HOUR_NS / span_ns if span_ns and not np.isnan(span_ns) else float("nan"),
        "delay_max_us": float(delays.max()) if len(delays) else float("nan"),
        "blamed": blamed.value_counts().to_dict(),
        "counted_from": ", ".join(sorted(set(counted["source"].astype(str)))) or "none reported",
    }


def _counted(xruns: pd.DataFrame) -> pd.DataFrame:
    """Each engine's callbacks are its count; log lines (when present) add who it blamed. Per engine: JACK's
    callbacks beside PipeWire's profiler reports leave PipeWire's counted."""
    if xruns.empty:
        return xruns
    callback = xruns["source"].astype(str) == "callback"
    has_callback = callback.groupby(xruns["engine"].astype(str)).transform("any").astype(bool)
    return xruns[(callback | ~has_callback).to_numpy()]


def distinct_xrun_times(cap: Capture) -> np.ndarray:
    """The first report of each xrun the engine reported (engine_xruns)."""
    return engine_xruns(cap)["t_ns"].to_numpy(dtype=np.int64)


def engine_overview(cap: Capture, t_range: tuple[int | None, int | None] | None = None) -> dict[str, Any] | None:
    """None when the capture has no engine source and no engine cycles; else, per the engine source: engine,
    version, quantum_frames, rate_hz, period_ns (that engine's median period), periods_ns (each engine's
    median period in the span, engine_period_medians: JACK and PipeWire may run at once, each at its
    own), cycles (observed in the span), cycles_with_end, end
    p50/p99/max (ns), deadline_misses, misses_unknown, and the xrun figures (xrun_figures, None when the
    source did not record xruns). A figure the capture does not hold is None (shown as unknown)."""
    engine = cap.sources.get("engine")
    cycles = cap.engine_cycles
    if not isinstance(engine, dict) and cycles.empty:
        return None
    meta = engine if isinstance(engine, dict) else {}
    cycles = cycles[in_span(cycles["t_ns"].to_numpy(), t_range)]
    summary = engine_cycle_summary(cycles, cap.engine_nodes)
    if len(summary) > 1:  # JACK through PipeWire: the engine with the most cycles
        summary = summary.sort_values("cycles", ascending=False, kind="stable")
    row = summary.iloc[0] if len(summary) else None
    status = cap.table("engine_status", ["t_ns", "quantum_frames", "rate_hz"])
    status = status[in_span(status["t_ns"].to_numpy(), t_range)]
    # The quantum and rate in effect: the last status the source recorded, else the last cycle's.
    settings = status if len(status) else cycles
    quantum = settings["quantum_frames"].dropna() if "quantum_frames" in settings else pd.Series(dtype=float)
    rate = settings["rate_hz"].dropna() if "rate_hz" in settings else pd.Series(dtype=float)
    periods = engine_period_medians(cycles)
    own = str(row["engine"]) if row is not None else None

    def known(key: str) -> float | None:
        return None if row is None or pd.isna(row[key]) else float(row[key])

    return {
        "engine": str(row["engine"]) if row is not None else str(meta.get("kind") or "unknown"),
        "version": meta.get("version") or None,
        "unavailable": meta.get("unavailable") or None,
        "quantum_frames": int(quantum.iloc[-1]) if len(quantum) else None,
        "rate_hz": int(rate.iloc[-1]) if len(rate) else None,
        "period_ns": float(periods[own]) if own in periods.index else None,
        "periods_ns": {str(engine): float(period) for engine, period in periods.items()},
        "cycles": int(row["cycles"]) if row is not None else 0,
        "cycles_with_end": int(row["cycles_with_end"]) if row is not None else 0,
        "end_p50_ns": known("end_p50_ns"),
        "end_p99_ns": known("end_p99_ns"),
        "end_max_ns": known("end_max_ns"),
        "deadline_misses": int(row["deadline_misses"]) if row is not None else None,
        "misses_unknown": int(row["misses_unknown"]) if row is not None else None,
        "xruns": xrun_figures(cap, t_range),
    }
