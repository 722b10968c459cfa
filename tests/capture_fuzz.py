"""Captures whose contents are wrong in the ways a reader can meet, and the commands run on them (issue 23).

tests/test_capture_damage.py fuzzes a capture's bytes. This fuzzes what is inside records whose CRCs are
right: metadata and trailer values (another type, out of range, null, gone) and table chunks (a column
dropped, renamed, retyped, made null; a chunk of one column, of none, of no row). Each case changes a small
sample capture (a 1.5 s cut of one in captures/), writes it with the format's own writer (CaptureWriter),
and runs one `forensics` command on it in this process. A case passes when the command ends as the CLI
promises (forensics/cli/__init__.py): exit 0 or 1, or 2 with one `error:` line; never a traceback, never a
hang. Every case is made from its seed and number alone, so a failure reproduces on its own:

    python bench/capture_fuzz.py --cases 2000 --seed 23      # the bench; tests/test_bad_captures.py runs a few
    python bench/capture_fuzz.py --case 1234 --seed 23 -v    # one case again, with what it changed
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import math
import random
import signal
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from capture.format import SCHEMAS, TAG_TRAILER, CaptureWriter, _json_default, _to_arrow, load, thread_seen
from capture.shape import META, TRAILER, Obj
from capture.window import DERIVED_TABLES, cut
from tests.helpers import REPO

BASES = ("lab-episodes.ssf", "lab-ebpf.ssf", "jack-starved-ebpf.ssf", "pipewire-late-client.ssf", "lab-markers.ssf")
CUT_NS = (500_000_000, 2_000_000_000)  # of each base: this span after its first sample

# JSON values a hand or another tool could put where the toolkit expects something else.
ODD_VALUES: tuple[Any, ...] = (
    "x", "2ms", "", "100", -1, 0, 1, 7, 2**40, 2**64, -(2**70), 0.5, 1e300,
    math.nan, math.inf, -math.inf, True, False, None, [], [1, "a"], ["0-1"], {}, {"x": 1}, {"0": [0, 1]},
)  # fmt: skip

COLUMN_TYPES = (
    pa.string(), pa.large_string(), pa.float64(), pa.float32(), pa.int8(), pa.int16(), pa.int64(), pa.uint64(),
    pa.bool_(), pa.dictionary(pa.int32(), pa.string()), pa.null(), pa.timestamp("ns"), pa.binary(),
)  # fmt: skip


@dataclass
class Base:
    name: str
    meta: dict[str, Any]
    trailer: dict[str, Any]
    tables: dict[str, pa.Table]


@functools.cache
def base(name: str) -> Base:
    """A sample capture cut to CUT_NS (the same tables, metadata and trailer keys, fewer rows)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cap = load(REPO / "captures" / name)
        t0 = int(cap.table("samples", ["t_ns"])["t_ns"].min())
        small = cut(cap, t0 + CUT_NS[0], t0 + CUT_NS[1])
        tables = {n: _to_arrow(n, small.table(n)) for n in small.table_names if n not in DERIVED_TABLES}
    if "samples" in tables:
        tables["thread_seen"] = thread_seen(tables["samples"])
    meta = {k: v for k, v in copy.deepcopy(cap.meta).items() if k != "format_version"}  # the writer's own stands
    return Base(name, meta, dict(cap.trailer or {}), tables)


@dataclass
class Case:
    number: int
    seed: int
    base: str
    command: list[str]
    changes: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    trailer: dict[str, Any] | None = None
    chunks: list[tuple[str, pa.Table]] = field(default_factory=list)


def _spec_paths(spec: Obj, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for key, wanted in spec.fields.items():
        yield (*prefix, key)
        if isinstance(wanted, Obj):
            yield from _spec_paths(wanted, (*prefix, key))


def _json_paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*prefix, key)
            yield from _json_paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value[:3]):
            yield (*prefix, i)
            yield from _json_paths(item, (*prefix, i))


def _odd_value(rng: random.Random, old: Any) -> Any:
    roll = rng.random()
    if roll < 0.1:
        return str(old)
    if roll < 0.15:
        return [old]
    if roll < 0.2 and isinstance(old, int | float) and not isinstance(old, bool):
        return -old if old else 1
    return rng.choice(ODD_VALUES)


def _child(parent: Any, key: Any) -> dict[str, Any] | list[Any] | None:
    """The object or list at `key` of `parent`, or None."""
    if isinstance(parent, dict):
        child = parent.get(key)
    elif isinstance(parent, list) and isinstance(key, int) and key < len(parent):
        child = parent[key]
    else:
        return None
    return child if isinstance(child, dict | list) else None


