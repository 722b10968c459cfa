"""Markers: the recorder confirms each on its status line, `info` lists them with their times, and
captures/lab-markers.ssf (recorded by tests/workloads/marked_capture.py, labels typed on a terminal)
holds `load..loaded` for the README's --span example."""

from __future__ import annotations

import forensics
from forensics.cli.catch_load import _StatusLine
from samplers.recorder import Status
from tests.helpers import REPO

MARKED = REPO / "captures" / "lab-markers.ssf"


def test_status_line_confirms_the_latest_marker(capsys) -> None:
    line = _StatusLine(enabled=True)
    status = Status(2_000_000_000, 3, 2, 2e6, 3e6, 0, 1000, 1_000_000)
    line.show(status)
    assert "marker" not in capsys.readouterr().err
    line.show(Status(5_000_000_000, 3, 2, 2e6, 3e6, 0, 2500, 2_000_000, None, 2, (4_538_000_000, "loaded")))
    assert "marker 2 'loaded' at 4.5 s" in capsys.readouterr().err


def test_info_lists_the_markers_with_their_times(run_module) -> None:
    shown = run_module("forensics", "info", str(MARKED))
    assert shown.returncode == 0, shown.stderr
    markers = shown.stdout.split("\nMarkers\n")[1].splitlines()
    assert [line.split()[0] for line in markers[:2]] == ["1", "2"]
    assert markers[0].endswith(" s  load") and markers[1].endswith(" s  loaded")
    # A capture without markers says so, rather than nothing.
    plain = run_module("forensics", "info", str(REPO / "captures" / "lab-clean.ssf"))
    assert "markers  none (Enter or SIGUSR1 while recording adds one)" in plain.stdout


def test_the_marked_capture_spans_its_episodes_between_load_and_loaded() -> None:
    from analyses.span import resolve_span
    from analyses.stalls import find_stalls

    cap = forensics.load(MARKED)
    start, end = resolve_span(cap, "load..loaded")
    assert start is not None and end is not None
    truth = cap.truth
    assert len(truth) == 3 and ((truth["start_ns"] > start) & (truth["end_ns"] < end)).all()
    found = find_stalls(cap, t_range=(start, end), pattern="lab-audio")
    assert sorted(found["verdict"]) == sorted(truth["cause"])
