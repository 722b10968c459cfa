"""The eBPF sampler's frames on synthetic streams: the recorder sends only the slots that changed since the frame
it handed over before (samplers/ebpf/sampler.py SlotFrames), the writer rebuilds every slot from them and skips
the unchanged ones before decoding (samplers/ebpf/sampler_rows.py), and the rows stored are exactly those of
decoding every slot of every frame sent whole."""

from __future__ import annotations

import json
import random
import sys
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from samplers import frames
from samplers.ebpf.sampler import FULL_FRAME_TICKS, KEYFRAME_TICKS, SLOT, TICK_INDEX, TICK_REC, KernelTicks, SlotFrames
from samplers.ebpf.sampler_rows import (
    PHASE_EXITED,
    PHASE_OFF,
    PHASE_ON_CPU,
    PHASE_RUNNABLE,
    PHASE_UNKNOWN,
    EbpfRows,
    letters_column,
    slot_records,
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
        self.majflt = 0  # task_struct.maj_flt as copied at the last switch-out (and as the stat line shows it)
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
        if self.switches % 7 == 0:
            self.majflt += 1  # a major fault before this switch-out (no draw: the streams stay as they were)
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
            self.majflt,
        )

    def stat(self) -> bytes:
        return stat_line(
            self.tid,
            PID,
            state="S",
            majflt=self.majflt,
            utime=self.utime,
            policy=self.policy,
            rtprio=self.policy * 10,
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
        elif kind == "delta":
            rows.delta(payload)
        elif kind == "ticks":
            list(rows.batch(payload))
        else:
            taken.append(rows.take())
    return rows, taken


def _sent(
    stream: list[tuple[str, Any]], drops: set[int], *, full_every: int = 500, forget: int | None = None
) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]], SlotFrames]:
    """The stream as the recorder sends it: each tick's slots through SlotFrames, the frames of the ticks at the
    positions in `drops` dropped (stat and slots, as the recorder drops a tick's whole output) and the encoder
    told so, except at position `forget` (a recorder that fails to: the writer must not store a wrong tick).
    Also the reference: the ticks sent, each slot frame whole."""
    encoder = SlotFrames(full_every)
    sent: list[tuple[str, Any]] = []
    whole: list[tuple[str, Any]] = []
    stat: tuple[str, Any] | None = None
    position = 0
    for kind, payload in stream:
        if kind == "stat":
            stat = (kind, payload)  # goes with its tick's slot frame
            continue
        if kind != "tick":
            sent.append((kind, payload))
            whole.append((kind, payload))
            continue
        tick, layout_id, t_ns, length = frames.EBPF_TICK_HEADER.unpack_from(payload)
        frame = encoder.frame(tick, layout_id, t_ns, payload[frames.EBPF_TICK_HEADER.size :])
        position += 1
        if position in drops:
            if position != forget:
                encoder.lost()
            stat = None
            continue
        assert stat is not None
        sent.append(stat)
        whole.append(stat)
        code, length = frames.FRAME.unpack_from(frame)
        assert length == len(frame) - frames.FRAME.size
        sent.append(({frames.EBPF_TICK: "tick", frames.EBPF_DELTA: "delta"}[code], frame[frames.FRAME.size :]))
        whole.append((kind, payload))
    return sent, whole, encoder


def _slots_by_tick(rows: EbpfRows) -> np.ndarray:
    """The (ticks x slots x u64 words) of the ticks not taken yet (one run of one slot count), each slot as its last
    record up to the tick says (SlotRecords.at)."""
    records = slot_records(rows.ticks, rows.last_words)
    n, used = records.ticks, records.used
    at = records.at(np.repeat(np.arange(n), used), np.tile(np.arange(used), n))
    return records.words[at].reshape(n, used, 8)


def _assert_same_takes(got: list[Any], expected: list[Any]) -> int:
    """The takes are equal, column for column; the rows stored."""
    assert len(got) == len(expected)
    stored = 0
    for (columns, slow), (ref_columns, ref_slow) in zip(got, expected, strict=True):
        assert (columns is None) == (ref_columns is None)
        assert (slow is None) == (ref_slow is None)
        if columns is not None:
            assert _same(columns, ref_columns)
            stored += len(columns["samples"]["tid"])
        if slow is not None:
            assert _same(slow, ref_slow)
    return stored


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
    stored = _assert_same_takes(with_skip, without)
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
    # The first row and its keyframes (tick + tid a multiple of KEYFRAME_TICKS)
    asleep = 1 + sum((tick + 13) % KEYFRAME_TICKS == 0 for tick in range(2, 50))
    assert per_tid[13] == asleep
    assert rows.decoded_rows == 49 + 49 + asleep  # the asleep thread's other slots were never decoded
    assert (np.diff(samples["run_ns"][samples["tid"] == 11]) == TICK_NS).all()


