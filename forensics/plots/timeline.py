"""The timeline picture: where each chosen thread's time went, window by window, with the verdicts on it.

Panels, sharing one time axis (seconds since the first sample):
  callbacks   each callback's end after its cycle began, against the deadline (when a deadline is known):
              the engine's cycle ends where the capture has them, with the xruns it reported as marks
  one per thread   % of each window on CPU / waiting for a CPU / blocked in D, stacked; stall episodes
              shaded in their verdict's colour and labelled ("io 18.6 ms") with a marker on top
  faults      page faults per window of each thread (symlog: a storm of thousands next to a few)
  placement   the CPU each watched (real-time or periodic) thread was on, coloured by core type
Markers set while recording are dashed vertical lines through every panel, labelled on top. Incidents
(analyses.incidents, numbered as `forensics stalls` numbers them) are grey spans on the top panel, each
labelled with its number, root thread and verdict.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.transforms import blended_transform_factory

from forensics.plots import FAST_CORE, OTHER_CORE, PART_COLORS, SLOW_CORE, VERDICT_COLORS, thread_colors
from forensics.plots.data import TimelineData

MARKER_COLOR = "#333333"
DEADLINE_COLOR = "#c0392b"
XRUN_COLOR = "#8e44ad"
INCIDENT_COLOR = "#555555"  # grey: an incident's span sits behind its root's verdict colour


def _seconds(t_ns: np.ndarray | pd.Series, origin: int) -> np.ndarray:
    return (np.asarray(t_ns, dtype=np.float64) - origin) / 1e9


def _core_colors(data: TimelineData) -> dict[str, str]:
    labels = sorted(set(data.core_types.values()))
    if len(labels) <= 1:
        return {label: FAST_CORE for label in [*labels, "uniform", "unknown"]}
    return {label: (SLOW_CORE if label in data.slow_types else FAST_CORE) for label in labels} | {"unknown": OTHER_CORE}


def draw_timeline(data: TimelineData) -> Figure:
    threads = data.threads
    placed = threads[threads["watched"].to_numpy(bool) | threads["rt"].to_numpy(bool)]
    has_cycles = data.deadline_ns is not None and len(data.cycles) > 0
    ncpu = max(len(data.cpus), 1)
    panels: list[tuple[str, float]] = [("header", 1.0)]
    if has_cycles:
        panels.append(("cycles", 1.9))
    panels += [(f"thread:{i}", 1.35) for i in range(len(threads))]
    panels.append(("faults", 1.3))
    if len(placed):
        panels.append(("placement", min(0.9 + 0.22 * len(placed) * (min(ncpu, 8) + 1), 4.0)))
    height = 0.6 + sum(h for _, h in panels)
    fig = Figure(figsize=(14, height), layout="constrained")
    grid = fig.add_gridspec(len(panels), 1, height_ratios=[h for _, h in panels])
    header = fig.add_subplot(grid[0])
    header.axis("off")
    axes = [fig.add_subplot(grid[1])]
    axes += [fig.add_subplot(grid[i], sharex=axes[0]) for i in range(2, len(panels))]
    for ax in axes[:-1]:
        ax.tick_params(labelbottom=False)
    panels = panels[1:]
    cast(ConstrainedLayoutEngine, fig.get_layout_engine()).set(h_pad=0.05, hspace=0.06)
    origin = data.origin_ns
    lo, hi = _seconds(np.array(data.t_range), origin)
    names = threads["comm"].astype(str).tolist()
    colors = dict(zip((int(t) for t in threads["tid"]), thread_colors(names), strict=True))
    legend: dict[str, Artist] = {}
    for (kind, _), ax in zip(panels, axes, strict=True):
        ax.grid(axis="x", color="#e5e5e5", lw=0.6)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        if kind == "cycles":
            _cycles_panel(ax, data, legend)
        elif kind.startswith("thread:"):
            row = threads.iloc[int(kind.split(":")[1])]
            _thread_panel(ax, data, row, colors[int(row["tid"])], legend)
        elif kind == "faults":
            _faults_panel(ax, data, colors)
        else:
            _placement_panel(ax, data, placed, colors, legend)
    if len(data.xruns):  # what the engine reported, never inferred: on the top panel
        for x in _seconds(data.xruns["t_ns"], origin):
            axes[0].axvline(float(x), color=XRUN_COLOR, lw=1.0, alpha=0.8, zorder=4, gid="xrun")
        legend["xrun (reported by the engine)"] = Line2D([], [], color=XRUN_COLOR, lw=1.0)
    for row in data.incidents.itertuples(index=False):  # each late cycle (or run of them), numbered as stalls
        edges = _seconds(np.array([row.start_ns, row.end_ns]), origin)
        x0, x1 = _at_least(float(edges[0]), float(edges[1]), 0.004 * float(hi - lo))
        axes[0].axvspan(x0, x1, color=INCIDENT_COLOR, alpha=0.18, lw=0, zorder=0, gid="incident")
        axes[0].annotate(
            f"#{int(row.incident)} {row.root_comm} {row.root_verdict}",
            xy=(x1, 0.5),  # mid-height: the deadline's label is at the top, the cycles at the bottom
            xycoords=blended_transform_factory(axes[0].transData, axes[0].transAxes),
            xytext=(2, 0),
            textcoords="offset points",
            fontsize=8,
            va="center",
            color=INCIDENT_COLOR,
            gid="incident-label",
            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.85},
        )
        legend["incident (#, root, verdict: as `forensics stalls`)"] = Patch(color=INCIDENT_COLOR, alpha=0.3)
    for i, row in data.markers.iterrows():
        x = float(_seconds(np.array([row["t_ns"]]), origin)[0])
        for ax in axes:
            ax.axvline(x, color=MARKER_COLOR, ls=(0, (4, 3)), lw=1.1, zorder=5)
        axes[0].annotate(
            f"▼ {row['text']}",
            xy=(x, 1.0),
            xycoords=blended_transform_factory(axes[0].transData, axes[0].transAxes),
            xytext=(0, 14 if i % 2 == 0 else 26),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=9,
            color=MARKER_COLOR,
            gid="marker-label",
        )
        legend["marker (set while recording)"] = Line2D([], [], color=MARKER_COLOR, ls=(0, (4, 3)), lw=1.1)
    axes[-1].set_xlim(lo, hi)
    axes[-1].set_xlabel("seconds since the first sample")
    header.text(0.5, 1.0, data.title, ha="center", va="top", fontsize=13, fontweight="bold")
    header.text(0.5, 0.68, data.subtitle, ha="center", va="top", fontsize=9.5, color="#444444")
    if legend:  # nothing drawn that needs one (a capture whose rows lost their CPUs): none
        header.legend(
            list(legend.values()),
            list(legend.keys()),
            loc="lower center",
            bbox_to_anchor=(0.5, -0.15),
            ncol=min(len(legend), 6),
            fontsize=9,
            frameon=False,
        )
    return fig


def _cycles_panel(ax, data: TimelineData, legend: dict[str, Artist]) -> None:
    cycles = data.cycles
    x = _seconds(cycles["t_ns"], data.origin_ns)
    y = cycles["value_ns"].to_numpy(dtype=np.float64) / 1e6
    missed = cycles["missed"].to_numpy(dtype=bool)
    ax.scatter(x[~missed], y[~missed], s=5, color="#4c72b0", lw=0, label="callback", gid="cycles")
    if missed.any():
        ax.scatter(x[missed], y[missed], s=28, color=DEADLINE_COLOR, marker="v", lw=0, gid="late-cycles")
        legend["late callback"] = Line2D([], [], color=DEADLINE_COLOR, marker="v", lw=0)
    assert data.deadline_ns is not None  # the caller draws this panel only with a deadline
    deadline = float(data.deadline_ns) / 1e6
    ax.axhline(deadline, color=DEADLINE_COLOR, ls="--", lw=1.3, gid="deadline", label=data.deadline_label)
    ax.annotate(
        data.deadline_label,
        xy=(1.0, deadline),
        xycoords=blended_transform_factory(ax.transAxes, ax.transData),
        xytext=(-4, 3),
        textcoords="offset points",
        ha="right",
        va="bottom",
        fontsize=9,
        color=DEADLINE_COLOR,
    )
    legend[data.deadline_label.split(" (")[0]] = Line2D([], [], color=DEADLINE_COLOR, ls="--", lw=1.3)
    top = max(float(np.nanmax(y)) if len(y) else 0.0, deadline) * 1.15
    ax.set_ylim(0, top)
    ax.set_ylabel("ms")
    ax.set_title(data.cycles_label, loc="left", fontsize=10, pad=3)


def _box() -> dict[str, object]:
    return {"bbox": {"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.85}}


MIN_EPISODE_PX = 4  # the narrowest an episode's shading is drawn, in pixels of the figure


def _at_least(x0: float, x1: float, width: float) -> tuple[float, float]:
    """The span [x0, x1] widened about its middle to `width` when narrower."""
    if x1 - x0 >= width:
        return x0, x1
    mid = (x0 + x1) / 2
    return mid - width / 2, mid + width / 2


def _thread_panel(ax, data: TimelineData, row: pd.Series, color: str, legend: dict[str, Artist]) -> None:
    tid = int(row["tid"])
    mine = data.windows[data.windows["tid"] == tid].sort_values("start_ns")
    if len(mine):
        edges = _seconds(np.r_[mine["start_ns"].to_numpy(), mine["end_ns"].to_numpy()[-1]], data.origin_ns)
        wall = np.maximum(mine["wall_ns"].to_numpy(dtype=np.float64), 1.0)
        level = np.zeros(len(mine))
        for (label, part_color), column in zip(
            PART_COLORS.items(), ("on_cpu_ns", "runqueue_ns", "blocked_ns"), strict=True
        ):
            share = 100.0 * mine[column].to_numpy(dtype=np.float64) / wall
            if (share > 0).any():
                ax.stairs(level + share, edges, baseline=level, fill=True, color=part_color, lw=0, gid=column)
                legend[label] = Patch(color=part_color)
            level = level + share
    ax.set_ylim(0, 135)  # headroom above 100 % for the verdict labels
    ax.set_yticks([0, 50, 100])
    ax.set_ylabel(f"% of each {data.bin_ns / 1e6:g} ms")
    width = "" if data.bin_ns == data.interval_ns else f" (bins of {data.bin_ns / 1e6:g} ms)"
    ax.set_title(row["label"] + width, loc="left", fontsize=10, pad=3, color=color, fontweight="bold")
    ax.plot([], [], color=color)  # keeps the thread's colour in the axes for the faults/placement panels
    stalls = data.stalls[data.stalls["tid"] == tid] if len(data.stalls) else data.stalls
    # Labels need room: on a long capture with many episodes, a label closer than 8 % of the axis to the
    # previous one is left out (the coloured marker stays; the legend names the colours; --span zooms).
    room = 0.08 * (data.t_range[1] - data.t_range[0]) / 1e9
    # A 20 ms episode on a 60 s timeline is a fraction of a pixel: drawn MIN_EPISODE_PX wide at least.
    axis_px = max(ax.get_window_extent().width, 1.0)
    min_width_s = MIN_EPISODE_PX * (data.t_range[1] - data.t_range[0]) / 1e9 / axis_px
    last_label = -np.inf
    hidden = 0
    for episode in stalls.sort_values("start_ns").itertuples(index=False):
        verdict = str(episode.verdict)
        vcolor = VERDICT_COLORS.get(verdict, VERDICT_COLORS["unknown"])
        x0, x1 = _seconds(np.array([episode.start_ns, episode.end_ns]), data.origin_ns)
        x0, x1 = _at_least(x0, x1, min_width_s)
        ax.axvspan(x0, x1, color=vcolor, alpha=0.28, lw=0, zorder=0, gid=f"verdict-span:{verdict}")
        mid = (x0 + x1) / 2
        ax.plot([mid], [104], marker="v", color=vcolor, ms=7, zorder=6)
        legend[f"stall: {verdict}"] = Patch(color=vcolor, alpha=0.5)
        if mid - last_label < room:
            hidden += 1
            continue
        last_label = mid
        ax.annotate(
            f"{verdict} {episode.stall_ns / 1e6:.1f} ms",
            xy=(mid, 108),
            xycoords="data",
            ha="center",
            va="bottom",
            fontsize=8.5,
            fontweight="bold",
            color=vcolor,
            gid="verdict-label",
        )
    if hidden:
        ax.text(0.995, 1.02, f"{len(stalls)} stall episodes; {hidden} labels left out for room: zoom with --span",
                transform=ax.transAxes, ha="right", va="bottom", fontsize=8.5, color="#555555")  # fmt: skip


def _faults_panel(ax, data: TimelineData, colors: dict[int, str]) -> None:
    drawn = False
    for tid, mine in data.windows.groupby("tid", sort=False):
        mine = mine.sort_values("start_ns")
        faults = mine["faults"].to_numpy(dtype=np.float64)
        if not (faults > 0).any():
            continue
        edges = _seconds(np.r_[mine["start_ns"].to_numpy(), mine["end_ns"].to_numpy()[-1]], data.origin_ns)
        name = data.threads.set_index("tid")["comm"].get(tid, str(tid))
        ax.stairs(faults, edges, color=colors[int(tid)], lw=1.2, label=str(name), gid="faults")
        drawn = True
    ax.set_yscale("symlog", linthresh=1)
    window = f"{data.bin_ns / 1e6:g} ms"
    ax.set_ylabel(f"faults per {window}")
    if drawn:
        ax.legend(loc="upper right", fontsize=8, ncol=4, frameon=False)
        ax.set_title("page faults (minor + major)", loc="left", fontsize=10, pad=3)
    else:
        ax.set_yticks([])
        ax.text(0.5, 0.5, "no page faults in these threads", transform=ax.transAxes, ha="center", color="#666666")


def _placement_panel(
    ax, data: TimelineData, placed: pd.DataFrame, colors: dict[int, str], legend: dict[str, Artist]
) -> None:
    cpus = sorted(set(data.cpus) | set(data.windows["cpu"].astype(int).tolist()))
    slot = {c: i for i, c in enumerate(cpus)}
    rows = len(cpus) + 1
    core_colors = _core_colors(data)
    hybrid = len(set(data.core_types.values())) > 1
    ticks, labels = [], []
    for k, row in enumerate(placed.itertuples(index=False)):
        base = k * rows
        mine = data.windows[data.windows["tid"] == row.tid]
        x = _seconds(mine["end_ns"], data.origin_ns)
        y = base + np.array([slot.get(int(c), 0) for c in mine["cpu"].tolist()])
        types = mine["core_type"].astype(str).to_numpy()
        point_colors = [core_colors.get(t, OTHER_CORE) for t in types]
        ax.scatter(x, y, s=6, marker="s", c=point_colors, lw=0, rasterized=len(x) > 5000, gid="placement")
        if k:
            ax.axhline(base - rows / 2, color="#bbbbbb", lw=0.8)
        ax.text(
            0.005, base + len(cpus) - 0.55, f"{row.comm} ({row.tid})", transform=blended_transform_factory(
                ax.transAxes, ax.transData), va="top", fontsize=9, color=colors[int(row.tid)], fontweight="bold",
            **_box(),
        )  # fmt: skip
        step = 1 if len(cpus) <= 8 else max(len(cpus) // 4, 1)
        for c in cpus[::step]:
            ticks.append(base + slot[c])
            kind = data.core_types.get(c, "")
            labels.append(f"cpu {c}" + (f" {kind}" if hybrid and kind else ""))
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.set_ylim(-0.7, len(placed) * rows - 1.3)
    ax.set_ylabel("CPU")
    ax.set_title("CPU each watched thread was on (read every window)", loc="left", fontsize=10, pad=3)
    if hybrid:
        for label, color in core_colors.items():
            if label in set(data.core_types.values()):
                slow = " (slow)" if label in data.slow_types else ""
                legend[f"on {label}{slow}"] = Patch(color=color)
    else:
        legend["CPU (cores all alike)"] = Patch(color=core_colors.get("uniform", FAST_CORE))
