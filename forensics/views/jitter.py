"""The jitter view: wake-up periods of the periodic threads and their histogram (as `forensics jitter`
prints them; `forensics report` embeds the periods)."""

from __future__ import annotations

import numpy as np

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


def jitter_report(
    cap: Capture, name: str, *, pattern: str | None = None, t_range: tuple[int | None, int | None] | None = None
) -> Report:
    from analyses.jitter import jitter as run_jitter
    from analyses.source import capture_origin_ns

    stats, hist = run_jitter(cap, pattern=pattern, t_range=t_range)
    report = Report(title=f"Wake-up jitter in {name}", origin_ns=capture_origin_ns(cap))
    if len(hist):
        peak = hist.groupby("tid")["count"].transform("max").replace(0, 1)
        hist = hist.assign(
            bar=["█" * max(round(30 * c / p), 1 if c else 0) for c, p in zip(hist["count"], peak, strict=True)],
            mark=np.where(hist["multiple"] > 0, hist["multiple"].astype(str) + "x period", ""),
        )
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
            empty="(no periodic thread; try --thread REGEX)",
            note=note,
        )
    )
    report.sections.append(Section("histogram", "Histogram of periods", hist, HIST))
    return report
