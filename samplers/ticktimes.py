"""Achieved tick intervals in constant memory, however long the recording.

The hot loop appends each tick's start time to a short list; every FOLD ticks the gaps are folded into
a histogram of 1 us bins (up to 100 ms, beyond which every gap is kept exactly: those are rare and
they are the ones that matter). Percentiles come from the histogram, exact to 1 us.
"""

from __future__ import annotations

import numpy as np

BIN_NS = 1_000
BINS = 100_000  # 1 us bins up to 100 ms: 800 KB
FOLD = 4096


class TickTimes:
    def __init__(self) -> None:
        self.histogram = np.zeros(BINS, dtype=np.int64)
        self.long_gaps: list[int] = []  # gaps of 100 ms or more, exact
        self.pending: list[int] = []
        self.last: int | None = None
        self.count = 0
        self.total_ns = 0
        self.max_ns = 0
        self.recent = np.zeros(0, dtype=np.int64)

    def append(self, start_ns: int) -> None:
        self.pending.append(start_ns)
        if len(self.pending) >= FOLD:
            self.fold()

    def fold(self) -> None:
        if not self.pending:
            return
        starts = np.array(self.pending if self.last is None else [self.last, *self.pending], dtype=np.int64)
        self.last = self.pending[-1]
        self.pending = []
        gaps = np.diff(starts)
        if not len(gaps):
            return
        self.recent = np.concatenate((self.recent, gaps))[-1000:]
        self.count += len(gaps)
        self.total_ns += int(gaps.sum())
        self.max_ns = max(self.max_ns, int(gaps.max()))
        bins = gaps // BIN_NS
        long = bins >= BINS
        if long.any():
            self.long_gaps.extend(gaps[long].tolist())
        kept = bins[~long]
        if len(kept):
            # Counted up to the longest gap only: with minlength=BINS each fold made and added 800 KB (a status
            # every 500 ms folds, so that was most of its 0.7 ms).
            counts = np.bincount(kept)
            self.histogram[: len(counts)] += counts

    def percentile(self, q: float) -> float | None:
        """The q-th percentile gap in ns (bin centre, or the exact value beyond 100 ms)."""
        self.fold()
        if self.count == 0:
            return None
        rank = q / 100.0 * (self.count - 1)
        cumulative = np.cumsum(self.histogram)
        if rank < cumulative[-1]:
            index = int(np.searchsorted(cumulative, rank, side="right"))
            return (index + 0.5) * BIN_NS
        ordered = sorted(self.long_gaps)
        return float(ordered[min(len(ordered) - 1, int(rank - cumulative[-1]))])

    def recent_percentiles(self, qs: tuple[float, ...]) -> tuple[float | None, ...]:
        """Percentiles of the last 1000 gaps (the live status line's p50 and p99, every 500 ms), by np.percentile's
        linear rule from one sort: np.percentile itself took 0.4 ms, cold after the recorder's sleeps, the sort
        0.07."""
        self.fold()
        n = len(self.recent)
        if not n:
            return tuple(None for _ in qs)
        ordered = np.sort(self.recent).tolist()
        out: list[float | None] = []
        for q in qs:
            rank = q / 100.0 * (n - 1)
            lo = int(rank)
            hi = min(lo + 1, n - 1)
            out.append(ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo))
        return tuple(out)

    @property
    def mean_ns(self) -> float | None:
        self.fold()
        return self.total_ns / self.count if self.count else None
