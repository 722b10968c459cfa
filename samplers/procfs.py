"""Parsing the per-thread /proc files, one at a time (for discovery) and in bulk (for the samples).

The hot loop only reads raw bytes; everything here runs off the tick. Formats, from the kernel's
fs/proc/array.c (do_task_stat), fs/proc/base.c (proc_pid_schedstat) and kernel/sched/debug.c
(proc_sched_show_task):

- `schedstat`: "run_ns wait_ns slices\n", three unsigned integers in ns / count.
- `stat`: "tid (comm) S f4 f5 ...": comm may hold spaces and ')' (prctl PR_SET_NAME takes any 15 bytes),
  so split after the LAST ')' (as psutil's _pslinux.py does with rfind(b')')).
- `sched`: "name : value" lines; time values print as "ms.nnnnnn" (SPLIT_NS: integer ms, a dot, six
  digits of ns), so they are parsed as exact integer ns, never through float. Field names carry "se." or,
  before 5.16, "se.statistics." prefixes; schedstats fields exist only with CONFIG_SCHEDSTATS and
  kernel.sched_schedstats=1.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from samplers.compiled import compiled_module

# samplers/_parse.c: the bulk passes below in C, where the install built it (None: numpy's, as the reference).
_parse = compiled_module("_parse")

# 0-based index into the tokens after the last ')': token j is stat field j + 3 (proc(5) numbering).
STAT_STATE = 0  # field 3
STAT_PPID = 1  # field 4
STAT_FLAGS = 6  # field 9: the task's PF_* flags
STAT_MINFLT = 7  # field 10
STAT_MAJFLT = 9  # field 12
STAT_UTIME = 11  # field 14
STAT_STIME = 12  # field 15
STAT_NICE = 16  # field 19
STAT_NUM_THREADS = 17  # field 20
STAT_STARTTIME = 19  # field 22
STAT_PROCESSOR = 36  # field 39
STAT_RT_PRIORITY = 37  # field 40
STAT_POLICY = 38  # field 41
STAT_BLKIO_TICKS = 39  # field 42: delayacct_blkio_ticks (2.6.18+)

# The numeric stat columns of the samples table, in order, with their token index.
STAT_NUMERIC = {
    "minflt": STAT_MINFLT,
    "majflt": STAT_MAJFLT,
    "utime": STAT_UTIME,
    "stime": STAT_STIME,
    "nice": STAT_NICE,
    "cpu": STAT_PROCESSOR,
    "rtprio": STAT_RT_PRIORITY,
    "policy": STAT_POLICY,
    "starttime": STAT_STARTTIME,
    "blkio_ticks": STAT_BLKIO_TICKS,
}


@dataclass(frozen=True)
class StatLine:
    """The fields of one stat line that discovery and the thread table need."""

    tid: int
    comm: str
    state: str
    ppid: int
    flags: int
    minflt: int
    majflt: int
    utime: int
    stime: int
    nice: int
    num_threads: int
    starttime: int
    cpu: int
    rtprio: int
    policy: int
    blkio_ticks: int | None


def parse_stat(raw: bytes) -> StatLine:
    """One /proc/<pid>[/task/<tid>]/stat line. Raises ValueError on text that is not a stat line."""
    close = raw.rfind(b")")
    open_ = raw.find(b"(")
    if close < 0 or open_ < 0:
        raise ValueError(f"not a stat line: {raw[:60]!r}")
    tokens = raw[close + 2 :].split()
    if len(tokens) < STAT_POLICY + 1:
        raise ValueError(f"stat line has {len(tokens) + 2} fields, need at least {STAT_POLICY + 3}")

    def num(i: int) -> int:
        return int(tokens[i])

    return StatLine(
        tid=int(raw[:open_]),
        comm=raw[open_ + 1 : close].decode(errors="replace"),
        state=tokens[STAT_STATE].decode(),
        ppid=num(STAT_PPID),
        flags=num(STAT_FLAGS),
        minflt=num(STAT_MINFLT),
        majflt=num(STAT_MAJFLT),
        utime=num(STAT_UTIME),
        stime=num(STAT_STIME),
        nice=num(STAT_NICE),
        num_threads=num(STAT_NUM_THREADS),
        starttime=num(STAT_STARTTIME),
        cpu=num(STAT_PROCESSOR),
        rtprio=num(STAT_RT_PRIORITY),
        policy=num(STAT_POLICY),
        blkio_ticks=num(STAT_BLKIO_TICKS) if len(tokens) > STAT_BLKIO_TICKS else None,
    )


def parse_schedstat(raw: bytes) -> tuple[int, int, int]:
    run_ns, wait_ns, slices = raw.split()[:3]
    return int(run_ns), int(wait_ns), int(slices)


def ms_text_to_ns(text: bytes | str) -> int:
    """Exact ns from the kernel's "ms.nnnnnn" (SPLIT_NS) text: "12.345678" -> 12345678, "-0.000001" -> -1.

    Through float, "1234567.891011" would lose its last digits: the resolution these fields exist for.
    """
    s = text.decode() if isinstance(text, bytes) else text
    s = s.strip()
    negative = s.startswith("-")
    if negative:
        s = s[1:]
    whole, _, frac = s.partition(".")
    ns = int(whole or "0") * 1_000_000 + int((frac + "000000")[:6])
    return -ns if negative else ns


_SCHED_LINE = re.compile(rb"^([A-Za-z_.>\-]+)\s*:\s*(-?[0-9]+(?:\.[0-9]+)?)\s*$", re.MULTILINE)


def _sched_name(name_b: bytes) -> str:
    name = name_b.decode()
    for prefix in ("se.statistics.", "stats.", "se."):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def parse_sched(raw: bytes) -> dict[str, int]:
    """All numeric "name : value" fields of a sched file, names without "se." / "se.statistics.".

    A value with a decimal point is a time in ms (SPLIT_NS) and comes back as exact ns; integers stay
    counts. Fields a kernel does not print are simply absent (no CONFIG_SCHEDSTATS: no wait_sum...).
    """
    fields: dict[str, int] = {}
    for name_b, value_b in _SCHED_LINE.findall(raw):
        fields[_sched_name(name_b)] = ms_text_to_ns(value_b) if b"." in value_b else int(value_b)
    return fields


# A column of SPLIT_NS texts, space-separated: "ms.nnnnnn" always has six digits after the dot, so the
# digits without the dot are the exact ns.
_SPLIT_NS_COLUMN = re.compile(rb"(?:-?[0-9]+\.[0-9]{6}(?: |$))*")


SchedColumn = np.ndarray | list[int | None]


def parse_sched_batch(raws: Sequence[bytes], wanted: Sequence[str]) -> dict[str, SchedColumn]:
    """The `wanted` fields of many sched texts as int64 columns (parse_sched's values), in bulk.

    One regex pass over all the texts joined; when every text prints the same fields in the same order
    (one kernel: they do), each field is a strided slice of the values, converted by numpy. Otherwise, or
    for a field whose text is not plain, one parse per text. A field no text prints is absent."""
    if not raws:
        return {}
    blob, starts, lengths = _texts_joined(raws)
    return parse_sched_texts(blob, starts, lengths, wanted)


def parse_sched_texts(
    blob: bytes, starts: np.ndarray, lengths: np.ndarray, wanted: Sequence[str]
) -> dict[str, SchedColumn]:
    """parse_sched_batch on texts that lie in `blob` (text i at starts[i], lengths[i] bytes, int64): the writer's
    way, the tick frames' sched texts parsed where they are, no bytes object made for each but on the regex way."""
    if not len(lengths):
        return {}
    fixed = _sched_fixed_width_in(blob, starts, lengths, wanted)
    if fixed is not None:
        return fixed
    return sched_batch_by_regex(
        [blob[a : a + n] for a, n in zip(starts.tolist(), lengths.tolist(), strict=True)], wanted
    )


def _texts_joined(raws: Sequence[bytes]) -> tuple[bytes, np.ndarray, np.ndarray]:
    lengths = np.array([len(raw) for raw in raws], dtype=np.int64)
    return b"".join(raws), np.cumsum(lengths) - lengths, lengths


def sched_batch_by_regex(raws: Sequence[bytes], wanted: Sequence[str]) -> dict[str, SchedColumn]:
    """parse_sched_batch the general way: one regex pass over all the texts joined."""
    if not raws:
        return {}
    first = _SCHED_LINE.findall(raws[0])
    pairs = _SCHED_LINE.findall(b"\n".join(raws))
    width = len(first)
    if not width or len(pairs) != width * len(raws):
        return _sched_rows_to_columns(raws, wanted)
    names_b, values_b = zip(*pairs, strict=True)
    if names_b != tuple(n for n, _ in first) * len(raws):
        return _sched_rows_to_columns(raws, wanted)
    want = set(wanted)
    columns: dict[str, SchedColumn] = {}
    for j, (name_b, _) in enumerate(first):
        name = _sched_name(name_b)
        if name not in want:
            continue
        text = b" ".join(values_b[j::width])
        if b"." in text:
            if not _SPLIT_NS_COLUMN.fullmatch(text):
                columns[name] = np.array([parse_sched(r).get(name, 0) for r in raws], dtype=np.int64)
                continue
            text = text.replace(b".", b"")
        columns[name] = np.array(text.split(), dtype=np.int64)
    return columns


_SCHED_HEADER_END = b"--\n"  # the end of the line of dashes under "comm (pid, #threads: n)"
_COMM_MAX = 15  # TASK_COMM_LEN - 1: the header's comm ends before this, so "--\n" from here is the dashes'
_SCHED_MAX_DIGITS = 18  # a value cell with more digits goes the regex way (int64 holds 18 digits whole)


def _sched_fixed_width(raws: Sequence[bytes], wanted: Sequence[str]) -> dict[str, SchedColumn] | None:
    """_sched_fixed_width_in on texts given one by one."""
    return _sched_fixed_width_in(*_texts_joined(raws), wanted)


def _sched_fixed_width_in(
    blob: bytes, starts: np.ndarray, lengths: np.ndarray, wanted: Sequence[str]
) -> dict[str, SchedColumn] | None:
    """parse_sched_texts's columns without a regex pass over every text, or None to go that way.

    The kernel prints each field at a fixed width ("%-45s:%21Ld" and "%-45s:%21Ld.%06ld",
    kernel/sched/debug.c), so after the header line (its comm and counts vary) the texts of one kernel
    are the same bytes but for the values. The first text is the template: the value cells of the wanted
    fields are found by the regex in it alone; every text must then hold the template's bytes everywhere
    else up to the last wanted line, and in each cell spaces, an optional '-' and digits right-aligned
    (with the template's '.' six digits from the end in a time field). Anything else (a wider value, a
    line more or less, a field the first text lacks) returns None. The same values as the regex pass:
    tests/test_procfs_parsing.py compares the two."""
    template = blob[int(starts[0]) : int(starts[0] + lengths[0])]
    start = template.find(_SCHED_HEADER_END, _COMM_MAX) + len(_SCHED_HEADER_END)
    if start < len(_SCHED_HEADER_END):
        return None
    want = set(wanted)
    cells: dict[str, tuple[int, int]] = {}  # wanted field -> its value cell [from, to) in the body
    values_at: list[tuple[int, int]] = []  # every field's value cell
    offset = 0
    body = template[start:]
    for line in body.split(b"\n"):
        match = _SCHED_LINE.fullmatch(line)
        if match is not None:
            values_at.append((offset + line.index(b":") + 1, offset + len(line)))
            if _sched_name(match.group(1)) in want:
                cells[_sched_name(match.group(1))] = values_at[-1]
        offset += len(line) + 1
    if not cells:
        return None
    end = max(to for _, to in cells.values()) + 1  # through the last wanted line's "\n"
    if len(body) < end:
        return None
    # Where the fields are not their values, [from, to) up to `end`: the same bytes in every text.
    runs: list[tuple[int, int]] = []
    run_from = 0
    for lo, hi in [*values_at, (end, end)]:
        lo = min(lo, end)
        if lo > run_from:
            runs.append((run_from, lo))
        if hi >= end:
            break
        run_from = hi
    # The wanted cells, with whether each is a time ("ms.nnnnnn": the template's '.' six digits from the end).
    kinds = {name: (lo, hi, body[hi - 7 : hi - 6] == b".") for name, (lo, hi) in cells.items()}
    if _parse is not None:
        return _sched_cells_compiled(blob, starts, lengths, body[:end], runs, kinds, wanted)
    parts = []
    for text_from, length in zip(starts.tolist(), lengths.tolist(), strict=True):
        text_end = text_from + length
        begin = blob.find(_SCHED_HEADER_END, text_from + _COMM_MAX, text_end) + len(_SCHED_HEADER_END)
        if begin < len(_SCHED_HEADER_END) or text_end - begin < end:
            return None
        parts.append(blob[begin : begin + end])
    grid = np.frombuffer(b"".join(parts), dtype=np.uint8).reshape(len(lengths), end)
    for lo, hi in runs:  # compared run by run, in place
        if not (grid[:, lo:hi] == grid[0, lo:hi]).all():
            return None
    columns: dict[str, SchedColumn] = {}
    for name, (lo, hi, dot) in kinds.items():
        cell = grid[:, lo:hi]
        if dot:  # a time: "ms.nnnnnn", exact ns are its digits without the dot
            if not (cell[:, -7] == ord(".")).all():
                return None
            cell = np.delete(cell, -7, axis=1)
        values = _right_aligned_int64(cell)
        if values is None:
            return None
        columns[name] = values
    return {name: columns[name] for name in wanted if name in columns}


def _sched_cells_compiled(
    blob: bytes,
    starts: np.ndarray,
    lengths: np.ndarray,
    body: bytes,
    runs: list[tuple[int, int]],
    kinds: dict[str, tuple[int, int, bool]],
    wanted: Sequence[str],
) -> dict[str, SchedColumn] | None:
    """_sched_fixed_width_in's checks and values in C (samplers/_parse.c sched_cells): the same runs of the
    template compared, the same cells parsed; None where numpy's would return None."""
    assert _parse is not None
    names = [name for name in wanted if name in kinds]
    parsed = _parse.sched_cells(
        blob,
        np.ascontiguousarray(starts, dtype=np.int64),
        np.ascontiguousarray(lengths, dtype=np.int64),
        body,
        np.array(runs, dtype=np.int64).reshape(-1),
        np.array([kinds[name] for name in names], dtype=np.int64).reshape(-1),
        _COMM_MAX,
        _SCHED_MAX_DIGITS,
    )
    if parsed is None:
        return None
    grid = np.frombuffer(parsed, dtype=np.int64).reshape(len(lengths), len(names))
    return {name: grid[:, k].copy() for k, name in enumerate(names)}


def _right_aligned_int64(cell: np.ndarray) -> np.ndarray | None:
    """Rows of spaces, an optional '-' and digits to the end, as int64; None when a row is not that."""
    digit = (cell >= ord("0")) & (cell <= ord("9"))
    space = cell == ord(" ")
    if not len(cell) or not cell.shape[1] or not digit[:, -1].all():
        return None
    first = np.argmax(~space, axis=1)  # the sign or the first digit
    rows = np.arange(len(cell))
    minus = cell[rows, first] == ord("-")
    after = np.arange(cell.shape[1])[None, :] >= (first + minus)[:, None]
    if not (digit == after).all() or (cell.shape[1] - first - minus).max() > _SCHED_MAX_DIGITS:
        return None
    values = np.zeros(len(cell), dtype=np.int64)
    for k in range(int((first + minus).min()), cell.shape[1]):
        values = values * 10 + np.where(digit[:, k], cell[:, k].astype(np.int64) - ord("0"), 0)
    return np.where(minus, -values, values)


def _sched_rows_to_columns(raws: Sequence[bytes], wanted: Sequence[str]) -> dict[str, SchedColumn]:
    """Texts that differ in their fields: one parse each; a field a text lacks is None in its row."""
    parsed = [parse_sched(r) for r in raws]
    present = {name for p in parsed for name in p}
    return {name: [p.get(name) for p in parsed] for name in wanted if name in present}


# --------------------------------------------------------------------------------------------------
# Bulk parsing: one call per batch of reads, vectorised where it counts.


MAX_DIGITS = 20  # u64 max is 20 digits


def tokens_to_int64(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Decimal tokens buf[starts[i]:ends[i]] (optional leading '-') to int64, all at once.

    One Horner step per digit position across every token: no Python loop per token. Tokens must fit
    int64 (the counters we pick do; stat's rsslim 18446744073709551615 is never picked).
    """
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    negative = buf[np.minimum(starts, len(buf) - 1)] == ord("-")
    starts = starts + negative
    lengths = ends - starts
    values = np.zeros(len(starts), dtype=np.int64)
    width = int(lengths.max()) if len(lengths) else 0
    for k in range(min(width, MAX_DIGITS)):
        live = lengths > k
        digits = buf[np.where(live, starts + k, 0)].astype(np.int64) - ord("0")
        values = np.where(live, values * 10 + digits, values)
    return np.where(negative, -values, values)


def parse_schedstat_blob(blob: bytes, count: int) -> np.ndarray:
    """(count, 3) int64 from `count` schedstat texts joined: "run wait slices\n" each."""
    if count == 0:
        return np.zeros((0, 3), dtype=np.int64)
    if _parse is not None:
        parsed = _parse.parse_schedstat(blob, count)
        if parsed is not None:
            return np.frombuffer(parsed, dtype=np.int64).reshape(count, 3)
    buf = np.frombuffer(blob, dtype=np.uint8)
    separators = np.flatnonzero((buf == ord(" ")) | (buf == ord("\n")))
    if len(separators) != 3 * count:
        return np.array([parse_schedstat(line) for line in blob.splitlines()], dtype=np.int64)
    starts = np.concatenate(([0], separators[:-1] + 1))
    return tokens_to_int64(buf, starts, separators).reshape(count, 3)


def parse_schedstat_batch(raws: Sequence[bytes]) -> np.ndarray:
    """(n, 3) int64 array of run_ns, wait_ns, slices."""
    return parse_schedstat_blob(b"".join(raws), len(raws))


_STAT_PICK = np.array(list(STAT_NUMERIC.values()), dtype=np.int64)


def parse_stat_blob(
    blob: bytes, lengths: np.ndarray, extra: int | None = None, extra_rows: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Stat texts joined in `blob`, line i being `lengths[i]` bytes: (states, numbers) as parse_stat_batch.

    Vectorised over the whole blob: the last ')' of each line, the spaces after it, then the picked
    tokens parsed together. A line too short for field 42 (kernels before 2.6.18) gets -1 there.
    `extra` (a token index, STAT_*): numbers gets one more column, that token of the lines `extra_rows`
    (indices), -1 in the others: the writer's leaders' num_threads, in the same pass over the blob.
    """
    n = len(lengths)
    width = len(_STAT_PICK) + (extra is not None)
    if n == 0:
        return np.zeros(0, dtype="<U1"), np.zeros((0, width), dtype=np.int64)
    if _parse is not None:
        rows = np.zeros(0, dtype=np.int64) if extra_rows is None else extra_rows
        parsed = _parse.parse_stat(
            blob,
            np.ascontiguousarray(lengths, dtype=np.int64),
            _STAT_PICK,
            -1 if extra is None else extra,
            np.ascontiguousarray(rows, dtype=np.int64),
        )
        if parsed is not None:
            states_b, numbers_b = parsed
            states = np.frombuffer(states_b, dtype="S1").astype("<U1")
            return states, np.frombuffer(numbers_b, dtype=np.int64).reshape(n, width).copy()
    buf = np.frombuffer(blob, dtype=np.uint8)
    line_ends = np.cumsum(np.asarray(lengths, dtype=np.int64))
    line_starts = line_ends - lengths
    parens = np.flatnonzero(buf == ord(")"))
    # The last ')' of line i is the last paren before line_ends[i].
    last_paren = parens[np.searchsorted(parens, line_ends, side="left") - 1]
    if np.any(last_paren < line_starts):
        raise ValueError("a stat text without ')'")
    separators = np.flatnonzero((buf == ord(" ")) | (buf == ord("\n")))
    # Token j after the ')' (j = 0 is the state) starts after separator first + j and ends at the next.
    first = np.searchsorted(separators, last_paren, side="left")  # the space right after ')'
    last = np.searchsorted(separators, line_ends, side="left") - 1  # the line's final "\n"
    states = np.frombuffer(buf[separators[first] + 1].tobytes(), dtype="S1").astype("<U1")
    numbers = np.full((n, width), -1, dtype=np.int64)
    for column, j in enumerate(_STAT_PICK):
        ok = first + j + 1 <= last  # token j exists: a separator follows it inside the line
        if not ok.any():
            continue
        idx = first[ok] + j
        numbers[ok, column] = tokens_to_int64(buf, separators[idx] + 1, separators[idx + 1])
    if extra is not None and extra_rows is not None and len(extra_rows):
        rows = extra_rows[first[extra_rows] + extra + 1 <= last[extra_rows]]
        idx = first[rows] + extra
        numbers[rows, -1] = tokens_to_int64(buf, separators[idx] + 1, separators[idx + 1])
    return states, numbers


def parse_stat_batch(raws: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(states, numbers): states a (n,) array of one-letter str, numbers (n, len(STAT_NUMERIC)) int64.

    A kernel too old for field 42 gets -1 there (the caller turns it into null).
    """
    return parse_stat_blob(b"".join(raws), np.array([len(r) for r in raws], dtype=np.int64))


# --------------------------------------------------------------------------------------------------
# Where the files are. The root is a parameter so tests can point it at canned text.


class ProcPaths:
    def __init__(self, root: str = "/proc") -> None:
        self.root = root.rstrip("/") or "/"

    def path(self, *parts: object) -> str:
        return os.path.join(self.root, *map(str, parts))

    def task(self, pid: int, tid: int, name: str) -> str:
        return os.path.join(self.root, str(pid), "task", str(tid), name)

    def read(self, *parts: object) -> bytes:
        with open(self.path(*parts), "rb") as fh:
            return fh.read()

    def read_text(self, *parts: object, default: str | None = None) -> str | None:
        try:
            return self.read(*parts).decode(errors="replace")
        except OSError:
            return default
