"""Spike and stall forensics: why did a Linux audio engine glitch?

import forensics
cap = forensics.load("load.ssf")
cap.samples      # one row per thread per tick, cumulative counters as read
"""

from forensics.capture import FORMAT_VERSION, Capture, load
from forensics.errors import CaptureWarning, ForensicsError

__version__ = "0.1.0"
__all__ = ["FORMAT_VERSION", "Capture", "CaptureWarning", "ForensicsError", "__version__", "load"]
