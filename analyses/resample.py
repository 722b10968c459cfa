"""A capture as a slower sampler would have recorded it: keep every k-th tick.

Counters are cumulative, so dropping reads loses nothing but resolution: the deltas of the kept reads
are exactly what a sampler at k x the interval would have seen (the state letter is the snapshot at the
kept reads). This is how the sampling-rate lesson is shown on one real recording.
"""

from __future__ import annotations

import copy

from capture.errors import ForensicsError
from capture.format import Capture


def resample(cap: Capture, interval_ns: int) -> Capture:
    """An in-memory capture keeping the ticks that are multiples of interval_ns / the capture's interval."""
    meta = copy.deepcopy(cap.meta)
    recording = meta.setdefault("recording", {})
    base = int(recording.get("interval_ns") or 0)
    if base <= 0:
        raise ForensicsError("cannot resample: the capture does not say its sampling interval")
    if interval_ns % base:
        raise ForensicsError(f"cannot resample {base} ns ticks to {interval_ns} ns: not a multiple")
    step = interval_ns // base
    samples = cap.samples
    kept = samples[samples["tick"].to_numpy() % step == 0].reset_index(drop=True)
    sched = cap.sched
    if len(sched):
        sched = sched[sched["tick"].to_numpy() % step == 0].reset_index(drop=True)
    recording["interval_ns"] = interval_ns
    recording["resampled_from_ns"] = base
    tables = {name: cap.table(name) for name in cap.table_names if name not in ("samples", "sched")}
    return Capture.from_frames(meta=meta, trailer=cap.trailer, samples=kept, sched=sched, **tables)
