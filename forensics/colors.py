"""The colours of the verdicts and of where a thread's time went: one table for the plots, the HTML report
and the Perfetto export, so a reader learns them once. No matplotlib here: the HTML renderer imports it.

The verdict colours are dark enough to read as text on white (the HTML report writes verdicts in them)
and distinct as fills (the timeline shades episodes in them).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from analyses.rules import CAUSES

# Verdicts, in the order of analyses.rules.CAUSES.
VERDICT_COLORS = {
    "run": "#1f5fa8",
    "runqueue": "#b35c00",
    "io": "#8e1b1b",
    "fault": "#6a3d9a",
    "lock": "#1d7a3a",
    "reclaim": "#7a6a00",
    "unknown": "#555555",
}
assert tuple(VERDICT_COLORS) == CAUSES, "one colour per verdict, in the order of analyses.rules.CAUSES"

# Where a thread's time went, per window.
PART_COLORS = {
    "on CPU": "#2f6db5",
    "waiting for a CPU (runqueue)": "#f28e2b",
    "blocked in D (IO, page-in)": "#b2182b",
}

# Threads (a panel's title, its fault line): hues that none of the colours above take (cyan, magenta, green,
# yellow, teal, gold, pink, salmon: at least 20 CIELAB units from every verdict and part colour, and from
# one another; tests/test_plots.py measures it), so a thread is never read as a verdict.
THREAD_COLORS = ("#17becf", "#d62798", "#00ba38", "#bcbd22", "#0f8b8d", "#e6ab02", "#f564e3", "#f8766d")


def thread_colors(names: Iterable[str]) -> list[str]:
    """One colour per thread, from its name: the same thread has the same colour in every plot (whatever
    else is drawn beside it). Two threads of one plot whose names pick the same colour: the later takes
    the next free one."""
    out: list[str] = []
    for name in names:
        at = zlib.crc32(name.encode()) % len(THREAD_COLORS)
        for step in range(len(THREAD_COLORS)):
            color = THREAD_COLORS[(at + step) % len(THREAD_COLORS)]
            if color not in out or len(out) >= len(THREAD_COLORS):
                break
        out.append(color)
    return out
