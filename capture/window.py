"""A time window of a recording as a capture of its own: what the flight recorder saves around a trigger
(README, "Flight recorder"; DESIGN.md, "Flight recorder").

join(paths)             the segments of a ring as one in-memory capture (carried tables once)
cut(cap, t0, t1)        the capture's rows in [t0, t1]: rows stamped with a time (t_ns) inside it; the
                        state tables (threads, engine clients and graph) as they stood up to t1; lab truth
                        and cycles that overlap it
write_capture(path, cap, meta)
                        a standalone capture file: written to a temporary name in the same directory,
                        then published with link(2), which never replaces an existing name nor follows a
                        link there; a reader never sees half a window
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from capture.errors import CaptureFormatError
from capture.format import Capture, CaptureWriter, Damage, load

# Tables that hold the state as it changed (a snapshot at start, then changes): kept up to the window's
# end, not from its start, so a window knows the threads and the graph it shows.
STATE_TABLES = ("threads", "engine_clients", "engine_graph")
# Derived by the writer from the samples it writes: never copied.
DERIVED_TABLES = ("thread_seen",)
# Tables of spans (start_ns, end_ns): kept when they overlap the window.
SPAN_TABLES = ("truth", "cycles")


def join(paths: Iterable[str | os.PathLike[str]]) -> Capture:
    """Segments (oldest first) as one in-memory capture; metadata merged in order, the last trailer."""
    caps = [load(p) for p in paths]
    if not caps:
        raise CaptureFormatError("no segment to join")
    meta: dict[str, Any] = {}
    for cap in caps:
        meta.update(cap.meta)
    meta.pop("segment", None)
    names = sorted({n for cap in caps for n in cap.table_names} - set(DERIVED_TABLES))
    tables = {}
    for name in names:
        parts = [frame for cap in caps if not (frame := cap.table(name)).empty]
        if not parts:
            continue
        frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
        if name in STATE_TABLES:  # written again at each segment's start
            frame = frame.drop_duplicates(ignore_index=True)
        tables[name] = frame
    warnings = [w for cap in caps for w in cap.warnings]
    damage = [d for cap in caps for d in cap.damage]
    return Capture(None, meta, caps[-1].trailer, {}, tables, warnings, damage)


def cut_tables(cap: Capture, t0: int, t1: int) -> dict[str, pd.DataFrame]:
    """The tables of `cap` cut to [t0, t1] (module docstring); empty tables left out."""
    out = {}
    for name in cap.table_names:
        if name in DERIVED_TABLES:
            continue
        frame = cap.table(name)
        if frame.empty:
            continue
        if name in SPAN_TABLES and {"start_ns", "end_ns"} <= set(frame.columns):
            frame = frame[(frame["end_ns"] >= t0) & (frame["start_ns"] <= t1)]
        elif "t_ns" in frame.columns:
            t = frame["t_ns"]
            frame = frame[t <= t1] if name in STATE_TABLES else frame[(t >= t0) & (t <= t1)]
        if not frame.empty:
            out[name] = frame.reset_index(drop=True)
    return out


def cut(cap: Capture, t0: int, t1: int, meta: Mapping[str, Any] | None = None) -> Capture:
    """`cap` as if it held [t0, t1] only (`meta` keys added). Rows lost to damage that may lie in it are
    kept in the metadata's `window` (`damage`): the window's own file is whole, yet its views must still
    say "no verdict" where the recording lost rows (capture.format.load reads them back as its damage)."""
    trailer = {"end_reason": "window", "duration_ns": t1 - t0}
    damage = [d for d in cap.damage if _may_touch(d, t0, t1)]
    out_meta: dict[str, Any] = {**cap.meta, **(meta or {})}
    if damage:
        out_meta["window"] = {
            **(out_meta.get("window") or {}),
            "damage": [{"table": d.table, "after_ns": d.after_ns, "before_ns": d.before_ns} for d in damage],
        }
    return Capture(None, out_meta, trailer, {}, cut_tables(cap, t0, t1), list(cap.warnings), damage)


def _may_touch(damage: Damage, t0: int, t1: int) -> bool:
    """Whether rows lost between damage.after_ns and damage.before_ns may lie in [t0, t1]: a hole between
    two rows read that overlaps it, or one at an unknown time (both None). Damage before the first row or
    after the last one read (a killed recorder's cut last record) is where the recording began or ended:
    no row of the window lay there (forensics.describe.damage_notes reads it so too)."""
    low, high = damage.after_ns, damage.before_ns
    if low is None or high is None:
        return low is None and high is None
    return low < t1 and high > t0


class TooLarge(CaptureFormatError):
    """The window would take more than the bytes left to it: nothing was published."""


def write_capture(path: str | os.PathLike[str], cap: Capture, max_bytes: int | None = None) -> int:
    """Write `cap` as a new capture file at `path` (never over an existing name); its size in bytes.
    Larger than `max_bytes`: TooLarge, and the name is never created."""
    final = Path(path)
    temp = final.with_name(f".{final.name}.{secrets.token_hex(6)}.tmp")
    writer = CaptureWriter(temp, cap.meta)
    try:
        for name in cap.table_names:
            writer.append(name, cap.table(name))
        writer.close(dict(cap.trailer or {}))
        if max_bytes is not None and writer.bytes_written > max_bytes:
            raise TooLarge(f"it would take {writer.bytes_written / 1e6:.1f} MB, {max_bytes / 1e6:.1f} MB are left")
        try:
            os.link(temp, final)
        except FileExistsError:
            raise CaptureFormatError(f"{final} exists already: the window is not written over it") from None
        except OSError as err:
            raise CaptureFormatError(f"cannot write {final}: {err.strerror}") from err
        return writer.bytes_written
    finally:
        writer.abandon()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
