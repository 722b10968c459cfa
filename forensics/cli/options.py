"""Option types shared by the commands: durations, capture paths."""

from __future__ import annotations

from typing import Any

import click

from capture.vocabulary import parse_duration_ns


class Duration(click.ParamType):
    """A duration with a unit (ns, us, ms, s) or plain seconds; the value is integer ns."""

    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            ns = parse_duration_ns(str(value))
        except ValueError as err:
            self.fail(str(err), param, ctx)
        if ns <= 0:
            self.fail(f"{value!r} must be longer than zero", param, ctx)
        return ns


DURATION = Duration()

capture_argument = click.argument("capture", type=click.Path(dir_okay=False, path_type=str), metavar="CAPTURE")
