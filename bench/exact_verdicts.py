"""Verdicts from the exact sources against the lab's ground truth, and against /proc alone on the same
recordings (root to record; `python bench/exact_verdicts.py [CAPTURE...]`).

Without CAPTURE arguments it records the lab with `catch-load --ebpf --delayacct` (10 episodes of each
cause, 12 ms; --record-args to change). For each capture it prints:

- edge errors per cause (analyses.truth.edge_errors: the wait for io/lock/runqueue, the storm for fault,
  the burn's start and its callback's end for run): max and median |error|, and how many are within
  0.5 ms; episodes next to a hole in the switch record are counted apart;
- the waker named for each lock episode against the truth's holder_tid;
- blkio delay / episode length of io episodes, blkio of lock episodes;
- the confusion matrix and recall/precision with the exact sources, and with /proc alone
  (analyses.source.proc_only: the same capture without the eBPF and taskstats tables).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import forensics  # noqa: E402
from analyses.exact_stalls import load_exact  # noqa: E402
from analyses.source import proc_only  # noqa: E402
from analyses.stalls import find_stalls  # noqa: E402
from analyses.truth import confusion, edge_errors  # noqa: E402

DEFAULT_LAB = "--episodes run:10,runqueue:10,io:10,fault:10,lock:10 --episode-ms 12 --spacing 300ms"
HALF_MS = 500_000


def record(path: Path, lab_args: str, extra: str) -> None:
    argv = [sys.executable, "-m", "forensics.cli.catch_load", "-q", "-o", str(path), *shlex.split(extra)]
    argv += ["--lab", *shlex.split(lab_args)]
    subprocess.run(argv, check=True, cwd=REPO)


def near_gap(cap: forensics.Capture, truth: pd.DataFrame, margin_ns: int = 1_000_000) -> np.ndarray:
    """Truth episodes within margin_ns of a hole in their thread's switch record (state unknown there)."""
    data = load_exact(cap)
    if data is None or data.gaps.empty:
        return np.zeros(len(truth), dtype=bool)
    out = []
    for row in truth.itertuples(index=False):
        g = data.gaps[data.gaps["tid"] == row.tid]
        out.append(bool(((g["start_ns"] < row.end_ns + margin_ns) & (g["end_ns"] > row.start_ns - margin_ns)).any()))
    return np.asarray(out, dtype=bool)


def analyse(path: Path) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cap = forensics.load(path)
    truth = cap.truth
    stalls = find_stalls(cap)
    errors = edge_errors(stalls, truth, cap.cycles)
    errors["near_gap"] = near_gap(cap, truth)
    report: dict[str, Any] = {"capture": str(path), "episodes": len(truth), "near_gap": int(errors["near_gap"].sum())}
    edges = {}
    for cause, group in errors[~errors["near_gap"]].groupby("cause"):
        s = group["start_error_ns"].astype("float64").abs()
        e = group["end_error_ns"].astype("float64").abs()
        edges[cause] = {
            "n": len(group),
            "found": int(group["verdict"].notna().sum()),
            "basis": sorted({str(b) for b in group["basis"].dropna()}),
            "start_max_us": round(float(s.max()) / 1e3, 1),
            "start_median_us": round(float(s.median()) / 1e3, 1),
            "end_max_us": round(float(e.max()) / 1e3, 1),
            "end_median_us": round(float(e.median()) / 1e3, 1),
            "within_0.5ms": int(((s <= HALF_MS) & (e <= HALF_MS)).sum()),
            "end_reference": sorted(set(group["end_reference"])),
        }
    report["edges"] = edges
    locks = errors[errors["cause"] == "lock"]
    if "holder_tid" in locks:
        named = (locks["waker_tid"].astype("Int64") == locks["holder_tid"].astype("Int64")).fillna(False)
        report["lock_waker_is_holder"] = f"{int(named.sum())} of {len(locks)}"
    io_rows = stalls[stalls["verdict"] == "io"]
    lock_rows = stalls[stalls["verdict"] == "lock"]
    if len(io_rows):
        ratio = (io_rows["ts_blkio_ns"].astype("Float64") / io_rows["duration_ns"].astype("float64")).dropna()
        report["io_blkio_over_length"] = {
            "n": len(io_rows),
            "known": len(ratio),
            "min": round(float(ratio.min()), 3) if len(ratio) else None,
            "median": round(float(ratio.median()), 3) if len(ratio) else None,
            "at_least_0.8": int((ratio >= 0.8).sum()),
        }
    if len(lock_rows):
        blk = lock_rows["ts_blkio_ns"].astype("Float64")
        report["lock_blkio_ns"] = {"n": len(lock_rows), "known": int(blk.notna().sum()), "max": _num(blk.max())}
    for name, view in (("exact", stalls), ("proc_only", find_stalls(proc_only(cap)))):
        matrix, scores = confusion(view, truth, cycles=cap.cycles)
        report[f"scores_{name}"] = {
            r.cause: f"recall {r.recall:.2f} precision {r.precision:.2f} ({r.episodes})" for r in scores.itertuples()
        }
        print(f"\n{path.name}: {name}\n{matrix.to_string(index=False)}\n{scores.round(3).to_string(index=False)}")
    return report


def _num(value: Any) -> Any:
    return None if value is None or pd.isna(value) else int(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("captures", nargs="*", type=Path)
    parser.add_argument("--record-args", default=DEFAULT_LAB, help=f"lab options (default: {DEFAULT_LAB})")
    parser.add_argument("--catch-load-args", default="--ebpf --delayacct", help="catch-load options")
    args = parser.parse_args()
    captures = list(args.captures)
    if not captures:
        path = Path(tempfile.mkdtemp(prefix="exact-verdicts-")) / "lab.ssf"
        record(path, args.record_args, args.catch_load_args)
        captures = [path]
    reports = [analyse(p) for p in captures]
    print(json.dumps(reports, indent=2, default=str))


if __name__ == "__main__":
    main()
