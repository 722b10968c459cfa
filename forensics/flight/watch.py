"""The flight recorder's watcher process: `python -m forensics.flight.watch CONFIG_JSON` (README, "Flight
recorder"; DESIGN.md, "Flight recorder").

catch-load starts it beside the writer, at nice 10 (the targets and the recorder's tick come first), with
a pipe on its stdin: the pipe's end (catch-load finished, or was killed) means the recording ended. Every
POLL_S it takes the segments the writer closed, finds their triggers, counts, and saves the windows the
ring now covers; it prints one line per saved or skipped window on stderr and its counts as one JSON
object per line on stdout (catch-load's status line). Each segment it takes is held (a hard link in
RING/held/) for as long as a window may still need it: the writer drops segments older than the ring by
their age, and a watcher kept off the CPU on a busy machine (nice 10) would otherwise find the seconds
before a trigger gone when it saves the window (seen in CI: 2 of 5 windows skipped so). At the end it
saves what is left, writes flight.ssf (the windows, the per-minute counts, the bursts) and removes the
ring unless told to keep it.

CONFIG_JSON: {"ring", "out", "before_ns", "after_ns", "triggers": [text], "max_windows", "max_disk_bytes",
"keep_ring"}. The writer's pid comes from the recording's metadata.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from capture.errors import CaptureFormatError
from capture.format import Capture, load
from capture.process_exit import exit_without_teardown
from capture.segments import Segment, closed_segments, list_segments
from capture.window import TooLarge, cut, join, write_capture
from forensics.flight.plan import BURST_GAP_NS, Counters, Planner, Window
from forensics.flight.triggers import (
    Trigger,
    TriggerRule,
    engine_triggers,
    marker_triggers,
    parse_trigger,
    stall_triggers,
    watched_threads,
)

POLL_S = 0.5
# Rows stamped t can reach the segment after the one that was open at t: the writer buffers up to 1 s
# (FLUSH_EVERY_NS) and takes its frames in every second (GATHER_S), and engine and eBPF rows arrive later
# still. A window is saved once the ring holds this much past its end.
FLUSH_LAG_NS = 3_000_000_000
# The stall rule analyses each segment with this much of the one before: an episode across the boundary,
# and the few periods a thread's rhythm needs.
OVERLAP_NS = 1_000_000_000
# The per-thread and machine tables the stall rule reads besides the samples: the machine's IO pressure
# (/proc/pressure/io in `system`) is what tells an io stall whose reads never caught the thread in D
# (analyses/stalls.py, "io under pressure"); without it the full capture found an io stall of 21 ms that
# the watcher did not.
PIECE_TABLES = ("system", "sched", "taskstats")
# The watched threads (and their periods) are found again this often, and whenever a thread appears or
# changes its policy (an engine thread turns real-time after it starts), and while none is watched.
WATCHED_EVERY_NS = 30_000_000_000
# ...and at every segment while a watched thread's period is unknown, for this long after its set last
# changed: a thread's first segment may hold its start-up, not yet its rhythm (the lab's audio thread had
# no period in its first 2 s segment, and kept none for 30 s: two lock stalls in that time made no window,
# the lock rule needing the period). A thread that is real-time but never periodic stops the re-reading
# once this has passed.
UNSETTLED_NS = 10_000_000_000
FLIGHT_FILE = "flight.ssf"
HELD_DIR = "held"  # inside the ring: the segments a window may still need (the writer never looks there)
WRITER_END_WAIT_S = 15.0


@dataclass
class _Seen:
    path: Path
    first_ns: int  # its first and last sample time
    last_ns: int


class Watcher:
    def __init__(self, config: dict[str, Any], say: Any = None) -> None:
        self.ring = Path(config["ring"])
        self.out = Path(config["out"])
        self.before_ns = int(config["before_ns"])
        self.after_ns = int(config["after_ns"])
        self.rules: list[TriggerRule] = [parse_trigger(t) for t in config["triggers"]]
        self.kinds = {r.kind for r in self.rules}
        self.max_windows = int(config["max_windows"])
        self.max_disk_bytes = int(config["max_disk_bytes"])
        self.keep_ring = bool(config.get("keep_ring"))
        self.say = say or (lambda text: print(f"catch-load: {text}", file=sys.stderr, flush=True))
        self.planner = Planner(self.before_ns, self.after_ns)
        self.counters: Counters | None = None
        self.origin_ns: int | None = None
        self.meta: dict[str, Any] = {}
        self.seen: dict[int, _Seen] = {}
        # the last segment's samples and PIECE_TABLES (the stall rule's overlap)
        self.previous: dict[str, pd.DataFrame] = {}
        self.last: dict[str, int] = {}  # per trigger kind: the latest time reported (a segment's overlap)
        self.windows: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.saved_bytes = 0
        self.saved = 0
        self.lost_segments = 0
        self.before_start = 0  # triggers earlier than the recording's start (no window)
        self.writer_pid: int | None = None
        self.watched: pd.DataFrame | None = None
        self.watched_at = 0
        self.settled_by_ns = 0  # until then, a watched thread without a period is looked for again
        self.known_tids: set[int] = set()
        self.xruns: list[pd.DataFrame] = []

    # segments ------------------------------------------------------------------------------------
    def poll(self, ended: bool = False) -> bool:
        """Take the closed segments, save the windows they complete; True when something changed."""
        changed = False
        for segment in closed_segments(self.ring, ended=ended):
            if segment.index not in self.seen:
                try:
                    self._take(self._hold(segment))
                except (CaptureFormatError, OSError):  # the writer deleted it meanwhile (a lagging watcher)
                    self.lost_segments += 1
                    self.seen[segment.index] = _Seen(segment.path, 0, 0)
                changed = True
        covered = max((s.last_ns for s in self.seen.values()), default=None)
        if ended:
            windows = self.planner.ready(None)
        else:
            windows = self.planner.ready(covered - FLUSH_LAG_NS) if covered is not None else []
        for window in windows:
            self._save(window)
            changed = True
        self._release(covered, ended)
        return changed

    def _hold(self, segment: Segment) -> Segment:
        """A hard link to `segment` in RING/held/, taken before it is read: the writer may unlink the ring's
        name at any time; the data stay until the watcher releases its own name too."""
        held = self.ring / HELD_DIR
        with contextlib.suppress(FileExistsError):
            held.mkdir(mode=0o700)
        link = held / segment.path.name
        with contextlib.suppress(FileExistsError):
            os.link(segment.path, link, follow_symlinks=False)
        return Segment(segment.index, link)

    def _release(self, covered_ns: int | None, ended: bool) -> None:
        """Drop the segments no window can need any more: none that is open, and none that a trigger still
        to be found (in a segment not yet taken, or in the overlap with the last one) could reach back to:
        older than the data covered, less the time before a trigger, less twice the writer's flush lag.
        A segment the watcher lost (no data) goes once the ring's own name has gone."""
        horizon = None if covered_ns is None or ended else covered_ns - self.before_ns - 2 * FLUSH_LAG_NS
        if self.planner.open is not None and horizon is not None:
            horizon = min(horizon, self.planner.open.start_ns - FLUSH_LAG_NS)
        on_disk = {s.index for s in list_segments(self.ring)}
        kept: dict[int, _Seen] = {}
        for index, seen in self.seen.items():
            if seen.path.parent.name != HELD_DIR:  # lost before it could be held: the ring's own name
                if index in on_disk:
                    kept[index] = seen
                continue
            if horizon is not None and seen.last_ns >= horizon:
                kept[index] = seen
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(seen.path)
            if index in on_disk:  # the ring still has it: remembered as taken, by the ring's own name
                kept[index] = _Seen(self.ring / seen.path.name, seen.first_ns, seen.last_ns)
        self.seen = kept

    def _take(self, segment: Segment) -> None:
        cap = load(segment.path)
        # Only the stall rule reads the samples (and keeps them for the next segment's overlap): xrun,
        # late and marker read the small tables. Decoding every segment's samples was most of the
        # watcher's cost without it (bench/flight_bench.py --trigger late: 2.8 % of a core).
        stall = "stall" in self.kinds
        samples = cap.samples if stall else None  # read now: the writer may delete the file once it is old
        bounds = (cap.trailer or {}).get("segment") or {}  # a killed recorder's last segment has none
        if "first_ns" not in bounds or "last_ns" not in bounds:
            times = (samples if samples is not None else cap.table("samples", ["t_ns"]))["t_ns"]
            bounds = {"first_ns": times.min() if len(times) else None, "last_ns": times.max() if len(times) else None}
        first, last = bounds["first_ns"], bounds["last_ns"]
        if first is None or last is None:  # no sample yet (waiting for a target)
            self.seen[segment.index] = _Seen(segment.path, 0, 0)
            return
        opened, closed = int(first), int(last)
        self.seen[segment.index] = _Seen(segment.path, opened, closed)
        if self.origin_ns is None:
            started = (cap.meta.get("recording") or {}).get("started_ns")
            self.origin_ns = int(started) if isinstance(started, int) else opened
            self.counters = Counters(self.origin_ns, rule="stall" in self.kinds)
            self.meta = {k: v for k, v in cap.meta.items() if k != "segment"}
            self.writer_pid = (cap.meta.get("recording") or {}).get("writer_pid")
        assert self.counters is not None
        self.counters.cover(opened, closed)
        found = self._triggers(cap, opened)
        for trigger in sorted(found, key=lambda t: t.t_ns):
            if trigger.t_ns < self.origin_ns:
                # Before the recording's start: the JACK source attaches first (its client's activation can
                # itself cause an xrun) and no thread was recorded yet, so no window, counted apart.
                self.before_start += 1
                continue
            self.counters.count(trigger)
            if trigger.kind in self.kinds:
                self.planner.add(trigger)
        if "xruns" in cap.table_names:
            self.xruns.append(cap.table("xruns"))
        if samples is not None:
            self.previous = {"samples": samples}
            self.previous.update({name: cap.table(name) for name in PIECE_TABLES if name in cap.table_names})

    def _triggers(self, cap: Capture, opened_ns: int) -> list[Trigger]:
        xruns, late = engine_triggers(cap, self.last.get("xrun"))
        late = [t for t in late if t.t_ns > self.last.get("late", -1)]
        found = [*xruns, *late, *(t for t in marker_triggers(cap) if t.t_ns > self.last.get("marker", -1))]
        for rule in self.rules:
            if rule.kind == "stall":
                piece = self._with_overlap(cap, opened_ns)
                tids = set(cap.table("threads", ["tid"])["tid"].tolist())
                events = cap.table("events", ["kind"]) if "events" in cap.table_names else None
                changed = events is not None and bool((events["kind"].astype(str) == "policy_changed").any())
                stale = self.watched is None or self.watched.empty or opened_ns - self.watched_at > WATCHED_EVERY_NS
                unsettled = (
                    self.watched is not None
                    and bool(self.watched["period_ns"].isna().any())
                    and opened_ns < self.settled_by_ns
                )
                appeared = bool(tids - self.known_tids)  # a thread appeared, or became real-time
                if stale or changed or appeared or unsettled:
                    if changed or appeared or self.watched is None:
                        self.settled_by_ns = opened_ns + UNSETTLED_NS
                    self.watched, self.watched_at, self.known_tids = watched_threads(piece), opened_ns, tids
                triggers = stall_triggers(piece, rule, watched=self.watched)
                found += [t for t in triggers if t.t_ns > self.last.get("stall", -1)]
        for trigger in found:
            end = trigger.end_ns if trigger.end_ns is not None else trigger.t_ns
            self.last[trigger.kind] = max(self.last.get(trigger.kind, end), end)
        return found

    def _with_overlap(self, cap: Capture, opened_ns: int) -> Capture:
        """This segment's samples, threads and PIECE_TABLES, with the last OVERLAP_NS of the one before."""

        def joined(now: pd.DataFrame, before: pd.DataFrame | None) -> pd.DataFrame:
            if before is None:
                return now
            before = before[before["t_ns"].to_numpy() >= opened_ns - OVERLAP_NS]
            return pd.concat([before, now], ignore_index=True) if len(before) else now

        tables = {
            name: joined(cap.table(name), self.previous.get(name))
            for name in ("samples", *PIECE_TABLES)
            if name == "samples" or name in cap.table_names
        }
        return Capture.from_frames(cap.meta, {}, threads=cap.table("threads"), **tables)

    # windows -------------------------------------------------------------------------------------
    def _rel(self, t_ns: int) -> str:
        return f"{(t_ns - (self.origin_ns or 0)) / 1e9:.1f} s"

    def _save(self, window: Window) -> None:
        first = window.first
        row: dict[str, Any] = {
            "t_ns": first.t_ns,
            "start_ns": window.start_ns,
            "end_ns": window.end_ns,
            "triggers": len(window.triggers),
            "kind": first.kind,
            "text": first.text,
        }
        what = f"window at {self._rel(first.t_ns)} ({first.text}" + (
            f", {len(window.triggers)} triggers)" if len(window.triggers) > 1 else ")"
        )
        if self.saved >= self.max_windows:
            return self._skip(row, what, f"--max-windows {self.max_windows} reached")
        left = self.max_disk_bytes - self.saved_bytes
        paths = [
            s.path
            for _, s in sorted(self.seen.items())
            if s.last_ns >= window.start_ns - FLUSH_LAG_NS and s.first_ns <= window.end_ns + FLUSH_LAG_NS
        ]
        name = f"window-{self.saved + 1:03d}.ssf"
        try:
            if not paths:
                raise CaptureFormatError("the ring no longer holds that time")
            meta = {
                "window": {
                    "origin_ns": self.origin_ns,
                    "start_ns": window.start_ns,
                    "end_ns": window.end_ns,
                    "trigger": {"t_ns": first.t_ns, "kind": first.kind, "text": first.text},
                    "triggers": len(window.triggers),
                }
            }
            size = write_capture(
                self.out / name, cut(join(paths), window.start_ns, window.end_ns, meta), max_bytes=left
            )
        except TooLarge as err:
            return self._skip(row, what, f"the disk limit is reached ({err})")
        except (CaptureFormatError, OSError) as err:
            why = getattr(err, "strerror", None) or str(err)
            return self._skip(row, what, f"cannot write it: {why}")
        self.saved += 1
        self.saved_bytes += size
        verdict = first_verdict(self.out / name, first.t_ns)
        self.windows.append({**row, "status": "saved", "file": name, "bytes": size, "verdict": verdict, "reason": ""})
        self.say(f"{what} saved: {self.out / name} ({size / 1e6:.1f} MB): {verdict}")

    def _skip(self, row: dict[str, Any], what: str, why: str) -> None:
        self.windows.append({**row, "status": "skipped", "reason": why})
        self.events.append({"t_ns": row["t_ns"], "kind": "window_skipped", "pid": None, "tid": None, "text": why})
        self.say(f"{what} skipped: {why}")

    # status and the end --------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        totals = self.counters.totals if self.counters else {}
        now = max((s.last_ns for s in self.seen.values()), default=0)
        minute = self.counters.last_minute(now) if self.counters else {}
        return {
            "windows": self.saved,
            "skipped": len(self.windows) - self.saved,
            "xruns": totals.get("xruns", 0),
            "late": totals.get("missed_deadlines", 0),
            "stalls": totals.get("stalls", 0),
            "xruns_this_minute": minute.get("xruns", 0),
        }

    def finish(self, cpu_ns: int) -> Path | None:
        """Everything left saved; flight.ssf written; the ring removed unless kept. flight.ssf's path."""
        self.poll(ended=True)
        tables: dict[str, Any] = {}
        if self.counters is not None:
            tables.update(self.counters.tables())
        columns = ("t_ns", "start_ns", "end_ns", "triggers", "kind", "text", "status", "file", "bytes", "verdict")
        tables["flight_windows"] = {c: [w.get(c) for w in self.windows] for c in (*columns, "reason")}
        if self.events:
            tables["events"] = {c: [e[c] for e in self.events] for c in ("t_ns", "kind", "pid", "tid", "text")}
        if self.xruns:  # the session's xruns, for `forensics xruns flight.ssf`
            tables["xruns"] = pd.concat(self.xruns, ignore_index=True)
        meta = {
            **self.meta,
            "window": {"origin_ns": self.origin_ns},
            "flight": {
                "before_ns": self.before_ns,
                "after_ns": self.after_ns,
                "triggers": [r.text for r in self.rules],
                "max_windows": self.max_windows,
                "max_disk_bytes": self.max_disk_bytes,
                "segments_lost": self.lost_segments,
                "triggers_before_start": self.before_start,
                "burst_gap_ns": BURST_GAP_NS,
                "watcher_cpu_ns": cpu_ns,
            },
        }
        path: Path | None = self.out / FLIGHT_FILE
        frames = {n: pd.DataFrame(t) for n, t in tables.items()}
        try:
            assert path is not None
            write_capture(path, Capture.from_frames(meta, {"end_reason": "flight"}, **frames))
        except (CaptureFormatError, OSError) as err:
            self.say(f"cannot write {path}: {getattr(err, 'strerror', None) or err}")
            path = None
        held = self.ring / HELD_DIR
        with contextlib.suppress(OSError):
            for entry in os.scandir(held):  # what a damaged segment left held; the rest went in poll
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
            held.rmdir()
        if not self.keep_ring:
            for segment in list_segments(self.ring):
                with contextlib.suppress(OSError):
                    os.unlink(segment.path)
            with contextlib.suppress(OSError):
                self.ring.rmdir()
        return path


