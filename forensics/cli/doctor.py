"""`forensics doctor`: what this machine offers for forensics, and how it is set up for low-latency audio."""

from __future__ import annotations

import os
import textwrap

import click

from samplers.capabilities import Check, Roots, build_report

_MARK = {"good": "ok  ", "bad": "BAD ", "warn": "warn", "unknown": "??  ", "info": "    "}


WIDTH = 100  # the terminal output of every command fits 100 columns


@click.command()
@click.option(
    "--json", "as_json", is_flag=True, help="Print the checks as JSON (section checks: name value rating aspect why)."
)
@click.option(
    "--fail-on",
    type=click.Choice(["bad", "warn"]),
    default=None,
    help="Exit 1 when a check is rated BAD (bad), or BAD or warn (warn); 0 otherwise.",
)
@click.option("--no-live", is_flag=True, help="Only read files: skip the taskstats query, the BCC compile and rlimits.")
@click.option(
    "--user",
    metavar="NAME",
    help="Judge the real-time limits of this user (the one who runs the engine) through a session of theirs "
    "(root). Default: SUDO_USER under sudo, else the user running doctor.",
)
@click.option("--proc", "proc_root", default="/proc", show_default=True, hidden=True)
@click.option("--sys", "sys_root", default="/sys", show_default=True, hidden=True)
@click.option("--dev", "dev_root", default="/dev", show_default=True, hidden=True)
def doctor(
    as_json: bool, fail_on: str | None, no_live: bool, user: str | None, proc_root: str, sys_root: str, dev_root: str
) -> None:
    """Check this machine for spike forensics and for low-latency audio.

    One line per item: its value, a rating (ok / warn / BAD / ?? unknown), whether it matters for
    AUDIO (how the machine is tuned: preemption model, threaded IRQs, real-time limits, CPU
    governor, core types, /dev/cpu_dma_latency, swappiness) or for FORENSICS (what a recording can
    see: schedstats, delay accounting, taskstats, tracefs, eBPF/BCC), and one line of why.

    Run it as root to see what `catch-load --ebpf --delayacct --schedstats` will be able to use.
    Nothing is changed on the machine (a BCC probe is compiled and loaded, never attached).
    """
    if user is None and os.geteuid() == 0 and os.environ.get("SUDO_USER", "root") != "root":
        user = os.environ["SUDO_USER"]  # root's own limits say nothing about the audio user's
    checks = build_report(Roots(proc=proc_root, sys=sys_root, dev=dev_root), live=not no_live, user=user)
    if as_json:
        from forensics.render.jsonout import envelope

        click.echo(envelope("doctor", {"checks": [c.to_json() for c in checks]}, main="checks"), nl=False)
        _exit_on(checks, fail_on)
        return
    name_width = max(len(c.name) for c in checks)
    for c in checks:
        # Two lines an item, both within 100 columns: the verdict and value, then why (wrapped).
        head = f"{_MARK.get(c.rating, c.rating):<4}  {c.aspect:<9}  {c.name:<{name_width}}  "
        # The value whole, wrapped under itself (never cut: a kernel command line is evidence).
        value = textwrap.wrap(c.value, width=max(20, WIDTH - len(head)), break_on_hyphens=False) or [""]
        click.echo(head + value[0])
        for line in value[1:]:
            click.echo(" " * len(head) + line)
        for line in textwrap.wrap(c.why, width=WIDTH - 8, break_on_hyphens=False):
            click.echo(" " * 8 + line)
    _exit_on(checks, fail_on)


def _exit_on(checks: list[Check], fail_on: str | None) -> None:
    """--fail-on: exit 1 when a check has the rating asked for (README, "Exit codes")."""
    failing = {"bad": {"bad"}, "warn": {"bad", "warn"}}.get(fail_on or "", set())
    if any(c.rating in failing for c in checks):
        raise click.exceptions.Exit(1)
