"""Options the analysis commands share (output format and file, --span) and how they print a report."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from capture.errors import ForensicsError
from forensics.render import RENDERERS, Report, choose_format, render

F = TypeVar("F", bound=Callable[..., Any])


def output_options(func: F) -> F:
    """--format, --json, -o/--output."""
    func = click.option(
        "-o",
        "--output",
        type=click.Path(dir_okay=False, path_type=str),
        help="Write to this file instead of stdout (format from its suffix: .json -> json).",
    )(func)
    func = click.option("--json", "as_json", is_flag=True, help="Print JSON (raw ns and counts) instead of a table.")(
        func
    )
    func = click.option(
        "--format",
        "fmt",
        type=click.Choice(sorted(RENDERERS)),
        default=None,
        help="Output format (default: table on a terminal or for -o FILE.txt; json for -o FILE.json).",
    )(func)
    return func


def span_option(func: F) -> F:
    return click.option(
        "--span",
        metavar="FROM..TO",
        help="Only this part of the capture: markers (load..loaded, #1..#2) or times since the first "
        "sample (2s..7.5s); either side may be empty.",
    )(func)


def emit(report: Report, *, fmt: str | None, as_json: bool, output: str | None) -> None:
    """Render and print (or write) a report; colour only on a terminal and never with NO_COLOR."""
    chosen = choose_format(fmt, as_json, output)
    color = chosen == "table" and output is None and sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    text = render(report, chosen, width=100, color=color)
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        Path(output).write_text(text)
    except OSError as err:
        raise ForensicsError(f"cannot write {output}: {err.strerror}") from err
    click.echo(f"wrote {output}", err=True)
