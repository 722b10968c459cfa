"""Triggers into windows, and the long run's counters (README, "Flight recorder").

A window is [first trigger - before, last trigger's end + after] (a stall trigger ends with its episode,
the others where they are). A trigger that falls inside the window being gathered, or whose own window
would overlap it, joins it (back-to-back triggers make one window), up to MAX_WINDOW_SPANS times before +
after: a storm of xruns gives a series of windows, not one window that grows for hours. The series is
contiguous: a window starts no earlier than the one before it ended, so no time is saved twice and each
trigger is in one window, a stall episode whole (the window before ends early for it where it can).

The counters: per minute of the recording, xruns, missed deadlines, rule matches and markers; bursts of
xruns and missed deadlines, events less than BURST_GAP_NS apart being one burst, and the gaps between
bursts (the users' `measure-xruns` habit: bursts 60-90 s apart need a 300 s measurement).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from forensics.flight.triggers import Trigger

MINUTE_NS = 60_000_000_000
# Events closer than this are one burst: a glitch burst lasts seconds, the gaps users report are 60-90 s.
BURST_GAP_NS = 10_000_000_000
MAX_WINDOW_SPANS = 3  # a merged window is at most this many times (before + after) long


@dataclass
class Window:
    start_ns: int
    end_ns: int
    triggers: list[Trigger] = field(default_factory=list)

    @property
    def first(self) -> Trigger:
        return self.triggers[0]


def _end_of(trigger: Trigger) -> int:
    """When what the trigger marks ended: a stall episode's end, else its own time."""
    return trigger.end_ns if trigger.end_ns is not None else trigger.t_ns


class Planner:
    """Gathers triggers (in time order) into windows; `ready(covered_ns)` gives those the ring covers."""

    def __init__(self, before_ns: int, after_ns: int) -> None:
        self.before_ns = before_ns
        self.after_ns = after_ns
        self.open: Window | None = None
        self.done: list[Window] = []
        self.last_end_ns: int | None = None  # the end of the last window handed out by ready()

    def add(self, trigger: Trigger) -> None:
        t = trigger.t_ns
        t_end = _end_of(trigger)
        window = self.open
        if window is not None and t - self.before_ns <= window.end_ns:
            longest = MAX_WINDOW_SPANS * (self.before_ns + self.after_ns)
            end = min(max(window.end_ns, t_end + self.after_ns), window.start_ns + longest)
            held = max(_end_of(x) for x in window.triggers)  # the episodes the window holds end by then
            # Inside the window, its end pushed up to the longest a window may be; a stall the longest
            # window would cut (it began inside, ends beyond) joins only where the window cannot end before
            # it began (an episode it holds still runs then): else it is the next window's, whole.
            if t_end <= end or held > t:
                window.end_ns = end if t_end <= end else t_end + self.after_ns
                window.triggers.append(trigger)
                return
            # The window ends where this trigger's own time before begins (or where its episodes end): the
            # series stays contiguous and the stall in one window (was: cut at the longest, 20 ms lock of
            # the lab split across two on a loaded machine).
            window.end_ns = max(held, min(window.end_ns, t - self.before_ns))
        start = t - self.before_ns
        if window is not None:
            self.done.append(window)
            start = max(start, window.end_ns)
        elif self.last_end_ns is not None:
            start = max(start, self.last_end_ns)
        if start >= t_end + self.after_ns:  # all of its window is in one already saved
            return
        self.open = Window(start, t_end + self.after_ns, [trigger])
        self.last_end_ns = None

    def ready(self, covered_ns: int | None) -> list[Window]:
        """Windows whose end the ring holds (`covered_ns`: its data reach that far; None: all of them)."""
        if self.open is not None and (covered_ns is None or self.open.end_ns <= covered_ns):
            self.done.append(self.open)
            self.last_end_ns = self.open.end_ns
            self.open = None
        out, self.done = self.done, []
        return out


class Counters:
    """Per-minute counts and bursts, kept as the segments come (memory grows by a row per minute)."""

    def __init__(self, origin_ns: int, rule: bool) -> None:
        self.origin_ns = origin_ns
        self.rule = rule  # a stall rule is watched: its column counts, else it is unknown (null)
        self.minutes: dict[int, dict[str, int]] = {}
        self.bursts: list[dict[str, Any]] = []
        self.totals = {"xruns": 0, "missed_deadlines": 0, "stalls": 0, "markers": 0}

    def _minute(self, t_ns: int) -> dict[str, int]:
        key = (t_ns - self.origin_ns) // MINUTE_NS
        return self.minutes.setdefault(
            key, {"covered_ns": 0, "xruns": 0, "missed_deadlines": 0, "stalls": 0, "markers": 0}
        )

    def cover(self, start_ns: int, end_ns: int) -> None:
        """The ring held [start_ns, end_ns): add it to the minutes it spans."""
        t = start_ns
        while t < end_ns:
            minute_end = self.origin_ns + ((t - self.origin_ns) // MINUTE_NS + 1) * MINUTE_NS
            self._minute(t)["covered_ns"] += min(end_ns, minute_end) - t
            t = minute_end

    def count(self, trigger: Trigger) -> None:
        column = {"xrun": "xruns", "late": "missed_deadlines", "stall": "stalls", "marker": "markers"}[trigger.kind]
        self._minute(trigger.t_ns)[column] += 1
        self.totals[column] += 1
        if trigger.kind in ("xrun", "late"):
            self._burst(trigger)

    def _burst(self, trigger: Trigger) -> None:
        last = self.bursts[-1] if self.bursts else None
        column = "xruns" if trigger.kind == "xrun" else "missed_deadlines"
        if last is not None and trigger.t_ns - last["end_ns"] < BURST_GAP_NS:
            last["end_ns"] = max(last["end_ns"], trigger.t_ns)
            last[column] += 1
            return
        gap = None if last is None else trigger.t_ns - last["end_ns"]
        burst = {"start_ns": trigger.t_ns, "end_ns": trigger.t_ns, "xruns": 0, "missed_deadlines": 0}
        burst[column] = 1
        self.bursts.append({**burst, "gap_before_ns": gap})

    def last_minute(self, now_ns: int) -> dict[str, int]:
        return self.minutes.get((now_ns - self.origin_ns) // MINUTE_NS, {"xruns": 0, "missed_deadlines": 0})

    def tables(self) -> dict[str, dict[str, list[Any]]]:
        keys = sorted(self.minutes)
        minutes: dict[str, list[Any]] = {"t_ns": [self.origin_ns + k * MINUTE_NS for k in keys]}
        for column in ("covered_ns", "xruns", "missed_deadlines", "stalls", "markers"):
            values = [self.minutes[k][column] for k in keys]
            minutes[column] = values if column != "stalls" or self.rule else [None] * len(keys)
        columns = ("start_ns", "end_ns", "xruns", "missed_deadlines", "gap_before_ns")
        bursts = {c: [b[c] for b in self.bursts] for c in columns}
        return {"flight_minutes": minutes, "flight_bursts": bursts}
