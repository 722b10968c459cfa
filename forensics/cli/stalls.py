"""`forensics stalls CAPTURE` (catch-stall): episodes of the threads to watch, each with its verdict."""

from __future__ import annotations

import click

from analyses.rules import CAUSES, DEFAULT_RULES
from capture.format import load
from forensics.cli.options import DURATION, REGEX, FiniteRange, capture_argument, tid_option
from forensics.cli.report_options import emit, output_options, span_option
from forensics.render import choose_format
from forensics.views.stalls import stalls_report

EXAMPLES = """\b
Examples:
  forensics stalls load.ssf                          incidents, each root with its evidence
  forensics stalls load.ssf --episodes               every episode with its own verdict
  forensics stalls load.ssf --thread jalv --span 2s..4s   one client, two seconds of the capture
  forensics stalls captures/lab-episodes.ssf --truth      the lab's capture, scored against its truth
  forensics stalls load.ssf --json | jq '.'          for scripts (see README, "One output contract")
"""


@click.command(short_help="When the watched threads stalled, and why.", epilog=EXAMPLES)
@capture_argument
@click.option("--thread", "pattern", type=REGEX, help="Watch threads whose name (or process name) matches.")
@tid_option("Watch this thread (repeatable; with --thread: those threads too).")
@click.option("--all", "everything", is_flag=True, help="Watch every thread, not only real-time and periodic ones.")
@span_option
@click.option(
    "--min-stall",
    type=DURATION,
    default=None,
    help="Report episodes whose stall beyond the thread's normal busy time is at least this "
    "(default: half the period of a periodic thread, two sampling intervals otherwise).",
)
@click.option(
    "--busy-fraction",
    type=FiniteRange(0.05, 1.0),
    default=DEFAULT_RULES.busy_fraction,
    show_default=True,
    help="A window is hot when the thread was on CPU or runnable this much of it.",
)
@click.option(
    "--fault-rate",
    type=FiniteRange(1.0),
    default=DEFAULT_RULES.fault_rate_per_ms,
    show_default=True,
    help="Faults per ms on CPU from which a window's CPU time counts as a fault storm.",
)
@click.option("--truth", "with_truth", is_flag=True, help="Also score the verdicts against the lab's ground truth.")
@click.option(
    "--proc-only",
    is_flag=True,
    help="Ignore the exact sources the capture holds (eBPF events, taskstats, delay accounting): verdicts "
    "from the /proc reads alone, to see what the exact sources change.",
)
@click.option(
    "--episodes",
    "flat",
    is_flag=True,
    help="List the stall episodes one by one (each with its own verdict) instead of grouped into incidents.",
)
@click.option(
    "--fail-on",
    "fail_on",
    type=click.Choice(["incident", "episode", *CAUSES]),
    default=None,
    help="Exit 1 when the output holds an incident, an episode, or an episode of this verdict (for "
    "scripts and CI; 0 when it holds none).",
)
@output_options
def stalls(
    capture: str,
    pattern: str | None,
    tids: tuple[int, ...],
    everything: bool,
    span: str | None,
    min_stall: int | None,
    busy_fraction: float,
    fault_rate: float,
    with_truth: bool,
    proc_only: bool,
    flat: bool,
    fail_on: str | None,
    fmt: str | None,
    as_json: bool,
    output: str | None,
) -> None:
    """Find when the watched threads stalled, and why: a long run, or a wait (and for what).

    \b
    Incidents first: the episodes of one late engine cycle (or of consecutive late cycles) are one
    incident. Its root is the first late link (the driver woken late, a client running long, waiting
    for a CPU, a disk, page faults, or a lock outside the graph); clients that only waited for their
    upstream link are listed under it as `upstream <- TID`, never as lock. The chain (who wakes whom)
    comes from the engine's records when the capture has them, else from eBPF wake-ups, else from
    /proc (threads of one period late together: the earliest is the root, said to be inferred).
    `late wake-up`: the first late link was woken late with nothing of the capture running instead;
    the machine's evidence follows (steal, interrupt time, CPU pressure, a gap the sampler saw).
    --episodes lists the episodes one by one, as below; --json gives incidents with their episodes.

    \b
    Watched by default: real-time threads (FIFO/RR/DEADLINE) and periodic ones, found from their
    wake-up pattern (a steady number of switch-ins per 200 ms), so that an audio thread that did not
    get a real-time policy is still watched. --thread REGEX or --all choose others.

    \b
    Each episode's verdict is its largest component:
      run       on CPU: the thread's own work took long
      runqueue  runnable but not running: scheduler delay, another thread on its CPU
      fault     on CPU taking page faults (20+ per ms), or D-state waits while major faults rose
      io        off CPU in state D (uninterruptible) waiting for block IO
      lock      off CPU in state S waiting for another thread (futex, pipe, condition)
      reclaim   memory reclaim/compaction/thrashing delays (only with taskstats)
      unknown   off CPU in another state, D time that was not block IO, or a cause no source decides
    Each episode says which sources decided it (`sources`, the deciding ones first).

    \b
    With eBPF events (catch-load --ebpf) episodes are exact: the switches say when the thread left
    the CPU, in which state, and who woke it. Without, each 2 ms window is split into on-CPU, runnable
    and off-CPU time, and io is told from lock by the state letter read every tick (stat field 3):
    D is an uninterruptible wait (disk), S an interruptible one (futex, pipe, poll). Limits: a wait
    shorter than one interval may never be read, and a lock wait shows only when a periodic thread
    misses a wake-up. What no source in the capture could decide is listed as unknown.
    The rules, their thresholds and their limits: README, "Explaining a spike"; DESIGN.md, "The rules".
    """
    from analyses.rules import StallRules
    from analyses.span import resolve_span
    from analyses.threads import check_tids

    cap = load(capture)
    check_tids(cap, tids, capture)
    if proc_only:
        from analyses.source import proc_only as without_exact_sources

        cap = without_exact_sources(cap)
    t_range = resolve_span(cap, span)
    rules = StallRules(busy_fraction=busy_fraction, fault_rate_per_ms=fault_rate, min_stall_ns=min_stall)
    report = stalls_report(
        cap,
        capture,
        pattern=pattern,
        everything=everything,
        tids=tids,
        rules=rules,
        t_range=t_range,
        with_truth=with_truth,
        incidents=not flat,
        # CSV holds the raw rows the JSON envelope holds (its main section: the incidents).
        for_json=choose_format(fmt, as_json, output) in ("json", "csv"),
    )
    emit(report, fmt=fmt, as_json=as_json, output=output)
    if fail_on is not None and report.found.get(fail_on, 0) > 0:
        raise click.exceptions.Exit(1)
