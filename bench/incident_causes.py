"""Incidents against known causes on real graphs: confusion matrix, recall and precision per cause, per
engine (JACK, PipeWire) and per source (eBPF, /proc alone), for a report. Root (real-time priorities,
eBPF); needs jackd, PipeWire, jalv, gcc and BCC as the real-graph tests do.

    python bench/incident_causes.py [--engines jack,pipewire] [--per-cause 10] [--ms 20] [--keep DIR]
                                    [--recorder-first]

Each engine is recorded once with `catch-load --ebpf` while tests/injections.py injects every cause
`--per-cause` times (interleaved); the capture is analysed with its eBPF tables and without them
(analyses.source.proc_only). Rows of a matrix: the injected cause (`none`: an incident away from every
injection, the shared machine's own late cycles); columns: the cause the incident's root names (its
verdict at that cause's thread), `missed` or `split` when an injection was not exactly one incident.
With --recorder-first, `catch-load --match '^jackd$' --children` (or '^pipewire$') starts before the
engine and is told nothing of the graph: the README's "wait for jackd" use.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import forensics  # noqa: E402
from tests import injections  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="jack,pipewire")
    parser.add_argument("--per-cause", type=int, default=10)
    parser.add_argument("--ms", type=int, default=20, help="length of each injection")
    parser.add_argument("--keep", type=Path, default=None, help="keep the captures in this directory")
    parser.add_argument("--recorder-first", action="store_true", help="start catch-load --match before the engine")
    args = parser.parse_args()
    pd.set_option("display.width", 200)
    for engine in args.engines.split(","):
        work = Path(tempfile.mkdtemp(prefix=f"causes-{engine}-"))
        try:
            if engine == "jack":
                rec = injections.record_jack(
                    work, per_cause=args.per_cause, ms=args.ms, recorder_first=args.recorder_first
                )
            else:
                rec = injections.record_pipewire(
                    work, per_cause=args.per_cause, ms=args.ms, recorder_first=args.recorder_first
                )
            order = "recorder first" if args.recorder_first else "graph first"
            cap = forensics.load(rec.path)
            for ebpf in (True, False):
                score = injections.score(cap, rec, injections.incidents_of(cap, ebpf=ebpf))
                print(f"\n== {engine} ({order}), {'eBPF' if ebpf else '/proc alone'}: {len(rec.injections)} injections")
                print(score.confusion.to_string())
                table = pd.DataFrame({"recall": score.recall, "precision": score.precision}).round(2)
                print(table.T.to_string())
                wrong = score.rows[~score.rows["right"]]
                if len(wrong):
                    print("wrong:\n" + wrong.to_string(index=False))
                verdicts = score.extra["root_verdict"].value_counts().to_dict()
                print(f"{len(score.extra)} incidents away from every injection, roots: {verdicts}")
            if args.keep:
                args.keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(rec.path, args.keep / rec.path.name)
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
