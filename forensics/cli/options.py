"""Option types shared by the commands: durations, capture paths."""

from __future__ import annotations

import math
import re
from typing import Any

import click

_UNITS_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "": 1_000_000_000}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*(ns|us|µs|ms|s|)\s*$", re.IGNORECASE)


def parse_duration_ns(text: str) -> int:
    """ "2ms" -> 2_000_000; "500us" -> 500_000; "0.002" (seconds) -> 2_000_000. ValueError otherwise."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a duration (examples: 2ms, 500us, 0.002, 20s)")
    number, unit = match.groups()
    value = float(number) * _UNITS_NS[unit.lower()]
    if not math.isfinite(value):  # "1e999" parses as infinity
        raise ValueError(f"{text!r} is not a finite duration")
    return round(value)


class Duration(click.ParamType):
    """A duration with a unit (ns, us, ms, s) or plain seconds; the value is integer ns."""

    name = "DURATION"

    def __init__(self, max_ns: int | None = None) -> None:
        self.max_ns = max_ns

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            ns = parse_duration_ns(str(value))
        except ValueError as err:
            self.fail(str(err), param, ctx)
        if ns <= 0:
            self.fail(f"{value!r} must be longer than zero", param, ctx)
        if self.max_ns is not None and ns > self.max_ns:
            self.fail(f"{value!r} is longer than the longest allowed here ({_plain(self.max_ns)})", param, ctx)
        return ns


def _plain(ns: int) -> str:
    return f"{ns // 86_400_000_000_000} days" if ns >= 86_400_000_000_000 else f"{ns / 1e9:g} s"


DURATION = Duration(max_ns=366 * 86_400_000_000_000)  # a recording's length: a year is plenty
INTERVAL = Duration(max_ns=60_000_000_000)  # a sampling interval: beyond a minute nothing is sampled

capture_argument = click.argument("capture", type=click.Path(dir_okay=False, path_type=str), metavar="CAPTURE")
