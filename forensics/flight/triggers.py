"""What makes the flight recorder save a window (README, "Flight recorder"), found in a piece of the ring.

    xrun     an xrun the engine reported (reports less than a period apart are one: analyses.engine)
    late     a missed deadline: an engine cycle that ended after its period (analyses.engine)
    marker   a marker: Enter or SIGUSR1 at the recorder (events of kind "marker")
    stall[:VERDICT][>DURATION]
             a stall episode of a watched thread (analyses.stalls: the real-time and periodic threads) whose
             excess over the thread's usual busy share is at least DURATION (default: the stall rule's
             own minimum), and of that verdict when one is given: `stall>4ms`, `stall:io>2ms`

The cheap ones (xrun, late, marker) read the small engine and events tables. The stall rule runs the
stall analysis on the watched threads alone (DESIGN.md, "Flight recorder": its cost).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyses.rules import CAUSES, StallRules
from capture.format import Capture
from capture.vocabulary import parse_duration_ns

KINDS = ("xrun", "late", "marker", "stall")
DEFAULT_TRIGGERS = ("xrun", "late", "marker")
_STALL = re.compile(r"^stall(?::(?P<verdict>[a-z]+))?(?:\s*>\s*(?P<min>\S+))?$")


@dataclass(frozen=True)
class TriggerRule:
    kind: str  # one of KINDS
    text: str  # as given
    verdict: str | None = None  # stall: only this verdict
    min_ns: int | None = None  # stall: the least excess; None = the stall rule's own minimum


@dataclass(frozen=True)
class Trigger:
    t_ns: int
    kind: str
    text: str  # what happened, for the printed line and the windows table
    end_ns: int | None = None  # a stall episode's end


def parse_trigger(text: str) -> TriggerRule:
    """'xrun', 'late', 'marker', 'stall', 'stall>4ms', 'stall:io>2ms'; ValueError (one line) otherwise."""
    spec = text.strip().lower()
    if spec in ("xrun", "late", "marker"):
        return TriggerRule(spec, text)
    match = _STALL.match(spec)
    if not match:
        raise ValueError(f"--trigger {text!r}: give xrun, late, marker, or stall[:VERDICT][>DURATION] (e.g. stall>4ms)")
    verdict = match.group("verdict")
    if verdict is not None and verdict not in CAUSES:
        raise ValueError(f"--trigger {text!r}: {verdict!r} is no verdict (one of {', '.join(CAUSES)})")
    try:
        min_ns = parse_duration_ns(match.group("min")) if match.group("min") else None
    except ValueError as err:
        raise ValueError(f"--trigger {text!r}: {err}") from None
    return TriggerRule("stall", text, verdict, min_ns)


def engine_triggers(cap: Capture, after_ns: int | None = None) -> tuple[list[Trigger], list[Trigger]]:
    """(xruns, missed deadlines) the engine tables of `cap` hold, later than `after_ns`."""
    from analyses.engine import distinct_xrun_times, engine_cycle_ends  # catch-load's start stays light

    xruns = [Trigger(int(t), "xrun", "xrun") for t in distinct_xrun_times(cap) if after_ns is None or t > after_ns]
    late: list[Trigger] = []
    if "engine_cycles" in cap.table_names:
        ends = engine_cycle_ends(cap.engine_cycles, cap.engine_nodes)
        missed = ends[ends["missed"].fillna(False).astype(bool).to_numpy()]
        for row in missed.itertuples(index=False):
            if after_ns is not None and row.t_ns <= after_ns:
                continue
            over = "" if pd.isna(row.end_rel_ns) else f" ({row.end_rel_ns / 1e6:.2f} ms for {row.period_ns / 1e6:.2f})"
            late.append(Trigger(int(row.t_ns), "late", f"{row.engine} cycle ended late{over}"))
    return xruns, late


def marker_triggers(cap: Capture, after_ns: int | None = None) -> list[Trigger]:
    events = cap.table("events") if "events" in cap.table_names else pd.DataFrame(columns=["t_ns", "kind", "text"])
    markers = events[events["kind"].astype(str) == "marker"]
    return [
        Trigger(int(row.t_ns), "marker", f"marker {row.text!r}" if row.text else "marker")
        for row in markers.itertuples(index=False)
        if after_ns is None or row.t_ns > after_ns
    ]


def watched_threads(cap: Capture) -> pd.DataFrame:
    """The threads the stall rule watches (analyses.threads: real-time and periodic), with their periods."""
    from analyses.threads import select_threads, thread_profiles

    return select_threads(thread_profiles(cap))


def stall_triggers(
    cap: Capture, rule: TriggerRule, after_ns: int | None = None, watched: pd.DataFrame | None = None
) -> list[Trigger]:
    """Episodes of the watched threads that match `rule`, starting later than `after_ns`.

    `watched`: watched_threads() of a recent piece (a thread's period does not change from one segment to
    the next); None: found here. Only their samples are analysed, without the suspects (who ran
    meanwhile): the saved window is analysed in full.
    """
    from analyses.stalls import find_stalls

    watched = watched_threads(cap) if watched is None else watched
    if watched.empty:
        return []
    rules = StallRules(min_stall_ns=rule.min_ns) if rule.min_ns is not None else StallRules()
    episodes = find_stalls(cap, profiles=watched, rules=rules, with_suspects=False)
    if rule.verdict is not None:
        episodes = episodes[episodes["verdict"] == rule.verdict]
    if after_ns is not None:
        episodes = episodes[episodes["start_ns"].to_numpy(dtype=np.int64) > after_ns]
    return [
        Trigger(
            int(row.start_ns),
            "stall",
            f"{row.verdict} stall of {row.comm} ({row.tid}), {row.excess_ns / 1e6:.1f} ms",
            int(row.end_ns),
        )
        for row in episodes.itertuples(index=False)
    ]
