"""The JACK source against a real jackd (dummy driver) started by the tests, with real clients."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from analyses.engine import engine_cycles, node_lateness
from capture.errors import CaptureWarning
from capture.format import load
from forensics.export.perfetto_engine import ENGINE_PID
from tests.helpers import child_env, stop_process
from tests.jack_fixtures import (
    LV2_PLUGINS,
    catch_load,
    jackd,
    stop_recording,
    wait_engine_started,
    wait_recording,
)
from tests.recording import catch_load_argv, wait_capture_growing

pytestmark = [pytest.mark.slow]
SPIN_GAP_S = 0.3  # between injected spins: their reports must not overlap (a spacing, not a wait)


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
            "300s",  # a bound only: the recording ends after the last spin (stop_recording)
            "-p",
            str(server.process.pid),
        )
        wait_recording(out, rec)
        for done in range(1, 11):
            cue.cue("spin 20")
            cue.wait_done(done)
            # Apart: a spin's reports are matched up to 200 ms after its end (the log is followed at 20 Hz).
            time.sleep(SPIN_GAP_S)
        truth = [t for t in cue.quit() if t["cue"] == "spin"]  # quit takes 0.2 s: the last lines are read
        stop_recording(rec)
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
    assert nodes["xrun"].isna().all()  # the source records times; lateness is the analysis'
    judged = node_lateness(nodes, capture.engine_cycles)["late"]
    log_blames = xruns[(xruns["source"] == "server-log") & (xruns["client"] == "cue")]["t_ns"].to_numpy()
    cue = nodes["name"] == "cue"
    cue_rows, cue_late = nodes[cue], judged[cue]
    seen_xrun = seen_late = seen_log = unknown = unpolled = 0
    for spin in truth:
        start, end = int(spin["start_ns"]), int(spin["end_ns"])  # type: ignore[call-overload]
        seen_xrun += bool(((callbacks >= start) & (callbacks <= end + 50_000_000)).any())
        seen_log += bool(((log_blames >= start) & (log_blames <= end + 200_000_000)).any())
        # The cycles whose callback ran the spin: started at most one period before the spin began.
        in_spin = ((cue_rows["t_ns"] >= start - 6_000_000) & (cue_rows["t_ns"] <= end)).to_numpy()
        # Printed only: the spin's own finish stamp lives ~0.7 ms before the client's next cycle writes over
        # it, and the poller reads every quarter period (CI: 4 of 10 unread, each still late by its re-signal).
        unpolled += not cue_rows["finish_ns"].notna().to_numpy()[in_spin].any()
        flags = cue_late.to_numpy(dtype=object)[in_spin]
        if any(flag is True for flag in flags):
            seen_late += 1
        elif all(flag is pd.NA for flag in flags):
            # Neither the finish nor the re-signal read: the poller was kept off the CPU through the spin's
            # cycles. Unobservable, counted apart, not scored.
            unknown += 1
    print(
        f"of 10 spins: {seen_xrun} xrun callbacks, {seen_late} late cycles naming cue, {seen_log} log lines; "
        f"{unknown} spins whose cycles the capture cannot judge; {unpolled} finishes the poller did not read"
    )
    assert seen_xrun >= 9, f"xrun callbacks for {seen_xrun} of 10 spins"
    assert unknown <= 5, f"the source's poller read nothing of the cycles of {unknown} of 10 spins"
    assert seen_late >= 10 - unknown - 1, f"late cycles naming the client for {seen_late} of {10 - unknown} spins"
    assert seen_log >= 9, f"server-log lines naming the client for {seen_log} of 10 spins"
    # The client became a recording target although it is not jackd's child.
    cue_pid = capture.engine_clients.query("name == 'cue'")["pid"].dropna().iloc[0]
    assert int(cue_pid) in set(capture.threads["pid"])


def test_server_killed_mid_recording_ends_the_source_with_an_event(tmp_path: Path) -> None:
    out = tmp_path / "killed.ssf"
    with jackd(tmp_path, name=f"forensics-killed-{os.getuid()}") as server:
        rec = catch_load(server, out, "--jack", server.name, "-d", "300s", "-p", str(server.process.pid))
        wait_recording(out, rec)
        time.sleep(0.5)  # what is recorded before the death: status rows at 20 Hz (a duration, not a wait)
        server.process.kill()
        server.process.wait()
        _, err = stop_recording(rec)
    capture = load(out)
    assert capture.complete, err
    ended = capture.events[capture.events["kind"] == "engine_source_ended"]
    assert len(ended) == 1 and "went away" in ended["text"].iloc[0]
    assert len(capture.engine_status) > 5  # what came before the death is kept
    assert "Traceback" not in err


def test_a_restarted_server_is_followed(tmp_path: Path) -> None:
    """jackd stopped and started again under the same name during one recording (a user restarting the
    engine): the source ends its first server with an event, waits for the next, attaches to it with a
    second engine_source_started, and the new server's cycles and jackd itself are recorded. The attach
    time after the new socket appeared is printed, not bounded."""
    name = f"forensics-restart-{os.getuid()}"  # a fixed name: its registry slot is reused (jackd())
    out = tmp_path / "restart.ssf"
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    with jackd(tmp_path / "first", name=name) as first:
        # --match: the recording goes on while no jackd runs (a -p target that exits would end it).
        rec = catch_load(first, out, "--jack", name, "-d", "300s", "--match", "^jackd$")
        wait_recording(out, rec)
        first_pid = first.process.pid
        first.process.terminate()  # a clean stop: the server tells its clients it is going
        first.process.wait()
    try:
        with jackd(tmp_path / "second", name=name) as second:
            socket = Path("/dev/shm") / f"jack_{name}_{os.getuid()}_0"
            seen_ns = socket.stat().st_ctime_ns - (time.time_ns() - time.monotonic_ns())
            deadline = time.monotonic() + 60
            # The source's metadata (plain JSON records in the capture) names the new server once attached.
            mark = f'"jackd_pid": {second.process.pid}'.encode()
            while mark not in out.read_bytes() and time.monotonic() < deadline:
                assert rec.poll() is None, rec.stderr.read() if rec.stderr else ""
                time.sleep(0.1)
            second_pid = second.process.pid
            wait_capture_growing(out, rec, 30, growths=2)  # the new server's cycles since are written
            _, err = stop_recording(rec)
    finally:
        stop_process(rec)  # a failing test's recorder (a passing one has ended)
    capture = load(out)
    assert capture.complete, err
    events = capture.events.sort_values("t_ns")
    started = events[events["kind"] == "engine_source_started"]
    ended = events[events["kind"] == "engine_source_ended"]
    assert len(started) == 2, events
    assert "went away" in ended["text"].iloc[0] and int(ended["t_ns"].iloc[0]) < int(started["t_ns"].iloc[1])
    print(f"the source attached {(int(started['t_ns'].iloc[1]) - seen_ns) / 1e6:.0f} ms after the new socket appeared")
    cycles = capture.engine_cycles
    assert (cycles["t_ns"] > int(started["t_ns"].iloc[1])).sum() > 50, "the new server's cycles are recorded"
    assert {first_pid, second_pid} <= set(capture.threads["pid"]), "both servers are targets"
    assert "Traceback" not in err


def test_without_a_server_records_threads_and_says_so_in_one_line(tmp_path: Path) -> None:
    """Said once, while the recording runs (the engine sources' notes come through the recorder and are
    said when they come: a user who asked for JACK learns at once that it is not recorded)."""
    import select
    import signal
    import subprocess
    import sys

    out = tmp_path / "noserver.ssf"
    sleeper = subprocess.Popen(["sleep", "60"])
    args = ["-q", "-o", str(out), "--jack", "nosuchserver-x", "-d", "60s", "-p", str(sleeper.pid)]
    recorder = subprocess.Popen(
        [sys.executable, "-m", "forensics.cli.catch_load", *args], stderr=subprocess.PIPE, text=True
    )
    started = time.monotonic()
    said: list[str] = []
    try:
        assert recorder.stderr is not None
        while not any("JACK" in line for line in said) and time.monotonic() - started < 20:
            if select.select([recorder.stderr], [], [], 0.5)[0]:
                said.append(recorder.stderr.readline().rstrip("\n"))
        running = recorder.poll() is None
        time.sleep(2.5)  # the note is read between ticks: the recording runs 2.5 s past it
        recorder.send_signal(signal.SIGINT)
        rest = recorder.communicate(timeout=60)[1]
    finally:
        if recorder.poll() is None:
            recorder.kill()
        sleeper.kill()
        sleeper.wait()
    assert running and any("JACK" in line for line in said), ("said while recording", said)
    assert recorder.returncode == 0, rest
    lines = [line for line in [*said, *rest.splitlines()] if "JACK" in line]
    # One line; the servers that do run (other tests') follow "; running:" (choose.others_running).
    assert len(lines) == 1, (said, rest)
    assert lines[0].startswith("catch-load: no JACK data recorded: no JACK server 'nosuchserver-x' is running"), lines
    capture = load(out)
    # The threads are recorded as before: read through the recording (a sleeper is on the slow read tier).
    times = capture.samples["t_ns"]
    assert len(times) >= 50 and times.max() - times.min() >= 1_500_000_000
    assert (capture.events["kind"] == "engine_source_unavailable").sum() == 1
    assert capture.meta["sources"]["engine"]["unavailable"].startswith("no JACK data recorded")


def subprocess_devnull() -> int:
    import subprocess

    return subprocess.DEVNULL


def _graph_capture(tmp: Path, name: str, series: bool) -> Path:
    """jackd at 256 frames with fluidsynth, and the four plugins: 4 jalv clients in series, or one ecasound."""
    import shutil

    out = tmp / f"{name}.ssf"
    work = tmp / name
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
                server.connect(src, dst)  # jack_connect returns once the server made the connection
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
        # On by default (a target is jackd); --jack-log keeps the server's XRun lines beside the callbacks.
        rec = catch_load(
            server, out, "--jack", server.name, "--jack-log", str(server.log), "-d", "5s", "-p", str(server.process.pid)
        )
        _finish(rec)
    return out


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The two recordings the comparison tests read, made once for the module (10 s of recording)."""
    tmp = tmp_path_factory.mktemp("graphs")
    return {"series": _graph_capture(tmp, "series", series=True), "chain": _graph_capture(tmp, "chain", series=False)}


