"""What the machine is and which kernel sources it offers, recorded in every capture's metadata.

A capture is read on another machine, often months later: "which core type" and "were schedstats on"
are half of many answers, so they travel with the data. Every probe degrades to None ("unknown")
when a file is missing: users' kernels differ.
"""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path
from typing import Any

from samplers import capabilities


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def parse_cpu_list(text: str | None) -> list[int]:
    """ "0-3,8,10-11" -> [0, 1, 2, 3, 8, 10, 11] (the sysfs cpulist format)."""
    cpus: list[int] = []
    if not text:
        return cpus
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def cpu_topology(sysfs: str = "/sys") -> dict[str, Any]:
    """Online CPUs, hybrid core types, ARM capacities, cpufreq governors and maximum frequencies."""
    base = Path(sysfs) / "devices" / "system" / "cpu"
    online_text = _read(base / "online")
    online = parse_cpu_list(online_text) if online_text else list(range(os.cpu_count() or 1))
    core_types: dict[str, list[int]] = {}
    # Intel hybrid parts register one PMU per core type: /sys/devices/cpu_core (P) and cpu_atom (E).
    for pmu, label in (("cpu_core", "P-core"), ("cpu_atom", "E-core")):
        cpus = parse_cpu_list(_read(Path(sysfs) / "devices" / pmu / "cpus"))
        if cpus:
            core_types[label] = cpus
    capacity: dict[str, int] = {}
    governor: dict[str, str] = {}
    max_khz: dict[str, int] = {}
    for cpu in online:
        node = base / f"cpu{cpu}"
        cap = _read(node / "cpu_capacity")  # ARM big.LITTLE (and some x86): relative compute capacity
        if cap and cap.isdigit():
            capacity[str(cpu)] = int(cap)
        gov = _read(node / "cpufreq" / "scaling_governor")
        if gov:
            governor[str(cpu)] = gov
        khz = _read(node / "cpufreq" / "cpuinfo_max_freq")
        if khz and khz.isdigit():
            max_khz[str(cpu)] = int(khz)
    if not core_types and len(set(capacity.values())) > 1:
        top = max(capacity.values())
        core_types = {
            "big": [int(c) for c, v in capacity.items() if v == top],
            "little": [int(c) for c, v in capacity.items() if v != top],
        }
    return {
        "online": online,
        "online_list": online_text or ",".join(map(str, online)),
        "count": len(online),
        "core_types": core_types,
        "capacity": capacity,
        "governor": governor,
        "max_freq_khz": max_khz,
    }


def kernel_config(proc: str = "/proc") -> dict[str, str] | None:
    """The running kernel's config (/proc/config.gz, else /boot/config-<release>), or None."""
    return capabilities.kernel_config(capabilities.Roots(proc=proc))


def sources_available(proc: str = "/proc", sched_mode: str = "rt") -> dict[str, Any]:
    """Which per-thread kernel sources this recording can use. None = could not tell."""
    config = kernel_config(proc)
    sysctl = Path(proc) / "sys" / "kernel"
    schedstats_value = _read(sysctl / "sched_schedstats")
    if config is not None:
        schedstats_compiled: bool | None = config.get("CONFIG_SCHEDSTATS") == "y"
    else:
        # Without the config: the sysctl only exists with CONFIG_SCHEDSTATS (kernel/sched/core.c).
        schedstats_compiled = True if schedstats_value is not None else None
    delayacct_value = _read(sysctl / "task_delayacct")
    return {
        "schedstat": os.path.exists(os.path.join(proc, "self", "schedstat")),
        "sched": sched_mode,
        "schedstats_compiled": schedstats_compiled,
        "schedstats_enabled": (schedstats_value == "1")
        if schedstats_value is not None
        else (False if schedstats_compiled is False else None),
        "delayacct": (delayacct_value == "1") if delayacct_value is not None else None,
        "delayacct_compiled": (config.get("CONFIG_TASK_DELAY_ACCT") == "y") if config else None,
        "taskstats": False,
        "ebpf": False,
        "psi": os.path.exists(os.path.join(proc, "pressure", "cpu")),
    }


def host_info(proc: str = "/proc") -> dict[str, Any]:
    uname = platform.uname()
    # The model in force (PREEMPT_DYNAMIC kernels choose it at boot), as `forensics doctor` reports it.
    preemption = capabilities.preemption_check(capabilities.Roots(proc=proc), kernel_config(proc)).value
    return {
        "hostname": socket.gethostname(),
        "kernel_release": uname.release,
        "kernel_version": uname.version,
        "machine": uname.machine,
        "preemption": preemption,
        "boot_id": _read(Path(proc) / "sys" / "kernel" / "random" / "boot_id"),
        "clk_tck": os.sysconf("SC_CLK_TCK"),
        "page_size": os.sysconf("SC_PAGE_SIZE"),
        "cmdline": _read(Path(proc) / "cmdline"),
    }
