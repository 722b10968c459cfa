"""Option types shared by the commands: durations, capture paths."""

from __future__ import annotations

from typing import Any

import click

from capture.vocabulary import parse_duration_ns


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
