"""catch-load's flight recorder options (`--ring` and its companions) and what they set up (README,
"Flight recorder")."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from capture.errors import ForensicsError
from forensics.cli.options import DURATION
from forensics.describe import fmt_ns
from forensics.flight.run import WatcherProcess, parse_size_bytes, ring_directory

# One segment of the ring: short enough that a window is saved a few seconds after its end, long enough
# that the watcher's per-segment cost stays small.
SEGMENT_NS = 2_000_000_000


def flight_options(command: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option(
            "--ring",
            "ring_ns",
            type=DURATION,
            default=None,
            metavar="DURATION",
            help="Flight recorder: keep only the last DURATION of the recording (e.g. 60s) and save the "
            "time around each trigger as a capture of its own into the directory -o (README, 'Flight recorder').",
        ),
        click.option(
            "--before",
            "before_ns",
            type=DURATION,
            default="5s",
            show_default=True,
            help="--ring: saved before a trigger.",
        ),
        click.option(
            "--after", "after_ns", type=DURATION, default="5s", show_default=True, help="--ring: saved after a trigger."
        ),
        click.option(
            "--trigger",
            "triggers",
            multiple=True,
            metavar="RULE",
            help="--ring: what saves a window (repeatable): xrun, late (an engine cycle past its deadline), "
            "marker, stall[:VERDICT][>DURATION] (e.g. 'stall>4ms'). [default: xrun, late, marker]",
        ),
        click.option(
            "--max-windows",
            type=click.IntRange(min=1),
            default=100,
            show_default=True,
            help="--ring: most windows saved.",
        ),
        click.option(
            "--max-disk",
            "max_disk",
            metavar="SIZE",
            default="2GB",
            show_default=True,
            help="--ring: most bytes the saved windows take (a window that would pass it is skipped, said once).",
        ),
        click.option("--keep-ring", is_flag=True, help="--ring: keep the ring's segments (in -o/.ring) at the end."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def flight_config(out: str | None, force: bool, flight: dict[str, Any]) -> tuple[Path, dict[str, Any]] | None:
    """None without --ring; else the output directory (checked, not made yet: make_flight_directories) and
    the watcher's configuration (without the writer's pid). Every option is checked before anything starts."""
    try:  # checked with or without --ring: a bad value is refused, never ignored
        max_disk = parse_size_bytes(flight["max_disk"])
    except ValueError as err:
        raise ForensicsError(f"--max-disk: {err}") from None
    ring_ns = flight["ring_ns"]
    if ring_ns is None:
        given = [name for name, key in (("--trigger", "triggers"), ("--keep-ring", "keep_ring")) if flight.get(key)]
        if given:
            raise ForensicsError(f"{', '.join(given)} belongs to the flight recorder: add --ring DURATION")
        return None
    # The watcher's modules read captures (pandas): loaded only for a flight recording, so that plain
    # recording keeps the light import path (README, "Recording: `catch-load`").
    from forensics.flight.plan import MAX_WINDOW_SPANS
    from forensics.flight.triggers import DEFAULT_TRIGGERS, parse_trigger
    from forensics.flight.watch import FLUSH_LAG_NS, POLL_S

    before, after = flight["before_ns"], flight["after_ns"]
    try:
        rules = [parse_trigger(t) for t in (flight["triggers"] or DEFAULT_TRIGGERS)]
    except ValueError as err:
        raise ForensicsError(str(err)) from None
    # The ring must hold a window's whole span until the watcher saves it: the longest merged window, the
    # writer's lag, a segment still open and one being read.
    least = MAX_WINDOW_SPANS * (before + after) + FLUSH_LAG_NS + 2 * SEGMENT_NS + int(2 * POLL_S * 1e9)
    if ring_ns < least:
        raise ForensicsError(
            f"--ring {fmt_ns(ring_ns)} is too short for --before {fmt_ns(before)} --after {fmt_ns(after)}: "
            f"give at least {fmt_ns(least)} (the longest merged window, {MAX_WINDOW_SPANS} x (before + after), "
            "plus the writer's lag and two segments)"
        )
    directory = Path(out or f"flight-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}")
    _check_directory(directory, force)
    config = {
        "ring": str(ring_directory(directory)),
        "out": str(directory),
        "before_ns": before,
        "after_ns": after,
        "triggers": [r.text for r in rules],
        "max_windows": flight["max_windows"],
        "max_disk_bytes": max_disk,
        "keep_ring": flight["keep_ring"],
        "segment_ns": SEGMENT_NS,
        "keep_ns": ring_ns,
    }
    return directory, config


def _check_directory(directory: Path, force: bool) -> None:
    """-o is a directory with --ring: a new one, or an empty one (or one with windows, with --force).
    Checked with the other options; made by make_flight_directories once every option is checked."""
    if not os.path.lexists(directory):
        return
    if directory.is_symlink() or not directory.is_dir():
        raise ForensicsError(f"-o {directory}: with --ring, -o names a directory for the windows, not a file")
    if any(directory.iterdir()) and not force:
        raise ForensicsError(f"{directory} holds files already: give a new directory, or --force to add to it")
    if os.path.lexists(ring_directory(directory)):
        ring = ring_directory(directory)
        raise ForensicsError(f"{ring} exists already (an earlier ring?): remove it, or give another -o")


def make_flight_directories(directory: Path, config: dict[str, Any], force: bool) -> None:
    """The windows' directory and the ring in it (flight_config's), once the whole command line is checked:
    a refused command leaves no directory behind."""
    _prepare_directory(directory, force)
    ring = Path(config["ring"])
    try:
        ring.mkdir(mode=0o755)
    except FileExistsError:
        raise ForensicsError(f"{ring} exists already (an earlier ring?): remove it, or give another -o") from None


def _prepare_directory(directory: Path, force: bool) -> None:
    try:
        directory.mkdir(mode=0o755)
        return
    except FileExistsError:
        pass
    except OSError as err:
        raise ForensicsError(f"cannot create the directory {directory}: {err.strerror}") from None
    _check_directory(directory, force)  # again: it may have changed since
    from forensics.flight.watch import FLIGHT_FILE

    stale = [directory / FLIGHT_FILE, *directory.glob("window-*.ssf")]
    for path in stale if force else []:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def start_watcher(config: dict[str, Any], env: dict[str, str]) -> WatcherProcess:
    return WatcherProcess(config, env)


def status_text(status: dict[str, Any]) -> str:
    """The status line's flight figures: windows saved, xruns, missed deadlines (this minute's xruns)."""
    text = f"windows {status.get('windows', 0)}"
    if status.get("skipped"):
        text += f" (+{status['skipped']} skipped)"
    text += f"  xruns {status.get('xruns', 0)} ({status.get('xruns_this_minute', 0)} this min)"
    text += f"  late {status.get('late', 0)}"
    if status.get("stalls"):
        text += f"  stalls {status['stalls']}"
    return text


def summary_lines(directory: Path, status: dict[str, Any], duration_ns: int) -> list[str]:
    cpu = status.get("cpu_ns")
    if status.get("done") is False:
        return [f"catch-load: flight recorder: {status.get('windows', 0)} windows saved in {directory} so far"]
    lines = [
        f"catch-load: flight recorder: {status.get('windows', 0)} windows saved in {directory}"
        + (f", {status['skipped']} skipped" if status.get("skipped") else "")
        + f"; xruns {status.get('xruns', 0)}, missed deadlines {status.get('late', 0)}"
        + (f", stalls {status['stalls']}" if status.get("stalls") else ""),
    ]
    if cpu is not None:
        lines.append(f"  watcher CPU {100.0 * cpu / max(1, duration_ns):.1f} % of a core")
    flight = status.get("flight")
    windows = sorted(directory.glob("window-*.ssf"))
    hint = [f"forensics xruns {windows[0]}"] if windows else []
    if flight:
        hint.append(f"forensics xruns {flight}")
    if hint:
        lines.append("next: " + "   |   ".join(hint))
    return lines
