"""eBPF backend pieces that need no kernel: the header stub, prev_state rules, event decoding, bcc import."""

from __future__ import annotations

import gzip
import os
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from capture.format import EBPF_SCHEMAS
from samplers.ebpf import kernel_stub, tables
from samplers.ebpf.bcc_import import BccUnavailable, import_bcc
from samplers.ebpf.tracefs import DEFAULT_RULES, decode_one, decode_prev_state, eval_const_expr, prev_state_rules

DATA = Path(__file__).parent / "data"

CONFIG = """\
#
# Automatically generated file; DO NOT EDIT.
CONFIG_CC_VERSION_TEXT="gcc (Debian 12.2.0-14) 12.2.0"
CONFIG_64BIT=y
CONFIG_HZ=250
CONFIG_NR_CPUS=64
CONFIG_BTRFS_FS=m
# CONFIG_SCHEDSTATS is not set
CONFIG_LOCALVERSION=""
"""

# A 4.x-era sched_switch print fmt: TASK_STATE_MAX 1024 as the preempt bit, letters up to "P".
OLD_FORMAT = (
    'print fmt: "prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%s%s ==> next_comm=%s next_pid=%d next_prio=%d", '
    "REC->prev_comm, REC->prev_pid, REC->prev_prio, REC->prev_state & (1024-1) ? "
    '__print_flags(REC->prev_state & (1024-1), "|", { 1, "S"} , { 2, "D" }, { 4, "T" }, { 8, "t" }, { 16, "Z" }, '
    '{ 32, "X" }, { 64, "x" }, { 128, "K" }, { 256, "W" }, { 512, "P" }) : "R", '
    'REC->prev_state & 1024 ? "+" : "", REC->next_comm, REC->next_pid, REC->next_prio\n'
)


def test_autoconf_from_config() -> None:
    text = kernel_stub.autoconf_h(CONFIG)
    assert "#define CONFIG_64BIT 1\n" in text
    assert "#define CONFIG_HZ 250\n" in text
    assert "#define CONFIG_BTRFS_FS_MODULE 1\n" in text
    assert '#define CONFIG_CC_VERSION_TEXT "gcc (Debian 12.2.0-14) 12.2.0"\n' in text
    assert "SCHEDSTATS" not in text  # "is not set" defines nothing


def test_version_code() -> None:
    assert kernel_stub.linux_version_code("6.18.44-fc-v657") == (6 << 16) + (18 << 8) + 44
    assert kernel_stub.linux_version_code("5.10.300-rt") == (5 << 16) + (10 << 8) + 255  # capped like the kernel
    assert kernel_stub.linux_version_code("6.1") == (6 << 16) + (1 << 8)
    with pytest.raises(ValueError):
        kernel_stub.linux_version_code("unknown")


def test_stub_tree_built_once_per_kernel_and_config(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "config.gz").write_bytes(gzip.compress(CONFIG.encode()))
    tree = kernel_stub.build_stub_tree(tmp_path / "cache", proc=str(proc), release="6.18.44-test")
    assert tree.name.startswith("6.18.44-test-")
    autoconf = (tree / "include/generated/autoconf.h").read_text()
    assert "#define CONFIG_HZ 250" in autoconf
    assert "LINUX_VERSION_CODE 397868" in (tree / "include/linux/version.h").read_text()
    for rel in (
        "include/linux/kconfig.h",
        "include/linux/types.h",
        "include/linux/log2.h",
        "include/linux/bpf_common.h",
        "include/uapi/linux/bpf.h",
    ):
        assert (tree / rel).is_file(), rel
    assert list(tree.glob("arch/*/include/asm/page.h"))
    assert "uintptr_t" in (tree / "include/linux/types.h").read_text()  # BCC 0.26's helpers.h needs it
    # Same kernel and config: the same tree; another config: another tree.
    assert kernel_stub.build_stub_tree(tmp_path / "cache", proc=str(proc), release="6.18.44-test") == tree
    (proc / "config.gz").write_bytes(gzip.compress((CONFIG + "CONFIG_SCHEDSTATS=y\n").encode()))
    other = kernel_stub.build_stub_tree(tmp_path / "cache", proc=str(proc), release="6.18.44-test")
    assert other != tree and "CONFIG_SCHEDSTATS 1" in (other / "include/generated/autoconf.h").read_text()


