"""The analysis commands end to end on a capture file: tables that fit, JSON that parses, spans, errors."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from capture.format import CaptureWriter
from forensics.render import Report, Section, choose_format, render
from tests import synth
from tests.synth import MS, T0, Episode, Timeline

ANSI = re.compile(r"\x1b\[")


@pytest.fixture(scope="module")
def capture_file(tmp_path_factory):
    hog = Timeline(tid=1002, comm="hog", cpu=0)
    synth.busy(hog, t0=T0, duration_ns=3_000 * MS)
    cap = synth.audio_capture(
        [Episode("run", 100, 10), Episode("io", 250, 10), Episode("lock", 400, 15)], seconds=3, extra=[hog]
    )
    path = tmp_path_factory.mktemp("cli") / "synthetic.ssf"
    events = pd.DataFrame(
        {
            "t_ns": [T0 + 1_000 * MS, T0 + 2_000 * MS],
            "kind": ["marker", "marker"],
            "pid": [1000, 1000],
            "tid": [None, None],
            "text": ["load", "loaded"],
        }
    )
    with CaptureWriter(path, cap.meta) as writer:
        samples = cap.samples
        for _, chunk in samples.groupby(samples["tick"] // 250):
            writer.append("samples", chunk)
        writer.append("threads", cap.table("threads"))
        writer.append("events", events)
        writer.append("truth", cap.truth)
    return str(path)


def _lines_fit(text: str, width: int = 100) -> bool:
    return all(len(line) <= width for line in text.splitlines())


def test_stalls_table_fits_and_has_no_colour(run_module, capture_file):
    out = run_module("forensics", "stalls", capture_file, "--episodes", check=True).stdout
    assert _lines_fit(out)
    assert not ANSI.search(out)
    for verdict in ("run", "io", "lock"):
        assert re.search(rf"lab-audio\s+\S+ ms\s+{verdict}\s", out), verdict
    assert "state D at" in out and "no wake-up for" in out


def test_stalls_json_is_a_list_with_the_promised_fields(run_module, capture_file):
    out = run_module("forensics", "stalls", capture_file, "--json", "--episodes", check=True).stdout
    episodes = json.loads(out)
    assert isinstance(episodes, list) and len(episodes) == 3
    for episode in episodes:
        for key in ("tid", "comm", "start_ns", "end_ns", "verdict", "components", "sources", "evidence"):
            assert key in episode, key
        assert episode["components"]["reclaim"] is None
        assert episode["components"][episode["verdict"]] > 0
    assert [e["verdict"] for e in episodes] == ["run", "io", "lock"]


def test_stalls_lists_incidents_first_with_their_episodes(run_module, capture_file):
    out = run_module("forensics", "stalls", capture_file, check=True).stdout
    assert _lines_fit(out) and "Incidents (root, then episodes)" in out
    for verdict in ("run", "io", "lock"):  # one thread of no engine: each episode is its own incident
        assert re.search(rf"^\s+\d+\s+\S+ s\s+\S+\s+\S+\s+lab-audio \(\d+\)\s+{verdict}\s", out, re.M), verdict
    incidents = json.loads(run_module("forensics", "stalls", capture_file, "--json", check=True).stdout)
    assert [i["root_verdict"] for i in incidents] == ["run", "io", "lock"]
    for incident in incidents:
        assert len(incident["episodes"]) == incident["members"] == 1
        assert (
            incident["episodes"][0]["role"] == "root" and incident["episodes"][0]["verdict"] == incident["root_verdict"]
        )


def test_xruns_view_joins_each_missed_deadline_to_its_incident(run_module):
    lab = "captures/lab-episodes.ssf"  # the lab logs each callback with its deadline (cycles table)
    out = run_module("forensics", "xruns", lab, check=True).stdout
    assert _lines_fit(out) and "Xruns (engine-reported) and missed deadlines" in out
    rows = json.loads(run_module("forensics", "xruns", lab, "--json", check=True).stdout)
    incidents = json.loads(run_module("forensics", "stalls", lab, "--json", check=True).stdout)
    late = {r["incident"] for r in rows if r["kind"] == "missed deadline"}
    assert late and late <= {i["incident"] for i in incidents}


def test_stalls_truth_scores(run_module, capture_file):
    out = run_module("forensics", "stalls", capture_file, "--truth", check=True).stdout
    assert "Recall and precision per cause" in out
    assert re.search(r"lock\s+1\s+1\s+1\s+1\s+1", out)


def test_output_file_format_from_suffix(run_module, capture_file, tmp_path):
    target = tmp_path / "stalls.json"
    run_module("forensics", "stalls", capture_file, "--episodes", "-o", str(target), check=True)
    assert json.loads(target.read_text())[0]["verdict"] == "run"
    text = tmp_path / "stalls.txt"
    run_module("forensics", "stalls", capture_file, "-o", str(text), check=True)
    assert text.read_text().startswith("Stalls in")


@pytest.mark.parametrize(
    ("command", "expect"),
    [
        (["spikes"], "Who burned the CPU"),
        (["summarize"], "5. Worst stall episodes"),
        (["summarize", "--span", "load..loaded"], "4. Faults over time"),
        (["system"], "Average context-switch rate"),
        (["jitter"], "lost wake-ups"),
    ],
)
def test_every_view_renders_within_100_columns(run_module, capture_file, command, expect):
    result = run_module("forensics", command[0], capture_file, *command[1:])
    assert result.returncode == 0, result.stderr
    assert expect in result.stdout
    assert _lines_fit(result.stdout)
    data = json.loads(run_module("forensics", command[0], capture_file, *command[1:], "--json", check=True).stdout)
    assert "sections" in data


def test_compare_two_files(run_module, capture_file):
    out = run_module("forensics", "compare", capture_file, capture_file, check=True).stdout
    assert re.search(r"wake-ups per cycle\s+\S+\s+\S+\s+\+0\.0 %", out)
    assert re.search(r"RSS\s+unknown\s+unknown", out)


def test_span_by_markers_and_times_and_errors(run_module, capture_file):
    whole = json.loads(run_module("forensics", "stalls", capture_file, "--json", "--episodes", check=True).stdout)
    part = json.loads(
        run_module("forensics", "stalls", capture_file, "--span", "load..loaded", "--json", "--episodes").stdout
    )
    assert len(part) < len(whole)
    assert all(T0 + 1_000 * MS <= e["start_ns"] <= T0 + 2_000 * MS for e in part)
    by_time = json.loads(
        run_module("forensics", "stalls", capture_file, "--span", "1s..2s", "--json", "--episodes").stdout
    )
    assert [e["start_ns"] for e in by_time] == [e["start_ns"] for e in part]
    bad = run_module("forensics", "summarize", capture_file, "--span", "nosuchmarker..")
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "markers: 'load', 'loaded'" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_help_states_how_io_is_told_from_lock(run_module):
    out = run_module("forensics", "stalls", "--help", check=True).stdout
    assert "D is an uninterruptible wait" in out and "S an interruptible one" in out
    assert "Limits:" in out


def test_renderer_registry_and_shrinking():
    frame = pd.DataFrame({"thread": ["a" * 80, "b"], "span_ns": [2_000_000, 3_000_000], "note": ["x" * 90, "y"]})
    report = Report("t", [Section("s", "S", frame)])
    text = render(report, "table", width=100)
    assert _lines_fit(text) and "…" in text
    coloured = render(report, "table", width=100, color=True)
    assert ANSI.search(coloured)
    assert choose_format(None, False, "out.json") == "json"
    assert choose_format(None, False, None) == "table"
    assert choose_format("table", True, None) == "json"
