"""The content fuzzer of tests/capture_fuzz.py at full length (issue 23: 0 tracebacks in at least 2000 cases).

Each case is a sample capture whose metadata, trailer or table chunks were changed, written CRC-valid by the
format's own writer, and one `forensics` command run on it in-process (tests/capture_fuzz.py says what is
changed and what a pass is). Cases are split over --jobs processes; every case is made from (seed, number)
alone, so any one reruns by itself with --case. Printed: the count, the seed, the exit codes, and each failure
(its number, the command, what was changed, the last line of the traceback); the exit status is 1 if any.

    python bench/capture_fuzz.py                          # 2000 cases, seed 23, 2 processes
    python bench/capture_fuzz.py --cases 200 --seed 7
    python bench/capture_fuzz.py --case 1234 --seed 23    # one case again, with its whole output
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests.capture_fuzz import run_case  # noqa: E402


def _run(job: tuple[int, list[int], str]) -> list[tuple[int, str, int | None, str | None]]:
    seed, numbers, workdir = job
    results = []
    for number in numbers:
        case, outcome = run_case(seed, number, Path(workdir))
        summary = f"{case.base} {' '.join(case.command[:1])}: {'; '.join(case.changes) or 'unchanged'}"
        results.append((number, summary, outcome.code, outcome.failure))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--case", type=int, default=None, help="run this one case and print all it printed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="capture-fuzz-") as workdir:
        if args.case is not None:
            case, outcome = run_case(args.seed, args.case, Path(workdir))
            print(f"case {args.case} of seed {args.seed}: {case.base}, forensics {' '.join(case.command)}")
            print("changes:", *case.changes, sep="\n  ")
            print(f"exit {outcome.code}\n--- stdout\n{outcome.stdout}--- stderr\n{outcome.stderr}")
            print(f"--- {'FAILED' if outcome.failure else 'passed'}\n{outcome.failure or ''}")
            return 1 if outcome.failure else 0
        started = time.monotonic()
        jobs = [(args.seed, list(range(i, args.cases, args.jobs)), workdir) for i in range(args.jobs)]
        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            results = [r for part in pool.map(_run, jobs) for r in part]
    codes = collections.Counter(code for _, _, code, _ in results)
    failures = sorted((n, s, f) for n, s, _, f in results if f)
    print(f"capture content fuzzer: {len(results)} cases, seed {args.seed}, {time.monotonic() - started:.0f} s")
    print("exit codes: " + ", ".join(f"{code}: {count}" for code, count in sorted(codes.items(), key=str)))
    print(f"failures (a traceback, a hang, or an error that is not one line): {len(failures)}")
    for number, summary, failure in failures:
        print(f"  case {number}: {summary}\n    {failure.strip().splitlines()[-1]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
