"""taskstats: the struct parsed by version and length, the netlink envelope, and real threads (root)."""

from __future__ import annotations

import os
import struct
import threading
import time
from pathlib import Path

import pytest

from samplers import taskstats as ts
from samplers.sysctl_guard import SysctlGuard, read_sysctl

# Offsets of struct taskstats version 16 on 64-bit, written out by hand from include/uapi/linux/taskstats.h
# (independent of the layout code under test).
V16_OFFSETS = {
    "version": (0, "H"),
    "cpu_count": (16, "Q"),
    "cpu_delay_total": (24, "Q"),
    "blkio_count": (32, "Q"),
    "blkio_delay_total": (40, "Q"),
    "swapin_count": (48, "Q"),
    "swapin_delay_total": (56, "Q"),
    "cpu_run_real_total": (64, "Q"),
    "ac_pid": (128, "I"),
    "ac_ppid": (132, "I"),
    "ac_utime": (152, "Q"),
    "ac_minflt": (168, "Q"),
    "ac_majflt": (176, "Q"),
    "read_bytes": (248, "Q"),
    "write_bytes": (256, "Q"),
    "nvcsw": (272, "Q"),
    "nivcsw": (280, "Q"),
    "freepages_count": (312, "Q"),
    "freepages_delay_total": (320, "Q"),  # version 8 ends at 328
    "thrashing_count": (328, "Q"),
    "thrashing_delay_total": (336, "Q"),
    "compact_count": (352, "Q"),
    "compact_delay_total": (360, "Q"),
    "ac_tgid": (368, "I"),
    "wpcopy_count": (400, "Q"),
    "wpcopy_delay_total": (408, "Q"),
    "irq_count": (416, "Q"),
    "irq_delay_total": (424, "Q"),
    "cpu_delay_max": (432, "Q"),
    "blkio_delay_max": (448, "Q"),
    "irq_delay_min": (552, "Q"),
}


def canned_struct(version: int, size: int, offsets: dict[str, tuple[int, str]]) -> tuple[bytes, dict[str, int]]:
    buf = bytearray(size)
    values: dict[str, int] = {}
    for i, (name, (offset, fmt)) in enumerate(offsets.items()):
        if offset + struct.calcsize(fmt) > size:
            continue
        value = version if name == "version" else 1000 + 7 * i
        struct.pack_into("<" + fmt, buf, offset, value)
        values[name] = value
    return bytes(buf), values


def netlink_reply(stats: bytes, tid: int, family: int = 31, padding_attr: bool = False) -> bytes:
    def attr(kind: int, payload: bytes) -> bytes:
        length = 4 + len(payload)
        return struct.pack("<HH", length, kind) + payload + b"\0" * (-length % 4)

    nested = attr(ts.TASKSTATS_TYPE_PID, struct.pack("<I", tid)) + attr(ts.TASKSTATS_TYPE_STATS, stats)
    body = struct.pack("<BBH", 2, 1, 0)
    if padding_attr:
        body += attr(6, b"")  # TASKSTATS_TYPE_NULL, as some kernels send before the aggregate
    body += attr(ts.TASKSTATS_TYPE_AGGR_PID | 0x8000, nested)  # NLA_F_NESTED set
    return struct.pack("<IHHII", 16 + len(body), family, 0, 1, 0) + body


def test_v16_struct_fields_at_the_kernel_offsets() -> None:
    raw, values = canned_struct(16, 560, V16_OFFSETS)
    fields = ts.parse_taskstats(raw)
    for name, value in values.items():
        assert fields[name] == value, name
    assert fields["struct_len"] == 560
    assert "ac_comm" not in fields


def test_known_sizes_per_version() -> None:
    # Sizes of struct taskstats as each kernel version sends it.
    assert ts.struct_size(ts.LAYOUT_V16, "freepages_delay_total") == 328  # v7, v8
    assert ts.struct_size(ts.LAYOUT_V16, "thrashing_delay_total") == 344  # v9
    assert ts.struct_size(ts.LAYOUT_V16, "ac_btime64") == 352  # v10
    assert ts.struct_size(ts.LAYOUT_V16, "compact_delay_total") == 368  # v11
    assert ts.struct_size(ts.LAYOUT_V16, "ac_exe_inode") == 400  # v12
    assert ts.struct_size(ts.LAYOUT_V16, "wpcopy_delay_total") == 416  # v13
    assert ts.struct_size(ts.LAYOUT_V16, "irq_delay_total") == 432  # v14
    assert ts.struct_size(ts.LAYOUT_V16, "irq_delay_min") == 560  # v16
    assert ts.struct_size(ts.LAYOUT_V15, "irq_delay_min") == 560  # v15


