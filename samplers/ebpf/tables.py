"""The eBPF event record (as probes.bpf.c writes it), its decoding, and the capture tables it feeds.

Decoding is vectorised: a batch of records is one numpy structured array (EVENT_DTYPE mirrors
`struct event`), split by kind and turned into Arrow tables column by column. Times are
bpf_ktime_get_ns(): CLOCK_MONOTONIC ns, the clock of every other table in the capture.

Tables (their schemas live in capture/format.py, the format module):

sched_switch   t_ns cpu prev_tid prev_pid prev_comm prev_prio prev_state prev_state_char
               next_tid next_pid next_comm next_prio
               prev_pid is exact (the current task's tgid); next_pid is null when `next` is not a
               target thread. prev_state is the raw kernel value; prev_state_char its decoding with
               THIS kernel's rules (tracefs.prev_state_rules): "S" sleeping, "D" uninterruptible
               (IO...), "R+" preempted, "R" runnable (yield), "I" idle kthread... Priorities are the
               kernel's prio (0-99 RT, 100-139 normal: 120 + nice).
sched_wakeup   t_ns cpu kind tid pid comm prio target_cpu waker_tid waker_pid waker_comm waker_context
               waker_function
               kind: "waking" (try_to_wake_up() starts, in the waker's context), "wakeup" (the task is
               on a run queue; may run on the target CPU, so no waker), "wakeup_new" (a new task).
               waker_context: "task" (the waker is the current task), "hardirq", "softirq", "hrtimer"
               (an interrupt did it: waker_tid is only the task it interrupted); waker_function:
               the hrtimer callback's kernel symbol where known.
page_faults    t_ns cpu tid pid address ip error_code (x86 error_code bits: 1 present, 2 write, 4 user...)
block_rq       t_ns cpu kind ("issue"/"complete") dev major minor sector nr_sector bytes rwbs error tid pid comm
               tid/pid: the thread that issued the request (for "complete", carried from its issue).
ebpf_lost      t_ns kind lost_total: cumulative events the ring buffer had no room for, a row each time it grows
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pyarrow as pa

from capture.format import (
    BLOCK_RQ_SCHEMA,
    EBPF_LOST_SCHEMA,
    PAGE_FAULTS_SCHEMA,
    SCHED_SWITCH_SCHEMA,
    SCHED_WAKEUP_SCHEMA,
)
from samplers.ebpf.tracefs import DEFAULT_RULES, PrevStateRules, decode_prev_state

# np.where(cond, x, NONE_OBJECT): an object array with None where not cond (numpy's stubs refuse a bare None).
NONE_OBJECT = np.array(None, dtype=object)

KIND_SWITCH = 1
KIND_WAKING = 2
KIND_WAKEUP = 3
KIND_WAKEUP_NEW = 4
KIND_PAGE_FAULT = 5
KIND_RQ_ISSUE = 6
KIND_RQ_COMPLETE = 7
NR_KINDS = 8
KIND_NAMES = {
    KIND_SWITCH: "sched_switch",
    KIND_WAKING: "sched_waking",
    KIND_WAKEUP: "sched_wakeup",
    KIND_WAKEUP_NEW: "sched_wakeup_new",
    KIND_PAGE_FAULT: "page_fault_user",
    KIND_RQ_ISSUE: "block_rq_issue",
    KIND_RQ_COMPLETE: "block_rq_complete",
}
CONTEXT_NAMES = {0: "task", 1: "hardirq", 2: "softirq", 3: "hrtimer"}

# Mirrors `struct event` in probes.bpf.c (natural alignment, little-endian on the machines we meet).
EVENT_DTYPE = np.dtype(
    [
        ("t_ns", "<u8"),
        ("kind", "<u4"),
        ("cpu", "<u4"),
        ("tid", "<i4"),
        ("pid", "<i4"),
        ("tid2", "<i4"),
        ("pid2", "<i4"),
        ("a", "<i4"),
        ("b", "<i4"),
        ("x", "<i8"),
        ("y", "<u8"),
        ("z", "<u8"),
        ("comm", "S16"),
        ("comm2", "S16"),
    ]
)
EVENT_SIZE = EVENT_DTYPE.itemsize  # 96


def _strings(raw: np.ndarray, null: np.ndarray | None = None) -> pa.Array:
    """Fixed-size C strings -> dictionary-encoded Arrow strings (comm names repeat a lot).

    Only the bytes before the first NUL count: trace buffers leave stale bytes after it (rwbs is filled
    by blk_fill_rwbs() up to its NUL only), so two raw values can be the same name. `null`: a boolean
    mask of rows that have no string.
    """
    distinct, inverse = np.unique(raw, return_inverse=True)
    names: dict[str, int] = {}
    remap = np.array(  # per distinct raw value, not per row
        [names.setdefault(bytes(b).split(b"\0", 1)[0].decode(errors="replace"), len(names)) for b in distinct],
        dtype=np.int32,
    )
    indices = pa.array(remap[inverse.reshape(-1)] if len(remap) else np.zeros(0, np.int32), mask=null)
    return pa.DictionaryArray.from_arrays(indices, pa.array(list(names), type=pa.string()))


def _dict(values: np.ndarray) -> pa.Array:
    return pa.array(values, type=pa.string()).dictionary_encode()


def _nullable(values: np.ndarray, unknown: int = -1) -> pa.Array:
    """-1 (the probes' "not known") -> null."""
    return pa.array(values, mask=values == unknown)


def decode_events(
    records: np.ndarray,
    rules: PrevStateRules = DEFAULT_RULES,
    ksym: Callable[[int], str | None] | None = None,
) -> dict[str, pa.Table]:
    """Tables from a batch of raw records (EVENT_DTYPE). Only tables with rows are returned."""
    out: dict[str, pa.Table] = {}
    kind = records["kind"]

    sw = records[kind == KIND_SWITCH]
    if len(sw):
        state = sw["x"]
        out["sched_switch"] = pa.table(
            {
                "t_ns": sw["t_ns"].astype(np.int64),
                "cpu": sw["cpu"].astype(np.int16),
                "prev_tid": sw["tid"],
                "prev_pid": _nullable(sw["pid"]),
                "prev_comm": _strings(sw["comm"]),
                "prev_prio": sw["a"].astype(np.int16),
                "prev_state": state,
                "prev_state_char": _dict(decode_prev_state(state, rules)),
                "next_tid": sw["tid2"],
                "next_pid": _nullable(sw["pid2"]),
                "next_comm": _strings(sw["comm2"]),
                "next_prio": sw["b"].astype(np.int16),
            },
            schema=SCHED_SWITCH_SCHEMA,
        )

    wk = records[(kind == KIND_WAKING) | (kind == KIND_WAKEUP) | (kind == KIND_WAKEUP_NEW)]
    if len(wk):
        wkind = wk["kind"]
        has_waker = wkind != KIND_WAKEUP
        context = np.where(has_waker, wk["z"], 0)
        context_names = np.array([CONTEXT_NAMES.get(int(c), str(int(c))) for c in range(4)], dtype=object)
        ctx_text = np.where(has_waker, context_names[np.clip(context, 0, 3).astype(np.int64)], NONE_OBJECT)
        functions = np.full(len(wk), None, dtype=object)
        hr = np.flatnonzero(has_waker & (context == 3) & (wk["x"] != 0))
        if len(hr):
            distinct, inverse = np.unique(wk["x"][hr].view(np.uint64), return_inverse=True)
            names = [(ksym(int(a)) if ksym else None) or hex(int(a)) for a in distinct]  # per distinct symbol
            functions[hr] = np.array(names, dtype=object)[inverse.reshape(-1)]
        kind_text = np.select(
            [wkind == KIND_WAKING, wkind == KIND_WAKEUP], ["waking", "wakeup"], default="wakeup_new"
        ).astype(object)
        out["sched_wakeup"] = pa.table(
            {
                "t_ns": wk["t_ns"].astype(np.int64),
                "cpu": wk["cpu"].astype(np.int16),
                "kind": _dict(kind_text),
                "tid": wk["tid"],
                "pid": _nullable(wk["pid"]),
                "comm": _strings(wk["comm"]),
                "prio": wk["a"].astype(np.int16),
                "target_cpu": wk["b"].astype(np.int16),
                "waker_tid": pa.array(wk["tid2"], mask=~has_waker),
                "waker_pid": pa.array(wk["pid2"], mask=~has_waker),
                "waker_comm": _strings(wk["comm2"], null=~has_waker),
                "waker_context": _dict(ctx_text),
                "waker_function": pa.array(functions, type=pa.string()).dictionary_encode(),
            },
            schema=SCHED_WAKEUP_SCHEMA,
        )

    pf = records[kind == KIND_PAGE_FAULT]
    if len(pf):
        out["page_faults"] = pa.table(
            {
                "t_ns": pf["t_ns"].astype(np.int64),
                "cpu": pf["cpu"].astype(np.int16),
                "tid": pf["tid"],
                "pid": _nullable(pf["pid"]),
                "address": pf["x"].view(np.uint64),
                "ip": pf["y"],
                "error_code": pf["z"].astype(np.int64),
            },
            schema=PAGE_FAULTS_SCHEMA,
        )

    rq = records[(kind == KIND_RQ_ISSUE) | (kind == KIND_RQ_COMPLETE)]
    if len(rq):
        issue = rq["kind"] == KIND_RQ_ISSUE
        dev = rq["y"].astype(np.uint32)
        out["block_rq"] = pa.table(
            {
                "t_ns": rq["t_ns"].astype(np.int64),
                "cpu": rq["cpu"].astype(np.int16),
                "kind": _dict(np.where(issue, "issue", "complete").astype(object)),
                "dev": dev,
                # The kernel's internal dev_t (MINORBITS = 20, include/linux/kdev_t.h), as block tracepoints print it.
                "major": (dev >> 20).astype(np.int32),
                "minor": (dev & 0xFFFFF).astype(np.int32),
                "sector": rq["x"].view(np.uint64),
                "nr_sector": rq["a"].astype(np.int64),
                "bytes": pa.array(rq["b"].astype(np.int64), mask=~issue),
                "rwbs": _strings(rq["comm"]),
                "error": pa.array(rq["b"], mask=issue),
                "tid": _nullable(rq["tid"]),
                "pid": _nullable(rq["pid"]),
                "comm": _strings(rq["comm2"], null=~issue),
            },
            schema=BLOCK_RQ_SCHEMA,
        )
    return out


def lost_table(t_ns: int, lost: Mapping[str, int]) -> pa.Table:
    names = sorted(lost)
    return pa.table(
        {"t_ns": [t_ns] * len(names), "kind": names, "lost_total": [lost[n] for n in names]},
        schema=pa.schema([("t_ns", pa.int64()), ("kind", pa.string()), ("lost_total", pa.int64())]),
    ).cast(EBPF_LOST_SCHEMA)
