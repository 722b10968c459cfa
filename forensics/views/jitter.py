"""The jitter view: wake-up periods of the periodic threads and their histogram (as `forensics jitter`
prints them; `forensics report` embeds the periods)."""

from __future__ import annotations

import pandas as pd

from capture.format import Capture
from forensics.render import Report, Section

STATS = {
    "comm": "thread",
    "tid": "tid",
    "nominal_ns": "period",
    "n": "wake-ups",
    "p50_ns": "p50",
    "p99_ns": "p99",
    "min_ns": "min",
    "max_ns": "max",
    "jitter_pct": "jitter",
}
HIST = {"comm": "thread", "lo_ns": "from", "hi_ns": "to", "count": "count", "bar": "", "mark": ""}
ENGINE_STARTS = {
    "engine": "engine",
    "driver": "driver",
    "nominal_ns": "period",
    "n": "spacings",
    "p50_ns": "p50",
    "p99_ns": "p99",
    "min_ns": "min",
    "max_ns": "max",
    "jitter_pct": "jitter",
}
ENGINE_HIST = {"driver": "driver", "lo_ns": "from", "hi_ns": "to", "count": "count", "bar": "", "mark": ""}
ENGINE_ENDS = {
    "engine": "engine",
    "period_ns": "deadline",
    "cycles": "cycles",
    "cycles_with_end": "with end",
    "end_p50_ns": "end p50",
    "end_p99_ns": "end p99",
    "end_max_ns": "end max",
    "deadline_misses": "late",
    "never_begun": "never began",
    "xruns": "xruns",
    "misses_unknown": "unknown",
    "xrun_delay_max_us": "xrun delay max us",
}


def _bars(hist: pd.DataFrame, key: str) -> pd.DataFrame:
    peak = hist.groupby(key)["count"].transform("max").replace(0, 1)
    return hist.assign(
        bar=["█" * max(round(30 * c / p), 1 if c else 0) for c, p in zip(hist["count"], peak, strict=True)],
        mark=[
            ", ".join(([f"{int(m)}x period"] if m > 0 else []) + ([f"{int(b)} of them longer"] if b > 0 else []))
            for m, b in zip(hist["multiple"], hist["beyond"], strict=True)
        ],
    )


def jitter_report(
    cap: Capture,
    name: str,
    *,
    pattern: str | None = None,
    t_range: tuple[int | None, int | None] | None = None,
    tids: tuple[int, ...] = (),
) -> Report:
    from analyses.jitter import jitter as run_jitter
    from analyses.source import capture_interval_ns, capture_origin_ns
    from forensics.views.thresholds import jitter_thresholds

    stats, hist = run_jitter(cap, pattern=pattern, t_range=t_range, tids=tids)
    report = Report(title=f"Wake-up jitter in {name}", origin_ns=capture_origin_ns(cap))
    if len(hist):
        hist = _bars(hist, "tid")
    note = ""
    if len(stats):
        note = "Sources: " + "; ".join(f"{r.comm}: {r.source}" for r in stats.itertuples(index=False))
    report.sections.append(
        Section(
            "stats",
            "Wake-up periods",
            stats,
            STATS,
            detail="flag",
            empty="(no periodic thread; try --thread REGEX or --tid N)"
            if pattern is None and not tids
            else "(none of the threads asked for wakes periodically: `forensics summarize` shows what they did)",
            note=note,
        )
    )
    report.sections.append(Section("histogram", "Histogram of periods", hist, HIST))
    _engine_sections(report, cap, t_range)
    report.notes.append(jitter_thresholds(capture_interval_ns(cap)))
    return report


def _engine_sections(report: Report, cap: Capture, t_range: tuple[int | None, int | None] | None) -> None:
    """The engine's own view, when the capture has engine cycles (nothing added when it has none)."""
    from analyses.jitter import engine_jitter

    starts, hist, ends = engine_jitter(cap, t_range=t_range)
    if starts.empty and ends.empty:
        return
    note = ""
    if len(starts):
        note = (
            "Source: " + "; ".join(sorted(set(starts["source"]))) + ". Peaks at 2x, 3x the period: lost cycles, "
            "or cycles a polling source missed (JACK's); a spacing off those multiples holds cycles the driver "
            "never began (counted under the cycle ends)."
        )
    report.sections.append(
        Section(
            "engine_starts",
            "Engine cycle starts: spacing of the driver's cycles",
            starts,
            ENGINE_STARTS,
            detail="flag",
            empty="(fewer than 3 engine cycles with a period in this span)",
            note=note,
        )
    )
    report.sections.append(
        Section("engine_histogram", "Histogram of the engine's cycle spacing", _bars(hist, "driver") if len(hist)
                else hist, ENGINE_HIST)
    )  # fmt: skip
    ends_note = ""
    if len(ends):
        ends_note = "Source: " + "; ".join(ends["source"]) + "; xruns: " + "; ".join(ends["xruns_from"].astype(str))
    report.sections.append(
        Section(
            "engine_ends",
            "Engine cycle ends against the period, and the xruns the engine reported",
            ends,
            ENGINE_ENDS,
            empty="(no engine cycle in this span)",
            note=ends_note,
        )
    )