def mutate_json(rng: random.Random, doc: dict[str, Any], spec: Obj, what: str) -> str:
    """Change one value of `doc` in place (a key the toolkit reads more often than not); what was done."""
    known = list(_spec_paths(spec))
    present = list(_json_paths(doc))
    wanted = [p for p in present if p in set(known)]
    if rng.random() < 0.3 or not wanted:
        path = rng.choice(known if rng.random() < 0.3 else present or known)
    else:
        path = rng.choice(wanted)
    parent: Any = doc
    for key in path[:-1]:
        child = _child(parent, key)
        if child is None:  # a path of the spec this capture lacks (or holds as a plain value): made here
            if not isinstance(parent, dict):
                return f"{what}: nothing at {path}"
            parent[key] = child = {}
        parent = child
    key = path[-1]
    if isinstance(parent, dict) and key in parent and rng.random() < 0.15:
        del parent[key]
        return f"{what}: {'.'.join(map(str, path))} removed"
    if isinstance(parent, list) and not (isinstance(key, int) and key < len(parent)):
        return f"{what}: nothing at {path}"
    old = parent.get(key) if isinstance(parent, dict) else parent[key]
    value = _odd_value(rng, old)
    parent[key] = value
    return f"{what}: {'.'.join(map(str, path))} = {value!r} (was {type(old).__name__})"


def _retyped(rng: random.Random, column: pa.ChunkedArray) -> pa.ChunkedArray:
    for dtype in rng.sample(COLUMN_TYPES, len(COLUMN_TYPES)):
        if dtype == column.type:
            continue
        if pa.types.is_null(dtype):
            return pa.chunked_array([pa.nulls(len(column))])
        with contextlib.suppress(pa.ArrowException, ValueError):
            return column.cast(dtype)
    return column


def _with_nulls(rng: random.Random, column: pa.ChunkedArray) -> pa.ChunkedArray:
    n = len(column)
    share = rng.choice((0.0, 0.5, 1.0))  # 0.0: one row
    mask = [rng.random() < share for _ in range(n)]
    if n and not any(mask):
        mask[rng.randrange(n)] = True
    return pc.if_else(pa.array(mask, pa.bool_()), pa.scalar(None, column.type), column)


def mutate_table(rng: random.Random, name: str, table: pa.Table) -> tuple[pa.Table, str]:
    """One change of a chunk of table `name` (its schema, or nulls); the table and what was done."""
    names = table.column_names
    column = rng.choice(names)
    i = names.index(column)
    kind = rng.choice(("drop", "rename", "retype", "retype", "nulls", "nulls", "only", "extra", "empty"))
    if kind == "drop" and len(names) > 1:
        return table.remove_column(i), f"column {column} dropped"
    if kind == "rename":  # to a new name, or to one of the table's that the chunk lacks (never two of one name)
        schema = SCHEMAS.get(name)
        new = rng.choice([f"{column}_x", *[n for n in (schema.names if schema else []) if n not in names]])
        return table.rename_columns([new if n == column else n for n in names]), f"column {column} renamed {new}"
    if kind == "retype":
        retyped = _retyped(rng, table.column(i))
        return table.set_column(i, column, retyped), f"column {column} retyped {retyped.type}"
    if kind == "nulls":
        return table.set_column(i, column, _with_nulls(rng, table.column(i))), f"nulls in column {column}"
    if kind == "only":
        return table.select([column]), f"only column {column}"
    if kind == "extra":
        return table.append_column("extra", pa.array(["?"] * table.num_rows)), "an extra column"
    return table.slice(0, 0), "no rows"


CAPTURE = "{capture}"  # in a command: the changed capture's path


def _command(rng: random.Random, out: Path, base_path: Path) -> list[str]:
    kind = rng.choices(
        ("info", "dump", "stalls", "xruns", "spikes", "summarize", "system", "jitter", "compare", "export", "report",
         "plot"),
        weights=(3, 2, 4, 2, 3, 3, 2, 2, 2, 2, 1, 1),
    )[0]  # fmt: skip
    if kind == "dump":
        tables = ("samples", "threads", "events", "system", "sched", "engine_cycles")
        return ["dump", CAPTURE, "--table", rng.choice(tables)]
    if kind == "stalls":
        return [
            "stalls",
            CAPTURE,
            *rng.choice(([], ["--json"], ["--all"], ["--episodes"], ["--proc-only"], ["--truth"])),
        ]
    if kind == "compare":  # the changed capture as A, or as B
        return ["compare", CAPTURE, str(base_path)] if rng.random() < 0.5 else ["compare", str(base_path), CAPTURE]
    if kind == "export":
        fmt = rng.choice(("perfetto", "csv", "parquet"))
        target = out / ("trace.json" if fmt == "perfetto" else fmt)
        return ["export", CAPTURE, "--format", fmt, "-o", str(target), "--force"]
    if kind == "report":
        return ["report", CAPTURE, "-o", str(out / rng.choice(("report.md", "report.md", "report.html"))), "--force"]
    if kind == "plot":
        return ["plot", CAPTURE, "-o", str(out / "plot.png"), "--force", *rng.choice(([], ["--kind", "jitter"]))]
    if kind in ("summarize", "spikes", "jitter") and rng.random() < 0.3:
        return [kind, CAPTURE, "--json"]
    return [kind, CAPTURE]


