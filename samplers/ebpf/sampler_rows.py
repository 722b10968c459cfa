"""The eBPF sampler's frames -> rows of the `samples` table, in the writer process (numpy, per chunk).

Each EBPF_TICK frame holds the sampler's slots as copied at one tick, each EBPF_DELTA frame those of them that
changed since the slot frame before (the others are rebuilt from it), each EBPF_TICKS frame the ticks of one
drain of the kernel's tick, each as one of those; each STAT_SLOW frame the stat lines of the few threads read
that tick (each thread's turn once per STAT_SLOW_NS, round robin, read where it can have changed; a new
thread's at once). A row per thread of the layout per tick, with the /proc sampler's columns:

    run_ns wait_ns slices    the kernel's own counters (copied at each switch-out), extended to the read
                             time for a thread on a CPU (run) or on a run queue (wait): live, where /proc's
                             lag until the next scheduler tick
    state cpu                from the last switch or wake-up: R on a CPU or runnable, else the letter of
                             the state it left the CPU in; the stat read's until the first event
    minflt                   user page faults counted by the probes (minor and major), from the stat value
                             when the thread was added
    majflt                   task_struct.maj_flt as the probes copied it at the last switch-out (the stat
                             value when added), or the latest stat read's where that is higher (a thread
                             still on a CPU since its fault): a major fault shows at the tick after the
                             switch-out that follows it, not up to a stat read's turn later
    utime stime nice rtprio policy blkio_ticks starttime
                             the thread's latest stat read (STAT_SLOW_NS old at most, or
                             STAT_REFRESH_NS for a thread asleep since, whose counters have not moved)

So the analyses read these rows as they read /proc's (DESIGN.md "The eBPF sampler").
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from samplers import frames
from samplers.ebpf.sampler import KEYFRAME_TICKS
from samplers.ebpf.tracefs import PrevStateRules, decode_one
from samplers.procfs import STAT_NUMERIC, parse_stat_blob

SLOT_DTYPE = np.dtype(
    [
        ("run_ns", "<u8"),
        ("wait_ns", "<u8"),
        ("since_ns", "<u8"),
        ("switches", "<u8"),
        ("faults", "<u8"),
        ("event_ns", "<u8"),
        ("tid", "<u4"),
        ("prev_state", "<u4"),
        ("cpu", "<u2"),
        ("phase", "u1"),
        ("pad0", "u1"),
        ("majflt", "<u4"),
    ]
)
PHASE_UNKNOWN, PHASE_ON_CPU, PHASE_RUNNABLE, PHASE_OFF, PHASE_EXITED = 0, 1, 2, 3, 4
_STAT_COLUMNS = list(STAT_NUMERIC)
_MINFLT = _STAT_COLUMNS.index("minflt")
_MAJFLT = _STAT_COLUMNS.index("majflt")
_CPU = _STAT_COLUMNS.index("cpu")
_WORDS = SLOT_DTYPE.itemsize // 8
_KEY_SHIFT = np.int64(1 << 34)  # (tid, tick + 1) as one sortable int64: tids < 2**22, ticks < 2**34


def rows_for(meta: dict[str, Any]) -> EbpfRows:
    """The rows builder of a recording whose metadata has this `ebpf_sampler` entry."""
    return EbpfRows(PrevStateRules.from_json(meta["prev_state_rules"]))


class EbpfRows:
    """Collects EBPF_TICK, EBPF_DELTA and STAT_SLOW frames; `take()` returns the samples columns of those since
    the last."""

    def __init__(self, rules: PrevStateRules, *, skip_unchanged: bool = True) -> None:
        self.rules = rules
        # Only the rows that may differ from the thread's at the tick before are decoded (see _group); off: every
        # slot of every tick, as the reference the tests compare with.
        self.skip_unchanged = skip_unchanged
        self.slot_rows = 0  # the layouts' slots handed over so far, and those decoded (not skipped)
        self.decoded_rows = 0
        self.dead_bits = sum(bit for bit, letter in rules.letters.items() if letter in ("X", "Z"))
        self.layouts: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # id -> tids, pids, slots
        # layout id, tick, t_ns, slot count, then either the slots' bytes (a whole frame) or the indices and u64
        # words of those that differ from the tick before's (a delta: the others are its, rebuilt in take())
        self.ticks: list[tuple[int, int, int, int, memoryview | None, np.ndarray | None, np.ndarray | None]] = []
        self.stats: list[tuple[int, bytes]] = []  # STAT_SLOW payloads placed (stat()), each with its tick
        self.stats_waiting: deque[tuple[int, int, bytes]] = deque()  # (tick from, read time, payload) not placed yet
        self.rows_pending = 0
        # The latest stat read of each thread, carried from chunk to chunk.
        self.carry_tid = np.zeros(0, dtype=np.int64)
        self.carry_numbers = np.zeros((0, len(_STAT_COLUMNS)), dtype=np.int64)
        self.carry_state = np.zeros(0, dtype="<U1")
        self._letters: dict[int, str] = {}
        self.s_numbers = np.zeros((0, len(_STAT_COLUMNS)), dtype=np.int64)  # the stat reads (_stat_index)
        self.s_numbers_by_column = self.s_numbers.T.copy()
        self.s_state = np.zeros(0, dtype="<U1")
        self.last_tid = np.zeros(0, dtype=np.int64)  # each thread's last run/wait written, by tid
        self.last_run = np.zeros(0, dtype=np.int64)
        self.last_wait = np.zeros(0, dtype=np.int64)
        self._unmerged: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.base_used: int | None = None  # the slot count and tick of the last slot frame stored (delta())
        self.base_tick = 0
        self.last_words = np.zeros((0, _WORDS), dtype="<u8")  # the slots of the last tick taken (a delta's base)
        self.deltas_dropped = 0

    def layout(self, spec: dict[str, Any]) -> None:
        self.layouts[int(spec["id"])] = (
            np.asarray(spec["tids"], dtype=np.int64),
            np.asarray(spec["pids"], dtype=np.int64),
            np.asarray(spec["slots"], dtype=np.int64),
        )

    def tick(self, payload: bytes) -> None:
        tick, layout_id, t_ns, length = frames.EBPF_TICK_HEADER.unpack_from(payload)
        start = frames.EBPF_TICK_HEADER.size
        # A view, not a copy: the slots are copied once, into the run's records in take() (slot_records).
        slots = memoryview(payload)[start : start + length]
        self._add((layout_id, tick, t_ns, length // SLOT_DTYPE.itemsize, slots, None, None))

    def delta(self, payload: bytes) -> None:
        """An EBPF_DELTA frame: the slots that changed since the base tick's frame, the others being its. A
        delta whose base is not the slot frame received last (never expected: the recorder sends a whole frame
        after one it dropped) is dropped and counted, as are those after it until the next whole frame: a tick
        is stored with its own slots or not at all."""
        tick, layout_id, t_ns, used, base_tick, count = frames.EBPF_DELTA_HEADER.unpack_from(payload)
        if base_tick != self.base_tick or used != self.base_used:
            self.deltas_dropped += 1
            return
        start = frames.EBPF_DELTA_HEADER.size
        index = frames.array_at(payload, "<u4", count, start)
        words = frames.array_at(payload, "<u8", count * _WORDS, start + 4 * count).reshape(count, _WORDS)
        self._add((layout_id, tick, t_ns, used, None, index, words))

    def batch(self, payload: bytes) -> Iterator[int]:
        """An EBPF_TICKS frame: a drain of the kernel's ticks, each whole or a delta on the tick before it (the
        first on the base), taken as the EBPF_TICK and EBPF_DELTA frames of those ticks would be, one by one:
        the read time of each is yielded once it is taken (a generator: nothing is taken unless it is run), so
        that the writer ends its chunks at the ticks it would end them at with a frame per tick (and stores the
        same rows)."""
        drain = frames.decode_ebpf_ticks(payload)
        base_tick, index, words = drain.base_tick, drain.index, drain.words
        begin = 0
        for tick, layout_id, t_ns, used, count, is_whole in zip(
            drain.ticks, drain.layouts, drain.times, drain.useds, drain.counts, drain.wholes, strict=True
        ):
            end = begin + count
            if is_whole:
                self._add((layout_id, tick, t_ns, used, words[begin:end].data, None, None))
            elif base_tick != self.base_tick or used != self.base_used:
                self.deltas_dropped += 1  # as delta()'s: not on the slot frame taken last
            else:
                self._add((layout_id, tick, t_ns, used, None, index[begin:end], words[begin:end]))
            base_tick = tick
            begin = end
            yield t_ns

    def _add(self, entry: tuple[int, int, int, int, memoryview | None, np.ndarray | None, np.ndarray | None]) -> None:
        layout_id, tick, t_ns, used, *_ = entry
        waiting = self.stats_waiting
        while waiting and tick >= waiting[0][0] and t_ns >= waiting[0][1]:  # stat(): read by now, stored here
            self.stats.append((tick, waiting.popleft()[2]))
        self.ticks.append(entry)
        self.rows_pending += len(self.layouts[layout_id][0])
        self.base_tick, self.base_used = tick, used

    def stat(self, payload: bytes) -> None:
        """A STAT_SLOW frame: stored at the first tick taken from its tick on whose time is at or after its own,
        the last read's: a value read at T is never shown at a tick before T. Under the kernel's tick the lines
        are read at the recorder's wake-ups, after ticks it has not drained yet (its header's tick is the first of
        those): numbered so, a major fault or a policy change would show up to one wake-up before it happened.
        Parsed in _slow(), all of a chunk's at once; those read after the recording's last tick are not stored."""
        tick, _, t_ns, _ = frames.EBPF_TICK_HEADER.unpack_from(payload)
        self.stats_waiting.append((tick, t_ns, payload))

    def _slow(self) -> dict[str, Any] | None:
        """The STAT_SLOW rows since the last take: columns, and the stat texts (for renames, policy changes)."""
        if not self.stats:
            return None
        size = frames.EBPF_TICK_HEADER.size
        # Each one's tick as placed (stat()), its layout, read time and line count.
        heads = [(tick, *frames.EBPF_TICK_HEADER.unpack_from(payload)[1:]) for tick, payload in self.stats]
        views = [memoryview(payload) for _, payload in self.stats]
        indices = np.frombuffer(b"".join(v[size : size + 4 * h[3]] for v, h in zip(views, heads, strict=True)), "<u4")
        length = np.frombuffer(
            b"".join(v[size + 4 * h[3] : size + 8 * h[3]] for v, h in zip(views, heads, strict=True)), "<u4"
        ).astype(np.int64)
        blob = b"".join(v[size + 8 * h[3] :] for v, h in zip(views, heads, strict=True))
        self.stats = []
        counts = [h[3] for h in heads]
        layout_of = np.repeat(np.array([h[1] for h in heads], dtype=np.int64), counts)
        tids = np.zeros(len(indices), dtype=np.int64)
        pids = np.zeros(len(indices), dtype=np.int64)
        for layout_id in {h[1] for h in heads}:
            layout_tids, layout_pids, _ = self.layouts[layout_id]
            mine = layout_of == layout_id
            tids[mine] = layout_tids[indices[mine]]
            pids[mine] = layout_pids[indices[mine]]
        states, numbers = parse_stat_blob(blob, length)
        return {
            "tick": np.repeat(np.array([h[0] for h in heads], dtype=np.int64), counts),
            "t_ns": np.repeat(np.array([h[2] for h in heads], dtype=np.int64), counts),
            "tid": tids,
            "pid": pids,
            "states": states.astype("<U1"),
            "numbers": numbers,
            "lengths": length,
            "blob": blob,
        }

    def _letter(self, prev_state: int) -> str:
        letter = self._letters.get(prev_state)
        if letter is None:
            letter = self._letters[prev_state] = decode_one(prev_state, self.rules)[:1]
        return letter

    def take(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """({"samples": columns, "sampler_ticks": columns}, slow stat rows) of the frames since the last call;
        None where there were none."""
        slow = self._slow()
        if slow is not None:
            self._unmerged.append((slow["tid"], slow["tick"], slow["numbers"], slow["states"]))
        if not self.ticks:
            return None, slow
        pinned = self._stat_reads()
        running = self._running_by_stat()
        parts: list[_GroupRows] = []
        end_tick, end_tids = -2, np.zeros(0, dtype=np.int64)  # the last tick of the run before, its threads' tids
        run_start = 0
        for end in range(1, len(self.ticks) + 1):
            # Runs of ticks with one layout and one slot count are taken as one.
            first = self.ticks[run_start]
            if end < len(self.ticks) and self.ticks[end][0] == first[0] and self.ticks[end][3] == first[3]:
                continue
            part = self._group(self.ticks[run_start:end], pinned, running, end_tick, end_tids)
            run_start = end
            parts.append(part)
            end_tick, end_tids = part.end_tick, part.end_tids
        self.ticks = []
        self.rows_pending = 0
        words = np.concatenate([p.words for p in parts])
        tick_col = np.concatenate([p.tick for p in parts])
        t_col = np.concatenate([p.t_ns for p in parts])
        tid_col = np.concatenate([p.tid for p in parts])
        pid_col = np.concatenate([p.pid for p in parts])
        follow_col = np.concatenate([p.follows for p in parts])
        tick_ids, first_read = np.unique(np.concatenate([p.ticks_read for p in parts]), return_index=True)
        tick_times = np.concatenate([p.times_read for p in parts])[first_read]
        # The latest stat read at or before each row's tick (the recorder reads a new thread's stat in the
        # tick that first reads its slot, so every row has one).
        at, found = self._stat_index(tid_col, tick_col)
        # By thread, then time: the order the change detection and the running maximum need (the capture
        # stores a chunk in this order anyway).
        # Each run's rows come so (_group): sorted already unless a take holds several runs.
        key = tid_col * _KEY_SHIFT + tick_col
        order = None if (key[1:] > key[:-1]).all() else np.lexsort((tick_col, tid_col))
        if not found.all():
            order = np.flatnonzero(found) if order is None else order[found[order]]
        if order is not None:
            words, tick_col, t_col, tid_col, pid_col, at, follow_col = (
                column[order] for column in (words, tick_col, t_col, tid_col, pid_col, at, follow_col)
            )
        rec = words.view(SLOT_DTYPE).reshape(-1)
        fields = {
            name: rec[name]
            for name in (
                "run_ns", "wait_ns", "since_ns", "switches", "faults", "cpu", "phase", "prev_state", "majflt"
            )
        }  # fmt: skip
        phase = fields["phase"]
        since = fields["since_ns"].astype(np.int64)
        live = np.where(since > 0, np.maximum(t_col - since, 0), 0)
        run = fields["run_ns"].astype(np.int64) + np.where(phase == PHASE_ON_CPU, live, 0)
        wait = fields["wait_ns"].astype(np.int64) + np.where(phase == PHASE_RUNNABLE, live, 0)
        starts = np.r_[True, tid_col[1:] != tid_col[:-1]] if len(tid_col) else np.zeros(0, dtype=bool)
        run = self._never_back(tid_col, starts, run, self.last_run)
        wait = self._never_back(tid_col, starts, wait, self.last_wait)
        self._remember(tid_col, starts, run, wait)
        # A thread the probes have not seen yet (phase unknown) whose stat line said R has not left the CPU or its
        # run queue since (a switch would have given it a phase): stored at every tick as a thread with that phase
        # is, though nothing in its row moves (no probe event says since when it runs). The analyses never copy a
        # row in R to the next tick (analyses/source.py _Fill): without these, a worker busy on a CPU from before
        # its first switch had no row at the ticks until then.
        unknown_running = (phase == PHASE_UNKNOWN) & (self.s_state[at] == "R")
        forced = np.where(unknown_running, tick_col, -1)
        values = (
            run,
            wait,
            fields["switches"],
            fields["faults"],
            fields["cpu"],
            phase,
            fields["prev_state"],
            fields["majflt"],
            at,
            forced,
        )
        stored = changes(tid_col, tick_col, starts, values, follows=follow_col)
        # Every row decoded is stored, nearly always (_group decodes only the rows that may change): no copy.
        keep: np.ndarray | slice = slice(None) if stored.all() else stored
        kept = {name: np.ascontiguousarray(column[keep]) for name, column in fields.items()}
        phase, at = kept["phase"], at[keep]
        # The stat values column by column, each contiguous (Arrow copies a strided column element by element).
        numbers = self.s_numbers_by_column.take(at, axis=1)
        state = self.s_state[at]
        state[(phase == PHASE_ON_CPU) | (phase == PHASE_RUNNABLE)] = "R"
        off = np.flatnonzero(phase == PHASE_OFF)
        if len(off):
            distinct, inverse = np.unique(kept["prev_state"][off], return_inverse=True)
            state[off] = np.array([self._letter(int(v)) for v in distinct], dtype="<U1")[inverse]
        columns: dict[str, Any] = {
            "tick": tick_col[keep].astype(np.uint32),
            "t_ns": t_col[keep],
            "tid": tid_col[keep].astype(np.int32),
            "pid": pid_col[keep].astype(np.int32),
            "run_ns": run[keep],
            "wait_ns": wait[keep],
            "slices": kept["switches"].astype(np.int64),
            "state": letters_column(state),
        }
        for i, name in enumerate(_STAT_COLUMNS):
            columns[name] = numbers[i]
        columns["minflt"] = kept["faults"].astype(np.int64)
        # The probes' copy at the last switch-out, or the stat read's where higher: each is a count as of a time
        # at or before the row's tick, so their maximum never shows a fault before it was taken.
        columns["majflt"] = np.maximum(numbers[_MAJFLT], kept["majflt"].astype(np.int64))
        columns["cpu"] = np.where(phase != PHASE_UNKNOWN, kept["cpu"].astype(np.int64), numbers[_CPU])
        blkio = columns["blkio_ticks"]
        columns["blkio_ticks"] = pa.array(blkio, mask=blkio < 0)
        return {"samples": columns, "sampler_ticks": {"tick": tick_ids.astype(np.uint32), "t_ns": tick_times}}, slow

    def _group(
        self,
        group: list[Any],
        pinned: tuple[np.ndarray, np.ndarray],
        running: np.ndarray,
        before_tick: int,
        before_tids: np.ndarray,
    ) -> _GroupRows:
        """The rows of one run of ticks of one layout and slot count that may be stored, decoded, from its slot
        records: each thread's at the run's first tick and after a missed tick, and where its slot changed, where
        it is on a CPU or runnable (the read time extends its slice or wait), where a stat line of it was read,
        and at its keyframes. Every other row repeats the thread's row of the tick before, value for value
        (equal bytes give equal run, wait, switches, faults, CPU, phase and state; the running maximum,
        _never_back, holds; the stat read is the same): `changes` would drop it, and only needs to know which
        rows follow such rows (`follows`). No (ticks x slots) array: the work grows with what changed
        (DESIGN.md "The eBPF sampler"). `before_tick`, `before_tids`: the last tick of the run taken before in
        this take and the threads of it there (their rows there repeat their last decoded ones). `running`: the
        tids whose stat line said R (_running_by_stat): not seen by the probes yet, they are decoded every tick."""
        layout_tids, layout_pids, slots = self.layouts[group[0][0]]
        records = slot_records(group, self.last_words)
        n, used = len(group), records.used
        last = records.last()
        self.last_words = records.words[last]  # the slots of the run's last tick, the next delta's base
        # The layout's threads in this slot count, by tid: the rows come out by thread, then tick.
        ok = np.flatnonzero((slots >= 0) & (slots < used))
        ok = ok[np.argsort(layout_tids[ok], kind="stable")]
        at_slot, tids, pids = slots[ok], layout_tids[ok], layout_pids[ok]
        m = len(tids)
        ticks = np.array([r[1] for r in group], dtype=np.int64)
        times = np.array([r[2] for r in group], dtype=np.int64)
        if not m:
            return _GroupRows.empty(int(ticks[-1]))
        column_of = np.full(used, -1, dtype=np.int64)
        column_of[at_slot] = np.arange(m)
        # Each record's slot as the layout's thread: its tid, not gone (marked at sched_process_exit, or, should
        # that be missed, left the CPU dead). A slot not (or no longer) its thread's: removed, or given to another.
        fields = records.words.view(SLOT_DTYPE).reshape(-1)
        record_column = column_of[records.slot]
        phase = fields["phase"]
        gone = (phase == PHASE_EXITED) | ((phase == PHASE_OFF) & (fields["prev_state"] & self.dead_bits != 0))
        mine = (record_column >= 0) & (fields["tid"] == tids[record_column]) & ~gone
        steps = np.flatnonzero(ticks[1:] != ticks[:-1] + 1) + 1  # after a missed tick: every row moves
        unique_columns = (np.bincount(at_slot) <= 1).all() and (np.diff(tids) > 0).all()
        every = not self.skip_unchanged or not unique_columns or not (np.diff(ticks) > 0).all()
        if every:  # the reference, or nothing to rely on (not a run of ticks in order, one row per thread)
            i = np.tile(np.arange(n), m)
            j = np.repeat(np.arange(m), n)
        else:
            unknown_running = (phase == PHASE_UNKNOWN) & np.isin(fields["tid"], running)
            i, j = self._candidates(records, ticks, tids, record_column, mine, phase, unknown_running, steps, pinned)
        self.slot_rows += n * m
        at = records.at(i, at_slot[j])
        row_mine = (fields["tid"][at] == tids[j]) & ~gone[at]
        follows = np.zeros(len(i), dtype=bool)
        if len(i) > 1:
            # Sorted by thread, then tick: a row follows the thread's row before here, further back, when that
            # one was its thread's and no tick was missed between (a missed one decodes every row).
            same = j[1:] == j[:-1]
            follows[1:] = same & row_mine[:-1] & ~np.isin(i[1:], steps) & (not every)
        if ticks[0] == before_tick + 1:
            head = i == 0
            follows[head] = np.isin(tids[j[head]], before_tids)
        # The threads whose row of the run's last tick repeats their row before (not decoded), for the next run;
        # the ticks that read a thread of the layout (sampler_ticks).
        if every:
            skipped_at_end = np.zeros(m, dtype=bool)
            reading = np.zeros(n, dtype=bool)
            reading[i[row_mine]] = True
        else:
            skipped_at_end = mine[last][at_slot]
            skipped_at_end[j[i == n - 1]] = False
            reading = np.cumsum(records.changes(mine)) > 0
        keep = np.flatnonzero(row_mine)
        i, j, at = i[keep], j[keep], at[keep]
        self.decoded_rows += len(i)
        return _GroupRows(
            words=records.words[at],
            tick=ticks[i],
            t_ns=times[i],
            tid=tids[j],
            pid=pids[j],
            follows=follows[keep],
            ticks_read=ticks[reading],
            times_read=times[reading],
            end_tick=int(ticks[-1]),
            end_tids=tids[skipped_at_end],
        )

    def _candidates(
        self,
        records: SlotRecords,
        ticks: np.ndarray,
        tids: np.ndarray,
        record_column: np.ndarray,
        mine: np.ndarray,
        phase: np.ndarray,
        unknown_running: np.ndarray,
        steps: np.ndarray,
        pinned: tuple[np.ndarray, np.ndarray],
    ) -> tuple[np.ndarray, np.ndarray]:
        """(tick index, column) of the rows of one run that may differ from the tick before's (_group), sorted by
        column, then tick: numpy over the run, no Python per tick."""
        n, m = len(ticks), len(tids)
        keys = [np.repeat(np.arange(m) * n, 1 + len(steps)) + np.tile(np.r_[0, steps], m)]  # every row
        # Where a slot changed: a delta lists its slots (the recorder compared them); a whole tick's records
        # are compared with the slot's record before.
        changed = records.changed()
        listed = changed & (record_column >= 0) & (records.tick >= 1)
        keys.append(record_column[listed] * n + records.tick[listed])
        # On a CPU or runnable (or, not seen by the probes yet, R by its stat line): from its record to the slot's
        # next one.
        live = mine & ((phase == PHASE_ON_CPU) | (phase == PHASE_RUNNABLE) | unknown_running)
        start, stop = records.spans(live)
        lengths = stop - start
        offsets = np.repeat(np.cumsum(lengths) - lengths - start, lengths)
        keys.append(np.repeat(record_column[live] * n, lengths) + np.arange(int(lengths.sum())) - offsets)
        # Keyframes: (tick + tid) % KEYFRAME_TICKS == 0, the columns grouped by their residue.
        residue = tids % KEYFRAME_TICKS
        by_residue = np.argsort(residue, kind="stable")
        bounds = np.searchsorted(residue[by_residue], np.arange(KEYFRAME_TICKS + 1))
        want = -ticks % KEYFRAME_TICKS
        counts = bounds[want + 1] - bounds[want]
        firsts = np.repeat(bounds[want] - (np.cumsum(counts) - counts), counts)
        keys.append(by_residue[firsts + np.arange(int(counts.sum()))] * n + np.repeat(np.arange(n), counts))
        # A stat line read: its values change.
        stat_tick, stat_tid = pinned
        lo, hi = np.searchsorted(stat_tick, [ticks[0], ticks[-1] + 1])
        if hi > lo:
            stat_tick, stat_tid = stat_tick[lo:hi], stat_tid[lo:hi]
            row = np.minimum(np.searchsorted(ticks, stat_tick), n - 1)
            by_tid = np.argsort(tids)
            col = np.minimum(np.searchsorted(tids[by_tid], stat_tid), m - 1)
            hit = (ticks[row] == stat_tick) & (tids[by_tid[col]] == stat_tid)
            keys.append(by_tid[col[hit]] * n + row[hit])
        # The union as a mask over every (column, tick): np.unique hashes, 30x slower here (numpy 2.4).
        wanted = np.zeros(m * n, dtype=bool)
        for part in keys:
            wanted[part] = True
        key = np.flatnonzero(wanted)
        return key % n, key // n

    def _running_by_stat(self) -> np.ndarray:
        """The tids whose latest stat line before this take, or one read in it, says R: of these, a thread not seen
        by the probes yet is on a CPU or a run queue (take()). More than that is harmless: a row decoded that does
        not change is not stored."""
        parts = [self.carry_tid[self.carry_state == "R"]]
        parts += [tid[states == "R"] for tid, _, _, states in self._unmerged]
        return np.unique(np.concatenate(parts).astype(np.int64))

    def _stat_reads(self) -> tuple[np.ndarray, np.ndarray]:
        """(tick, tid) of the stat reads not yet merged (this take's), by tick: a row there is never skipped."""
        if not self._unmerged:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        tick = np.concatenate([part[1] for part in self._unmerged]).astype(np.int64)
        tid = np.concatenate([part[0] for part in self._unmerged]).astype(np.int64)
        order = np.argsort(tick, kind="stable")
        return tick[order], tid[order]

    def _never_back(self, tid: np.ndarray, starts: np.ndarray, values: np.ndarray, last: np.ndarray) -> np.ndarray:
        """Each thread's running maximum from its last value written (rows sorted by thread, then time): a
        read extended by the probes' clock (a slice or wait in progress) can exceed what the kernel then
        accounts (its task clock leaves out steal time), and a copy taken while a probe wrote it lags. Held
        there, the counter lags as /proc's does."""
        if not len(values):
            return values
        group = np.cumsum(starts) - 1
        heads = tid[starts]
        before = np.full(len(heads), np.iinfo(np.int64).min // 4, dtype=np.int64)
        if len(self.last_tid):
            pos = np.minimum(np.searchsorted(self.last_tid, heads), len(self.last_tid) - 1)
            known = self.last_tid[pos] == heads
            before[known] = last[pos[known]]
        values = np.maximum(values, before[group])
        first = values[starts][group]
        # A grouped running maximum in one pass: values relative to the thread's first row (a chunk spans
        # seconds, far below 2**43 ns), shifted by the group's index so that groups never mix.
        offset = group.astype(np.int64) << 45
        return np.maximum.accumulate(offset + (values - first + (1 << 43))) - offset - (1 << 43) + first

    def _remember(self, tid: np.ndarray, starts: np.ndarray, run: np.ndarray, wait: np.ndarray) -> None:
        """Each thread's last run/wait written, sorted by tid, for the next chunk's _never_back."""
        if not len(tid):
            return
        ends = np.r_[starts[1:], True]
        kept = ~np.isin(self.last_tid, tid[ends])
        all_tid = np.concatenate([self.last_tid[kept], tid[ends]])
        order = np.argsort(all_tid, kind="stable")
        self.last_tid = all_tid[order]
        self.last_run = np.concatenate([self.last_run[kept], run[ends]])[order]
        self.last_wait = np.concatenate([self.last_wait[kept], wait[ends]])[order]

    def _stat_index(self, tid: np.ndarray, tick: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each row, the index in s_numbers/s_state of its thread's latest stat read at or before its
        tick, and whether it has one. The reads so far (each thread's latest, then the new) become s_*."""
        parts = [
            (self.carry_tid, np.full(len(self.carry_tid), -1, dtype=np.int64), self.carry_numbers, self.carry_state)
        ]
        parts += self._unmerged
        self._unmerged = []
        s_tid = np.concatenate([p[0] for p in parts]).astype(np.int64)
        s_tick = np.concatenate([p[1] for p in parts]).astype(np.int64)
        key = s_tid * _KEY_SHIFT + (s_tick + 1)
        order = np.argsort(key, kind="stable")
        key, s_tid = key[order], s_tid[order]
        self.s_numbers = np.concatenate([p[2] for p in parts])[order]
        self.s_numbers_by_column = np.ascontiguousarray(self.s_numbers.T)
        self.s_state = np.concatenate([p[3] for p in parts])[order]
        at = np.searchsorted(key, tid * _KEY_SHIFT + (tick + 1), side="right") - 1
        found = at >= 0
        found[found] = s_tid[at[found]] == tid[found]
        if len(s_tid):
            last = np.r_[s_tid[1:] != s_tid[:-1], True]
            self.carry_tid, self.carry_numbers, self.carry_state = s_tid[last], self.s_numbers[last], self.s_state[last]
        return np.where(found, at, 0), found


@dataclass(frozen=True)
class _GroupRows:
    """The rows of one run of ticks that may be stored (EbpfRows._group), sorted by thread, then tick."""

    words: np.ndarray  # their slots' records, rows of eight u64 words
    tick: np.ndarray
    t_ns: np.ndarray
    tid: np.ndarray
    pid: np.ndarray
    follows: np.ndarray  # the thread's row before here is further back, with this one's tick before's values
    ticks_read: np.ndarray  # the ticks that read a thread of the layout, and their times
    times_read: np.ndarray
    end_tick: int  # the run's last tick, and the threads whose row there was not decoded (it repeats theirs)
    end_tids: np.ndarray

    @staticmethod
    def empty(end_tick: int) -> _GroupRows:
        none = np.zeros(0, dtype=np.int64)
        return _GroupRows(
            np.zeros((0, _WORDS), dtype="<u8"),
            none,
            none,
            none,
            none,
            np.zeros(0, dtype=bool),
            none,
            none,
            end_tick,
            none,
        )


@dataclass(frozen=True)
class SlotRecords:
    """The slot records of a run of ticks of one slot count (slot_records): the slots before the run (at tick index
    -1: the last taken, where the run begins with a delta), then each tick's, every slot of a whole frame and
    the listed ones of a delta. A slot's bytes at a tick are its last record up to it: no (ticks x slots) array."""

    used: int  # the slot count
    ticks: int  # the run's ticks, indexed 0 .. ticks - 1
    tick: np.ndarray  # per record: its tick index (-1: before the run)
    slot: np.ndarray
    words: np.ndarray  # (records x 8) u64
    whole: np.ndarray  # per record: of a whole frame (every slot), not listed by a delta as changed
    order: np.ndarray  # the records by slot, then tick
    key: np.ndarray  # slot * (ticks + 1) + tick + 1, in that order

    def at(self, tick: np.ndarray, slot: np.ndarray) -> np.ndarray:
        """The record (its index) of each slot at each tick: the slot's last up to it."""
        return self.order[np.searchsorted(self.key, slot * (self.ticks + 1) + tick + 1, side="right") - 1]

    def _by_slot(self) -> tuple[np.ndarray, np.ndarray]:
        """The slots and ticks in `order`, and whether each record has the slot's record before it in `order`."""
        slot = self.slot[self.order]
        return slot, np.r_[False, slot[1:] == slot[:-1]]

    def last(self) -> np.ndarray:
        """Each slot's last record, by slot (every slot has one)."""
        slot, _ = self._by_slot()
        return self.order[np.r_[slot[1:] != slot[:-1], True]]

    def changed(self) -> np.ndarray:
        """Per record: its bytes differ from its slot's record before (a delta's listed slots, the recorder
        having compared them; a whole frame's compared, word by word), or it is the slot's first."""
        changed = ~self.whole
        _, has_before = self._by_slot()
        compare = self.whole[self.order] & has_before
        now, before = self.order[compare], self.order[np.flatnonzero(compare) - 1]
        changed[now] = (self.words[now] != self.words[before]).any(axis=1)
        changed[self.order[~has_before]] = True
        return changed

    def spans(self, flag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each flagged record, the ticks its slot holds it: from its tick (0 at the earliest) to the slot's
        next record's (excluded), or the run's end."""
        _, has_before = self._by_slot()
        rank = np.empty(len(self.order), dtype=np.int64)
        rank[self.order] = np.arange(len(self.order))
        has_next = np.r_[has_before[1:], False]
        nxt = np.minimum(rank[flag] + 1, len(self.order) - 1)
        start = np.maximum(self.tick[flag], 0)
        stop = np.where(has_next[rank[flag]], self.tick[self.order[nxt]], self.ticks)
        return start, np.maximum(stop, start)

    def changes(self, flag: np.ndarray) -> np.ndarray:
        """Per tick, how many slots became flagged less how many stopped being (the first tick: how many are):
        its cumulative sum counts the flagged slots at each tick."""
        _, has_before = self._by_slot()
        now = flag[self.order].astype(np.int64)
        step = now - np.where(has_before, np.r_[0, now[:-1]], 0)
        return np.bincount(np.maximum(self.tick[self.order], 0), weights=step, minlength=self.ticks)


def slot_records(group: list[Any], before: np.ndarray) -> SlotRecords:
    """The records of a run of ticks of one slot count as EbpfRows keeps them (layout id, tick, t_ns, slot count,
    then a whole frame's bytes, or a delta's indices and words); `before`: the slots of the tick before the run,
    its first delta's base."""
    used = group[0][3]
    every_slot = np.arange(used, dtype=np.int64)
    slots: list[np.ndarray] = []
    words: list[np.ndarray] = []
    counts: list[int] = []
    wholes: list[bool] = []
    if group[0][4] is None:
        slots.append(np.arange(len(before), dtype=np.int64))
        words.append(before)
    for _, _, _, _, raw, index, changed in group:
        if raw is not None:
            slots.append(every_slot)
            words.append(np.frombuffer(raw, dtype="<u8").reshape(used, _WORDS))
            counts.append(used)
            wholes.append(True)
        else:
            slots.append(index)
            words.append(changed)
            counts.append(len(index))
            wholes.append(False)
    n = len(group)
    tick = np.repeat(np.arange(n, dtype=np.int64), counts)
    whole = np.repeat(np.array(wholes, dtype=bool), counts)
    if group[0][4] is None:
        tick = np.r_[np.full(len(before), -1, dtype=np.int64), tick]
        whole = np.r_[np.ones(len(before), dtype=bool), whole]
    slot = np.concatenate(slots).astype(np.int64)
    key = slot * (n + 1) + tick + 1
    order = np.argsort(key, kind="stable")
    return SlotRecords(used, n, tick, slot, np.concatenate(words), whole, order, key[order])


def letters_column(letters: np.ndarray) -> pa.Array:
    """The state letters (a "<U1" array) as the dictionary column `pa.array(letters.astype(object))
    .dictionary_encode()` makes, its dictionary in order of first appearance, without a Python string per row
    (that way was a tenth of the writer's CPU on the Bitwig-shaped target)."""
    if not len(letters):
        return pa.array(letters.astype(object)).dictionary_encode()
    # A "<U1" letter is one UCS-4 code: counted and ranked through a table indexed by code rather than sorted
    # (np.unique: 2.6 against 0.6 ms for a chunk's 26 000 letters).
    codes = np.ascontiguousarray(letters, dtype="<U1").view(np.uint32)
    top = int(codes.max())
    if top < 1 << 16:
        distinct = np.flatnonzero(np.bincount(codes, minlength=top + 1))
        first = [int(np.argmax(codes == code)) for code in distinct.tolist()]  # a handful of letters
        distinct = distinct[np.argsort(first)]
        rank = np.zeros(top + 1, dtype=np.int32)
        rank[distinct] = np.arange(len(distinct), dtype=np.int32)
        indices = rank[codes]
    else:  # beyond the BMP: no state letter, but a column all the same
        distinct, first_at, inverse = np.unique(codes, return_index=True, return_inverse=True)
        order = np.argsort(first_at)
        rank = np.empty(len(order), dtype=np.int32)
        rank[order] = np.arange(len(order), dtype=np.int32)
        distinct, indices = distinct[order], rank[inverse.reshape(-1)]
    dictionary = pa.array(distinct.astype(np.uint32).view("<U1").tolist(), pa.string())
    return pa.DictionaryArray.from_arrays(indices, dictionary)


def changes(
    tid: np.ndarray,
    tick: np.ndarray,
    starts: np.ndarray,
    values: tuple[np.ndarray, ...],
    follows: np.ndarray | None = None,
) -> np.ndarray:
    """The rows to store (sorted by thread, then tick): where anything in `values` changed since the thread's
    row of the tick before, its first row of the chunk, and one every KEYFRAME_TICKS (staggered by tid).
    analyses/source.py fills the ticks between from these, exactly (DESIGN.md "The eBPF sampler").
    `follows`: the rows whose thread's row of the tick before was not decoded, being unchanged (EbpfRows._group),
    so the thread's previous row here, further back, has that row's values: compared with as if adjacent."""
    keep = starts.copy()
    if len(tid) > 1:
        moved = tick[1:] != tick[:-1] + 1
        if follows is not None:
            moved &= ~follows[1:]
        for column in values:
            moved |= column[1:] != column[:-1]
        keep[1:] |= moved
    keep |= (tick + tid) % KEYFRAME_TICKS == 0
    return keep
