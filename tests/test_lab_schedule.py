"""The lab's options, schedule, truth reader and DSP, without running the engine."""

from __future__ import annotations

import json

import numpy as np
import pytest

import forensics
from capture.errors import ForensicsError
from capture.format import CaptureWriter
from forensics.lab.cli import settings_from_args
from forensics.lab.dsp import FirStage, OutputDigest, input_buffer, noise_table
from forensics.lab.schedule import build_schedule
from forensics.lab.settings import CAUSES, make_settings, parse_episodes
from forensics.lab.truth import read_truth, truth_frames, write_truth

# --------------------------------------------------------------------------------------------------
# --episodes


def test_parse_episodes_counts_each_cause() -> None:
    assert parse_episodes("run:5,io:2") == {"run": 5, "io": 2}
    assert parse_episodes(" Lock:1 , runqueue:0 ") == {"lock": 1, "runqueue": 0}
    assert parse_episodes("none") == {}
    assert parse_episodes("") == {}


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("foo:3", "unknown cause 'foo'"),
        ("run:-1", "negative"),
        ("run:x", "not a whole number"),
        ("run", "has no count"),
        ("run:1,run:2", "given twice"),
    ],
)
def test_bad_episodes_say_what_is_wrong(spec: str, words: str) -> None:
    with pytest.raises(ForensicsError, match=words):
        parse_episodes(spec)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--topology", "ring"], "--topology 'ring' is unknown"),
        (["--episodes", "io:-2"], "negative"),
        (["--episodes", "foo:3"], "unknown cause"),
        (["--policy", "rr"], "--policy 'rr' is unknown"),
        (["--rtprio", "99"], "--rtprio 99 is out of range"),
        (["--quantum", "3"], "--quantum 3 is out of range"),
        (["--stages", "0"], "--stages 0 is out of range"),
        (["--episode-ms", "0"], "--episode-ms 0 is out of range"),
        (["--spacing", "50ms"], "too short for 20 ms episodes"),
        (["--fault-pages", "-1"], "negative"),
        (["--io-mode", "mmap"], "--io-mode 'mmap' is unknown"),
        (["--fault-kind", "huge"], "--fault-kind 'huge' is unknown"),
        (["--episodes", "io:1", "--io-dir", "/dev/shm"], "never touches a disk"),
        (["--cpu", "4096"], "not a CPU this process may use"),
    ],
)
def test_bad_options_raise_one_clear_error(args: list[str], words: str) -> None:
    with pytest.raises(ForensicsError, match=words):
        settings_from_args(args)


def test_command_line_round_trips() -> None:
    args = ["--episodes", "lock:2,run:1", "--episode-ms", "12.345678", "--spacing", "900ms", "--seed", "7"]
    args += ["--topology", "series", "--stages", "3", "--duration", "4s", "--cpu", "0", "--truth", "t.json"]
    settings = settings_from_args(args)
    assert settings_from_args(settings.to_argv()) == settings
    assert settings.episode_ns == 12_345_678
    assert settings.episodes == {"lock": 2, "run": 1}


# --------------------------------------------------------------------------------------------------
# The schedule


def test_schedule_is_deterministic_for_a_seed() -> None:
    settings = make_settings(episodes="run:4,io:4,lock:4,fault:4,runqueue:4", seed=11)
    first, again = build_schedule(settings), build_schedule(settings)
    assert first == again
    other = build_schedule(make_settings(episodes="run:4,io:4,lock:4,fault:4,runqueue:4", seed=12))
    assert [e.cause for e in other.episodes] != [e.cause for e in first.episodes]
    assert [e.offset_ns for e in other.episodes] != [e.offset_ns for e in first.episodes]


def test_schedule_keeps_counts_spacing_and_order() -> None:
    settings = make_settings(episodes="run:5,lock:3,io:0", episode_ms=30, spacing_ns=400_000_000)
    schedule = build_schedule(settings)
    assert schedule.counts() == {"run": 5, "runqueue": 0, "io": 0, "fault": 0, "lock": 3}
    offsets = [e.offset_ns for e in schedule.episodes]
    assert offsets == sorted(offsets)
    assert min(np.diff(offsets)) >= 0.75 * settings.spacing_ns
    assert offsets[0] >= settings.lead_in_ns
    for episode in schedule.episodes:
        # the episode's callback is the first period starting at or after its planned time
        assert settings.boundary_ns(episode.period) >= episode.offset_ns
        assert settings.boundary_ns(episode.period - 1) < episode.offset_ns
    assert schedule.end_ns == offsets[-1] + settings.episode_ns + settings.tail_ns
    assert settings.boundary_ns(schedule.periods) >= schedule.end_ns


def test_default_schedule_is_a_short_demo_of_every_cause() -> None:
    schedule = build_schedule(make_settings())
    assert set(schedule.counts().values()) == {3}
    assert set(schedule.counts()) == set(CAUSES)
    assert 10e9 <= schedule.end_ns <= 15e9


def test_duration_cuts_the_schedule_and_says_how_much() -> None:
    settings = make_settings(episodes="run:10", spacing_ns=500_000_000, duration_ns=3_000_000_000)
    schedule = build_schedule(settings)
    assert schedule.end_ns == 3_000_000_000
    assert 0 < len(schedule.episodes) < 10
    assert schedule.dropped == 10 - len(schedule.episodes)
    assert all(e.offset_ns + settings.episode_ns < schedule.end_ns for e in schedule.episodes)


