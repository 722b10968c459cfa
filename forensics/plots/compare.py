"""The compare picture: two captures (A/B arms) side by side.

Top, when both captures hold the lab's callbacks: the distribution of callback ends (ms after the cycle
began) of A and B over each other, with the deadline; below, one small chart per figure of
`analyses.compare` (A and B as bars, the change in % in its title). Figures either capture cannot give
are listed as unknown instead of drawn.
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from forensics.plots.data import CompareData

COLOR_A, COLOR_B, DEADLINE = "#4c72b0", "#dd8452", "#c0392b"
SKIP = {"duration", "threads recorded", "cycles"}


def _drawable(figures: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Figures both captures know; an indented figure is named after the one it belongs to."""
    names, parent = [], ""
    for name in figures["figure"].astype(str):
        if name.startswith(" ") and parent:
            names.append(f"{parent}: {name.strip()}")
        else:
            parent = name.strip()
            names.append(parent)
    figures = figures.assign(figure=names)
    figures = figures[~(figures["unit"].astype(str) == "episodes")]  # drawn together (verdict chart)
    a = pd.to_numeric(figures["a"], errors="coerce")
    b = pd.to_numeric(figures["b"], errors="coerce")
    known = a.notna() & b.notna() & ~figures["figure"].str.strip().isin(SKIP)
    unknown = figures.loc[~(a.notna() & b.notna()), "figure"].str.strip().tolist()
    return figures[known.to_numpy()], unknown


def draw_compare(data: CompareData) -> Figure:
    shown, unknown = _drawable(data.figures)
    verdicts = data.figures[data.figures["unit"].astype(str) == "episodes"]
    cols = 4
    rows = max(math.ceil((len(shown) + (1 if len(verdicts) else 0)) / cols), 1)
    has_cycles = len(data.cycles_a) > 0 and len(data.cycles_b) > 0
    height = 1.2 + 1.75 * rows + (3.0 if has_cycles else 0.0)
    fig = Figure(figsize=(14, height), layout="constrained")
    grid = fig.add_gridspec(
        rows + (1 if has_cycles else 0), cols, height_ratios=([3.0] if has_cycles else []) + [1.75] * rows
    )
    first = 0
    if has_cycles:
        ax = fig.add_subplot(grid[0, :])
        _cycles(ax, data)
        first = 1
    for i, row in enumerate(shown.itertuples(index=False)):
        ax = fig.add_subplot(grid[first + i // cols, i % cols])
        a, b = float(row.a), float(row.b)
        ax.barh([1, 0], [a, b], color=[COLOR_A, COLOR_B], height=0.7, gid="figure-bars")
        ax.set_yticks([1, 0], ["A", "B"])
        for y, v in ((1, a), (0, b)):
            ax.text(v, y, f" {v:.4g}", va="center", ha="left", fontsize=8.5)
        change = row.change_pct
        change_text = "" if pd.isna(change) else f"  {change:+.1f} %"
        unit = f" ({row.unit})" if isinstance(row.unit, str) and row.unit else ""
        title = textwrap.fill(f"{str(row.figure).strip()}{unit}{change_text}", 52)
        ax.set_title(title, fontsize=9, loc="left")
        ax.set_xlim(0, max(a, b, 1e-9) * 1.35)
        ax.tick_params(axis="x", labelsize=8)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    if len(verdicts):
        n = len(shown)
        row, col = first + n // cols, n % cols
        ax = fig.add_subplot(grid[row, col])
        _verdicts(ax, verdicts)
    fig.suptitle(data.title, fontsize=12, fontweight="bold")
    note = "A blue, B orange; change = (B - A) / A."
    if unknown:
        note += " Unknown in A or B (not drawn): " + ", ".join(dict.fromkeys(unknown)) + "."
    fig.supxlabel(note, fontsize=9, color="#444444")
    return fig


def _cycles(ax, data: CompareData) -> None:
    a = data.cycles_a["end_rel_ns"].to_numpy(dtype=np.float64) / 1e6
    b = data.cycles_b["end_rel_ns"].to_numpy(dtype=np.float64) / 1e6
    top = max(a.max(), b.max())
    bins = np.linspace(0, top * 1.02, 120)
    for values, color, label in ((a, COLOR_A, "A"), (b, COLOR_B, "B")):
        p50, p99 = np.percentile(values, [50, 99])
        ax.hist(values, bins=bins, histtype="step", lw=1.6, color=color, gid=f"cycles-{label}",
                label=f"{label}: {len(values)} callbacks, end p50 {p50:.2f} ms, p99 {p99:.2f} ms")  # fmt: skip
    period = float(data.cycles_a["period_ns"].iloc[0]) / 1e6
    ax.axvline(period, color=DEADLINE, ls="--", lw=1.2, gid="deadline", label=f"deadline = period {period:.3f} ms")
    ax.set_yscale("log")
    ax.set_xlabel("callback end, ms after its cycle began (lab cycles)")
    ax.set_ylabel("callbacks (log)")
    ax.legend(fontsize=9, frameon=False)
    ax.set_title("When the callbacks ended", loc="left", fontsize=10.5)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _verdicts(ax, verdicts: pd.DataFrame) -> None:
    names = verdicts["figure"].astype(str).str.strip().tolist()
    x = np.arange(len(names))
    a = pd.to_numeric(verdicts["a"], errors="coerce").fillna(0).to_numpy()
    b = pd.to_numeric(verdicts["b"], errors="coerce").fillna(0).to_numpy()
    ax.bar(x - 0.2, a, width=0.4, color=COLOR_A, label="A", gid="verdict-bars")
    ax.bar(x + 0.2, b, width=0.4, color=COLOR_B, label="B", gid="verdict-bars")
    ax.set_xticks(x, names, fontsize=8.5)
    ax.set_title("stall episodes by verdict", fontsize=9, loc="left")
    # Counts start at 0; with no episode in either capture the axis still reads 0..1, and says so.
    ax.set_ylim(0, max(1.0, float(np.max(a, initial=0)), float(np.max(b, initial=0))) * 1.1)
    if not (a.any() or b.any()):
        ax.text(0.5, 0.5, "no stall episode in A or B", transform=ax.transAxes, ha="center", va="center",
                fontsize=9, color="#555555", gid="no-episodes")  # fmt: skip
    ax.yaxis.get_major_locator().set_params(integer=True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
