"""`forensics report CAPTURE -o FILE.html|FILE.md`: everything a bug report needs, in one file."""

from __future__ import annotations

import dataclasses
from typing import Any

import click
import pandas as pd

from forensics.capture import Capture, load
from forensics.cli.artefacts import check_output, force_option, suffix_of, write_bytes
from forensics.cli.options import capture_argument
from forensics.cli.report_options import span_option
from forensics.progress import Progress
from forensics.render import SUFFIXES, Report, Section, render

KV = {"item": "", "value": ""}
UNKNOWN = {"what": "not known", "why": "why", "so": "what it means here"}
STEPS = 8


@click.command()
@capture_argument
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="The report to write: FILE.html (one self-contained page) or FILE.md.")  # fmt: skip
@force_option
@span_option
@click.option("--top", type=click.IntRange(1, 12), default=4, show_default=True, help="Threads in the timeline.")
@click.option("--spikes", "spike_limit", type=click.IntRange(1), default=10, show_default=True,
              help="Worst spikes listed.")  # fmt: skip
def report(capture: str, output: str, span: str | None, top: int, spike_limit: int) -> None:
    """Write one file a bug report can carry: what the capture shows, and what it cannot.

    \b
    Contents: the machine and its capabilities (kernel, CPUs, core types, which kernel sources were
    live); how the capture was taken (interval asked and achieved p50/p99/max, missed ticks, the
    recorder's own CPU); the timeline picture; the stall verdicts with their evidence; the five views
    of `forensics summarize`; the worst CPU spikes and who burned the CPU in them; wake-up jitter;
    the benchmark figures of `forensics system`; and what could not be known from this capture
    (missing sources and the verdicts they leave unknown, a missing trailer, no lab cycles).

    \b
    FILE.html is one page with the pictures inside (base64 PNG): no script, no network, readable
    offline in any browser. FILE.md is the same as Markdown (pictures as data: URIs).
      forensics report load.ssf -o load-report.html
      forensics report load.ssf -o load-report.md --span load..loaded
    """
    fmt = suffix_of(output, {s: f for s, f in SUFFIXES.items() if f in ("html", "markdown")}, "a report")
    check_output(output)
    with Progress("forensics report", STEPS) as progress:
        progress.step("reading the capture")
        cap = load(capture)
        built = build_report(cap, capture, span=span, top=top, spike_limit=spike_limit, progress=progress)
        progress.step("rendering")
        text = render(built, fmt)
    write_bytes(output, text.encode())


def _part(section: Section, level: int = 3, title: str | None = None) -> Section:
    return dataclasses.replace(section, level=level, title=(title or section.title).strip())


