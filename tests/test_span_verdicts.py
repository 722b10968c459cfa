"""A span selects what is shown, never what is decided: every verdict inside a span is the whole capture's
verdict there (README, "Explaining a spike"), in `stalls` (episodes and incidents), `xruns`, the plot's
data and the export's verdicts table.

The spans are short (under the ~1.2 s a period needs to be found from /proc) and end just after a verdict
that a span-local analysis lost: the lock at 3.814 s in lab-episodes, the priority inversion at 3.835 s in
lab-ebpf.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analyses.span import overlaps_span, resolve_span
from analyses.stalls import find_stalls
from capture.format import load

CASES = [
    ("captures/lab-episodes.ssf", "3.3s..3.9s", "lock"),
    ("captures/lab-ebpf.ssf", "3.7s..4.1s", "lock"),
]
KEY = ["tid", "start_ns", "end_ns", "verdict", "stall_ns"]


def _envelope_rows(stdout: str, section: str) -> list[dict]:
    return json.loads(stdout)["sections"][section]


def _episode_keys(rows: list[dict]) -> set[tuple]:
    return {tuple(r[k] for k in KEY) for r in rows}


@pytest.mark.parametrize(("path", "span", "verdict"), CASES)
def test_stalls_episodes_in_a_span_are_the_whole_captures(run_module, path, span, verdict):
    whole = run_module("forensics", "stalls", path, "--episodes", "--json", check=True)
    part = run_module("forensics", "stalls", path, "--episodes", "--json", "--span", span, check=True)
    cap = load(path)
    lo, hi = resolve_span(cap, span)
    whole_rows = _envelope_rows(whole.stdout, "stalls")
    inside = [r for r in whole_rows if r["end_ns"] > lo and r["start_ns"] < hi]
    part_rows = _envelope_rows(part.stdout, "stalls")
    assert inside, "the span holds verdicts of the whole capture"
    assert _episode_keys(part_rows) == _episode_keys(inside)
    assert verdict in {r["verdict"] for r in part_rows}


@pytest.mark.parametrize(("path", "span", "verdict"), CASES)
def test_stalls_incidents_in_a_span_are_the_whole_captures(run_module, path, span, verdict):
    whole = run_module("forensics", "stalls", path, "--json", check=True)
    part = run_module("forensics", "stalls", path, "--json", "--span", span, check=True)
    lo, hi = resolve_span(load(path), span)
    fields = ("incident", "start_ns", "end_ns", "root_tid", "root_verdict")
    whole_rows = [r for r in _envelope_rows(whole.stdout, "incidents") if r["end_ns"] > lo and r["start_ns"] < hi]
    part_rows = _envelope_rows(part.stdout, "incidents")
    assert whole_rows
    assert [tuple(r[f] for f in fields) for r in part_rows] == [tuple(r[f] for f in fields) for r in whole_rows]
    assert verdict in {r["root_verdict"] for r in part_rows}


@pytest.mark.parametrize(("path", "span", "verdict"), CASES)
def test_plot_and_export_verdicts_in_a_span_are_the_whole_captures(path, span, verdict):
    from analyses.threads import thread_profiles
    from forensics.export.frames import export_verdicts
    from forensics.plots.data import timeline_data

    cap = load(path)
    t_range = resolve_span(cap, span)
    whole = find_stalls(cap)
    inside = whole[overlaps_span(whole["start_ns"], whole["end_ns"], t_range)]
    expected = set(map(tuple, inside[KEY].astype(object).to_numpy().tolist()))
    exported = export_verdicts(cap, thread_profiles(cap, t_range=t_range), None, t_range)
    assert set(map(tuple, exported[KEY].astype(object).to_numpy().tolist())) == expected
    data = timeline_data(cap, path, top=4, t_range=t_range)
    drawn_keys = set(map(tuple, data.stalls[KEY].astype(object).to_numpy().tolist()))
    shown = set(data.threads["tid"].tolist())
    assert drawn_keys == {k for k in expected if k[0] in shown}
    assert verdict in set(data.stalls["verdict"])


def test_a_span_keeps_the_whole_captures_periods():
    from analyses.threads import thread_profiles

    cap = load("captures/lab-episodes.ssf")
    whole = thread_profiles(cap).set_index("tid")
    part = thread_profiles(cap, t_range=resolve_span(cap, "3.3s..3.9s")).set_index("tid")
    periodic = whole.index[whole["periodic"].to_numpy(bool)]
    assert len(periodic)
    pd.testing.assert_series_equal(part.loc[periodic, "period_ns"], whole.loc[periodic, "period_ns"])
    # The totals are the span's: the span is a fraction of the capture.
    assert (part.loc[periodic, "wall_ns"] < whole.loc[periodic, "wall_ns"] / 2).all()


@pytest.mark.parametrize(("path", "span", "verdict"), CASES)
def test_a_span_keeps_verdicts_when_periods_are_measured_from_proc(monkeypatch, path, span, verdict):
    # The sample captures hold the lab's cycles, whose exact periods would hide a span-local period
    # estimate: without them the period is measured from /proc's switch-ins, which a span under ~1.2 s
    # cannot give (issue 14, item 1).
    import numpy as np

    from analyses import threads

    monkeypatch.setattr(threads, "lab_periods", lambda cap: pd.Series(dtype=np.float64))
    cap = load(path)
    t_range = resolve_span(cap, span)
    profiles = threads.thread_profiles(cap).set_index("tid")
    audio = profiles.index[profiles["comm"] == "lab-audio"]
    assert profiles.loc[audio, "period_source"].str.startswith("/proc").all()
    part = threads.thread_profiles(cap, t_range=t_range).set_index("tid")
    pd.testing.assert_series_equal(part.loc[audio, "period_ns"], profiles.loc[audio, "period_ns"])
    whole = find_stalls(cap)
    inside = whole[overlaps_span(whole["start_ns"], whole["end_ns"], t_range)]
    shown = find_stalls(cap, t_range=t_range)
    assert set(map(tuple, shown[KEY].astype(object).to_numpy().tolist())) == set(
        map(tuple, inside[KEY].astype(object).to_numpy().tolist())
    )
    assert verdict in set(shown["verdict"])
