"""Cycle ends and deadline misses from the engine's own records (engine_cycles, engine_nodes tables).

Per cycle of an engine (JACK, PipeWire):
    end_rel = end - start    the cycle's end is the last node's finish (engine_cycles.end_ns where the
                             engine source filled it, else the latest finish_ns of the cycle's nodes);
                             start is the driver's cycle start (t_ns)
    missed  = end_rel > period_ns; where the end is unknown, whether the engine counted a node of the
              cycle as late (engine_nodes.xrun); unknown (NA) when neither says.
The engine's clock is already the capture's (the sources convert it), so these are plain differences.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

CYCLE_COLUMNS = ["t_ns", "engine", "period_ns", "end_rel_ns", "missed"]
SUMMARY_COLUMNS = [
    "engine",
    "cycles",
    "cycles_with_end",
    "end_p50_ns",
    "end_p99_ns",
    "end_max_ns",
    "deadline_misses",
    "misses_unknown",
    "span_ns",
]


def engine_cycle_ends(cycles: pd.DataFrame, nodes: pd.DataFrame) -> pd.DataFrame:
    """One row per engine cycle: t_ns, engine, period_ns, end_rel_ns (nullable), missed (nullable)."""
    if cycles.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in CYCLE_COLUMNS})
    out = cycles[["t_ns", "engine", "period_ns", "end_ns"]].copy()
    out["engine"] = out["engine"].astype(str)
    out["end_ns"] = pd.to_numeric(out["end_ns"]).astype("Int64")
    if not nodes.empty:
        per_cycle = nodes.assign(engine=nodes["engine"].astype(str)).groupby(["engine", "t_ns"])
        last = per_cycle["finish_ns"].max().rename("last_finish_ns")
        late = per_cycle["xrun"].apply(_any_known).astype("boolean").rename("node_late")
        out = out.join(last, on=["engine", "t_ns"]).join(late, on=["engine", "t_ns"])
        out["end_ns"] = out["end_ns"].fillna(pd.to_numeric(out["last_finish_ns"]).astype("Int64"))
    else:
        out["node_late"] = pd.NA
    out["end_rel_ns"] = (out["end_ns"] - out["t_ns"]).astype("Int64")
    by_end = out["end_rel_ns"] > out["period_ns"]
    out["missed"] = by_end.astype("boolean").where(out["end_rel_ns"].notna(), out["node_late"].astype("boolean"))
    return out[CYCLE_COLUMNS].reset_index(drop=True)


def _any_known(flags: pd.Series) -> object:
    """True if any node was counted late, False if all were counted on time, NA if none was counted."""
    known = flags.dropna()
    return pd.NA if known.empty else bool(known.astype(bool).any())


def engine_cycle_summary(cycles: pd.DataFrame, nodes: pd.DataFrame) -> pd.DataFrame:
    """Per engine: cycles, cycles with a known end, end p50/p99/max (ns), deadline misses, cycles whose
    miss is unknown, and the span of the cycles (ns, for rates)."""
    ends = engine_cycle_ends(cycles, nodes)
    rows = []
    for engine, group in ends.groupby("engine", sort=True):
        known = group["end_rel_ns"].dropna().to_numpy(dtype=np.int64)
        rows.append(
            {
                "engine": engine,
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
