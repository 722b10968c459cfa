"""Engine sources as one mechanism (samplers/engine/source.py): a JACK server and a PipeWire daemon
recorded at once, each through its own pipe to the writer, each saying when it attached; every source
dies with a killed recorder."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from capture.format import Capture, load
from tests.helpers import REPO, child_env, stop_process
from tests.jack_fixtures import jackd, need_jack, stop_recording, wait_engine_started
from tests.pipewire_lab import pipewire_daemon
from tests.recording import catch_load_argv

pytestmark = [pytest.mark.slow]


def _gone(pid: int) -> bool:
    """The process ended (a zombie of a dead parent counts: it runs no more)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def _wait_bytes(out: Path, marker: bytes, timeout_s: float = 30) -> None:
    """Until the capture holds `marker` (its metadata records are plain JSON)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if out.exists() and marker in out.read_bytes():
            return
        time.sleep(0.2)
    raise AssertionError(f"{marker!r} not in {out} after {timeout_s} s")


def _wait_capture(out: Path, holds: Callable[[Capture], bool], timeout_s: float = 60) -> None:
    """Until the capture being written (read back without its trailer) `holds` what is asked: engine rows
    reach it about once a second (PipeWire's profiler, the writer's chunks), later on a loaded machine."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                if holds(load(out)):
                    return
            except Exception:  # a capture cut mid-record reads back on a later try
                pass
        time.sleep(0.5)
    raise AssertionError(f"{out} did not come to hold what the test waits for in {timeout_s} s")


def _cycles_of(cap: Capture, engine: str, after_ns: int = 0) -> int:
    cycles = cap.engine_cycles
    return int(((cycles["engine"].astype(str) == engine) & (cycles["t_ns"] > after_ns)).sum()) if len(cycles) else 0


