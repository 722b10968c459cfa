"""Environment for every process of the lab (imported before numpy, so it imports nothing heavy).

OpenBLAS starts a thread per CPU when numpy is imported and pyarrow's jemalloc starts a purger thread;
these settings stop both, so each lab process holds exactly the threads forensics.lab.engine describes.
"""

import os
from pathlib import Path

QUIET_LIBRARIES = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "JE_ARROW_MALLOC_CONF": "background_thread:false",
}


def lab_env() -> dict[str, str]:
    """Our environment for a lab process that runs this very copy of the lab: QUIET_LIBRARIES, and the
    checkout's root (the directory holding the `forensics` package) first on PYTHONPATH, so that
    `python -m forensics.lab` finds it without the package installed. (The samplers' package_env does
    the same for theirs; the lab may not import the samplers.)"""
    env = dict(os.environ, **QUIET_LIBRARIES)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env
