"""The recorder-to-writer pipe protocol: a TICK frame encoded by the recorder decodes to what was read."""

from __future__ import annotations

import os

from samplers import frames


def test_tick_round_trip_keeps_every_field_and_text() -> None:
    schedstat = [b"5000000 7 3\n", b"123456789012 42 9\n"]
    stat = [b"100 (engine) S 1 ...\n", b"101 (we) ird\nname) D 1 ...\n"]  # a comm may hold ")" and "\n"
    sched = [b"se.nr_switches : 9\n", b""]  # the second read failed
    data = frames.encode_tick(
        17, 3, 1_000_000_123, [10, 20, 30], [1], schedstat, stat, sched
    )  # thread 1 of 3 had no row this tick
    kind, length = frames.FRAME.unpack_from(data)
    assert kind == frames.TICK and length == len(data) - frames.FRAME.size
    tick = frames.decode_tick(data[frames.FRAME.size :], 3)
    assert (tick.tick, tick.layout_id, tick.t_ns) == (17, 3, 1_000_000_123)
    assert tick.times.tolist() == [10, 20, 30]
    assert tick.missing.tolist() == [1]
    assert tick.stat_lengths.tolist() == [len(s) for s in stat]
    assert tick.schedstat == b"".join(schedstat)
    assert tick.stat == b"".join(stat)
    assert tick.sched == sched


def test_a_tick_without_rows_or_sched_reads_decodes_empty() -> None:
    data = frames.encode_tick(0, 1, 5, [7], [0], [], [], [])
    tick = frames.decode_tick(data[frames.FRAME.size :], 1)
    assert tick.missing.tolist() == [0]
    assert tick.stat_lengths.tolist() == [] and tick.stat == b"" and tick.sched == []


def test_tick_frames_cross_the_pipe_whole() -> None:
    read_end, write_end = os.pipe()
    data = frames.encode_tick(2, 9, 11, [1, 2], [], [b"a", b"bb"], [b"ccc", b"d"], [])
    frames.write_all(write_end, data + frames.encode_json(frames.TRAILER, {}))
    os.close(write_end)
    got = list(frames.read_frames(read_end))
    os.close(read_end)
    assert [k for k, _ in got] == [frames.TICK, frames.TRAILER]
    assert frames.decode_tick(got[0][1], 2).stat == b"cccd"


def test_frames_split_anywhere_across_reads_come_out_whole_and_in_order(monkeypatch) -> None:
    """However the pipe's reads cut the stream (inside a header, inside a payload, a frame over many reads, many
    frames in one read, gathered reads), each frame comes out once, whole; a last frame cut short is dropped."""
    import random

    payloads = [bytes([i % 251]) * size for i, size in enumerate((0, 1, 7, 300, 5000, 3, 70_000, 12, 0, 999))]
    stream = b"".join(frames.FRAME.pack(frames.EVENT, len(p)) + p for p in payloads)
    stream += frames.FRAME.pack(frames.EVENT, 50) + b"cut"  # the recorder died inside its last frame
    rng = random.Random(7)
    for trial in range(200):
        cuts = sorted(rng.sample(range(1, len(stream)), rng.choice((1, 5, 40, 400))))
        reads = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        # Gathered as the writer's drain thread hands them over: one to several reads at a time.
        batches, i = [], 0
        while i < len(reads):
            n = rng.choice((1, 1, 3, 50)) if trial % 2 else 1
            batches.append(reads[i : i + n])
            i += n
        monkeypatch.setattr(frames, "_chunks", lambda *_a, batches=batches: iter(batches))
        got = list(frames.read_frames(-1))
        assert [k for k, _ in got] == [frames.EVENT] * len(payloads)
        assert [p for _, p in got] == payloads, trial


def test_taskstats_round_trip_keeps_each_reply_and_a_gone_thread_as_none() -> None:
    replies = [b"\x01\x02reply-of-7", b"", b"reply-of-9"]  # the second thread was gone
    data = frames.encode_taskstats(5, [7, 8, 9], [100, 200, 300], replies)
    kind, _ = frames.FRAME.unpack_from(data)
    assert kind == frames.TASKSTATS
    tick, rows = frames.decode_taskstats(data[frames.FRAME.size :])
    assert tick == 5
    assert rows == [(7, 100, replies[0]), (8, 200, None), (9, 300, replies[2])]


def test_system_round_trip_keeps_stat_and_pressure_texts_in_order() -> None:
    texts = [b"cpu  1 2 3\n", b"some avg10=0.00 total=5\n", b"", b"full avg10=0.00 total=9\n"]
    data = frames.encode_system(123, texts)
    kind, _ = frames.FRAME.unpack_from(data)
    assert kind == frames.SYSTEM
    assert frames.decode_system(data[frames.FRAME.size :]) == (123, texts)


def test_a_layout_from_text_pieces_is_the_json_frame_of_its_spec() -> None:
    """encode_layout (the recorder's tier layouts: shared pieces made text once) writes the same bytes as
    encode_json of the spec, empty pieces and empty lists included."""
    import json

    text = frames.int_list_text
    for tids, pids, sched, known in (
        (([7, 8], [9]), ([1, 1], [1]), ([0], [2]), {1: 3}),
        (([], [5, -6]), ([], [2, 2]), ([], []), {2: 2, 10: 1}),
        (([], []), ([], []), ([], []), {}),
        (([123456789], []), ([4], []), ([0], []), {4: 1}),
    ):
        lists = {"tids": tuple(map(text, tids)), "pids": tuple(map(text, pids)), "sched": tuple(map(text, sched))}
        frame = frames.encode_layout(42, 40, lists, known)
        spec = {"id": 42, "group": 40, "tids": [*tids[0], *tids[1]], "pids": [*pids[0], *pids[1]]}
        spec |= {"sched": [*sched[0], *sched[1]], "known": known}
        assert frame == frames.encode_json(frames.LAYOUT, spec)
        assert json.loads(frame[frames.FRAME.size :])["known"] == {str(k): v for k, v in known.items()}
