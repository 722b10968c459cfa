"""What the toolkit needs of a capture's contents, checked once, where a capture is loaded.

A capture may come from another recorder, a later version, or a hand: its CRCs can be right and its
contents still not what the toolkit reads. So the loader checks them here, and every reader after it may
trust the types (Capture's typed properties return what they say):

- Metadata and trailer (JSON records): each key the toolkit reads is checked against META and TRAILER
  below, nested objects key by key. A key of another type, or a number out of its range (an interval of
  "2ms" or 0, a clk_tck of "x", CPUs as a string), is dropped with a warning naming it: it reads as
  unknown, as in a capture that never had it. Keys the toolkit does not read are kept as they are.
- Table chunks: a chunk of a table the toolkit writes must have its REQUIRED columns, the ones that place
  a row (its time, and whose row it is) and, for samples, the counters every reading needs. A chunk without
  one is skipped at load; a row with a null in one is left out where it is read. The other columns may be
  null or missing (older captures lack later columns, a source leaves unknown what it cannot fill).

Imports nothing: capture.format applies it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_INT64 = 1 << 63


def integer(lo: int = -_INT64, hi: int = _INT64 - 1, *, null: bool = True) -> Callable[[Any], bool]:
    """A JSON integer in [lo, hi] (never a bool); None too unless null=False."""
    return lambda v: (null and v is None) or (type(v) is int and lo <= v <= hi)


def number(v: Any) -> bool:
    """A finite JSON number that fits an int64 (Python's json also reads NaN and Infinity), or None."""
    if v is None:
        return True
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and abs(v) < _INT64


def text(v: Any) -> bool:
    return v is None or isinstance(v, str)


def list_of(item: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and all(item(x) for x in v)


def dict_of(value: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, dict) and all(value(x) for x in v.values())


def any_object(v: Any) -> bool:
    return v is None or isinstance(v, dict)


@dataclass(frozen=True)
class Obj:
    """A JSON object whose `fields` are checked (the others kept as they are); None too when `null`."""

    fields: Mapping[str, Callable[[Any], bool] | Obj]
    null: bool = False


Spec = Callable[[Any], bool] | Obj

NS = integer()  # a CLOCK_MONOTONIC time or a duration, ns
COUNT = integer(0)
CPU = integer(0, 32767, null=False)  # the capture's cpu columns are int16: a CPU number beyond is made up
PID = integer(0, (1 << 31) - 1)

ENGINE = Obj(
    {
        "kind": text,
        "version": text,
        "unavailable": text,
        "server": text,
        "jackd_pid": PID,
        "clock_offset_ns": number,
        "clock_offset_drift_ns": number,
    },
    null=True,
)

META = Obj(
    {
        "format_version": integer(null=False),
        "tool": lambda v: isinstance(v, str),
        "tool_version": lambda v: isinstance(v, str),
        "recording": Obj(
            {
                # Beyond a minute nothing is sampled (catch-load's --interval allows no more).
                "interval_ns": integer(1, 60_000_000_000),
                "duration_ns": NS,
                "started_ns": NS,
                "started_wall": text,
                "argv": list_of(lambda v: isinstance(v, str)),
                "targets": Obj({}),
                "lab": lambda v: v is None or isinstance(v, list),
                "sampler": text,
                "recorder_pid": PID,
                "writer_pid": PID,
                "resampled_from_ns": integer(1),
            }
        ),
        "sources": Obj(
            {
                "engine": ENGINE,
                "engines": Obj({"jack": ENGINE, "pipewire": ENGINE}, null=True),  # each engine source by kind
                "delayacct_since_ns": NS,
                "sysctl_changes": any_object,
            }
        ),
        "host": Obj({"clk_tck": integer(1, 1_000_000), "page_size": integer(1)}),
        "cpus": Obj(
            {
                "online": list_of(CPU),
                "online_list": text,
                "count": COUNT,
                "core_types": dict_of(list_of(CPU)),
                "capacity": dict_of(number),
                "max_freq_khz": dict_of(number),
                "governor": dict_of(lambda v: isinstance(v, str)),
            }
        ),
        "lab": any_object,
        "ebpf": Obj({"families": any_object}, null=True),
        "ebpf_sampler": Obj({"keyframe_ticks": integer(1, 1 << 20), "stat_slow_ns": NS}, null=True),
        "window": Obj(
            {
                "origin_ns": NS,
                "start_ns": NS,
                "end_ns": NS,
                "triggers": COUNT,
                "trigger": Obj({"t_ns": NS, "text": text}, null=True),
                # What the recording it was cut from had lost there (capture.window.cut).
                "damage": list_of(
                    lambda v: (
                        isinstance(v, dict)
                        and isinstance(v.get("table"), str)
                        and NS(v.get("after_ns"))
                        and NS(v.get("before_ns"))
                    )
                ),
            },
            null=True,
        ),
        "flight": Obj({"burst_gap_ns": integer(1)}, null=True),
        "segment": Obj({"index": COUNT, "first_ns": NS, "last_ns": NS}, null=True),
    }
)

_COUNTS = dict_of(integer(0, null=False))
TRAILER = Obj(
    {
        "rows": _COUNTS,
        "end_reason": lambda v: isinstance(v, str),
        "ebpf": Obj(
            {"events": _COUNTS, "lost": _COUNTS, "missed": _COUNTS, "lost_total": integer(0)},
            null=True,
        ),
        "segment": Obj({"index": COUNT, "first_ns": NS, "last_ns": NS}, null=True),
        **dict.fromkeys(
            (
                "duration_ns",
                "ended_ns",
                "ticks",
                "missed_ticks",
                "lost_ticks",
                "ticks_in_capture",
                "threads_unseen_min",
                "interval_p50_ns",
                "interval_p99_ns",
                "interval_max_ns",
                "interval_mean_ns",
                "sampler_cpu_ns",
                "sampler_user_ns",
                "sampler_system_ns",
                "tick_reads_cpu_ns",
                "writer_cpu_ns",
                "writer_decode_cpu_ns",
                "reads",
                "threads_seen",
                "processes_seen",
                "max_rss_kib",
                "command_exit_code",
                "bytes",
            ),
            number,
        ),
    }
)


def conform(value: dict[str, Any], spec: Obj, malformed: list[str], path: str = "") -> dict[str, Any]:
    """`value` without the keys that do not fit `spec` (their dotted names are added to `malformed`)."""
    kept = {}
    for key, item in value.items():
        wanted = spec.fields.get(key)
        name = f"{path}{key}"
        if wanted is None:  # a key of another recorder or a later version: as it is
            kept[key] = item
        elif isinstance(wanted, Obj):
            if isinstance(item, dict):
                kept[key] = conform(item, wanted, malformed, f"{name}.")
            elif item is None and wanted.null:
                kept[key] = None
            else:
                malformed.append(name)
        elif wanted(item):
            kept[key] = item
        else:
            malformed.append(name)
    return kept


# The columns a row of each table cannot do without (module docstring); tables not named here need none.
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "samples": (
        "tick",
        "t_ns",
        "tid",
        "pid",
        "run_ns",
        "wait_ns",
        "slices",
        "state",
        "minflt",
        "majflt",
        "utime",
        "stime",
        "nice",
        "cpu",
        "rtprio",
        "policy",
        "blkio_ticks",
    ),
    "sched": ("tick", "t_ns", "tid"),
    "system": ("t_ns", "cpu", "user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"),
    "threads": ("t_ns", "tid", "pid"),
    "events": ("t_ns", "kind"),
    "processes": ("t_ns", "pid"),
    "thread_seen": ("tid", "first_ns", "last_ns", "rows"),
    "tiers": ("t_ns", "tid", "tier", "interval_ns"),
    "sampler_ticks": ("tick", "t_ns"),
    "truth": ("cause", "tid", "start_ns", "end_ns"),
    "cycles": ("tid", "start_ns", "end_ns", "deadline_ns"),
    "taskstats": ("tick", "t_ns", "tid"),
    "sched_switch": ("t_ns", "cpu", "prev_tid", "prev_prio", "prev_state", "next_tid", "next_prio"),
    "sched_wakeup": ("t_ns", "cpu", "kind", "tid"),
    "page_faults": ("t_ns", "tid"),
    "block_rq": ("t_ns", "kind"),
    "ebpf_lost": ("t_ns", "kind", "lost_total"),
    "engine_cycles": ("t_ns", "engine"),
    "engine_nodes": ("t_ns", "engine"),
    "xruns": ("t_ns", "engine", "source"),
    "engine_clients": ("t_ns", "engine", "event"),
    "engine_graph": ("t_ns", "engine", "event"),
    "engine_status": ("t_ns", "engine"),
    "flight_windows": ("t_ns", "start_ns", "end_ns", "status"),
    "flight_minutes": ("t_ns",),
    "flight_bursts": ("start_ns", "end_ns"),
}
