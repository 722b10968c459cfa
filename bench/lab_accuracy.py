"""Recall and precision of the /proc verdicts on live lab recordings: the figures tests/test_accuracy_lab.py
checks only as invariants (`python bench/lab_accuracy.py [--repeat N] [CAPTURE...]`; root for SCHED_FIFO).

Without CAPTURE arguments it records, as the test does, with `catch-load --lab` at 2 ms from /proc alone:
10 episodes of each cause at 12 ms (run, runqueue, io, fault, lock) and at 6 ms (no lock: /proc cannot
see a lock wait shorter than about a period plus two sampling intervals), 300 ms apart, and a 15 s run
without episodes. For each it prints the confusion matrix and per cause: episodes scored, not as injected
and unobservable (analyses.truth: the lab's own record, and sampler gaps over half an episode: counted,
not scored), recall and precision; for the clean run, the verdicts on lab-audio and the callbacks the
lab logged as late; for the 6 ms run episodes, how many found at 2 ms are lost resampled to 20 ms (the
sampling-rate lesson). With --repeat N, each recording N times and the worst recall and precision per
cause over them. Run it on an otherwise idle machine for the README's figures; beside a load
(`nice -n 10 stress-ng --cpu 1 --cpu-load 70`) to see what the load costs. `--catch-load "--slow-interval 20ms"`
records with catch-load's read tiers on (issue 12: nothing lost in accuracy with tiers), or with any other of
its options.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import forensics  # noqa: E402
from analyses.resample import resample  # noqa: E402
from analyses.rules import LAB_INTERVAL_NS  # noqa: E402
from analyses.stalls import find_stalls  # noqa: E402
from analyses.truth import confusion, late_cycles, match_truth, thread_reads, within_log  # noqa: E402

RUNS = {
    "12 ms": "--episodes run:10,runqueue:10,io:10,fault:10,lock:10 --episode-ms 12 --spacing 300ms",
    "6 ms": "--episodes run:10,runqueue:10,io:10,fault:10 --episode-ms 6 --spacing 300ms",
    "clean": "--episodes none --duration 15s",
}


def record(path: Path, lab_args: str, catch_load_args: str = "") -> None:
    argv = [sys.executable, "-m", "forensics.cli.catch_load", "-q", "-o", str(path), *shlex.split(catch_load_args)]
    argv += ["--lab", *shlex.split(lab_args)]
    subprocess.run(argv, check=True, cwd=REPO)


def scores_of(cap: forensics.Capture) -> pd.DataFrame:
    """The confusion matrix (printed) and the scores per cause of one capture with ground truth."""
    reads = thread_reads(cap, cap.truth["tid"].unique())
    matrix, scores = confusion(find_stalls(cap), cap.truth, cycles=cap.cycles, system=cap.system, reads=reads)
    print(matrix.to_string(index=False))
    print(scores.to_string(index=False))
    return scores


def lesson_figures(cap: forensics.Capture) -> None:
    """The sampling-rate lesson on the 6 ms run episodes: found at 2 ms, lost when resampled to 20 ms."""
    reads = thread_reads(cap, cap.truth["tid"].unique())
    matched = match_truth(find_stalls(cap), cap.truth, reads=reads)
    scored = matched[(matched["cause"] == "run") & matched["as_injected"] & matched["observable"]]
    found = scored[scored["verdict"] == "run"]
    at_20ms = find_stalls(resample(cap, 20_000_000))
    lost = 0
    for row in found.itertuples(index=False):
        same = at_20ms[at_20ms["tid"] == row.tid]
        lost += not bool(((same["start_ns"] < row.end_ns) & (same["end_ns"] > row.start_ns)).any())
    print(f"lesson: 6 ms run episodes scored {len(scored)}, found at 2 ms {len(found)}, of those lost at 20 ms {lost}")


def clean_figures(cap: forensics.Capture) -> None:
    audio = cap.cycles["tid"].iloc[0]
    stalls = find_stalls(cap)
    stalls = stalls[(stalls["tid"] == audio) & within_log(stalls, cap.cycles)]
    late = late_cycles(cap.cycles, interval_ns=cap.interval_ns or LAB_INTERVAL_NS)
    print(f"clean: {len(cap.cycles)} callbacks, {len(late)} logged late; verdicts on lab-audio: {len(stalls)}")
    if len(stalls):
        # The window tests/recording.assert_verdicts_only_on_late_callbacks allows around a late callback.
        on_late = [
            bool(((late["start_ns"] < row.end_ns + 6_000_000) & (late["end_ns"] > row.start_ns - 2_000_000)).any())
            for row in stalls.itertuples(index=False)
        ]
        shown = stalls.assign(on_late_callback=on_late)
        print(shown[["start_ns", "duration_ns", "verdict", "on_late_callback", "evidence"]].to_string(index=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("captures", nargs="*", type=Path, help="lab captures to score instead of recording")
    parser.add_argument("--repeat", type=int, default=1, help="record each run this many times")
    parser.add_argument("--keep", type=Path, help="record into this directory and keep the captures")
    parser.add_argument(
        "--catch-load", default="", help='catch-load options for the recordings, e.g. "--slow-interval 20ms"'
    )
    args = parser.parse_args()
    if args.captures:
        for path in args.captures:
            print(f"== {path}")
            cap = forensics.load(path)
            if cap.truth.empty:
                clean_figures(cap)
            else:
                scores_of(cap)
        return
    worst: dict[str, list[pd.DataFrame]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        for attempt in range(args.repeat):
            for name, lab_args in RUNS.items():
                path = tmp / f"{name.replace(' ', '')}-{attempt}.ssf"
                print(
                    f"== {name} ({attempt + 1} of {args.repeat}): catch-load {args.catch_load} --lab {lab_args}",
                    flush=True,
                )
                record(path, lab_args, args.catch_load)
                cap = forensics.load(path)
                if cap.truth.empty:
                    clean_figures(cap)
                else:
                    worst.setdefault(name, []).append(scores_of(cap))
                if name == "6 ms":
                    lesson_figures(cap)
    for name, all_scores in worst.items():
        table = pd.concat(all_scores).groupby("cause")
        summary = table.agg(
            scored=("episodes", "sum"),
            not_as_injected=("not_as_injected", "sum"),
            unobservable=("unobservable", "sum"),
            recall_min=("recall", "min"),
            precision_min=("precision", "min"),
        )
        print(f"\n{name} episodes over {len(all_scores)} recording(s):\n{summary.to_string()}")


if __name__ == "__main__":
    main()
