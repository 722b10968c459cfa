"""The JSON renderer: every column of every section, in raw units (ns, counts), missing values as null.

Every command's `--json` is one envelope (README, "One output contract"), made here and nowhere else:

    {"format_version": 1, "title": ..., "origin_ns": ..., "main": SECTION or null,
     "sections": {name: [row, ...]}, "notes": [...]}

`main` names the section that answers the command (stalls: "incidents", or "stalls" with --episodes);
`origin_ns` is the capture's first sample (CLOCK_MONOTONIC ns), the zero of the seconds the tables print.
Adding a section or a column keeps `format_version`; renaming or removing one, or changing a unit, bumps it.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from forensics.render import Report


def _plain(value: Any) -> Any:
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [_plain(v) for v in value]
    if isinstance(value, np.bool_ | bool):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return None if math.isnan(value) else float(value)
    return value


def rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    if frame is None or frame.empty:
        return []
    columns = list(frame.columns)
    return [
        {c: _plain(v) for c, v in zip(columns, row, strict=True)} for row in frame.itertuples(index=False, name=None)
    ]


JSON_FORMAT_VERSION = 1


def envelope(
    title: str,
    sections: dict[str, Any],
    *,
    notes: list[str] | None = None,
    origin_ns: int | None = None,
    main: str | None = None,
) -> str:
    """The one JSON shape every command prints (module docstring)."""
    body = {
        "format_version": JSON_FORMAT_VERSION,
        "title": title,
        "origin_ns": origin_ns,
        "main": main,
        "sections": {name: _plain(value) for name, value in sections.items()},
        "notes": list(notes or []),
    }
    return json.dumps(body, indent=2, default=str) + "\n"


def render_json(report: Report) -> str:
    return envelope(
        report.title,
        {s.name: rows(s.frame) for s in report.sections},
        notes=report.notes,
        origin_ns=report.origin_ns,
        main=report.json_root,
    )
