"""Damage named where it is (issue 23 items 6-9).

- A hole is named per table, from that table's own rows read around it, and the views that decide over
  it (stalls, spikes) say "no verdict" for that span; a span never runs backwards.
- A table chunk held twice (a file joined to itself) is read once, with a warning; rows beyond what the
  trailer counts are a warning.
- Finding the next intact record after damage takes work linear in the bytes passed over: counted as the
  bytes handed to CRC-32, never timed.
- `info` counts the rows that read back, beside the trailer's count where they differ.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
import zlib
from pathlib import Path

import pyarrow as pa
import pytest

from capture.chunks import read_chunk_columns
from capture.format import _CHECKPOINT, _HEADER, _RECORD, TAG_TABLE, TAG_TRAILER, Capture, crc_shift, load
from tests.damaged import crafted, crc_bytes_counted, encode, many_holes
from tests.helpers import REPO, child_env

MARKERS = REPO / "captures" / "lab-markers.ssf"  # format 2, ~1 s chunks, five stall episodes
EPISODES = REPO / "captures" / "lab-episodes.ssf"  # format 1


def records(data: bytes) -> list[tuple[int, bytes, bytes]]:
    """[(offset, tag, payload)] of an intact capture."""
    out, offset = [], _HEADER.size
    while offset < len(data):
        tag, length, _ = _RECORD.unpack_from(data, offset)
        out.append((offset, tag, data[offset + _RECORD.size : offset + _RECORD.size + length]))
        offset += _RECORD.size + length
    return out


def chunk(payload: bytes) -> tuple[str, pa.Table]:
    n = int.from_bytes(payload[:2], "little")
    return payload[2 : 2 + n].decode(), read_chunk_columns(payload[2 + n :])


def loaded(data: bytes, path: Path) -> tuple[Capture, list[str]]:
    path.write_bytes(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cap = load(path)
    return cap, cap.warnings


def forensics(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "forensics", *args], capture_output=True, text=True, env=child_env(), cwd=REPO
    )


def seconds(ns: int, origin: int) -> str:
    return f"{(ns - origin) / 1e9:.3f}"


# -- item 6: holes named per table --------------------------------------------------------------------


def test_a_zeroed_samples_chunk_is_named_by_its_own_rows_and_stalls_says_no_verdict(tmp_path: Path) -> None:
    """The issue's case: 4 KiB zeroed in a format-2 capture took a second of samples; the warning named
    a 2 ms span, and the stall episode inside the lost second vanished from `stalls` without a word."""
    data = MARKERS.read_bytes()
    intact = load(MARKERS)
    samples = intact.samples
    origin = int(samples["t_ns"].min())
    episodes = json.loads(forensics("stalls", str(MARKERS), "--episodes", "--json").stdout)["sections"]["stalls"]
    io_episode = next(e for e in episodes if e["verdict"] == "io")
    # The samples chunk that holds the io episode; 4 KiB of its payload zeroed.
    offset, lost = next(
        (o, t)
        for o, tag, p in records(data)
        if tag == TAG_TABLE
        and (t := chunk(p))[0] == "samples"
        and min(t[1].column("t_ns").to_pylist()) <= io_episode["start_ns"] <= max(t[1].column("t_ns").to_pylist())
    )
    damaged = bytearray(data)
    damaged[offset + 2000 : offset + 2000 + 4096] = bytes(4096)
    path = tmp_path / "zeroed.ssf"
    cap, messages = loaded(bytes(damaged), path)

    lost_times = lost[1].column("t_ns").to_pylist()
    before = int(samples["t_ns"][samples["t_ns"] < min(lost_times)].max())
    after = int(samples["t_ns"][samples["t_ns"] > max(lost_times)].min())
    assert len(cap.samples) == len(samples) - len(lost_times)
    assert after - before > 0.9e9  # a second of samples, named as such
    assert [(d.table, d.after_ns, d.before_ns) for d in cap.damage] == [("samples", before, after)]
    named = [m for m in messages if "held samples rows" in m]
    assert len(named) == 1 and f"between {seconds(before, origin)} s and {seconds(after, origin)} s" in named[0]
    # The other tables ran on (the trailer counts them all): not named.
    assert not any(t in named[0] for t in ("processes", "system rows", "events"))

    damaged_stalls = json.loads(forensics("stalls", str(path), "--episodes", "--json").stdout)
    assert io_episode["start_ns"] not in [e["start_ns"] for e in damaged_stalls["sections"]["stalls"]]
    note = f"No verdict for {seconds(before, origin)}-{seconds(after, origin)} s: the capture is damaged there"
    assert any(n.startswith(note) and "samples" in n for n in damaged_stalls["notes"]), damaged_stalls["notes"]
    table = forensics("stalls", str(path))  # incidents, as printed
    assert table.returncode == 0 and note in " ".join(table.stdout.split())
    assert "No verdict" not in forensics("stalls", str(MARKERS)).stdout
    # A span that does not touch the damage has no note; one that does, has it.
    assert note not in forensics("stalls", str(path), "--span", "0s..1s").stdout
    assert note in " ".join(forensics("spikes", str(path)).stdout.split())
    assert note in " ".join(forensics("xruns", str(path)).stdout.split())


def test_without_a_trailer_the_tables_that_stop_across_a_hole_are_named(tmp_path: Path) -> None:
    """Damage through a record's header: the records no longer say what the hole held, and there is no
    trailer to count against. The tables whose rows stop for far longer than their pace are named (samples,
    every 2 ms), those that run on across it are not (system, processes: 20 Hz)."""
    recs = records(MARKERS.read_bytes())
    body = [(tag, p) for _, tag, p in recs if tag != TAG_TRAILER]
    data = encode(2, body)
    at = next(
        i for i, (tag, p) in enumerate(body) if tag == TAG_TABLE and chunk(p)[0] == "samples" and i > len(body) // 2
    )
    start = len(encode(2, body[:at]))  # the samples record, then its thread_seen index
    end = start + _RECORD.size + len(body[at][1]) + 6  # into the next record's header
    damaged = bytearray(data)
    damaged[start + 500 : end] = bytes(end - start - 500)
    cap, messages = loaded(bytes(damaged), tmp_path / "no-trailer.ssf")
    named = {d.table for d in cap.damage}
    assert "samples" in named and not named & {"system", "processes"}, messages
    samples = next(d for d in cap.damage if d.table == "samples")
    assert samples.after_ns is not None and samples.before_ns is not None
    assert samples.before_ns - samples.after_ns > 0.9e9


def test_a_span_never_runs_backwards(tmp_path: Path) -> None:
    """Chunks of a table out of time order around a hole (hand-made, or two recordings joined): when the
    rows were is unknown, and said so, never "between 2.016 s and 1.554 s"."""
    recs = [(tag, p) for _, tag, p in records(MARKERS.read_bytes())]
    samples = [i for i, (tag, p) in enumerate(recs) if tag == TAG_TABLE and chunk(p)[0] == "samples"]
    damaged_index = samples[5]
    body = list(recs)
    # Around the damaged chunk: a late chunk just before it, an early one just after.
    body[samples[4]], body[samples[10]] = body[samples[10]], body[samples[4]]
    body[samples[6]], body[samples[2]] = body[samples[2]], body[samples[6]]
    data = bytearray(encode(2, body))
    offset = len(encode(2, body[:damaged_index]))
    data[offset + 100] ^= 0x10  # the samples record in between: damaged payload
    cap, messages = loaded(bytes(data), tmp_path / "unordered.ssf")
    for damage in cap.damage:
        assert damage.after_ns is None or damage.before_ns is None or damage.after_ns <= damage.before_ns
    (samples_damage,) = [d for d in cap.damage if d.table == "samples"]
    assert samples_damage.after_ns is None and samples_damage.before_ns is None
    assert any("samples rows at an unknown time" in m for m in messages), messages


# -- item 7: copies and excess rows -------------------------------------------------------------------


def test_a_capture_joined_to_itself_reads_once_and_says_so(tmp_path: Path) -> None:
    data = MARKERS.read_bytes()
    cap, messages = loaded(data + data, tmp_path / "twice.ssf")
    single = load(MARKERS)
    assert {n: len(cap.table(n)) for n in cap.table_names} == {n: len(single.table(n)) for n in single.table_names}
    assert any(f"another capture (format 2) starts at byte {len(data)}" in m for m in messages), messages
    copies = [m for m in messages if "table chunks twice" in m]
    assert len(copies) == 1 and "samples 33" in copies[0] and "dropped" in copies[0]
    assert not any("damaged" in m or "more rows" in m or "fewer rows" in m for m in messages), messages
    assert cap.damage == []

    def incidents(path: Path) -> list[str]:
        out = json.loads(forensics("stalls", str(path), "--json").stdout)
        return [json.dumps(row, sort_keys=True) for row in out["sections"]["incidents"]]

    assert incidents(tmp_path / "twice.ssf") == incidents(MARKERS)


def test_rows_beyond_the_trailer_are_a_warning(tmp_path: Path) -> None:
    """Two recordings joined (format 2, then format 1): both read, and the rows beyond the last trailer's
    counts are said."""
    first, second = load(MARKERS), load(EPISODES)
    cap, messages = loaded(MARKERS.read_bytes() + EPISODES.read_bytes(), tmp_path / "two.ssf")
    assert len(cap.samples) == len(first.samples) + len(second.samples)
    assert any("another capture (format 1) starts at byte" in m for m in messages), messages
    more = [m for m in messages if "more rows than its trailer says were written" in m]
    assert len(more) == 1 and f"samples {len(cap.samples)} of {len(second.samples)}" in more[0]


# -- item 8: resync linear ------------------------------------------------------------------------------


def test_crc_shift_is_what_zero_bytes_do_to_a_crc() -> None:
    for length in (0, 1, 7, 8, 255, 4096, 100_003):
        for start in (0, 1, 0xDEADBEEF, 0xFFFFFFFF):
            zeros = bytes(length)
            assert crc_shift(start, length) == zlib.crc32(zeros, start) ^ zlib.crc32(zeros, 0)


@pytest.mark.parametrize(
    ("build", "unit"),
    [
        (lambda n: crafted(n, spacing=64), 2**18),  # a fake table header every 64 bytes
        (lambda n: crafted(n, spacing=12), 2**16),  # every 12 bytes: as dense as headers go
        (lambda n: many_holes(n // 4096), 2**20),  # many holes, each starting with a record claiming the file
    ],
    ids=["crafted-64", "crafted-12", "many-holes"],
)
def test_finding_the_next_intact_record_is_linear(tmp_path: Path, build, unit: int) -> None:  # type: ignore[no-untyped-def]
    """The bytes checked grow as the damage does (x4 for x4), within three times the file (the first
    damaged record checked over all it claims, the prefix CRCs, the intact records) and two checkpoints
    per fake record; the reader before this change checked ~n**2 / (2 * spacing) bytes (the 64-spacing
    case at 1 MiB: 8 GiB; 76 s on the issue's 4 MB). Counted, never timed."""
    work = []
    for n in (unit, 4 * unit):
        data = build(n)
        path = tmp_path / f"{n}.ssf"
        path.write_bytes(data)
        with crc_bytes_counted() as counted, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cap = load(path)
        assert cap.complete, "the trailer after the damage was found"
        fake_records = data.count(TAG_TABLE)
        assert counted[0] <= 3 * len(data) + fake_records * 2 * _CHECKPOINT
        work.append(counted[0])
    assert work[1] <= 4.5 * work[0], work


# -- item 9: info counts the rows read --------------------------------------------------------------------


def test_info_counts_the_rows_that_read_back_beside_the_trailers(tmp_path: Path) -> None:
    data = bytearray(MARKERS.read_bytes())
    offset, payload = next(
        (o, p) for o, tag, p in records(bytes(data)) if tag == TAG_TABLE and chunk(p)[0] == "samples"
    )
    data[offset + 2000] ^= 0x01
    path = tmp_path / "short.ssf"
    path.write_bytes(bytes(data))
    read = len(load(MARKERS).samples) - chunk(payload)[1].num_rows
    info = forensics("info", str(path))
    assert info.returncode == 0
    line = next(line for line in info.stdout.splitlines() if line.strip().startswith("samples "))
    written = load(MARKERS).trailer["rows"]["samples"]
    assert line.split() == ["samples", str(read), "(the", "trailer", "says", str(written), "were", "written)"]
    processes = next(line for line in info.stdout.splitlines() if line.strip().startswith("processes "))
    assert processes.split() == ["processes", str(len(load(MARKERS).processes))]  # as the trailer says
    as_json = json.loads(forensics("info", str(path), "--json").stdout)
    assert as_json["sections"]["rows"][0]["samples"] == read


def test_a_flight_window_cut_from_a_damaged_recording_keeps_the_damage(tmp_path: Path) -> None:
    """A flight window is written whole from what the ring's segments read back: rows a segment lost to
    damaged bytes were gone from the window without a word, so its `stalls` gave verdicts over the hole.
    The window keeps the damage that may touch it (capture.window.cut), and its views say no verdict."""
    from capture.window import cut, write_capture

    data = MARKERS.read_bytes()
    offset = [o for o, tag, p in records(data) if tag == TAG_TABLE and chunk(p)[0] == "samples"][
        1
    ]  # rows on both sides
    damaged = bytearray(data)
    damaged[offset + 2000 : offset + 2000 + 4096] = bytes(4096)
    cap, _ = loaded(bytes(damaged), tmp_path / "segment.ssf")
    [hole] = cap.damage
    assert hole.after_ns is not None and hole.before_ns is not None
    mid = (hole.after_ns + hole.before_ns) // 2
    touching = tmp_path / "window-001.ssf"
    write_capture(touching, cut(cap, mid - 1_000_000_000, mid + 1_000_000_000, {"window": {"origin_ns": 0}}))
    away = tmp_path / "window-002.ssf"
    last = int(cap.samples["t_ns"].max())
    write_capture(away, cut(cap, hole.before_ns + 1_000_000, last, {"window": {"origin_ns": 0}}))
    window, messages = loaded(touching.read_bytes(), tmp_path / "copy.ssf")
    assert window.damage == [hole]
    assert any("this window was cut from had lost samples rows" in m for m in messages), messages
    shown = " ".join(forensics("stalls", str(touching)).stdout.split())
    assert "No verdict for" in shown and "the capture is damaged there (samples rows lost)" in shown, shown
    assert loaded(away.read_bytes(), tmp_path / "copy2.ssf")[0].damage == []
    assert "No verdict" not in forensics("stalls", str(away)).stdout
