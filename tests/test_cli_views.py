"""The analysis commands end to end on a capture file: tables that fit, JSON that parses, spans, errors."""

from __future__ import annotations

import io
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
    body = json.loads(out)
    assert body["main"] == "stalls" and body["format_version"] == 1
    episodes = body["sections"]["stalls"]
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
    incidents = json.loads(run_module("forensics", "stalls", capture_file, "--json", check=True).stdout)["sections"][
        "incidents"
    ]
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
    rows = json.loads(run_module("forensics", "xruns", lab, "--json", check=True).stdout)["sections"]["xruns"]
    incidents = json.loads(run_module("forensics", "stalls", lab, "--json", check=True).stdout)["sections"]["incidents"]
    late = {r["incident"] for r in rows if r["kind"] == "missed deadline"}
    assert late and late <= {i["incident"] for i in incidents}


def test_xruns_table_at_100_columns_shows_each_root_whole(run_module):
    """The root of an xrun's incident is what its row is read by: at 100 columns the PipeWire capture's
    roots, the engine's client before the thread's comm, print whole (they were cut to `cue: pyth…` and
    `Dummy-Dri…`); the less important text columns are shortened instead and none is left out."""
    out = run_module("forensics", "xruns", "captures/pipewire-late-client.ssf", check=True).stdout
    assert _lines_fit(out, 100)
    rows = [line for line in out.splitlines() if line.lstrip()[:1].isdigit()]
    assert len(rows) == 4
    assert "Dummy-Driver: pipewire" in rows[0] and all("cue: python" in row for row in rows[1:])
    assert "columns left out" not in out


def test_stalls_truth_scores(run_module, capture_file):
    out = run_module("forensics", "stalls", capture_file, "--truth", check=True).stdout
    assert "Recall and precision per cause" in out
    # episodes, not as injected, found right, said, recall, precision
    assert re.search(r"lock\s+1\s+0\s+1\s+1\s+1\s+1", out)


def test_output_file_format_from_suffix(run_module, capture_file, tmp_path):
    target = tmp_path / "stalls.json"
    run_module("forensics", "stalls", capture_file, "--episodes", "-o", str(target), check=True)
    assert json.loads(target.read_text())["sections"]["stalls"][0]["verdict"] == "run"
    text = tmp_path / "stalls.txt"
    run_module("forensics", "stalls", capture_file, "-o", str(text), check=True)
    assert text.read_text().startswith("Stalls in")
    table = tmp_path / "stalls.csv"
    run_module("forensics", "stalls", capture_file, "--episodes", "-o", str(table), check=True)
    episodes = pd.read_csv(table)
    assert episodes["verdict"].tolist() == ["run", "io", "lock"] and episodes["start_ns"].dtype == "int64"
    assert json.loads(episodes["components"][0])["run"] > 0
    system = pd.read_csv(io.StringIO(run_module("forensics", "system", capture_file, "--format", "csv").stdout))
    assert {"section", "figure", "value", "unit"} <= set(system.columns)
    page = tmp_path / "info.md"
    run_module("forensics", "info", capture_file, "-o", str(page), check=True)
    assert page.read_text().startswith("# Capture")


@pytest.mark.parametrize(
    ("command", "column"),
    [
        (["stalls"], "root_verdict"),  # the incidents: the main section, as in --json
        (["xruns"], None),
        (["spikes"], None),
        (["summarize"], "section"),
        (["system"], "section"),
        (["jitter"], "section"),
        (["info"], "section"),
    ],
)
def test_every_command_writes_its_csv(run_module, capture_file, tmp_path, command, column):
    # `stalls -o s.csv` (incidents, the default view) once failed with a KeyError: only --episodes was tried.
    table = tmp_path / f"{command[0]}.csv"
    run_module("forensics", *command, capture_file, "-o", str(table), check=True)
    main = json.loads(run_module("forensics", *command, capture_file, "--json", check=True).stdout)
    rows = pd.read_csv(table) if table.stat().st_size > 1 else pd.DataFrame()
    if main["main"] is not None:
        assert len(rows) == len(main["sections"][main["main"]])
    if column is not None:
        assert column in rows.columns
    if command == ["stalls"]:
        assert rows["root_verdict"].tolist() == ["run", "io", "lock"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-o", "{tmp}/stalls.out"], "the suffix picks the format"),
        (["-o", "{tmp}/stalls.txt", "--json"], "drop one"),
        (["-o", "{tmp}/stalls.json", "--format", "csv"], "drop one"),
    ],
)
def test_an_output_name_that_says_another_format_is_refused(run_module, capture_file, tmp_path, args, message):
    result = run_module("forensics", "stalls", capture_file, *(a.format(tmp=tmp_path) for a in args), check=False)
    assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1
    assert not any(tmp_path.iterdir())


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


