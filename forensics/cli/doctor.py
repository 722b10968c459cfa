"""`forensics doctor`: what this machine offers for forensics, and how it is set up for low-latency audio."""

from __future__ import annotations

import json
import textwrap

import click

from samplers.capabilities import Roots, build_report

_MARK = {"good": "ok  ", "bad": "BAD ", "warn": "warn", "unknown": "??  ", "info": "    "}


WIDTH = 100  # the terminal output of every command fits 100 columns


@click.command()
@click.option(
    "--json", "as_json", is_flag=True, help="Print the checks as a JSON list (name, value, rating, aspect, why)."
)
@click.option("--no-live", is_flag=True, help="Only read files: skip the taskstats query, the BCC compile and rlimits.")
@click.option("--proc", "proc_root", default="/proc", show_default=True, hidden=True)
@click.option("--sys", "sys_root", default="/sys", show_default=True, hidden=True)
@click.option("--dev", "dev_root", default="/dev", show_default=True, hidden=True)
def doctor(as_json: bool, no_live: bool, proc_root: str, sys_root: str, dev_root: str) -> None:
    """Check this machine for spike forensics and for low-latency audio.

    One line per item: its value, a rating (ok / warn / BAD / ?? unknown), whether it matters for
    AUDIO (how the machine is tuned: preemption model, threaded IRQs, real-time limits, CPU
    governor, core types, /dev/cpu_dma_latency, swappiness) or for FORENSICS (what a recording can
    see: schedstats, delay accounting, taskstats, tracefs, eBPF/BCC), and one line of why.

    Run it as root to see what `catch-load --ebpf --delayacct --schedstats` will be able to use.
    Nothing is changed on the machine (a BCC probe is compiled and loaded, never attached).
    """
    checks = build_report(Roots(proc=proc_root, sys=sys_root, dev=dev_root), live=not no_live)
    if as_json:
        click.echo(json.dumps([c.to_json() for c in checks], indent=2))
        return
    name_width = max(len(c.name) for c in checks)
    for c in checks:
        # Two lines an item, both within 100 columns: the verdict and value, then why (wrapped).
        head = f"{_MARK.get(c.rating, c.rating):<4}  {c.aspect:<9}  {c.name:<{name_width}}  "
        click.echo(head + textwrap.shorten(c.value, width=max(20, WIDTH - len(head)), placeholder="..."))
        for line in textwrap.wrap(c.why, width=WIDTH - 8, break_on_hyphens=False):
            click.echo(" " * 8 + line)
