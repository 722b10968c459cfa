"""The flight recorder's watcher on a ring of segments made from synthetic captures (forensics.flight): its
triggers, windows, limits and counters. The live runs (lab, JACK, SIGKILL) are in test_flight_live.py."""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from capture.errors import CaptureWarning
from capture.format import Capture, load
from capture.segments import SegmentedWriter, list_segments
from forensics.flight.plan import BURST_GAP_NS, MINUTE_NS, Counters, Planner
from forensics.flight.triggers import Trigger, parse_trigger
from forensics.flight.watch import FLIGHT_FILE, HELD_DIR, Watcher
from forensics.views.flight import flight_sections
from tests import synth
from tests.synth import Episode

SECOND = 1_000_000_000
MS = 1_000_000
PERIOD_NS = 5_333_333


def test_trigger_rules_parse_and_refuse_in_one_line() -> None:
    assert parse_trigger("stall>4ms").min_ns == 4 * MS
    rule = parse_trigger("stall:io>2ms")
    assert (rule.kind, rule.verdict, rule.min_ns) == ("stall", "io", 2 * MS)
    assert parse_trigger("xrun").kind == "xrun"
    for bad in ("stall>", "stall:sleepy>2ms", "glitch", "stall>4 parsecs"):
        with pytest.raises(ValueError, match="--trigger") as err:
            parse_trigger(bad)
        assert "\n" not in str(err.value)


