"""Spike and stall forensics: why did a Linux audio engine glitch?

    import forensics
    cap = forensics.load("load.ssf")
    cap.samples      # one row per thread per tick, cumulative counters as read

The capture module (pandas, pyarrow) is imported on first use, not here: the recorder and the lab
import `capture.errors` and must stay light (no 0.4 s import, no BLAS threads in a target process).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from capture.errors import CaptureWarning, ForensicsError

if TYPE_CHECKING:
    from capture.format import FORMAT_VERSION, Capture, load

__version__ = "0.1.0"
__all__ = ["FORMAT_VERSION", "Capture", "CaptureWarning", "ForensicsError", "__version__", "load"]


def __getattr__(name: str) -> Any:
    if name in ("FORMAT_VERSION", "Capture", "load"):
        from capture import format as capture

        return getattr(capture, name)
    raise AttributeError(f"module 'forensics' has no attribute {name!r}")
