"""analyses.truth's unobservable episodes, on synthetic reads: an episode the recorder was kept off the CPU
through is counted apart from recall and precision, never as a miss or a false verdict."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyses.truth import (
    LABEL_UNOBSERVABLE,
    SAMPLER_GAP_INTERVALS,
    UNOBSERVABLE_GAP_SHARE,
    confusion,
    read_gap_ns,
    unobservable,
)

MS = 1_000_000
TID = 1001


def _reads(times_ms: list[float] | np.ndarray, tid: int = TID) -> pd.DataFrame:
    return pd.DataFrame({"tid": tid, "t_ns": (np.asarray(times_ms, dtype=float) * MS).astype(np.int64)})


def _truth(*spans_ms: tuple[float, float], cause: str = "run") -> pd.DataFrame:
    return pd.DataFrame(
        {
            "cause": cause,
            "tid": TID,
            "start_ns": [int(a * MS) for a, _ in spans_ms],
            "end_ns": [int(b * MS) for _, b in spans_ms],
        }
    )


def test_a_regular_sampler_leaves_every_episode_observable() -> None:
    reads = _reads(np.arange(0, 200, 2.0))
    truth = _truth((20, 32), (101, 107))
    assert read_gap_ns(truth, reads).tolist() == [0, 0]
    assert not unobservable(truth, reads).any()


def test_a_gap_over_half_an_episode_makes_it_unobservable_and_a_shorter_one_does_not() -> None:
    # Reads every 2 ms, with no read between 20 and 30 ms (a 10 ms gap: 5 intervals).
    times = [t for t in np.arange(0, 100, 2.0) if not 20 < t < 30]
    reads = _reads(times)
    # 12 ms episode at 22-34: the gap covers 8 ms of it (>= half): unobservable.
    # 24 ms episode at 18-42: the same gap covers 10 ms of it (under half): observable.
    truth = _truth((22, 34), (18, 42))
    assert read_gap_ns(truth, reads).tolist() == [8 * MS, 10 * MS]
    assert unobservable(truth, reads).tolist() == [True, False]


def test_a_gap_under_the_sampler_gap_bar_is_not_one() -> None:
    # One tick late (4 ms between reads, under 2.5 intervals) inside a 6 ms episode: not a sampler gap.
    assert SAMPLER_GAP_INTERVALS * 2 > 4
    times = [t for t in np.arange(0, 60, 2.0) if t != 22]
    truth = _truth((20, 26))
    assert read_gap_ns(truth, _reads(times)).tolist() == [0]
    assert UNOBSERVABLE_GAP_SHARE == 0.5


def test_an_episode_outside_the_reads_or_of_an_unread_thread_is_unobservable() -> None:
    reads = _reads(np.arange(0, 50, 2.0))
    truth = _truth((45, 60), (10, 16))
    assert unobservable(truth, reads).tolist() == [True, False]
    assert unobservable(truth, _reads(np.arange(0, 50, 2.0), tid=7)).all()
    assert not unobservable(truth, None).any()  # without reads: no claim


def test_confusion_leaves_unobservable_episodes_out_of_recall_and_precision() -> None:
    times = [t for t in np.arange(0, 400, 2.0) if not 100 < t < 130]
    reads = _reads(times)
    truth = pd.concat([_truth((10, 22), (200, 212), cause="fault"), _truth((104, 116), (300, 312), cause="run")])
    # The fault rule missed the second fault episode (said run): a real miss, and a run said wrongly. The
    # run episode inside the sampler gap was called fault: neither right nor wrong, counted apart.
    stalls = pd.DataFrame(
        {
            "tid": TID,
            "start_ns": truth["start_ns"],
            "end_ns": truth["end_ns"],
            "verdict": ["fault", "run", "fault", "run"],
        }
    )
    matrix, scores = confusion(stalls, truth, reads=reads)
    scores = scores.set_index("cause")
    assert scores.loc["run", "unobservable"] == 1 and scores.loc["run", "episodes"] == 1
    assert scores.loc["fault", "recall"] == 0.5 and scores.loc["fault", "precision"] == 1.0
    assert scores.loc["run", "recall"] == 1.0 and scores.loc["run", "precision"] == 0.5
    assert matrix[matrix["truth"] == LABEL_UNOBSERVABLE].iloc[0]["fault"] == 1
    # Without the reads, the same verdicts score the episode in the gap: fault precision falls.
    _, blind = confusion(stalls, truth)
    assert "unobservable" not in blind.columns
    assert blind.set_index("cause").loc["fault", "precision"] == 0.5
