"""Accuracy of the verdicts on real lab recordings , end to end: `catch-load --lab`, then stalls.

The lab (README, "The lab") injects episodes of known cause into its SCHED_FIFO callback thread (5.333 ms) and
stores the ground truth in the capture. Recorded at 2 ms with the /proc sources only (no delay
accounting, schedstats, taskstats or eBPF), for episodes of 5 ms or longer, at least 10 of each cause:

- 12 ms episodes of all five causes: recall and precision of run, runqueue, io, fault and lock >= 0.9;
- 6 ms episodes of run, runqueue, io and fault: the same bar. (A lock wait shorter than about a period
  plus two sampling intervals is invisible to /proc sampling: a thread asleep in S on a futex looks like
  one asleep between callbacks. tests/test_stalls.py pins that limit; eBPF lifts it.)
- a 30 s run without episodes: no verdict, except on a callback the lab itself logged as late (the
  machine is shared and virtual: a real stall it did not inject is reported, and must be).
- the sampling-rate lesson: 5 ms run episodes found at 2 ms are lost when the same capture is
  resampled to 20 ms (a 20 ms window holds ~3.75 callbacks and averages the long one away).

Precision counts as wrong a verdict on a callback the lab logged as on time; a verdict on a callback the
lab logged as late (past its deadline, half a period or longer, or started 2 ms late) without having
injected anything there is counted apart (analyses/truth.py), and so is one on an episode the lab's own
CPU clock says was not what its cause says (an io episode that stayed on the CPU). These tests record
for about 100 s in all: slow.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import forensics
from analyses.resample import resample
from analyses.stalls import find_stalls
from analyses.truth import confusion
from tests.recording import assert_verdicts_only_on_late_callbacks, record_lab_capture

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("forensics.lab.engine") is None,
        reason="the lab workload (forensics/lab/engine.py) is not in this checkout yet",
    ),
]


def record_lab(tmp_path: Path, name: str, *lab_args: str) -> forensics.Capture:
    return record_lab_capture(tmp_path / f"{name}.ssf", "--lab", *lab_args)


def scores_of(cap: forensics.Capture):
    stalls = find_stalls(cap)
    matrix, scores = confusion(stalls, cap.truth, cycles=cap.cycles, system=cap.system)
    print(matrix.to_string(index=False))  # the confusion matrix, in the test log
    print(scores.to_string(index=False))
    return scores.set_index("cause")


@pytest.mark.parametrize(
    ("episode_ms", "causes"),
    [(12, ("run", "runqueue", "io", "fault", "lock")), (6, ("run", "runqueue", "io", "fault"))],
)
def test_recall_and_precision_per_cause(tmp_path, episode_ms, causes):
    episodes = ",".join(f"{c}:10" for c in causes)
    cap = record_lab(tmp_path, f"acc{episode_ms}", "--episodes", episodes, "--episode-ms", str(episode_ms))
    assert len(cap.truth) == 10 * len(causes)
    scores = scores_of(cap)
    for cause in causes:
        # An episode the lab's own record says was not what its cause says (an io episode that never left
        # the CPU on a fast virtual disk) is left out of recall and precision; at most 3 of 10.
        assert scores.loc[cause, "episodes"] + scores.loc[cause, "not_as_injected"] == 10
        assert scores.loc[cause, "not_as_injected"] <= 3, f"{cause}: the lab did not make most of its episodes"
        assert scores.loc[cause, "recall"] >= 0.9, cause
        assert scores.loc[cause, "precision"] >= 0.9, cause


def test_clean_run_has_no_verdict(tmp_path):
    cap = record_lab(tmp_path, "clean", "--episodes", "none", "--duration", "30s")
    assert cap.truth.empty
    assert_verdicts_only_on_late_callbacks(cap)


def _overlapping(stalls, episode) -> bool:
    same = stalls[stalls["tid"] == episode.tid]
    return bool(((same["start_ns"] < episode.end_ns) & (same["end_ns"] > episode.start_ns)).any())


def test_sampling_rate_lesson(tmp_path):
    cap = record_lab(tmp_path, "lesson", "--episodes", "run:4", "--episode-ms", "5")
    at_2ms = find_stalls(cap)
    at_20ms = find_stalls(resample(cap, 20_000_000))
    found = [e for e in cap.truth.itertuples(index=False) if _overlapping(at_2ms, e)]
    lost = [e for e in found if not _overlapping(at_20ms, e)]
    print(f"5 ms run episodes: {len(cap.truth)}; found at 2 ms: {len(found)}; of those lost at 20 ms: {len(lost)}")
    # The shared VM sometimes stalls the sampler itself for tens of ms (a window that long hides a 5 ms
    # episode at 2 ms too) or the lab's thread for real (a long stall shows at 20 ms as well, and may
    # cover an episode's window): hence 3 of 4, not 4 of 4.
    assert len(found) >= 3, "5 ms episodes were missed at 2 ms"
    assert len(lost) >= 3, "at 20 ms a window holds ~3.75 callbacks: a 5 ms episode should be averaged away"
