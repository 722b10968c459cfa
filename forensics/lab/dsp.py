"""The callback's real DSP work: a seeded FIR filter per stage over a buffer of seeded noise.

Bit-identical whatever thread or process runs a stage: the filter is a fixed sequence of element-wise
numpy multiplies and adds (each IEEE-754 operation is correctly rounded, so SIMD and scalar loops, aligned
or not, give the same bits). A dot product or np.convolve would hand the sum to BLAS, whose reduction
order may depend on the buffer's alignment, and the chain and series outputs could then differ by an ulp.
"""

from __future__ import annotations

import hashlib

import numpy as np

CHECKPOINT_CYCLES = 128  # the output digest is kept every this many cycles, to compare runs of any length


def noise_table(seed: int, channels: int, quantum: int, rate: int) -> np.ndarray:
    """About a second of seeded white noise in [-1, 1), a whole number of buffers long."""
    buffers = max(1, rate // quantum)
    rng = np.random.default_rng([seed, 0x1AB])
    return rng.uniform(-1.0, 1.0, size=(channels, buffers * quantum))


def input_buffer(table: np.ndarray, cycle: int, quantum: int, out: np.ndarray) -> None:
    """The input of callback number `cycle` (counted in callbacks run, not in periods: a skipped period
    does not change what the next callback computes)."""
    buffers = table.shape[1] // quantum
    start = (cycle % buffers) * quantum
    out[...] = table[:, start : start + quantum]


class FirStage:
    """One "plugin": y[n] = sum_j h[j] x[n - j] per channel, with its history carried across callbacks."""

    def __init__(self, seed: int, stage: int, taps: int, channels: int, quantum: int) -> None:
        rng = np.random.default_rng([seed, stage])
        h = rng.standard_normal(taps)
        # L2 norm 1: white noise keeps its power through any number of stages, so a long chain neither
        # grows without bound nor decays into denormal numbers (which x86 computes ~100x slower).
        h /= np.sqrt(np.square(h).sum())
        self.coefficients = [float(c) for c in h]
        self.taps = taps
        self.quantum = quantum
        self._ext = np.zeros((channels, taps - 1 + quantum))  # history (taps-1) then this buffer
        self._acc = np.empty((channels, quantum))
        self._tmp = np.empty((channels, quantum))

    def process(self, x: np.ndarray, out: np.ndarray) -> None:
        t1, q, ext, acc, tmp = self.taps - 1, self.quantum, self._ext, self._acc, self._tmp
        ext[:, t1:] = x
        np.multiply(ext[:, t1:], self.coefficients[0], out=acc)
        for j in range(1, self.taps):
            np.multiply(ext[:, t1 - j : t1 - j + q], self.coefficients[j], out=tmp)
            np.add(acc, tmp, out=acc)
        out[...] = acc
        if t1:
            ext[:, :t1] = ext[:, q : q + t1]  # numpy copies overlapping slices correctly


class OutputDigest:
    """A running BLAKE2b of every callback's output, with a checkpoint every CHECKPOINT_CYCLES callbacks."""

    def __init__(self) -> None:
        self._hash = hashlib.blake2b(digest_size=16)
        self.cycles = 0
        self.checkpoints: list[tuple[int, str]] = []

    def update(self, out: np.ndarray) -> None:
        self._hash.update(out.data.cast("B"))
        self.cycles += 1
        if self.cycles % CHECKPOINT_CYCLES == 0:
            self.checkpoints.append((self.cycles, self._hash.hexdigest()))

    def summary(self) -> dict[str, object]:
        return {"cycles": self.cycles, "digest": self._hash.hexdigest(), "checkpoints": self.checkpoints}