def test_a_jack_server_and_a_pipewire_daemon_are_recorded_at_once(tmp_path: Path) -> None:
    """`catch-load --jack NAME --pipewire` of jackd while a PipeWire daemon runs: both sources run, each
    one's rows reach the capture through its own pipe (cycles of each engine), each source's metadata is
    kept by its kind with when it attached, and `forensics info` says it per engine."""
    need_jack()
    out = tmp_path / "both.ssf"
    with pipewire_daemon() as daemon, jackd(tmp_path) as server:
        daemon.spin_client("pwc", tmp_path / "pwc.jsonl")  # a node: the daemon's driver runs cycles
        env = {**server.env, "XDG_RUNTIME_DIR": daemon.env["XDG_RUNTIME_DIR"]}
        rec = subprocess.Popen(
            [*catch_load_argv(), "-q", "-o", str(out), "--jack", server.name, "--pipewire", "-d", "60s",
             "-p", str(server.process.pid)],
            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            wait_engine_started(out)
            _wait_capture(out, lambda cap: _cycles_of(cap, "jack") > 0 and _cycles_of(cap, "pipewire") > 0)
            _, err = stop_recording(rec)
        finally:
            stop_process(rec)
    capture = load(out)
    assert capture.complete, err
    engines = capture.engine_sources
    assert set(engines) == {"jack", "pipewire"}, engines
    cycles = capture.engine_cycles
    assert set(cycles["engine"].astype(str)) == {"jack", "pipewire"}, "each engine's cycles reached the writer"
    started = capture.meta["recording"]["started_ns"]
    for kind, meta in engines.items():
        assert not meta.get("unavailable"), (kind, meta)
        (attached_ns, ended_ns), *more = meta["attachments"]
        # JACK's server was up: its source attached while the recorder was still starting, before tick 0
        assert not more and attached_ns < ended_ns and started < ended_ns, (kind, meta["attachments"])
    events = capture.events
    assert (events["kind"] == "engine_source_started").sum() == 2, events
    info = subprocess.run(
        [sys.executable, "-m", "forensics", "info", str(out)], capture_output=True, text=True, env=child_env(), cwd=REPO
    )
    assert info.returncode == 0, info.stderr
    for kind in ("jack", "pipewire"):
        section = info.stdout.split(f"Engine ({kind})", 1)[1].split("\n\n", 1)[0]
        assert "attached" in section and " the start" in section, info.stdout


def test_every_engine_source_dies_with_a_killed_recorder() -> None:
    """SIGKILL the process that launched the sources, with the writer's ends of their pipes held elsewhere
    (as the writer holds them): no stop reaches them and no pipe ends, yet each source ends by itself.
    JACK's waits for a server that never comes and PipeWire's is bound to a live daemon: neither would
    end on its own."""
    pipes = {kind: os.pipe() for kind in ("jack", "pipewire")}
    launcher = (
        "import json, sys, time\n"
        "from samplers.engine.source import EngineSources\n"
        "from samplers.procfs import ProcPaths\n"
        "jack = {'kind': 'jack', 'server': 'forensics-nobody', 'wait_s': float('inf')}\n"
        "sources = EngineSources('on', ProcPaths(), set(), json.loads(sys.argv[1]), jack)\n"
        "sources.consider([])\n"
        "print(json.dumps({k: p.pid for k, p in sources.running.items()}), flush=True)\n"
        "time.sleep(60)\n"
    )
    alive: dict[str, int] = {}
    with pipewire_daemon() as daemon:
        parent = subprocess.Popen(
            [sys.executable, "-c", launcher, json.dumps({k: w for k, (_, w) in pipes.items()})],
            stdout=subprocess.PIPE, env=daemon.env, cwd=REPO, pass_fds=[w for _, w in pipes.values()],
        )  # fmt: skip
        for _, w in pipes.values():
            os.close(w)
        try:
            assert parent.stdout is not None
            children = json.loads(parent.stdout.readline() or "{}")
            assert set(children) == {"jack", "pipewire"}, children
            written = b""
            deadline = time.monotonic() + 30
            os.set_blocking(pipes["pipewire"][0], False)
            while b"engine_source_started" not in written and time.monotonic() < deadline:
                time.sleep(0.05)  # PipeWire's source bound the profiler; JACK's polls for its server
                with contextlib.suppress(BlockingIOError):
                    written += os.read(pipes["pipewire"][0], 1 << 20)
            assert b"engine_source_started" in written, written[-500:]
            assert not any(_gone(pid) for pid in children.values()), children
        finally:
            parent.send_signal(signal.SIGKILL)
            parent.wait()
        alive = dict(children)
        deadline = time.monotonic() + 10
        while alive and time.monotonic() < deadline:
            alive = {kind: pid for kind, pid in alive.items() if not _gone(pid)}
            time.sleep(0.05)
        for pid in alive.values():  # a failing test leaves nothing behind
            os.kill(pid, signal.SIGKILL)
    for r, _ in pipes.values():
        os.close(r)
    assert not alive, f"sources still running after their recorder was killed: {alive}"


def test_a_restarted_pipewire_daemon_is_attached_again(tmp_path: Path) -> None:
    """The PipeWire daemon stopped and started again (same socket) during one recording, as a restarted
    jackd is followed: the source waits for the socket, attaches to the new daemon, and the capture holds
    both attachments, the new daemon's cycles and its threads."""
    import shutil
    import tempfile

    runtime = Path(tempfile.mkdtemp(prefix="pw-restart-"))
    out = tmp_path / "restart.ssf"
    sleeper = subprocess.Popen(["sleep", "120"])
    rec: subprocess.Popen[str] | None = None
    try:
        with pipewire_daemon(runtime) as first:
            first.spin_client("one", tmp_path / "one.jsonl")
            rec = subprocess.Popen(
                [*catch_load_argv(), "-q", "-o", str(out), "--pipewire", "-d", "60s", "-p", str(sleeper.pid)],
                env=first.env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            _wait_bytes(out, b"native-protocol client bound")  # PipeWire's metadata: the profiler is bound
            first_pid = first.pid
        runtime.mkdir(exist_ok=True)  # the fixture removed it with the daemon
        with pipewire_daemon(runtime) as second:
            second.spin_client("two", tmp_path / "two.jsonl")
            second_pid = second.pid
            # Attached within RECONNECT_S of the socket; the new daemon's cycles come once a second.
            _wait_capture(out, lambda cap: len(cap.engine_sources["pipewire"].get("attachments", [])) == 2)
            second_ns = load_meta_attached(out)
            _wait_capture(out, lambda cap: _cycles_of(cap, "pipewire", second_ns) > 50)
            _, err = stop_recording(rec)
    finally:
        if rec is not None:
            stop_process(rec)
        sleeper.kill()
        sleeper.wait()
        shutil.rmtree(runtime, ignore_errors=True)
    capture = load(out)
    assert capture.complete, err
    events = capture.events
    started = events[events["kind"] == "engine_source_started"]
    assert len(started) == 2, events
    assert list(started["pid"].astype(int)) == [first_pid, second_pid]
    meta = capture.engine_sources["pipewire"]
    assert len(meta["attachments"]) == 2 and meta["daemon_pid"] == second_pid, meta
    second_attached = meta["attachments"][1][0]
    cycles = capture.engine_cycles
    assert (cycles["t_ns"] > second_attached).sum() > 50, "the new daemon's cycles are recorded"
    assert second_pid in set(capture.threads["pid"]), "the new daemon is a target"


@pytest.mark.parametrize("asked", [False, True], ids=["found", "asked"])
def test_a_pipewire_daemon_started_after_the_recorder_is_attached(tmp_path: Path, asked: bool) -> None:
    """The "wait for jackd" use with PipeWire: `catch-load --match '^pipewire$' --children` (and with
    `--pipewire`, which starts the source at once) before the daemon. The source waits for the daemon's
    socket instead of giving up before it listens; it attaches, the daemon and its client are targets and
    the engine's cycles are recorded. The attach time after the daemon's socket appeared is printed."""
    import shutil
    import tempfile

    from tests.pipewire_lab import daemon_env

    runtime = Path(tempfile.mkdtemp(prefix="pw-first-"))
    out = tmp_path / "first.ssf"
    args = ["--match", "^pipewire$", "--children", *(["--pipewire"] if asked else [])]
    rec = subprocess.Popen(
        [*catch_load_argv(), "-q", "-o", str(out), "-d", "60s", *args],
        env=daemon_env(runtime), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_bytes(out, b"format_version")  # the writer is up: the recording runs, with no target yet
        time.sleep(0.5)
        with pipewire_daemon(runtime) as daemon:
            seen_ns = (runtime / "pipewire-0").stat().st_ctime_ns - (time.time_ns() - time.monotonic_ns())
            client = daemon.spin_client("late", tmp_path / "late.jsonl")
            client_ready_ns = time.monotonic_ns()
            # The client becomes a target when the source reports it and the recorder's next discovery runs:
            # waited for, not assumed done by the 100th cycle (under load it was not, once: a race of the test).
            _wait_capture(
                out,
                lambda cap: _cycles_of(cap, "pipewire") > 100 and client.pid in set(cap.threads["pid"].tolist()),
            )
            _, err = stop_recording(rec)
            daemon_pid, client_pid = daemon.pid, client.pid
    finally:
        stop_process(rec)
        shutil.rmtree(runtime, ignore_errors=True)
    capture = load(out)
    assert capture.complete, err
    events = capture.events
    started = events[events["kind"] == "engine_source_started"]
    unavailable = events[events["kind"] == "engine_source_unavailable"]["text"].astype(str)
    assert len(started) == 1 and not unavailable.str.startswith("PipeWire").any(), events
    print(f"attached {(int(started['t_ns'].iloc[0]) - seen_ns) / 1e6:.0f} ms after the socket appeared")
    assert len(capture.engine_cycles) > 100
    recorded = set(capture.threads["pid"])
    assert daemon_pid in recorded and client_pid in recorded, "the daemon and its client are targets"
    samples = capture.samples
    first_read_ns = int(samples.loc[samples["pid"] == client_pid, "t_ns"].min())
    print(f"the client's first read {(first_read_ns - client_ready_ns) / 1e6:.0f} ms after it was ready")


def load_meta_attached(out: Path) -> int:
    """When the PipeWire source attached the second time, from the capture being written."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return int(load(out).engine_sources["pipewire"]["attachments"][1][0])
