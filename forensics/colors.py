"""The colours of the verdicts and of where a thread's time went: one table for the plots, the HTML report
and the Perfetto export, so a reader learns them once. No matplotlib here: the HTML renderer imports it.

The verdict colours are dark enough to read as text on white (the HTML report writes verdicts in them)
and distinct as fills (the timeline shades episodes in them).
"""

from __future__ import annotations

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
