"""The engine's own records on Perfetto tracks (see perfetto.py for the format's rules).

An "engine" process of its own (pid ENGINE_PID, above Linux's pid_max like the other synthetic ids):
every xrun the engine reported is an instant on its main track (with the delay and the client it
blamed), and each client has a track with one slice per cycle from its wake-up to its finish (its busy
time as the engine stamped it), named "late" when the client was late in that cycle (the `late` column:
analyses.engine.node_lateness).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from forensics.export.perfetto import SYNTHETIC, _us

ENGINE_PID = SYNTHETIC + 2
CLIENT_TID = SYNTHETIC + 1024  # + node id: one track per engine client


def engine_events(xruns: pd.DataFrame, nodes: pd.DataFrame, origin: int, engine: str) -> list[dict[str, Any]]:
    if xruns.empty and nodes.empty:
        return []
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "ts": 0, "pid": ENGINE_PID, "tid": ENGINE_PID,
         "args": {"name": f"{engine} engine (its own records)"}},
        {"name": "process_sort_index", "ph": "M", "ts": 0, "pid": ENGINE_PID, "tid": ENGINE_PID,
         "args": {"sort_index": -2}},
        {"name": "thread_name", "ph": "M", "ts": 0, "pid": ENGINE_PID, "tid": ENGINE_PID,
         "args": {"name": "xruns"}},
    ]  # fmt: skip
    for row in xruns.itertuples(index=False):
        args = {
            "source": str(row.source),
            "delay_us": None if pd.isna(row.delay_us) else float(row.delay_us),
            "client": None if pd.isna(row.client) else str(row.client),
            "text": None if pd.isna(row.text) else str(row.text),
        }
        name = "xrun" + (f": {row.client} not finished" if args["client"] else "")
        events.append({"name": name, "cat": "engine", "ph": "i", "s": "p", "ts": float(_us(int(row.t_ns), origin)),
                       "pid": ENGINE_PID, "tid": ENGINE_PID, "args": args})  # fmt: skip
    busy = nodes[nodes["awake_ns"].notna() & nodes["finish_ns"].notna()]
    for (node_id, name), group in busy.groupby(["node_id", "name"], sort=True, observed=True):
        tid = CLIENT_TID + int(node_id)
        events.append({"name": "thread_name", "ph": "M", "ts": 0, "pid": ENGINE_PID, "tid": tid,
                       "args": {"name": f"{name} (busy per cycle)"}})  # fmt: skip
        awake = group["awake_ns"].to_numpy(dtype=np.int64)
        finish = group["finish_ns"].to_numpy(dtype=np.int64)
        late = group["late"].fillna(False).to_numpy(dtype=bool)
        # Slices on one track must not overlap: a late finish can pass the next wake-up's stamp.
        ends = np.minimum(finish, np.r_[awake[1:], np.iinfo(np.int64).max])
        for a, e, is_late, f in zip(awake, ends, late, finish, strict=True):
            if e < a:
                continue
            events.append({"name": "late" if is_late else "process", "cat": "engine", "ph": "X",
                           "ts": float(_us(int(a), origin)), "dur": round((e - a) / 1e3, 3), "pid": ENGINE_PID,
                           "tid": tid, "args": {"busy_us": round((f - a) / 1e3, 3)}})  # fmt: skip
    return events
