"""The eBPF sampler's writer side (samplers/ebpf/sampler_rows.py) on synthetic frame streams: the slots that
did not change are skipped before decoding, and the rows stored are exactly those of decoding every slot."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from samplers import frames
from samplers.ebpf.sampler import SLOT
from samplers.ebpf.sampler_rows import (
    PHASE_EXITED,
    PHASE_OFF,
    PHASE_ON_CPU,
    PHASE_RUNNABLE,
    PHASE_UNKNOWN,
    EbpfRows,
)
from samplers.ebpf.tracefs import DEFAULT_RULES
from tests.fakeproc import stat_line

PID = 100
TICK_NS = 2_000_000


class _Thread:
    def __init__(self, tid: int, kind: str, rng: random.Random) -> None:
        self.tid, self.kind, self.rng = tid, kind, rng
        self.run = self.wait = self.since = self.event = 0
        self.switches = self.faults = self.prev_state = self.cpu = 0
        self.phase = PHASE_UNKNOWN
        self.period = rng.randint(2, 5)
        self.utime = 0
        self.policy = 1 if kind == "periodic" else 0

    def step(self, tick: int, now: int) -> None:
        rng = self.rng
        if self.phase == PHASE_EXITED:
            return
        switch = {
            "sleeper": rng.random() < 0.01,
            "periodic": tick % self.period == 0,
            "busy": rng.random() < 0.3,
            "waiter": rng.random() < 0.2,
        }[self.kind]
        if not switch:
            if rng.random() < 0.005:
                self.faults += 1  # a fault counted with nothing else moving
            return
        self.event = now - rng.randint(1, TICK_NS - 1)
        self.switches += 1
        self.run += rng.randint(1_000, 200_000)
        self.wait += rng.randint(0, 50_000)
        self.cpu = rng.randint(0, 1)
        if self.kind == "busy":
            self.phase, self.since = PHASE_ON_CPU, self.event
        elif self.kind == "waiter" and rng.random() < 0.5:
            self.phase, self.since = PHASE_RUNNABLE, self.event
        else:
            self.phase, self.since = PHASE_OFF, self.event
            self.prev_state = rng.choice([0x1, 0x1, 0x2, 0x101 & 0x1])

    def slot(self) -> bytes:
        return SLOT.pack(
            self.run,
            self.wait,
            self.since,
            self.switches,
            self.faults,
            self.event,
            self.tid,
            self.prev_state,
            self.cpu,
            self.phase,
            0,
            0,
        )

    def stat(self) -> bytes:
        return stat_line(
            self.tid, PID, state="S", utime=self.utime, policy=self.policy, rtprio=self.policy * 10
        ).encode()


def _stream(seed: int) -> list[tuple[str, Any]]:
    """A recording's frames as the writer gets them (eBPF tick and stat payloads, layouts) with takes between:
    sleepers, periodic, busy and runnable threads, a thread that exits, one that dies unseen by the exit probe,
    a slot cleared and given back to its tid, a thread not stat-read for a while, a new thread in a new layout,
    a missed tick, takes at random points (one between a tick's stat and slot frames)."""
    rng = random.Random(seed)
    kinds = ["sleeper"] * 14 + ["periodic"] * 8 + ["busy"] * 2 + ["waiter"] * 3
    threads = [_Thread(200 + i, kind, rng) for i, kind in enumerate(kinds)]
    late_stat = threads[3].tid  # no stat read until tick 40: its rows are not stored before
    out: list[tuple[str, Any]] = []

    def layout(layout_id: int) -> None:
        tids = [t.tid for t in threads]
        out.append(
            ("layout", {"id": layout_id, "tids": tids, "pids": [PID] * len(tids), "slots": list(range(len(tids)))})
        )

    layout_id = 1
    layout(layout_id)
    urgent = {t.tid for t in threads if t.tid != late_stat}
    rr = 0
    slots = {t.tid: t for t in threads}
    cleared: set[int] = set()
    tick = 0
    for step in range(420):
        tick += 2 if step == 250 else 1  # one tick missed
        now = 1_000_000_000 + tick * TICK_NS + rng.randint(0, 300_000)
        for thread in threads:
            thread.step(tick, now)
        if step == 120:
            threads[5].phase, threads[5].event = PHASE_EXITED, now - 10  # sched_process_exit
        if step == 140:
            threads[6].phase, threads[6].prev_state, threads[6].event = PHASE_OFF, 0x10, now - 10  # left dead
        if step == 100:
            cleared.add(threads[7].tid)  # removed: the owner cleared
        if step == 130:
            cleared.discard(threads[7].tid)  # the tid came back: seeded again
            t7 = threads[7]
            t7.phase, t7.since, t7.event, t7.switches = PHASE_UNKNOWN, 0, 0, t7.switches + 5
            urgent.add(t7.tid)
        if step == 200:
            threads.append(_Thread(400, "periodic", rng))
            slots[400] = threads[-1]
            layout_id = 2
            layout(layout_id)
            urgent.add(400)
        if step % 97 == 0:
            threads[rng.randrange(len(threads))].utime += 1  # a stat value changes
        # stat reads: the new ones at once, then two a tick round robin (the late one from tick 40)
        picked = [i for i, t in enumerate(threads) if t.tid in urgent]
        urgent.clear()
        for _ in range(2):
            rr = (rr + 1) % len(threads)
            if threads[rr].tid != late_stat or step >= 40:
                picked.append(rr)
        texts = [threads[i].stat() for i in picked]
        header = frames.EBPF_TICK_HEADER.pack(tick, layout_id, now - 1000, len(picked))
        body = np.asarray(picked, dtype="<u4").tobytes() + np.asarray([len(t) for t in texts], dtype="<u4").tobytes()
        out.append(("stat", header + body + b"".join(texts)))
        if step == 300:
            out.append(("take", None))  # between a tick's stat and slot frames
        raw = bytearray(b"".join(t.slot() for t in threads))
        for tid in cleared:
            index = [t.tid for t in threads].index(tid)
            raw[index * SLOT.size + 48 : index * SLOT.size + 52] = b"\0\0\0\0"
        out.append(("tick", frames.EBPF_TICK_HEADER.pack(tick, layout_id, now, len(raw)) + bytes(raw)))
        if rng.random() < 1 / 40:
            out.append(("take", None))
    out.append(("take", None))
    return out


def _replay(stream: list[tuple[str, Any]], skip: bool) -> tuple[EbpfRows, list[Any]]:
    rows = EbpfRows(DEFAULT_RULES, skip_unchanged=skip)
    taken = []
    for kind, payload in stream:
        if kind == "layout":
            rows.layout(payload)
        elif kind == "stat":
            rows.stat(payload)
        elif kind == "tick":
            rows.tick(payload)
        else:
            taken.append(rows.take())
    return rows, taken


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, pa.Array):
        return a.equals(b)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b)
    return bool(a == b)


