"""The terminal renderer: aligned tables that fit `width` columns (100), bold headings on a terminal only.

Too wide a table first shortens its longest text cells (with an ellipsis), then leaves out its last
columns and says so: `--json` always has everything. A section's `whole` columns (what its rows are read
by) are never shortened: the other columns are.
"""

from __future__ import annotations

import textwrap

import pandas as pd

from forensics.render import Report, Section
from forensics.render.cells import column_units, fmt_cell
from forensics.text import printable

MIN_TEXT = 10
BOLD, RESET = "\x1b[1m", "\x1b[0m"


def _numeric(frame: pd.DataFrame, column: str) -> bool:
    return pd.api.types.is_numeric_dtype(frame[column].dtype) and not pd.api.types.is_bool_dtype(frame[column].dtype)


def _fit(
    headers: list[str], cells: list[list[str]], width: int, whole: frozenset[int] = frozenset()
) -> tuple[list[int], int]:
    """Column widths that fit `width` (shrinking long text, never that of the `whole` columns), and how many
    columns are shown."""
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(headers)]
    shown = len(headers)

    def total(n: int) -> int:
        return sum(widths[:n]) + 2 * (n - 1)

    while total(shown) > width:
        shortened = [i for i in range(shown) if i not in whole]
        longest = max(shortened, key=lambda i: widths[i]) if shortened else shown - 1
        floor = max(MIN_TEXT, len(headers[longest])) if shortened else widths[longest]
        if widths[longest] > floor:
            widths[longest] = max(floor, widths[longest] - (total(shown) - width))
        elif shown > 1:
            shown -= 1
        else:
            break
    return widths, shown


def _clip(text: str, size: int) -> str:
    return text if len(text) <= size else text[: max(size - 1, 0)] + "…"


def render_section(section: Section, *, width: int, color: bool, origin_ns: int | None) -> list[str]:
    title = f"{BOLD}{printable(section.title)}{RESET}" if color else printable(section.title)
    lines = [title]
    if section.text:
        lines.extend(textwrap.wrap(printable(section.text), width, initial_indent="  ", subsequent_indent="  "))
    if section.image is not None:
        lines.append("  (a picture: see the html or markdown rendering, or `forensics plot`)")
    frame = section.frame
    if frame is None or frame.empty:
        if section.empty:
            lines.append(f"  {printable(section.empty)}")
        if section.note:
            lines.extend(textwrap.wrap(printable(section.note), width, initial_indent="  ", subsequent_indent="  "))
        return lines
    columns = section.columns or {c: c for c in frame.columns if c != section.detail}
    names = [c for c in columns if c in frame.columns]
    headers = [printable(columns[c]) for c in names]
    rows = frame[names].itertuples(index=False, name=None)
    units = column_units(frame, names)
    cells = [[fmt_cell(c, v, origin_ns, units.get(c)) for c, v in zip(names, row, strict=True)] for row in rows]
    whole = frozenset(i for i, c in enumerate(names) if c in section.whole)
    widths, shown = _fit(headers, cells, width - 2, whole)
    right = [_numeric(frame, c) for c in names]

    def line(values: list[str]) -> str:
        parts = []
        for i in range(shown):
            text = _clip(values[i], widths[i])
            parts.append(text.rjust(widths[i]) if right[i] else text.ljust(widths[i]))
        return ("  " + "  ".join(parts)).rstrip()

    header = line(headers)
    lines.append(f"{BOLD}{header}{RESET}" if color else header)
    details = frame[section.detail].tolist() if section.detail and section.detail in frame else None
    for i, row in enumerate(cells):
        lines.append(line(row))
        if details is not None and isinstance(details[i], str) and details[i]:
            detail = printable(details[i])
            lines.extend(textwrap.wrap(detail, width, initial_indent="      ", subsequent_indent="      "))
    if shown < len(names):
        left_out = ", ".join(headers[shown:])
        lines.append(f"  ({len(names) - shown} columns left out to fit {width} columns: {left_out}; see --json)")
    if section.note:
        lines.extend(textwrap.wrap(printable(section.note), width, initial_indent="  ", subsequent_indent="  "))
    return lines


def render_table(report: Report, *, width: int = 100, color: bool = False) -> str:
    lines: list[str] = []
    if report.title:
        lines.append(f"{BOLD}{printable(report.title)}{RESET}" if color else printable(report.title))
        lines.append("")
    for section in report.sections:
        lines.extend(render_section(section, width=width, color=color, origin_ns=report.origin_ns))
        lines.append("")
    for note in report.notes:
        lines.extend(textwrap.wrap(printable(note), width))
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines) + "\n"