def first_verdict(path: Path, t_ns: int) -> str:
    """The window's first verdict: the incident nearest its first trigger (root thread and cause), else the
    nearest stall episode, else that none of the watched threads stalled."""
    from analyses.incidents import find_incidents
    from analyses.source import capture_interval_ns
    from analyses.stalls import find_stalls
    from analyses.threads import select_threads, thread_profiles

    try:
        cap = load(path)
        profiles = thread_profiles(cap)
        episodes = find_stalls(cap, profiles=profiles)
        incidents, _ = find_incidents(cap, episodes, select_threads(profiles), interval_ns=capture_interval_ns(cap))
    except Exception as err:  # a verdict that fails must not stop the watcher (the window is saved)
        return f"unknown (the window could not be analysed: {type(err).__name__}: {err})"

    def nearest(frame: pd.DataFrame) -> Any:
        start, end = frame["start_ns"].to_numpy(dtype="int64"), frame["end_ns"].to_numpy(dtype="int64")
        distance = (start - t_ns).clip(min=0) + (t_ns - end).clip(min=0)
        return frame.iloc[int(distance.argmin())]

    if len(incidents):
        row = nearest(incidents)
        return f"{row['root_verdict']} in {row['root_comm']} ({row['root_tid']})"
    if len(episodes):
        row = nearest(episodes)
        return f"{row['verdict']} stall of {row['comm']} ({row['tid']})"
    return "no stall of a watched thread in the window"


