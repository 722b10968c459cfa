"""Helpers the artefact commands (plot, report, export) share: output paths and the "wrote" line."""

from __future__ import annotations

from pathlib import Path

import click

from capture.errors import ForensicsError


def suffix_of(output: str, allowed: dict[str, str], what: str) -> str:
    """The format an output file's suffix names (`allowed`: suffix -> format); else a one-line error."""
    name = output.lower()
    for suffix in sorted(allowed, key=len, reverse=True):  # .json.gz before .gz
        if name.endswith(suffix):
            return allowed[suffix]
    wanted = ", ".join(allowed)
    raise ForensicsError(f"{what} cannot be written as {output!r}: name the file {wanted}")


def write_bytes(output: str, data: bytes) -> None:
    try:
        Path(output).write_bytes(data)
    except OSError as err:
        raise ForensicsError(f"cannot write {output}: {err.strerror}") from err
    wrote(output, len(data))


def wrote(output: str, size: int | None = None) -> None:
    size_text = f" ({size / 1024:.0f} KiB)" if size is not None else ""
    click.echo(f"wrote {output}{size_text}", err=True)
