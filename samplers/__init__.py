"""Samplers: read kernel counters of target threads on a clock and write a capture.

They know nothing of analyses; the capture format (capture/format.py) is all they share.
"""

from __future__ import annotations

import os
from pathlib import Path


def package_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default ours) for a child process that runs this copy of the toolkit, not another
    installed one: its root first on PYTHONPATH (the writer, the engine sources, the flight watcher)."""
    out = dict(os.environ if env is None else env)
    root = str(Path(__file__).resolve().parents[1])
    out["PYTHONPATH"] = root + (os.pathsep + out["PYTHONPATH"] if out.get("PYTHONPATH") else "")
    # No child of ours multiplies matrices: numpy's OpenBLAS would start a thread a core that spins after the
    # import: 60-150 ms of CPU at each start on this 2-core machine (python -c "import numpy, pyarrow, pandas").
    out.setdefault("OPENBLAS_NUM_THREADS", "1")
    return out
