"""The capture's metadata (META record): what was recorded, on which machine, with which sources.

Built here, beside the samplers that know these facts; the CLI only passes what it parsed. Readers get
typed views of it from capture.format.Capture (interval_ns, sources, cpus, host, clk_tck).
"""

from __future__ import annotations

import datetime as dt
import os
import time
from typing import Any

from samplers.machine import cpu_topology, host_info, sources_available
from samplers.recorder import RecorderOptions
from samplers.sysctl_guard import SysctlGuard
from samplers.targets import TargetSpec

TOOL = "spike-stall-forensics"


def recording_meta(
    spec: TargetSpec,
    options: RecorderOptions,
    *,
    writer_pid: int,
    lab_argv: list[str] | None,
    guard: SysctlGuard | None,
    argv: list[str],
    tool_version: str,
) -> dict[str, Any]:
    """The metadata of a recording about to start (read after --delayacct/--schedstats were switched on)."""
    sources = sources_available(options.procfs, options.sched)
    for outcome in guard.outcomes.values() if guard is not None else ():
        if outcome.name == "kernel.task_delayacct" and outcome.status == "set":
            # Threads older than this have no delay accounting (set up at fork): their delays are unknown.
            sources["delayacct_since_ns"] = outcome.at_ns
    sources["sysctl_changes"] = {o.name: o.status for o in guard.outcomes.values()} if guard is not None else {}
    return {
        "tool": TOOL,
        "tool_version": tool_version,
        "host": host_info(options.procfs),
        "cpus": cpu_topology(),
        "sources": sources,
        "recording": {
            "interval_ns": options.interval_ns,
            "duration_ns": options.duration_ns,
            "started_ns": time.monotonic_ns(),
            "started_wall": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
            "argv": argv,
            "targets": spec.describe(),
            "lab": lab_argv,
            "sched": options.sched,
            "sampler_cpu_pin": options.cpu,
            "sampler_rt_priority": options.rt_priority,
            "redact": options.redact,
            "recorder_pid": os.getpid(),
            "writer_pid": writer_pid,
            "clock": "CLOCK_MONOTONIC",
        },
    }
