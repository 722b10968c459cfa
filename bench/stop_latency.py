"""How long catch-load takes to end after a stop signal, the figure tests/test_stop_signals.py no longer
times (there it only has to end well before a calm end's wait, on any machine).

    sudo python bench/stop_latency.py [--repeat 5]

Per case and signal: seconds from the signal to the recorder's exit, min / median / max over the repeats.
Cases: the writer stopped (SIGSTOP, so the urgent end's bound, samplers/recorder.py END_DRAIN_NS, is
what ends it) and a 60 s interval (the tick loop must notice the stop without waiting for its next tick).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MANY_THREADS = (
    "import threading, time\n"
    "for _ in range(200):\n"
    "    threading.Thread(target=time.sleep, args=(120,), daemon=True).start()\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)
CASES = {"writer stopped": ["--slow-interval", "off"], "60 s interval": ["-i", "60s"]}


def stop_once(target: int, out: Path, extra: list[str], signum: int) -> float:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    recorder = subprocess.Popen(
        [sys.executable, "-m", "forensics.cli.catch_load", "-q", "--force", "-o", str(out), "-p", str(target), *extra],
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=REPO,
    )
    while not out.exists() or out.stat().st_size < 4096:  # recording
        if recorder.poll() is not None:
            raise SystemExit(f"catch-load exited with {recorder.returncode} before recording")
        time.sleep(0.05)
    writers = [int(x) for x in Path(f"/proc/{recorder.pid}/task/{recorder.pid}/children").read_text().split()]
    if "--slow-interval" in extra:
        for writer in writers:
            os.kill(writer, signal.SIGSTOP)
    time.sleep(2)
    sent = time.perf_counter()
    recorder.send_signal(signum)
    recorder.wait()
    took = time.perf_counter() - sent
    for writer in writers:  # the recorder resumes it itself; never leave one stopped
        with contextlib.suppress(ProcessLookupError):
            os.kill(writer, signal.SIGCONT)
    time.sleep(0.5)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    target = subprocess.Popen([sys.executable, "-c", MANY_THREADS], stdout=subprocess.PIPE, text=True)
    assert target.stdout is not None and target.stdout.readline().strip() == "ready"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "stop.ssf"
            for case, extra in CASES.items():
                for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                    took = [stop_once(target.pid, out, extra, signum) for _ in range(args.repeat)]
                    print(
                        f"{case:15} {signal.Signals(signum).name:7} signal to exit: min {min(took):.2f} s, "
                        f"median {statistics.median(took):.2f} s, max {max(took):.2f} s",
                        flush=True,
                    )
    finally:
        target.kill()
        target.wait()


if __name__ == "__main__":
    main()
