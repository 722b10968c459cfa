"""Helpers the artefact commands (plot, report, export) share: output paths and the "wrote" line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from capture.errors import ForensicsError
from forensics.safe_output import check_new_output, write_file

F = TypeVar("F", bound=Callable[..., Any])


def force_option(func: F) -> F:
    """--force: replace an output that exists (read back with `forced()`, so commands need no argument)."""

    def remember(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
        ctx.meta["forensics.force"] = value
        return value

    return click.option(
        "--force",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=remember,
        help="Replace the output if it exists (never written through a link: the name itself is replaced).",
    )(func)


def forced() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get("forensics.force"))


def check_output(output: str, *, directory_ok: bool = False) -> None:
    """Before the work: an output that exists needs --force; a directory is not a file."""
    check_new_output(output, forced(), directory_ok=directory_ok)


def suffix_of(output: str, allowed: dict[str, str], what: str) -> str:
    """The format an output file's suffix names (`allowed`: suffix -> format); else a one-line error."""
    name = output.lower()
    for suffix in sorted(allowed, key=len, reverse=True):  # .json.gz before .gz
        if name.endswith(suffix):
            return allowed[suffix]
    wanted = ", ".join(allowed)
    raise ForensicsError(f"{what} cannot be written as {output!r}: name the file {wanted}")


def write_bytes(output: str, data: bytes) -> None:
    """A new file, whole or not at all, never through a link (see forensics/safe_output.py)."""
    write_file(output, data, force=forced())
    wrote(output, len(data))


def wrote(output: str, size: int | None = None) -> None:
    size_text = f" ({size / 1024:.0f} KiB)" if size is not None else ""
    click.echo(f"wrote {output}{size_text}", err=True)
