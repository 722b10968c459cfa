"""A bounded on-disk ring of capture segments: what the flight recorder records into (README, "Flight
recorder"; DESIGN.md, "Flight recorder").

The writer appends to one segment file at a time; when its samples span `segment_ns` the writer closes it
with a trailer and opens the next; segments whose last sample is more than `keep_ns` older than the newest
are deleted. Times are the samples' own (t_ns): the writer may lag behind the recorder by seconds on a busy
machine, so its own clock says little about what a segment holds. Every segment is a
capture of its own (header, metadata, tables, trailer), so a killed recorder leaves whole segments behind
and only the open one ends without its trailer. The tables a segment needs to be read alone but that the
recorder writes only when something changes (the threads it knows, the engine's clients and graph) are
written again at the start of each segment ("carried").

    ring/seg-000001.ssf   closed: trailer {"end_reason": "segment", "segment": {index, first_ns, last_ns}}
                          (the first and last sample time it holds)
    ring/seg-000002.ssf   open (the recorder's own trailer when the recording ends here)
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from capture.format import CaptureWriter, _to_arrow

SEGMENT_PREFIX = "seg-"
_SEGMENT_NAME = re.compile(r"^seg-(\d{6,})\.ssf$")
# Written when something changes, needed by every segment read alone: re-written at each segment's start.
CARRIED_TABLES = ("threads", "engine_clients", "engine_graph")


def segment_name(index: int) -> str:
    return f"{SEGMENT_PREFIX}{index:06d}.ssf"


@dataclass(frozen=True)
class Segment:
    index: int
    path: Path


def list_segments(directory: str | os.PathLike[str]) -> list[Segment]:
    """The ring's segment files, oldest first (other files in the directory are ignored)."""
    found = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(directory):
            match = _SEGMENT_NAME.match(entry.name)
            if match and entry.is_file(follow_symlinks=False):
                found.append(Segment(int(match.group(1)), Path(entry.path)))
    return sorted(found, key=lambda s: s.index)


def closed_segments(directory: str | os.PathLike[str], *, ended: bool = False) -> list[Segment]:
    """The segments the writer has finished with: all but the newest, or all once the recording `ended`."""
    segments = list_segments(directory)
    return segments if ended else segments[:-1]


class SegmentedWriter:
    """CaptureWriter's interface (update_meta, append, close, abandon, bytes_written, rows_written) over a
    ring of segment files in `directory` (which must exist)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        meta: Mapping[str, Any],
        *,
        segment_ns: int,
        keep_ns: int,
    ) -> None:
        self.directory = Path(directory)
        self.segment_ns = segment_ns
        self.keep_ns = keep_ns
        self.meta: dict[str, Any] = dict(meta)
        self.carried: dict[str, list[pa.Table]] = {}
        self.closed: list[tuple[Path, int]] = []  # (path, last_ns) of segments still on disk
        self.index = 0
        self.bytes_written = 0  # over all segments, deleted ones included
        self.rows_written: dict[str, int] = {}
        self.first_ns: int | None = None  # sample times in the open segment
        self.last_ns: int | None = None
        self.current = self._open()

    def _open(self) -> CaptureWriter:
        self.index += 1
        self.first_ns = self.last_ns = None
        writer = CaptureWriter(self.directory / segment_name(self.index), self.meta)
        writer.update_meta({"segment": {"index": self.index}})
        for name, tables in self.carried.items():
            writer.append(name, pa.concat_tables(tables, promote_options="permissive"))
        self.bytes_written += writer.bytes_written
        return writer

    def update_meta(self, patch: Mapping[str, Any]) -> None:
        self.meta.update(patch)  # top-level keys replace earlier ones, as a reader merges META records
        before = self.current.bytes_written
        self.current.update_meta(patch)
        self.bytes_written += self.current.bytes_written - before

    def name_lost(self) -> str | None:
        """As CaptureWriter.name_lost, for the segment being written (closed ones are the ring's to drop)."""
        return self.current.name_lost()

    def append(self, name: str, data: pa.Table | pd.DataFrame | Mapping[str, Any]) -> None:
        table = _to_arrow(name, data)
        if table.num_rows == 0:
            return
        if name in CARRIED_TABLES:
            self.carried.setdefault(name, []).append(table)
            if name == "threads":  # only each thread's latest row: bounded by the threads alive
                self.carried[name] = [_latest_per_tid(self.carried[name])]
        before = self.current.bytes_written
        self.current.append(name, table)
        self.bytes_written += self.current.bytes_written - before
        self.rows_written[name] = self.rows_written.get(name, 0) + table.num_rows
        if name == "samples":
            times = pc.min_max(table.column("t_ns"))
            low, high = times["min"].as_py(), times["max"].as_py()
            self.first_ns = low if self.first_ns is None else min(self.first_ns, low)
            self.last_ns = high if self.last_ns is None else max(self.last_ns, high)

    def rotate_if_due(self) -> bool:
        """At the end of a flush: start the next segment when this one spans segment_ns; drop old ones."""
        if self.first_ns is None or self.last_ns is None or self.last_ns - self.first_ns < self.segment_ns:
            return False
        newest = self.last_ns
        self.current.close(self._segment_trailer())
        self.closed.append((self.current.path, newest))
        self.current = self._open()
        self.drop_old(newest)
        return True

    def _segment_trailer(self) -> dict[str, Any]:
        return {
            "end_reason": "segment",
            "segment": {"index": self.index, "first_ns": self.first_ns, "last_ns": self.last_ns},
        }

    def drop_old(self, newest_ns: int) -> None:
        keep = []
        for path, last_ns in self.closed:
            if newest_ns - last_ns > self.keep_ns:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            else:
                keep.append((path, last_ns))
        self.closed = keep

    def close(self, trailer: Mapping[str, Any] | None = None) -> None:
        """The recording's end: its trailer (with this segment's bounds) ends the last segment."""
        if trailer is not None:
            trailer = {**trailer, **self._segment_trailer(), "end_reason": trailer.get("end_reason", "")}
        self.current.close(trailer)

    def abandon(self) -> None:
        self.current.abandon()


def _latest_per_tid(tables: list[pa.Table]) -> pa.Table:
    """One row per thread: first seen (t_ns), policy as first seen, names as last seen (a rename row
    carries only the new names: the other columns keep their latest known value)."""
    frame = pa.concat_tables(tables, promote_options="permissive").to_pandas()
    ordered = frame.sort_values("t_ns", kind="stable").groupby("tid", sort=True)
    first = [c for c in ("t_ns", "policy", "rtprio") if c in frame.columns]
    merged = ordered.last().drop(columns=first).join(ordered[first].first()).reset_index()
    return _to_arrow("threads", merged[[c for c in frame.columns if c in merged.columns]])
