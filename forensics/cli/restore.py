"""`forensics restore`: put back kernel settings a killed recording left changed."""

from __future__ import annotations

import click

from samplers.sysctl_guard import default_state_dir, restore_leftovers


@click.command()
@click.option("--force", is_flag=True, help="Restore even the settings of a recording that is still running.")
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=str),
    default=None,
    help="Where recorders keep their state files (default: /run/spike-stall-forensics for root).",
)
@click.option("--proc", "proc_root", default="/proc", show_default=True, hidden=True)
def restore(force: bool, state_dir: str | None, proc_root: str) -> None:
    """Restore kernel.task_delayacct / kernel.sched_schedstats after a recording that did not finish.

    `catch-load --delayacct` or `--schedstats` turns these switches on for the recording and puts the
    old values back when it ends, on Ctrl-C and on SIGTERM. A recorder killed with SIGKILL (or a
    crash) cannot: it leaves a small state file instead, and this command reads it and writes the old
    values back. A switch someone changed during the recording is left as it is. Safe to run at any
    time: it says plainly what it restored, or that nothing was pending.
    """
    directory = state_dir if state_dir is not None else str(default_state_dir())
    for line in restore_leftovers(proc=proc_root, state_dir=directory, force=force):
        click.echo(line)