def test_a_thread_not_seen_by_the_probes_yet_whose_stat_says_r_is_stored_every_tick() -> None:
    """A worker busy on a CPU from before its first switch has no phase yet (no probe event) and its slot does not
    move, but its stat line says R: it is on a CPU or a run queue at every tick until a switch gives it a phase.
    The analyses never copy a row in R to the next tick (analyses/source.py _Fill), so it is stored at every tick
    (a CI run under load had such a worker without rows at ticks 1-4). One whose stat says S is stored as an
    asleep thread is: its first row and keyframes."""
    rng = random.Random(2)
    spinning, idle = _Thread(21, "busy", rng), _Thread(22, "sleeper", rng)  # both phase unknown, never switched
    rows = EbpfRows(DEFAULT_RULES)
    rows.layout({"id": 1, "tids": [21, 22], "pids": [PID] * 2, "slots": [0, 1]})
    texts = [stat_line(21, PID, state="R").encode(), stat_line(22, PID, state="S").encode()]
    header = frames.EBPF_TICK_HEADER.pack(1, 1, 1_000_000_000, 2)
    lengths = np.asarray([len(t) for t in texts], dtype="<u4").tobytes()
    rows.stat(header + np.arange(2, dtype="<u4").tobytes() + lengths + b"".join(texts))
    raw = spinning.slot() + idle.slot()
    for tick in range(1, 30):
        rows.tick(frames.EBPF_TICK_HEADER.pack(tick, 1, 1_000_000_000 + tick * TICK_NS, len(raw)) + raw)
        if tick == 14:  # a take between: the stat read is carried to the next chunk
            columns, _ = rows.take()
            assert columns is not None
            first = columns["samples"]
    columns, _ = rows.take()
    assert columns is not None
    samples = {k: np.concatenate([first[k], columns["samples"][k]]) for k in ("tid", "tick")}
    assert sorted(samples["tick"][samples["tid"] == 21].tolist()) == list(range(1, 30))
    idle_ticks = samples["tick"][samples["tid"] == 22].tolist()
    assert idle_ticks == sorted({1, 15} | {t for t in range(1, 30) if (t + 22) % KEYFRAME_TICKS == 0})


def test_a_major_fault_shows_from_the_switch_out_that_copied_it_not_from_the_next_stat_read() -> None:
    """The probes copy task_struct.maj_flt at each switch-out (sampler.bpf.c): a major fault shows at the first tick
    after the switch-out that follows it, where it showed only at the thread's next stat read before (its turn
    comes every STAT_SLOW_NS: 25-50 ms late on a one-thread target, up to 300 ms on the Bitwig shape). A stat read
    higher than the copy (a thread still on a CPU since its fault) shows its value: each is a count as of a time
    at or before the row's, so their maximum never shows a fault before it was taken."""
    thread = _Thread(11, "sleeper", random.Random(1))
    thread.phase, thread.prev_state, thread.majflt = PHASE_OFF, 0x1, 5
    rows = EbpfRows(DEFAULT_RULES)
    rows.layout({"id": 1, "tids": [11], "pids": [PID], "slots": [0]})

    def stat(tick: int, majflt: int) -> None:
        text = stat_line(11, PID, majflt=majflt).encode()
        header = frames.EBPF_TICK_HEADER.pack(tick, 1, 1_000_000_000 + tick * TICK_NS - 1000, 1)
        rows.stat(header + np.zeros(1, dtype="<u4").tobytes() + np.array([len(text)], "<u4").tobytes() + text)

    stat(1, 5)
    for tick in range(1, 31):
        if tick == 10:  # woke, ran, took two major faults, left the CPU asleep: the switch-out copies 7
            thread.switches, thread.run, thread.majflt = thread.switches + 1, thread.run + 50_000, 7
            thread.event = thread.since = 1_000_000_000 + tick * TICK_NS - 500_000
        if tick == 20:
            stat(20, 9)  # read while on a CPU after two more (its slot, copied at the last switch-out, says 7)
        raw = thread.slot()
        rows.tick(frames.EBPF_TICK_HEADER.pack(tick, 1, 1_000_000_000 + tick * TICK_NS, len(raw)) + raw)
    columns, _ = rows.take()
    assert columns is not None
    samples = columns["samples"]
    shown = dict(zip(samples["tick"].tolist(), samples["majflt"].tolist(), strict=True))
    assert shown[1] == 5 and shown[10] == 7 and shown[20] == 9
    assert sorted(shown) == [1, 10, 20]  # stored where it changed (no keyframe of tid 11 in ticks 1-30)


