"""Pictures of a capture (matplotlib, Agg backend: no display needed).

`data.py` asks the analyses for DataFrames; `timeline.py`, `jitter.py` and `compare.py` only draw
them. Colours mean the same thing in every picture, in the html report and in the Perfetto export
(VERDICT_COLORS, PART_COLORS: one table, forensics/colors.py), so a reader learns them once.
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")  # headless: never look for a display (CI, ssh, a bug-report bot)

from matplotlib.figure import Figure

from forensics.colors import PART_COLORS, THREAD_COLORS, VERDICT_COLORS, thread_colors

# Core types (Capture.cpus["core_types"]): fast cores cool, slow cores warm, unknown grey.
FAST_CORE, SLOW_CORE, OTHER_CORE = "#2b83ba", "#d7301f", "#8c8c8c"
FORMATS = {".png": "png", ".svg": "svg"}


def figure_bytes(fig: Figure, fmt: str = "png", dpi: int = 100) -> bytes:
    """The figure as PNG (or SVG) bytes. Metadata without a date, so the same capture gives the same file."""
    buf = io.BytesIO()
    metadata = {"Software": "spike-stall-forensics"} if fmt == "png" else {"Date": None}
    fig.savefig(buf, format=fmt, dpi=dpi, metadata=metadata)
    return buf.getvalue()


__all__ = ["FORMATS", "PART_COLORS", "THREAD_COLORS", "VERDICT_COLORS", "figure_bytes", "thread_colors"]
