"""Formatting one value for people, by the name of its column (units live in column names)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from forensics.describe import fmt_ns
from forensics.text import printable

TIME_COLUMNS = frozenset({"start_ns", "end_ns", "t_ns", "bin_start_ns", "first_ns", "last_ns"})


def is_missing(value: Any) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    if isinstance(value, float | np.floating):
        return math.isnan(value)
    return False


def fmt_number(value: float) -> str:
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value)}"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _short_ns(ns: float) -> str:
    """Compact duration for dense cells: 18.6ms, 455us, 120ns."""
    ns = float(ns)
    if abs(ns) >= 1e6:
        return f"{ns / 1e6:.1f}ms"
    if abs(ns) >= 1e3:
        return f"{ns / 1e3:.0f}us"
    return f"{ns:.0f}ns"


# One unit per column (README, "Explaining a spike"): a column of durations reads in the unit of its
# largest value, so 456 us and 19.9 ms in one column print as 0.456 ms and 19.900 ms.
UNITS = ((1e9, "s", 3), (1e6, "ms", 3), (1e3, "us", 1), (1.0, "ns", 0))


def column_units(frame: pd.DataFrame, names: list[str]) -> dict[str, tuple[float, str, int]]:
    """Per duration column (`*_ns` that is not a time, and `components`): (divisor, unit, decimals)."""
    out: dict[str, tuple[float, str, int]] = {}
    for name in names:
        if name in TIME_COLUMNS or not (name.endswith("_ns") or name == "components"):
            continue
        largest = 0.0
        for value in frame[name].tolist():
            values = value.values() if isinstance(value, Mapping) else [value]
            for v in values:
                if isinstance(v, int | float | np.integer | np.floating) and not is_missing(v):
                    largest = max(largest, abs(float(v)))
        out[name] = next((u for u in UNITS if largest >= u[0]), UNITS[-1])
    return out


def _in_unit(ns: float, unit: tuple[float, str, int], sep: str = " ") -> str:
    divisor, name, decimals = unit
    return f"{float(ns) / divisor:.{decimals}f}{sep}{name}"


def fmt_cell(column: str, value: Any, origin_ns: int | None, unit: tuple[float, str, int] | None = None) -> str:
    """Text for one cell, printable (printable()): durations (in `unit`, the column's, when given), offsets,
    percentages, dicts; `unknown` where the value is missing."""
    return printable(_fmt_cell(column, value, origin_ns, unit))


def _fmt_cell(column: str, value: Any, origin_ns: int | None, unit: tuple[float, str, int] | None) -> str:
    if isinstance(value, Mapping):
        shown = {k: v for k, v in value.items() if not is_missing(v) and not (isinstance(v, int | float) and v == 0)}
        if column == "components" or column.endswith("_ns"):
            if unit is not None:
                dense = (unit[0], unit[1], min(unit[2], 2))  # several values in one cell: two decimals
                return " ".join(f"{k}={_in_unit(v, dense, '')}" for k, v in shown.items()) or "-"
            return " ".join(f"{k}={_short_ns(v)}" for k, v in shown.items()) or "-"
        return " ".join(f"{k}={v}" for k, v in shown.items()) or "-"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    if is_missing(value):
        return "unknown"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if column in TIME_COLUMNS and origin_ns is not None and isinstance(value, int | np.integer | float):
        return f"{(int(value) - origin_ns) / 1e9:.3f} s"
    if column.endswith("_ns") and isinstance(value, int | np.integer | float | np.floating):
        return fmt_ns(value) if unit is None else _in_unit(float(value), unit)
    if column.endswith("_pct") and isinstance(value, int | np.integer | float | np.floating):
        return f"{float(value):.1f} %"
    if isinstance(value, float | np.floating):
        return fmt_number(float(value))
    return str(value)
