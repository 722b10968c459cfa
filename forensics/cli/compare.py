"""`forensics compare A B`: the same figures for two captures side by side, with the change in %."""

from __future__ import annotations

import click
import pandas as pd

from capture.format import load
from forensics.cli.report_options import emit, output_options
from forensics.render import Report, Section

COLUMNS = {"figure": "figure", "a": "A", "b": "B", "change": "change", "unit": "unit"}


@click.command()
@click.argument("capture_a", type=click.Path(dir_okay=False, path_type=str), metavar="A")
@click.argument("capture_b", type=click.Path(dir_okay=False, path_type=str), metavar="B")
@output_options
def compare(capture_a: str, capture_b: str, fmt: str | None, as_json: bool, output: str | None) -> None:
    """Compare two captures, A then B (before/after a tuning; N clients in series vs one chain).

    \b
    Figures: cycle end p50/p99 and deadline misses (lab cycles), wake-ups per cycle (switch-ins of the
    periodic threads per cycle: N clients in series wake N threads a cycle, a chain one), CPU of the
    recorded threads (% of one core), time waiting for a CPU, minor faults and context switches per
    second, and the stall episodes by verdict. change = (B - A) / A. Run the arms interleaved on the
    same machine state; a shared machine's load lands on both. RSS: the target processes' resident
    memory together, peak and at the end (unknown for captures without memory reads).
    """
    from analyses.compare import compare as run_compare

    a, b = load(capture_a), load(capture_b)
    table = run_compare(a, b)
    table["change"] = [_change_text(row.a, row.b, row.change_pct) for row in table.itertuples(index=False)]
    # One line, as the plot titles it: the table renderer escapes control characters in a title.
    report = Report(title=f"A = {capture_a}   against   B = {capture_b}")
    report.sections.append(Section("figures", "A against B", table, COLUMNS))
    emit(report, fmt=fmt, as_json=as_json, output=output)


def _change_text(a: float, b: float, change: float) -> str:
    if pd.isna(a) or pd.isna(b):
        return "unknown"
    if a == 0:
        return "-" if b == 0 else "new"
    return f"{change:+.1f} %"