def test_stub_refused_without_config(tmp_path: Path) -> None:
    with pytest.raises(kernel_stub.StubUnavailable, match="config"):
        kernel_stub.build_stub_tree(tmp_path / "cache", proc=str(tmp_path), release="0.0.0-none")


def test_const_expr() -> None:
    assert eval_const_expr("((((0x00000000 | 0x00000001 | 0x00000002) + 1) << 1) - 1)") == 7
    assert eval_const_expr("(2048-1)") == 2047
    with pytest.raises(ValueError):
        eval_const_expr("__import__('os')")


def test_rules_of_this_kernel_format() -> None:
    rules = prev_state_rules((DATA / "sched_switch_format_6.18.txt").read_text())
    assert rules.source == "format"
    assert rules.preempt_mask == 0x100
    assert rules.state_mask == 0xFF
    assert rules.letters[0x1] == "S" and rules.letters[0x2] == "D" and rules.letters[0x80] == "I"
    assert list(decode_prev_state([0, 1, 2, 0x100, 0x80, 0x101], rules)) == ["R", "S", "D", "R+", "I", "S+"]


def test_rules_of_an_old_kernel_format() -> None:
    rules = prev_state_rules(OLD_FORMAT)
    assert rules.preempt_mask == 1024
    assert rules.state_mask == 1023
    assert decode_one(1024, rules) == "R+"
    assert decode_one(130, rules) == "D|K"
    assert decode_one(0, rules) == "R"
    # The same raw value means different things on the two kernels: why the rules travel with the capture.
    assert decode_one(0x100, rules) == "W" and decode_one(0x100, DEFAULT_RULES) == "R+"


def test_rules_refuse_an_unreadable_format() -> None:
    with pytest.raises(ValueError):
        prev_state_rules('print fmt: "prev_state=%d", REC->prev_state')


def _records(rows: list[dict[str, object]]) -> np.ndarray:
    rec = np.zeros(len(rows), dtype=tables.EVENT_DTYPE)
    for i, row in enumerate(rows):
        for key, value in row.items():
            rec[key][i] = value
    return rec


