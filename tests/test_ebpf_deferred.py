"""The eBPF sampler's rows made after the recording (samplers/ebpf/deferred_rows.py): the writer keeps the frames
as they come and makes the rows once the trailer (or the pipe's end) has come, and the capture holds what the
writer makes live: the same samples, chunk for chunk, the same tick times, thread index, thread changes and
trailer counts."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from capture.format import load
from samplers import frames
from samplers.ebpf.tracefs import DEFAULT_RULES
from samplers.writer_process import CaptureSink
from tests.test_ebpf_rows import PID, _kernel_sent, _stream

KINDS = {"stat": frames.STAT_SLOW, "tick": frames.EBPF_TICK, "delta": frames.EBPF_DELTA, "ticks": frames.EBPF_TICKS}


def _frames(seed: int) -> list[tuple[int, bytes]]:
    """A recording's frames under the kernel's tick (drains, refused closing records, dropped frames), with thread
    rows whose names differ from the stat lines' (each thread's first stat read is then a rename), some of them
    again in the middle."""
    rng = random.Random(seed)
    stream = _stream(seed)
    ticks = sum(kind == "tick" for kind, _ in stream)
    refused_at = set(rng.sample(range(2, ticks + 1), 4))
    drops = set(rng.sample(sorted(set(range(2, ticks + 1)) - refused_at), 6))
    sent, _, _ = _kernel_sent(stream, rng, refused_at, drops)
    meta = {"format_version": 3, "sources": {}, "ebpf_sampler": {"prev_state_rules": DEFAULT_RULES.to_json()}}
    out = [(frames.META, json.dumps(meta).encode())]
    named: set[int] = set()
    for kind, payload in sent:
        if kind == "take":  # the writer's own chunk ends only
            continue
        if kind == "layout":
            # New threads, and at the second layout a few known ones again under other names (as a scan finds a
            # thread that renamed itself): their next stat line is a rename again.
            again = set(payload["tids"][:4]) if named else set()
            for tid in sorted(set(payload["tids"]) - named | again):
                comm = f"again{tid}" if tid in again else f"old{tid}"
                row = {"t_ns": 0, "tid": tid, "pid": PID, "comm": comm, "process": "p", "policy": 0, "rtprio": 0}
                out.append((frames.THREAD, json.dumps(row).encode()))
                named.add(tid)
            out.append((frames.LAYOUT, json.dumps({**payload, "sched": []}).encode()))
            continue
        out.append((KINDS[kind], payload))
    return out


def _clock() -> Callable[[], int]:
    """The writer's clock, 50 ms on at each reading: the deferred writer flushes (and keeps a block of frames)
    every 20 frames or so."""
    now = itertools.count(0, 50_000_000)
    return lambda: next(now)


def _record(path: Path, stream: list[tuple[int, bytes]], defer: bool, trailer: bool) -> tuple[CaptureSink, int]:
    """The stream through a writer; the samples rows it wrote before the recording's end."""
    sink = CaptureSink(str(path), defer_ebpf_rows=defer, clock=_clock())
    for kind, payload in stream:
        sink.handle(kind, payload)
    assert sink.writer is not None
    before_end = sink.writer.rows_written.get("samples", 0)
    if trailer:
        sink.handle(frames.TRAILER, b'{"end_reason": "duration"}')
    else:
        sink.close()  # the pipe's end without a trailer: the recorder was killed
    return sink, before_end


def _table(path: Path, name: str) -> pd.DataFrame:
    table = load(path).table(name)
    if name in ("events", "threads"):  # the renames come after the other rows when made later: compared as sets
        table = table.sort_values(list(table.columns), kind="stable").reset_index(drop=True)
    return table


