"""The JACK source against a real jackd (dummy driver) started by the tests, with real clients."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from capture.errors import CaptureWarning
from capture.format import load
from forensics.export.perfetto_engine import ENGINE_PID
from tests.helpers import child_env
from tests.jack_fixtures import LV2_PLUGINS, catch_load, jackd, wait_engine_started
from tests.recording import catch_load_argv

pytestmark = [pytest.mark.slow]


def _finish(process, timeout: float = 60) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err
    return out, err


def test_spins_are_xruns_and_late_cycles_naming_the_client(tmp_path: Path) -> None:
    """10 injected 20 ms spins: each an xrun callback in the capture and a late cycle naming the client."""
    out = tmp_path / "spins.ssf"
    with jackd(tmp_path) as server:
        cue = server.cue_client("cue")
        server.connect("system:capture_1", "cue:in")
        server.connect("cue:out", "system:playback_1")
        rec = catch_load(
            server,
            out,
            "--jack",
            server.name,
            "--jack-log",
            str(server.log),
            "-d",
            "14s",
            "-p",
            str(server.process.pid),
        )
        wait_engine_started(out)
        time.sleep(1.0)
        for _ in range(10):
            cue.cue("spin 20")
            time.sleep(0.6)
        truth = [t for t in cue.quit() if t["cue"] == "spin"]
        _finish(rec)
    assert len(truth) == 10
    capture = load(out)
    engine = capture.meta["sources"]["engine"]
    assert engine["kind"] == "jack" and engine["in_graph"] is False
    # The passive client is never signaled in a cycle (its slot would give it rows like the cue's).
    assert engine["client_name"] in set(capture.engine_clients["name"])
    assert engine["client_name"] not in set(capture.engine_nodes["name"].astype(str))
    xruns = capture.xruns
    callbacks = xruns[xruns["source"] == "callback"]["t_ns"].to_numpy()
    nodes = capture.engine_nodes
    late = nodes[(nodes["name"] == "cue") & (nodes["xrun"] == True)]  # noqa: E712 - nullable column
    log_blames = xruns[(xruns["source"] == "server-log") & (xruns["client"] == "cue")]["t_ns"].to_numpy()
    seen_xrun = seen_late = seen_log = 0
    for spin in truth:
        start, end = int(spin["start_ns"]), int(spin["end_ns"])  # type: ignore[call-overload]
        seen_xrun += bool(((callbacks >= start) & (callbacks <= end + 50_000_000)).any())
        # The cycle whose callback ran the spin: it started at most one period before the spin began.
        seen_late += bool(((late["t_ns"] >= start - 6_000_000) & (late["t_ns"] <= end)).any())
        seen_log += bool(((log_blames >= start) & (log_blames <= end + 200_000_000)).any())
    print(f"of 10 spins: {seen_xrun} xrun callbacks, {seen_late} late cycles naming cue, {seen_log} log lines")
    assert seen_xrun >= 9, f"xrun callbacks for {seen_xrun} of 10 spins"
    assert seen_late >= 9, f"late cycles naming the client for {seen_late} of 10 spins"
    assert seen_log >= 9, f"server-log lines naming the client for {seen_log} of 10 spins"
    # The client became a recording target although it is not jackd's child.
    cue_pid = capture.engine_clients.query("name == 'cue'")["pid"].dropna().iloc[0]
    assert int(cue_pid) in set(capture.threads["pid"])


def test_server_killed_mid_recording_ends_the_source_with_an_event(tmp_path: Path) -> None:
    out = tmp_path / "killed.ssf"
    with jackd(tmp_path, name=f"forensics-killed-{os.getuid()}") as server:
        rec = catch_load(server, out, "--jack", server.name, "-d", "6s", "-p", str(server.process.pid))
        wait_engine_started(out)
        time.sleep(1.0)
        server.process.kill()
        server.process.wait()
        _, err = _finish(rec)
    capture = load(out)
    assert capture.complete, err
    ended = capture.events[capture.events["kind"] == "engine_source_ended"]
    assert len(ended) == 1 and "went away" in ended["text"].iloc[0]
    assert len(capture.engine_status) > 5  # what came before the death is kept
    assert "Traceback" not in err


def test_without_a_server_records_threads_and_says_so_in_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "noserver.ssf"
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "forensics.cli.catch_load",
                "-q",
                "-o",
                str(out),
                "--jack",
                "nosuchserver-x",
                "-d",
                "2s",
                "-p",
                str(sleeper.pid),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        sleeper.kill()
        sleeper.wait()
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "JACK" in line]
    assert lines == ["catch-load: no JACK data recorded: no JACK server 'nosuchserver-x' is running"], result.stderr
    capture = load(out)
    # The threads are recorded as before: read through the recording (a sleeper is on the slow read tier).
    times = capture.samples["t_ns"]
    assert len(times) >= 50 and times.max() - times.min() >= 1_500_000_000
    assert (capture.events["kind"] == "engine_source_unavailable").sum() == 1
    assert capture.meta["sources"]["engine"]["unavailable"].startswith("no JACK data recorded")


@pytest.mark.xfail(
    strict=False,
    reason=(
        "open: the per-cycle shm reading flagged clients late that jack2 never notified (4 in a loaded "
        "quiet minute: values of a cycle whose start the poller missed, filed under the one before; and a "
        "copy preempted by the driver); both fixed with unit tests, not yet confirmed by a real quiet run"
    ),
)
def test_quiet_run_records_no_xrun_the_engine_did_not_report(tmp_path: Path) -> None:
    """60 s of a quiet graph (fluidsynth and a jalv plugin): every xrun row is one the engine reported
    (a callback, or a server-log XRun line), and each callback has a log line from the server beside it."""
    out = tmp_path / "quiet.ssf"
    with jackd(tmp_path, extra=()) as server:
        server.fluidsynth()
        server.jalv("p0", LV2_PLUGINS[0])
        server.wait_ports("p0:in", "fluidsynth:left", timeout=90)  # a soundfont load is slow under load
        rec = catch_load(
            server,
            out,
            "--jack",
            server.name,
            "--jack-log",
            str(server.log),
            "-d",
            "60s",
            "-p",
            str(server.process.pid),
        )
        _finish(rec, timeout=120)
        log_lines = [line for line in server.log.read_text().splitlines() if "XRun" in line]
    capture = load(out)
    xruns = capture.xruns
    assert set(xruns["source"].astype(str)) <= {"callback", "server-log"}
    logged = xruns[xruns["source"] == "server-log"]
    assert all(text in log_lines for text in logged["text"])  # verbatim from the server
    callbacks = xruns[xruns["source"] == "callback"]["t_ns"].to_numpy()
    log_times = logged["t_ns"].to_numpy()
    for t in callbacks:  # the server logged each xrun it notified (the file is followed at 20 Hz)
        assert ((log_times > t - 500_000_000) & (log_times < t + 500_000_000)).any()
    # Clients the per-cycle data calls late: each is an xrun the engine notified (jack2 checks at the
    # next cycle and notifies at once).
    late = capture.engine_nodes[capture.engine_nodes["xrun"] == True]["t_ns"].to_numpy()  # noqa: E712
    for t in late:
        assert ((callbacks >= t) & (callbacks <= t + 200_000_000)).any(), f"late cycle at {t} the engine never reported"
    print(
        f"quiet 60 s: {len(callbacks)} xrun callbacks, {len(logged)} server-log lines, {len(late)} late client-cycles"
    )
    names = set(capture.engine_clients["name"])
    assert {"fluidsynth", "p0"} <= names
    assert capture.engine_clients.query("name == 'p0'")["pid"].notna().all()
    assert len(capture.engine_nodes) > 1000


def subprocess_devnull() -> int:
    import subprocess

    return subprocess.DEVNULL


def _graph_capture(tmp_path: Path, name: str, series: bool) -> Path:
    """jackd at 256 frames with fluidsynth, and the four plugins: 4 jalv clients in series, or one ecasound."""
    import shutil

    out = tmp_path / f"{name}.ssf"
    work = tmp_path / name
    work.mkdir()
    with jackd(work) as server:
        server.fluidsynth()
        if series:
            for i, uri in enumerate(LV2_PLUGINS):
                server.jalv(f"p{i}", uri)
            server.wait_ports(*(f"p{i}:in" for i in range(4)), "fluidsynth:left", timeout=90)
            chain = ["fluidsynth:left", *(f"p{i}:in p{i}:out" for i in range(4)), "system:playback_1"]
            hops = " ".join(chain).split()
            for src, dst in zip(hops[::2], hops[1::2], strict=True):
                server.connect(src, dst)
        else:
            assert shutil.which("ecasound")
            plugins = ["-elv2:" + uri for uri in LV2_PLUGINS]
            server.start(
                "ecasound",
                "-q",
                "-G:jack,eca,notransport",
                "-f:f32_le,1,48000",
                "-i",
                "jack,fluidsynth",
                "-o",
                "jack,system",
                *plugins,
                stdout=subprocess_devnull(),
                stderr=subprocess_devnull(),
            )
            server.wait_ports("eca:in_1", "eca:out_1", "fluidsynth:left", timeout=90)
        time.sleep(1.0)
        rec = catch_load(server, out, "-d", "8s", "-p", str(server.process.pid))  # on by default: a target is jackd
        _finish(rec)
    return out


def test_compare_series_against_chain_prints_engine_cycle_ends(tmp_path: Path, run_module) -> None:  # type: ignore[no-untyped-def]
    series = _graph_capture(tmp_path, "series", series=True)
    chain = _graph_capture(tmp_path, "chain", series=False)
    for path, clients in ((series, {"p0", "p1", "p2", "p3"}), (chain, {"eca"})):
        capture = load(path)
        assert clients <= set(capture.engine_nodes["name"].astype(str)), path
    result = run_module("forensics", "compare", str(series), str(chain))
    assert result.returncode == 0, result.stderr
    rows = {
        line.split()[0] + " " + line.split()[1] + " " + line.split()[2]: line
        for line in result.stdout.splitlines()
        if line.strip().startswith(("cycle end", "deadline misses "))
    }
    for figure in ("cycle end p50", "cycle end p99"):
        line = next(v for k, v in rows.items() if k.startswith(figure))
        assert "unknown" not in line, result.stdout
    assert "jack engine cycles" in result.stdout
    print(result.stdout)
    system = run_module("forensics", "system", str(series))
    assert system.returncode == 0, system.stderr
    assert "XRUN count (engine)" in system.stdout and "Cycle maximum (engine)" in system.stdout
    assert "jack engine cycles" in system.stdout
    info = run_module("forensics", "info", str(chain))
    assert "Engine" in info.stdout and "jack2 shared graph segment" in info.stdout
    dump = run_module("forensics", "dump", str(chain), "--table", "engine_nodes")
    assert dump.returncode == 0 and dump.stdout.startswith("t_ns,engine,node_id,name,signal_ns")
    trace = tmp_path / "series.json"
    export = run_module("forensics", "export", str(series), "--format", "perfetto", "-o", str(trace))
    assert export.returncode == 0, export.stderr
    events = json.loads(trace.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name" and e["pid"] == ENGINE_PID}
    assert {f"p{i} (busy per cycle)" for i in range(4)} <= tracks
    busy = [e for e in events if e.get("cat") == "engine" and e["ph"] == "X"]
    assert len(busy) > 4 * 1000  # a slice per client per cycle (8 s at 187.5 cycles/s)


def test_without_libjack_records_threads_and_says_so_in_one_line(tmp_path: Path) -> None:
    """libjack cannot be absent on a machine that runs the other tests: a `jack` module that raises what
    JACK-Client raises without it (OSError 'JACK library not found') stands in for the missing library."""
    import subprocess

    fake = tmp_path / "nolibjack"
    fake.mkdir()
    (fake / "jack.py").write_text("raise OSError('JACK library not found')\n")
    out = tmp_path / "nolib.ssf"
    env = child_env(fake)
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        result = subprocess.run(
            [*catch_load_argv(), "-q", "-o", str(out), "--jack", "-d", "2s", "-p",
             str(sleeper.pid)],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
    finally:
        sleeper.kill()
        sleeper.wait()
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "JACK" in line]
    assert lines == ["catch-load: no JACK data recorded: JACK library not found (install libjack-jackd2-0)"], (
        result.stderr
    )
    capture = load(out)
    # The threads are recorded as before: read through the recording (a sleeper is on the slow read tier).
    times = capture.samples["t_ns"]
    assert len(times) >= 50 and times.max() - times.min() >= 1_500_000_000
    assert capture.meta["sources"]["engine"]["unavailable"].startswith("no JACK data recorded")


def test_catch_load_starting_jackd_keeps_its_log_lines_and_follows_its_clients(tmp_path: Path) -> None:
    """`catch-load -- jackd ...`: jackd's output passes through (echoed), its 'client = NAME was not
    finished' lines are stored with times, and a client started later becomes a target."""
    import subprocess
    import sys
    import uuid

    from tests.jack_fixtures import CUE_CLIENT, REPO, env_with, need_jack

    need_jack()
    name = f"t{uuid.uuid4().hex[:10]}"
    env = env_with(name)
    out = tmp_path / "launched.ssf"
    rec = subprocess.Popen(
        [*catch_load_argv(), "-q", "-o", str(out), "-d", "60s", "--",
         "jackd", "-n", name, "-R", "-d", "dummy", "-r", "48000", "-p", "256"],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    cue = None
    try:
        assert subprocess.run(["jack_wait", "-w", "-t", "15"], env=env, capture_output=True).returncode == 0
        wait_engine_started(out)
        control = tmp_path / "ctl"
        truth = tmp_path / "truth"
        os.mkfifo(control)
        cue = subprocess.Popen(
            [sys.executable, str(CUE_CLIENT), "--name", "cue", "--server", name, "--control", str(control),
             "--truth", str(truth)], env=env,
        )  # fmt: skip
        fd = os.open(control, os.O_WRONLY)
        time.sleep(1.5)
        for _ in range(3):
            os.write(fd, b"spin 20\n")
            time.sleep(0.6)
        os.write(fd, b"quit\n")
        os.close(fd)
        cue.wait(timeout=10)
        time.sleep(0.5)
    finally:
        if cue is not None and cue.poll() is None:
            cue.kill()
        jackd_pids = subprocess.run(["pgrep", "-f", f"^jackd -n {name} "], capture_output=True, text=True).stdout
        for pid in jackd_pids.split():
            os.kill(int(pid), 15)  # SIGTERM: jackd leaves the server registry
        _, err = rec.communicate(timeout=60)
        for stale in Path("/dev/shm").glob(f"jack_sem.{os.getuid()}_{name}_*"):  # clients of the dead server
            stale.unlink(missing_ok=True)
    assert rec.returncode == 0, err
    assert "JACK server starting in realtime mode" in err  # jackd's own output still reaches the terminal
    spins = [json.loads(line) for line in truth.read_text().splitlines() if '"spin"' in line]
    capture = load(out)
    blamed = capture.xruns[(capture.xruns["source"] == "server-log") & (capture.xruns["client"] == "cue")]
    times = blamed["t_ns"].to_numpy()
    hit = sum(bool(((times >= s["start_ns"]) & (times <= s["end_ns"] + 100_000_000)).any()) for s in spins)
    assert len(spins) == 3 and hit >= 2, (hit, blamed)
    cue_pids = set(capture.engine_clients.query("name == 'cue'")["pid"].dropna().astype(int))
    assert cue_pids and cue_pids <= set(capture.threads["pid"])
    ended = capture.events[capture.events["kind"] == "engine_source_ended"]["text"].tolist()
    assert len(ended) == 1


def test_a_killed_recorder_leaves_no_jack_client_behind(tmp_path: Path) -> None:
    import signal
    import subprocess

    out = tmp_path / "sigkill.ssf"
    with jackd(tmp_path) as server:
        rec = catch_load(server, out, "--jack", server.name, "-d", "60s", "-p", str(server.process.pid))
        wait_engine_started(out)
        children = subprocess.run(["pgrep", "-P", str(rec.pid)], capture_output=True, text=True).stdout.split()
        rec.send_signal(signal.SIGKILL)
        rec.wait()
        end = time.monotonic() + 10
        while time.monotonic() < end and any(Path(f"/proc/{pid}").exists() for pid in children):
            time.sleep(0.1)
        alive = [pid for pid in children if Path(f"/proc/{pid}").exists()]
        assert not alive, f"children of the killed recorder still run: {alive}"
    with pytest.warns(CaptureWarning, match="no trailer"):
        capture = load(out)  # without a trailer, with what was written
    assert not capture.complete and len(capture.samples) > 0
