"""The JACK source's cost on the graph: wake-ups per cycle and DSP load, without and with it, in one run.

    python bench/jack_client_cost.py [--seconds 10] [--period 256]

Starts its own jackd (dummy driver, unique name) with two jalv clients in series, then measures the same
graph three times in turn: without the source, with the source (samplers/engine/jack.py: passive client
+ the shared-memory poller), and without again. Per arm and per cycle: wake-ups (voluntary switches, i.e.
sleeps, /proc/<pid>/task/<tid>/status) and preemptions (nonvoluntary switches) of jackd's threads, of the
clients' threads and of the source's own, JACK's cpu_load(), and the source's own CPU time.
Printed side by side, with the ratio with/without. The source's threads are outside the graph: their
wake-ups are its own cost (CPU), not a wake-up in the graph's cycle.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.jack_fixtures import LV2_PLUGINS, jackd  # noqa: E402


def switches(pid: int, kind: str = "voluntary_ctxt_switches") -> int:
    """Sum over the process's threads: voluntary switches are sleeps (each one a later wake-up);
    nonvoluntary ones are preemptions (on this shared machine, mostly by others' work)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
                if line.startswith(kind + ":"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime (stat fields 14, 15)


def cpu_load(server: str) -> float:
    import jack

    client = jack.Client(f"bench-{uuid.uuid4().hex[:6]}", servername=server, no_start_server=True)
    value = float(client.cpu_load())
    client.close()
    return value


def arm(server, clients: list[int], seconds: float, period_s: float, source: int | None) -> dict[str, float]:  # type: ignore[no-untyped-def]
    pids = {"jackd": [server.process.pid], "clients": clients, "source": [source] if source else []}
    kinds = ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")
    before = {(k, c): sum(switches(p, c) for p in v) for k, v in pids.items() for c in kinds}
    ticks = cpu_ticks(source) if source else 0
    time.sleep(seconds)
    after = {(k, c): sum(switches(p, c) for p in v) for k, v in pids.items() for c in kinds}
    cycles = seconds / period_s
    out = {f"{k} wake-ups/cycle": (after[k, kinds[0]] - before[k, kinds[0]]) / cycles for k in pids}
    out.update({f"{k} preemptions/cycle": (after[k, kinds[1]] - before[k, kinds[1]]) / cycles for k in pids})
    hz = os.sysconf("SC_CLK_TCK")
    out["source CPU % of a core"] = 100.0 * (cpu_ticks(source) - ticks) / hz / seconds if source else 0.0
    out["graph wake-ups/cycle"] = out["jackd wake-ups/cycle"] + out["clients wake-ups/cycle"]
    out["cpu_load %"] = cpu_load(server.name)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--period", type=int, default=256)
    args = parser.parse_args()
    period_s = args.period / 48000
    tmp = Path(f"/tmp/jack-bench-{os.getpid()}")
    tmp.mkdir()
    with jackd(tmp, period=args.period) as server:
        procs = [server.jalv(f"b{i}", uri) for i, uri in enumerate(LV2_PLUGINS[:2])]
        server.wait_ports("b0:in", "b1:in")
        server.connect("system:capture_1", "b0:in")
        server.connect("b0:out", "b1:in")
        server.connect("b1:out", "system:playback_1")
        time.sleep(2)
        clients = [p.pid for p in procs]
        results = {"without": arm(server, clients, args.seconds, period_s, None)}
        with open(os.devnull, "wb") as sink:
            source = subprocess.Popen(
                [sys.executable, "-m", "samplers.engine.jack", "--server", server.name, "--rows-fd", "1"],
                stdout=sink,
                env=server.env,
            )
            time.sleep(3)
            results["with source"] = arm(server, clients, args.seconds, period_s, source.pid)
            source.send_signal(signal.SIGTERM)
            source.wait(timeout=20)
        results["without again"] = arm(server, clients, args.seconds, period_s, None)
    names = list(results["without"])
    print(f"jackd dummy {args.period} frames @ 48 kHz, 2 jalv clients in series, {args.seconds:.0f} s per arm")
    print(f"{'figure':28} {'without':>10} {'with source':>12} {'without again':>14} {'with/without':>13}")
    for name in names:
        a, b, c = (results[k][name] for k in ("without", "with source", "without again"))
        base = (a + c) / 2
        ratio = f"{b / base:.3f}" if base else "-"
        print(f"{name:28} {a:10.3f} {b:12.3f} {c:14.3f} {ratio:>13}")


if __name__ == "__main__":
    main()
