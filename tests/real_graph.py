"""A real JACK graph for tests: jackd on its dummy driver, fluidsynth, and four jalv clients in series.

fluidsynth -> p0 -> p1 -> p2 -> p3, each pN a jalv hosting an LV2 plugin. fluidsynth brings the
housekeeping threads of a real client (a nice-19 thread that wakes every 100 ms); jalv keeps running
only while its stdin is open, so each gets a fifo held open by this process (it runs headless that
way). Every process gets a unique server name so that tests on a shared machine do not meet.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import stop_process

PLUGIN = "http://gareus.org/oss/lv2/balance"  # x42-plugins: a stereo gain/balance, cheap and quiet
SOUNDFONT = "/usr/share/sounds/sf2/TimGM6mb.sf2"
HOG_SOURCE = Path(__file__).resolve().parent / "workloads" / "fifo_hog.c"


def missing_tools() -> list[str]:
    return [
        t
        for t in ("jackd", "jack_lsp", "jack_connect", "jack_wait", "fluidsynth", "jalv", "gcc")
        if not shutil.which(t)
    ]


@dataclass
class Graph:
    server: str
    env: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    fifos: list[int] = field(default_factory=list)

    @property
    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.procs.items()}


def _wait_ports(env: dict[str, str], prefix: str, timeout_s: float = 20.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = subprocess.run(["jack_lsp"], env=env, capture_output=True, text=True, timeout=10).stdout
        ports = [p for p in out.splitlines() if p.startswith(prefix + ":")]
        if ports:
            return ports
        time.sleep(0.2)
    raise RuntimeError(f"JACK client {prefix} did not appear within {timeout_s:g} s")


def _audio_ports(env: dict[str, str], client: str, direction: str) -> list[str]:
    out = subprocess.run(["jack_lsp", "-p", "-t"], env=env, capture_output=True, text=True, timeout=10).stdout
    lines = out.splitlines()
    ports = []
    for i, line in enumerate(lines):
        if not line.startswith(client + ":"):
            continue
        props = " ".join(lines[i + 1 : i + 3])
        if direction in props and "audio" in props:
            ports.append(line.strip())
    return sorted(ports)


@contextmanager
def jack_graph(workdir: Path, *, frames: int = 128, clients: int = 4) -> Iterator[Graph]:
    """Start the graph, connect it in series, yield it; kill everything it started on the way out."""
    server = f"incidents{os.getpid()}x{int(time.monotonic() * 1000) % 100000}"
    env = dict(os.environ, JACK_DEFAULT_SERVER=server, JACK_NO_AUDIO_RESERVATION="1")
    graph = Graph(server=server, env=env)
    logs = workdir / "logs"
    logs.mkdir(exist_ok=True)

    def start(name: str, argv: list[str], stdin: int | None = None) -> None:
        log = open(logs / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        graph.procs[name] = subprocess.Popen(argv, env=env, stdin=stdin, stdout=log, stderr=subprocess.STDOUT)

    try:
        start("jackd", ["jackd", "-n", server, "-R", "-d", "dummy", "-r", "48000", "-p", str(frames)])
        subprocess.run(["jack_wait", "-w", "-t", "10"], env=env, check=True, capture_output=True, timeout=20)
        cfg = workdir / "fluid.cfg"
        cfg.write_text("noteon 0 60 100\n")
        start(
            "fluidsynth",
            ["fluidsynth", "-a", "jack", "-n", "-r", "48000", "-i", "-s", "-o", "audio.jack.autoconnect=0",
             "-f", str(cfg), SOUNDFONT],
        )  # fmt: skip
        _wait_ports(env, "fluidsynth")
        for k in range(clients):
            fifo = workdir / f"p{k}.in"
            os.mkfifo(fifo)
            fd = os.open(fifo, os.O_RDWR)  # held open: jalv exits at end of input
            graph.fifos.append(fd)
            start(f"p{k}", ["jalv", "-n", f"p{k}", PLUGIN], stdin=fd)
            _wait_ports(env, f"p{k}")
        upstream = _audio_ports(env, "fluidsynth", "output")
        for k in range(clients):
            inputs = _audio_ports(env, f"p{k}", "input")
            for src, dst in zip(upstream, inputs, strict=False):
                subprocess.run(["jack_connect", src, dst], env=env, check=True, capture_output=True, timeout=10)
            upstream = _audio_ports(env, f"p{k}", "output")
        for name, proc in graph.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited early (code {proc.returncode}); see {logs / (name + '.log')}")
        yield graph
    finally:
        for name in reversed(list(graph.procs)):
            stop_process(graph.procs[name])
        for fd in graph.fifos:
            os.close(fd)


def build_hog(workdir: Path) -> Path:
    out = workdir / "fifo_hog"
    subprocess.run(["gcc", "-O2", "-Wall", "-o", str(out), str(HOG_SOURCE)], check=True, capture_output=True)
    return out


def run_hog(hog: Path, *, priority: int, spin_ms: int, count: int, gap_ms: int) -> list[tuple[int, int, int | None]]:
    """Starve every CPU `count` times; returns (start_ns, end_ns, steal_ns) of each injection,
    CLOCK_MONOTONIC, with the machine's hypervisor steal over it (None where /proc/stat has none)."""
    out = subprocess.run(
        [str(hog), str(priority), str(spin_ms), str(count), str(gap_ms)],
        capture_output=True, text=True, check=True, timeout=count * gap_ms / 1000 + 30,
    )  # fmt: skip
    spans = []
    for line in out.stdout.splitlines():
        _, start, end, steal = line.split()
        spans.append((int(start), int(end), int(steal) if int(steal) >= 0 else None))
    return spans


def tempdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="incidents-graph-"))