def test_a_stat_line_is_stored_at_the_first_tick_taken_after_it_was_read() -> None:
    """Under the kernel's tick the recorder reads the stat lines at a wake-up, then drains the ticks the kernel
    took since the last one: the frame is numbered as the first of them, but a value read at T (a major fault,
    a policy change) must not show at a tick before T. Across a take (the writer's chunk) too."""
    busy = _Thread(11, "busy", random.Random(1))
    busy.phase, busy.since, busy.event = PHASE_ON_CPU, 900_000_000, 900_000_000
    rows = EbpfRows(DEFAULT_RULES)
    rows.layout({"id": 1, "tids": [11], "pids": [PID], "slots": [0]})

    def stat(tick: int, t_ns: int) -> None:
        text = busy.stat()
        header = frames.EBPF_TICK_HEADER.pack(tick, 1, t_ns, 1)
        rows.stat(header + np.zeros(1, dtype="<u4").tobytes() + np.array([len(text)], "<u4").tobytes() + text)

    def tick(number: int) -> None:
        raw = busy.slot()
        rows.tick(frames.EBPF_TICK_HEADER.pack(number, 1, 1_000_000_000 + number * TICK_NS, len(raw)) + raw)

    stat(0, 999_000_000)  # before tick 0
    tick(0)
    busy.utime = 5
    stat(1, 1_000_000_000 + 6 * TICK_NS + 1)  # read just after tick 6, sent before ticks 1-10
    first, slow_first = rows.take()  # a chunk ends between the frame and its ticks
    for number in range(1, 11):
        tick(number)
    busy.utime = 9
    stat(11, 1_000_000_000 + 10 * TICK_NS + 1)  # read after the last tick: stored at none
    second, slow_second = rows.take()
    assert first is not None and second is not None
    samples = second["samples"]
    assert samples["tick"].tolist() == list(range(1, 11))  # on a CPU: a row each tick
    assert samples["utime"].tolist() == [0] * 6 + [5] * 4
    assert slow_first is not None and slow_first["tick"].tolist() == [0]  # the thread changes' ticks alike
    assert slow_second is not None and slow_second["tick"].tolist() == [7]
    assert rows.stats_waiting  # the last one waits for a tick that never comes


@pytest.mark.parametrize("seed", range(6))
def test_slots_sent_as_changes_store_the_rows_of_every_slot_sent_whole(seed: int) -> None:
    """Ticks dropped at random (the writer behind), in runs, the first among them, across the thread exits, the
    slot cleared and given back, the new thread (more slots: a whole frame), keyframes and takes of the stream."""
    stream = _stream(seed)
    rng = random.Random(seed)
    ticks = sum(kind == "tick" for kind, _ in stream)
    drops = {1, *rng.sample(range(2, ticks + 1), 25)}
    start = rng.randrange(100, 300)
    drops |= set(range(start, start + 4))
    sent, whole, encoder = _sent(stream, drops)
    got_rows, got = _replay(sent, skip=True)
    every, expected = _replay(whole, skip=False)
    assert _assert_same_takes(got, expected) > 1000
    assert got_rows.deltas_dropped == 0
    # The deltas' lists of changed slots stand for the bytes compared: most slots are never decoded.
    assert got_rows.decoded_rows < 0.5 * every.decoded_rows
    # Mostly changes: a whole frame at the start, after each run of drops and at the new thread's layout.
    deltas = [payload for kind, payload in sent if kind == "delta"]
    assert encoder.full_frames <= 35 and len(deltas) >= ticks - len(drops) - 35
    assert sum(map(len, deltas)) < 0.5 * sum(len(p) for k, p in whole if k == "tick") * len(deltas) / ticks


