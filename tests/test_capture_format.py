"""The capture container: round trip, version refusal, truncation and damage."""

from __future__ import annotations

import struct
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import forensics
from capture.errors import CaptureFormatError, CaptureWarning
from capture.format import FORMAT_VERSION, MAGIC, CaptureWriter, load


def _samples(ticks: int, tids: list[int], start: int = 0) -> dict[str, np.ndarray]:
    tick = np.repeat(np.arange(start, start + ticks, dtype=np.uint32), len(tids))
    tid = np.tile(np.array(tids, dtype=np.int32), ticks)
    return {
        "tick": tick,
        "t_ns": tick.astype(np.int64) * 2_000_000 + tid,
        "tid": tid,
        "pid": np.full(len(tick), tids[0], dtype=np.int32),
        "run_ns": tick.astype(np.int64) * 1_000_000 * (tid % 2),
        "wait_ns": tick.astype(np.int64) * 10,
        "slices": tick.astype(np.int64),
        "state": np.where(tid % 2 == 1, "R", "S"),
        "minflt": tick.astype(np.int64) * 3,
        "majflt": np.zeros(len(tick), dtype=np.int64),
        "utime": tick.astype(np.int64) // 5,
        "stime": tick.astype(np.int64) // 10,
        "nice": np.zeros(len(tick), dtype=np.int8),
        "cpu": (tid % 2).astype(np.int16),
        "rtprio": np.where(tid % 2 == 1, 85, 0).astype(np.int16),
        "policy": np.where(tid % 2 == 1, 1, 0).astype(np.int8),
        "blkio_ticks": np.zeros(len(tick), dtype=np.int64),
        "starttime": (tid.astype(np.int64) * 7),
    }


def _write(path: Path, trailer: bool = True, chunks: int = 3) -> None:
    writer = CaptureWriter(path, {"recording": {"interval_ns": 2_000_000}, "note": "test"})
    for c in range(chunks):
        writer.append("samples", _samples(100, [11, 12, 13], start=100 * c))
        writer.append("events", {"t_ns": [c], "kind": ["marker"], "pid": [None], "tid": [None], "text": [f"m{c}"]})
    writer.update_meta({"added": "later"})
    writer.close({"ticks": 300, "missed_ticks": 0} if trailer else None)


def test_round_trip_keeps_every_value_and_type(tmp_path: Path) -> None:
    path = tmp_path / "a.ssf"
    _write(path)
    cap = forensics.load(path)
    assert cap.complete and cap.warnings == []
    assert cap.meta["note"] == "test" and cap.meta["added"] == "later"
    assert cap.meta["format_version"] == FORMAT_VERSION
    assert cap.trailer is not None and cap.trailer["ticks"] == 300
    # thread_seen: the writer's own index of thread lifetimes, one row per thread per samples chunk.
    assert cap.trailer["rows"] == {"samples": 900, "events": 3, "thread_seen": 9}
    seen = cap.table("thread_seen").groupby("tid").agg(first=("first_ns", "min"), last=("last_ns", "max"))
    assert seen.loc[12].tolist() == [12, 299 * 2_000_000 + 12]
    expected = pd.concat(
        [pd.DataFrame(_samples(100, [11, 12, 13], start=100 * c)) for c in range(3)], ignore_index=True
    )
    got = cap.samples
    assert list(got.columns) == list(expected.columns)
    for column in expected.columns:
        if column == "state":
            assert got[column].astype(str).tolist() == expected[column].tolist()
        else:
            assert got[column].dtype == expected[column].dtype, column
            np.testing.assert_array_equal(got[column].to_numpy(), expected[column].to_numpy(), err_msg=column)
    assert cap.events["text"].tolist() == ["m0", "m1", "m2"]
    assert cap.truth.columns.tolist() == ["cause", "tid", "start_ns", "end_ns"] and cap.truth.empty


def test_a_mostly_idle_thread_costs_little_on_disk(tmp_path: Path) -> None:
    # 100 threads, 2500 ticks; counters barely move: the delta encoding must keep this far below 12 B.
    path = tmp_path / "idle.ssf"
    with CaptureWriter(path, {}) as writer:
        for c in range(10):
            data = _samples(250, list(range(1000, 1100)), start=250 * c)
            data["run_ns"] = data["run_ns"] // 1000
            writer.append("samples", data)
    per_sample = path.stat().st_size / (100 * 2500)
    assert per_sample < 4, per_sample


def test_newer_format_version_is_refused_with_a_plain_message(tmp_path: Path) -> None:
    path = tmp_path / "future.ssf"
    _write(path)
    data = bytearray(path.read_bytes())
    struct.pack_into("<H", data, len(MAGIC), FORMAT_VERSION + 1)
    path.write_bytes(bytes(data))
    newer = rf"format version {FORMAT_VERSION + 1}, newer than this forensics reads \(up to {FORMAT_VERSION}\)"
    with pytest.raises(CaptureFormatError, match=newer):
        load(path)