ENVELOPE = {"format_version", "title", "origin_ns", "main", "sections", "notes"}


@pytest.mark.parametrize(
    "command",
    [["stalls"], ["stalls", "--episodes"], ["xruns"], ["spikes"], ["summarize"], ["system"], ["jitter"], ["info"]],
)
def test_every_json_output_is_one_envelope(run_module, capture_file, command):
    data = json.loads(run_module("forensics", command[0], capture_file, *command[1:], "--json", check=True).stdout)
    assert set(data) == ENVELOPE and data["format_version"] == 1
    assert isinstance(data["origin_ns"], int)
    assert all(isinstance(rows, list) for rows in data["sections"].values())
    assert data["main"] is None or data["main"] in data["sections"]
    compared = run_module("forensics", "compare", capture_file, capture_file, "--json", check=True).stdout
    assert set(json.loads(compared)) == ENVELOPE


def test_compare_two_files(run_module, capture_file):
    out = run_module("forensics", "compare", capture_file, capture_file, check=True).stdout
    assert re.search(r"wake-ups per cycle\s+\S+\s+\S+\s+\+0\.0 %", out)
    assert re.search(r"RSS peak\s+unknown\s+unknown", out)  # no memory reads in this capture: not a zero
    # The title names both files on its first line, as printed (a newline in it came out as "\\n").
    assert out.splitlines()[0] == f"A = {capture_file}   against   B = {capture_file}", out.splitlines()[0]


def test_compare_uses_the_recorded_rss(run_module):
    import forensics
    from analyses.compare import rss_mib

    ebpf = forensics.load("captures/lab-ebpf.ssf")
    per_pid = ebpf.processes.groupby("pid")["rss_kib"]
    peak, end = rss_mib(ebpf)
    # lab-main peaked at 125284 KiB while lab-hog and lab-holder held about 14670 KiB each; at the end
    # only lab-main (109736 KiB) was still read.
    assert peak == pytest.approx((125284 + 14672 + 14668) / 1024, abs=0.1)
    assert end == pytest.approx(109736 / 1024)
    assert per_pid.max().max() / 1024 < peak <= per_pid.max().sum() / 1024
    out = run_module("forensics", "compare", "captures/lab-ebpf.ssf", "captures/lab-episodes.ssf", check=True).stdout
    assert re.search(r"RSS peak\s+151\s+unknown\s+unknown\s+MiB", out), out


def test_span_by_markers_and_times_and_errors(run_module, capture_file):
    def episodes(*span: str) -> list[dict]:
        out = run_module("forensics", "stalls", capture_file, *span, "--json", "--episodes", check=True).stdout
        return json.loads(out)["sections"]["stalls"]

    whole = episodes()
    part = episodes("--span", "load..loaded")
    assert len(part) < len(whole)
    assert all(T0 + 1_000 * MS <= e["start_ns"] <= T0 + 2_000 * MS for e in part)
    by_time = episodes("--span", "1s..2s")
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
    # A `whole` column is never shortened: the other text columns are, to their floor, then the last
    # columns are left out.
    frame = pd.DataFrame({"who": ["w" * 30], "what": ["x" * 60], "why": ["y" * 30]})
    text = render(Report("t", [Section("s", "S", frame, whole=("who",))]), "table", width=100)
    assert _lines_fit(text) and "w" * 30 in text and "x" * 60 not in text and "y" * 30 in text
    text = render(Report("t", [Section("s", "S", frame, whole=("who", "what"))]), "table", width=100)
    assert _lines_fit(text) and "w" * 30 in text and "x" * 60 in text and "columns left out" in text
    assert choose_format(None, False, None) == "table"
    assert choose_format("table", True, None) == "json"