def _batch_ticks(frame: bytes) -> tuple[list[int], list[int]]:
    """The ticks of an EBPF_TICKS frame (b"": none) and whether each is whole."""
    if not frame:
        return [], []
    payload = frame[frames.FRAME.size :]
    n = frames.EBPF_TICKS_HEADER.unpack_from(payload)[0]
    columns = np.frombuffer(payload, "<u4", 5 * n, frames.EBPF_TICKS_HEADER.size + 8 * n).reshape(5, n)
    return columns[0].tolist(), columns[4].tolist()


def _kernel_sent(
    stream: list[tuple[str, Any]], rng: random.Random, refused_at: set[int], drops: set[int]
) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]], KernelTicks]:
    """The stream as the recorder sends it under the kernel's tick (sampler.bpf.c KERNEL_TICK): per tick, the
    records of the slots that differ from those the kernel sent last and a closing record; drained every few
    ticks, sometimes mid-tick, through KernelTicks and SlotFrames. At the positions in `refused_at` the ring
    refused the closing record (the tick is missing, its slot records stay), at those in `drops` the recorder
    drops the frame (the writer behind). Also the reference: the ticks sent, each slot frame whole, in the
    same order among the other frames."""
    encoder = SlotFrames()
    kernel = KernelTicks(64, TICK_NS, encoder)
    kernel.start_ns = 1_000_000_000
    sent_by_kernel = np.zeros((64, 8), dtype="<u8")
    refused = 0
    sent: list[tuple[str, Any]] = []
    whole: list[tuple[str, Any]] = []
    pending: list[np.ndarray] = []  # records not drained yet
    payloads: dict[int, tuple[int, bytes]] = {}  # tick -> position, its frame sent whole
    layout_rows: dict[int, int] = {}
    position = 0

    def drain(records: np.ndarray) -> None:
        batch = kernel.take(records, layout_rows)
        numbers, _ = _batch_ticks(batch.frame)
        assert numbers == [number for number, _ in batch.done] and batch.ticks == len(numbers)
        taken = [payloads.pop(number) for number in numbers]
        for (number, at_ns), (_, payload) in zip(batch.done, taken, strict=True):
            assert (number, at_ns) == frames.EBPF_TICK_HEADER.unpack_from(payload)[0:3:2]
        if not numbers:
            return
        if any(tick_position in drops for tick_position, _ in taken):  # the recorder drops a drain's frame
            encoder.lost()
            return
        code = frames.FRAME.unpack_from(batch.frame)[0]
        assert code == frames.EBPF_TICKS
        sent.append(("ticks", batch.frame[frames.FRAME.size :]))
        whole.extend(("tick", payload) for _, payload in taken)

    for kind, payload in stream:
        if kind != "tick":
            if kind == "layout":
                layout_rows[payload["id"]] = len(payload["tids"])
            sent.append((kind, payload))
            whole.append((kind, payload))
            continue
        tick, layout_id, t_ns, _ = frames.EBPF_TICK_HEADER.unpack_from(payload)
        slots = np.frombuffer(payload, "<u8", offset=frames.EBPF_TICK_HEADER.size).reshape(-1, 8)
        changed = np.flatnonzero((slots != sent_by_kernel[: len(slots)]).any(axis=1))
        records = np.zeros(len(changed) + 1, dtype=TICK_REC)
        records["index"][:-1] = changed
        records["words"][:-1] = slots[changed]
        sent_by_kernel[changed] = slots[changed]
        position += 1
        payloads[tick] = (position, payload)
        if position in refused_at:
            refused += 1
            records = records[:-1]
        else:
            records["index"][-1], records["used"][-1] = TICK_INDEX, len(slots)
            records["words"][-1, :4] = (t_ns, layout_id, len(changed), refused)
        pending.append(records)
        if rng.random() < 0.3:  # a wake-up of the recorder: the ticks so far, maybe the last one halfway
            batch = np.concatenate(pending)
            cut = rng.randrange(len(batch) + 1) if rng.random() < 0.3 else len(batch)
            drain(batch[:cut])
            pending = [batch[cut:]]
    drain(np.concatenate(pending))
    return sent, whole, kernel


