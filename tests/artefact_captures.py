"""Captures for the artefact tests: the real lab captures, with markers added, or without trailer/truth."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

import forensics
from capture.format import Capture, CaptureWriter
from tests.helpers import REPO

EPISODES = REPO / "captures" / "lab-episodes.ssf"
CLEAN = REPO / "captures" / "lab-clean.ssf"
TABLES = ("samples", "threads", "events", "system", "sched", "cycles", "truth", "processes", "thread_seen")


def with_markers(path: Path = EPISODES, at_s: tuple[float, ...] = (1.0, 3.0), texts=("load", "loaded")) -> Capture:
    """The real capture with `marker` events (what Enter or SIGUSR1 in catch-load adds) at these times."""
    cap = forensics.load(path)
    origin = int(cap.samples["t_ns"].min())
    marks = pd.DataFrame(
        {
            "t_ns": [origin + int(s * 1e9) for s in at_s],
            "kind": "marker",
            "pid": pd.array([None] * len(at_s), dtype="Int32"),
            "tid": pd.array([None] * len(at_s), dtype="Int32"),
            "text": list(texts),
        }
    )
    events = pd.concat([cap.events, marks], ignore_index=True).sort_values("t_ns", kind="stable")
    tables = {name: cap.table(name) for name in TABLES if name in cap.table_names}
    tables["events"] = events.reset_index(drop=True)
    return Capture.from_frames(meta=cap.meta, trailer=cap.trailer, **tables)


def rewrite(src: Path, dst: Path, *, trailer: bool = True, drop: tuple[str, ...] = ()) -> Path:
    """A copy of a capture file; without its trailer (as a killed recorder leaves it) or without tables."""
    cap = forensics.load(src)
    with CaptureWriter(dst, cap.meta) as writer:
        for name in TABLES:
            if name in cap.table_names and name not in drop:
                for chunk in cap.iter_chunks(name):
                    writer.append(name, chunk)
        writer.close(dict(cap.trailer or {}) if trailer else None)
    return dst
