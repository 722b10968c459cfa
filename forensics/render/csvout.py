"""The CSV renderer: one table in raw units (ns, counts), as the JSON envelope holds them.

CSV holds one table a file: the report's main section (what answers the command: stalls' incidents or
episodes, xruns); a report without one stacks its sections under a leading `section` column (the union of
their columns; a cell a section has not is empty). Cells that hold a structure (components, member
episodes) are written as JSON.
"""

from __future__ import annotations

import io
import json

import pandas as pd

from forensics.render import Report
from forensics.render.jsonout import rows


def _cell(value: object) -> object:
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return value


def render_csv(report: Report) -> str:
    if report.json_root is not None:
        table = rows(report.section(report.json_root).frame)
    else:
        table = [{"section": s.name, **row} for s in report.sections for row in rows(s.frame)]
    frame = pd.DataFrame([{k: _cell(v) for k, v in row.items()} for row in table])
    out = io.StringIO()
    frame.to_csv(out, index=False, lineterminator="\n")
    return out.getvalue()
