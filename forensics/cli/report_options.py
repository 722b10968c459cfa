"""Options the analysis commands share (output format and file, --span) and how they print a report."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from forensics.cli.artefacts import check_output, force_option, forced
from forensics.render import RENDERERS, Report, choose_format, output_format, render
from forensics.safe_output import write_file

F = TypeVar("F", bound=Callable[..., Any])


def _checked_output(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is not None:  # before the analysis, not after it (--force is eager: it is known here)
        output_format(value)
        check_output(value)
    return value


def output_options(func: F) -> F:
    """--format, --json, -o/--output."""
    func = force_option(func)
    func = click.option(
        "-o",
        "--output",
        type=click.Path(dir_okay=False, path_type=str),
        callback=_checked_output,
        help="Write to this file instead of stdout; its suffix picks the format: .txt .csv .json .md "
        ".html (others are refused). An existing file needs --force.",
    )(func)
    func = click.option("--json", "as_json", is_flag=True, help="Print JSON (raw ns and counts) instead of a table.")(
        func
    )
    func = click.option(
        "--format",
        "fmt",
        type=click.Choice(sorted(RENDERERS)),
        default=None,
        help="Output format (default: table, or what the suffix of -o names).",
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
    write_file(output, text.encode(), force=forced())
    click.echo(f"wrote {output}", err=True)
