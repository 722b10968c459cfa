"""`forensics info CAPTURE`: what a capture holds and how it was taken."""

from __future__ import annotations

import re
import textwrap

import click
import pandas as pd

from analyses.source import capture_origin_ns
from capture.format import load
from forensics.cli.options import capture_argument
from forensics.cli.report_options import emit, output_options
from forensics.describe import describe_capture
from forensics.render import Report, Section, choose_format

KV = {"item": "", "value": ""}


@click.command()
@capture_argument
@output_options
def info(capture: str, fmt: str | None, as_json: bool, output: str | None) -> None:
    """Print a capture's metadata, achieved timing and row counts.

    Shows the machine (kernel, CPUs, core types), which kernel sources were live, the interval asked
    for and achieved (p50/p99/max), missed ticks, the recorder's own CPU cost, the targets, and how
    many threads, samples and events the file holds. A capture whose recorder was killed says so.
    --json adds the raw metadata, trailer and row counts (sections meta, trailer, rows).
    """
    cap = load(capture)
    summary = describe_capture(cap)
    chosen = choose_format(fmt, as_json, output)
    if chosen == "table" and output is None:
        _print_plain(summary["sections"])
        return
    report = Report(title=f"Capture {capture}", origin_ns=capture_origin_ns(cap))
    for title, items in summary["sections"].items():
        frame = pd.DataFrame({"item": list(items), "value": [str(v) for v in items.values()]})
        report.sections.append(Section(_slug(title), title, frame, KV))
    if chosen == "json":
        for name in ("meta", "trailer", "rows"):  # one row each: the raw values, as the file holds them
            raw = summary[name]
            report.sections.append(Section(name, name, pd.DataFrame([raw]) if raw else pd.DataFrame()))
    emit(report, fmt=fmt, as_json=as_json, output=output)


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_")


def _print_plain(sections: dict[str, dict[str, str]]) -> None:
    for section, rows in sections.items():
        click.echo(section)
        width = max((len(k) for k in rows), default=0)
        for key, value in rows.items():
            # Long values (a command line, a warning) wrap under themselves: the output fits 100 columns.
            lines = textwrap.wrap(str(value), width=100 - width - 4, break_on_hyphens=False) or [""]
            click.echo(f"  {key:<{width}}  {lines[0]}")
            for line in lines[1:]:
                click.echo(" " * (width + 4) + line)
