"""The compiled part of the toolkit (samplers/compiled.py): samplers/_tick.c, the recorder's per-tick reads
(samplers/tick_reads.py), and samplers/_parse.c, the writer's bulk parse of the /proc texts (samplers/procfs.py).

Optional: without a C compiler or Python's headers (python3-dev) the install goes on and the same work runs in
Python (a capture's `forensics info` says which tick made it: recording.tick_code). Everything else is in
pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(f"samplers.{name}", [f"samplers/{name}.c"], optional=True, extra_compile_args=["-O2"])
        for name in ("_tick", "_parse")
    ]
)
