"""A headless PipeWire for tests: its own runtime directory, the Dummy-Driver, JACK clients via pw-jack."""

from __future__ import annotations

import json
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


@dataclass
class Daemon:
    runtime_dir: Path
    process: subprocess.Popen[bytes]
    env: dict[str, str]
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)

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
        stop_process(proc)
        shutil.rmtree(runtime, ignore_errors=True)


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
