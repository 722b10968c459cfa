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
    majflt utime stime nice rtprio policy blkio_ticks starttime
                             the thread's latest stat read (STAT_SLOW_NS old at most, or
                             STAT_REFRESH_NS for a thread asleep since, whose counters have not moved)

So the analyses read these rows as they read /proc's (DESIGN.md "The eBPF sampler").
"""

from __future__ import annotations

from collections.abc import Iterator
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
        ("pad1", "<u4"),
    ]
)
PHASE_UNKNOWN, PHASE_ON_CPU, PHASE_RUNNABLE, PHASE_OFF, PHASE_EXITED = 0, 1, 2, 3, 4
_STAT_COLUMNS = list(STAT_NUMERIC)
_MINFLT = _STAT_COLUMNS.index("minflt")
_CPU = _STAT_COLUMNS.index("cpu")
_EVENT_WORD = 5  # event_ns: the 64-byte slot as eight u64 words
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
        # Slots equal to the thread's of the tick before are left out before decoding (see _unchanged); off:
        # every slot decoded, as the reference the tests compare with.
        self.skip_unchanged = skip_unchanged
        self.slot_rows = 0  # the layouts' slots handed over so far, and those decoded (not skipped)
        self.decoded_rows = 0
        self.dead_bits = sum(bit for bit, letter in rules.letters.items() if letter in ("X", "Z"))
        self.layouts: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # id -> tids, pids, slots
        # layout id, tick, t_ns, slot count, then either the slots' bytes (a whole frame) or the indices and u64
        # words of those that differ from the tick before's (a delta: the others are its, rebuilt in take())
        self.ticks: list[tuple[int, int, int, int, memoryview | None, np.ndarray | None, np.ndarray | None]] = []
        self.stats: list[bytes] = []  # STAT_SLOW payloads
        self.rows_pending = 0
        # The latest stat read of each thread, carried from chunk to chunk.
        self.carry_tid = np.zeros(0, dtype=np.int64)
        self.carry_numbers = np.zeros((0, len(_STAT_COLUMNS)), dtype=np.int64)
        self.carry_state = np.zeros(0, dtype="<U1")
        self._letters: dict[int, str] = {}
        self.s_numbers = np.zeros((0, len(_STAT_COLUMNS)), dtype=np.int64)  # the stat reads (_stat_index)
        self.s_state = np.zeros(0, dtype="<U1")
        self.last_tid = np.zeros(0, dtype=np.int64)  # each thread's last run/wait written, by tid
        self.last_run = np.zeros(0, dtype=np.int64)
        self.last_wait = np.zeros(0, dtype=np.int64)
        self._unmerged: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.base_used: int | None = None  # the slot count and tick of the last slot frame stored (delta())
        self.base_tick = 0
        self.last_words = np.zeros((0, _WORDS), dtype="<u8")  # the slots of the last tick rebuilt in take()
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
        # A view, not a copy: the slots are copied once, into the run's (ticks x slots) array in take().
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
        layout_id, tick, _, used, *_ = entry
        self.ticks.append(entry)
        self.rows_pending += len(self.layouts[layout_id][0])
        self.base_tick, self.base_used = tick, used

    def _rebuild(self, group: list[Any]) -> np.ndarray:
        """The (ticks x slots x u64 words) array of a run of ticks of one slot count: each delta's slots are the
        tick's before (the last of the take before for the first), with the ones it lists replaced."""
        used = group[0][3]
        block = np.empty((len(group), used, _WORDS), dtype="<u8")
        before = self.last_words
        for i, (_, _, _, _, slots, index, words) in enumerate(group):
            if slots is not None:
                block[i] = np.frombuffer(slots, dtype="<u8").reshape(used, _WORDS)
            else:
                block[i] = before
                block[i, index] = words
            before = block[i]
        self.last_words = block[-1].copy()
        return block

    def stat(self, payload: bytes) -> None:
        self.stats.append(payload)  # parsed in _slow(), all of a chunk's at once

    def _slow(self) -> dict[str, Any] | None:
        """The STAT_SLOW rows since the last take: columns, and the stat texts (for renames, policy changes)."""
        if not self.stats:
            return None
        size = frames.EBPF_TICK_HEADER.size
        heads = [frames.EBPF_TICK_HEADER.unpack_from(payload) for payload in self.stats]  # tick, layout, t_ns, n
        views = [memoryview(payload) for payload in self.stats]
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
        recs, ticks, t_ns, tids, pids, follows = [], [], [], [], [], []
        tick_read: list[np.ndarray] = []  # the ticks and their read times, for sampler_ticks
        time_read: list[np.ndarray] = []
        skipped_tick, skipped_tids = -2, np.zeros(0, dtype=np.int64)  # the last tick of the run before, its skips
        run_start = 0
        for end in range(1, len(self.ticks) + 1):
            # Runs of ticks with one layout and one slot count decode as one (ticks x slots) array.
            first = self.ticks[run_start]
            if end < len(self.ticks) and self.ticks[end][0] == first[0] and self.ticks[end][3] == first[3]:
                continue
            group = self.ticks[run_start:end]
            run_start = end
            layout_tids, layout_pids, slots = self.layouts[first[0]]
            used = first[3]
            ok = (slots >= 0) & (slots < used)
            at_slot = slots[ok]
            group_tids = layout_tids[ok]
            group_ticks = np.array([r[1] for r in group], dtype=np.int64)
            block = self._rebuild(group)
            arr = block.reshape(-1).view(SLOT_DTYPE).reshape(len(group), used)
            # A thread gone: marked at sched_process_exit, or (should that be missed) left the CPU dead; a slot
            # not (or no longer) its thread's (removed, or given to another).
            phase = arr["phase"][:, at_slot]
            gone = (phase == PHASE_EXITED) | (
                (phase == PHASE_OFF) & (arr["prev_state"][:, at_slot] & self.dead_bits != 0)
            )
            mine = (arr["tid"][:, at_slot] == group_tids) & ~gone
            changed = [r[5] if r[4] is None else None for r in group]
            skip = self._unchanged(block, at_slot, group_ticks, group_tids, phase, mine, pinned, changed)
            row, col = np.nonzero(mine & ~skip)
            # The records as rows of u64 words, taken by flat index: 30x faster than indexing the records.
            rows_of_words = block.reshape(len(group) * used, _WORDS)
            recs.append(rows_of_words.take(row * used + at_slot[col], axis=0).view(SLOT_DTYPE).reshape(-1))
            ticks.append(group_ticks[row])
            group_times = np.array([r[2] for r in group], dtype=np.int64)
            t_ns.append(group_times[row])
            read = mine.any(axis=1)  # the ticks that read a thread of the layout (sampler_ticks)
            tick_read.append(group_ticks[read])
            time_read.append(group_times[read])
            tids.append(group_tids[col])
            pids.append(layout_pids[ok][col])
            after = row > 0
            follow = np.zeros(len(row), dtype=bool)
            back = row[after] - 1
            follow[after] = skip[back, col[after]] & (group_ticks[back] + 1 == group_ticks[row[after]])
            if group_ticks[0] == skipped_tick + 1:  # the run before ended the tick before this one's first
                head = ~after
                follow[head] = np.isin(group_tids[col[head]], skipped_tids)
            skipped_tick, skipped_tids = int(group_ticks[-1]), group_tids[skip[-1]]
            follows.append(follow)
            self.slot_rows += skip.size
            self.decoded_rows += len(row)
        self.ticks = []
        self.rows_pending = 0
        rec = np.concatenate(recs)
        tick_col = np.concatenate(ticks)
        t_col = np.concatenate(t_ns)
        tid_col = np.concatenate(tids)
        pid_col = np.concatenate(pids)
        follow_col = np.concatenate(follows)
        tick_ids, first_read = np.unique(np.concatenate(tick_read), return_index=True)
        tick_times = np.concatenate(time_read)[first_read]
        # The latest stat read at or before each row's tick (the recorder reads a new thread's stat in the
        # tick that first reads its slot, so every row has one).
        at, found = self._stat_index(tid_col, tick_col)
        # By thread, then time: the order the change detection and the running maximum need (the capture
        # stores a chunk in this order anyway).
        order = np.lexsort((tick_col, tid_col))
        order = order[found[order]]
        fields = {
            name: rec[name][order]
            for name in ("run_ns", "wait_ns", "since_ns", "switches", "faults", "cpu", "phase", "prev_state")
        }
        tick_col, t_col, tid_col, pid_col, at, follow_col = (
            tick_col[order],
            t_col[order],
            tid_col[order],
            pid_col[order],
            at[order],
            follow_col[order],
        )
        phase = fields["phase"]
        since = fields["since_ns"].astype(np.int64)
        live = np.where(since > 0, np.maximum(t_col - since, 0), 0)
        run = fields["run_ns"].astype(np.int64) + np.where(phase == PHASE_ON_CPU, live, 0)
        wait = fields["wait_ns"].astype(np.int64) + np.where(phase == PHASE_RUNNABLE, live, 0)
        starts = np.r_[True, tid_col[1:] != tid_col[:-1]] if len(tid_col) else np.zeros(0, dtype=bool)
        run = self._never_back(tid_col, starts, run, self.last_run)
        wait = self._never_back(tid_col, starts, wait, self.last_wait)
        self._remember(tid_col, starts, run, wait)
        values = (run, wait, fields["switches"], fields["faults"], fields["cpu"], phase, fields["prev_state"], at)
        keep = changes(tid_col, tick_col, starts, values, follows=follow_col)
        kept = {name: column[keep] for name, column in fields.items()}
        phase, at = phase[keep], at[keep]
        numbers = self.s_numbers[at]
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
            columns[name] = numbers[:, i]
        columns["minflt"] = kept["faults"].astype(np.int64)
        columns["cpu"] = np.where(phase != PHASE_UNKNOWN, kept["cpu"].astype(np.int64), numbers[:, _CPU])
        blkio = columns["blkio_ticks"]
        columns["blkio_ticks"] = pa.array(blkio, mask=blkio < 0)
        return {"samples": columns, "sampler_ticks": {"tick": tick_ids.astype(np.uint32), "t_ns": tick_times}}, slow

    def _stat_reads(self) -> tuple[np.ndarray, np.ndarray]:
        """(tick, tid) of the stat reads not yet merged (this take's), by tick: a row there is never skipped."""
        if not self._unmerged:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        tick = np.concatenate([part[1] for part in self._unmerged]).astype(np.int64)
        tid = np.concatenate([part[0] for part in self._unmerged]).astype(np.int64)
        order = np.argsort(tick, kind="stable")
        return tick[order], tid[order]

    def _unchanged(
        self,
        block: np.ndarray,
        at_slot: np.ndarray,
        ticks: np.ndarray,
        tids: np.ndarray,
        phase: np.ndarray,
        mine: np.ndarray,
        pinned: tuple[np.ndarray, np.ndarray],
        changed: list[np.ndarray | None],
    ) -> np.ndarray:
        """The (ticks x threads) rows of one run of ticks that need no decoding: each is the row `changes`
        would drop and repeats its thread's row of the tick before, value for value. A row is one when its
        slot's 64 bytes equal the thread's at the tick before (consecutive ticks, one layout), the thread is
        neither on a CPU nor runnable (no slice or wait in progress that the read time extends), no stat line
        of it was read at this tick (its stat values stay those of the tick before), and the tick is not its
        keyframe. The first tick of the run is always decoded, so a chunk's first row of a thread is too.
        `changed`: per tick, the slots whose bytes differ from the tick before's as its EBPF_DELTA frame lists
        them (the other slots being that frame's: the tick before in the run, delta()), or None for a whole
        frame, compared word by word.

        Equal bytes give equal run, wait, switches, faults, CPU, phase and state; the running maximum
        (_never_back) holds the same value; the tid and the phase being equal, the row is the thread's and
        not gone if the one before was. So the stored rows are those decoding every slot gives: `changes`
        only needs to know which rows follow a skipped one (DESIGN.md "The eBPF sampler")."""
        n_ticks, n = phase.shape
        used = block.shape[1]
        skip = np.zeros((n_ticks, n), dtype=bool)
        if not self.skip_unchanged or n_ticks < 2 or not n:
            return skip
        if not (np.diff(ticks) > 0).all() or len(np.unique(tids)) != n:
            return skip  # not a run of ticks in order, one row per thread: nothing to rely on
        differs = np.zeros((n_ticks - 1, used), dtype=bool)
        listed = [i for i in range(1, n_ticks) if changed[i] is not None]
        if listed:
            lists = [c for c in changed[1:] if c is not None]
            differs[np.repeat(np.array(listed) - 1, [len(c) for c in lists]), np.concatenate(lists)] = True
        whole = np.array([i for i in range(1, n_ticks) if changed[i] is None], dtype=np.int64)
        if len(whole):
            # Word by word (event_ns, the one most likely to differ, first): 4x faster than comparing 64-byte
            # voids.
            if len(whole) == n_ticks - 1:  # every frame whole: views, not copies
                now, before = block[1:], block[:-1]
            else:
                now, before = block[whole], block[whole - 1]
            equal = now[..., _EVENT_WORD] == before[..., _EVENT_WORD]
            for word in range(_WORDS):
                if word != _EVENT_WORD:
                    equal &= now[..., word] == before[..., word]
            differs[whole - 1] = ~equal
        same = ~differs[:, at_slot]
        same &= mine[1:]
        same &= (phase[1:] != PHASE_ON_CPU) & (phase[1:] != PHASE_RUNNABLE)
        same &= (ticks[1:] == ticks[:-1] + 1)[:, None]
        same &= (ticks[1:, None] + tids[None, :]) % KEYFRAME_TICKS != 0
        stat_tick, stat_tid = pinned
        lo, hi = np.searchsorted(stat_tick, [ticks[1], ticks[-1] + 1])
        if hi > lo:
            stat_tick, stat_tid = stat_tick[lo:hi], stat_tid[lo:hi]
            row = np.minimum(np.searchsorted(ticks, stat_tick), n_ticks - 1)
            by_tid = np.argsort(tids)
            col = np.minimum(np.searchsorted(tids[by_tid], stat_tid), n - 1)
            hit = (row > 0) & (ticks[row] == stat_tick) & (tids[by_tid[col]] == stat_tid)
            same[row[hit] - 1, by_tid[col[hit]]] = False
        skip[1:] = same
        return skip

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
        self.s_state = np.concatenate([p[3] for p in parts])[order]
        at = np.searchsorted(key, tid * _KEY_SHIFT + (tick + 1), side="right") - 1
        found = at >= 0
        found[found] = s_tid[at[found]] == tid[found]
        if len(s_tid):
            last = np.r_[s_tid[1:] != s_tid[:-1], True]
            self.carry_tid, self.carry_numbers, self.carry_state = s_tid[last], self.s_numbers[last], self.s_state[last]
        return np.where(found, at, 0), found


def letters_column(letters: np.ndarray) -> pa.Array:
    """The state letters (a "<U1" array) as the dictionary column `pa.array(letters.astype(object))
    .dictionary_encode()` makes, its dictionary in order of first appearance, without a Python string per row
    (that way was a tenth of the writer's CPU on the Bitwig-shaped target)."""
    if not len(letters):
        return pa.array(letters.astype(object)).dictionary_encode()
    # A "<U1" letter is one UCS-4 code: unique as ints, without comparing strings.
    codes = np.ascontiguousarray(letters, dtype="<U1").view(np.uint32)
    distinct, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty(len(order), dtype=np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    dictionary = pa.array(distinct[order].view("<U1").tolist(), pa.string())
    return pa.DictionaryArray.from_arrays(rank[inverse.reshape(-1)], dictionary)


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
    `follows`: the rows whose thread's row of the tick before was skipped as unchanged (EbpfRows._unchanged),
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
