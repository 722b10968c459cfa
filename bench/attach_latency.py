"""How long after a JACK server can take clients the recorder's JACK source attaches (issue 22, item 1:
"attached within one discovery scan, <= 250 ms").

`catch-load --match '^jackd$' --children` starts first (the "wait for jackd" use); then jackd (dummy
driver) while a bare libjack client beside it tries to open every 5 ms: its first success is when the
server could first take a client. The source's `engine_source_started` event (same clock,
CLOCK_MONOTONIC) minus that moment is the figure; the socket's appearance is printed too.

    sudo python bench/attach_latency.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from capture.format import load  # noqa: E402
from tests.jack_fixtures import env_with, need_jack  # noqa: E402
from tests.recording import catch_load_argv  # noqa: E402


def first_open(name: str, out: list[int], stop: threading.Event) -> None:
    import jack

    jack.set_error_function(lambda _m: None)
    jack.set_info_function(lambda _m: None)
    while not stop.is_set():
        try:
            client = jack.Client("attach-probe", no_start_server=True, servername=name)
        except jack.JackOpenError:
            time.sleep(0.005)
            continue
        out.append(time.monotonic_ns())
        client.close()
        return


def one_run(work: Path) -> tuple[float, float]:
    name = f"a{uuid.uuid4().hex[:10]}"
    out = work / f"{name}.ssf"
    env = env_with(name)
    rec = subprocess.Popen([*catch_load_argv(), "-q", "-o", str(out), "-d", "60s", "--match", "^jackd$", "--children"],
                           env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    time.sleep(2.0)  # the recorder runs, its JACK source waits for the socket
    opened: list[int] = []
    stop = threading.Event()
    probe = threading.Thread(target=first_open, args=(name, opened, stop))
    probe.start()
    socket = Path("/dev/shm") / f"jack_{name}_{os.getuid()}_0"
    jackd = subprocess.Popen(["jackd", "-n", name, "-R", "-d", "dummy", "-r", "48000", "-p", "256"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    while not socket.exists():
        time.sleep(0.001)
    seen = time.monotonic_ns()
    time.sleep(3.0)
    stop.set()
    probe.join()
    rec.send_signal(2)
    rec.wait(timeout=60)
    jackd.terminate()
    jackd.wait(timeout=10)
    events = load(out).events
    started = int(events[events["kind"] == "engine_source_started"]["t_ns"].iloc[0])
    return (started - opened[0]) / 1e6, (started - seen) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    need_jack()
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            after_open, after_socket = one_run(Path(tmp))
            load_avg = os.getloadavg()[0]
            print(f"run {run + 1}: attached {after_open:.0f} ms after a client could first open "
                  f"({after_socket:.0f} ms after the socket appeared), load {load_avg:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