def test_each_graph_records_its_clients_cycles(graphs: dict[str, Path]) -> None:
    for name, clients in (("series", {"p0", "p1", "p2", "p3"}), ("chain", {"eca"})):
        capture = load(graphs[name])
        # Every activated client is stamped signaled at each cycle's start (the freewheel driver feeds
        # them all, jack2 JackGraphManager::Activate): it has rows however late the machine runs it.
        assert clients <= set(capture.engine_nodes["name"].astype(str)), name
        assert len(capture.engine_cycles) > 0, name
        nodes = capture.engine_nodes
        woken = nodes[nodes["awake_ns"].notna()]["name"].astype(str).value_counts().to_dict()
        # A client signaled in every cycle and never woken was seen on this machine (a jalv whose RT thread
        # slept in futex_wait throughout): the graph's state, recorded as such; printed for the CI log.
        print(f"{name}: {len(capture.engine_cycles)} cycles, client-cycles woken per client {woken}")


def test_compare_series_against_chain_prints_engine_cycle_ends(graphs: dict[str, Path], run_module) -> None:  # type: ignore[no-untyped-def]
    series, chain = graphs["series"], graphs["chain"]
    result = run_module("forensics", "compare", str(series), str(chain))
    assert result.returncode == 0, result.stderr
    rows = {
        line.split()[0] + " " + line.split()[1] + " " + line.split()[2]: line
        for line in result.stdout.splitlines()
        if line.strip().startswith(("cycle end", "deadline misses "))
    }
    # A figure is printed for each capture with a cycle whose every client was seen finishing; "unknown"
    # only where there is none (a client starved or stuck through the whole recording: observed once).
    with_end = {name: int(engine_cycles(load(graphs[name]))["end_rel_ns"].notna().sum()) for name in graphs}
    print(f"cycles with a known end: {with_end}")
    for figure in ("cycle end p50", "cycle end p99"):
        line = next(v for k, v in rows.items() if k.startswith(figure))
        assert ("unknown" in line) == (min(with_end.values()) == 0), result.stdout
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


