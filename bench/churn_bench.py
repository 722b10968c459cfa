"""Reliability check: a long recording of a process that keeps creating and ending threads.

Records bench/many_threads.c with --churn (a new short-lived thread every --churn seconds, 1000 threads
over the default 10 minutes) and samples, every 10 s, the recorder's and the writer's open file
descriptors and RSS. Bounded means: the fd count follows the live threads (2 per thread plus a few),
not the threads ever seen, and RSS levels off.

    python bench/churn_bench.py                       # 600 s, one thread every 0.6 s
    python bench/churn_bench.py --seconds 60 --churn 0.06
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from sampler_bench import OUT, build  # noqa: E402


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--churn", type=float, default=0.6)
    ap.add_argument("--threads", type=int, default=20, help="long-lived threads beside the churn")
    args = ap.parse_args()
    target_bin, *_ = build()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "churn.ssf"
        target = subprocess.Popen(
            [str(target_bin), str(args.threads), str(args.seconds + 5), "--churn", str(args.churn)],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.3)
        recorder = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "forensics.cli.catch_load",
                "-q",
                "-p",
                str(target.pid),
                "-d",
                f"{args.seconds}s",
                "-o",
                str(out),
            ],
            env=env,
        )
        start = time.monotonic()
        while recorder.poll() is None:
            time.sleep(10)
            writer = next(iter(_children(recorder.pid)), None)
            live = len(os.listdir(f"/proc/{target.pid}/task")) if Path(f"/proc/{target.pid}").exists() else 0
            row = {
                "t_s": round(time.monotonic() - start),
                "target_threads": live,
                "recorder_fds": _fds(recorder.pid),
                "recorder_rss_kib": _rss_kib(recorder.pid),
                "writer_fds": _fds(writer) if writer else -1,
                "writer_rss_kib": _rss_kib(writer) if writer else -1,
            }
            if row["recorder_fds"] <= 0 or row["recorder_rss_kib"] < 0:
                break  # the recorder finished between poll() and the reads
            rows.append(row)
            print(json.dumps(row), flush=True)
        churned = int(target.communicate()[0].strip() or 0)
        import forensics

        cap = forensics.load(out)
        seen = cap.threads
        summary = {
            "threads_created_by_churn": churned,
            "threads_in_capture": len(seen),
            "thread_exits_recorded": int((cap.events["kind"] == "thread_exited").sum()),
            "capture_mb": out.stat().st_size / 1e6,
            "samples": cap.trailer["rows"]["samples"],
            "missed_ticks": cap.trailer["missed_ticks"],
            "ticks": cap.trailer["ticks"],
            "recorder_max_rss_kib": cap.trailer["max_rss_kib"],
            "recorder_fds_min_max": [min(r["recorder_fds"] for r in rows), max(r["recorder_fds"] for r in rows)],
            "recorder_rss_kib_first_last": [rows[0]["recorder_rss_kib"], rows[-1]["recorder_rss_kib"]],
            "writer_rss_kib_first_last": [rows[0]["writer_rss_kib"], rows[-1]["writer_rss_kib"]],
        }
    print(json.dumps(summary, indent=2))
    OUT.mkdir(exist_ok=True)
    (OUT / "churn_bench.json").write_text(json.dumps({"rows": rows, "summary": summary}, indent=2))


if __name__ == "__main__":
    main()
