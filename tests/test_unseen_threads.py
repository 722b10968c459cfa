"""Short-lived threads never sampled, counted by the writer from the leaders' num_threads (samplers/unseen.py):
fed in the order the recorder sent its frames, though the writer reads the ticks' stat lines only when it
flushes them, all at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from samplers import frames
from samplers.writer_process import CaptureSink
from tests.fakeproc import stat_line

MS = 1_000_000
P, Q = 100, 200  # two processes: P's leader 100 (threads 101, 102), Q's leader 200 (thread 201)


def _thread(tid: int, pid: int) -> tuple[int, bytes]:
    row = {"t_ns": 0, "tid": tid, "pid": pid, "comm": f"t{tid}", "process": f"p{pid}", "policy": 0, "rtprio": 0}
    return frames.THREAD, json.dumps(row).encode()


def _layout(layout_id: int, tids: list[int], pids: list[int], known: dict[str, int]) -> tuple[int, bytes]:
    spec = {"id": layout_id, "tids": tids, "pids": pids, "sched": [], "known": known}
    return frames.LAYOUT, json.dumps(spec).encode()


def _tick(tick: int, layout_id: int, rows: list[tuple[int, int, int]], missing: list[int] = ()) -> tuple[int, bytes]:
    """rows: (tid, pid, the leader's num_threads) of every thread of the layout, those at `missing` unread."""
    t_ns = (tick + 1) * 2 * MS
    live = [row for i, row in enumerate(rows) if i not in missing]
    frame = frames.encode_tick(
        tick, layout_id, t_ns, [t_ns] * len(rows), list(missing),
        [b"100 0 1\n"] * len(live),
        [stat_line(tid, pid, num_threads=count).encode() for tid, pid, count in live],
        [],
    )  # fmt: skip
    kind, length = frames.FRAME.unpack_from(frame)
    return kind, frame[frames.FRAME.size : frames.FRAME.size + length]


@pytest.mark.parametrize("flush_every_ns", [None, 0], ids=["one-flush", "a-flush-a-tick"])
def test_threads_found_between_ticks_count_against_the_ticks_before_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flush_every_ns: int | None
) -> None:
    """P's leader says 2, 6, 6, 4 threads: 4 created, 1 of them found by a scan after P's first tick (102), and at
    the end its layout knows 3 and one (101) had no row, so 4 - 2 read are alive unfound: 4 - 1 - 2 = 1 ended
    unseen. Q's says 2, 5, 2: 3 created and gone; its threads were found before its first tick (not new): 3.
    Counted in the order the frames came: 102 found after P's first tick, 200 and 201 before Q's."""
    if flush_every_ns is not None:
        monkeypatch.setattr("samplers.writer_process.FLUSH_EVERY_NS", flush_every_ns)
    sink = CaptureSink(str(tmp_path / "unseen.ssf"))
    sink.handle(frames.META, json.dumps({"format_version": 3, "sources": {}}).encode())
    both = [101, 102, 200, 201]
    stream = [
        _thread(P, P),
        _thread(101, P),
        _layout(1, [P, 101], [P, P], {}),
        _tick(0, 1, [(P, P, 2), (101, P, 0)]),
        _thread(Q, Q),
        _thread(201, Q),
        _thread(102, P),
        _layout(2, [P, *both], [P, P, P, Q, Q], {str(P): 3}),
        _tick(1, 2, [(P, P, 6), (101, P, 0), (102, P, 0), (Q, Q, 2), (201, Q, 0)]),
        _tick(2, 2, [(P, P, 6), (101, P, 0), (102, P, 0), (Q, Q, 5), (201, Q, 0)]),
        _tick(3, 2, [(P, P, 4), (101, P, 0), (102, P, 0), (Q, Q, 2), (201, Q, 0)], missing=[1]),
        (frames.TRAILER, json.dumps({"end_reason": "test"}).encode()),
    ]
    for kind, payload in stream:
        sink.handle(kind, payload)
    sink.close()
    assert sink.unseen.lower_bounds() == {P: 1, Q: 3}
    assert sink.final["threads_unseen_min"] == 4