def test_durations_need_a_unit(run_module, capture_file):
    from capture.vocabulary import parse_duration_ns

    assert parse_duration_ns("2ms") == 2_000_000 and parse_duration_ns("1.5s") == 1_500_000_000
    for bare in ("5", "0.002", "1e3"):
        with pytest.raises(ValueError, match=r"has no unit.*ns, us, ms or s"):
            parse_duration_ns(bare)
    refused = run_module("forensics", "stalls", capture_file, "--min-stall", "5")
    assert refused.returncode == 2 and "no unit" in refused.stderr and "5ms or 5s" in refused.stderr
    assert refused.stderr.count("\n") == 1
    recorder = run_module("forensics.cli.catch_load", "-i", "1", "-d", "1s", "--", "true")
    assert recorder.returncode == 2 and "no unit" in recorder.stderr
    span = run_module("forensics", "stalls", capture_file, "--span", "1..2")
    assert span.returncode == 2 and "ns, us, ms or s" in span.stderr


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        (["stalls", "--min-stall", "7ms", "--fault-rate", "30"], ["7.000 ms (--min-stall)", "30 faults per ms"]),
        (["stalls", "--episodes"], ["half the period of a periodic thread", "50% busy"]),
        (["summarize"], ["half the period of a periodic thread"]),
        (["spikes", "--factor", "3", "--min", "1ms"], ["3x the thread's typical CPU", "1.000 ms (--min)"]),
        (["jitter"], ["of 2x, 3x or 4x the period is a lost wake-up"]),
        (["system"], ["ended after its deadline", "above 1000 us"]),
        (["xruns"], ["within 1.25 periods of the one before, or"]),
    ],
)
def test_every_view_prints_the_thresholds_it_used(run_module, capture_file, command, shown):
    out = " ".join(run_module("forensics", command[0], capture_file, *command[1:], check=True).stdout.split())
    assert "Thresholds:" in out
    for text in shown:
        assert text in out, text


def test_numbering_starts_at_1_and_xruns_show_their_count_and_span(run_module):
    lab = "captures/lab-episodes.ssf"
    spikes = json.loads(run_module("forensics", "spikes", lab, "--json", check=True).stdout)["sections"]
    assert min(s["spike"] for s in spikes["spikes"]) == 1 and min(b["spike"] for b in spikes["burners"]) == 1
    incidents = json.loads(run_module("forensics", "stalls", lab, "--json", check=True).stdout)["sections"]
    assert min(i["incident"] for i in incidents["incidents"]) == 1
    out = run_module("forensics", "system", lab, check=True).stdout
    assert re.search(r"XRUNs \(deadline misses\)\s+5\s+in 4\.4 s\s+lab cycles", out), out


def test_tid_selects_threads_in_every_analysis_command(run_module):
    lab = "captures/lab-episodes.ssf"  # lab-hog 18769 (FIFO 71), lab-audio 18771, in process lab-main

    def sections(*args: str) -> dict:
        return json.loads(run_module("forensics", *args, "--json", check=True).stdout)["sections"]

    stalls = sections("stalls", lab, "--episodes", "--tid", "18769")
    assert {t["tid"] for t in stalls["threads"]} == {18769} and {t["why"] for t in stalls["threads"]} == {"--tid"}
    assert stalls["stalls"] and {e["tid"] for e in stalls["stalls"]} == {18769}
    both = sections("stalls", lab, "--episodes", "--tid", "18769", "--tid", "18771")
    assert {t["tid"] for t in both["threads"]} == {18769, 18771}
    spikes = sections("spikes", lab, "--tid", "18771")
    assert spikes["spikes"] and {s["tid"] for s in spikes["spikes"]} == {18771}
    jitter = sections("jitter", lab, "--tid", "18771")
    assert [s["tid"] for s in jitter["stats"]] == [18771]


def test_thread_says_which_name_matched_and_hints_never_repeat_what_was_tried(run_module):
    lab = "captures/lab-episodes.ssf"
    threads = json.loads(run_module("forensics", "stalls", lab, "--thread", "lab-main", "--json", check=True).stdout)
    why = {t["comm"]: t["why"] for t in threads["sections"]["threads"]}
    assert why["lab-main"] == "thread name matches 'lab-main'"
    assert why["lab-audio"] == "process name matches 'lab-main' (not the thread's)"
    out = run_module("forensics", "stalls", lab, "--thread", "nosuch", check=True).stdout
    assert "no thread matches --thread 'nosuch'" in out and "try --thread" not in out
    assert _lines_fit(out)
    jitter = run_module("forensics", "jitter", lab, "--tid", "18769", check=True).stdout
    assert "try --thread" not in jitter and "none of the threads asked for" in jitter


def test_a_column_of_durations_is_in_one_unit(run_module):
    out = run_module("forensics", "stalls", "captures/lab-episodes.ssf", "--episodes", check=True).stdout
    rows = [line for line in out.splitlines() if re.match(r"^\s+\d+\.\d{3} s\s+\d+\s", line)]
    assert len(rows) == 7
    for line in rows:  # span, stalled and the components (456 us and 19.9 ms before: now 0.46ms, 19.93ms)
        span, stalled = re.findall(r"(\d+\.\d+ \w+)", line)[1:3]
        assert span.endswith(" ms") and stalled.endswith(" ms"), line
        assert set(re.findall(r"=\d+\.\d+(\w+)", line)) == {"ms"}, line
