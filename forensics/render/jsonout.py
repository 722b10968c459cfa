"""The JSON renderer: every column of every section, in raw units (ns, counts), missing values as null.

A report with a `json_root` prints that section's rows as one list (what `forensics stalls --json` promises:
a list of objects); otherwise one object: {"title", "origin_ns", "sections": {name: rows}, "notes"}.
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


def render_json(report: Report) -> str:
    if report.json_root is not None:
        body: Any = rows(report.section(report.json_root).frame)
    else:
        body = {
            "title": report.title,
            "origin_ns": report.origin_ns,
            "sections": {s.name: rows(s.frame) for s in report.sections},
            "notes": report.notes,
        }
    return json.dumps(body, indent=2, default=str) + "\n"
