"""`--span FROM..TO`: a part of a capture named by markers or by times since its first sample.

Each side is empty (the capture's start or end), a time since the first sample with its unit (`1.5s`,
`200ms`, `2500us`; a bare number is only a marker's label), a marker's label (the text of a `marker`
event, exactly, or a part of it that only one marker has), or `#N`, the N-th marker (1-based).
Examples: `load..loaded`, `#1..#2`, `2s..7.5s`, `load..`, `..3s`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from analyses.source import capture_origin_ns, in_span
from capture.errors import ForensicsError
from capture.format import Capture
from capture.vocabulary import DURATION_FORMS, parse_duration_ns

__all__ = ["in_span", "overlaps_span", "resolve_span"]  # in_span lives in analyses.source (its readers use it)


def _markers(cap: Capture) -> tuple[list[str], list[int]]:
    events = cap.events
    if events.empty:
        return [], []
    marks = events[events["kind"] == "marker"].sort_values("t_ns")
    return [str(t) if t is not None else "" for t in marks["text"].tolist()], [int(t) for t in marks["t_ns"]]


def _side(cap: Capture, text: str, origin: int, labels: list[str], times: list[int]) -> int | None:
    text = text.strip()
    if not text:
        return None
    try:
        return origin + parse_duration_ns(text)
    except ValueError:
        pass  # a marker's label, or neither (said below)
    if text.startswith("#") and text[1:].isdigit():
        index = int(text[1:])
        if not 1 <= index <= len(times):
            raise ForensicsError(f"--span: there is no marker {text}; the capture has {len(times)} marker(s)")
        return times[index - 1]
    exact = [t for label, t in zip(labels, times, strict=True) if label == text]
    if exact:
        return exact[0]
    partial = [(label, t) for label, t in zip(labels, times, strict=True) if text.lower() in label.lower()]
    if len(partial) == 1:
        return partial[0][1]
    known = ", ".join(repr(label) for label in labels) or "none"
    if partial:
        raise ForensicsError(f"--span: {text!r} matches several markers ({known}); give the exact label or #N")
    raise ForensicsError(
        f"--span: {text!r} is neither a time since the first sample ({DURATION_FORMS}) nor a marker label; "
        f"markers: {known}"
    )


def resolve_span(cap: Capture, text: str | None) -> tuple[int | None, int | None] | None:
    """(start_ns, end_ns) on the capture's clock for `FROM..TO`; None for no span."""
    if not text:
        return None
    if ".." not in text:
        raise ForensicsError(f"--span {text!r}: write FROM..TO (markers or times, either side may be empty)")
    left, _, right = text.partition("..")
    origin = capture_origin_ns(cap)
    if origin is None:
        raise ForensicsError("--span: the capture holds no samples")
    labels, times = _markers(cap)
    start = _side(cap, left, origin, labels, times)
    end = _side(cap, right, origin, labels, times)
    if start is not None and end is not None and end <= start:
        raise ForensicsError(f"--span {text!r}: its end is not after its start")
    return start, end


def overlaps_span(start_ns: Any, end_ns: Any, span: tuple[int | None, int | None] | None) -> np.ndarray:
    """Which [start, end) intervals (episodes, incidents) touch the span: what a span shows of the
    verdicts decided on the whole capture."""
    start = np.asarray(start_ns, dtype=np.float64)
    end = np.asarray(end_ns, dtype=np.float64)
    keep = np.ones(len(start), dtype=bool)
    if span is None:
        return keep
    if span[0] is not None:
        keep &= end > span[0]
    if span[1] is not None:
        keep &= start < span[1]
    return keep