@pytest.mark.parametrize("seed", range(4))
def test_the_kernels_tick_records_make_the_frames_of_the_recorders_tick(seed: int) -> None:
    """Under the kernel's tick the writer stores exactly the rows of every slot sent whole: across drains
    mid-tick, closing records the full ring refused (two ticks' records in one run, a slot twice), dropped
    frames, the thread exits, the cleared slot, the new thread's slot (a new slot count) and the stream's
    missed tick, which the kernel's tick times number as missed."""
    stream = _stream(seed)
    rng = random.Random(seed)
    ticks = sum(kind == "tick" for kind, _ in stream)
    refused_at = set(rng.sample(range(2, ticks + 1), 6))
    drops = set(rng.sample(sorted(set(range(2, ticks + 1)) - refused_at), 10))
    sent, whole, kernel = _kernel_sent(stream, rng, refused_at, drops)
    got_rows, got = _replay(sent, skip=True)
    every, expected = _replay(whole, skip=False)
    assert _assert_same_takes(got, expected) > 1000
    assert got_rows.deltas_dropped == 0
    assert kernel.missed == len(refused_at) + 1  # the refused closing records and the stream's missed tick
    assert got_rows.decoded_rows < 0.5 * every.decoded_rows  # deltas: the kernel compared the slots
    # One frame per drain, each tick in it a delta but the first, those after a dropped frame, at the new slot
    # count and every FULL_FRAME_TICKS.
    batches = [_batch_ticks(frames.FRAME.pack(frames.EBPF_TICKS, len(p)) + p) for kind, p in sent if kind == "ticks"]
    in_frames = sum(len(numbers) for numbers, _ in batches)
    assert in_frames == sum(kind == "tick" for kind, _ in whole) > 2.5 * len(batches)
    assert sum(sum(flags) for _, flags in batches) <= len(drops) + 1 + 1 + ticks // FULL_FRAME_TICKS


def test_a_delta_is_taken_against_the_frame_sent_before_not_the_one_made_before() -> None:
    """A recorder that drops a tick's frame without telling the encoder sends a delta against slots the writer
    never got: the writer stores no tick from it, nor from the deltas after it, until the next whole frame;
    the rows it stores are those of the ticks it kept, sent whole."""
    stream = _stream(3)
    forget = 60
    sent, whole, _ = _sent(stream, {forget}, full_every=50, forget=forget)
    ordered = [frames.EBPF_TICK_HEADER.unpack_from(payload)[0] for kind, payload in whole if kind == "tick"]
    # The frame made at position 60 was dropped (not sent); those of 61..100 are deltas on it, lost; 101 (50
    # ticks after 51) is whole.
    lost = set(ordered[forget - 1 : 99])
    kept = [(k, p) for k, p in whole if k != "tick" or frames.EBPF_TICK_HEADER.unpack_from(p)[0] not in lost]
    got_rows, got = _replay(sent, skip=True)
    _, expected = _replay(kept, skip=False)
    assert got_rows.deltas_dropped == len(lost) == 40
    assert _assert_same_takes(got, expected) > 1000
    stored = np.concatenate([columns["samples"]["tick"] for columns, _ in got if columns is not None])
    assert not np.isin(stored, list(lost)).any() and np.isin(max(lost) + 1, stored)


def test_a_whole_slot_frame_comes_after_a_drop_a_new_slot_count_and_every_full_every_ticks() -> None:
    encoder = SlotFrames(full_every_ticks=10)
    raw = bytes(range(64)) * 3

    def kind(tick: int, slots: bytes) -> int:
        return frames.FRAME.unpack_from(encoder.frame(tick, 1, tick * TICK_NS, slots))[0]

    assert kind(0, raw) == frames.EBPF_TICK
    assert [kind(t, raw) for t in range(1, 10)] == [frames.EBPF_DELTA] * 9
    assert kind(10, raw) == frames.EBPF_TICK  # every 10 ticks, missed ones counted
    assert kind(13, raw) == frames.EBPF_DELTA
    encoder.lost()
    assert kind(14, raw) == frames.EBPF_TICK
    assert kind(15, raw + raw[:64]) == frames.EBPF_TICK  # a slot more
    assert kind(16, raw + raw[:64]) == frames.EBPF_DELTA
    changed = bytearray(raw + raw[:64])
    changed[64 + 39] ^= 1  # the last byte of slot 1's faults
    changed[3 * 64] ^= 0x80  # the first byte of slot 3
    frame = encoder.frame(17, 1, 17 * TICK_NS, bytes(changed))
    payload = frame[frames.FRAME.size :]
    *_, used, base_tick, count = frames.EBPF_DELTA_HEADER.unpack_from(payload)
    assert (used, base_tick, count) == (4, 16, 2)
    start = frames.EBPF_DELTA_HEADER.size
    assert np.frombuffer(payload, "<u4", count, start).tolist() == [1, 3]
    assert payload[start + 8 :] == bytes(changed[64:128]) + bytes(changed[192:256])