def test_perfetto_export_has_a_busy_track_per_client_the_capture_shows_busy(
    graphs: dict[str, Path], tmp_path: Path, run_module
) -> None:  # type: ignore[no-untyped-def]
    """What the capture shows, on the trace: a track per client with a cycle whose wake-up and finish were
    both seen, and a slice per such client-cycle. Which clients that is depends on the machine (a client
    starved through every cycle the poller saw has none); that the export shows exactly them does not."""
    series = graphs["series"]
    trace = tmp_path / "series.json"
    export = run_module("forensics", "export", str(series), "--format", "perfetto", "-o", str(trace))
    assert export.returncode == 0, export.stderr
    events = json.loads(trace.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name" and e["pid"] == ENGINE_PID}
    nodes = load(series).engine_nodes
    busy = nodes[nodes["awake_ns"].notna() & nodes["finish_ns"].notna()]
    busy_clients = set(busy["name"].astype(str))
    print(f"series: {len(busy)} busy client-cycles of {len(nodes)}, per client {busy['name'].value_counts().to_dict()}")
    assert busy_clients, "no client of the series graph was seen both waking and finishing in any cycle"
    assert tracks - {"xruns"} == {f"{name} (busy per cycle)" for name in busy_clients}
    slices = [e for e in events if e.get("cat") == "engine" and e["ph"] == "X"]
    # One slice per busy client-cycle, but slices of a track must not overlap: a row whose next wake-up
    # (same client, next row) comes before its own wake-up has none.
    next_awake = busy.groupby("node_id", observed=True)["awake_ns"].shift(-1)
    shadowed = int((next_awake < busy["awake_ns"]).fillna(False).sum())
    assert len(slices) == len(busy) - shadowed, shadowed


def _late_in_cycle(flags: pd.Series) -> bool | None:
    return True if flags.eq(True).any() else (False if flags.notna().all() else None)


def test_every_xrun_the_capture_holds_is_one_the_engine_reported(graphs: dict[str, Path]) -> None:
    """The series graph (fluidsynth and four jalv plugins) with jackd's log: every xrun row is the engine's
    own words (a callback, or a server-log XRun line verbatim), each callback has a log line beside it,
    and a client the analysis finds late from the source's times (analyses.engine.node_lateness: the
    source records no flag) is an xrun the engine notified. jack2 checks at the next cycle's start and
    notifies at once, but only for the first failing cycle of a run (JackEngine::ProcessCurrent): a report
    follows the first late cycle of each run of late cycles of a client. A cycle whose very next start the
    capture does not hold (the poller missed it) is not the engine's test at that start: counted apart."""
    series = graphs["series"]
    capture = load(series)
    log_lines = [line for line in (series.parent / "series" / "jackd.log").read_text().splitlines() if "XRun" in line]
    xruns = capture.xruns
    assert set(xruns["source"].astype(str)) <= {"callback", "server-log"}
    logged = xruns[xruns["source"] == "server-log"]
    assert all(text in log_lines for text in logged["text"])  # verbatim from the server
    callbacks = xruns[xruns["source"] == "callback"]["t_ns"].to_numpy()
    log_times = logged["t_ns"].to_numpy()
    for t in callbacks:  # the server logged each xrun it notified (the file is followed at 20 Hz)
        assert ((log_times > t - 500_000_000) & (log_times < t + 500_000_000)).any()
    cycles = capture.engine_cycles.sort_values("t_ns")
    judged = node_lateness(capture.engine_nodes, cycles)
    nodes = capture.engine_nodes.assign(late=judged["late"], next_start_ns=judged["next_start_ns"])
    # Per cycle the poller saw: True if a client was late, False if all were seen on time, else NA.
    state = nodes.groupby("t_ns")["late"].agg(_late_in_cycle).reindex(cycles["t_ns"].to_numpy())
    starts = state.index.to_numpy()
    # Whether the capture holds the cycle's very next start, the one jack2 made its test at.
    very_next = nodes.groupby("t_ns")["next_start_ns"].first().reindex(starts).notna().to_numpy()
    follows = np.r_[False, very_next[:-1]]  # the cycle before it was seen, and this is its very next
    late_cycle = state.eq(True).fillna(False).to_numpy(dtype=bool)
    on_time_cycle = state.eq(False).fillna(False).to_numpy(dtype=bool)
    first = late_cycle & np.r_[False, on_time_cycle[:-1]] & follows
    checked = [int(t) for t in starts[first & very_next]]
    blamed = logged.dropna(subset=["client"])
    for t in checked:  # the graph finished the cycle before, not this one: jack2 notified at the next start
        reported = ((callbacks >= t) & (callbacks <= t + 200_000_000)).any()
        assert reported, f"late cycle at {t} (after an on-time one) the engine never reported"
        # ... and named each client it found not finished (the log line comes at once, read within 50 ms).
        near = blamed[(blamed["t_ns"] >= t) & (blamed["t_ns"] <= t + 200_000_000)]
        flagged = set(nodes[(nodes["t_ns"] == t) & (nodes["late"] == True)]["name"].astype(str))  # noqa: E712
        named = set(near["client"].astype(str))
        assert flagged <= named, f"late at {t}: {flagged}, the engine named {named}"
    late = int((nodes["late"] == True).sum())  # noqa: E712 - nullable column
    print(
        f"series 8 s: {len(callbacks)} xrun callbacks, {len(logged)} server-log lines, {late} late client-cycles, "
        f"{len(checked)} first late cycles checked, {int((first & ~very_next).sum())} whose next start was missed, "
        f"{capture.meta['sources']['engine'].get('cycle_values_unplaced')} values of cycles the poller never saw start"
    )
    names = set(capture.engine_clients["name"])
    assert {"fluidsynth", "p0", "p1", "p2", "p3"} <= names
    assert capture.engine_clients.query("name == 'p0'")["pid"].notna().all()
    assert len(capture.engine_nodes) > 1000


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

    from tests.jack_fixtures import CUE_CLIENT, REPO, CueClient, env_with, need_jack

    need_jack()
    name = f"t{uuid.uuid4().hex[:10]}"
    env = env_with(name)
    out = tmp_path / "launched.ssf"
    rec = subprocess.Popen(
        [*catch_load_argv(), "-q", "-o", str(out), "-d", "60s", "--",
         "jackd", "-n", name, "-R", "-d", "dummy", "-r", "48000", "-p", "256"],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    cue: CueClient | None = None
    try:
        assert subprocess.run(["jack_wait", "-w", "-t", "15"], env=env, capture_output=True).returncode == 0
        wait_engine_started(out)
        control = tmp_path / "ctl"
        truth = tmp_path / "truth"
        os.mkfifo(control)
        process = subprocess.Popen(
            [sys.executable, str(CUE_CLIENT), "--name", "cue", "--server", name, "--control", str(control),
             "--truth", str(truth)], env=env,
        )  # fmt: skip
        cue = CueClient("cue", process, control, truth)
        cue.wait_done(0)  # its "ready" line: active in the graph
        for done in range(1, 4):
            cue.cue("spin 20")
            cue.wait_done(done)
            time.sleep(SPIN_GAP_S)
        cue.quit()
    finally:
        if cue is not None and cue.process.poll() is None:
            cue.process.kill()
        jackd_pids = subprocess.run(["pgrep", "-f", f"^jackd -n {name} "], capture_output=True, text=True).stdout
        for pid in jackd_pids.split():
            os.kill(int(pid), 15)  # SIGTERM: jackd leaves the server registry
        _, err = rec.communicate(timeout=60)
        for stale in Path("/dev/shm").glob(f"jack_sem.{os.getuid()}_{name}_*"):  # clients of the dead server
            stale.unlink(missing_ok=True)
    # catch-load fails as its command failed (128 + N when killed by N). jackd 1.9.21 stopped by SIGTERM can
    # die of SIGPIPE writing a notification to a client that already left ("Cannot write socket ... Broken
    # pipe", a clean-clone CI run): jackd's exit, passed on as it should be, not the recording's.
    died_of_its_pipe = rec.returncode == 128 + signal.SIGPIPE and "Broken pipe" in err
    assert rec.returncode == 0 or died_of_its_pipe, err
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


def test_the_recorder_started_before_jackd_records_the_engine(tmp_path: Path) -> None:
    """The README's "wait for jackd" use: `catch-load --match '^jackd$'` first, then the server and a
    client. The source waits for the server's socket and attaches once it takes clients (the attach time
    after the socket appeared is printed, not bounded: jackd's own start-up is most of it); jackd is
    recorded as a target, the client is followed, the engine's cycles are in the capture, and jackd's
    log, a file nobody named, is followed."""
    import subprocess
    import uuid

    from tests.jack_fixtures import REPO, env_with, need_jack

    need_jack()
    name = f"t{uuid.uuid4().hex[:10]}"
    out = tmp_path / "first.ssf"
    rec = subprocess.Popen(
        [*catch_load_argv(), "-q", "-o", str(out), "-d", "120s", "--match", "^jackd$"],
        env=env_with(name), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        from tests.recording import wait_capture_growing

        # The capture's first bytes: catch-load chose its sources (samplers/engine/choose.py) and started
        # its writer; with no target yet it has nothing to sample, so the file does not grow until jackd.
        deadline = time.monotonic() + 60
        while not (out.exists() and out.stat().st_size > 0) and rec.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert out.exists() and rec.poll() is None, rec.stderr.read() if rec.poll() is not None else "no capture"
        socket = Path("/dev/shm") / f"jack_{name}_{os.getuid()}_0"
        assert not socket.exists()
        with jackd(tmp_path, name=name) as server:
            # When the server's socket appeared, on the capture's clock (CLOCK_MONOTONIC): its ctime is
            # wall-clock time.
            seen_ns = socket.stat().st_ctime_ns - (time.time_ns() - time.monotonic_ns())
            wait_engine_started(out)
            cue = server.cue_client()  # stopped with the server
            cue.wait_done(0)  # its "ready" line: active in the graph
            cue.cue("spin 20")
            cue.wait_done(1)
            wait_capture_growing(out, rec, 30, growths=2)  # the cycles since are written
            cue.quit()
            _, err = stop_recording(rec)
    finally:
        stop_process(rec)  # a failing test's recorder (a passing one has ended)
    capture = load(out)
    assert capture.complete, err
    events = capture.events
    started = events[events["kind"] == "engine_source_started"]
    assert len(started) == 1 and (events["kind"] == "engine_source_unavailable").sum() == 0, events
    print(f"the source attached {(int(started['t_ns'].iloc[0]) - seen_ns) / 1e6:.0f} ms after the socket appeared")
    assert len(capture.engine_cycles) > 100
    jackd_pid = int(server.process.pid)
    assert jackd_pid in set(capture.threads["pid"]), "jackd, started after the recorder, is a target"
    cue_pids = set(capture.engine_clients.query("name == 'cue'")["pid"].dropna().astype(int))
    assert cue_pids and cue_pids <= set(capture.threads["pid"]), "its client is followed"
    # Nobody named jackd's log: its output is a file (jackd()), found and followed; the spin is blamed.
    assert str(capture.meta["sources"]["engine"]["server_log"]).startswith("followed: jackd's output, ")
    assert (capture.xruns.query("source == 'server-log'")["client"] == "cue").any(), capture.xruns


@pytest.mark.parametrize("by", ["pid", "match"])
def test_a_running_named_server_is_recorded_without_jack_default_server(tmp_path: Path, by: str) -> None:
    """`catch-load -p $(pidof jackd)` or `--match` of it, for a server started with `-n NAME`, from a shell
    where JACK_DEFAULT_SERVER is not set (a user's): the source attaches to that server, found by the
    semaphores jackd maps, records its cycles and follows its client. Before, only the default server was
    tried: the capture had threads and no engine data (--match: it waited for a 'default' that never came)."""
    import subprocess

    with jackd(tmp_path) as server:
        cue = server.cue_client()
        cue.wait_done(0)  # active in the graph
        env = child_env()
        env.pop("JACK_DEFAULT_SERVER", None)
        out = tmp_path / f"by-{by}.ssf"
        # This server's command line only: the suite may run other servers meanwhile.
        target = ["-p", str(server.process.pid)] if by == "pid" else ["--match", f"^jackd -n {server.name} "]
        rec = subprocess.Popen(
            [*catch_load_argv(), "-q", "-o", str(out), *target],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            wait_recording(out, rec)
            wait_capture_growing(out, rec, 30, growths=2)  # cycles recorded since the source started
            _, err = stop_recording(rec)
        finally:
            stop_process(rec)
            cue.quit()
    capture = load(out)
    assert capture.complete, err
    assert capture.meta["sources"]["engine"]["server"] == server.name, capture.meta["sources"]["engine"]
    assert len(capture.engine_cycles) > 100
    assert int(server.process.pid) in set(capture.threads["pid"])
    cue_pids = set(capture.engine_clients.query("name == 'cue'")["pid"].dropna().astype(int))
    assert cue_pids and cue_pids <= set(capture.threads["pid"]), "its client is followed"


class _UsersJack:
    """A jackd of uid 65534 (NOBODY) named `name`, its clients started as that user too (_users_jack)."""

    def __init__(self, tmp_path: Path, name: str) -> None:
        from tests.helpers import NOBODY

        self.name = name
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "JACK_DEFAULT_SERVER": name}
        self.as_user: dict[str, Any] = {
            "user": NOBODY, "group": NOBODY, "extra_groups": [], "env": env, "start_new_session": True
        }  # fmt: skip
        self.log_path = tmp_path / "jackd.log"
        self.server: subprocess.Popen[bytes] | None = None
        self.clients: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        """jackd (dummy driver, 256 frames), waited for until it takes clients."""
        with open(self.log_path, "wb") as log:  # jackd keeps its own descriptor
            self.server = subprocess.Popen(
                ["jackd", "-n", self.name, "--no-realtime", "-d", "dummy", "-r", "48000", "-p", "256"],
                stdout=log, stderr=subprocess.STDOUT, **self.as_user,
            )  # fmt: skip
        waited = subprocess.run(["jack_wait", "-w", "-t", "10"], capture_output=True, **self.as_user)
        assert waited.returncode == 0, self.log_path.read_text()[-500:]
        return self.server

    def metro(self) -> subprocess.Popen[bytes]:
        """A client of the user's: jack_metro."""
        client = subprocess.Popen(["jack_metro", "-b", "120"], stdout=subprocess.DEVNULL, **self.as_user)
        self.clients.append(client)
        return client


@contextlib.contextmanager
def _users_jack(tmp_path: Path) -> Iterator[_UsersJack]:
    """Another user's JACK graph (root records it: the eBPF sampler's case), stopped after."""
    import uuid

    from tests.jack_fixtures import need_jack

    need_jack()
    jack = _UsersJack(tmp_path, f"u{uuid.uuid4().hex[:10]}")
    try:
        yield jack
    finally:
        for process in (*jack.clients, jack.server):
            if process is not None:
                stop_process(process)


def _assert_users_engine_recorded(out: Path, err: str, name: str) -> Any:
    """The capture of a user's server: whole, its cycles recorded, the source's client closed after."""
    capture = load(out)
    assert capture.complete, err
    engine = capture.meta["sources"]["engine"]
    assert engine["server"] == name and "unavailable" not in engine, engine
    assert len(capture.engine_cycles) > 50
    assert not list(Path("/dev/shm").glob(f"jack_sem.*_{name}_forensics-*")), "the source's client closed"
    return capture


@pytest.mark.needs_root
def test_root_records_another_users_server(tmp_path: Path) -> None:
    """`sudo catch-load -p $(pidof jackd)` (root: the eBPF sampler's case) for a jackd a user runs, here
    65534, with a client of that user's (jack_metro): the source opens that server as its user (libjack names
    its socket jack_<name>_<uid>_0 and the server must reach the client's own socket) and is root again
    after; its cycles are recorded and the client followed. Before, no engine data and nothing said."""
    with _users_jack(tmp_path) as jack:
        server = jack.start()
        client = jack.metro()
        lsp = ["jack_lsp"]
        while subprocess.run(lsp, capture_output=True, text=True, **jack.as_user).stdout.count("metro:") < 1:
            assert client.poll() is None, "jack_metro exited"
            time.sleep(0.1)
        ours = child_env()
        ours.pop("JACK_DEFAULT_SERVER", None)
        out = tmp_path / "user.ssf"
        rec = subprocess.Popen(
            [*catch_load_argv(), "-q", "-o", str(out), "-p", str(server.pid)],
            env=ours, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            wait_recording(out, rec)
            wait_capture_growing(out, rec, 30, growths=2)
            _, err = stop_recording(rec)
        finally:
            stop_process(rec)
    capture = _assert_users_engine_recorded(out, err, jack.name)
    assert client.pid in set(capture.threads["pid"]), "the user's client is followed"


@pytest.mark.needs_root
def test_root_waiting_with_match_records_a_users_server_started_later(tmp_path: Path) -> None:
    """`sudo catch-load --match ...` first (the eBPF sampler's case), then a user (65534) starts `jackd -n
    NAME` and a client, from a shell where JACK_DEFAULT_SERVER is not set: libjack's default is root's own
    "default", never started. The waiting source takes the server whose graph a matching process joined
    (JackChoice.match), opens it as that user, and records its cycles. Before, it waited for root's default
    to the end: no engine data."""
    with _users_jack(tmp_path) as jack:
        ours = child_env()
        ours.pop("JACK_DEFAULT_SERVER", None)
        out = tmp_path / "later.ssf"
        rec = subprocess.Popen(
            [*catch_load_argv(), "-q", "-o", str(out), "-d", "120s", "--match", f"^jackd -n {jack.name} "],
            env=ours, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60  # the capture's first bytes: catch-load chose its sources
            while not (out.exists() and out.stat().st_size > 0) and rec.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert out.exists() and rec.poll() is None, rec.stderr.read() if rec.poll() is not None else "no capture"
            server = jack.start()
            jack.metro()
            wait_engine_started(out, 30)
            wait_capture_growing(out, rec, 30, growths=2)
            _, err = stop_recording(rec)
        finally:
            stop_process(rec)
    capture = _assert_users_engine_recorded(out, err, jack.name)
    assert f"pid {server.pid} (jackd)" in capture.meta["sources"]["engine"]["found_by"]
    assert server.pid in set(capture.threads["pid"]), "jackd, started after the recorder, is a target"


def test_a_match_recording_without_jack_says_so_only_in_the_capture(tmp_path: Path) -> None:
    """A --match recording of a program that has nothing to do with JACK: the waiting source costs no
    line on the terminal, and the capture says no server started."""
    import subprocess

    out = tmp_path / "nojack.ssf"
    env = child_env(JACK_DEFAULT_SERVER=f"absent-{os.getpid()}")
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        result = subprocess.run(
            [*catch_load_argv(), "-q", "-o", str(out), "-d", "2s", "--match", "^sleep 30$"],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        sleeper.kill()
        sleeper.wait()
    assert result.returncode == 0, result.stderr
    assert "JACK" not in result.stderr, result.stderr
    capture = load(out)
    unavailable = capture.meta["sources"]["engine"]["unavailable"]
    assert "started during the recording" in unavailable, unavailable


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
