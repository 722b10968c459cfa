"""The data sources a capture may hold: how to record each, what it decides, what stays unknown without it.

One table. The stalls' "undecided" list (analyses.stalls, per capture) and the report's "What could not be
known" section (forensics.views.report) are both generated from it, so a source is described once. Adding
a source: DESIGN.md, "Adding a data source".

`key` names a presence flag: for the report, a key of the capture's `sources` metadata (Capture.sources);
for the stalls, what the analysed windows and exact tables actually held (analyses.stalls, SOURCE_FLAGS).
`any_of` (instead of key) is missing only when none of its flags is present.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Path = Literal["proc", "exact", "both"]


@dataclass(frozen=True)
class DataSource:
    key: str  # presence flag of the stall rules (and of Capture.sources unless meta_key says otherwise)
    flag: str  # how to record it (catch-load options)
    decides: str  # what it decides
    any_of: tuple[str, ...] = ()  # missing only when none of these flags is present (key is then a label)
    # Said by `forensics stalls` when missing, for the episodes of this path ("proc": without eBPF).
    undecided: str | None = None
    undecided_path: Path = "both"
    # The report's row when the recording lacked it: what cannot be told, why not, and what that means
    # (`so_ebpf` instead of `so` when the capture has eBPF events).
    what: str | None = None
    meta_key: str | None = None  # its key in Capture.sources when not `key`
    why: str = ""  # the kernel has it but it was off
    why_absent: str | None = None  # the kernel lacks it (Capture.sources[compiled] false)
    compiled: str | None = None
    unknown_compiled_is_off: bool = True  # when the metadata does not say whether the kernel has it
    so: str = ""
    so_ebpf: str | None = None


SOURCES: tuple[DataSource, ...] = (
    DataSource(
        key="schedstats",
        flag="--schedstats (kernel.sched_schedstats=1; CONFIG_SCHEDSTATS)",
        decides="short io and lock waits from the wait, sleep, block and iowait sums",
        what="per-thread wait, sleep, block and iowait sums (sched file)",
        meta_key="schedstats_enabled",
        why="kernel.sched_schedstats was off (or unknown)",
        why_absent="the kernel has no CONFIG_SCHEDSTATS",
        compiled="schedstats_compiled",
        so="io is told from lock by the state letter read each tick (D or S): waits shorter than one "
        "interval may be missed",
        so_ebpf="none for io and lock: eBPF's switch states decide them",
    ),
    DataSource(
        key="delayacct",
        flag="--delayacct (kernel.task_delayacct=1)",
        decides="block-IO wait time per thread (stat field 42; with --taskstats, blkio delay)",
        what="block-IO delay per thread (delay accounting, stat field 42)",
        why="kernel.task_delayacct was off",
        why_absent="delay accounting unavailable",
        compiled="delayacct_compiled",
        unknown_compiled_is_off=False,
        so="io verdicts rest on the state letter (and machine-wide IO pressure), not on the kernel's "
        "own per-thread IO-wait time",
        so_ebpf="io rests on the D state (eBPF switch states), not on the kernel's own block-IO wait time: other "
        "uninterruptible waits read as io",
    ),
    DataSource(
        key="taskstats",
        flag="--taskstats",
        decides="reclaim: direct reclaim, thrashing and compaction delays",
        undecided="reclaim (needs taskstats: freepages/thrashing/compaction delays)",
        what="reclaim, compaction and thrashing delays (taskstats)",
        why="taskstats were not read",
        so="the reclaim verdict cannot be given: such time shows as run, fault or io",
    ),
    DataSource(
        key="short waits",
        any_of=("delayacct", "schedstats"),
        flag="--delayacct, --schedstats or --ebpf",
        decides="io and lock waits shorter than one sampling interval",
        undecided="io and lock waits shorter than one sampling interval (needs delay accounting, schedstats or eBPF)",
        undecided_path="proc",
    ),
    DataSource(
        key="ebpf",
        flag="--ebpf (root, BCC)",
        decides="exact switch states, wake-ups and wakers: lock waits shorter than the period, who held them",
        undecided="lock waits shorter than the period, and who woke a waiting thread (needs eBPF)",
        undecided_path="proc",
        what="exact switch states and who woke whom (eBPF)",
        why="eBPF was not used",
        so="lock waits shorter than the period are not seen; a lock's holder is a suspicion, not proof",
    ),
    DataSource(
        key="psi",
        flag="(read when the kernel has /proc/pressure)",
        decides="machine-wide IO pressure: io for a thread read on CPU between back-to-back requests",
        what="system pressure (PSI)",
        why="/proc/pressure was not read",
        so="no machine-wide stall context",
    ),
    DataSource(
        key="ts_blkio",
        flag="--delayacct with --taskstats",
        decides="whether an uninterruptible (D) wait was block IO or another kernel wait",
        undecided="whether uninterruptible (D) waits were block IO or another kernel wait (needs delay accounting: "
        "--delayacct with --taskstats)",
        undecided_path="exact",
    ),
    DataSource(
        key="ebpf_faults",
        flag="--ebpf (page faults)",
        decides="exact fault-storm times",
        undecided="exact fault-storm times (eBPF page faults were off): /proc fault counts decide",
        undecided_path="exact",
    ),
)


def _present(source: DataSource, flags: Mapping[str, Any]) -> bool:
    if source.any_of:
        return any(bool(flags.get(k)) for k in source.any_of)
    return bool(flags.get(source.key))


def undecided_for_lack(present: Mapping[str, bool], *, exact: bool) -> list[str]:
    """What the stall rules could not decide for lack of a source, in table order. `present`: the flags
    of analyses.stalls; `exact`: the capture has an eBPF switch record (then eBPF itself is present)."""
    path = "exact" if exact else "proc"
    return [
        s.undecided
        for s in SOURCES
        if s.undecided is not None and s.undecided_path in (path, "both") and not _present(s, present)
    ]


def unknown_rows(sources: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """The report's rows (what, why, so) for the sources this capture's metadata says were missing."""
    rows = []
    for s in SOURCES:
        if s.what is None or sources.get(s.meta_key or s.key):
            continue
        why = s.why
        if s.compiled is not None and s.why_absent is not None:
            compiled = sources.get(s.compiled)
            absent = compiled is False if s.unknown_compiled_is_off else not compiled
            why = s.why_absent if absent else s.why
        so = s.so_ebpf if s.so_ebpf is not None and sources.get("ebpf") else s.so
        rows.append((s.what, why, so))
    return rows