def _writer_gone(pid: int | None, timeout_s: float) -> None:
    """Wait for the writer (it flushes the last segment after a killed recorder)."""
    if pid is None:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            pass
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m forensics.flight.watch CONFIG_JSON", file=sys.stderr)
        return 2
    config = json.loads(args[0])
    # Ctrl-C reaches the recorder alone (own process group); the end comes as the end of stdin.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.nice(10)
    watcher = Watcher(config)
    cpu_start = time.process_time_ns()
    stdin = sys.stdin.fileno()
    # Status lines are dropped while catch-load does not read them (a full pipe must not stop the watcher).
    os.set_blocking(sys.stdout.fileno(), False)
    last_status: dict[str, Any] = {}

    def report(extra: dict[str, Any] | None = None) -> None:
        nonlocal last_status
        status = {**watcher.status(), **(extra or {})}
        if status != last_status:
            with contextlib.suppress(BrokenPipeError, OSError):
                os.write(sys.stdout.fileno(), (json.dumps(status) + "\n").encode())
            last_status = status

    while True:
        readable, _, _ = select.select([stdin], [], [], POLL_S)
        if readable and not os.read(stdin, 4096):
            break
        watcher.poll()
        report()
    _writer_gone(watcher.writer_pid, WRITER_END_WAIT_S)
    cpu_ns = time.process_time_ns() - cpu_start
    flight = watcher.finish(cpu_ns)
    os.set_blocking(sys.stdout.fileno(), True)
    report({"done": True, "flight": str(flight) if flight else None, "cpu_ns": cpu_ns})
    return 0


if __name__ == "__main__":
    exit_without_teardown(main())  # capture.process_exit: Arrow's teardown can abort a process that wrote parquet