@pytest.mark.filterwarnings("ignore:.*capture has no trailer")
@pytest.mark.parametrize("trailer", [True, False], ids=["trailer", "killed-recorder"])
@pytest.mark.parametrize("seed", range(3))
def test_rows_made_after_the_recording_are_those_made_during_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, trailer: bool
) -> None:
    # The first blocks kept as they came, the others compressed (RAW_BYTES).
    monkeypatch.setattr("samplers.ebpf.deferred_rows.RAW_BYTES", 100_000)
    # Several chunks in the stream's 0.84 s: their ends (rows carried across, each chunk's first row stored)
    # must be those made live.
    monkeypatch.setattr("samplers.writer_process.FLUSH_EVERY_NS", 100_000_000)
    stream = _frames(seed)
    live, live_before_end = _record(tmp_path / "live.ssf", stream, defer=False, trailer=trailer)
    later, later_before_end = _record(tmp_path / "later.ssf", stream, defer=True, trailer=trailer)
    assert live_before_end > 0 and later_before_end == 0  # made during the recording, or only after it
    assert live.writer is not None and later.writer is not None
    assert later.writer.rows_written == live.writer.rows_written
    assert live.writer.rows_written["samples"] > 1000
    for name in ("samples", "sampler_ticks", "thread_seen", "events", "threads"):
        pd.testing.assert_frame_equal(_table(tmp_path / "later.ssf", name), _table(tmp_path / "live.ssf", name))
    renamed = _table(tmp_path / "live.ssf", "events").query("kind == 'thread_renamed'")["text"]
    assert len(renamed) >= 20 and renamed.str.startswith("again").sum() == 4
    chunk_rows = [
        [len(t) for _, t in load(tmp_path / n).arrow_chunks("samples") or []] for n in ("live.ssf", "later.ssf")
    ]
    assert chunk_rows[0] == chunk_rows[1] and len(chunk_rows[0]) >= 5
    if trailer:
        live_trailer, later_trailer = (load(tmp_path / name).trailer for name in ("live.ssf", "later.ssf"))
        assert later_trailer["writer_decode_cpu_ns"] > 0 and "writer_decode_cpu_ns" not in live_trailer
        for key in ("writer_cpu_ns", "writer_decode_cpu_ns"):
            live_trailer.pop(key, None)
            later_trailer.pop(key, None)
        assert later_trailer == live_trailer


def test_the_frames_kept_are_in_a_file_without_a_name_beside_the_capture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing is left in the capture's directory, during the recording or after it (root-safe: no name to
    follow or to find); the frames are kept a block at each flush, compressed past RAW_BYTES."""
    monkeypatch.setattr("samplers.ebpf.deferred_rows.RAW_BYTES", 100_000)
    stream = _frames(0)
    sink = CaptureSink(str(tmp_path / "c.ssf"), clock=_clock())
    for kind, payload in stream:
        sink.handle(kind, payload)
    kept = sink.ebpf_deferred
    assert kept is not None and kept.bytes > 300_000 and kept.blocks > 5
    assert 100_000 < kept.bytes_kept < 100_000 + (kept.bytes - 100_000) / 2  # compressed past RAW_BYTES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.ssf"]
    sink.handle(frames.TRAILER, b'{"end_reason": "duration"}')
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.ssf"]
    assert sink.ebpf_deferred is None


def test_a_flight_ring_makes_its_rows_live(tmp_path: Path) -> None:
    """The flight watcher reads each segment's samples while the recording goes on."""
    sink = CaptureSink(str(tmp_path / "ring"), ring={"segment_ns": 2_000_000_000, "keep_ns": 10_000_000_000})
    assert not sink.defer_ebpf_rows
    assert CaptureSink(str(tmp_path / "c.ssf")).defer_ebpf_rows


def test_catch_loads_summary_gives_the_writers_cpu_after_the_end_and_unknown_before_it_has_finished() -> None:
    from forensics.cli.catch_load import _writer_text

    ten_s = 10_000_000_000
    assert _writer_text({"writer_cpu_ns": 100_000_000, "writer_decode_cpu_ns": 200_000_000}, ten_s) == (
        "1.0 %, then 0.20 s of CPU after the end making the eBPF rows"
    )
    assert _writer_text({"writer_cpu_ns": 100_000_000, "writer_decode_cpu_ns": None}, ten_s) == "1.0 %"
    assert _writer_text({}, ten_s) == "unknown: still finishing the file"  # catch-load returned first (Ctrl-C)
