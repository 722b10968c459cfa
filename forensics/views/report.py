"""The report view: every section a bug report needs, built from the same views the analysis commands
print (stalls, summary, spikes, jitter, system) and the plots; renderers (forensics.render) format it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd

from capture.format import Capture
from forensics.progress import Progress
from forensics.render import Report, Section

KV = {"item": "", "value": ""}
UNKNOWN = {"what": "not known", "why": "why", "so": "what it means here"}
STEPS = 8


def _part(section: Section, level: int = 3, title: str | None = None) -> Section:
    return dataclasses.replace(section, level=level, title=(title or section.title).strip())


def _kv(rows: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame({"item": list(rows), "value": [str(v) for v in rows.values()]})


def build_report(
    cap: Capture,
    name: str,
    *,
    span: str | None = None,
    tids: tuple[int, ...] = (),
    top: int = 4,
    spike_limit: int = 10,
    progress: Progress | None = None,
) -> Report:
    """The report's sections, from the same builders the analysis commands print (stalls, summarize,
    spikes, jitter, system) and the plots; nothing here decides a verdict. `tids`: the threads watched
    instead of the real-time and periodic ones, as each of those commands takes them."""
    from analyses.engine import engine_overview
    from analyses.jitter import engine_jitter, jitter
    from analyses.source import capture_origin_ns
    from analyses.span import resolve_span
    from analyses.system import system_figures
    from analyses.threads import thread_profiles
    from forensics import __version__
    from forensics.describe import describe_capture
    from forensics.plots import figure_bytes
    from forensics.views.jitter import STATS as JITTER_COLUMNS
    from forensics.views.spikes import spikes_report
    from forensics.views.stalls import stalls_report
    from forensics.views.summary import summary_report
    from forensics.views.system import COLUMNS as SYSTEM_COLUMNS

    def step(what: str) -> None:
        if progress is not None:
            progress.step(what)

    t_range = resolve_span(cap, span)
    where = f" ({span})" if span else ""
    described = describe_capture(cap)["sections"]
    out = Report(title=f"Spike and stall report: {name}{where}", origin_ns=capture_origin_ns(cap))
    step("finding stalls")
    profiles = thread_profiles(cap, t_range=t_range)
    stalls = stalls_report(cap, name, t_range=t_range, profiles=profiles, tids=tids)
    episodes = stalls.section("stalls").frame

    # Incidents first (as `forensics stalls` prints them, numbered alike): the episodes of one late cycle
    # under its root; then every episode with its own verdict.
    from analyses.source import capture_interval_ns
    from analyses.stalls import find_stalls
    from analyses.threads import select_threads
    from forensics.views.incidents import add_incident_sections

    grouped = Report(title="")
    whole = episodes if t_range is None else find_stalls(cap, profiles=profiles, tids=tids)
    listed = add_incident_sections(
        grouped, cap, whole, select_threads(profiles, tids=tids), interval_ns=capture_interval_ns(cap), t_range=t_range
    )
    incidents = _part(grouped.section("incidents"), 2, "The answer: incidents, each root with its evidence")
    incidents.note = " ".join([incidents.note, *grouped.notes]).strip()
    if incidents.columns is not None:  # the renderers number the rows "#" already
        incidents.columns = {k: ("incident" if k == "label" else v) for k, v in incidents.columns.items()}
    out.sections.append(incidents)
    answer = _part(stalls.section("stalls"), 2, "The stall episodes, each with its evidence")
    answer.text = answer_line(episodes, len(stalls.section("threads").frame))
    answer.empty = "(no stall episode: every watched thread kept its rhythm)"
    out.sections.append(answer)

    step("drawing the timeline")
    from capture.errors import ForensicsError

    try:
        from forensics.plots.data import timeline_data
        from forensics.plots.timeline import draw_timeline

        data = timeline_data(
            cap, name + where, top=top, t_range=t_range, tids=tids, profiles=profiles, stalls=episodes, incidents=listed
        )
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
            None,
            empty="" if image else f"(no picture: {alt})",
            image=image,
            image_alt=alt,
        )
    )
    out.sections.append(_part(stalls.section("threads"), 3, "Watched threads"))
    out.sections.append(
        Section(
            "about",
            "How to read this report",
            None,
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
    overview = engine_overview(cap, t_range)
    if overview is not None:
        out.sections.append(
            Section(
                "engine",
                "The engine's own view (its cycles and the xruns it reported)",
                _kv(engine_rows(overview)),
                KV,
                note="From the engine's tables: a cycle ends when its last client finished; its deadline is the "
                "period (quantum / rate).",
            )
        )

    step("summarising (the five views)")
    summary = summary_report(cap, name + where, t_range=t_range, tids=tids)
    if summary.sections:
        out.sections.append(Section("views", "The five views", None, empty="", text=(
            "The views of `forensics summarize`: (1) when the busiest threads ran, (2) run against wait per "
            "thread, (3) where the watched threads ran, (4) page faults over time, (5) the worst episodes."
        )))  # fmt: skip
        for section in summary.sections:
            out.sections.append(_part(section))
    else:
        out.sections.append(Section("views", "The five views", None, empty="; ".join(summary.notes)))

    step("finding spikes")
    spikes = spikes_report(cap, name, t_range=t_range, limit=spike_limit, top=3, tids=tids)
    out.sections.append(
        _part(spikes.section("spikes"), 2, f"Worst CPU spikes (up to {spike_limit}, by how far they stand out)")
    )
    out.sections.append(_part(spikes.section("burners"), 3, "Evidence: who burned the CPU in each spike"))

    step("wake-up jitter")
    stats, hist = jitter(cap, t_range=t_range, tids=tids)
    engine_starts, engine_hist, _ = engine_jitter(cap, t_range=t_range)  # the engine's panel leads the picture
    jitter_image = None
    if (len(stats) and len(hist)) or (len(engine_starts) and len(engine_hist)):
        from forensics.plots.data import JitterData
        from forensics.plots.jitter import draw_jitter

        jitter_data = JitterData(f"{name}: intervals between wake-ups", stats, hist, 0, engine_starts, engine_hist)
        jitter_image = figure_bytes(draw_jitter(jitter_data))
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
    figures = system_figures(cap, t_range=t_range, profiles=profiles, tids=tids)
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


def answer_line(episodes: pd.DataFrame, watched: int) -> str:
    """The answer in one sentence: how many episodes of which verdict, in how many watched threads."""
    if episodes.empty:
        return f"No stall episode in the {watched} watched threads."
    counts = episodes["verdict"].astype(str).value_counts()
    verdicts = ", ".join(f"{n} {verdict}" for verdict, n in counts.items())
    threads = episodes["tid"].nunique()
    return (
        f"{len(episodes)} stall episodes ({verdicts}) in {threads} of the {watched} watched threads; each row "
        "below gives the verdict (the largest cause), the line under it the evidence. The timeline, the "
        "capture's details and the other views follow."
    )


def engine_rows(overview: dict[str, Any]) -> dict[str, str]:
    """The engine section's lines; `unknown` (with why) where the capture does not hold the figure."""

    def ms(value: float | None) -> str:
        return "unknown" if value is None else f"{value / 1e6:.3f} ms"

    rows = {"engine": overview["engine"], "version": overview["version"] or "unknown"}
    if overview["unavailable"]:
        rows["recorded"] = f"nothing: {overview['unavailable']}"
    quantum, rate = overview["quantum_frames"], overview["rate_hz"]
    rows["quantum / rate"] = (
        f"{quantum if quantum is not None else 'unknown'} frames / {rate if rate is not None else 'unknown'} Hz"
        + (f" (period {ms(overview['period_ns'])})" if overview["period_ns"] is not None else "")
    )
    periods = overview.get("periods_ns") or {}
    if len(periods) > 1:  # engines at once: each its own period (the figures above and below are `engine`'s)
        rows["periods"] = ", ".join(f"{engine} {ms(period)}" for engine, period in periods.items())
    cycles, ended = overview["cycles"], overview["cycles_with_end"]
    rows["cycles observed"] = f"{cycles} ({ended} with an end)" if cycles else "none: unknown"
    no_end = "unknown: the source saw no cycle end" if cycles else "unknown: no engine cycle recorded"
    for key, label in (("end_p50_ns", "cycle end p50"), ("end_p99_ns", "cycle end p99"), ("end_max_ns", "max")):
        rows[label if label != "max" else "cycle end max"] = ms(overview[key]) if overview[key] is not None else no_end
    misses, unknown_misses = overview["deadline_misses"], overview["misses_unknown"]
    rows["deadline misses"] = (
        "unknown: no engine cycle recorded"
        if misses is None
        else f"{misses}" + (f" ({unknown_misses} cycles unknown)" if unknown_misses else "")
    )
    xruns = overview["xruns"]
    if xruns is None:
        rows["xruns"] = "unknown: no engine source recorded xruns"
    else:
        delay = xruns["delay_max_us"]
        rows["xruns"] = f"{xruns['xruns']} ({xruns['reports']} reports, from {xruns['counted_from']})" + (
            f", largest delay {delay:.0f} us" if delay == delay else ""
        )
        blamed = xruns["blamed"]
        rows["clients blamed"] = (
            ", ".join(f"{name} ({n})" for name, n in blamed.items())
            if blamed
            else "unknown: the engine named no client"
        )
    return rows


def unknowns(cap: Capture, figures: pd.DataFrame, stall_notes: list[str], *, has_truth: bool) -> pd.DataFrame:
    """One row per thing this capture cannot tell, why, and what that means for the verdicts (the missing
    sources' rows from the table of analyses.data_sources)."""
    from analyses.data_sources import unknown_rows

    sources = cap.sources
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
    rows += unknown_rows(sources)
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
