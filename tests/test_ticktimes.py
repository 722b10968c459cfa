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


def test_recent_percentiles_are_numpys_over_the_last_thousand_gaps() -> None:
    """The live status line's p50 and p99 (recent_percentiles: one sort, np.percentile's linear rule)."""
    rng = np.random.default_rng(7)
    for n in (1, 2, 999, 1500):
        gaps = rng.integers(1_900_000, 2_600_000, n)
        starts = np.concatenate([[0], np.cumsum(gaps)])
        times = TickTimes()
        for s in starts.tolist():
            times.append(s)
        got = times.recent_percentiles((0, 50, 99, 99.9, 100))
        want = np.percentile(gaps[-1000:], (0, 50, 99, 99.9, 100))
        assert np.allclose(got, want, rtol=0, atol=1e-6), (n, got, want)
    assert TickTimes().recent_percentiles((50, 99)) == (None, None)
