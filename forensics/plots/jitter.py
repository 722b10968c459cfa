"""The jitter picture: the engine's own cycle starts first (where the capture has engine cycles: the spacing
of the driver's starts, analyses.jitter.engine_jitter), then per periodic thread the histogram of intervals
between wake-ups.

A peak at 2x, 3x, 4x the period is the signature of a lost wake-up (analyses.jitter): those bins are
drawn red, each multiple of the period is a labelled dashed line, and the count axis is logarithmic so a
handful of lost wake-ups stays visible beside thousands of regular ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from forensics.plots.data import JitterData

REGULAR, LOST, PERIOD_LINE = "#4c72b0", "#c0392b", "#555555"


def draw_jitter(data: JitterData) -> Figure:
    stats = data.stats[data.stats["tid"].isin(data.histogram["tid"])] if len(data.histogram) else data.stats[:0]
    panels = []  # (histogram rows, nominal period ns, title, gid of the bars)
    engines = data.engine_stats
    for row in engines.itertuples(index=False) if len(engines) and len(data.engine_histogram) else ():
        hist = data.engine_histogram
        hist = hist[(hist["engine"] == row.engine) & (hist["driver"] == row.driver)]
        title = f"{row.engine} engine, driver {row.driver}: {int(row.n)} intervals between cycle starts"
        panels.append((hist, float(row.nominal_ns), title, _flag(row.flag, "no lost cycle"), row.source, "engine"))
    for row in stats.itertuples(index=False):
        hist = data.histogram[data.histogram["tid"] == row.tid]
        title = f"{row.comm} (tid {int(row.tid)}): {int(row.n)} intervals"
        panels.append((hist, float(row.nominal_ns), title, _flag(row.flag, "no lost wake-up"), row.source, "thread"))
    fig = Figure(figsize=(12, 1.0 + 3.0 * len(panels)), layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    for ax, (hist, nominal_ns, title, flag, source, kind) in zip(axes, panels, strict=True):
        _panel(ax, hist, nominal_ns / 1e6, kind)
        ax.set_title(f"{title}, {flag}\ntiming: {source}", loc="left", fontsize=10.5)
    fig.suptitle(data.title, fontsize=12.5, fontweight="bold")
    return fig


def _flag(flag: object, none: str) -> str:
    return flag if isinstance(flag, str) and flag else none


def _panel(ax: Any, hist: pd.DataFrame, nominal: float, kind: str) -> None:
    """One histogram of intervals (ms) against its nominal period; `kind` names the bars (engine, thread)."""
    lo = hist["lo_ns"].to_numpy(dtype=np.float64) / 1e6
    hi = hist["hi_ns"].to_numpy(dtype=np.float64) / 1e6
    counts = hist["count"].to_numpy(dtype=np.float64)
    multiple = hist["multiple"].to_numpy()
    colors = np.where(multiple > 0, LOST, REGULAR)
    ax.bar(
        lo,
        counts,
        width=hi - lo,
        align="edge",
        color=colors,
        lw=0,
        gid="histogram" if kind == "thread" else f"{kind}-histogram",
    )
    top = float(counts.max()) if len(counts) else 1.0
    lost_name = "lost wake-up" if kind == "thread" else "lost cycle"
    for k in range(1, 5):
        x = k * nominal
        if x > hi.max() + nominal * 0.25 or (k > 1 and not ((multiple > 0) & (counts > 0)).any()):
            break
        ax.axvline(x, color=PERIOD_LINE if k == 1 else LOST, ls="--", lw=1.0, gid=f"period-x{k}")
        label = f"period {nominal:.3f} ms" if k == 1 else f"{k}x period: {lost_name}"
        ax.text(x, top * 3, label, rotation=0, ha="center", va="bottom", fontsize=8.5,
                color=PERIOD_LINE if k == 1 else LOST, bbox={"fc": "white", "ec": "none", "pad": 1})  # fmt: skip
    for x0, x1, c, m in zip(lo, hi, counts, multiple, strict=True):
        if m > 0 and c > 0:
            ax.text((x0 + x1) / 2, c * 1.15, f"{int(c)}", ha="center", va="bottom", fontsize=9, color=LOST)
    for x1, c, n in zip(hi, counts, hist["beyond"].to_numpy(), strict=True):
        if n > 0:  # the last bin holds the intervals past it (analyses.jitter: the bins stop there)
            ax.text(x1, c * 1.15, f"{int(n)} of them longer ->", ha="right", va="bottom", fontsize=9, gid="beyond")
    ax.set_yscale("log")
    ax.set_ylim(0.7, top * 12)
    lost = bool(((multiple > 0) & (counts > 0)).any())
    if lost:  # the whole range, so the peaks at multiples of the period show
        ax.set_xlim(0, max(hi.max(), 2.2 * nominal) * 1.02)
    else:  # nothing near 2x: zoom on the spread around the period
        pad = max(3 * float((hi - lo).max()), 0.02 * nominal)
        ax.set_xlim(max(lo.min() - pad, 0), hi.max() + pad)
    ax.set_ylabel("wake-ups (log)" if kind == "thread" else "cycle starts (log)")
    ax.set_xlabel(
        "interval between consecutive wake-ups (ms)" if kind == "thread" else "interval between cycle starts (ms)"
    )
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
