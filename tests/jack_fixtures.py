"""Real JACK graphs for the tests, the one harness: jackd (dummy driver) under a unique name, real clients
(jalv plugins, fluidsynth, the cue client), always killed; the series graph of the incident tests
(series_graph); and the SCHED_FIFO hog that starves a graph (build_hog, run_hog)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers import REPO, child_env, stop_process
from tests.recording import catch_load_argv, wait_capture_growing

CUE_CLIENT = REPO / "tests" / "workloads" / "jack_cue_client.py"
HOG_SOURCE = REPO / "tests" / "workloads" / "fifo_hog.c"
SOUNDFONT = "/usr/share/sounds/sf2/TimGM6mb.sf2"
BALANCE_PLUGIN = "http://gareus.org/oss/lv2/balance"  # x42-plugins: a stereo gain/balance, cheap and quiet
GRAPH_TOOLS = ("jackd", "jack_lsp", "jack_connect", "jack_wait", "fluidsynth", "jalv", "gcc")
LV2_PLUGINS = [  # four plugins with one audio in and out, from lsp-plugins-lv2 and x42-plugins
    "http://lsp-plug.in/plugins/lv2/comp_delay_mono",
    "http://lsp-plug.in/plugins/lv2/para_equalizer_x16_mono",
    "http://lsp-plug.in/plugins/lv2/compressor_mono",
    "http://lsp-plug.in/plugins/lv2/limiter_mono",
]


def env_with(server: str) -> dict[str, str]:
    return child_env(JACK_DEFAULT_SERVER=server)


def missing_graph_tools() -> list[str]:
    """What series_graph and the hog need that this machine lacks (tests/install-deps.sh installs them)."""
    return [tool for tool in GRAPH_TOOLS if not shutil.which(tool)]


def need_jack() -> None:
    if shutil.which("jackd") is None:
        pytest.skip("jackd is not installed (apt jackd2)")
    try:
        import jack  # noqa: F401
    except (ImportError, OSError) as err:
        pytest.skip(f"JACK-Client/libjack unavailable: {err}")


def audio_ports_listed(jack_lsp_p_t: str, client: str, direction: str) -> list[str]:
    """`client`'s audio ports of `direction` ("input"/"output") in the output of `jack_lsp -p -t`, which
    prints each port's properties and type on the two lines after its name; sorted."""
    lines = jack_lsp_p_t.splitlines()
    ports = []
    for i, line in enumerate(lines):
        if line.startswith(client + ":"):
            props = " ".join(lines[i + 1 : i + 3])
            if direction in props and "audio" in props:
                ports.append(line.strip())
    return sorted(ports)