def test_back_to_back_triggers_make_one_window_and_a_storm_several() -> None:
    planner = Planner(before_ns=SECOND, after_ns=SECOND)
    for t in (10 * SECOND, 11 * SECOND, 12_500 * MS, 20 * SECOND):
        planner.add(Trigger(t, "xrun", "xrun"))
    windows = planner.ready(covered_ns=14 * SECOND)  # the window at 20 s is not covered yet
    assert [(w.start_ns, w.end_ns, len(w.triggers)) for w in windows] == [(9 * SECOND, 13_500 * MS, 3)]
    assert [(w.start_ns, w.end_ns) for w in planner.ready(None)] == [(19 * SECOND, 21 * SECOND)]
    storm = Planner(before_ns=SECOND, after_ns=SECOND)
    for k in range(100):  # an xrun every 0.5 s for 50 s: windows of at most 3 x (before + after)
        storm.add(Trigger(k * SECOND // 2, "xrun", "xrun"))
    series = storm.ready(None)
    spans = [w.end_ns - w.start_ns for w in series]
    assert len(spans) > 1 and max(spans) <= 6 * SECOND
    # One after the other, none saving time another saved: each trigger is in exactly one window.
    assert all(a.end_ns <= b.start_ns for a, b in itertools.pairwise(series))
    for k in range(100):
        t = k * SECOND // 2
        assert sum(w.start_ns <= t <= w.end_ns for w in series) >= 1
    assert sum(len(w.triggers) for w in series) == 100
    # A window handed out already is not saved again by a late trigger inside it.
    late = Planner(before_ns=SECOND, after_ns=SECOND)
    late.add(Trigger(10 * SECOND, "xrun", "xrun"))
    assert [(w.start_ns, w.end_ns) for w in late.ready(None)] == [(9 * SECOND, 11 * SECOND)]
    late.add(Trigger(10_500 * MS, "xrun", "xrun"))
    assert [(w.start_ns, w.end_ns) for w in late.ready(None)] == [(11 * SECOND, 11_500 * MS)]


def test_a_stall_the_longest_window_would_cut_is_whole_in_the_next() -> None:
    """Triggers 1.5 s apart keep one window growing to its longest (6 s from 9 s: to 15 s); a 20 ms stall
    beginning 2 ms before that end would be cut there (a lab run on a loaded machine: its lock episode in no
    window whole). The window ends where the stall's own second before begins, and the next holds it whole."""
    planner = Planner(before_ns=SECOND, after_ns=SECOND)
    for t in (10 * SECOND, 11_500 * MS, 13 * SECOND):
        planner.add(Trigger(t, "xrun", "xrun"))
    stall = Trigger(14_998 * MS, "stall", "lock stall", end_ns=15_018 * MS)
    planner.add(stall)
    first, second = planner.ready(None)
    assert (first.start_ns, first.end_ns, len(first.triggers)) == (9 * SECOND, 13_998 * MS, 3)
    assert (second.start_ns, second.end_ns, second.triggers) == (13_998 * MS, 16_018 * MS, [stall])
    # A stall that begins while one the window holds still runs joins it, past the longest.
    overlapping = Planner(before_ns=SECOND, after_ns=SECOND)
    overlapping.add(Trigger(10 * SECOND, "stall", "a", end_ns=14_999 * MS))
    overlapping.add(Trigger(14_990 * MS, "stall", "b", end_ns=15_020 * MS))
    [both] = overlapping.ready(None)
    assert (both.start_ns, both.end_ns, len(both.triggers)) == (9 * SECOND, 16_020 * MS, 2)


def test_counters_per_minute_and_bursts_with_their_gaps() -> None:
    counters = Counters(origin_ns=0, rule=False)
    counters.cover(0, 3 * MINUTE_NS)
    times = [5 * SECOND, 6 * SECOND, 7 * SECOND, 80 * SECOND, 81 * SECOND, 170 * SECOND]
    for t in times:  # in time order, as the watcher counts them
        counters.count(Trigger(t, "xrun", "xrun"))
        if t == 81 * SECOND:
            counters.count(Trigger(t, "late", "late"))
    tables = counters.tables()
    minutes = pd.DataFrame(tables["flight_minutes"])
    assert minutes["xruns"].tolist() == [3, 2, 1]
    assert minutes["missed_deadlines"].tolist() == [0, 1, 0]
    assert minutes["covered_ns"].tolist() == [MINUTE_NS] * 3
    assert minutes["stalls"].isna().all()  # no stall rule watched: unknown, not zero
    bursts = pd.DataFrame(tables["flight_bursts"])
    assert bursts["xruns"].tolist() == [3, 2, 1]
    assert bursts["missed_deadlines"].tolist() == [0, 1, 0]
    assert bursts["gap_before_ns"].tolist()[1:] == [73 * SECOND, 89 * SECOND]
    assert BURST_GAP_NS < 73 * SECOND


def _ring(tmp_path: Path, cap: Capture, extra: dict[str, pd.DataFrame]) -> Path:
    """`cap` (and `extra` tables, written with the samples of their time) recorded into a ring."""
    ring = tmp_path / "ring"
    ring.mkdir()
    samples = cap.samples
    writer = SegmentedWriter(ring, cap.meta, segment_ns=SECOND, keep_ns=3600 * SECOND)
    writer.append("threads", cap.table("threads"))
    t0, t_end = int(samples["t_ns"].min()), int(samples["t_ns"].max())
    for start in range(t0, t_end + 1, SECOND // 2):
        end = start + SECOND // 2
        writer.append("samples", samples[(samples["t_ns"] >= start) & (samples["t_ns"] < end)])
        for name, frame in extra.items():
            writer.append(name, frame[(frame["t_ns"] >= start) & (frame["t_ns"] < end)])
        writer.rotate_if_due()
    writer.close({"end_reason": "the duration ended"})
    return ring


def _watcher(tmp_path: Path, ring: Path, lines: list[str], **config: Any) -> Watcher:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    base = {
        "ring": str(ring),
        "out": str(out),
        "before_ns": SECOND,
        "after_ns": SECOND,
        "triggers": ["xrun", "late", "marker"],
        "max_windows": 100,
        "max_disk_bytes": 10**9,
        "keep_ring": True,
    }
    return Watcher({**base, **config}, say=lines.append)


def _episodes_capture() -> tuple[Capture, dict[str, pd.DataFrame]]:
    """14 s of the lab in miniature: runqueue, io, run episodes near 2, 6 and 11 s; an xrun reported at each
    (twice, as jack2 does: driver and client), and a marker at 8.5 s."""
    episodes = [Episode("runqueue", 375, 12), Episode("io", 1125, 12), Episode("run", 2060, 12)]
    cap = synth.audio_capture(episodes, seconds=14.0)
    starts = cap.truth["start_ns"].tolist()
    xruns = pd.DataFrame(
        {
            "t_ns": [t + d for t in starts for d in (8 * MS, 9 * MS)],
            "engine": "jack",
            "source": "callback",
            "delay_us": 1000.0,
        }
    )
    ticks = [synth.T0 + k * 50 * MS for k in range(14 * 20)]  # the engine's status at 20 Hz
    status = pd.DataFrame({"t_ns": ticks, "engine": "jack", "quantum_frames": 256, "rate_hz": 48000})
    events = pd.DataFrame({"t_ns": [synth.T0 + 8_500 * MS], "kind": ["marker"], "pid": [None], "tid": [None]})
    events["text"] = ["plugin loaded"]
    return cap, {"xruns": xruns, "engine_status": status, "events": events}


@pytest.fixture(scope="module")
def episodes_ring(tmp_path_factory: pytest.TempPathFactory) -> tuple[Capture, Path]:
    """The ring of _episodes_capture, made once; each test works on a copy (the watcher removes segments)."""
    cap, extra = _episodes_capture()
    return cap, _ring(tmp_path_factory.mktemp("flight"), cap, extra)


@pytest.mark.slow
def test_watcher_saves_a_window_per_xrun_and_marker_with_its_verdict(
    tmp_path: Path, episodes_ring: tuple[Capture, Path]
) -> None:
    cap, ring = episodes_ring[0], _copy_ring(episodes_ring[1], tmp_path / "copy")
    lines: list[str] = []
    watcher = _watcher(tmp_path, ring, lines)
    watcher.poll()  # the open (last) segment is not read yet: only windows the closed ones cover
    early = len(watcher.windows)
    assert early < 4
    flight = watcher.finish(cpu_ns=0)
    assert flight is not None
    saved = [w for w in watcher.windows if w["status"] == "saved"]
    assert len(saved) == 4  # three xruns (two reports each: one xrun) and the marker
    verdicts = [w["verdict"] for w in saved if w["kind"] == "xrun"]
    assert [v.split()[0] for v in verdicts] == ["runqueue", "io", "run"]
    assert len(lines) == 4 and all("saved" in line for line in lines)
    for window, truth in zip((w for w in saved if w["kind"] == "xrun"), cap.truth.itertuples(), strict=True):
        with warnings.catch_warnings():
            warnings.simplefilter("error", CaptureWarning)  # whole: no warning of any kind
            part = load(tmp_path / "out" / window["file"])
        assert part.samples["t_ns"].min() <= truth.start_ns and part.samples["t_ns"].max() >= truth.end_ns
        assert part.meta["window"]["origin_ns"] == cap.meta.get("recording", {}).get("started_ns", synth.T0)
        assert len(part.xruns) == 2 and set(part.threads["comm"]) == {"lab-audio"}
    result = load(flight)
    assert result.table("flight_minutes")["xruns"].sum() == 3
    assert result.table("flight_minutes")["markers"].sum() == 1
    assert len(result.table("flight_windows")) == 4
    assert len(result.xruns) == 6  # every report, for `forensics xruns flight.ssf`


@pytest.mark.slow
def test_an_xrun_before_the_recording_start_makes_no_window(tmp_path: Path) -> None:
    """The JACK source attaches before the recording starts (its client's activation can cause an xrun): an
    xrun earlier than the recording's start makes no window (no thread was recorded yet), counted apart."""
    cap, extra = _episodes_capture()
    started = synth.T0 + 700 * MS
    meta = {**cap.meta, "recording": {**(cap.meta.get("recording") or {}), "started_ns": started}}
    early = pd.DataFrame({"t_ns": [synth.T0 + 200 * MS], "engine": "jack", "source": "callback", "delay_us": 1000.0})
    extra = {**extra, "xruns": pd.concat([early, extra["xruns"]], ignore_index=True)}
    ring = _ring(tmp_path, Capture.from_frames(meta, {}, threads=cap.table("threads"), samples=cap.samples), extra)
    watcher = _watcher(tmp_path, ring, [], triggers=["xrun"])
    flight = watcher.finish(cpu_ns=0)
    assert flight is not None
    assert [w["t_ns"] >= started for w in watcher.windows] == [True] * 3  # the three episodes' xruns only
    result = load(flight)
    assert result.meta["flight"]["triggers_before_start"] == 1
    assert result.table("flight_minutes")["xruns"].sum() == 3
    notes = {s.name: s.note for s in flight_sections(result)}
    assert notes["flight_windows"] == "1 trigger before the recording's start made no window."


@pytest.mark.slow
def test_disk_limit_skips_a_window_with_a_line_and_an_event_and_keeps_the_earlier(
    tmp_path: Path, episodes_ring: tuple[Capture, Path]
) -> None:
    ring = _copy_ring(episodes_ring[1], tmp_path / "copy")
    lines: list[str] = []
    unlimited = _watcher(tmp_path / "a", _copy_ring(ring, tmp_path / "a"), [], triggers=["xrun"])
    unlimited.finish(cpu_ns=0)
    first_bytes = unlimited.windows[0]["bytes"]
    watcher = _watcher(tmp_path, ring, lines, max_disk_bytes=first_bytes + 1000, triggers=["xrun"])
    flight = watcher.finish(cpu_ns=0)
    assert flight is not None
    statuses = [w["status"] for w in watcher.windows]
    assert statuses == ["saved", "skipped", "skipped"]
    skipped = [line for line in lines if "skipped" in line]
    assert len(skipped) == 2 and all("disk limit" in line for line in skipped)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CaptureWarning)
        first = load(tmp_path / "out" / "window-001.ssf")
    assert first.complete and (tmp_path / "out" / "window-001.ssf").stat().st_size == first_bytes
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [FLIGHT_FILE, "window-001.ssf"]
    events = load(flight).events
    assert (events["kind"] == "window_skipped").sum() == 2


@pytest.mark.slow
def test_max_windows_is_a_limit_too(tmp_path: Path, episodes_ring: tuple[Capture, Path]) -> None:
    lines: list[str] = []
    watcher = _watcher(tmp_path, _copy_ring(episodes_ring[1], tmp_path / "copy"), lines, max_windows=2)
    watcher.finish(cpu_ns=0)
    assert [w["status"] for w in watcher.windows] == ["saved", "saved", "skipped", "skipped"]
    assert "--max-windows 2" in lines[-1]


@pytest.mark.slow
def test_the_stall_rule_triggers_on_the_watched_thread(tmp_path: Path, episodes_ring: tuple[Capture, Path]) -> None:
    ring = _copy_ring(episodes_ring[1], tmp_path / "copy")
    watcher = _watcher(tmp_path, ring, [], triggers=["stall>8ms"], keep_ring=False)
    watcher.finish(cpu_ns=0)
    assert [w["text"].split()[0] for w in watcher.windows] == ["runqueue", "io", "run"]
    assert not ring.exists()  # removed at the end


def _copy_ring(ring: Path, where: Path) -> Path:
    where.mkdir(parents=True)
    copy = where / "ring"
    copy.mkdir()
    for path in ring.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    return copy


@pytest.mark.slow
def test_a_lagging_watcher_still_saves_every_window(tmp_path: Path, episodes_ring: tuple[Capture, Path]) -> None:
    """The writer drops a segment by its age whatever the watcher has done with it. A watcher kept off the
    CPU (nice 10 on a busy machine) reads a segment only as the writer is about to drop it: here each
    segment goes from the ring right after the watcher's poll that took it, before the seconds after a
    trigger are covered. Every window is still saved, whole, and nothing is left held at the end."""
    source = _copy_ring(episodes_ring[1], tmp_path / "source")
    ring = tmp_path / "ring"
    ring.mkdir()
    lines: list[str] = []
    watcher = _watcher(tmp_path, ring, lines, keep_ring=False)
    segments = list_segments(source)
    for segment in segments:  # the writer closes one segment at a time...
        segment.path.rename(ring / segment.path.name)
        watcher.poll()
        for old in list_segments(ring)[:-1]:  # ...and drops what the watcher has just taken
            old.path.unlink()
    flight = watcher.finish(cpu_ns=0)
    assert flight is not None
    assert [w["status"] for w in watcher.windows] == ["saved"] * 4, lines
    assert watcher.lost_segments == 0
    for window in watcher.windows:
        with warnings.catch_warnings():
            warnings.simplefilter("error", CaptureWarning)
            part = load(tmp_path / "out" / window["file"])
        times = part.samples["t_ns"]
        assert times.min() <= window["start_ns"] + 10 * MS and times.max() >= window["end_ns"] - 10 * MS
    assert not (ring / HELD_DIR).exists() and not ring.exists()


def test_sizes_parse_and_refuse_in_one_line() -> None:
    from forensics.flight.run import parse_size_bytes

    assert parse_size_bytes("500MB") == 500_000_000
    assert parse_size_bytes("2GiB") == 2 * 1024**3
    assert parse_size_bytes("1e6") == 1_000_000
    for bad in ("lots", "-5MB", "0", "3 parsecs"):
        with pytest.raises(ValueError, match="size"):
            parse_size_bytes(bad)


def test_the_stall_rule_reads_the_machine_tables_of_the_segment_and_its_overlap(tmp_path: Path) -> None:
    """The watcher's piece for the stall rule carries `system` (IO pressure: an io stall whose reads never
    caught the thread in D is found by it), this segment's and the last second of the one before."""
    ring = tmp_path / "ring"
    ring.mkdir()
    watcher = _watcher(tmp_path, ring, [], triggers=["stall>8ms"])
    t0 = 5_000_000_000
    samples = pd.DataFrame({"tick": [1], "t_ns": [t0], "tid": [7], "pid": [7], "run_ns": [0], "wait_ns": [0]})

    def system(at: int) -> pd.DataFrame:
        return pd.DataFrame({"t_ns": [at], "cpu": [-1], "psi_io_some_us": [at // 1000]})

    watcher.previous = {
        "samples": samples.assign(t_ns=t0 - 500_000_000),
        "system": pd.concat([system(t0 - 3_000_000_000), system(t0 - 400_000_000)]),
    }
    cap = Capture.from_frames({}, {}, samples=samples, threads=pd.DataFrame({"tid": [7]}), system=system(t0))
    piece = watcher._with_overlap(cap, t0)
    assert "system" in piece.table_names
    assert piece.table("system")["t_ns"].tolist() == [t0 - 400_000_000, t0]  # the overlap second, then this one


def test_a_thread_without_a_period_in_its_first_segment_is_looked_at_again(tmp_path: Path) -> None:
    """The first segment (1 s here) is too short for the audio thread's period, and a lock stall is only
    told from a sleep between callbacks by that period: the watcher looks again at the next segments
    instead of keeping "no period" for WATCHED_EVERY_NS (a live lab run lost two lock windows that way)."""
    cap = synth.audio_capture([Episode("lock", 600, 12)], seconds=6.0)  # the 600th callback: at 3.2 s
    # Its start-up: asleep for the first 1.2 s (its counters still), its callbacks only from then on, so
    # the first segment holds 0.3 s of rhythm, too little for a period.
    samples = cap.samples.copy()
    asleep = samples["t_ns"] < synth.T0 + 1_200 * MS
    for column in ("run_ns", "wait_ns", "slices", "utime", "stime"):
        at_start = samples.loc[~asleep, column].iloc[0]
        samples.loc[asleep, column] = 0
        samples.loc[~asleep, column] -= at_start
    samples.loc[asleep, "state"] = "S"
    ring = _ring(tmp_path, Capture.from_frames(cap.meta, {}, samples=samples, threads=cap.table("threads")), {})
    watcher = _watcher(tmp_path, ring, [], triggers=["stall>8ms"])
    watcher.finish(cpu_ns=0)
    assert [w["text"].split()[0] for w in watcher.windows] == ["lock"]
