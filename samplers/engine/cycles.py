"""Assembling JACK cycles from polled snapshots of jack2's client timing slots.

Each slot holds only the latest signaled/awake/finished times of its client; a poll every quarter
period sees each value at least once while the cycle runs. A value belongs to the cycle whose start
(the driver's fFinishedAt) precedes it; a finish that comes late (after the next cycle re-signaled
the client) belongs to the client's latest record that woke before it and has no finish yet, and only to
the wake-up its slot holds beside it when that one is not newer (a finish of a cycle never seen is none's). A poller
late by more than a period misses a cycle's start: a signal of that cycle is placed in none (counted in
`unplaced`), never in the cycle before it, and a wake-up or finish it reads then goes to no record signalled
before that hole (whole cycles may have run in it unseen): unknown, not another cycle's.

A cycle is emitted when it is EMIT_AFTER_US old. Its end is the latest finish of its clients, null
when one of them was never seen finishing. This records what the slots said, and decides no lateness:
per client-cycle its signal, wake-up and finish (null where no poll saw them), and the client's next
signal as first read with the finish stamp its slot held in that same read (`resignal_ns`,
`finish_at_resignal_ns`: a finish stamp older than the wake-up then means it had not finished when the
next cycle came, though its finish was overwritten before a poll saw it). The next cycle's start is the
next row of engine_cycles, when the poller saw it. Whether a client was late (jack2's own test) is
decided from these in analyses/engine.py by a rule of analyses/rules.py.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

EMIT_AFTER_US = 500_000
KEEP_STARTS = 4096


@dataclass
class _Node:
    signal_us: int
    awake_us: int | None = None
    finish_us: int | None = None
    status: int | None = None
    # The client's next signal as first read, and its finish stamp in that read (0: it never finished).
    resignal_us: int | None = None
    finish_at_resignal_us: int | None = None


@dataclass
class _Client:
    last: tuple[int, int, int] = (0, 0, 0)
    records: list[tuple[int, _Node]] = field(default_factory=list)  # (cycle start, node), oldest first


class CycleAssembler:
    def __init__(self, driver_refnum: int, to_ns: Callable[[int], int]) -> None:
        self.driver = driver_refnum
        self.to_ns = to_ns
        self.starts: list[int] = []  # cycle starts seen, us, ascending
        self.nodes: dict[int, dict[int, _Node]] = {}  # cycle start -> refnum -> node
        self.clients: dict[int, _Client] = {}
        self.polls = 0
        self.unplaced = 0  # values whose cycle start was never seen (the poller was late): not recorded
        self.last_poll_us: int | None = None  # when the poll before read the slots (jack_get_time)
        self.holes = 0  # polls that came a period or more after the one before (the poller held off)

    def observe(
        self, slots: np.ndarray, refnums: list[int], now_us: int | None = None, period_us: float | None = None
    ) -> None:
        """One poll's snapshot of the slots. `now_us` (jack_get_time just before the read) and `period_us`: a
        poll a period or more after the one before follows a hole in which a whole cycle may have run unseen,
        its start and its signals too; a wake-up or finish first seen then is given only to a record
        signalled during the hole, never to one signalled before it: whose it is cannot be told."""
        self.polls += 1
        # After a hole, the signal a record must be newer than to take a wake-up or finish read now.
        hole_from = -1
        if now_us is not None:
            if period_us and self.last_poll_us is not None and now_us - self.last_poll_us >= period_us:
                hole_from = self.last_poll_us
                self.holes += 1
            self.last_poll_us = now_us
        start = int(slots[self.driver]["finished"])
        if start and (not self.starts or start > self.starts[-1]):
            self.starts.append(start)
            self.nodes[start] = {}
            if len(self.starts) > KEEP_STARTS:
                del self.starts[: len(self.starts) - KEEP_STARTS]
        for ref in refnums:
            row = slots[ref]
            s, a, f, status = int(row["signaled"]), int(row["awake"]), int(row["finished"]), int(row["status"])
            client = self.clients.setdefault(ref, _Client())
            ls, la, lf = client.last
            if s and s != ls:
                if client.records:
                    prev = client.records[-1][1]
                    if prev.resignal_us is None:  # what the slot said when it was first seen signalled again
                        prev.resignal_us, prev.finish_at_resignal_us = s, f
                key = self._cycle_of(s)
                if key is None:
                    self.unplaced += 1
                else:
                    node = _Node(s)
                    here = self.nodes.setdefault(key, {})
                    old = here.get(ref)
                    if old is not None and old.finish_us is not None and old.finish_us <= s:
                        # Its node of this cycle already finished: the signal is of a later cycle whose
                        # start the poller never saw. Kept as a record (its wake-up and finish attach to
                        # it, not to another cycle's node), placed in no cycle.
                        self.unplaced += 1
                    else:
                        here[ref] = node
                    client.records.append((key, node))
                    del client.records[:-16]
            # A client runs its cycles one after the other: a wake-up or finish never belongs to a record
            # older than one already woken or finished (a value of a cycle the poller never saw start
            # would otherwise land cycles back, past that cycle's check: measured in CI, a false late).
            if a and a != la:
                # The newest node signalled by then, if it is not yet awake (records are in signal order).
                woken = next((n for _, n in reversed(client.records) if n.signal_us <= a), None)
                if woken is not None and woken.awake_us is None and woken.signal_us > hole_from:
                    woken.awake_us = a
            if f and f != lf:
                finished = None
                for _, n in reversed(client.records):
                    if n.finish_us is not None:
                        break
                    if n.awake_us is not None and n.awake_us <= f:
                        finished = n
                        break
                # jack2 stamps a client's wake-up, then its finish, in its slot (JackConnectionManager
                # SuspendRefNum, ResumeRefNum): a finish not older than the slot's own wake-up is that wake-up's.
                # A poller held off the CPU for a few cycles saw such a pair of a cycle whose start and signal it
                # never saw; given to the last record it had, the client's wake-up before the stall and its
                # finish after it made one run 13 ms long, a `late` link where the kernel had it asleep
                # between two short runs (tests/test_engine_units.py; test_incidents_real's /proc view).
                if finished is not None and a and a <= f and finished.awake_us != a:
                    finished = None
                if finished is not None and finished.signal_us <= hole_from:
                    finished = None
                if finished is not None:
                    finished.finish_us = f
            if client.records:
                client.records[-1][1].status = status
            client.last = (s, a, f)

    def _cycle_of(self, t_us: int) -> int | None:
        i = bisect.bisect_right(self.starts, t_us) - 1
        return self.starts[i] if i >= 0 else None

    def take(self, now_us: int, period_us: float, names: dict[int, str], flush: bool = False) -> tuple[list, list]:
        """Rows of the cycles old enough to be complete (all of them with flush): (cycles, nodes)."""
        cycles: list[dict[str, Any]] = []
        nodes: list[dict[str, Any]] = []
        for start in self.starts:
            if start not in self.nodes:
                continue
            if not flush and now_us - start < EMIT_AFTER_US:
                break
            members = self.nodes.pop(start)
            # A signal a period or more after this start is of a cycle whose start the poller missed (it
            # was late by more than a period, and read the driver's slot after the next start): not of
            # this one, whose check it would otherwise fail.
            stray = [ref for ref, n in members.items() if n.signal_us >= start + period_us]
            self.unplaced += len(stray)
            members = {ref: n for ref, n in members.items() if ref not in stray}
            finishes = [n.finish_us for n in members.values()]
            known = [f for f in finishes if f is not None]
            end = max(known) if known and len(known) == len(finishes) else None
            t_ns = self.to_ns(start)
            cycles.append({"t_ns": t_ns, "end_ns": self.to_ns(end) if end is not None else None})
            for ref, n in sorted(members.items()):
                nodes.append(
                    {
                        "t_ns": t_ns,
                        "node_id": ref,
                        "name": names.get(ref, f"refnum {ref}"),
                        "signal_ns": self.to_ns(n.signal_us),
                        "awake_ns": self.to_ns(n.awake_us) if n.awake_us is not None else None,
                        "finish_ns": self.to_ns(n.finish_us) if n.finish_us is not None else None,
                        "status": n.status,
                        "resignal_ns": self.to_ns(n.resignal_us) if n.resignal_us is not None else None,
                        # A zero stamp: it had never finished (null, not a time).
                        "finish_at_resignal_ns": self.to_ns(n.finish_at_resignal_us)
                        if n.finish_at_resignal_us
                        else None,
                    }
                )
        self.starts = [s for s in self.starts if s in self.nodes or s >= self.starts[-1]]
        return cycles, nodes
