"""`--tid N` in every analysis command (README, "Which threads are watched"): each command's output is
about the threads asked for, in the meaning its --help states, and a tid the capture never had is a
one-line error."""

from __future__ import annotations

import csv
import json
import re

import pytest

from forensics.export.perfetto import SYNTHETIC

LAB = "captures/lab-episodes.ssf"
MAIN, HOG, HOLDER, AUDIO = 18766, 18769, 18770, 18771  # lab-main (OTHER), lab-hog (FIFO 71), lab-holder, lab-audio
MAIN_S, HOG_S = str(MAIN), str(HOG)


def _sections(run_module, *args: str) -> dict:
    return json.loads(run_module("forensics", *args, "--json", check=True).stdout)["sections"]


def _tids(rows: list[dict]) -> set[int]:
    return {int(r["tid"]) for r in rows}


def test_summarize_tid_narrows_the_per_thread_views_and_keeps_the_machines_faults(run_module):
    every = _sections(run_module, "summarize", LAB)
    assert _tids(every["placement"]) == {HOG, AUDIO} and MAIN in _tids(every["breakdown"])
    mine = _sections(run_module, "summarize", LAB, "--tid", MAIN_S, "--tid", HOG_S)
    assert _tids(mine["timeline"]) == {MAIN, HOG}
    assert _tids(mine["breakdown"]) == {MAIN, HOG}
    assert _tids(mine["placement"]) == {MAIN, HOG}  # lab-main too, though neither real-time nor periodic
    assert HOG in _tids(mine["worst"]) and _tids(mine["worst"]) <= {MAIN, HOG}  # none of lab-audio's episodes
    assert AUDIO in _tids(every["worst"])
    assert mine["faults"] == every["faults"] and mine["faults_bins"] == every["faults_bins"]  # the machine's
    text = run_module("forensics", "summarize", LAB, "--tid", HOG_S, check=True).stdout
    assert "4. Faults over time (all threads)" in text
    assert "Only --tid 18769 in the timeline, the breakdown, the placement and the worst episodes" in " ".join(
        text.split()
    )
    assert not re.search(r"^\s+lab-audio\s+18771\s", text, re.M)


def test_xruns_tid_lists_the_xruns_whose_incident_involves_the_thread(run_module):
    incidents = _sections(run_module, "stalls", LAB)["incidents"]
    every = _sections(run_module, "xruns", LAB)["xruns"]
    assert len(every) == 5
    narrowed = 0
    for tid in (MAIN, HOG, AUDIO):
        involved = {
            i["incident"] for i in incidents if i["root_tid"] == tid or any(e["tid"] == tid for e in i["episodes"])
        }
        expected = [x for x in every if x["incident"] in involved]
        shown = _sections(run_module, "xruns", LAB, "--tid", str(tid))["xruns"]
        assert shown == expected, tid
        narrowed += 0 < len(shown) < len(every)
    assert narrowed  # some thread is in some of the incidents only: the option really picks
    out = run_module("forensics", "xruns", LAB, "--tid", MAIN_S, check=True).stdout
    assert "(no xrun whose incident involves --tid 18766)" in out


def test_system_tid_times_that_thread(run_module):
    def figures(*args: str) -> dict[str, dict]:
        return {f["figure"]: f for f in _sections(run_module, "system", LAB, *args)["figures"]}

    every = figures()
    assert every["Delay maximum"]["source"].startswith("lab cycles (")
    audio = figures("--tid", str(AUDIO))  # the lab's callback thread: its own lab cycles
    assert audio["Delay maximum"]["source"].startswith("lab cycles of lab-audio (18771) (")
    other = figures("--tid", MAIN_S)  # no lab cycles of its own: its wake-ups from /proc
    assert other["Delay maximum"]["source"].startswith("/proc estimate, lab-main (18766), ")
    assert other["XRUNs (deadline misses)"]["source"] == "unknown: needs cycle ends (lab cycles)"
    for machine in ("Average CPU user load", "Average interrupt rate", "Duration"):  # the machine's, unchanged
        assert other[machine] == every[machine] == audio[machine]


def _svg_texts(path) -> str:
    """The texts of a matplotlib SVG (drawn as paths, each preceded by its text as a comment)."""
    return " ".join(re.findall(r"<!-- (.*?) -->", path.read_text()))