def test_decode_events_into_tables() -> None:
    rec = _records(
        [
            {
                "t_ns": 100,
                "kind": tables.KIND_SWITCH,
                "cpu": 1,
                "tid": 11,
                "pid": 10,
                "tid2": 0,
                "pid2": -1,
                "a": 120,
                "b": 120,
                "x": 2,
                "comm": b"audio\0junk",
                "comm2": b"swapper/1",
            },
            {
                "t_ns": 200,
                "kind": tables.KIND_WAKING,
                "cpu": 0,
                "tid": 11,
                "pid": 10,
                "tid2": 12,
                "pid2": 10,
                "a": 120,
                "b": 1,
                "z": 0,
                "comm": b"audio",
                "comm2": b"worker",
            },
            {
                "t_ns": 210,
                "kind": tables.KIND_WAKING,
                "cpu": 0,
                "tid": 11,
                "pid": 10,
                "tid2": 0,
                "pid2": 0,
                "a": 120,
                "b": 1,
                "z": 3,
                "x": 0xFFFF0000,
                "comm": b"audio",
                "comm2": b"swapper/0",
            },
            {
                "t_ns": 220,
                "kind": tables.KIND_WAKEUP,
                "cpu": 1,
                "tid": 11,
                "pid": 10,
                "tid2": -1,
                "pid2": -1,
                "a": 120,
                "b": 1,
                "comm": b"audio",
            },
            {
                "t_ns": 300,
                "kind": tables.KIND_PAGE_FAULT,
                "cpu": 1,
                "tid": 11,
                "pid": 10,
                "x": 0x7F0000001000,
                "y": 0x400000,
                "z": 6,
            },
            {
                "t_ns": 400,
                "kind": tables.KIND_RQ_ISSUE,
                "cpu": 0,
                "tid": 13,
                "pid": 10,
                "a": 16,
                "b": 8192,
                "x": 4096,
                "y": (254 << 20) | 3,
                "comm": b"WS\0\x07",
                "comm2": b"io",
            },
            {
                "t_ns": 450,
                "kind": tables.KIND_RQ_COMPLETE,
                "cpu": 1,
                "tid": 13,
                "pid": 10,
                "a": 16,
                "b": 0,
                "x": 4096,
                "y": (254 << 20) | 3,
                "comm": b"WS",
            },
        ]
    )
    out = tables.decode_events(rec, ksym=lambda addr: "hrtimer_wakeup" if addr == 0xFFFF0000 else None)
    sw = out["sched_switch"].to_pylist()[0]
    assert sw["prev_comm"] == "audio" and sw["prev_state_char"] == "D" and sw["next_pid"] is None
    wk = out["sched_wakeup"].to_pylist()
    assert [w["kind"] for w in wk] == ["waking", "waking", "wakeup"]
    assert wk[0]["waker_tid"] == 12 and wk[0]["waker_comm"] == "worker" and wk[0]["waker_context"] == "task"
    assert wk[1]["waker_context"] == "hrtimer" and wk[1]["waker_function"] == "hrtimer_wakeup"
    assert wk[2]["waker_tid"] is None and wk[2]["waker_comm"] is None and wk[2]["waker_context"] is None
    pf = out["page_faults"].to_pylist()[0]
    assert pf["address"] == 0x7F0000001000 and pf["error_code"] == 6
    rq = out["block_rq"].to_pylist()
    assert rq[0]["kind"] == "issue" and rq[0]["major"] == 254 and rq[0]["minor"] == 3 and rq[0]["bytes"] == 8192
    assert rq[0]["rwbs"] == "WS" and rq[1]["rwbs"] == "WS"  # stale bytes after the NUL do not make a new name
    assert rq[1]["kind"] == "complete" and rq[1]["error"] == 0 and rq[1]["bytes"] is None and rq[1]["tid"] == 13
    for name, table in out.items():
        assert table.schema == EBPF_SCHEMAS[name], name


def test_event_dtype_mirrors_the_c_struct() -> None:
    source = (Path(tables.__file__).parent / "probes.bpf.c").read_text()
    body = source[source.index("struct event {") : source.index("};", source.index("struct event {"))]
    sizes = {"u64": 8, "s64": 8, "u32": 4, "s32": 4, "char": 1}
    fields = re.findall(r"^\s*(u64|s64|u32|s32|char)\s+(\w+)(?:\[(\d+)\])?;", body, re.MULTILINE)
    c_layout = [(name, sizes[ctype] * int(count or 1)) for ctype, name, count in fields]
    py_layout = [(name, tables.EVENT_DTYPE.fields[name][0].itemsize) for name in tables.EVENT_DTYPE.names]
    assert c_layout == py_layout
    assert sum(size for _, size in c_layout) == tables.EVENT_SIZE  # no padding: every field is naturally aligned


def test_pypi_bcc_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    impostor = types.ModuleType("bcc")  # PyPI's `bcc` is a lattice library: no BPF, no lib
    monkeypatch.setitem(sys.modules, "bcc", impostor)
    with pytest.raises(BccUnavailable, match="not BCC"):
        import_bcc()


def test_no_bcc_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from samplers.ebpf import bcc_import

    monkeypatch.delitem(sys.modules, "bcc", raising=False)
    monkeypatch.setattr(bcc_import, "SYSTEM_BCC_DIRS", (str(tmp_path / "nowhere"),))
    monkeypatch.setattr(bcc_import, "_system_bcc_dir", lambda: None)
    with pytest.raises(BccUnavailable) as err:
        import_bcc(tmp_path)
    assert "apt-get install python3-bpfcc" in str(err.value) and "\n" not in str(err.value)


