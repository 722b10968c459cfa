"""The engine's own view (engine tables of the capture): its cycles, and the xruns it reported.

engine_cycles(cap)  one row per observed cycle with an end: t_ns, end_ns, period_ns, end_rel_ns (end - start),
                    missed (the cycle ended after the next one was due: end_rel_ns > period_ns)
xrun_figures(cap)   what the engine reported: reports (rows), xruns (reports less than one period apart
                    are one xrun: jack2 notifies once for the driver's late wake-up and once per client
                    not finished), their span and rate, the largest delay it reported, the clients it named

A cycle's end is the engine's (the last client's finish), never inferred from thread data.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from capture.format import Capture

HOUR_NS = 3_600_000_000_000


def engine_cycles(cap: Capture, t_range: tuple[int | None, int | None] | None = None) -> pd.DataFrame:
    cycles = cap.table("engine_cycles")
    if cycles.empty:
        return pd.DataFrame(columns=["t_ns", "end_ns", "period_ns", "end_rel_ns", "missed", "engine"])
    cycles = cycles[cycles["end_ns"].notna() & cycles["period_ns"].notna()].copy()
    if t_range is not None:
        lo, hi = t_range
        if lo is not None:
            cycles = cycles[cycles["t_ns"] >= lo]
        if hi is not None:
            cycles = cycles[cycles["t_ns"] <= hi]
    cycles["end_ns"] = cycles["end_ns"].astype("int64")
    cycles["end_rel_ns"] = cycles["end_ns"] - cycles["t_ns"]
    cycles["missed"] = cycles["end_rel_ns"] > cycles["period_ns"].astype("int64")
    return cycles[["t_ns", "end_ns", "period_ns", "end_rel_ns", "missed", "engine"]].reset_index(drop=True)


def cycle_observation(cap: Capture) -> tuple[int, int]:
    """(cycles observed, cycles with an end): how much of the engine's timing the source saw."""
    cycles = cap.table("engine_cycles", ["t_ns", "end_ns"])
    return len(cycles), int(cycles["end_ns"].notna().sum())


def xrun_figures(cap: Capture, t_range: tuple[int | None, int | None] | None = None) -> dict[str, Any] | None:
    """None when the capture has no engine source; else the figures above (rates NaN when the span is 0)."""
    sources = cap.meta.get("sources", {})
    engine = sources.get("engine") if isinstance(sources, dict) else None
    if not engine or engine.get("unavailable"):
        return None
    xruns = cap.table("xruns")
    status = cap.table("engine_status", ["t_ns", "quantum_frames", "rate_hz"])
    if t_range is not None:
        lo, hi = t_range
        for name in ("xruns", "status"):
            frame = xruns if name == "xruns" else status
            keep = np.ones(len(frame), dtype=bool)
            if lo is not None:
                keep &= frame["t_ns"].to_numpy() >= lo
            if hi is not None:
                keep &= frame["t_ns"].to_numpy() <= hi
            if name == "xruns":
                xruns = frame[keep]
            else:
                status = frame[keep]
    span_ns = float(status["t_ns"].max() - status["t_ns"].min()) if len(status) > 1 else float("nan")
    period_ns = (
        float(1e9 * status["quantum_frames"].iloc[-1] / status["rate_hz"].iloc[-1]) if len(status) else float("nan")
    )
    # The callback is the engine's count; log lines (when present) add who it blamed.
    counted = xruns[xruns["source"] == "callback"] if (xruns["source"] == "callback").any() else xruns
    times = np.sort(counted["t_ns"].to_numpy(dtype="int64"))
    gap = period_ns if not np.isnan(period_ns) else 0.0
    distinct = int(len(times) and 1 + (np.diff(times) > gap).sum())
    delays = xruns["delay_us"].dropna()
    blamed = xruns["client"].dropna()
    return {
        "engine": engine.get("kind", "?"),
        "reports": len(counted),
        "xruns": distinct,
        "span_ns": span_ns,
        "per_hour": distinct * HOUR_NS / span_ns if span_ns and not np.isnan(span_ns) else float("nan"),
        "delay_max_us": float(delays.max()) if len(delays) else float("nan"),
        "blamed": blamed.value_counts().to_dict(),
        "counted_from": ", ".join(sorted(set(counted["source"].astype(str)))) or "none reported",
    }