def test_plot_tid_draws_those_threads(run_module, tmp_path):
    every = tmp_path / "every.svg"
    run_module("forensics", "plot", LAB, "-o", str(every), check=True)
    assert "(tid 18771," in _svg_texts(every) and "(tid 18769," in _svg_texts(every)
    hog = tmp_path / "hog.svg"
    run_module("forensics", "plot", LAB, "-o", str(hog), "--tid", HOG_S, check=True)
    texts = _svg_texts(hog)
    assert "(tid 18769," in texts and "(tid 18771," not in texts and "where the time of 1 thread went" in texts
    both = tmp_path / "both.svg"  # with --thread: the threads of either
    run_module("forensics", "plot", LAB, "-o", str(both), "--tid", HOG_S, "--thread", "lab-holder", check=True)
    assert "(tid 18769," in _svg_texts(both) and "(tid 18770," in _svg_texts(both)
    assert "(tid 18771," not in _svg_texts(both)
    jitter = tmp_path / "jitter.svg"
    run_module("forensics", "plot", LAB, "--kind", "jitter", "-o", str(jitter), "--tid", str(AUDIO), check=True)
    assert "lab-audio (tid 18771)" in _svg_texts(jitter)
    compare = run_module("forensics", "plot", LAB, LAB, "-o", str(tmp_path / "ab.png"), "--tid", HOG_S)
    assert compare.returncode == 2 and "--tid do not apply to --kind compare" in compare.stderr


def _csv_tids(path) -> set[int]:
    with open(path, newline="") as f:
        return {int(row["tid"]) for row in csv.DictReader(f)}


def test_export_tid_keeps_those_threads(run_module, tmp_path):
    out = tmp_path / "tables"
    run_module("forensics", "export", LAB, "--format", "csv", "-o", str(out), "--tid", HOG_S, "--thread", "holder",
               check=True)  # fmt: skip
    for table in ("samples", "windows", "threads"):
        assert _csv_tids(out / f"{table}.csv") == {HOG, HOLDER}, table
    verdicts = _csv_tids(out / "verdicts.csv")
    assert HOG in verdicts and verdicts <= {HOG, HOLDER}  # none of lab-audio's episodes
    trace = tmp_path / "hog.json"
    run_module("forensics", "export", LAB, "--format", "perfetto", "-o", str(trace), "--tid", HOG_S, check=True)
    events = json.loads(trace.read_text())["traceEvents"]
    running = {e["tid"] for e in events if e["ph"] == "X" and e["name"] == "running"}
    assert running == {HOG}
    names = {e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name" and e["tid"] < SYNTHETIC}
    assert names == {HOG}


@pytest.mark.parametrize(
    "args",
    [
        ["summarize", LAB],
        ["xruns", LAB],
        ["system", LAB],
        ["plot", LAB, "-o", "{tmp}/x.png"],
        ["export", LAB, "--format", "csv", "-o", "{tmp}/tables"],
        ["export", LAB, "--format", "perfetto", "-o", "{tmp}/t.json"],
        ["stalls", LAB],
        ["spikes", LAB],
        ["jitter", LAB],
        ["dump", LAB],
        ["report", LAB, "-o", "{tmp}/r.md"],
    ],
    ids=lambda args: "-".join(a for a in args[:3] if not a.startswith(("captures", "{", "-"))),
)
def test_an_unknown_tid_is_a_one_line_error_naming_it(run_module, tmp_path, args):
    argv = [a.format(tmp=tmp_path) for a in args]
    result = run_module("forensics", *argv, "--tid", str(AUDIO), "--tid", "4242")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert (
        lines[0]
        == f"forensics: error: --tid 4242: no such thread in {LAB} (`forensics dump --table threads` lists them)"
    )
    assert not list(tmp_path.iterdir())  # nothing written


def test_report_tid_watches_those_threads_in_every_section():
    # Issue 14 item 7: `--tid N` in every analysis command, the report too (its sections are the commands').
    from capture.format import load
    from forensics.views.report import build_report

    cap = load(LAB)
    built = build_report(cap, LAB, tids=(HOG,))
    frames = {s.name: s.frame for s in built.sections if s.frame is not None}
    assert _tids(frames["threads"].to_dict("records")) == {HOG}
    assert len(frames["stalls"]) and set(frames["stalls"]["tid"]) == {HOG}
    assert set(frames["spikes"]["tid"]) <= {HOG}  # lab-hog has none of its own (it burned lab-audio's CPU)
    assert set(frames["placement"]["tid"]) == {HOG}
    system = frames["system"].set_index("figure")
    assert "lab-hog (18769)" in str(system.loc["Cycle maximum", "source"])
    whole = {s.name: s.frame for s in build_report(cap, LAB).sections if s.frame is not None}
    assert AUDIO in set(whole["stalls"]["tid"])  # without --tid: the real-time and periodic threads
