"""Renderers: a `Report` (titled sections of DataFrames) to text. Registered by name in RENDERERS.

Analyses return DataFrames with raw units (ns, counts); a report says which columns to show and under
which heading, and the renderer formats by column name: `*_ns` as a duration, `start_ns`/`end_ns`/`t_ns`
as seconds since the capture's first sample, `*_pct` as a percentage. Choose one with `--format NAME`,
`--json`, or by the suffix of `-o FILE` (.txt table, .csv, .json, .md markdown, .html; any other name
is refused). A section may also carry a paragraph (`text`) and a picture (`image`: PNG bytes made by
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
    `whole` names columns the table renderer never shortens (what a row is read by): too wide a table
    shortens its other text columns, then leaves out its last columns.
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
    whole: tuple[str, ...] = ()  # columns the table renderer never shortens


@dataclass
class Report:
    title: str
    sections: list[Section] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    origin_ns: int | None = None  # times print as seconds since this (the capture's first sample)
    json_root: str | None = None  # the section that answers the command (the JSON envelope's `main`)
    found: dict[str, int] = field(default_factory=dict)  # what it shows, by kind (--fail-on); not rendered

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


def _csv(report: Report, **_: object) -> str:
    from forensics.render.csvout import render_csv

    return render_csv(report)


RENDERERS: dict[str, Renderer] = {
    "table": _table,
    "json": _json,
    "html": _html,
    "markdown": _markdown,
    "csv": _csv,
}
SUFFIXES = {".json": "json", ".txt": "table", ".csv": "csv", ".html": "html", ".htm": "html", ".md": "markdown"}


def output_format(output: str) -> str:
    """The format an output file's suffix names; a one-line error for any other name (nothing is
    written under a name that says another format)."""
    fmt = SUFFIXES.get(Path(output).suffix.lower())
    if fmt is None:
        names = ", ".join(SUFFIXES)
        raise ForensicsError(f"-o {output}: the suffix picks the format; name the file {names}")
    return fmt


def choose_format(fmt: str | None, as_json: bool, output: str | None) -> str:
    """The output file's suffix (--json or --format may repeat it, never contradict it); else --json,
    then --format, then `table`."""
    asked = "json" if as_json else fmt
    if asked is not None and asked not in RENDERERS:
        raise ForensicsError(f"unknown --format {asked!r}; choose one of: {', '.join(sorted(RENDERERS))}")
    if output:
        by_suffix = output_format(output)
        if asked is not None and asked != by_suffix:
            option = "--json" if as_json else f"--format {fmt}"
            raise ForensicsError(f"-o {output} names {by_suffix} output but {option} asks for {asked}: drop one")
        return by_suffix
    return asked or "table"


def render(report: Report, fmt: str = "table", *, width: int = 100, color: bool = False) -> str:
    try:
        renderer = RENDERERS[fmt]
    except KeyError:
        raise ForensicsError(f"unknown format {fmt!r}; choose one of: {', '.join(sorted(RENDERERS))}") from None
    return renderer(report, width=width, color=color)


__all__ = ["RENDERERS", "SUFFIXES", "Report", "Section", "choose_format", "output_format", "render"]