def make_case(seed: int, number: int, out: Path) -> Case:
    """Case `number` of `seed`: which base, what changes, which command (nothing written yet)."""
    rng = random.Random(f"{seed}:{number}")
    name = rng.choice(BASES)
    source = base(name)
    case = Case(number, seed, name, [], meta=copy.deepcopy(source.meta), trailer=copy.deepcopy(source.trailer))
    case.command = _command(rng, out, REPO / "captures" / name)
    for _ in range(rng.choice((1, 1, 2, 3))):
        roll = rng.random()
        if roll < 0.3:
            case.changes.append(mutate_json(rng, case.meta, META, "meta"))
        elif roll < 0.4:
            if case.trailer is None or rng.random() < 0.2:
                case.trailer = None if case.trailer is not None else {}
                case.changes.append("no trailer" if case.trailer is None else "an empty trailer")
            else:
                case.changes.append(mutate_json(rng, case.trailer, TRAILER, "trailer"))
    tables = dict(source.tables)
    favourites = [n for n in ("samples", "threads", "events", "system", "sched", "thread_seen") if n in tables]
    chunks: dict[str, list[pa.Table]] = {n: [t] for n, t in tables.items()}
    for _ in range(rng.choice((0, 1, 1, 2, 3))):
        name = rng.choice(favourites if rng.random() < 0.6 else sorted(tables))
        parts = chunks[name]
        if len(parts) == 1 and parts[0].num_rows > 1 and rng.random() < 0.4:  # change half of it: a chunk of two
            half = parts[0].num_rows // 2
            parts[:] = [parts[0].slice(0, half), parts[0].slice(half)]
        which = rng.randrange(len(parts))
        parts[which], what = mutate_table(rng, name, parts[which])
        case.changes.append(f"{name} chunk {which + 1}/{len(parts)}: {what}")
    case.chunks = [(n, t) for n, parts in chunks.items() for t in parts]
    return case


def write_case(case: Case, path: Path) -> None:
    write_hand_made(path, case.meta, case.trailer, case.chunks)


def write_hand_made(
    path: Path, meta: dict[str, Any], trailer: dict[str, Any] | None, chunks: list[tuple[str, pa.Table]]
) -> None:
    """A CRC-valid capture written by the format's own writer: `meta` as it is (after the format version the
    writer gives), each chunk as it is (CaptureWriter.append_chunk), and `trailer` as it is, row counts too."""
    writer = CaptureWriter(path, {})
    try:
        writer.update_meta(meta)
        for name, table in chunks:
            writer.append_chunk(name, table)
        if trailer is not None:
            body = json.dumps(trailer, default=_json_default).encode()
            writer._record(TAG_TRAILER, body)  # as given: close() would count the rows itself
    finally:
        writer.abandon()


@dataclass
class Outcome:
    code: int | None
    stdout: str
    stderr: str
    failure: str | None  # why the run broke the CLI's promise; None when it kept it


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Hang


def run_forensics(args: list[str], hang_s: int = 300) -> Outcome:
    """`forensics ARGS` in this process: its exit code and output, and what broke the CLI's promise (a
    traceback, a run past `hang_s`, an exit code it never gives, an error that is not one `error:` line)."""
    from forensics.cli import main

    out, err = io.StringIO(), io.StringIO()
    code: int | None = None
    failure = None
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(hang_s)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("always")
            try:
                main(args)
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except _Hang:
        failure = f"still running after {hang_s} s"
    except Exception:
        failure = traceback.format_exc()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    stderr = err.getvalue()
    errors = [line for line in stderr.splitlines() if "error:" in line]
    if failure is None:
        if "Traceback" in stderr:
            failure = stderr
        elif code not in (0, 1, 2):
            failure = f"exit {code}"
        elif code == 2 and len(errors) != 1:
            failure = f"exit 2 with {len(errors)} error lines: {stderr}"
    return Outcome(code, out.getvalue(), stderr, failure)


def run_case(seed: int, number: int, workdir: Path, hang_s: int = 300) -> tuple[Case, Outcome]:
    out = workdir / f"out-{number}"
    out.mkdir(parents=True, exist_ok=True)
    case = make_case(seed, number, out)
    path = workdir / f"case-{number}.ssf"
    path.unlink(missing_ok=True)
    write_case(case, path)
    args = [str(path) if arg == CAPTURE else arg for arg in case.command]
    outcome = run_forensics(args, hang_s)
    path.unlink(missing_ok=True)
    for leftover in sorted(out.rglob("*"), reverse=True):
        leftover.rmdir() if leftover.is_dir() else leftover.unlink()
    out.rmdir()
    return case, outcome