@dataclass
class JackServer:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    tmp: Path
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return env_with(self.name)

    def run(self, *cmd: str, timeout: float = 10) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, timeout=timeout)

    def connect(self, src: str, dst: str) -> None:
        result = self.run("jack_connect", src, dst)
        assert result.returncode == 0, result.stderr

    def start(self, *cmd: str, **kw: object) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(list(cmd), env=self.env, start_new_session=True, **kw)  # type: ignore[call-overload]
        self.children.append(process)
        return process

    def wait_ports(self, *ports: str, timeout: float = 30) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            listed = set(self.run("jack_lsp").stdout.split())
            if all(p in listed for p in ports):
                return
            time.sleep(0.2)
        raise AssertionError(f"ports {ports} did not appear: {sorted(listed)}")

    def wait_client(self, client: str, timeout: float = 30) -> None:
        """Until `client` has registered a port (a client whose port names the test does not know)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if any(port.startswith(client + ":") for port in self.run("jack_lsp").stdout.splitlines()):
                return
            time.sleep(0.2)
        raise AssertionError(f"JACK client {client} did not appear within {timeout:g} s")

    def audio_ports(self, client: str, direction: str) -> list[str]:
        """`client`'s audio ports of `direction` ("input"/"output"), sorted: jack_lsp -p -t prints each
        port's properties and type on the two lines after its name."""
        return audio_ports_listed(self.run("jack_lsp", "-p", "-t").stdout, client, direction)

    def connect_in_series(self, upstream: list[str], clients: Iterable[str], into: Sequence[str] = ()) -> list[str]:
        """Each of `clients` fed by the one before (the first by the `upstream` ports), port by port in sorted
        order, the last one's outputs into `into` (the playback ports); the last one's audio outputs."""
        for client in clients:
            for src, dst in zip(upstream, self.audio_ports(client, "input"), strict=False):
                self.connect(src, dst)
            upstream = self.audio_ports(client, "output")
        for src, dst in zip(upstream, into, strict=False):
            self.connect(src, dst)
        return upstream

    def cue_client(self, name: str = "cue") -> CueClient:
        control = self.tmp / f"{name}.ctl"
        truth = self.tmp / f"{name}.truth"
        os.mkfifo(control)
        process = self.start(
            sys.executable,
            str(CUE_CLIENT),
            "--name",
            name,
            "--server",
            self.name,
            "--control",
            str(control),
            "--truth",
            str(truth),
        )
        self.wait_ports(f"{name}:in", f"{name}:out")
        return CueClient(name, process, control, truth)

    def _held_stdin(self, name: str) -> int:
        """A fifo held open by a writer: a client reading it never sees EOF (jalv and fluidsynth's shell
        exit at EOF on stdin). The caller closes the returned fd once the child has it."""
        fifo = self.tmp / f"{name}.stdin"
        os.mkfifo(fifo)
        return os.open(fifo, os.O_RDWR)

    def jalv(self, name: str, uri: str) -> subprocess.Popen[bytes]:
        holder = self._held_stdin(name)
        process = self.start(
            "jalv", "-n", name, uri, stdin=holder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        os.close(holder)
        return process

    def fluidsynth(self, commands: str = "") -> subprocess.Popen[bytes]:
        """A real softsynth client (ports fluidsynth:left/right); its soundfont load takes seconds.
        Kept alive by its shell on a held stdin, not by `-i -s`: `-s` listens on TCP 9800, and a second
        fluidsynth on the machine (another test's, another session's) fails to bind it, goes on without a
        server and, with no shell (-i), exits at once after registering its ports (observed: the ports
        were listed, then `jack_connect fluidsynth:left ...` said 'not a valid port'). `commands` go to
        its shell first (e.g. "noteon 0 60 100\\n": a held note keeps its synthesis busy)."""
        holder = self._held_stdin("fluidsynth")
        os.write(holder, commands.encode())  # a fifo's buffer: the shell reads it once it runs
        process = self.start(
            *("fluidsynth", "-a", "jack", "-n", "-r", "48000", SOUNDFONT),
            stdin=holder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(holder)
        return process

    def stop(self) -> None:
        # Clients first, with SIGTERM (they close their JACK client: the server then removes its
        # semaphore file from /dev/shm), SIGKILL after a grace time.
        for process in self.children:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        for process in self.children:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        # SIGTERM first: jackd then leaves jack2's server registry, which has 8 slots per machine and
        # reclaims a dead server's slot only for a server of the same name (common/shm.c).
        stop_process(self.process, timeout_s=10.0)
        # What a killed server or client leaves in jack2's tmp dir, for this test's server name only.
        for stale in [*Path("/dev/shm").glob(f"jack_sem.{os.getuid()}_{self.name}_*"),
                      Path(f"/dev/shm/jack_{self.name}_{os.getuid()}_0")]:  # fmt: skip
            stale.unlink(missing_ok=True)


@dataclass
class CueClient:
    name: str
    process: subprocess.Popen[bytes]
    control: Path
    truth: Path
    _fd: int = -1

    def cue(self, line: str) -> None:
        if self._fd < 0:
            self._fd = os.open(self.control, os.O_WRONLY)
        os.write(self._fd, (line + "\n").encode())

    def wait_done(self, count: int, timeout_s: float = 30.0) -> None:
        """Until the truth file holds `count` carried-out cues (the client writes a line once its callback
        has run the cue): the handshake before the next cue, whatever the machine's load."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            lines = self.truth.read_text().splitlines() if self.truth.exists() else []
            if lines and sum('"ready"' not in line for line in lines) >= count:  # "ready" comes first
                return
            time.sleep(0.05)
        raise AssertionError(f"the cue client carried out fewer than {count} cues in {timeout_s} s")

    def quit(self, timeout_s: float = 10.0) -> list[dict[str, object]]:
        """Ask the client to quit and return its truth. The truth is complete once the client has read
        `quit` (it writes each cue's record as the cue is done); a client still running `timeout_s` later
        is stuck leaving the engine (seen once under pw-jack in CI: not a defect of what was recorded,
        which had ended): its Python stacks are dumped to its stderr (faulthandler, SIGUSR1) for the log,
        then it is killed."""
        self.cue("quit")
        os.close(self._fd)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            print(f"the cue client did not quit within {timeout_s:g} s: its stacks, then SIGKILL", file=sys.stderr)
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGUSR1)
                time.sleep(1.0)
                self.process.kill()
            self.process.wait()
        return [json.loads(line) for line in self.truth.read_text().splitlines()]


@contextlib.contextmanager
def jackd(
    tmp: Path, period: int = 256, extra: tuple[str, ...] = (), name: str | None = None, realtime: bool = True
) -> Iterator[JackServer]:
    """`jackd -n <unique> -R -d dummy -r 48000 -p PERIOD` (`--no-realtime` instead of -R: its threads and its
    clients' SCHED_OTHER), its output in a log file; stopped at the end. A test that SIGKILLs the server
    gives a fixed `name`: its registry slot is reclaimed by the next run."""
    need_jack()
    name = name or f"t{uuid.uuid4().hex[:10]}"
    log = tmp / "jackd.log"
    priority = "-R" if realtime else "--no-realtime"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            ["jackd", "-n", name, *extra, priority, "-d", "dummy", "-r", "48000", "-p", str(period)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env_with(name),
            start_new_session=True,
        )
    server = JackServer(name, process, log, tmp)
    try:
        if subprocess.run(["jack_wait", "-w", "-t", "10"], env=server.env, capture_output=True).returncode != 0:
            raise AssertionError(f"jackd did not start: {log.read_text()[-500:]}")
        yield server
    finally:
        server.stop()


@dataclass
class SeriesGraph:
    """fluidsynth -> p0 -> ... -> pN-1, each pK a jalv hosting one LV2 plugin, on `server`."""

    server: JackServer
    processes: dict[str, subprocess.Popen[bytes]]  # jackd, fluidsynth, p0..: the processes to record

    @property
    def pids(self) -> dict[str, int]:
        return {name: process.pid for name, process in self.processes.items()}

    @property
    def env(self) -> dict[str, str]:
        return self.server.env


@contextlib.contextmanager
def series_graph(
    tmp: Path, *, period: int = 128, clients: int = 4, plugin: str = BALANCE_PLUGIN
) -> Iterator[SeriesGraph]:
    """jackd (dummy, `period` frames), fluidsynth holding a note, and `clients` jalv clients of `plugin`
    connected in series from fluidsynth's outputs; everything stopped on the way out. fluidsynth brings
    the housekeeping threads of a real client (a nice-19 thread that wakes every 100 ms)."""
    with jackd(tmp, period=period) as server:
        processes = {"jackd": server.process, "fluidsynth": server.fluidsynth("noteon 0 60 100\n")}
        server.wait_client("fluidsynth", timeout=60)
        for k in range(clients):
            processes[f"p{k}"] = server.jalv(f"p{k}", plugin)
            server.wait_client(f"p{k}", timeout=60)
        server.connect_in_series(server.audio_ports("fluidsynth", "output"), [f"p{k}" for k in range(clients)])
        for name, process in processes.items():
            if process.poll() is not None:
                raise AssertionError(f"{name} exited early (code {process.returncode}); jackd's log: {server.log}")
        yield SeriesGraph(server, processes)


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


def catch_load(server: JackServer, out: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*catch_load_argv(), "-q", "-o", str(out), *args],
        env=server.env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop_recording(rec: subprocess.Popen[str], timeout_s: float = 60) -> tuple[str, str]:
    """End a recording as a user does (Ctrl-C: catch-load writes its trailer and exits 0)."""
    rec.send_signal(signal.SIGINT)
    out, err = rec.communicate(timeout=timeout_s)
    assert rec.returncode == 0, err
    return out, err


def wait_recording(out: Path, rec: subprocess.Popen[str], timeout_s: float = 60) -> None:
    """Until the JACK source has started (wait_engine_started) and the capture has grown since: the
    recorder writes what it records, the targets it was given included."""
    wait_engine_started(out, timeout_s)
    wait_capture_growing(out, rec, timeout_s, poll_s=0.1)


def wait_engine_started(out: Path, timeout: float = 20) -> None:
    """Until the capture's metadata (plain JSON records) holds the source's start or its refusal."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        data = out.read_bytes() if out.exists() else b""
        if b'"client_name"' in data or b'"unavailable"' in data:
            return
        time.sleep(0.2)
    raise AssertionError("the JACK source did not start")
