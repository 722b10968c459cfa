"""Renderers: a `Report` (titled sections of DataFrames) to text. Registered by name in RENDERERS.

Analyses return DataFrames with raw units (ns, counts); a report says which columns to show and under
which heading, and the renderer formats by column name: `*_ns` as a duration, `start_ns`/`end_ns`/`t_ns`
as seconds since the capture's first sample, `*_pct` as a percentage. Choose one with `--format NAME`,
`--json`, or by the suffix of `-o FILE` (.json -> json, .html -> html, .md -> markdown, anything else ->
table). A section may also carry a paragraph (`text`) and a picture (`image`: PNG bytes made by
`forensics.plots`); the html and markdown renderers embed it, the others leave it out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from capture.errors import ForensicsError


@dataclass
class Section:
    """One table of a report.

    `columns` maps frame column -> heading (and sets the order); None shows every column. `detail` names
    a long text column printed under each row instead of in it (evidence lines); `note` follows the table.
    """

    name: str
    title: str
    frame: pd.DataFrame
    columns: dict[str, str] | None = None
    detail: str | None = None
    note: str = ""
    empty: str = "(none)"
    text: str = ""  # a paragraph shown before the table (html, markdown, table)
    image: bytes | None = None  # a PNG shown before the table (html and markdown embed it)
    image_alt: str = ""  # what the picture shows, for readers who cannot see it
    level: int = 2  # heading level in html/markdown: 2 a chapter, 3 a part of one


@dataclass
class Report:
    title: str
    sections: list[Section] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    origin_ns: int | None = None  # times print as seconds since this (the capture's first sample)
    json_root: str | None = None  # JSON output is this section's rows alone (a list), e.g. stalls

    def section(self, name: str) -> Section:
        for section in self.sections:
            if section.name == name:
                return section
        raise KeyError(name)


Renderer = Callable[..., str]


def _table(report: Report, *, width: int = 100, color: bool = False) -> str:
    from forensics.render.table import render_table

    return render_table(report, width=width, color=color)


def _json(report: Report, **_: object) -> str:
    from forensics.render.jsonout import render_json

    return render_json(report)


def _html(report: Report, **_: object) -> str:
    from forensics.render.html import render_html

    return render_html(report)


def _markdown(report: Report, **_: object) -> str:
    from forensics.render.markdown import render_markdown

    return render_markdown(report)


RENDERERS: dict[str, Renderer] = {
    "table": _table,
    "json": _json,
    "html": _html,
    "markdown": _markdown,
}
SUFFIXES = {".json": "json", ".txt": "table", ".html": "html", ".htm": "html", ".md": "markdown"}


def choose_format(fmt: str | None, as_json: bool, output: str | None) -> str:
    """--json wins, then --format, then the output file's suffix, then `table`."""
    if as_json:
        return "json"
    if fmt:
        if fmt not in RENDERERS:
            raise ForensicsError(f"unknown --format {fmt!r}; choose one of: {', '.join(sorted(RENDERERS))}")
        return fmt
    if output:
        return SUFFIXES.get(Path(output).suffix.lower(), "table")
    return "table"


def render(report: Report, fmt: str = "table", *, width: int = 100, color: bool = False) -> str:
    try:
        renderer = RENDERERS[fmt]
    except KeyError:
        raise ForensicsError(f"unknown format {fmt!r}; choose one of: {', '.join(sorted(RENDERERS))}") from None
    return renderer(report, width=width, color=color)


__all__ = ["RENDERERS", "SUFFIXES", "Report", "Section", "choose_format", "render"]
