"""The writer's bulk parse in C (samplers/_parse.c) against numpy's (samplers/procfs.py): the same values,
and the same refusals, on texts of the usual shape and on texts that are not (tricky comms, lines cut short,
extra tokens, values too wide, layouts that differ)."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from capture.format import SCHED_FIELDS
from samplers import procfs
from samplers.procfs import STAT_NUM_THREADS, parse_schedstat_blob, parse_stat_blob
from tests.fakeproc import stat_line
from tests.helpers import SCHED_618, SCHED_SCHEDSTATS_5_10
from tests.test_procfs_parsing import _kernel_sched_text, random_sched_text
from tests.test_tick_reads import _can_build

COMPILED = procfs._parse
needs_c = pytest.mark.skipif(COMPILED is None, reason="samplers/_parse.c not built here (no compiler at install)")


def test_the_compiled_parse_is_built_where_it_can_be() -> None:
    if not _can_build():
        pytest.skip("no C compiler or Python.h here: the writer parses with numpy")
    assert COMPILED is not None, "samplers/_parse.c was not built: pip install -e . with python3-dev and gcc"


def _both(monkeypatch: pytest.MonkeyPatch, call: Callable[[], Any]) -> tuple[Any, Any]:
    """(C's result, numpy's result) of the same call; an exception is a result (its type)."""
    results = []
    for module in (COMPILED, None):
        monkeypatch.setattr(procfs, "_parse", module)
        try:
            results.append(call())
        except Exception as err:  # the two must fail alike
            results.append(type(err))
    return results[0], results[1]


def _same(a: Any, b: Any) -> None:
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and (a == b).all()
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b)
        for name in a:
            assert [None if v is None else int(v) for v in a[name]] == [None if v is None else int(v) for v in b[name]]
    else:
        assert a == b


@needs_c
def test_stat_texts_parse_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(3)
    comms = ["plain", "x) y", ")))", "new\nline", "a b c", "(", "", "R) S"]

    def line() -> bytes:
        text = stat_line(
            rng.randrange(1, 10**6),
            rng.randrange(1, 10**6),
            comm=rng.choice(comms),
            state=rng.choice("RSDTZI"),
            minflt=rng.randrange(10**12),
            majflt=rng.randrange(100),
            utime=rng.randrange(10**9),
            nice=rng.randrange(-20, 20),
            cpu=rng.randrange(64),
            rtprio=rng.randrange(100),
            policy=rng.randrange(7),
            blkio=rng.randrange(10**6),
            num_threads=rng.randrange(1, 600),
        ).encode()
        shape = rng.random()
        if shape < 0.03:  # a kernel before field 42
            text = b" ".join(text.split(b" ")[:41]) + b"\n"
        elif shape < 0.08:  # cut anywhere: tokens missing, or no ')' at all
            text = text[: rng.randrange(len(text))]
        elif shape < 0.09:  # a comm and nothing after it: no separator after the ')'
            text = text[: text.rindex(b")") + 1]
        elif shape < 0.095:  # not a stat line: no ')' at all
            text = b"1 2 3\n"
        elif shape < 0.1:  # no final newline
            text = text.rstrip(b"\n")
        elif shape < 0.12:  # a 25-digit token
            text = text.replace(b" 0 ", b" 1234567890123456789012345 ", 1)
        return text

    seen = {"in C": 0, "numpy's after C refused": 0, "refused by both": 0}
    for _ in range(600):
        lines = [line() for _ in range(rng.randrange(1, 8))]
        blob = b"".join(lines)
        lengths = np.array([len(x) for x in lines], dtype=np.int64)
        rows = np.array(sorted(rng.sample(range(len(lines)), rng.randrange(len(lines) + 1))), dtype=np.int64)
        c, py = _both(monkeypatch, lambda b=blob, n=lengths, r=rows: parse_stat_blob(b, n, STAT_NUM_THREADS, r))
        _same(c, py)
        c, py = _both(monkeypatch, lambda b=blob, n=lengths: parse_stat_blob(b, n))
        _same(c, py)
        if COMPILED.parse_stat(blob, lengths, procfs._STAT_PICK, -1, rows) is not None:
            seen["in C"] += 1
        else:
            seen["refused by both" if py is ValueError else "numpy's after C refused"] += 1
    assert min(seen.values()) > 10, seen  # every way was taken


@needs_c
def test_schedstat_texts_parse_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(4)
    in_c = 0
    for _ in range(300):
        count = rng.randrange(1, 20)
        texts = [f"{rng.randrange(10**15)} {rng.randrange(10**12)} {rng.randrange(10**6)}\n" for _ in range(count)]
        shape = rng.random()
        if shape < 0.1:
            texts[rng.randrange(count)] = "1 2 3 4\n"  # a token more
        elif shape < 0.2:
            texts[-1] = texts[-1].rstrip("\n")  # the last one without its newline
        elif shape < 0.25:
            texts[0] = "-5 0 1\n"
        blob = "".join(texts).encode()
        c, py = _both(monkeypatch, lambda b=blob, n=count: parse_schedstat_blob(b, n))
        _same(c, py)
        in_c += COMPILED.parse_schedstat(blob, count) is not None
    assert 100 < in_c < 300


@needs_c
def test_sched_texts_parse_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """_sched_fixed_width with the cells in C: the same columns, and None (the regex way) for the same batches."""
    wanted = list(SCHED_FIELDS.values())
    rng = random.Random(5)

    def text() -> bytes:
        return random_sched_text(rng, wide_every=0.05)

    def mutated(t: bytes) -> bytes:
        return rng.choice(
            [
                lambda: t.replace(b"    7\n", b"   +7\n", 1),
                lambda: t.replace(b"    7\n", b"   7 \n", 1),
                lambda: t.replace(b".", b" ", 1),
                lambda: re.sub(rb" [0-9]\.([0-9]{6})\n", rb"   \1\n", t, count=1),  # a time cell without its dot
                lambda: t.replace(b"nr_switches", b"nr_swatches", 1),
                lambda: t[: len(t) // 2],
                lambda: t.replace(b"--\n", b"-\n", 1),
                lambda: SCHED_SCHEDSTATS_5_10,
            ]
        )()

    fixed = refused = 0
    for _ in range(300):
        texts = [text() for _ in range(rng.randrange(1, 12))]
        if rng.random() < 0.3:
            k = rng.randrange(len(texts))
            texts[k] = mutated(texts[k])
        c, py = _both(monkeypatch, lambda t=texts: procfs._sched_fixed_width(t, wanted))
        assert (c is None) == (py is None)
        if py is not None:
            _same(c, py)
            fixed += 1
        else:
            refused += 1
    # Cells not of the template's kind: a time without its dot, a count with one, a sign without digits.
    one = _kernel_sched_text(b"a", {"nr_switches": 7}, {"se.sum_exec_runtime": 5, "se.vruntime": 12345678901})
    for other in (
        re.sub(rb" [0-9]\.([0-9]{6})\n", rb"   \1\n", one, count=1),
        one.replace(b"    7\n", b"   .7\n"),
        one.replace(b"    7\n", b"    -\n"),
    ):
        assert other != one
        assert _both(monkeypatch, lambda o=other: procfs._sched_fixed_width([one, o], wanted)) == (None, None)
    real = [SCHED_618, re.sub(rb"(se.sum_exec_runtime\s*:\s*)1234", rb"\g<1>   1", SCHED_618)]
    c, py = _both(monkeypatch, lambda: procfs._sched_fixed_width(real, wanted))
    assert c is not None
    _same(c, py)
    assert fixed > 100 and refused > 20, (fixed, refused)