def test_a_delta_of_another_slot_count_than_its_base_is_not_stored() -> None:
    rows = EbpfRows(DEFAULT_RULES)
    rows.layout({"id": 1, "tids": [11], "pids": [PID], "slots": [0]})
    raw = bytes(64) * 3
    rows.tick(frames.EBPF_TICK_HEADER.pack(1, 1, TICK_NS, len(raw)) + raw)
    for used in (2, 4):  # one slot fewer, one more: the slots it leaves out are not the base's
        header = frames.EBPF_DELTA_HEADER.pack(2, 1, 2 * TICK_NS, used, 1, 1)
        rows.delta(header + np.array([0], dtype="<u4").tobytes() + bytes(range(64)))
    assert rows.deltas_dropped == 2 and [t[1] for t in rows.ticks] == [1]
    header = frames.EBPF_DELTA_HEADER.pack(2, 1, 2 * TICK_NS, 3, 1, 1)
    rows.delta(header + np.array([1], dtype="<u4").tobytes() + bytes(range(64)))
    assert [t[1] for t in rows.ticks] == [1, 2]
    block = _slots_by_tick(rows)
    assert block.tobytes() == raw + bytes(64) + bytes(range(64)) + bytes(64)


@pytest.mark.parametrize("count", [0, 1, 7, 5000])
@pytest.mark.parametrize("alphabet", ["SRDTZ", "SR\u00e9\U0001f600"])
def test_the_state_column_is_pyarrows_dictionary_encoding_of_the_letters(count: int, alphabet: str) -> None:
    """Its dictionary in order of first appearance, "" (no letter) and all, as pyarrow makes it from strings; a
    letter beyond the 16-bit codes too."""
    letters = np.random.default_rng(count).choice(np.array(["", *alphabet], dtype="<U1"), count)
    made, reference = letters_column(letters), pa.array(letters.astype(object)).dictionary_encode()
    assert made.type == reference.type and made.equals(reference)
    assert made.dictionary.to_pylist() == reference.dictionary.to_pylist()


def test_a_kernel_tick_not_sent_leaves_its_changes_to_the_next_one_sent() -> None:
    """A tick of a layout without threads is not sent (nor one before tick 0): the slots it changed go with the
    next tick sent, which the writer rebuilds from the tick sent before."""
    kernel = KernelTicks(8, TICK_NS, SlotFrames())
    kernel.start_ns = 1_000_000_000

    def tick(number: int, layout_id: int, changed: dict[int, int]) -> np.ndarray:
        records = np.zeros(len(changed) + 1, dtype=TICK_REC)
        records["index"][:-1] = list(changed)
        records["words"][:-1, 0] = list(changed.values())
        records["index"][-1], records["used"][-1] = TICK_INDEX, 4
        records["words"][-1, :4] = (kernel.start_ns + number * TICK_NS, layout_id, len(changed), 0)
        return records

    before = tick(-1, 1, {3: 7})  # before tick 0: not sent
    first = kernel.take(np.concatenate([before, tick(0, 1, {0: 1, 1: 1})]), {1: 4, 2: 0})
    assert _batch_ticks(first.frame) == ([0], [1])  # whole, with slot 3's record
    batch = kernel.take(np.concatenate([tick(1, 2, {0: 2}), tick(2, 1, {1: 2}), tick(3, 1, {2: 5})]), {1: 4, 2: 0})
    assert [number for number, _ in batch.done] == [1, 2, 3] and batch.ticks == 2 and batch.rows == 8
    assert _batch_ticks(batch.frame) == ([2, 3], [0, 0])
    rows = EbpfRows(DEFAULT_RULES)
    rows.layout({"id": 1, "tids": [1, 2, 3, 4], "pids": [PID] * 4, "slots": [0, 1, 2, 3]})
    for frame in (first.frame, batch.frame):
        list(rows.batch(frame[frames.FRAME.size :]))
    block = _slots_by_tick(rows)
    assert block[:, :, 0].tolist() == [[1, 1, 0, 7], [2, 2, 0, 7], [2, 2, 5, 7]]


