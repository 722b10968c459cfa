"""The lab's ground truth: the JSON file it writes (`--truth FILE`) and a reader that gives DataFrames.

The file (times are CLOCK_MONOTONIC ns, the clock the samplers read; tids are kernel thread ids):

    {"episodes": [{"cause", "tid", "start_ns", "end_ns", ...}, ...],
     "cycles":   [{"tid", "start_ns", "end_ns", "deadline_ns", "period"}, ...],
     "lab":      {settings, the policy obtained, every thread and its role, stats, ...}}

Extra keys of an episode depend on its cause: every episode has `index` (0-based, in time order),
`period` (the callback it ran in), `planned_ns`, `cpu_ns` (the callback thread's own CPU time over the
episode, CLOCK_THREAD_CPUTIME_ID) and `steal_ns` (the machine's hypervisor steal meanwhile, /proc/stat, to
a 10 ms tick) and `io_pressure_ns` (the machine's IO pressure "some" meanwhile, /proc/pressure/io; null
without PSI); `lock` adds `holder_pid`, `holder_tid` (the thread
whose futex_wake ends the wait), `held_ns`, `released_ns`; `runqueue` adds `cpu`, `competitor_pid`,
`competitor_tid`, `competitors`; `io` adds `io_mode`, `io_ops`, `io_bytes`; `fault` adds `fault_kind`,
`pages` (pages touched: at least that many faults).

`read_truth(path)` returns `Truth(episodes, cycles, lab)`: `episodes` has the columns `cause tid start_ns
end_ns` first (as the capture's `truth` table, capture.format.TRUTH_SCHEMA) then the extra ones;
`cycles` has `tid start_ns end_ns deadline_ns` (CYCLES_SCHEMA) then `period`. Columns every record has
are int64 (tid int32); a column only some records have holds Python ints or strings and None (object
dtype), so that `frame[column].tolist()` is JSON-safe (no pd.NA, no NaN).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from capture.errors import ForensicsError

EPISODE_COLUMNS = ["cause", "tid", "start_ns", "end_ns"]
CYCLE_COLUMNS = ["tid", "start_ns", "end_ns", "deadline_ns"]
_INT32 = {"tid", "holder_pid", "holder_tid", "competitor_pid", "competitor_tid", "cpu"}


@dataclass
class Truth:
    episodes: pd.DataFrame
    cycles: pd.DataFrame
    lab: dict[str, Any] = field(default_factory=dict)


def _column(name: str, values: list[Any]) -> pd.Series | list[Any]:
    """Integers stay exact integers (ns since boot exceed float64's 2**53 after 104 days of uptime).

    A column some records lack (holder_tid is only on lock episodes) holds Python values and None (object
    dtype): exact, and `.tolist()` gives JSON-safe values for a capture's table; forensics.load gives it
    back as a nullable Int64 column. Not pandas' Int64/NA here: pd.NA is not JSON.
    """
    present = [v for v in values if v is not None]
    if len(present) < len(values):
        return pd.Series(values, dtype=object)
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pd.Series(values, dtype="int32" if name in _INT32 else "int64")
    if present and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return pd.Series([float(v) for v in values], dtype="float64")
    return values


def _frame(rows: list[Mapping[str, Any]], first: list[str]) -> pd.DataFrame:
    names = list(first)
    for row in rows:
        if not isinstance(row, Mapping):
            raise ForensicsError("the truth file's records are not objects: it is not a lab truth file")
        names += [k for k in row if k not in names]
    for row in rows:
        missing = [c for c in first if c not in row]
        if missing:
            raise ForensicsError(f"a record of the truth file lacks {', '.join(missing)}: not a lab truth file")
    frame = pd.DataFrame({name: _column(name, [row.get(name) for row in rows]) for name in names})
    if not rows:  # typed empty columns, so a concat or a cast to the capture's schema keeps the types
        frame = frame.astype({c: ("int32" if c in _INT32 else "int64") for c in first if c != "cause"})
    if "cause" in frame.columns:
        frame["cause"] = frame["cause"].astype(str)
    return frame


def truth_frames(document: Mapping[str, Any]) -> Truth:
    """DataFrames from a truth document already loaded (e.g. from JSON in a capture's metadata)."""
    if not isinstance(document, Mapping) or "episodes" not in document or "cycles" not in document:
        raise ForensicsError("not a lab truth document: it needs top-level 'episodes' and 'cycles' lists")
    return Truth(
        episodes=_frame(list(document["episodes"]), EPISODE_COLUMNS),
        cycles=_frame(list(document["cycles"]), CYCLE_COLUMNS),
        lab=dict(document.get("lab") or {}),
    )


def read_truth(path: str | os.PathLike[str]) -> Truth:
    """Load a truth file written by the lab (`--truth FILE`)."""
    p = Path(path)
    try:
        text = p.read_text()
        if not text.strip():
            raise ForensicsError(f"the truth file {p} is empty: the lab did not write it (see its messages)")
        document = json.loads(text)
    except FileNotFoundError:
        raise ForensicsError(f"no such truth file: {p}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ForensicsError(f"cannot read the truth file {p}: {err}") from None
    except json.JSONDecodeError as err:
        raise ForensicsError(f"{p} is not JSON ({err.msg} at line {err.lineno}): not a lab truth file") from None
    return truth_frames(document)


def write_truth(path: str | os.PathLike[str], document: Mapping[str, Any]) -> None:
    """Write atomically (a temporary file renamed over the target): a reader never sees half a file."""
    p = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent if str(p.parent) else ".")
        with os.fdopen(fd, "w") as fh:
            json.dump(document, fh, separators=(",", ":"))
            fh.write("\n")
        os.replace(tmp, p)
    except OSError as err:
        raise ForensicsError(f"cannot write the truth file {p}: {err.strerror or err}") from None


def check_writable(path: str | os.PathLike[str]) -> None:
    """Fail before a long run, not after it, when the truth file cannot be written."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise ForensicsError(f"--truth {p} is a directory; give a file name")
    if not parent.is_dir():
        raise ForensicsError(f"--truth {p}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ForensicsError(f"--truth {p}: the directory {parent} is not writable")