def test_older_shorter_struct_returns_only_what_was_sent() -> None:
    raw, values = canned_struct(8, 328, V16_OFFSETS)
    fields = ts.parse_taskstats(raw)
    assert fields["version"] == 8
    assert fields["freepages_delay_total"] == values["freepages_delay_total"]
    assert fields["nvcsw"] == values["nvcsw"]
    for absent in (
        "thrashing_count",
        "compact_delay_total",
        "ac_tgid",
        "wpcopy_count",
        "irq_delay_total",
        "cpu_delay_max",
    ):
        assert absent not in fields, absent


def test_struct_cut_inside_a_field_drops_that_field() -> None:
    raw, _ = canned_struct(16, 560, V16_OFFSETS)
    fields = ts.parse_taskstats(raw[:372])  # ac_tgid (368..372) fits, ac_tgetime (376) does not
    assert "ac_tgid" in fields
    assert "ac_tgetime" not in fields and "wpcopy_count" not in fields


def test_version_15_has_max_min_in_the_middle() -> None:
    offsets = {
        "version": (0, "H"),
        "cpu_delay_total": (24, "Q"),
        "cpu_delay_max": (32, "Q"),
        "cpu_delay_min": (40, "Q"),
        "blkio_count": (48, "Q"),
        "blkio_delay_total": (56, "Q"),
        "blkio_delay_max": (64, "Q"),
        "swapin_delay_total": (88, "Q"),
        "cpu_run_real_total": (112, "Q"),
        "irq_count": (528, "Q"),
        "irq_delay_total": (536, "Q"),
        "irq_delay_max": (544, "Q"),
        "irq_delay_min": (552, "Q"),
    }
    raw, values = canned_struct(15, 560, offsets)
    fields = ts.parse_taskstats(raw)
    for name, value in values.items():
        assert fields[name] == value, name


def test_version_1_layout() -> None:
    offsets = {"version": (0, "H"), "cpu_count": (8, "Q"), "cpu_delay_total": (16, "Q"), "blkio_delay_total": (32, "Q")}
    raw, values = canned_struct(1, 72, offsets)
    fields = ts.parse_taskstats(raw)
    for name, value in values.items():
        assert fields[name] == value, name
    assert "nvcsw" not in fields


def test_reply_envelope() -> None:
    raw, values = canned_struct(16, 560, V16_OFFSETS)
    fields = ts.parse_reply(netlink_reply(raw, tid=4242, padding_attr=True))
    assert fields["tid"] == 4242
    assert fields["blkio_delay_total"] == values["blkio_delay_total"]


def test_error_reply_is_not_parsed_as_stats() -> None:
    error = struct.pack("<IHHII", 36, ts.NLMSG_ERROR, 0, 1, 0) + struct.pack("<i", -3) + bytes(16)
    with pytest.raises(ValueError, match="No such process"):
        ts.parse_reply(error)


def test_table_nulls_delay_columns_when_delayacct_was_off() -> None:
    raw, values = canned_struct(16, 560, V16_OFFSETS)
    reply = netlink_reply(raw, tid=77)
    on = ts.taskstats_table([(3, 1000, 77, reply), (4, 2000, 78, None)], delayacct=True).to_pylist()
    off = ts.taskstats_table([(3, 1000, 77, reply)], delayacct=False).to_pylist()
    assert len(on) == 1  # the vanished thread's row is dropped
    assert on[0]["blkio_delay_ns"] == values["blkio_delay_total"]
    assert on[0]["pid"] == values["ac_tgid"]
    assert off[0]["blkio_delay_ns"] is None and off[0]["irq_delay_ns"] is None
    assert off[0]["cpu_delay_ns"] == values["cpu_delay_total"]  # sched_info: valid without delayacct
    old = ts.taskstats_table([(1, 5, 9, netlink_reply(canned_struct(8, 328, V16_OFFSETS)[0], tid=9))], True).to_pylist()
    assert old[0]["pid"] is None and old[0]["compact_delay_ns"] is None and old[0]["freepages_delay_ns"] is not None


# --------------------------------------------------------------------------------------------------
# Real threads (root: TASKSTATS_CMD_GET needs CAP_NET_ADMIN)

root = pytest.mark.needs_root  # taskstats queries need CAP_NET_ADMIN


