"""The PipeWire profiler records, canned: the POD wire format (0.3.65's module-profiler.c) and the rows
made from complete, unfinished and repeated records."""

from __future__ import annotations

import struct

from samplers.engine import spa_pod as pod
from samplers.engine.pipewire import (
    PROFILER_CLOCK,
    PROFILER_DRIVER_BLOCK,
    PROFILER_FOLLOWER_BLOCK,
    PROFILER_INFO,
    Block,
    ProfileTables,
    Record,
    block_from_fields,
    parse_profile,
    socket_path,
)

P = 5_333_333
OBJECT_PROFILER = 0x40000 + 10  # spa/utils/type.h: SPA_TYPE_OBJECT_Profiler


def _pod(kind: int, body: bytes) -> bytes:
    return struct.pack("<II", len(body), kind) + body + b"\0" * (-len(body) % 8)


def _long(v: int) -> bytes:
    return _pod(pod.LONG, struct.pack("<q", v))


def _float(v: float) -> bytes:
    return _pod(pod.FLOAT, struct.pack("<f", v))


def _fraction(num: int, denom: int) -> bytes:
    return _pod(pod.FRACTION, struct.pack("<II", num, denom))


def _object(props: list[tuple[int, bytes]]) -> bytes:
    body = struct.pack("<II", OBJECT_PROFILER, 0)
    for key, value in props:
        body += struct.pack("<II", key, 0) + value
    return _pod(pod.OBJECT, body)


def _block(node_id: int, name: str, prev: int, signal: int, awake: int, finish: int, status: int) -> bytes:
    return pod.struct_(
        pod.int_(node_id),
        pod.string(name),
        *(_long(v) for v in (prev, signal, awake, finish)),
        pod.int_(status),
        _fraction(256, 48000),
    )


def _wire_record(count: int, xruns: int) -> bytes:
    info = pod.struct_(_long(count), _float(0.1), _float(0.2), _float(0.3), pod.int_(xruns))
    clock = pod.struct_(
        pod.int_(0),
        pod.int_(27),
        pod.string("clock.system.monotonic"),
        _long(1_000_000),
        _fraction(1, 48000),
        _long(256 * count),
        _long(256),
        _long(0),
        _pod(pod.DOUBLE, struct.pack("<d", 1.0)),
        _long(1_000_000 + P),
    )
    return _object(
        [
            (PROFILER_INFO, info),
            (PROFILER_CLOCK, clock),
            (PROFILER_DRIVER_BLOCK, _block(27, "Dummy-Driver", 0, 1_020_000, 1_300_000, 1_300_100, 3)),
            (PROFILER_FOLLOWER_BLOCK, _block(31, "a", 1_020_000, 1_021_000, 1_050_000, 1_100_000, 3)),
            (PROFILER_FOLLOWER_BLOCK, _block(32, "b", 1_020_000, 1_100_500, 1_150_000, 1_290_000, 3)),
        ]
    )


def test_profile_event_wire_format() -> None:
    # The profile event: Struct(Pod), the Pod a Struct of one Profiler object per cycle.
    event = pod.struct_(pod.struct_(_wire_record(7, 0), _wire_record(8, 1)))
    value, end = pod.parse(event)
    assert end == len(event)
    records = parse_profile(value[0])
    assert [r.count for r in records] == [7, 8]
    rec = records[1]
    assert rec.xrun_count == 1 and rec.has_latency
    assert (rec.clock_name, rec.clock_nsec, rec.rate_denom, rec.duration) == (
        "clock.system.monotonic",
        1_000_000,
        48000,
        256,
    )
    assert rec.driver == Block(27, "Dummy-Driver", 0, 1_020_000, 1_300_000, 1_300_100, 3)
    assert [(f.id, f.name, f.finish) for f in rec.followers] == [(31, "a", 1_100_000), (32, "b", 1_290_000)]


def _rec(driver: Block, followers: list[Block], clock_ns: int, xruns: int = 0, count: int = 0) -> Record:
    return Record(
        count, (0.1, 0.1, 0.1), xruns, "clock.system.monotonic", clock_ns, 48000, 256, clock_ns + P, driver, followers
    )


def test_complete_cycle_rows() -> None:
    tables = ProfileTables()
    start = 10_000_000
    driver = Block(27, "Dummy-Driver", start - P, start, start + 400_000, start + 400_100, 3)
    tables.add(_rec(driver, [Block(31, "a", start, start + 1_000, start + 50_000, start + 300_000, 3)], start - 30_000))
    out = tables.take()
    cyc = out["engine_cycles"]
    assert cyc["t_ns"] == [start] and cyc["end_ns"] == [start + 300_000] and cyc["delay_ns"] == [30_000]
    assert cyc["period_ns"] == [P] and cyc["quantum_frames"] == [256] and cyc["rate_hz"] == [48000]
    assert out["engine_nodes"]["xrun"] == [False] and out["engine_nodes"]["finish_ns"] == [start + 300_000]
    assert "xruns" not in out


