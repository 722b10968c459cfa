"""Option types shared by the commands: durations, regular expressions, finite numbers, capture paths, --tid."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, TypeVar

import click

from capture.vocabulary import parse_duration_ns

F = TypeVar("F", bound=Callable[..., Any])


class Duration(click.ParamType):
    """A duration with its unit (ns, us, ms, s); a bare number is refused. The value is integer ns."""

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


class Regex(click.ParamType):
    """A Python regular expression, checked where it is given (`--thread '('` is a one-line error, not
    re.error from deep in a view). The value stays the text: each command compiles it as it needs."""

    name = "REGEX"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            re.compile(str(value))
        except re.error as err:
            self.fail(f"{value!r} is not a regular expression: {err}", param, ctx)
        return str(value)


class FiniteRange(click.FloatRange):
    """click's FloatRange without nan and the infinities, which it lets through (every comparison with
    nan is false, and inf is above any minimum): `--fault-rate inf` or `--episode-ms nan` is a one-line
    error, not a numpy warning or a ValueError deep inside."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


REGEX = Regex()

capture_argument = click.argument("capture", type=click.Path(dir_okay=False, path_type=str), metavar="CAPTURE")


def tid_option(help_text: str) -> Callable[[F], F]:
    """`--tid N` (repeatable, the `tids` tuple) as every analysis command takes it; `help_text` says what it
    selects there. A tid is a positive integer (`--tid 0` is refused with the other options, before the capture
    is read); the command checks the tids with analyses.threads.check_tids once the capture is read."""
    return click.option("--tid", "tids", type=click.IntRange(min=1), multiple=True, metavar="N", help=help_text)
