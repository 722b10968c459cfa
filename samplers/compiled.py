"""The toolkit's compiled modules (setup.py: optional, built where a C compiler and Python's headers are at
install): samplers/_tick.c, the recorder's tick reads, and samplers/_parse.c, the writer's bulk parse. Each has
a Python twin that is the reference (samplers/tick_reads.py, samplers/procfs.py) and runs where the module is
missing. FORENSICS_PURE_PYTHON=1 takes the Python twins even where the modules are built (benchmarks, A/B)."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

PURE_PYTHON_ENV = "FORENSICS_PURE_PYTHON"


def pure_python_asked() -> bool:
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


def compiled_module(name: str) -> ModuleType | None:
    """samplers.<name>, or None where it was not built or FORENSICS_PURE_PYTHON=1 asks for Python."""
    if pure_python_asked():
        return None
    try:
        return importlib.import_module(f"samplers.{name}")
    except ImportError:
        return None