def test_the_rows_decoded_are_those_that_may_change_whole_frames_compared() -> None:
    """A whole frame in the middle of a run (every FULL_FRAME_TICKS, after a drop) lists every slot: the writer
    compares each with the slot's bytes before, so it decodes what a delta would have listed, and no (ticks x
    slots) array is made: the rows decoded are the first tick's, the busy thread's every tick, the one whose
    slot changed, the stat read and the keyframes, and the rows stored are those of decoding every slot."""
    rng = random.Random(2)
    threads = [_Thread(300 + i, "sleeper", rng) for i in range(40)]
    for thread in threads:
        thread.phase, thread.prev_state, thread.event = PHASE_OFF, 1, 900_000_000
    busy = threads[0]
    busy.phase, busy.since, busy.event = PHASE_ON_CPU, 900_000_000, 900_000_000
    tids = [t.tid for t in threads]
    stream: list[tuple[str, Any]] = [("layout", {"id": 1, "tids": tids, "pids": [PID] * 40, "slots": list(range(40))})]
    texts = [t.stat() for t in threads]
    header = frames.EBPF_TICK_HEADER.pack(1, 1, 1_000_000_000, 40)
    lengths = np.asarray([len(t) for t in texts], dtype="<u4").tobytes()
    stream.append(("stat", header + np.arange(40, dtype="<u4").tobytes() + lengths + b"".join(texts)))
    n = 60
    for tick in range(1, n + 1):
        if tick == 30:
            threads[5].switches += 1  # one slot changes, in a whole frame
            threads[5].event += 1
        if tick == 41:
            header = frames.EBPF_TICK_HEADER.pack(tick, 1, 1_000_000_000 + tick * TICK_NS, 1)
            text = threads[7].stat()
            body = np.asarray([7], dtype="<u4").tobytes() + np.asarray([len(text)], dtype="<u4").tobytes()
            stream.append(("stat", header + body + text))
        raw = b"".join(t.slot() for t in threads)
        stream.append(("tick", frames.EBPF_TICK_HEADER.pack(tick, 1, 1_000_000_000 + tick * TICK_NS, len(raw)) + raw))
    stream.append(("take", None))
    got_rows, got = _replay(stream, skip=True)
    every, expected = _replay(stream, skip=False)
    _assert_same_takes(got, expected)
    keyframes = sum((tick + tid) % KEYFRAME_TICKS == 0 for tick in range(2, n + 1) for tid in tids[1:])
    # 40 at the first tick; the busy thread at the 59 others; thread 5 at tick 30 and 7 at 41 (unless a keyframe)
    extra = sum((tick + tids[k]) % KEYFRAME_TICKS != 0 for tick, k in ((30, 5), (41, 7)))
    assert got_rows.decoded_rows == 40 + (n - 1) + keyframes + extra
    assert every.decoded_rows == 40 * n


def test_the_writer_imports_what_its_first_ebpf_frames_and_chunk_need_before_it_is_ready(tmp_path: Any) -> None:
    """The eBPF rows builder, Arrow's group-by and the pandas bridge are imported before the ready signal
    (samplers/writer_process.py _import_ahead), not at the first frames: the writer's CPU is counted from that
    signal (trailer writer_cpu_ns), and an import there stalls the first chunk. `-X importtime` prints each
    import as it happens: none after the ready byte."""
    import subprocess

    from tests.helpers import REPO, child_env

    body = [
        frames.encode(frames.META, json.dumps({"ebpf_sampler": {"prev_state_rules": DEFAULT_RULES.to_json()}}).encode())
    ]
    for kind, payload in _stream(0)[:200]:
        if kind == "layout":
            body.append(frames.encode(frames.LAYOUT, json.dumps({**payload, "sched": []}).encode()))
        elif kind in ("stat", "tick"):
            body.append(frames.encode(frames.STAT_SLOW if kind == "stat" else frames.EBPF_TICK, payload))
    body.append(frames.encode(frames.TRAILER, b"{}"))
    # One pipe for both streams, so the ready byte sits among the import lines in the order they were written
    # (a thread reading stderr apart could lag behind the byte under load and blame imports made before it).
    writer = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "samplers.writer_process", str(tmp_path / "x.ssf")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=child_env(),
        cwd=REPO,
    )
    out, _ = writer.communicate(b"".join(body), timeout=120)
    assert writer.returncode == 0, out[-2000:]
    lines = out.split(b"\n")
    ready = next(i for i, line in enumerate(lines) if line.startswith(b"R"))  # import lines begin "import time:"
    assert all(line.startswith(b"import time:") for line in lines[:ready] if line), lines[:ready]
    after = [lines[ready][1:], *lines[ready + 1 :]]
    text = next(line[line.index(b'{"') :] for line in after if b'{"' in line).decode()
    report = json.JSONDecoder().raw_decode(text)[0]  # the report, written without a newline
    assert report["rows"]["samples"] > 0
    late = [line.rsplit(b"|", 1)[-1].strip().decode() for line in after if b"import time:" in line]
    assert not [name for name in late if name.startswith(("samplers", "capture", "pyarrow"))], late


