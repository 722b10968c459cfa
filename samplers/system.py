"""Machine-wide counters: /proc/stat (per-CPU time, context switches, interrupts) and PSI.

The 2004 jackd + fluidsynth kernel benchmarks reported exactly these beside their xrun rates
(CPU user/system/IRQ/soft-IRQ/IO-wait load, interrupt and context-switch rates). They are context,
not per thread, so the recorder reads them every SYSTEM_EVERY ticks, not every tick.
"""

from __future__ import annotations

from typing import Any

# /proc/stat "cpu" line columns in order (proc(5)); guest time is already counted in user/nice.
CPU_COLUMNS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
PRESSURE_FILES = ("cpu", "io", "memory")


def parse_proc_stat(raw: bytes) -> tuple[list[dict[str, int]], dict[str, int]]:
    """Per-CPU rows (cpu = -1 for the machine) and the global counters."""
    cpu_rows: list[dict[str, int]] = []
    totals: dict[str, int] = {}
    for line in raw.split(b"\n"):
        if line.startswith(b"cpu"):
            name, *values = line.split()
            cpu = -1 if name == b"cpu" else int(name[3:])
            row = {"cpu": cpu}
            for column, value in zip(CPU_COLUMNS, values, strict=False):
                row[column] = int(value)
            cpu_rows.append(row)
        elif line.startswith((b"ctxt ", b"procs_running ", b"procs_blocked ")):
            key, value = line.split()[:2]
            totals[key.decode()] = int(value)
        elif line.startswith(b"intr "):
            # "intr TOTAL n0 n1 ...": only the total; per-IRQ counts are /proc/interrupts' job.
            totals["intr"] = int(line.split(maxsplit=2)[1])
    return cpu_rows, totals


def parse_pressure(kind: str, raw: bytes) -> dict[str, int]:
    """/proc/pressure/<kind>: cumulative stall µs ("total=") of the some and full lines."""
    out: dict[str, int] = {}
    for line in raw.split(b"\n"):
        parts = line.split()
        if not parts:
            continue
        for part in parts[1:]:
            if part.startswith(b"total="):
                out[f"psi_{kind}_{parts[0].decode()}_us"] = int(part[6:])
    return out


def system_rows(t_ns: int, stat_raw: bytes, pressure_raw: dict[str, bytes]) -> list[dict[str, Any]]:
    """Rows of the `system` table for one read: globals and PSI ride on the machine row (cpu = -1)."""
    cpu_rows, totals = parse_proc_stat(stat_raw)
    for kind, raw in pressure_raw.items():
        if raw:
            totals.update(parse_pressure(kind, raw))
    rows = []
    for row in cpu_rows:
        row = dict(row, t_ns=t_ns)
        if row["cpu"] == -1:
            row.update(totals)
        rows.append(row)
    return rows
