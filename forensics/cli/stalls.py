"""`forensics stalls CAPTURE` (catch-stall): episodes of the threads to watch, each with its verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click
import pandas as pd

from forensics.capture import Capture, load
from forensics.cli.options import DURATION, capture_argument
from forensics.cli.report_options import emit, output_options, span_option
from forensics.render import Report, Section, choose_format

if TYPE_CHECKING:
    from analyses.stalls import StallRules

EPISODE_COLUMNS = {
    "start_ns": "at",
    "tid": "tid",
    "comm": "thread",
    "duration_ns": "span",
    "verdict": "verdict",
    "stall_ns": "stalled",
    "components": "components",
}
THREAD_COLUMNS = {
    "tid": "tid",
    "comm": "thread",
    "process": "process",
    "policy": "policy",
    "period_ns": "period",
    "why": "why",
}


@click.command()
@capture_argument
@click.option("--thread", "pattern", metavar="REGEX", help="Watch threads whose name (or process name) matches.")
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
    type=click.FloatRange(0.05, 1.0),
    default=0.5,
    show_default=True,
    help="A window is hot when the thread was on CPU or runnable this much of it.",
)
@click.option(
    "--fault-rate",
    type=click.FloatRange(1.0),
    default=20.0,
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
@output_options
def stalls(
    capture: str,
    pattern: str | None,
    everything: bool,
    span: str | None,
    min_stall: int | None,
    busy_fraction: float,
    fault_rate: float,
    with_truth: bool,
    proc_only: bool,
    flat: bool,
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
    With eBPF events in the capture (catch-load --ebpf), episodes are exact: the thread's switches
    give when it left the CPU, in which state (S, D, or preempted), when it was woken and by whom.
    An episode runs from its first to its last significant segment (a run of half a period or more,
    or any wait of 0.1 ms or more); lock = an S sleep of a periodic thread ended by a task other than
    its usual waker (its timer, its engine), or by that waker after more than 1.25 periods; its
    waker is named, and a lower-priority waker of a real-time thread is called a priority inversion;
    runqueue names who ran instead; fault storms come from the page-fault events. With delay
    accounting (--delayacct --taskstats), io is the D time the kernel accounted as block IO, and the
    rest of the D time is unknown (a kernel lock, a journal commit, NFS, FUSE). Where the switch record
    has a hole (the kernel emitted no switch), the /proc rules below decide.

    \b
    Without eBPF, each 2 ms window of a watched thread is split into on-CPU, runnable and off-CPU time
    (schedstat; time the kernel accounts late is moved back to where it was lived), and adjacent
    anomalous windows make an episode. io is told from lock by the state letter read every tick
    (stat field 3): D is an uninterruptible wait (disk), S an interruptible one (futex, pipe, poll).
    Limits: the letter is a snapshot, so a wait shorter than one sampling interval may never be seen;
    a thread in S looks the same as one asleep between callbacks, so a lock wait shows only when it
    makes a periodic thread miss a wake-up (always when it lasts a period plus two intervals, 9.3 ms at
    5.333 ms / 2 ms; never below one period); kernel mutexes and NFS or FUSE waits also show D. A
    thread doing back-to-back IO may be read on CPU every time: a window in which it blocked and was
    woken twice or more, with no D or S read, is io when the machine's IO pressure (/proc/pressure/io)
    grew by at least its off-CPU time (machine-wide: corroboration, said in the evidence). With
    taskstats block-IO delay (delay accounting), io rests on that delay instead. What no source in the
    capture could decide is listed as unknown.
    """
    from analyses.span import resolve_span
    from analyses.stalls import StallRules

    cap = load(capture)
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
        rules=rules,
        t_range=t_range,
        with_truth=with_truth,
        incidents=not flat,
        for_json=choose_format(fmt, as_json, output) == "json",
    )
    emit(report, fmt=fmt, as_json=as_json, output=output)


def stalls_report(
    cap: Capture,
    name: str,
    *,
    pattern: str | None = None,
    everything: bool = False,
    rules: StallRules | None = None,
    t_range: tuple[int | None, int | None] | None = None,
    with_truth: bool = False,
    profiles: pd.DataFrame | None = None,
    incidents: bool = False,
    for_json: bool = False,
) -> Report:
    """The report `forensics stalls` prints (watched threads, episodes with evidence, or with `incidents`
    the incidents with their episodes under each); `forensics report` embeds the same sections."""
    from analyses.source import capture_interval_ns, capture_origin_ns
    from analyses.stalls import find_stalls
    from analyses.threads import policy_label, select_threads, thread_profiles

    profiles = thread_profiles(cap, t_range=t_range) if profiles is None else profiles
    episodes = find_stalls(cap, pattern=pattern, everything=everything, rules=rules, t_range=t_range, profiles=profiles)
    watched = select_threads(profiles, pattern=pattern, everything=everything).copy()
    watched["policy"] = [
        policy_label(p, r, n)
        for p, r, n in zip(
            watched["policy"].tolist(), watched["rtprio"].tolist(), watched["nice"].tolist(), strict=True
        )
    ]
    interval = capture_interval_ns(cap)
    report = Report(
        title=f"Stalls in {name} (sampled every {interval / 1e6:g} ms)",
        origin_ns=capture_origin_ns(cap),
        json_root="stalls",
    )
    report.sections.append(
        Section(
            "threads",
            "Watched threads",
            watched,
            THREAD_COLUMNS,
            empty="(no real-time or periodic thread: try --thread REGEX or --all)",
        )
    )
    exact = int((episodes["basis"] == "ebpf").sum()) if len(episodes) else 0
    how = (
        f"{exact} of {len(episodes)} episodes have exact edges from eBPF switch events; the others come from "
        "the 2 ms /proc windows."
        if exact
        else ""
    )
    if incidents:
        from forensics.views.incidents import add_incident_sections

        add_incident_sections(
            report,
            cap,
            episodes,
            watched,
            interval_ns=interval,
            for_json=for_json,
            quiet_outside=pattern is None and not everything,
        )
    else:
        report.sections.append(
            Section(
                "stalls", "Stall episodes (evidence under each)", episodes, EPISODE_COLUMNS, detail="evidence", note=how
            )
        )
    undecided = episodes.attrs.get("undecided") or []
    if undecided:
        report.notes.append("Unknown for lack of a source in this capture: " + "; ".join(undecided) + ".")
    if with_truth:
        _add_truth(report, cap, episodes, interval)
    return report


def _add_truth(report: Report, cap: object, episodes: object, interval: int) -> None:
    from analyses.truth import confusion

    truth = cap.truth  # type: ignore[attr-defined]
    if truth.empty:
        report.notes.append("--truth: this capture holds no ground truth (record the lab: catch-load --lab).")
        return
    matrix, scores = confusion(episodes, truth, cycles=cap.cycles, tolerance_ns=interval)  # type: ignore
    report.sections.append(Section("truth_matrix", "Ground truth (rows) against verdicts (columns), >= 5 ms", matrix))
    report.sections.append(Section("truth_scores", "Recall and precision per cause", scores))