def _event_frames_fed_slowly(count: int) -> tuple[int, list[bytes]]:
    """A pipe's read end, fed `count` EVENT frames 50 ms apart by a thread that then closes it; the frames."""
    import os
    import threading
    import time

    read_end, write_end = os.pipe()
    sent = [frames.encode(frames.EVENT, json.dumps({"n": n}).encode()) for n in range(count)]

    def feed() -> None:
        for data in sent:
            frames.write_all(write_end, data)
            time.sleep(0.05)
        os.close(write_end)

    threading.Thread(target=feed, daemon=True).start()
    return read_end, sent


def test_frames_that_arrive_within_the_gather_interval_are_taken_in_one_go() -> None:
    """read_frames(gather_s=...) (the writer's GATHER_S): the frame-drain thread empties the pipe as frames come,
    the consumer takes what arrived at most every gather_s, in one go; every frame comes out, in order."""
    import os

    read_end, sent = _event_frames_fed_slowly(4)
    taken = list(frames._chunks(read_end, 1 << 20, True, 1.0))  # the first at once, the others gathered
    os.close(read_end)
    assert b"".join(b"".join(reads) for reads in taken) == b"".join(sent) and len(taken) <= 2  # one by one: four
    read_end, _ = _event_frames_fed_slowly(4)
    assert [json.loads(p)["n"] for _, p in frames.read_frames(read_end, drain_in_thread=True, gather_s=0.5)] == [
        0,
        1,
        2,
        3,
    ]
    os.close(read_end)


def test_the_pipes_end_is_taken_at_once_whatever_the_gather_interval() -> None:
    """The writer's last frames (the trailer, or all a killed recorder sent) come out as soon as the pipe ends,
    not a gather interval later: catch-load's end waits for the writer."""
    import os
    import time

    read_end, _ = _event_frames_fed_slowly(3)
    began = time.monotonic()
    taken = [json.loads(p)["n"] for _, p in frames.read_frames(read_end, drain_in_thread=True, gather_s=60.0)]
    took = time.monotonic() - began
    os.close(read_end)
    assert taken == [0, 1, 2]
    assert took < 30.0, took  # a wait for the gather interval is 60 s; the pipe ended after 0.15 s


def test_kernel_ticks_are_numbered_by_the_grid_across_skipped_periods() -> None:
    """KernelTicks._number on stamps of a timer on a 2 ms grid, each late by its latency: a first tick late, a
    tick after a skipped period a few microseconds less late than every one before it (the CI run that numbered
    it one short), a tick 1.6 ms late (the latest seen beside stress-ng); every number and the missed count
    exact."""
    grid0 = 1_000_000_000
    kernel = KernelTicks(8, TICK_NS, SlotFrames())
    kernel.start_ns = grid0 - 500_000
    late_us = {0: 300, 1: 40, 2: 35, 3: 38, 4: 41, 6: 20, 7: 1600, 8: 33, 9: 36, 12: 2, 13: 900, 14: 30, 15: 0}
    numbers = [kernel._number(grid0 + k * TICK_NS + us * 1000) for k, us in late_us.items()]
    assert [n - numbers[0] for n in numbers] == list(late_us)
    assert kernel.missed == 3  # 5, 10 and 11
