"""`forensics info CAPTURE`: what a capture holds and how it was taken."""

from __future__ import annotations

import json
import textwrap

import click

from capture.format import load
from forensics.cli.options import capture_argument
from forensics.describe import describe_capture


@click.command()
@capture_argument
@click.option("--json", "as_json", is_flag=True, help="Print metadata, trailer and counts as one JSON object.")
def info(capture: str, as_json: bool) -> None:
    """Print a capture's metadata, achieved timing and row counts.

    Shows the machine (kernel, CPUs, core types), which kernel sources were live, the interval asked
    for and achieved (p50/p99/max), missed ticks, the recorder's own CPU cost, the targets, and how
    many threads, samples and events the file holds. A capture whose recorder was killed says so.
    """
    cap = load(capture)
    summary = describe_capture(cap)
    if as_json:
        click.echo(json.dumps(summary, indent=2, sort_keys=True, default=str))
        return
    for section, rows in summary["sections"].items():
        click.echo(section)
        width = max((len(k) for k in rows), default=0)
        for key, value in rows.items():
            # Long values (a command line, a warning) wrap under themselves: the output fits 100 columns.
            lines = textwrap.wrap(str(value), width=100 - width - 4, break_on_hyphens=False) or [""]
            click.echo(f"  {key:<{width}}  {lines[0]}")
            for line in lines[1:]:
                click.echo(" " * (width + 4) + line)