def _kv(rows: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame({"item": list(rows), "value": [str(v) for v in rows.values()]})


def build_report(
    cap: Capture,
    name: str,
    *,
    span: str | None = None,
    top: int = 4,
    spike_limit: int = 10,
    progress: Progress | None = None,
) -> Report:
    """The report's sections, from the same builders the analysis commands print (stalls, summarize,
    spikes, jitter, system) and the plots; nothing here decides a verdict."""
    from analyses.jitter import jitter
    from analyses.source import capture_origin_ns
    from analyses.span import resolve_span
    from analyses.system import system_figures
    from analyses.threads import thread_profiles
    from forensics import __version__
    from forensics.cli.jitter import STATS as JITTER_COLUMNS
    from forensics.cli.spikes import spikes_report
    from forensics.cli.stalls import stalls_report
    from forensics.cli.summarize import summary_report
    from forensics.cli.system import COLUMNS as SYSTEM_COLUMNS
    from forensics.describe import describe_capture
    from forensics.plots import figure_bytes

    def step(what: str) -> None:
        if progress is not None:
            progress.step(what)

    t_range = resolve_span(cap, span)
    where = f" ({span})" if span else ""
    described = describe_capture(cap)["sections"]
    out = Report(title=f"Spike and stall report: {name}{where}", origin_ns=capture_origin_ns(cap))
    out.sections.append(
        Section(
            "about",
            "How to read this report",
            None,  # type: ignore[arg-type]
            empty="",
            text=(
                f"Made by spike-stall-forensics {__version__} from the capture {name}{where}. Times are seconds "
                "since the capture's first sample. Each thread was read every sampling interval; a window is the "
                "time between two reads. A stall episode is a run of windows in which a watched thread (real-time "
                "or periodic) was kept from its work; its verdict names the largest cause: run (on CPU), "
                "runqueue (waiting for a CPU), io (blocked in D), fault (page faults), lock (asleep, missing its "
                "wake-up), reclaim, or unknown. The last section says what this capture could not tell."
            ),
        )
    )
    out.sections.append(Section("machine", "The machine", _kv(described["Machine"]), KV))
    out.sections.append(Section("sources", "Kernel sources live while recording", _kv(described["Sources"]), KV))
    timing = dict(described["Timing"])
    out.sections.append(Section("timing", "How the capture was taken", _kv(timing), KV))
    out.sections.append(_part(Section("targets", "Targets", _kv(described["Targets"]), KV)))
    out.sections.append(_part(Section("contents", "Contents (rows)", _kv(described["Contents (rows)"]), KV)))

    step("finding stalls")
    profiles = thread_profiles(cap, t_range=t_range)
    stalls = stalls_report(cap, name, t_range=t_range, profiles=profiles)
    episodes = stalls.section("stalls").frame

    step("drawing the timeline")
    from forensics.errors import ForensicsError

    try:
        from forensics.plots.data import timeline_data
        from forensics.plots.timeline import draw_timeline

        data = timeline_data(cap, name + where, top=top, t_range=t_range, profiles=profiles, stalls=episodes)
        image: bytes | None = figure_bytes(draw_timeline(data))
        alt = (
            f"Timeline of {', '.join(data.threads['comm'].astype(str))}: per window, on CPU (blue), waiting for a "
            f"CPU (orange), blocked in D (red); {len(data.stalls)} stall episodes shaded and labelled by verdict"
            + (f"; {data.deadline_label}" if data.deadline_label else "")
            + (f"; {len(data.markers)} markers" if len(data.markers) else "")
            + "."
        )
    except ForensicsError as err:
        image, alt = None, str(err)
    out.sections.append(
        Section(
            "timeline_plot",
            "Timeline",
            None,  # type: ignore[arg-type]
            empty="" if image else f"(no picture: {alt})",
            image=image,
            image_alt=alt,
        )
    )
    out.sections.append(_part(stalls.section("stalls"), 2, "Verdicts: stall episodes (evidence under each)"))
    out.sections.append(_part(stalls.section("threads"), 3, "Watched threads"))

    step("summarising (the five views)")
    summary = summary_report(cap, name + where, t_range=t_range)
    if summary.sections:
        out.sections.append(Section("views", "The five views", None, empty="", text=(  # type: ignore[arg-type]
            "The views of `forensics summarize`: (1) when the busiest threads ran, (2) run against wait per "
            "thread, (3) where the watched threads ran, (4) page faults over time, (5) the worst episodes."
        )))  # fmt: skip
        for section in summary.sections:
            out.sections.append(_part(section))
    else:
        out.sections.append(Section("views", "The five views", None, empty="; ".join(summary.notes)))  # type: ignore[arg-type]

    step("finding spikes")
    spikes = spikes_report(cap, name, t_range=t_range, limit=spike_limit, top=3)
    out.sections.append(
        _part(spikes.section("spikes"), 2, f"Worst CPU spikes (up to {spike_limit}, by how far they stand out)")
    )
    out.sections.append(_part(spikes.section("burners"), 3, "Evidence: who burned the CPU in each spike"))

    step("wake-up jitter")
    stats, hist = jitter(cap, t_range=t_range)
    jitter_image = None
    if len(stats) and len(hist):
        from forensics.plots.data import JitterData
        from forensics.plots.jitter import draw_jitter

        jitter_image = figure_bytes(draw_jitter(JitterData(f"{name}: intervals between wake-ups", stats, hist, 0)))
    out.sections.append(
        Section(
            "jitter",
            "Wake-up jitter of the periodic threads",
            stats,
            JITTER_COLUMNS,
            detail="flag",
            empty="(no periodic thread)",
            image=jitter_image,
            image_alt="Histogram of intervals between wake-ups; bins at 2x, 3x, 4x the period (lost wake-ups) in red.",
        )
    )
    step("benchmark figures")
    figures = system_figures(cap, t_range=t_range, profiles=profiles)
    out.sections.append(Section("system", "Benchmark figures (as `forensics system`)", figures, SYSTEM_COLUMNS))
    out.sections.append(
        Section(
            "unknown",
            "What could not be known",
            unknowns(cap, figures, stalls.notes, has_truth=not cap.truth.empty),
            UNKNOWN,
            empty="(nothing: every source was live and the recording finished cleanly)",
        )
    )
    return out


def unknowns(cap: Capture, figures: pd.DataFrame, stall_notes: list[str], *, has_truth: bool) -> pd.DataFrame:
    """One row per thing this capture cannot tell, why, and what that means for the verdicts."""
    sources = cap.meta.get("sources") or {}
    rows: list[tuple[str, str, str]] = []
    if cap.trailer is None:
        rows.append((
            "achieved interval, missed ticks, recorder CPU",
            "the capture has no trailer: the recorder did not finish (killed?)",
            "the timing of the sampling itself is unknown; what was written reads back and is analysed",
        ))  # fmt: skip
    for warning in cap.warnings:
        if "trailer" not in warning:
            rows.append(("part of the capture", warning, "only what reads back is analysed"))
    if not sources.get("schedstats_enabled"):
        why = (
            "the kernel has no CONFIG_SCHEDSTATS"
            if sources.get("schedstats_compiled") is False
            else "kernel.sched_schedstats was off (or unknown)"
        )
        rows.append((
            "per-thread wait, sleep, block and iowait sums (sched file)",
            why,
            "none for io and lock: eBPF's switch states decide them"
            if sources.get("ebpf")
            else "io is told from lock by the state letter read each tick (D or S): waits shorter than one "
            "interval may be missed",
        ))  # fmt: skip
    if not sources.get("delayacct"):
        rows.append((
            "block-IO delay per thread (delay accounting, stat field 42)",
            "kernel.task_delayacct was off" if sources.get("delayacct_compiled") else "delay accounting unavailable",
            "io rests on the D state (eBPF switch states), not on the kernel's own block-IO wait time: other "
            "uninterruptible waits read as io"
            if sources.get("ebpf")
            else "io verdicts rest on the state letter (and machine-wide IO pressure), not on the kernel's "
            "own per-thread IO-wait time",
        ))  # fmt: skip
    if not sources.get("taskstats"):
        rows.append((
            "reclaim, compaction and thrashing delays (taskstats)",
            "taskstats were not read",
            "the reclaim verdict cannot be given: such time shows as run, fault or io",
        ))  # fmt: skip
    if not sources.get("ebpf"):
        rows.append((
            "exact switch states and who woke whom (eBPF)",
            "eBPF was not used",
            "lock waits shorter than the period are not seen; a lock's holder is a suspicion, not proof",
        ))  # fmt: skip
    if not sources.get("psi"):
        rows.append(("system pressure (PSI)", "/proc/pressure was not read", "no machine-wide stall context"))
    for row in figures.itertuples(index=False):
        if isinstance(row.source, str) and row.source.startswith("unknown"):
            rows.append(
                (str(row.figure), row.source.removeprefix("unknown: ").removeprefix("unknown"), "shown unknown")
            )
    for note in stall_notes:
        rows.append(("verdicts", note, "listed causes are never reported as a silent zero"))
    if not has_truth:
        rows.append((
            "whether the verdicts are right",
            "no ground truth: not a lab capture",
            "verdicts rest on the rules in `forensics stalls --help` (scored on the lab in the README)",
        ))  # fmt: skip
    return pd.DataFrame(rows, columns=["what", "why", "so"])
