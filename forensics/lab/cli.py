"""The lab's command line: `forensics lab [OPTIONS]` and `python -m forensics.lab [OPTIONS]` are the same command."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from capture.errors import ForensicsError
from forensics.cli.options import DURATION, FiniteRange
from forensics.lab.settings import DEFAULT_EPISODES, LabSettings, make_settings


def _only_thread() -> bool:
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return True


def _exec_clean(argv: list[str]) -> None:
    """Replace this process (same pid) by `python -m forensics.lab ARGV` started with library thread pools off.

    `forensics lab` runs inside the forensics CLI, which has imported numpy and pyarrow by then: OpenBLAS
    has started a thread per CPU and Arrow's jemalloc a purger thread. A capture of the lab would show them
    as idle threads of the engine nobody asked for. A fresh interpreter with QUIET_LIBRARIES has none.
    """
    from forensics.lab.engine_env import lab_env

    env = lab_env()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [sys.executable, "-m", "forensics.lab", *argv], env)
    except OSError:
        return  # cannot exec: run here, with the extra idle threads


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--rate", type=int, metavar="HZ", default=48_000, show_default=True, help="Sample rate, Hz.")
@click.option(
    "--quantum",
    type=int,
    metavar="FRAMES",
    default=256,
    show_default=True,
    help="Frames per callback (256 at 48 kHz: 5.333 ms).",
)
@click.option(
    "--episodes",
    metavar="CAUSE:N,...",
    default=None,
    help=f"Episodes to inject: causes run, runqueue, io, fault, lock with a count each, or 'none' for a clean "
    f"run. [default: {DEFAULT_EPISODES}]",
)
@click.option(
    "--episode-ms",
    type=FiniteRange(),
    metavar="MS",
    default=20.0,
    show_default=True,
    help="Length of each episode.",
)
@click.option(
    "--spacing",
    type=DURATION,
    default="600ms",
    show_default=True,
    help="Time from one episode to the next (plus up to a quarter of it as seeded jitter).",
)
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the schedule, the noise and the filters.")
@click.option(
    "--duration",
    type=DURATION,
    default=None,
    help="End at this time instead of 1 s after the last episode (episodes that do not fit are dropped). "
    "[default: the schedule's end; 10s for --episodes none]",
)
@click.option(
    "--topology",
    metavar="chain|series",
    default="chain",
    show_default=True,
    help="chain: one thread runs all stages; series: one thread (process) per stage, each woken by the last.",
)
@click.option("--stages", type=int, metavar="N", default=4, show_default=True, help="DSP stages (plugins).")
@click.option("--taps", type=int, metavar="N", default=32, show_default=True, help="FIR taps per stage (the DSP load).")
@click.option(
    "--policy",
    metavar="fifo|other",
    default="fifo",
    show_default=True,
    help="fifo: SCHED_FIFO where permitted (else SCHED_OTHER, and it says so); other: SCHED_OTHER.",
)
@click.option("--rtprio", type=int, metavar="1-98", default=70, show_default=True, help="SCHED_FIFO priority.")
@click.option("--cpu", type=int, metavar="CPU", help="Pin the callback thread (and series stages) to this CPU.")
@click.option(
    "--io-mode",
    metavar="read|write|fsync",
    default="read",
    show_default=True,
    help="io episodes: read (O_DIRECT reads of --io-kib), write (O_DIRECT writes) or fsync (4 KiB write + fdatasync).",
)
@click.option(
    "--io-dir",
    metavar="DIR",
    default="/var/tmp",
    show_default=True,
    help="Directory on a disk for the io and major-fault scratch files (deleted at once; not tmpfs).",
)
@click.option(
    "--io-kib",
    type=int,
    metavar="KIB",
    default=256,
    show_default=True,
    help="Size of each O_DIRECT read or write of the io episodes (read and write modes): larger requests "
    "keep the callback waiting in D a larger share of the episode.",
)
@click.option(
    "--fault-kind",
    metavar="minor|major",
    default="minor",
    show_default=True,
    help="fault episodes: minor (fresh anonymous pages) or major (pages of an evicted file, read from disk).",
)
@click.option(
    "--fault-pages",
    type=int,
    metavar="PAGES",
    default=0,
    show_default=True,
    help="Touch at least this many pages per fault episode, even if it takes longer than --episode-ms.",
)
@click.option(
    "--truth",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the ground truth (episodes, every callback, threads and settings) to this JSON file.",
)
@click.option("--quiet", is_flag=True, help="Print nothing but errors.")
def lab_command(
    rate: int,
    quantum: int,
    episodes: str | None,
    episode_ms: float,
    spacing: int,
    seed: int,
    duration: int | None,
    topology: str,
    stages: int,
    taps: int,
    policy: str,
    rtprio: int,
    cpu: int | None,
    io_mode: str,
    io_dir: str,
    io_kib: int,
    fault_kind: str,
    fault_pages: int,
    truth: str | None,
    quiet: bool,
) -> None:
    """Run the lab: an audio-engine-like process that makes real stalls of known cause, on a schedule.

    A callback thread named lab-audio wakes every QUANTUM/RATE seconds on an absolute clock (SCHED_FIFO
    where permitted), filters a buffer of noise through STAGES FIR filters, and logs when each callback
    started and ended. Into chosen callbacks it injects episodes, each lasting --episode-ms:

    \b
      run       the callback burns CPU itself                          (long run)
      runqueue  a higher-priority competitor takes its CPU             (waits runnable)
      io        synchronous O_DIRECT disk reads in the callback        (sleeps in D state)
      fault     it touches fresh pages: a minor-fault storm            (--fault-kind major: from disk)
      lock      it waits for a futex held by a busy SCHED_OTHER worker (priority inversion)

    The schedule is the same for the same --seed. The lab ends by itself 1 s after the last episode.
    With --truth FILE it writes what happened, when, and in which thread (CLOCK_MONOTONIC ns) as JSON:
    read it with forensics.lab.truth.read_truth, or let `catch-load --lab` record the lab and store it in the
    capture, so that every verdict can be checked against the truth.

    \b
    Examples:
      forensics lab                                     # the demo: every cause 3 times, ~11 s
      forensics lab --episodes none --duration 10s      # a clean run: how steady is this machine?
      forensics lab --episodes lock:5 --episode-ms 50 --truth truth.json
      forensics lab --topology series --stages 8 --episodes none --duration 5s
    """
    settings = settings_from_params(click.get_current_context().params)
    from forensics.lab.truth import check_writable, write_truth

    if truth is not None:
        check_writable(truth)
    if not _only_thread():
        _exec_clean(settings.to_argv())

    from forensics.lab.engine import LabEngine, LabError
    from forensics.lab.schedule import build_schedule

    schedule = build_schedule(settings)

    def echo(text: str) -> None:
        if not quiet:
            click.echo(text)

    engine = LabEngine(settings, schedule, echo)
    document = engine.run()
    if truth is not None:
        write_truth(truth, document)
    if engine.origin_ns:  # the callback thread ran: say how it went
        echo(engine.describe_end())
    if truth is not None:
        echo(f"lab: truth written to {truth}")
    error = engine.error
    if error is not None:
        if isinstance(error, ForensicsError):
            raise error
        if isinstance(error, LabError | OSError):
            raise ForensicsError(f"the lab stopped early: {error}") from error
        raise error
    if engine.stop_signal is not None:
        sys.exit(128 + engine.stop_signal)


def settings_from_params(params: dict[str, Any]) -> LabSettings:
    """The settings from the command's parsed parameters (names as click gives them)."""
    names = {"spacing": "spacing_ns", "duration": "duration_ns"}
    return make_settings(**{names.get(k, k): v for k, v in params.items() if k != "settings"})


def settings_from_args(args: list[str]) -> LabSettings:
    """Parse a lab command line without running it (tests, and launchers that check options first)."""
    with lab_command.make_context("lab", list(args)) as ctx:
        return settings_from_params(ctx.params)


def main(args: list[str] | None = None) -> None:
    from forensics.cli import run_cli

    run_cli(lab_command, "lab", args)
