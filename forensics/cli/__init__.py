"""The `forensics` command group. Each subcommand lives in its own module; they are registered here.

Failures the user can fix raise ForensicsError anywhere below; they are caught once, in `main`, and
printed as one line on stderr with a non-zero exit. Capture warnings (a truncated file, no trailer)
print as `forensics: warning: ...` lines and do not stop the command.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from importlib import import_module
from typing import Any

import click

from capture.errors import CaptureWarning, ForensicsError
from forensics import __version__
from forensics.text import printable

# name -> "module:function". The one place commands are registered; imported only when run, so that
# `forensics --help` stays fast and one command's heavy imports do not slow the others.
COMMANDS: dict[str, str] = {
    "info": "forensics.cli.info:info",
    "dump": "forensics.cli.dump:dump",
    "lab": "forensics.cli.lab:lab",
    "stalls": "forensics.cli.stalls:stalls",
    "xruns": "forensics.cli.xruns:xruns",
    "spikes": "forensics.cli.spikes:spikes",
    "summarize": "forensics.cli.summarize:summarize",
    "system": "forensics.cli.system:system",
    "jitter": "forensics.cli.jitter:jitter",
    "compare": "forensics.cli.compare:compare",
    "restore": "forensics.cli.restore:restore",
    "doctor": "forensics.cli.doctor:doctor",
    "plot": "forensics.cli.plot:plot",
    "report": "forensics.cli.report:report",
    "export": "forensics.cli.export:export",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            if cmd_name == "catch-load":  # the recorder is a program of its own (pyproject.toml scripts)
                raise click.UsageError("catch-load is its own command: `catch-load --help` (forensics reads captures)")
            return None
        module_name, _, attr = target.partition(":")
        return getattr(import_module(module_name), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="forensics")
def cli() -> None:
    """Spike and stall forensics for Linux audio engines.

    Record with `catch-load`, then read the capture with the commands below: which thread was late,
    when, on which core, and why (a long run, or a wait for a CPU, a disk, page faults or a lock).
    """


def _show_warning(
    message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None, line: str | None = None
) -> None:
    """warnings.showwarning's signature (six arguments; formatwarning takes five, without `file`): a
    library's warning (matplotlib's missing glyph for a thread named 音频, numpy's overflow) is printed
    as Python would, never a TypeError."""
    if issubclass(category, CaptureWarning):
        click.echo(f"forensics: warning: {printable(str(message))}", err=True)
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


class _ReaderGone(Exception):
    """stdout's reader went away (`| head`): raised past click, which would turn it into exit 1."""


def _guarded(invoke: Callable[[click.Context], Any]) -> Callable[[click.Context], Any]:
    if getattr(invoke, "guarded", False):  # run again in one process (a test): wrapped once, not once per run
        return invoke

    def run(ctx: click.Context) -> Any:
        try:
            return invoke(ctx)
        except BrokenPipeError as err:
            raise _ReaderGone from err

    run.guarded = True  # type: ignore[attr-defined]
    return run


def run_cli(command: click.Command, prog: str, args: list[str] | None = None) -> None:
    """Run a click command with the toolkit's exit codes (README, "Exit codes"): 0 done (also when the
    reader of stdout went away), 1 done and found what --fail-on names, 2 a usage or input error (a
    ForensicsError: one line), 130 interrupted."""
    warnings.showwarning = _show_warning
    command.invoke = _guarded(command.invoke)  # type: ignore[method-assign,assignment]
    try:
        code = command.main(args=args, prog_name=prog, standalone_mode=False)
        if isinstance(code, int) and code:  # a click Exit(code) raised by the command (--fail-on)
            sys.exit(code)
    except ForensicsError as err:
        click.echo(f"{prog}: error: {printable(str(err))}", err=True)
        sys.exit(err.exit_code)
    except click.exceptions.Abort:
        click.echo(f"{prog}: interrupted", err=True)
        sys.exit(130)
    except click.UsageError as err:
        # One line, like every other error: what was wrong, and where the help is.
        where = err.ctx.command_path if err.ctx is not None else prog
        click.echo(f"{where}: error: {printable(err.format_message())} (see `{where} --help`)", err=True)
        sys.exit(err.exit_code)
    except click.ClickException as err:
        click.echo(f"{prog}: error: {printable(err.format_message())}", err=True)
        sys.exit(err.exit_code)
    except click.exceptions.Exit as err:
        sys.exit(err.exit_code)
    except (BrokenPipeError, _ReaderGone):
        # `forensics dump x | head`: the reader went away, which is no error. What is still buffered
        # goes to /dev/null, so that the interpreter's last flush does not fail (exit 120) either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)


def main(args: list[str] | None = None) -> None:
    run_cli(cli, "forensics", args)
