"""Parsing canned /proc text: the traps DESIGN.md lists (comm with ')' and spaces, float-ms fields,
fields older kernels lack)."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from samplers.procfs import (
    STAT_NUMERIC,
    ms_text_to_ns,
    parse_sched,
    parse_schedstat,
    parse_schedstat_batch,
    parse_stat,
    parse_stat_batch,
)
from tests.fakeproc import stat_line
from tests.helpers import SCHED_618, SCHED_SCHEDSTATS_5_10


def test_stat_comm_with_spaces_and_parentheses_splits_after_the_last_paren() -> None:
    raw = stat_line(
        4242, 4200, comm="a) b (c) d", state="D", minflt=17, majflt=3, cpu=1, rtprio=85, policy=1, blkio=9
    ).encode()
    st = parse_stat(raw)
    assert st.comm == "a) b (c) d"
    assert (st.tid, st.state, st.minflt, st.majflt, st.cpu, st.rtprio, st.policy, st.blkio_ticks) == (
        4242,
        "D",
        17,
        3,
        1,
        85,
        1,
        9,
    )


def test_stat_batch_agrees_with_single_parse_including_tricky_comms() -> None:
    lines = [
        stat_line(1, 1, comm="plain", minflt=5, utime=7, stime=8, nice=-5, cpu=0),
        stat_line(2, 1, comm="x) y", state="R", minflt=6, cpu=1, rtprio=50, policy=2),
        stat_line(3, 1, comm=")))", state="D", majflt=2, blkio=4),
        stat_line(4, 1, comm="new\nline", state="S"),
    ]
    states, numbers = parse_stat_batch([ln.encode() for ln in lines])
    for i, line in enumerate(lines):
        single = parse_stat(line.encode())
        assert states[i] == single.state
        for j, name in enumerate(STAT_NUMERIC):
            assert numbers[i, j] == getattr(single, {"cpu": "cpu"}.get(name, name)), name
    assert numbers[0, list(STAT_NUMERIC).index("nice")] == -5


def test_stat_from_a_kernel_without_field_42_reports_it_missing() -> None:
    full = stat_line(9, 9).split()
    old = " ".join(full[:41]) + "\n"  # fields 1..41: before 2.6.18 there was no delayacct_blkio_ticks
    assert parse_stat(old.encode()).blkio_ticks is None
    _, numbers = parse_stat_batch([old.encode()])
    assert numbers[0, list(STAT_NUMERIC).index("blkio_ticks")] == -1


def test_schedstat() -> None:
    assert parse_schedstat(b"123456789 42 7\n") == (123456789, 42, 7)
    batch = parse_schedstat_batch([b"1 2 3\n", b"18446744073 5 6\n"])
    assert batch.dtype == np.int64 and batch.tolist() == [[1, 2, 3], [18446744073, 5, 6]]


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("12.345678", 12_345_678),
        ("0.000001", 1),
        ("1234567.891011", 1_234_567_891_011),  # float would round the last digits away
        ("5", 5_000_000),
        ("-0.000250", -250),
        ("  42.000000 ", 42_000_000),
    ],
)
def test_ms_text_to_ns_is_exact(text: str, ns: int) -> None:
    assert ms_text_to_ns(text) == ns


def test_float_parsing_would_have_lost_precision() -> None:
    # The reason ms_text_to_ns exists: through float, one microsecond-scale ns value already goes wrong.
    assert int(float("1.000001") * 1e6) == 1_000_000
    assert ms_text_to_ns("1.000001") == 1_000_001


def test_sched_without_schedstats_has_counts_and_exact_runtime() -> None:
    fields = parse_sched(SCHED_618)
    assert fields["sum_exec_runtime"] == 1_234_567_891
    assert fields["nr_migrations"] == 12
    assert fields["nr_switches"] == 2000
    assert fields["policy"] == 1
    assert "wait_sum" not in fields and "sum_sleep_runtime" not in fields


def test_sched_with_schedstats_before_5_16_strips_the_statistics_prefix() -> None:
    fields = parse_sched(SCHED_SCHEDSTATS_5_10)
    assert fields["wait_max"] == 538_000
    assert fields["wait_sum"] == 12_000_003
    assert fields["block_max"] == 6_100_000
    assert fields["sum_sleep_runtime"] == 80_000_123_456
    assert fields["iowait_sum"] == 0
    assert fields["nr_wakeups"] == 3990
    assert "sum_block_runtime" not in fields  # 5.16+ only: absent, i.e. unknown, not zero


def test_sched_in_bulk_matches_one_parse_per_text() -> None:
    """The writer parses a chunk's sched texts in one pass (parse_sched_batch): the same values as one
    parse_sched per text, with texts of one kernel, with a changed value, and with texts that differ."""
    from capture.format import SCHED_FIELDS
    from samplers.procfs import parse_sched, parse_sched_batch

    wanted = list(SCHED_FIELDS.values())
    fewer = re.sub(rb"(?m)^se.nr_migrations\s*:.*\n", b"", SCHED_618)
    assert fewer != SCHED_618
    bumped = re.sub(rb"(se.sum_exec_runtime\s*:\s*)[0-9.]+", rb"\g<1>123456.000789", SCHED_618)
    for texts in ([SCHED_618, bumped], [SCHED_618, fewer, bumped], [SCHED_618, SCHED_SCHEDSTATS_5_10, bumped]):
        columns = parse_sched_batch(texts, wanted)
        for i, text in enumerate(texts):
            one = parse_sched(text)
            for name in wanted:
                got = columns[name][i] if name in columns else None
                assert (None if got is None else int(got)) == one.get(name), name
    assert parse_sched_batch([bumped], ["sum_exec_runtime"])["sum_exec_runtime"][0] == 123_456_000_789


def _kernel_sched_text(comm: bytes, values: dict[str, int], times: dict[str, int]) -> bytes:
    """A sched file as kernel/sched/debug.c prints it: P() "%-45s:%21Ld", PN() "%-45s:%21Ld.%06ld"."""
    lines = [comm + b" (4242, #threads: 7)", b"-" * 67]
    for name, ns in times.items():  # SPLIT_NS: the sign on the ms, the ns below them always positive
        high = -(abs(ns) // 1_000_000) if ns < 0 else ns // 1_000_000
        lines.append(f"{name:<45s}:{high:>21d}.{abs(ns) % 1_000_000:06d}".encode())
    for name, value in values.items():
        lines.append(f"{name:<45s}:{value:>21d}".encode())
    lines.append(b"current_node=0, numa_group_id=0")
    return b"\n".join(lines) + b"\n"


SCHED_TIME_NAMES = ["se.exec_start", "se.vruntime", "se.sum_exec_runtime", "se.statistics.wait_sum"]
SCHED_COUNT_NAMES = ["se.nr_migrations", "nr_switches", "nr_voluntary_switches", "se.statistics.wait_count", "policy"]


def random_sched_text(rng: random.Random, wide_every: float = 0.0) -> bytes:
    """A sched text of random values (signs, zeros, many digits) and comm; with `wide_every`, that share of them
    with a value of 19 digits (more than the fixed-width cells take)."""
    comms = [b"audio-1", b"a (b) c", b"x\n--\ny", b"-" * 15, b"\xff\xfe"]
    times = {name: rng.choice([0, 1, -1, -250, 999_999, rng.randrange(-(10**12), 10**15)]) for name in SCHED_TIME_NAMES}
    values = {name: rng.choice([0, -1, 7, rng.randrange(10**17)]) for name in SCHED_COUNT_NAMES}
    if wide_every and rng.random() < wide_every:
        values["nr_switches"] = 10**18
    return _kernel_sched_text(rng.choice(comms), values, times)


def test_sched_in_bulk_at_fixed_width_matches_the_regex_pass() -> None:
    """The writer's common case: texts of one kernel differ only in their values (fixed-width fields), and
    are read by position (procfs._sched_fixed_width). The same columns as the regex pass and as one
    parse_sched per text; a text that does not fit the first one's layout sends the batch the regex way."""
    from capture.format import SCHED_FIELDS
    from samplers.procfs import _sched_fixed_width, parse_sched, parse_sched_batch, sched_batch_by_regex

    wanted = list(SCHED_FIELDS.values())
    rng = random.Random(12)

    def text() -> bytes:
        return random_sched_text(rng)

    def same(texts: list[bytes], columns: dict) -> None:
        assert set(columns) == set(sched_batch_by_regex(texts, wanted))
        for i, one in enumerate(parse_sched(t) for t in texts):
            for name in wanted:
                got = columns[name][i] if name in columns else None
                assert (None if got is None else int(got)) == one.get(name), name

    for _ in range(30):
        texts = [text() for _ in range(rng.randrange(1, 12))]
        fixed = _sched_fixed_width(texts, wanted)
        assert fixed is not None
        same(texts, fixed)
        same(texts, parse_sched_batch(texts, wanted))
    mixed = [text(), text(), SCHED_618]
    assert _sched_fixed_width(mixed, wanted) is None
    same(mixed, parse_sched_batch(mixed, wanted))
    assert _sched_fixed_width([text(), b"x (1, #threads: 1)\n" + b"-" * 67 + b"\n"], wanted) is None
    seven = _kernel_sched_text(b"t", dict.fromkeys(SCHED_COUNT_NAMES, 7), dict.fromkeys(SCHED_TIME_NAMES, 5))
    assert _sched_fixed_width([seven, seven], wanted) is not None
    assert _sched_fixed_width([seven, seven.replace(b"    7\n", b"   +7\n", 1)], wanted) is None
    assert _sched_fixed_width([seven, seven.replace(b"    7\n", b"   7 \n", 1)], wanted) is None
    assert _sched_fixed_width([seven, seven.replace(b"0.000005\n", b"0000.05\n", 1)], wanted) is None
    real = [SCHED_618, re.sub(rb"(se.sum_exec_runtime\s*:\s*)1234", rb"\g<1>   1", SCHED_618)]
    assert _sched_fixed_width(real, wanted) is not None
    same(real, parse_sched_batch(real, wanted))
