"""Cycle end and deadline misses from engine rows (canned: the rules, not a recording)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analyses.engine import engine_cycle_ends, engine_cycle_summary

P = 5_333_333  # 256 frames at 48 kHz


def _cycles(rows: list[tuple[int, str, int | None]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "t_ns": [r[0] for r in rows],
            "engine": pd.Categorical([r[1] for r in rows]),
            "period_ns": [P] * len(rows),
            "end_ns": pd.array([r[2] for r in rows], dtype="Int64"),
        }
    )


def _nodes(rows: list[tuple[int, str, int | None, bool | None]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "t_ns": [r[0] for r in rows],
            "engine": pd.Categorical([r[1] for r in rows]),
            "finish_ns": pd.array([r[2] for r in rows], dtype="Int64"),
            "xrun": pd.array([r[3] for r in rows], dtype="boolean"),
        }
    )


def test_end_is_the_engines_or_the_last_node_finish_and_a_miss_is_past_the_period() -> None:
    cycles = _cycles(
        [
            (0, "pipewire", 1_000_000),  # the source gave the end
            (P, "pipewire", None),  # two nodes: the later finish ends it
            (2 * P, "pipewire", None),  # late: ends 20 ms after its start
            (3 * P, "pipewire", None),  # unfinished, end unknown, the engine counted the node late
            (4 * P, "pipewire", None),  # nothing known
        ]
    )
    nodes = _nodes(
        [
            (P, "pipewire", P + 200_000, False),
            (P, "pipewire", P + 900_000, False),
            (2 * P, "pipewire", 2 * P + 20_000_000, True),
            (3 * P, "pipewire", None, True),
            (4 * P, "pipewire", None, None),
        ]
    )
    ends = engine_cycle_ends(cycles, nodes)
    assert ends["end_rel_ns"].tolist()[:3] == [1_000_000, 900_000, 20_000_000]
    assert ends["end_rel_ns"].isna().tolist() == [False, False, False, True, True]
    assert ends["missed"].tolist()[:4] == [False, False, True, True]
    assert pd.isna(ends["missed"].iloc[4])

    summary = engine_cycle_summary(cycles, nodes).set_index("engine").loc["pipewire"]
    assert summary["cycles"] == 5 and summary["cycles_with_end"] == 3
    assert summary["end_p50_ns"] == 1_000_000
    assert summary["end_p99_ns"] == np.percentile([1_000_000, 900_000, 20_000_000], 99)
    assert summary["deadline_misses"] == 2 and summary["misses_unknown"] == 1


def test_engines_are_summarised_apart() -> None:
    cycles = _cycles([(0, "jack", 100), (P, "jack", 7_000_000 + P), (0, "pipewire", 300)])
    summary = engine_cycle_summary(cycles, _nodes([])).set_index("engine")
    assert summary.loc["jack", "deadline_misses"] == 1 and summary.loc["pipewire", "deadline_misses"] == 0
    assert summary.loc["jack", "end_max_ns"] == 7_000_000
    assert engine_cycle_summary(_cycles([]), _nodes([])).empty


def test_a_node_never_seen_finishing_leaves_the_end_unknown() -> None:
    """One client finished, the next was signaled and never woke: the cycle's end is not the first one's
    finish (that made an on-time cycle of a cycle the engine reported as an xrun)."""
    cycles = _cycles([(0, "jack", None), (P, "jack", None)])
    nodes = _nodes(
        [
            (0, "jack", 300_000, False),
            (0, "jack", None, True),  # signaled by the first, never finished: the engine's xrun
            (P, "jack", P + 300_000, False),
            (P, "jack", None, None),  # never finished, lateness unknown
        ]
    )
    ends = engine_cycle_ends(cycles, nodes)
    assert ends["end_rel_ns"].isna().all()
    assert ends["missed"].iloc[0] == True  # noqa: E712 - nullable
    assert pd.isna(ends["missed"].iloc[1])


def test_system_figures_of_cycles_known_only_late_say_the_maximum_is_unknown() -> None:
    """Every cycle had a client never seen finishing (its end unknown) and the engine's late flag: the
    misses are counted, the cycle maximum is unknown (it raised a TypeError on NA)."""
    from analyses.system import system_figures
    from capture.format import Capture

    starts = [10_000_000_000 + i * P for i in range(5)]
    cap = Capture.from_frames(
        meta={"sources": {"engine": {"kind": "jack"}}},
        engine_cycles=pd.DataFrame(
            {"t_ns": starts, "engine": "jack", "driver": "system", "quantum_frames": 256, "rate_hz": 48000,
             "period_ns": P, "end_ns": pd.array([None] * 5, dtype="Int64")}
        ),
        engine_nodes=pd.DataFrame(
            {"t_ns": starts * 2, "engine": "jack", "node_id": [2] * 5 + [3] * 5, "name": ["a"] * 5 + ["b"] * 5,
             "finish_ns": pd.array([s + 300_000 for s in starts] + [None] * 5, dtype="Int64"),
             "xrun": pd.array([False] * 5 + [True] * 5, dtype="boolean")}
        ),
    )  # fmt: skip
    figures = system_figures(cap).set_index("figure")
    assert pd.isna(figures.loc["Cycle maximum (engine)", "value"])
    assert figures.loc["Cycle maximum (engine)", "source"].startswith("unknown")
    assert figures.loc["Deadline misses (engine)", "value"] == 5


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning", "ignore:invalid value:RuntimeWarning")
def test_system_figures_of_cycles_with_no_positive_period_leave_what_needs_it_unknown() -> None:
    """The engine's period is the median of its cycles' periods, finite and positive only
    (analyses.engine.engine_period_medians, the one rule the threads' engine periods use too): cycles
    whose period is 0 give no period, so the DSP load and the rates that need it are unknown (NaN);
    they raised ZeroDivisionError when `forensics system` took its own median."""
    from analyses.system import system_figures
    from capture.format import Capture

    starts = [10_000_000_000 + i * P for i in range(5)]
    cap = Capture.from_frames(
        meta={"sources": {"engine": {"kind": "jack"}}},
        engine_cycles=pd.DataFrame(
            {"t_ns": starts, "engine": "jack", "driver": "system", "quantum_frames": 256, "rate_hz": 48000,
             "period_ns": 0, "end_ns": pd.array([s + 300_000 for s in starts], dtype="Int64")}
        ),
    )  # fmt: skip
    figures = system_figures(cap).set_index("figure")
    assert pd.isna(figures.loc["Average DSP load", "value"])
    assert pd.isna(figures.loc["XRUN rate (deadline misses)", "value"])
    assert figures.loc["Cycle maximum", "value"] == 300.0
