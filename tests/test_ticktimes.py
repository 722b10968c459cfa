"""Tick interval statistics in constant memory agree with exact percentiles."""

from __future__ import annotations

import numpy as np

from samplers.ticktimes import BINS, FOLD, TickTimes


def test_percentiles_match_exact_ones_to_the_bin_width() -> None:
    rng = np.random.default_rng(1)
    gaps = np.concatenate([rng.normal(2_000_000, 30_000, 20_000).astype(np.int64), [150_000_000, 7_000_000]])
    starts = np.concatenate([[0], np.cumsum(gaps)])
    times = TickTimes()
    for s in starts.tolist():
        times.append(s)
    for q in (50, 99):
        assert abs(times.percentile(q) - np.percentile(gaps, q)) <= 1_000
    assert times.max_ns == 150_000_000  # a long gap is kept exactly
    assert times.percentile(100) == 150_000_000
    assert times.count == len(gaps)
    assert abs(times.mean_ns - gaps.mean()) < 1


def test_memory_does_not_grow_with_the_recording() -> None:
    times = TickTimes()
    for i in range(10 * FOLD):
        times.append(i * 2_000_000)
    assert len(times.pending) < FOLD and len(times.recent) == 1000
    assert times.histogram.shape == (BINS,) and times.long_gaps == []