def test_not_a_capture(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    with pytest.raises(CaptureFormatError, match="is not a capture file"):
        load(path)
    with pytest.raises(CaptureFormatError, match="no such capture"):
        load(tmp_path / "missing.ssf")


def test_truncated_capture_reads_back_what_is_whole_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "cut.ssf"
    _write(path, trailer=False)
    data = path.read_bytes()
    path.write_bytes(data[:-50])  # cut into the last record, as a killed writer would
    with pytest.warns(CaptureWarning) as caught:
        cap = load(path)
    messages = " ".join(str(w.message) for w in caught)
    assert "truncated" in messages and "no trailer" in messages
    assert not cap.complete
    assert len(cap.samples) == 900  # the last record was an events chunk; every samples chunk survived
    assert len(cap.events) == 2


def test_damaged_record_stops_reading_there(tmp_path: Path) -> None:
    path = tmp_path / "bad.ssf"
    _write(path)
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF  # inside the trailer's payload
    path.write_bytes(bytes(data))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cap = load(path)
    assert any("CRC" in str(w.message) for w in caught)
    assert len(cap.samples) == 900 and cap.trailer is None


def test_cli_prints_one_line_for_a_bad_file(tmp_path: Path, run_module) -> None:
    bad = tmp_path / "x.ssf"
    bad.write_bytes(b"PK\x03\x04 not ours")
    result = run_module("forensics", "info", str(bad))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "is not a capture file" in result.stderr and "Traceback" not in result.stderr


def test_a_usage_error_is_one_line_too(run_module) -> None:
    result = run_module("forensics", "stalls", "--format", "xml", "captures/lab-clean.ssf")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Usage:" not in result.stderr
    assert "'xml' is not one of" in result.stderr and "forensics stalls --help" in result.stderr


def test_info_fits_100_columns_even_with_a_long_command_line(run_module) -> None:
    result = run_module("forensics", "info", "captures/lab-ebpf.ssf")
    assert result.returncode == 0, result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) <= 100
    assert "--episodes" in result.stdout  # wrapped, not cut


def test_a_chunk_is_stored_sorted_by_thread_then_time_whether_or_not_it_came_sorted() -> None:
    """encode_chunk sorts a table by (tid, tick) unless it is already in that order (the eBPF writer's rows
    are: the check costs a tenth of the sort): rows sorted by tid but not by tick within one are sorted, and
    a sorted table is stored as it came."""
    import pyarrow as pa

    from capture.chunks import encode_chunk, in_order, read_chunk_columns

    def stored(tid: list[int], tick: list[int]) -> list[tuple[int, int]]:
        table = read_chunk_columns(encode_chunk(pa.table({"tid": tid, "tick": tick})))
        return list(zip(table["tid"].to_pylist(), table["tick"].to_pylist(), strict=True))

    assert in_order(pa.chunked_array([[1, 1, 2]]), pa.chunked_array([[5, 6, 1]]))
    assert not in_order(pa.chunked_array([[1, 1, 2]]), pa.chunked_array([[6, 5, 1]]))  # tick back within a tid
    assert not in_order(pa.chunked_array([[2, 1]]), pa.chunked_array([[1, 2]]))
    assert not in_order(pa.chunked_array([[1, None]]), pa.chunked_array([[1, 2]]))  # nulls: sort_by decides
    assert in_order(pa.chunked_array([[7]]), pa.chunked_array([[1]]))
    assert stored([1, 1, 2], [6, 5, 1]) == [(1, 5), (1, 6), (2, 1)]
    assert stored([2, 1, 1], [1, 6, 5]) == [(1, 5), (1, 6), (2, 1)]
    assert stored([1, 1, 2], [5, 6, 1]) == [(1, 5), (1, 6), (2, 1)]


def test_a_capture_without_a_trailer_whose_writer_still_has_it_open_says_so(tmp_path: Path) -> None:
    """A writer finishing the file (the eBPF sampler's rows are made after the recording) is not a killed one:
    its lock (CaptureWriter) tells them apart, and the lock goes with the writer."""
    path = tmp_path / "c.ssf"
    writer = CaptureWriter(path, {"interval_ns": 2_000_000})
    writer.append("events", {"t_ns": [1], "kind": ["marker"], "pid": [None], "tid": [None], "text": ["a"]})
    with pytest.warns(CaptureWarning, match="still being written"):
        assert len(load(path).events) == 1
    writer.close(None)
    with pytest.warns(CaptureWarning, match="has no trailer: the recorder did not finish"):
        assert len(load(path).events) == 1
