"""Real JACK graphs for the tests: jackd (dummy driver) under a unique name, real clients, always killed."""

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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers import REPO, child_env, stop_process
from tests.recording import catch_load_argv, wait_capture_growing

CUE_CLIENT = REPO / "tests" / "workloads" / "jack_cue_client.py"
LV2_PLUGINS = [  # four plugins with one audio in and out, from lsp-plugins-lv2 and x42-plugins
    "http://lsp-plug.in/plugins/lv2/comp_delay_mono",
    "http://lsp-plug.in/plugins/lv2/para_equalizer_x16_mono",
    "http://lsp-plug.in/plugins/lv2/compressor_mono",
    "http://lsp-plug.in/plugins/lv2/limiter_mono",
]


def env_with(server: str) -> dict[str, str]:
    return child_env(JACK_DEFAULT_SERVER=server)


def need_jack() -> None:
    if shutil.which("jackd") is None:
        pytest.skip("jackd is not installed (apt jackd2)")
    try:
        import jack  # noqa: F401
    except (ImportError, OSError) as err:
        pytest.skip(f"JACK-Client/libjack unavailable: {err}")


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

    def fluidsynth(self) -> subprocess.Popen[bytes]:
        """A real softsynth client (ports fluidsynth:left/right); its soundfont load takes seconds.
        Kept alive by its shell on a held stdin, not by `-i -s`: `-s` listens on TCP 9800, and a second
        fluidsynth on the machine (another test's, another session's) fails to bind it, goes on without a
        server and, with no shell (-i), exits at once after registering its ports (observed: the ports
        were listed, then `jack_connect fluidsynth:left ...` said 'not a valid port')."""
        holder = self._held_stdin("fluidsynth")
        process = self.start(
            *("fluidsynth", "-a", "jack", "-n", "-r", "48000", "/usr/share/sounds/sf2/TimGM6mb.sf2"),
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

    def quit(self) -> list[dict[str, object]]:
        self.cue("quit")
        os.close(self._fd)
        self.process.wait(timeout=10)
        return [json.loads(line) for line in self.truth.read_text().splitlines()]


@contextlib.contextmanager
def jackd(tmp: Path, period: int = 256, extra: tuple[str, ...] = (), name: str | None = None) -> Iterator[JackServer]:
    """`jackd -n <unique> -R -d dummy -r 48000 -p PERIOD`, its output in a log file; stopped at the end.
    A test that SIGKILLs the server gives a fixed `name`: its registry slot is reclaimed by the next run."""
    need_jack()
    name = name or f"t{uuid.uuid4().hex[:10]}"
    log = tmp / "jackd.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            ["jackd", "-n", name, *extra, "-R", "-d", "dummy", "-r", "48000", "-p", str(period)],
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