def test_clean_run_defaults_to_ten_seconds() -> None:
    settings = make_settings(episodes="none")
    schedule = build_schedule(settings)
    assert schedule.episodes == ()
    assert schedule.end_ns == 10_000_000_000
    assert schedule.periods == 1875  # 10 s / (256 / 48000 s)


# --------------------------------------------------------------------------------------------------
# The truth file


def _document() -> dict[str, object]:
    big = 2**62 + 1  # beyond float64's exact integers: must come back exact
    return {
        "episodes": [
            {"cause": "run", "tid": 101, "start_ns": big, "end_ns": big + 20_000_000, "index": 0, "period": 10},
            {
                "cause": "lock",
                "tid": 101,
                "start_ns": big + 1,
                "end_ns": big + 2,
                "index": 1,
                "period": 20,
                "holder_tid": 202,
                "released_ns": big + 2,
            },
        ],
        "cycles": [
            {"tid": 101, "start_ns": big, "end_ns": big + 300_000, "deadline_ns": big + 5_333_333, "period": 0},
        ],
        "lab": {"pid": 100},
    }


def test_truth_round_trips_into_dataframes(tmp_path) -> None:
    path = tmp_path / "truth.json"
    write_truth(path, _document())
    truth = read_truth(path)
    assert list(truth.episodes.columns[:4]) == ["cause", "tid", "start_ns", "end_ns"]
    assert list(truth.cycles.columns[:4]) == ["tid", "start_ns", "end_ns", "deadline_ns"]
    assert truth.episodes["start_ns"].tolist() == [2**62 + 1, 2**62 + 2]
    assert truth.episodes["released_ns"].iloc[1] == 2**62 + 3
    assert truth.episodes["holder_tid"].tolist() == [None, 202]  # JSON-safe: no pd.NA, no NaN
    json.dumps({c: truth.episodes[c].tolist() for c in truth.episodes.columns})
    assert truth.episodes["tid"].dtype == np.int32
    assert truth.lab == {"pid": 100}


def test_truth_frames_go_into_a_capture(tmp_path) -> None:
    truth = truth_frames(_document())
    path = tmp_path / "lab.ssf"
    with CaptureWriter(path, {"tool": "test"}) as writer:
        writer.append("truth", truth.episodes)
        writer.append("cycles", truth.cycles)
    cap = forensics.load(path)
    columns = ["cause", "tid", "start_ns", "end_ns"]
    assert cap.truth[columns].equals(truth.episodes[columns])
    assert cap.truth["released_ns"].tolist()[1] == 2**62 + 3
    assert cap.cycles["deadline_ns"].tolist() == truth.cycles["deadline_ns"].tolist()


def test_empty_truth_has_typed_columns() -> None:
    truth = truth_frames({"episodes": [], "cycles": []})
    assert truth.episodes.empty and list(truth.episodes.columns) == ["cause", "tid", "start_ns", "end_ns"]
    assert truth.cycles["start_ns"].dtype == np.int64


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("{not json", "is not JSON"),
        ("", "is empty: the lab did not write it"),
        (json.dumps({"episodes": []}), "needs top-level"),
        (json.dumps({"episodes": [{"cause": "run"}], "cycles": []}), "lacks tid, start_ns, end_ns"),
    ],
)
def test_bad_truth_files_raise_one_clear_error(tmp_path, content: str, words: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ForensicsError, match=words):
        read_truth(path)
    with pytest.raises(ForensicsError, match="no such truth file"):
        read_truth(tmp_path / "missing.json")


# --------------------------------------------------------------------------------------------------
# DSP: the same bits whatever runs a stage


def test_stages_give_the_same_bits_in_any_buffer() -> None:
    """Series hands buffers between processes in shared memory, chain keeps them private: the filter must
    not depend on where (at which alignment) its buffers are, nor on being split across stage objects."""
    table = noise_table(3, 2, 64, 48_000)
    private = [FirStage(3, k, 17, 2, 64) for k in (1, 2, 3)]
    shared = [FirStage(3, k, 17, 2, 64) for k in (1, 2, 3)]
    raw = np.zeros(4 * 2 * 64 + 1)  # float64 views at an odd offset, as a foreign buffer might give
    views = [raw[1 + i * 128 : 1 + (i + 1) * 128].reshape(2, 64) for i in range(4)]
    plain = [np.zeros((2, 64)) for _ in range(4)]
    digest_private, digest_shared = OutputDigest(), OutputDigest()
    for cycle in range(300):
        input_buffer(table, cycle, 64, plain[0])
        input_buffer(table, cycle, 64, views[0])
        for k in range(3):
            private[k].process(plain[k], plain[k + 1])
            shared[k].process(views[k], views[k + 1])
        digest_private.update(plain[3])
        digest_shared.update(np.ascontiguousarray(views[3]))
    assert digest_private.summary() == digest_shared.summary()
    assert len(digest_private.checkpoints) == 2
    # and the filter does something: the output is not the input
    assert not np.array_equal(plain[3], plain[0])
