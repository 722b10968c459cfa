"""The JACK source against a real jackd (dummy driver) started by the tests, with real clients."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from forensics.capture import load
from tests.jack_fixtures import catch_load, jackd, wait_engine_started

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
    assert seen_xrun >= 9, f"xrun callbacks for {seen_xrun} of 10 spins"
    assert seen_late >= 9, f"late cycles naming the client for {seen_late} of 10 spins"
    assert seen_log >= 9, f"server-log lines naming the client for {seen_log} of 10 spins"
    # The client became a recording target although it is not jackd's child.
    cue_pid = capture.engine_clients.query("name == 'cue'")["pid"].dropna().iloc[0]
    assert int(cue_pid) in set(capture.threads["pid"])
