"""catch-load's PipeWire source against a real headless PipeWire (Dummy-Driver, 256 frames at 48 kHz) with
a JACK client through pw-jack whose process callback spins 20 ms on cue: each spin is a real late cycle
of known client and time, and the engine's own report of it must reach the capture."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from analyses.engine import node_lateness
from capture.format import load
from tests.jack_fixtures import LV2_PLUGINS
from tests.pipewire_lab import PERIOD_NS, catch_load, pipewire_daemon, read_truth, require_lv2_hosts

pytestmark = [pytest.mark.needs_root, pytest.mark.slow]

SPINS = 10


def _stop(proc: subprocess.Popen[str], timeout_s: float = 60) -> tuple[str, str]:
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=timeout_s)
    assert proc.returncode == 0, err
    return out, err


def test_spins_are_xruns_naming_the_client_and_its_late_cycle(tmp_path: Path) -> None:
    truth_path = tmp_path / "truth.jsonl"
    out = tmp_path / "spins.ssf"
    with pipewire_daemon() as daemon:
        spin = daemon.spin_client("spinner", truth_path)
        # The daemon is the only target: auto-detection (it maps libpipewire) starts the source, and the
        # graph's client becomes a target through the engine.
        recorder = catch_load(daemon.env, "-p", str(daemon.pid), "-o", str(out))
        daemon.wait_for_client("catch-load")
        latecomer = daemon.spin_client("latecomer", tmp_path / "late.jsonl")  # joins while recording
        time.sleep(1.0)
        for _ in range(SPINS):
            spin.send_signal(signal.SIGUSR1)
            time.sleep(0.5)
        time.sleep(2.5)  # the profiler module sends its records once a second
        _stop(recorder)
    capture = load(out)
    truth = read_truth(truth_path)
    assert len(truth) == SPINS

    engine = capture.meta["sources"]["engine"]
    version = subprocess.run(["pipewire", "--version"], capture_output=True, text=True).stdout
    assert engine["kind"] == "pipewire" and engine["version"] in version
    assert engine["driver_clock_names"] and engine["clock_offset_ns"] == 0
    assert engine["clock_check_lag_ns"]["min"] >= 0  # no record arrived before it ended: one clock

    clients = capture.table("engine_clients")
    events = {name: set(group["event"].astype(str)) for name, group in clients.groupby("name")}
    assert events["spinner"] == {"present"} and events["latecomer"] == {"registered"}
    assert spin.pid in set(clients.loc[clients["name"] == "spinner", "pid"])
    assert events["Dummy-Driver"] == {"present"}
    graph = capture.table("engine_graph")
    late_links = graph[graph["src_client"] == "latecomer"]
    assert set(late_links["event"].astype(str)) == {"connected"} and set(late_links["dst_port"]) == {"in"}
    recorded = set(capture.table("threads")["pid"])
    assert {spin.pid, latecomer.pid} <= recorded  # adopted as targets through the engine

    xruns = capture.table("xruns")
    nodes = capture.table("engine_nodes")
    nodes = nodes.assign(late=node_lateness(nodes, capture.table("engine_cycles"))["late"].fillna(False))
    ours = nodes[nodes["name"] == "spinner"]
    seen_as_xrun = seen_as_late = 0
    offsets_ns = []
    for spin_truth in truth:
        start, end = spin_truth["start_ns"], spin_truth["end_ns"]
        reported = xruns[
            (xruns["t_ns"] >= start) & (xruns["t_ns"] <= end + 2 * PERIOD_NS) & (xruns["client"] == "spinner")
        ]
        seen_as_xrun += not reported.empty
        late = ours[(ours["t_ns"] <= start) & (ours["t_ns"] > start - PERIOD_NS) & ours["late"].astype(bool)]
        if not late.empty and pd.notna(late["finish_ns"].iloc[0]):
            row = late.iloc[0]
            seen_as_late += int(row["finish_ns"] - row["t_ns"] > PERIOD_NS)
            offsets_ns.append(start - int(row["awake_ns"]))  # the spin starts inside the woken call
    print(
        f"spins seen as xruns {seen_as_xrun}/{SPINS}, as late cycles {seen_as_late}/{SPINS}; spin start - "
        f"engine awake (ns): {sorted(offsets_ns)}"
    )
    assert seen_as_xrun >= 9
    assert seen_as_late >= 9
    # Same clock: the callback's own CLOCK_MONOTONIC stamp follows the engine's awake stamp by the
    # callback's entry cost, never precedes it, and is far below a period.
    assert offsets_ns and all(0 <= o < PERIOD_NS for o in offsets_ns)


QUIET_S = 10


@pytest.mark.slow
def test_quiet_run_records_only_what_the_engine_reported(tmp_path: Path) -> None:
    out = tmp_path / "quiet.ssf"
    with pipewire_daemon() as daemon:
        spin = daemon.spin_client("quiet", tmp_path / "truth.jsonl")
        # QUIET_S: the check is that every xrun row is one the engine made, which holds at any length; a
        # longer quiet run only counts more of them (the suite's time is better spent elsewhere).
        recorder = catch_load(daemon.env, "-p", str(spin.pid), "-d", f"{QUIET_S}s", "-o", str(out))
        _out, _err = recorder.communicate(timeout=120)
        assert recorder.returncode == 0, _err
    capture = load(out)
    cycles = capture.table("engine_cycles")
    nodes = capture.table("engine_nodes")
    xruns = capture.table("xruns")
    assert len(cycles) >= 0.8 * (QUIET_S - 2) * 1e9 / PERIOD_NS  # the source ran (nearly) the whole run
    unfinished_cycles = nodes.loc[node_lateness(nodes, cycles)["late"].fillna(False).astype(bool), "t_ns"].nunique()
    not_finished = xruns[xruns["text"].str.contains(r"\(node \d+\)")]
    counted = xruns[xruns["text"].str.match(r"driver .* xrun count")]
    totals = cycles["xruns_total"].dropna().astype(int)
    print(
        f"quiet {QUIET_S} s: {len(cycles)} cycles, {len(xruns)} xruns reported by the engine "
        f"({unfinished_cycles} unfinished cycles, driver counter +{totals.max() - totals.min() if len(totals) else 0})"
    )
    # Every xrun row is one the engine made: one per cycle it reported unfinished, one per counter step.
    assert len(not_finished) == unfinished_cycles
    assert len(counted) == (totals.diff().fillna(0) > 0).sum()
    assert set(xruns["source"]) <= {"profiler"}


def test_daemon_killed_mid_recording_ends_the_source_keeps_the_capture(tmp_path: Path) -> None:
    out = tmp_path / "killed.ssf"
    with pipewire_daemon() as daemon:
        spin = daemon.spin_client("orphan", tmp_path / "truth.jsonl")
        recorder = catch_load(daemon.env, "-p", str(spin.pid), "-o", str(out))
        daemon.wait_for_client("catch-load")
        time.sleep(2.0)
        daemon.process.kill()
        daemon.process.wait()
        time.sleep(1.5)
        if spin.poll() is None:  # keep a target alive, or the recording ends with it
            _, err = _stop(recorder)
        else:
            _, err = recorder.communicate(timeout=60)
            assert recorder.returncode == 0, err
    capture = load(out)
    assert capture.trailer is not None
    events = capture.table("events")
    ended = events[events["kind"] == "engine_source_ended"]
    assert len(ended) == 1 and "went away" in ended["text"].iloc[0]
    assert len(capture.table("engine_cycles")) > 100  # what came before the daemon died is kept
    assert not capture.table("samples").empty
    assert "Traceback" not in err


def test_without_pipewire_threads_are_recorded_and_one_line_says_what_is_not(tmp_path: Path) -> None:
    out = tmp_path / "nopw.ssf"
    empty_runtime = tmp_path / "run"
    empty_runtime.mkdir()
    target = subprocess.Popen(["sleep", "30"])
    try:
        env = {"XDG_RUNTIME_DIR": str(empty_runtime), "PIPEWIRE_RUNTIME_DIR": str(empty_runtime)}
        import os

        proc = catch_load({**os.environ, **env}, "--pipewire", "-p", str(target.pid), "-d", "1s", "-o", str(out))
        _out, err = proc.communicate(timeout=60)
    finally:
        target.kill()
        target.wait()
    assert proc.returncode == 0, err
    lines = [line for line in err.splitlines() if "PipeWire" in line]
    assert len(lines) == 1 and "cannot connect" in lines[0], err
    capture = load(out)
    assert not capture.table("samples").empty
    assert "engine_source_unavailable" in set(capture.table("events")["kind"])
    assert capture.table("engine_cycles").empty


def _record_graph(tmp_path: Path, name: str, clients: int, seconds: int = 6) -> Path:
    """`clients` test clients in series (each feeds the next), recorded through the daemon as target."""
    out = tmp_path / f"{name}.ssf"
    with pipewire_daemon() as daemon:
        for i in reversed(range(clients)):
            link = f"{name}{i + 1}:in" if i + 1 < clients else "none"
            daemon.spin_client(f"{name}{i}", tmp_path / f"{name}{i}.jsonl", link_to=link)
        recorder = catch_load(daemon.env, "-p", str(daemon.pid), "-d", f"{seconds}s", "-o", str(out))
        _out, err = recorder.communicate(timeout=120)
        assert recorder.returncode == 0, err
    return out


def test_compare_series_against_chain_from_engine_cycles(tmp_path: Path, run_module) -> None:  # type: ignore[no-untyped-def]
    series = _record_graph(tmp_path, "series", 4)
    chain = _record_graph(tmp_path, "chain", 1)
    for path, clients in ((series, 4), (chain, 1)):
        capture = load(path)
        names = set(capture.table("engine_nodes")["name"].astype(str))
        assert len({n for n in names if n.startswith(path.stem)}) == clients
        graph = capture.table("engine_graph")
        links = set(zip(graph["src_client"], graph["src_port"], graph["dst_client"], graph["dst_port"], strict=True))
        wanted = {(f"series{i}", "out", f"series{i + 1}", "in") for i in range(clients - 1)}
        assert links == wanted and set(graph["event"].astype(str)) <= {"snapshot"}  # linked before recording
    _compare_has_engine_cycle_ends(run_module, series, chain)


def _record_lv2_graph(tmp_path: Path, name: str, series: bool, seconds: int = 4) -> tuple[Path, dict[str, int]]:
    """The JACK test's four LV2 plugins through pw-jack: four jalv clients linked in series, or one
    ecasound client running them as one chain; recorded with the daemon as the only target. Returns the
    capture and each plugin client's pid."""
    require_lv2_hosts()
    out = tmp_path / f"{name}.ssf"
    with pipewire_daemon() as daemon:
        if series:
            hosts = {f"p{i}": daemon.jalv(f"p{i}", uri) for i, uri in enumerate(LV2_PLUGINS)}
            daemon.wait_ports(*(f"{client}:{port}" for client in hosts for port in ("in", "out")))
            daemon.connect(*((f"p{i}:out", f"p{i + 1}:in") for i in range(len(hosts) - 1)))
        else:
            # ecasound exits at once (code 1) on a plugin it cannot load: alive, it runs all four.
            plugins = ["-elv2:" + uri for uri in LV2_PLUGINS]
            eca = daemon.start("ecasound", "-q", "-G:jack,eca,notransport", "-f:f32_le,1,48000", "-i", "jack",
                               "-o", "jack", *plugins)  # fmt: skip
            hosts = {"eca": eca}
            daemon.wait_ports("eca:in_1", "eca:out_1")
        recorder = catch_load(daemon.env, "-p", str(daemon.pid), "-d", f"{seconds}s", "-o", str(out))
        _out, err = recorder.communicate(timeout=120)
        assert recorder.returncode == 0, err
        assert all(host.poll() is None for host in hosts.values()), {k: h.poll() for k, h in hosts.items()}
    return out, {client: host.pid for client, host in hosts.items()}