def _proc_status(tid: int) -> dict[str, str]:
    lines = Path(f"/proc/self/task/{tid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


@root
def test_real_thread_matches_proc() -> None:
    stop = threading.Event()
    started = threading.Event()
    tid_box: list[int] = []

    def blocked() -> None:
        tid_box.append(threading.get_native_id())
        for _ in range(5):
            time.sleep(0.001)
        started.set()
        stop.wait()

    thread = threading.Thread(target=blocked)
    thread.start()
    started.wait()
    time.sleep(0.02)  # it is asleep in stop.wait(): its counters hold still
    tid = tid_box[0]
    try:
        with ts.TaskstatsClient() as client:
            fields = client.query(tid)
        schedstat = Path(f"/proc/self/task/{tid}/schedstat").read_text().split()
        stat = Path(f"/proc/self/task/{tid}/stat").read_bytes()
        status = _proc_status(tid)
    finally:
        stop.set()
        thread.join()
    assert fields is not None
    assert fields["ac_pid"] == tid and fields["tid"] == tid
    assert fields["ac_tgid"] == os.getpid()
    assert fields["ac_ppid"] == os.getppid()
    # cpu_count / cpu_delay_total are sched_info's pcount / run_delay: schedstat's fields 3 and 2.
    assert fields["cpu_count"] == int(schedstat[2])
    assert fields["cpu_delay_total"] == int(schedstat[1])
    assert fields["cpu_run_virtual_total"] == int(schedstat[0])  # se.sum_exec_runtime, exact ns
    assert fields["nvcsw"] == int(status["voluntary_ctxt_switches"])
    assert fields["nivcsw"] == int(status["nonvoluntary_ctxt_switches"])
    tail = stat[stat.rfind(b")") + 2 :].split()
    assert fields["ac_minflt"] == int(tail[7])
    assert fields["ac_majflt"] == int(tail[9])


@root
def test_gone_thread_is_none() -> None:
    box: list[int] = []
    thread = threading.Thread(target=lambda: box.append(threading.get_native_id()))
    thread.start()
    thread.join()
    time.sleep(0.01)
    with ts.TaskstatsClient() as client:
        assert client.query_raw(box[0]) is None


@root
def test_cpu_count_grows_with_switches() -> None:
    done = threading.Event()
    box: list[int] = []
    go = threading.Event()

    def worker() -> None:
        box.append(threading.get_native_id())
        go.wait()
        for _ in range(20):
            # Spun on the thread's own CPU clock: 0.5 ms of CPU each time however busy the machine
            # (a wall-clock spin preempted halfway would run less than the assertion below expects).
            end = time.thread_time() + 0.0005
            while time.thread_time() < end:
                pass
            time.sleep(0.001)
        done.set()
        release.wait()  # stay alive for the last query

    release = threading.Event()
    thread = threading.Thread(target=worker)
    thread.start()
    while not box:
        time.sleep(0.001)
    with ts.TaskstatsClient() as client:
        before = client.query(box[0])
        go.set()
        done.wait()
        after = client.query(box[0])
    release.set()
    thread.join()
    assert before is not None and after is not None
    assert after["cpu_count"] - before["cpu_count"] >= 20  # one switch-in per sleep at least
    # cpu_run_virtual_total is exact ns (sum_exec_runtime); cpu_run_real_total moves in ticks only.
    assert after["cpu_run_virtual_total"] > before["cpu_run_virtual_total"] + 20 * 400_000


FSYNC_BYTES = 4 << 20


def _fsync_thread(directory: Path) -> tuple[int, dict[str, int], dict[str, int]]:
    box: list[int] = []
    results: dict[str, dict[str, int]] = {}
    go = threading.Event()
    done = threading.Event()

    def worker() -> None:
        box.append(threading.get_native_id())
        go.wait()
        path = directory / "fsync.bin"
        # 4 MiB per fsync: on a fast virtual disk a 256 KiB write-back could complete before the thread
        # waited for it (CI saw no blkio wait at all for four of them); 4 MiB is several requests.
        with open(path, "wb", buffering=0) as fh:
            for _ in range(4):
                fh.write(os.urandom(FSYNC_BYTES))
                os.fsync(fh.fileno())
        done.set()
        release.wait()  # stay alive for the last query

    release = threading.Event()
    thread = threading.Thread(target=worker)
    thread.start()
    while not box:
        time.sleep(0.001)
    with ts.TaskstatsClient() as client:
        results["before"] = client.query(box[0]) or {}
        go.set()
        done.wait()
        results["after"] = client.query(box[0]) or {}
    release.set()
    thread.join()
    return box[0], results["before"], results["after"]


@root
def test_fsync_shows_blkio_delay_with_delayacct(tmp_path: Path) -> None:
    with SysctlGuard({"kernel.task_delayacct": "1"}, state_dir=tmp_path / "state") as guard:
        assert guard.outcomes["kernel.task_delayacct"].in_force
        _, before, after = _fsync_thread(tmp_path)
    assert after["blkio_count"] - before["blkio_count"] >= 1
    assert after["blkio_delay_total"] - before["blkio_delay_total"] > 0
    assert after["write_bytes"] - before["write_bytes"] >= 4 * FSYNC_BYTES


@pytest.mark.may_skip
@root
def test_fsync_shows_no_blkio_delay_without_delayacct(tmp_path: Path) -> None:
    if read_sysctl("kernel.task_delayacct") != "0":
        pytest.skip("kernel.task_delayacct is on for the whole machine: nothing to contrast")
    _, before, after = _fsync_thread(tmp_path)
    # Delay accounting off: the kernel's blkio figures do not move, which is why taskstats_table nulls them.
    assert after["blkio_delay_total"] == before["blkio_delay_total"]
    assert after["write_bytes"] - before["write_bytes"] >= 4 * FSYNC_BYTES  # the IO did happen


def test_batch_parse_matches_one_by_one() -> None:
    v16, _ = canned_struct(16, 560, V16_OFFSETS)
    v8, _ = canned_struct(8, 328, V16_OFFSETS)
    raws = [netlink_reply(v16, 1), netlink_reply(v8, 2), netlink_reply(v16, 3, padding_attr=True)]
    batch = ts.parse_replies(raws)
    for i, raw in enumerate(raws):
        single = ts.parse_reply(raw)
        for name, value in single.items():
            if name in ("tid", "tgid"):
                continue
            assert batch[name][i] == value, (i, name)
        for name, values in batch.items():
            if name not in single:
                assert values[i] != values[i], (i, name)  # NaN: the field is not in that struct


def test_threads_older_than_the_switch_get_null_delays() -> None:
    # ac_etime (us since the thread started) = 2000 us at t = 10 ms: it started at 8 ms.
    offsets = dict(V16_OFFSETS, ac_etime=(144, "Q"))
    buf = bytearray(canned_struct(16, 560, offsets)[0])
    struct.pack_into("<Q", buf, 144, 2000)
    reply = netlink_reply(bytes(buf), 5)
    before_switch = ts.taskstats_table([(1, 10_000_000, 5, reply)], True, delayacct_since_ns=9_000_000).to_pylist()
    after_switch = ts.taskstats_table([(1, 10_000_000, 5, reply)], True, delayacct_since_ns=7_000_000).to_pylist()
    assert before_switch[0]["blkio_delay_ns"] is None and before_switch[0]["cpu_delay_ns"] is not None
    assert after_switch[0]["blkio_delay_ns"] is not None


@pytest.mark.may_skip
@root
def test_delayacct_covers_only_threads_created_after_the_switch(tmp_path: Path) -> None:
    if read_sysctl("kernel.task_delayacct") != "0":
        pytest.skip("kernel.task_delayacct is already on: no thread predates the switch")
    old_box: list[int] = []
    old_go, old_done, release = threading.Event(), threading.Event(), threading.Event()

    def old_worker() -> None:
        old_box.append(threading.get_native_id())
        old_go.wait()
        with open(tmp_path / "old.bin", "wb", buffering=0) as fh:
            for _ in range(4):
                fh.write(os.urandom(256 * 1024))
                os.fsync(fh.fileno())
        old_done.set()
        release.wait()

    old = threading.Thread(target=old_worker, daemon=True)
    old.start()  # created while delay accounting is off
    while not old_box:
        time.sleep(0.001)
    with (
        SysctlGuard({"kernel.task_delayacct": "1"}, state_dir=tmp_path / "state") as guard,
        ts.TaskstatsClient() as client,
    ):
        since = guard.outcomes["kernel.task_delayacct"].at_ns
        assert since is not None
        rows = [(0, time.monotonic_ns(), old_box[0], client.query_raw(old_box[0]))]
        old_go.set()
        old_done.wait()
        _, new_before, new_after = _fsync_thread(tmp_path)  # created after the switch
        rows.append((1, time.monotonic_ns(), old_box[0], client.query_raw(old_box[0])))
    release.set()
    old.join()
    assert new_after["blkio_count"] - new_before["blkio_count"] >= 4  # the new thread is accounted
    old_fields = ts.parse_reply(rows[-1][3] or b"")
    assert old_fields["blkio_count"] == 0 and old_fields["write_bytes"] >= 4 * 256 * 1024  # IO done, none counted
    table = ts.taskstats_table(rows, True, delayacct_since_ns=since).to_pylist()
    assert all(r["blkio_delay_ns"] is None and r["blkio_count"] is None for r in table)  # unknown, not 0


def test_comm() -> None:
    raw = bytearray(canned_struct(16, 560, V16_OFFSETS)[0])
    raw[80 : 80 + 10] = b"lab-audio\0"  # ac_comm[32] at offset 80
    assert ts.parse_comm(bytes(raw)) == "lab-audio"
    assert ts.parse_comm(bytes(raw[:100])) is None  # cut inside ac_comm
