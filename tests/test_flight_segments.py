"""The flight recorder's ring of segments and its windows (capture/segments.py, capture/window.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyses.stalls import find_stalls
from capture.errors import CaptureFormatError
from capture.format import Capture, load
from capture.segments import SegmentedWriter, closed_segments, list_segments
from capture.window import cut, join, write_capture
from tests import synth
from tests.synth import Episode

SECOND = 1_000_000_000


def _record_in_segments(cap: Capture, ring: Path, *, segment_ns: int, keep_ns: int, step_ns: int) -> SegmentedWriter:
    """Feed `cap` to a SegmentedWriter as the writer process would: a flush per step, a rotation check after it."""
    samples = cap.samples
    t0, t_end = int(samples["t_ns"].min()), int(samples["t_ns"].max())
    writer = SegmentedWriter(ring, cap.meta, segment_ns=segment_ns, keep_ns=keep_ns)
    writer.append("threads", cap.table("threads"))
    for start in range(t0, t_end + 1, step_ns):
        part = samples[(samples["t_ns"] >= start) & (samples["t_ns"] < start + step_ns)]
        writer.append("samples", part)
        writer.rotate_if_due()
    writer.append("truth", cap.truth)  # the lab's truth arrives at the end, as catch-load --lab sends it
    writer.close({"end_reason": "the duration ended"})
    return writer


def test_segments_rotate_carry_the_threads_and_read_alone(tmp_path: Path) -> None:
    cap = synth.audio_capture([], seconds=3.0)
    _record_in_segments(cap, tmp_path, segment_ns=SECOND, keep_ns=3600 * SECOND, step_ns=SECOND // 2)
    segments = list_segments(tmp_path)
    assert len(segments) >= 3
    assert closed_segments(tmp_path) == segments[:-1]
    rows = 0
    for segment in segments:
        part = load(segment.path)  # each reads alone: metadata, the threads, a trailer
        assert part.complete and part.interval_ns == cap.interval_ns
        assert set(part.threads["comm"]) == {"lab-audio"}
        assert part.meta["segment"]["index"] == segment.index
        bounds = part.trailer["segment"]
        assert (bounds["first_ns"], bounds["last_ns"]) == (part.samples["t_ns"].min(), part.samples["t_ns"].max())
        rows += len(part.samples)
    assert rows == len(cap.samples)
    assert load(segments[-1].path).trailer["end_reason"] == "the duration ended"


def test_old_segments_are_deleted_after_keep_ns(tmp_path: Path) -> None:
    cap = synth.audio_capture([], seconds=6.0)
    _record_in_segments(cap, tmp_path, segment_ns=SECOND, keep_ns=2 * SECOND, step_ns=SECOND // 2)
    segments = list_segments(tmp_path)
    assert 2 <= len(segments) <= 4  # about keep_ns / segment_ns closed ones and the last
    assert segments[0].index > 1


def test_a_window_of_the_joined_segments_gives_the_full_capture_verdict(tmp_path: Path) -> None:
    cap = synth.audio_capture([Episode("runqueue", 300, 12)], seconds=4.0)
    full = find_stalls(cap)
    assert list(full["verdict"]) == ["runqueue"]
    ring = tmp_path / "ring"
    ring.mkdir()
    _record_in_segments(cap, ring, segment_ns=SECOND, keep_ns=3600 * SECOND, step_ns=SECOND // 2)
    joined = join(s.path for s in list_segments(ring))
    assert len(joined.samples) == len(cap.samples)
    assert len(joined.threads) == 1  # carried rows once
    t = int(full["start_ns"].iloc[0])
    window = cut(joined, t - SECOND, t + SECOND, meta={"window": {"origin_ns": synth.T0}})
    path = tmp_path / "window.ssf"
    assert write_capture(path, window) == path.stat().st_size
    back = load(path)
    assert back.complete and back.meta["window"]["origin_ns"] == synth.T0
    samples = back.samples["t_ns"].to_numpy()
    assert samples.min() >= t - SECOND and samples.max() <= t + SECOND
    stalls = find_stalls(back)
    assert list(stalls["verdict"]) == ["runqueue"]
    assert np.isclose(stalls["start_ns"].iloc[0], full["start_ns"].iloc[0], atol=2_000_000)
    assert list(back.truth["cause"]) == ["runqueue"]
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_window_never_replaces_an_existing_file(tmp_path: Path) -> None:
    cap = synth.audio_capture([], seconds=0.5)
    path = tmp_path / "w.ssf"
    path.write_bytes(b"earlier")
    with pytest.raises(CaptureFormatError, match="exists already"):
        write_capture(path, cut(cap, synth.T0, synth.T0 + SECOND))
    assert path.read_bytes() == b"earlier"
    link = tmp_path / "link.ssf"
    link.symlink_to(tmp_path / "target")
    with pytest.raises(CaptureFormatError):
        write_capture(link, cut(cap, synth.T0, synth.T0 + SECOND))
    assert not (tmp_path / "target").exists()
    assert not list(tmp_path.glob(".*.tmp"))


def test_state_tables_are_kept_up_to_the_window_end(tmp_path: Path) -> None:
    graph = pd.DataFrame(
        {
            "t_ns": [synth.T0, synth.T0 + 2 * SECOND],
            "engine": ["jack", "jack"],
            "event": ["snapshot", "connected"],
            "src_client": ["a", "b"],
            "src_port": ["out", "out"],
            "dst_client": ["b", "c"],
            "dst_port": ["in", "in"],
        }
    )
    samples = synth.audio_capture([], seconds=0.2).samples
    cap = Capture.from_frames(synth.meta(), {}, engine_graph=graph, samples=samples)
    window = cut(cap, synth.T0 + SECOND, synth.T0 + SECOND + 100)
    assert list(window.engine_graph["event"]) == ["snapshot"]