def test_compare_lv2_plugins_in_series_against_one_chain(tmp_path: Path, run_module) -> None:  # type: ignore[no-untyped-def]
    series, series_pids = _record_lv2_graph(tmp_path, "series", series=True)
    chain, chain_pids = _record_lv2_graph(tmp_path, "chain", series=False)
    for path, pids, links in (
        (series, series_pids, {(f"p{i}", "out", f"p{i + 1}", "in") for i in range(len(LV2_PLUGINS) - 1)}),
        (chain, chain_pids, set()),
    ):
        capture = load(path)
        clients = capture.table("engine_clients")
        plugin_clients = clients[clients["pid"].isin(list(pids.values()))]
        # Each plugin host is a client of the graph under its own name and pid, and no other process is.
        assert dict(zip(plugin_clients["name"].astype(str), plugin_clients["pid"], strict=True)) == pids
        nodes = capture.table("engine_nodes")
        followers = set(nodes["name"].astype(str)) - set(capture.meta["sources"]["engine"]["driver_clock_names"])
        assert followers == set(pids), followers
        graph = capture.table("engine_graph")
        made = set(zip(graph["src_client"], graph["src_port"], graph["dst_client"], graph["dst_port"], strict=True))
        assert made == links and set(graph["event"].astype(str)) <= {"snapshot"}  # linked before recording
        per_cycle = nodes.groupby("t_ns")["name"].nunique()
        assert per_cycle.median() == len(pids)  # every plugin client in (nearly) every engine cycle
    _compare_has_engine_cycle_ends(run_module, series, chain)


def _compare_has_engine_cycle_ends(run_module, series: Path, chain: Path) -> None:  # type: ignore[no-untyped-def]
    """`forensics compare` gives both captures' cycle end p50/p99 and deadline misses from PipeWire's cycles."""
    result = run_module("forensics", "compare", str(series), str(chain), "--json")
    assert result.returncode == 0, result.stderr
    figures = {row["figure"]: row for row in json.loads(result.stdout)["sections"]["figures"]}
    print({k: (figures[k]["a"], figures[k]["b"]) for k in ("cycle end p50", "cycle end p99", "deadline misses")})
    for name in ("cycle end p50", "cycle end p99", "deadline misses"):
        assert figures[name]["a"] is not None and figures[name]["b"] is not None, figures[name]
    assert "pipewire engine cycles" in str(figures["cycles"])
