"""A headless PipeWire for tests: its own runtime directory, the Dummy-Driver, JACK clients via pw-jack."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers import REPO, child_env, reap, stop_process
from tests.jack_fixtures import audio_ports_listed
from tests.recording import catch_load_argv

SPIN_CLIENT = str(REPO / "tests" / "workloads" / "pw_spin_client.py")
QUANTUM = "256/48000"
PERIOD_NS = 256 * 1_000_000_000 // 48000


def require_pipewire() -> None:
    missing = [tool for tool in ("pipewire", "pw-jack", "pw-dump") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs PipeWire (apt: pipewire pipewire-bin pipewire-jack): {', '.join(missing)} missing")
    # The test client runs under pw-jack (PipeWire's libjack on LD_LIBRARY_PATH): check it can import.
    probe = subprocess.run(["pw-jack", sys.executable, "-c", "import jack"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"needs JACK-Client (PyPI) under pw-jack: {probe.stderr.strip().splitlines()[-1:]}")


def require_lv2_hosts() -> None:
    missing = [tool for tool in ("jalv", "ecasound", "jack_lsp", "jack_connect") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs LV2 hosts and JACK tools (tests/install-deps.sh): {', '.join(missing)} missing")


@dataclass
class Daemon:
    runtime_dir: Path
    process: subprocess.Popen[bytes]
    env: dict[str, str]
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)
    held: list[int] = field(default_factory=list)  # the write ends of clients' stdin, closed at the end

    @property
    def pid(self) -> int:
        return self.process.pid

    def dump(self) -> list[dict[str, object]]:
        out = subprocess.run(["pw-dump"], env=self.env, capture_output=True, text=True, timeout=10)
        return json.loads(out.stdout) if out.returncode == 0 and out.stdout.strip() else []

    def wait_for_client(self, app_name: str, timeout_s: float = 30.0) -> None:
        """Until a client with this application.name is connected (e.g. catch-load's source)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for obj in self.dump():
                props = (obj.get("info") or {}).get("props") or {}  # type: ignore[union-attr]
                if obj.get("type") == "PipeWire:Interface:Client" and props.get("application.name") == app_name:
                    return
            time.sleep(0.2)
        raise AssertionError(f"no PipeWire client {app_name!r} after {timeout_s} s")

    @property
    def client_env(self) -> dict[str, str]:
        """The environment of a JACK client of this daemon (its runtime directory, the test quantum)."""
        return {**self.env, "PIPEWIRE_QUANTUM": QUANTUM}

    def jack(self, *cmd: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
        """A JACK tool (jack_lsp, jack_connect) run through pw-jack against this daemon."""
        return subprocess.run(["pw-jack", *cmd], env=self.client_env, capture_output=True, text=True, timeout=timeout)

    def start(self, *cmd: str) -> subprocess.Popen[bytes]:
        """A JACK client through pw-jack (it execs CMD: the pid is the client's), ended with the daemon. Its
        stdin is a pipe whose write end the daemon holds: jalv exits at EOF on stdin."""
        read_end, write_end = os.pipe()
        self.held.append(write_end)
        try:
            proc = subprocess.Popen(
                ["pw-jack", *cmd], env=self.client_env, stdin=read_end, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        finally:
            os.close(read_end)
        self.children.append(proc)
        return proc

    def jalv(self, name: str, uri: str) -> subprocess.Popen[bytes]:
        """One LV2 plugin as the JACK client `name` (jalv)."""
        return self.start("jalv", "-n", name, uri)

    def ports(self, client: str, direction: str) -> list[str]:
        """`client`'s audio ports of `direction` ("input"/"output"), sorted."""
        return audio_ports_listed(self.jack("jack_lsp", "-p", "-t").stdout, client, direction)

    def wait_ports(self, *ports: str, timeout_s: float = 90.0) -> None:
        """Until every port is listed (an LV2 host takes seconds to load its plugins), or a client exited."""
        deadline = time.monotonic() + timeout_s
        listed: set[str] = set()
        while time.monotonic() < deadline:
            listed = set(self.jack("jack_lsp").stdout.split())
            if set(ports) <= listed:
                return
            gone = [child.args for child in self.children if child.poll() is not None]
            if gone:
                raise AssertionError(f"JACK clients exited before their ports appeared: {gone}")
            time.sleep(0.3)
        raise AssertionError(f"ports {sorted(set(ports) - listed)} did not appear within {timeout_s:g} s")

    def connect(self, *pairs: tuple[str, str]) -> None:
        """jack_connect each (output, input) pair, and wait until every connection is listed (made in the
        graph, not only asked for)."""
        for src, dst in pairs:
            result = self.jack("jack_connect", src, dst)
            assert result.returncode == 0, f"jack_connect {src} {dst}: {result.stderr}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if set(pairs) <= connections(self.jack("jack_lsp", "-c").stdout):
                return
            time.sleep(0.2)
        raise AssertionError(f"connections {pairs} not listed: {self.jack('jack_lsp', '-c').stdout}")

    def spin_client(
        self, name: str, truth: Path, spin_ms: float = 20.0, link_to: str = "self"
    ) -> subprocess.Popen[bytes]:
        ready = truth.with_suffix(".ready")
        env = {**self.env, "PIPEWIRE_QUANTUM": QUANTUM}
        proc = subprocess.Popen(
            [
                *("pw-jack", sys.executable, SPIN_CLIENT, "--name", name, "--truth", str(truth)),
                *("--ready", str(ready), "--spin-ms", str(spin_ms), "--link-to", link_to),
            ],
            env=env,
        )
        self.children.append(proc)
        deadline = time.monotonic() + 30
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the JACK test client {name} did not start (exit {proc.poll()})")
            time.sleep(0.1)
        return proc


def daemon_env(runtime: Path) -> dict[str, str]:
    """The environment of a daemon alone in `runtime` (its XDG_RUNTIME_DIR), and of its clients."""
    env = child_env(XDG_RUNTIME_DIR=str(runtime))
    for key in ("PIPEWIRE_RUNTIME_DIR", "PIPEWIRE_REMOTE"):
        env.pop(key, None)
    return env


@contextmanager
def pipewire_daemon(runtime: Path | None = None) -> Iterator[Daemon]:
    """`pipewire` as a child, alone in a fresh XDG_RUNTIME_DIR (or `runtime`, made by the caller to start a
    recorder in its environment first), killed (with its clients) at the end."""
    require_pipewire()
    runtime = runtime or Path(tempfile.mkdtemp(prefix="pw-test-"))
    env = daemon_env(runtime)
    proc = subprocess.Popen(["pipewire"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    daemon = Daemon(runtime, proc, env)
    try:
        deadline = time.monotonic() + 20
        while not (runtime / "pipewire-0").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"pipewire did not start (exit {proc.poll()})")
            time.sleep(0.05)
        yield daemon
    finally:
        for child in daemon.children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in daemon.children:
            reap(child)
        for fd in daemon.held:
            os.close(fd)
        stop_process(proc)
        shutil.rmtree(runtime, ignore_errors=True)


def connections(jack_lsp_c: str) -> set[tuple[str, str]]:
    """(port, port) pairs from `jack_lsp -c`: each port's line, then its peers indented below it."""
    pairs = set()
    port = ""
    for line in jack_lsp_c.splitlines():
        if line.startswith((" ", "\t")):
            pairs.add((port, line.strip()))
        else:
            port = line.strip()
    return pairs


def catch_load(daemon_env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """catch-load from this checkout, in the daemon's environment, output captured."""
    return subprocess.Popen(
        [*catch_load_argv(), "-q", *args],
        env=daemon_env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_truth(path: Path) -> list[dict[str, int]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