@pytest.mark.parametrize("seed", range(6))
def test_skipping_unchanged_slots_stores_the_rows_of_decoding_every_slot(seed: int) -> None:
    stream = _stream(seed)
    skipped, with_skip = _replay(stream, skip=True)
    every, without = _replay(stream, skip=False)
    assert len(with_skip) == len(without)
    stored = 0
    for (columns, slow), (ref_columns, ref_slow) in zip(with_skip, without, strict=True):
        assert (columns is None) == (ref_columns is None)
        assert (slow is None) == (ref_slow is None)
        if columns is not None:
            assert _same(columns, ref_columns)
            stored += len(columns["samples"]["tid"])
        if slow is not None:
            assert _same(slow, ref_slow)
    assert stored > 1000
    # The writer's per-row work grows with what changed: most slots of the asleep threads were never decoded.
    assert skipped.slot_rows == every.slot_rows
    assert skipped.decoded_rows < 0.5 * every.decoded_rows
    assert skipped.decoded_rows >= stored - 1  # a stored row was decoded (the take between frames aside)


def test_a_thread_on_a_cpu_or_runnable_is_decoded_every_tick() -> None:
    """Its slot does not move between switches, but its run or wait does: extended to each read's time."""
    rng = random.Random(1)
    busy, waiting, asleep = _Thread(11, "busy", rng), _Thread(12, "waiter", rng), _Thread(13, "sleeper", rng)
    busy.phase, busy.since, busy.event = PHASE_ON_CPU, 900_000_000, 900_000_000
    waiting.phase, waiting.since, waiting.event = PHASE_RUNNABLE, 900_000_000, 900_000_000
    asleep.phase, asleep.prev_state, asleep.event = PHASE_OFF, 1, 900_000_000
    threads = [busy, waiting, asleep]
    rows = EbpfRows(DEFAULT_RULES)
    rows.layout({"id": 1, "tids": [11, 12, 13], "pids": [PID] * 3, "slots": [0, 1, 2]})
    texts = [t.stat() for t in threads]
    header = frames.EBPF_TICK_HEADER.pack(1, 1, 1_000_000_000, 3)
    lengths = np.asarray([len(t) for t in texts], dtype="<u4").tobytes()
    rows.stat(header + np.arange(3, dtype="<u4").tobytes() + lengths + b"".join(texts))
    raw = b"".join(t.slot() for t in threads)
    for tick in range(1, 50):
        rows.tick(frames.EBPF_TICK_HEADER.pack(tick, 1, 1_000_000_000 + tick * TICK_NS, len(raw)) + raw)
    columns, _ = rows.take()
    assert columns is not None
    samples = columns["samples"]
    per_tid = {tid: int(np.count_nonzero(samples["tid"] == tid)) for tid in (11, 12, 13)}
    assert per_tid[11] == per_tid[12] == 49  # each tick's read moves them
    assert per_tid[13] == 3  # the first row and its keyframes (ticks 12 and 37: tick + tid a multiple of 25)
    assert rows.decoded_rows == 49 + 49 + 3  # the asleep thread's other 46 slots were never decoded
    assert (np.diff(samples["run_ns"][samples["tid"] == 11]) == TICK_NS).all()
