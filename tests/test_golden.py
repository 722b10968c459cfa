"""Golden tests: the views of two small real lab captures (captures/) against expected outputs (tests/golden/).

captures/lab-episodes.ssf  `catch-load --lab --episodes run:1,runqueue:1,io:1,fault:1,lock:1 --seed 5`:
                           the lab (lab-audio, SCHED_FIFO 70, 5.333 ms) with one 20 ms episode of each cause
captures/lab-clean.ssf     `catch-load --lab --episodes none --duration 4s --seed 5`: no episode
captures/lab-ebpf.ssf      `catch-load --ebpf --delayacct --lab --episodes run:1,runqueue:1,io:1,fault:1,lock:1
                           --seed 5`: the same with the exact sources (eBPF events, taskstats with delay
                           accounting): exact episode edges, wakers, blkio delay

Recorded on the project's VM (2 CPUs, kernel 6.18, no schedstats, delay accounting off). A change to an
analysis that changes what users read shows here as a diff; when the change is meant, regenerate with
`FORENSICS_REGOLD=1 python -m pytest tests/test_golden.py` and review the diff of tests/golden/.
"""

from __future__ import annotations

import pytest

import forensics
from analyses.stalls import find_stalls
from analyses.truth import confusion
from tests.helpers import REPO, assert_matches_golden

EPISODES = "captures/lab-episodes.ssf"
CLEAN = "captures/lab-clean.ssf"
EBPF = "captures/lab-ebpf.ssf"

CASES = [
    ("lab-episodes.stalls.json", ["stalls", EPISODES, "--json", "--episodes"]),
    ("lab-episodes.stalls.txt", ["stalls", EPISODES, "--truth", "--episodes"]),
    ("lab-episodes.summarize.txt", ["summarize", EPISODES]),
    ("lab-episodes.spikes.txt", ["spikes", EPISODES]),
    ("lab-episodes.system.txt", ["system", EPISODES]),
    ("lab-clean.stalls.txt", ["stalls", CLEAN, "--episodes"]),
    ("lab-clean.jitter.txt", ["jitter", CLEAN]),
    ("lab-clean.system.json", ["system", CLEAN, "--json"]),
    ("lab-ebpf.stalls.txt", ["stalls", EBPF, "--truth", "--episodes"]),
    ("lab-ebpf.stalls.json", ["stalls", EBPF, "--json", "--episodes"]),
    ("lab-ebpf.proc-only.stalls.txt", ["stalls", EBPF, "--proc-only", "--truth", "--episodes"]),
    ("lab-ebpf.summarize.txt", ["summarize", EBPF]),
]


@pytest.mark.parametrize(("name", "args"), CASES, ids=[c[0] for c in CASES])
def test_golden_output(run_module, name, args):
    result = run_module("forensics", *args)
    assert result.returncode == 0, result.stderr
    assert_matches_golden(result.stdout, name)


def test_episodes_capture_verdicts_match_its_ground_truth():
    cap = forensics.load(REPO / EPISODES)
    stalls = find_stalls(cap)
    _, scores = confusion(stalls, cap.truth, cycles=cap.cycles)
    assert sorted(scores["cause"]) == ["fault", "io", "lock", "run", "runqueue"]
    assert (scores["recall"] == 1).all() and (scores["precision"] == 1).all()


def test_ebpf_capture_verdicts_are_exact_and_name_the_holder():
    cap = forensics.load(REPO / EBPF)
    stalls = find_stalls(cap)
    audio = stalls[stalls["tid"] == cap.cycles["tid"].iloc[0]].set_index("verdict")
    assert sorted(audio.index) == ["fault", "io", "lock", "run", "runqueue"]
    assert (audio["basis"] == "ebpf").all()
    truth = cap.truth.set_index("cause")
    assert audio.loc["lock", "waker_tid"] == truth.loc["lock", "holder_tid"]
    assert audio.loc["runqueue", "ran_instead_tid"] == truth.loc["runqueue", "competitor_tid"]
    for cause in ("io", "lock", "runqueue"):
        assert abs(audio.loc[cause, "start_ns"] - truth.loc[cause, "start_ns"]) < 500_000
        assert abs(audio.loc[cause, "end_ns"] - truth.loc[cause, "end_ns"]) < 500_000
    assert audio.loc["io", "ts_blkio_ns"] >= 0.8 * audio.loc["io", "io_ns"]
    assert audio.loc["lock", "ts_blkio_ns"] == 0


def test_clean_capture_has_no_verdict():
    cap = forensics.load(REPO / CLEAN)
    assert find_stalls(cap).empty
    assert cap.truth.empty and len(cap.cycles) > 700
