"""Golden tests: the views of two small real lab captures (captures/) against expected outputs (tests/golden/).

captures/lab-episodes.ssf  `catch-load --lab --episodes run:1,runqueue:1,io:1,fault:1,lock:1 --seed 5`:
                           the lab (lab-audio, SCHED_FIFO 70, 5.333 ms) with one 20 ms episode of each cause
captures/lab-clean.ssf     `catch-load --lab --episodes none --duration 4s --seed 5`: no episode

Recorded on the project's VM (2 CPUs, kernel 6.18, no schedstats, delay accounting off). A change to an
analysis that changes what users read shows here as a diff; when the change is meant, regenerate with
`FORENSICS_REGOLD=1 python -m pytest tests/test_golden.py` and review the diff of tests/golden/.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import forensics
from analyses.stalls import find_stalls
from analyses.truth import confusion

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "golden"
EPISODES = "captures/lab-episodes.ssf"
CLEAN = "captures/lab-clean.ssf"

CASES = [
    ("lab-episodes.stalls.json", ["stalls", EPISODES, "--json"]),
    ("lab-episodes.stalls.txt", ["stalls", EPISODES, "--truth"]),
    ("lab-episodes.summarize.txt", ["summarize", EPISODES]),
    ("lab-episodes.spikes.txt", ["spikes", EPISODES]),
    ("lab-episodes.system.txt", ["system", EPISODES]),
    ("lab-clean.stalls.txt", ["stalls", CLEAN]),
    ("lab-clean.jitter.txt", ["jitter", CLEAN]),
    ("lab-clean.system.json", ["system", CLEAN, "--json"]),
]


@pytest.mark.parametrize(("name", "args"), CASES, ids=[c[0] for c in CASES])
def test_golden_output(run_module, name, args):
    result = run_module("forensics", *args)
    assert result.returncode == 0, result.stderr
    expected = GOLDEN / name
    if os.environ.get("FORENSICS_REGOLD"):
        expected.write_text(result.stdout)
    assert result.stdout == expected.read_text()


def test_episodes_capture_verdicts_match_its_ground_truth():
    cap = forensics.load(REPO / EPISODES)
    stalls = find_stalls(cap)
    _, scores = confusion(stalls, cap.truth, cycles=cap.cycles)
    assert sorted(scores["cause"]) == ["fault", "io", "lock", "run", "runqueue"]
    assert (scores["recall"] == 1).all() and (scores["precision"] == 1).all()


def test_clean_capture_has_no_verdict():
    cap = forensics.load(REPO / CLEAN)
    assert find_stalls(cap).empty
    assert cap.truth.empty and len(cap.cycles) > 700