def _slots(*phases_switches: tuple[int, int]) -> bytes:
    """Slots as the probes keep them: thread 100 + i in phase p after s switches."""
    from samplers.ebpf.sampler import SLOT

    return b"".join(
        SLOT.pack(1000 * s, 10 * s, 5, s, 0, 7 * s, 100 + i, 1, 0, p, 0, 0) for i, (p, s) in enumerate(phases_switches)
    )


def test_a_sleeping_threads_stat_is_read_again_only_when_its_slot_moved_or_the_refresh_is_due() -> None:
    from samplers.ebpf.sampler import PHASE_OFF, PHASE_ON_CPU, PHASE_RUNNABLE, PHASE_UNKNOWN, StatChoice

    choice = StatChoice(refresh_ns=1_000)
    live = _slots((PHASE_OFF, 3), (PHASE_OFF, 4), (PHASE_ON_CPU, 5), (PHASE_RUNNABLE, 6), (PHASE_UNKNOWN, 0))
    every = [0, 1, 2, 3, 4, -1]  # the last thread has no slot

    def due(slots: list[int], live: bytes, now_ns: int) -> list[bool]:
        return [choice.due(slot, live, now_ns) for slot in slots]

    assert all(due(every, live, 0))  # never read yet
    # Unchanged: the two asleep are skipped; one on a CPU, runnable, not seen yet or without a slot is read.
    assert due(every, live, 500) == [False, False, True, True, True, True]
    assert choice.skipped == 2
    moved = live[:64] + _slots((PHASE_OFF, 0), (PHASE_OFF, 5))[64:] + live[128:]  # 1 ran meanwhile
    assert due(every, moved, 600) == [False, True, True, True, True, True]
    assert due([0, 1], moved, 1_000) == [True, False]  # 0: the refresh (a policy set from outside); 1: read at 600
    choice.read(1, moved, 700)  # a new thread's read
    assert due([1], moved, 1_650) == [False]
    assert due([1], moved, 1_700) == [True]


def test_the_stat_frame_reads_only_the_threads_stat_choice_says_can_have_changed(tmp_path: Path) -> None:
    from samplers import frames
    from samplers.ebpf.sampler import PHASE_OFF, PHASE_ON_CPU, STAT_REFRESH_NS, EbpfTicker

    class Sampler:  # the slots without a kernel: what the probes would have written
        def __init__(self) -> None:
            self.slot_by_tid = {100: 0, 101: 1, 102: 2}
            self.live = _slots((PHASE_OFF, 3), (PHASE_ON_CPU, 4), (PHASE_OFF, 5))

        def read(self) -> bytes:
            return self.live

    ticker = EbpfTicker(2_000_000, slots=8)
    sampler = Sampler()
    ticker.sampler = sampler  # type: ignore[assignment]
    ticker.stat_every_ticks = 1  # every thread's turn at every call
    fds = []
    for tid in (100, 101, 102):
        (tmp_path / str(tid)).write_text(f"{tid} (t) S 1 2 3\n")
        fds.append(os.open(tmp_path / str(tid), os.O_RDONLY))
    try:
        ticker.layout([100, 101, 102], fds)
        now = [0]

        def read_indices() -> list[int]:
            data, dead = ticker.stat_frame(0, 1, lambda: now[0])
            assert not dead
            if not data:
                return []
            payload = data[frames.FRAME.size :]
            count = frames.EBPF_TICK_HEADER.unpack_from(payload)[3]
            return list(np.frombuffer(payload, "<u4", count, frames.EBPF_TICK_HEADER.size))

        assert read_indices() == [0, 1, 2]
        now[0] = 250_000_000
        assert read_indices() == [1]  # asleep and unchanged: not read again
        sampler.live = _slots((PHASE_OFF, 3), (PHASE_ON_CPU, 4), (PHASE_OFF, 6))
        now[0] = 500_000_000
        assert read_indices() == [1, 2]
        now[0] = STAT_REFRESH_NS
        assert read_indices() == [0, 1]
        assert ticker.reads == 8
    finally:
        for fd in fds:
            os.close(fd)
