"""analyses.truth's unobservable episodes, on synthetic reads: an episode the recorder was kept off the CPU
through is counted apart from recall and precision, never as a miss or a false verdict. And the edge
check's rows whose end is the thread's run after the wait (ends_in_own_run), on a synthetic switch record."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyses.truth import (
    LABEL_UNOBSERVABLE,
    SAMPLER_GAP_INTERVALS,
    UNOBSERVABLE_GAP_SHARE,
    confusion,
    edge_errors,
    ends_in_own_run,
    read_gap_ns,
    run_after_ns,
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


PERIOD_NS = 5_333_333  # the lab's period: the run bar is half of it, 2.67 ms


def _edges_after_storm(stall_end_ms: float, on_cpu_ms: list[tuple[float, float]], cause: str = "fault"):
    """(edge_errors, on_cpu, cycles): a 12 ms truth episode at 10-22 ms in a callback of 10-23.5 ms, its
    stall episode from 10.03 ms to stall_end_ms, and the thread's on-CPU intervals (ms)."""
    truth = _truth((10, 22), cause=cause)
    stalls = pd.DataFrame(
        {"tid": TID, "start_ns": [int(10.03 * MS)], "end_ns": [int(stall_end_ms * MS)], "verdict": cause}
    )
    deadlines = np.arange(1, 8) * PERIOD_NS
    cycles = pd.DataFrame(
        {"tid": TID, "start_ns": deadlines - PERIOD_NS, "end_ns": deadlines - PERIOD_NS + MS, "deadline_ns": deadlines}
    )
    cycles.loc[1, ["start_ns", "end_ns"]] = [int(10 * MS), int(23.5 * MS)]  # the callback that holds it
    on_cpu = pd.DataFrame(
        {"tid": TID, "start_ns": [int(a * MS) for a, _ in on_cpu_ms], "end_ns": [int(b * MS) for _, b in on_cpu_ms]}
    )
    return edge_errors(stalls, truth, cycles), on_cpu, cycles


def test_an_episode_ending_at_the_switch_out_of_a_long_run_after_the_storm_is_left_out() -> None:
    # The capture beside stress-ng: on CPU from before the storm to 2.85 ms past its end, the episode ending
    # at that switch-out (its run component 2.88 ms). Nothing in the truth times that end.
    errors, on_cpu, cycles = _edges_after_storm(24.85, [(9.9, 24.85), (30.0, 31.0)])
    assert run_after_ns(errors, on_cpu).tolist() == [int(2.85 * MS)]
    assert ends_in_own_run(errors, on_cpu, cycles).tolist() == [True]


def test_after_a_wait_the_run_is_counted_from_the_switch_in_that_ended_it() -> None:
    # The thread woke from its last D wait and was switched in at 21.95 ms; the lab's clock stopped at 22
    # (its Python returning); the episode ends at the switch-out 2.69 ms after the switch-in: the run the
    # episode took in (2.64 ms past the truth's end) reached the bar.
    errors, on_cpu, cycles = _edges_after_storm(24.64, [(9.9, 10.03), (21.95, 24.64)], cause="io")
    assert run_after_ns(errors, on_cpu).tolist() == [int(24.64 * MS) - int(21.95 * MS)]
    assert ends_in_own_run(errors, on_cpu, cycles).tolist() == [True]


def test_a_run_after_shorter_than_the_bar_or_broken_by_a_switch_is_compared() -> None:
    # 2.0 ms past the storm: under the run bar, so the episode should not have taken it in (a wrong end,
    # which the edge check must see).
    errors, on_cpu, cycles = _edges_after_storm(24.0, [(9.9, 24.0)])
    assert run_after_ns(errors, on_cpu).tolist() == [2 * MS]
    assert ends_in_own_run(errors, on_cpu, cycles).tolist() == [False]
    # The thread left its CPU at 22.5 ms and the episode ends at a later switch-out: not one stretch.
    errors, on_cpu, cycles = _edges_after_storm(25.5, [(9.9, 22.5), (23.0, 25.5)])
    assert run_after_ns(errors, on_cpu).tolist() == [0]
    assert not ends_in_own_run(errors, on_cpu, cycles).any()


def test_a_run_episode_is_compared_with_its_callback_not_left_out_for_its_run_after() -> None:
    errors, on_cpu, cycles = _edges_after_storm(24.85, [(9.9, 24.85)], cause="run")
    assert errors["end_reference"].tolist() == ["callback"]
    assert not ends_in_own_run(errors, on_cpu, cycles).any()
