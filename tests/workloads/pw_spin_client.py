"""A JACK client (JACK-Client over libjack, or PipeWire's libjack through `pw-jack`) whose process
callback spins for a known time on cue: a late client of known identity inside a real graph.

    pw-jack python3 tests/workloads/pw_spin_client.py --name spin --spin-ms 20 --truth truth.jsonl [--ready FILE]

Cue: SIGUSR1. The callback that takes the cue writes nothing itself (no I/O in the real-time thread);
it stamps CLOCK_MONOTONIC at the start and end of the spin into a slot that the main thread writes to
the truth file as one JSON line {"cue_ns", "start_ns", "end_ns", "frames"} (ground truth for tests).
SIGTERM ends it. Links its output to its own input (a node with a link in the graph), to nothing, or to
another client's input (`--link-to spin2:in`: clients in series).
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time

import jack


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", default="spin")
    parser.add_argument("--spin-ms", type=float, default=20.0)
    parser.add_argument("--truth", required=True)
    parser.add_argument("--ready", default=None, help="file written once the client is active")
    parser.add_argument("--link-to", default="self", help="input port fed by our output: self, none, or a port name")
    args = parser.parse_args()
    spin_ns = int(args.spin_ms * 1e6)
    cues: list[int] = []  # appended by the signal handler (main thread)
    done: list[dict[str, int]] = []
    wake = threading.Event()
    stop = threading.Event()

    client = jack.Client(args.name, no_start_server=True)
    out = client.outports.register("out")
    inp = client.inports.register("in")

    @client.set_process_callback
    def process(frames: int) -> None:
        out.get_buffer()[:] = bytes(frames * 4)
        if cues:
            cue = cues.pop(0)
            start = time.monotonic_ns()
            while time.monotonic_ns() - start < spin_ns:
                pass
            done.append({"cue_ns": cue, "start_ns": start, "end_ns": time.monotonic_ns(), "frames": frames})
            wake.set()

    signal.signal(signal.SIGUSR1, lambda *_: cues.append(time.monotonic_ns()))
    signal.signal(signal.SIGTERM, lambda *_: (stop.set(), wake.set()))
    client.activate()
    if args.link_to == "self":
        client.connect(out, inp)
    elif args.link_to != "none":
        client.connect(out, args.link_to)
    if args.ready:
        with open(args.ready, "w") as fh:
            fh.write(str(client.blocksize))
    with open(args.truth, "a") as fh:
        while not stop.is_set():
            wake.wait(0.2)
            wake.clear()
            while done:
                fh.write(json.dumps(done.pop(0)) + "\n")
                fh.flush()
    client.deactivate()
    client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
