"""Read tiers in a capture (README, "Read tiers"): when each thread was read how often, and what that hides.

The recorder reads a thread on the slow tier once per slow interval (20 ms by default) until it runs. A
window of such a thread spans the whole slow interval (windows go from one read of the thread to its next,
analyses/windows.py), so what it did inside is one figure, and an episode that begins on it is known to
start somewhere in that window. The `tiers` table says when; the analyses say so rather than guess.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from capture.format import Capture

SLOW = "slow"


def slow_spans(
    cap: Capture, tids: Iterable[int] | None = None, t_range: tuple[int | None, int | None] | None = None
) -> pd.DataFrame:
    """tid start_ns end_ns interval_ns: the spans each thread spent on the slow tier (clipped to t_range)."""
    columns = ["tid", "start_ns", "end_ns", "interval_ns"]
    if "tiers" not in cap.table_names:
        return pd.DataFrame(columns=columns)
    tiers = cap.table("tiers").sort_values(["tid", "t_ns"], kind="stable")
    if tids is not None:
        tiers = tiers[tiers["tid"].isin(list(tids))]
    if tiers.empty:
        return pd.DataFrame(columns=columns)
    end_of_capture = int((cap.trailer or {}).get("ended_ns") or tiers["t_ns"].max())
    tid = tiers["tid"].to_numpy()
    start = tiers["t_ns"].to_numpy(dtype=np.int64)
    last = np.r_[tid[1:] != tid[:-1], True]
    end = np.where(last, end_of_capture, np.r_[start[1:], 0])
    spans = pd.DataFrame({"tid": tid, "start_ns": start, "end_ns": end, "interval_ns": tiers["interval_ns"].to_numpy()})
    spans = spans[(tiers["tier"].astype(str) == SLOW).to_numpy()]
    if t_range is not None:
        lo = np.iinfo(np.int64).min if t_range[0] is None else t_range[0]
        hi = np.iinfo(np.int64).max if t_range[1] is None else t_range[1]
        spans = spans.assign(start_ns=spans["start_ns"].clip(lower=lo), end_ns=spans["end_ns"].clip(upper=hi))
    return spans[spans["end_ns"] > spans["start_ns"]].reset_index(drop=True)


def slow_tier_undecided(
    cap: Capture, tids: Iterable[int], t_range: tuple[int | None, int | None] | None = None
) -> list[str]:
    """One line for the analyses' "undecided" list when watched threads spent time on the slow tier."""
    spans = slow_spans(cap, tids, t_range)
    if spans.empty:
        return []
    slow_ms = int(spans["interval_ns"].max()) / 1e6
    total_s = float((spans["end_ns"] - spans["start_ns"]).sum()) / 1e9
    return [
        f"what {spans['tid'].nunique()} watched thread(s) did inside a {slow_ms:g} ms window while on the slow read "
        f"tier ({total_s:.1f} thread-seconds, read once per {slow_ms:g} ms until they ran): an episode that began "
        f"there is known to start within that window (--fast REGEX keeps a thread on the 2 ms tier)"
    ]