def test_unfinished_cycle_is_an_xrun_naming_the_late_node_and_gets_its_late_finish() -> None:
    tables = ProfileTables()
    s0 = 10_000_000
    s1 = s0 + P
    # Cycle s0: node a woke and is still running when the driver starts s1 (`incomplete`: the driver's
    # finish holds s0, its clock already s1's); node b was never triggered (stale times from before).
    a_late = Block(31, "a", s0, s0 + 1_000, s0 + 40_000, s0 - 100_000, 2)
    b_idle = Block(32, "b", s0, s0 - P, s0 - P + 10, s0 - P + 20, 0)
    tables.add(_rec(Block(27, "D", s0 - P, s0 - P, s0 - 1, s0, 3), [a_late, b_idle], s1))
    # The repeat of that report (same clock): not a second xrun.
    tables.add(_rec(Block(27, "D", s0 - P, s0, s0 - 1, s1 + 3_000, 3), [a_late, b_idle], s1))
    # Two cycles later a has finished its late call (20 ms spin) and the graph completes again; the
    # driver's counter stepped too.
    s3 = s0 + 4 * P
    a_done = Block(31, "a", s3, s3 + 1_000, s3 + 20_000, s3 + 60_000, 3)
    b_done = Block(32, "b", s3, s3 + 61_000, s3 + 70_000, s3 + 90_000, 3)
    a_done_late = Block(31, "a", s3, s3 + 1_000, s3 + 20_000, s0 + 20_040_000, 3)
    tables.add(_rec(Block(27, "D", s3 - P, s3 - 10, s3, s3 + 100_000, 3), [a_done_late, b_done], s3, xruns=0))
    held = tables.take()
    assert "engine_nodes" in held and held["xruns"]["client"] == ["a"]
    assert "awake" in held["xruns"]["text"][0] and held["xruns"]["t_ns"] == [s1]  # reported as s1 began
    nodes = held["engine_nodes"]
    first = {n: nodes[c][:2] for n, c in (("finish", "finish_ns"), ("signal", "signal_ns"), ("xrun", "xrun"))}
    assert first["xrun"] == [True, True]
    assert first["signal"] == [s0 + 1_000, None]  # b's times are from an earlier cycle: unknown here
    assert first["finish"] == [s0 + 20_040_000, None]  # a's late call ended 20 ms into the cycle
    cycles = held["engine_cycles"]
    assert cycles["t_ns"][0] == s0 and cycles["end_ns"][0] is None  # b never ran for s0: end unknown
    assert tables.repeated == 1 and tables.incomplete == 1
    tables.add(_rec(Block(27, "D", s3, s3 + P, s3 + P + 1, s3 + P + 9, 3), [a_done, b_done], s3 + P, xruns=1))
    counted = tables.take()["xruns"]
    assert counted["client"] == [None] and "xrun count 0 -> 1" in counted["text"][0]


def test_socket_path_follows_the_client_rules(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "pipewire-0").touch()
    assert socket_path({"XDG_RUNTIME_DIR": str(tmp_path)}) == str(tmp_path / "pipewire-0")
    assert socket_path({"PIPEWIRE_REMOTE": "/x/y"}) == "/x/y"
    assert socket_path({}) == "/run/pipewire/pipewire-0"
    # No socket yet (a daemon that starts after the recorder): where a daemon of that environment listens.
    empty = tmp_path / "later"
    assert socket_path({"XDG_RUNTIME_DIR": str(empty)}) == str(empty / "pipewire-0")


def test_a_node_xrun_counter_where_the_version_has_one() -> None:
    # 1.x blocks end with the node's own xrun count (spa/param/profiler.h); 0.3.65's stop at the latency.
    fields = [31, "a", 0, 1, 2, 3, 3, (256, 48000), 4]
    assert block_from_fields(fields).xrun_count == 4 and block_from_fields(fields[:8]).xrun_count is None
    tables = ProfileTables()
    for n, count in enumerate((4, 4, 5)):  # a step of the counter is an xrun row naming the node
        start = 10_000_000 + n * P
        node = Block(31, "a", start, start + 1, start + 2, start + 3, 3, count)
        tables.add(_rec(Block(27, "D", start - P, start, start + 5, start + 6, 3), [node], start))
    out = tables.take()
    assert out["engine_nodes"]["xrun"] == [False, False, True]
    assert out["xruns"]["client"] == ["a"] and "xrun count 4 -> 5" in out["xruns"]["text"][0]
