"""The flight recorder live (`catch-load --ring`, README "Flight recorder"): a recorder killed with SIGKILL
mid-run, a real JACK server with a client spinning into xruns, the options it refuses, and the counters
`forensics xruns` shows."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest

import forensics
from analyses.incidents import find_incidents
from analyses.source import capture_interval_ns
from analyses.stalls import find_stalls
from analyses.threads import select_threads, thread_profiles
from analyses.truth import thread_reads
from analyses.truth import unobservable as truth_unobservable
from capture.errors import CaptureWarning
from capture.format import Capture
from capture.segments import list_segments
from tests.helpers import REPO, child_env
from tests.jack_fixtures import catch_load as jack_catch_load
from tests.jack_fixtures import jackd
from tests.recording import catch_load_argv

SECOND = 1_000_000_000
MS = 1_000_000


def _whole(path: Path) -> Capture:
    """The capture at `path`, read with every warning an error: whole, trailer and all."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", CaptureWarning)
        cap = forensics.load(path)
        cap.samples  # noqa: B018 - every chunk decodes
    assert cap.complete
    return cap


def _flight_file(out: Path, timeout_s: float = 900.0) -> Capture:
    """flight.ssf, once the watcher has written it (on a loaded machine it may finish after catch-load)."""
    deadline = time.monotonic() + timeout_s
    while not (out / "flight.ssf").exists() and time.monotonic() < deadline:
        time.sleep(1.0)
    return _whole(out / "flight.ssf")


def _lines_of(process: subprocess.Popen[str]) -> list[str]:
    """stderr lines of `process` as they come (a thread reads them)."""
    lines: list[str] = []

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


@pytest.mark.slow
def test_sigkill_mid_run_leaves_every_saved_window_whole(tmp_path: Path) -> None:
    out = tmp_path / "flight"
    proc = subprocess.Popen(
        catch_load_argv(
            "--ring", "120s", "--before", "1s", "--after", "1s", "--trigger", "stall>10ms", "-o", str(out),
            "--lab", "--episodes", "run:6", "--spacing", "5s", "--duration", "60s",
        ),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=child_env(), cwd=REPO,
        start_new_session=True,  # the lab with it: killed together
    )  # fmt: skip
    lines = _lines_of(proc)
    try:
        deadline = time.monotonic() + 240
        while sum(" saved: " in line for line in lines) < 2 and time.monotonic() < deadline:
            assert proc.poll() is None, "".join(lines)
            time.sleep(0.2)
        assert sum(" saved: " in line for line in lines) >= 2, "".join(lines)
        before_kill = sorted(out.glob("window-*.ssf"))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        # The watcher (its own process group) sees the end of its pipe, waits for the writer to flush, saves
        # what is left and writes flight.ssf.
        flight = _flight_file(out).table("flight_windows")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert len(before_kill) >= 2
    for path in sorted(out.glob("window-*.ssf")):
        cap = _whole(path)
        assert len(cap.samples) and cap.meta["window"]["trigger"]["kind"] == "stall"
    assert set(flight.loc[flight["status"] == "saved", "file"]) >= {p.name for p in before_kill}
    assert not list(out.glob(".*.tmp"))


SPINS = 5
SPIN_MS = 20
GAP_S = 3.0  # windows of 1 s + 1 s around each, 1 s apart: one window per spin


@pytest.mark.slow
@pytest.mark.may_skip  # only when the watcher fell behind the ring through all but one spin (a loaded machine)
def test_jack_graph_xruns_give_one_window_each_with_its_incident(tmp_path: Path) -> None:
    """A real jackd (dummy driver) and a client that spins 20 ms in its process callback on cue: each spin
    an xrun the engine reports; each gets its own window, holding the incident of the spinning client.
    A window the watcher reached only after the ring had dropped its seconds is skipped, with its reason
    in flight_windows (README, "Flight recorder": the watcher runs at nice 10 and on a busy machine can
    fall behind the ring; seen in CI beside other work, 2 of 5): counted apart, not scored."""
    out = tmp_path / "flight"
    with jackd(tmp_path) as server:
        cue = server.cue_client("cue")
        server.connect("system:capture_1", "cue:in")
        server.connect("cue:out", "system:playback_1")
        args = ["--jack", server.name, "--jack-log", str(server.log), "-p", str(server.process.pid)]
        args += ["-p", str(cue.process.pid), "--ring", "60s", "--before", "1s", "--after", "1s"]
        recorder = jack_catch_load(server, out, *args)
        lines = _lines_of(recorder)
        deadline = time.monotonic() + 120
        while len(list_segments(out / ".ring")) < 3 and time.monotonic() < deadline:
            assert recorder.poll() is None, "".join(lines)
            time.sleep(0.2)
        time.sleep(1.0)
        for _ in range(SPINS):
            cue.cue(f"spin {SPIN_MS}")
            time.sleep(GAP_S)
        spins = [t for t in cue.quit() if t["cue"] == "spin"]
        recorder.send_signal(signal.SIGINT)
        recorder.wait(timeout=300)
    assert recorder.returncode == 0, "".join(lines)
    flight = _flight_file(out)
    windows = flight.table("flight_windows")
    saved = windows[windows["status"] == "saved"]
    reported = flight.xruns["t_ns"].to_numpy()
    assert len(spins) == SPINS
    found = 0
    unobservable: list[int] = []
    lagged: list[str] = []
    for spin in spins:
        start, end = int(spin["start_ns"]), int(spin["end_ns"])
        if not ((reported >= start) & (reported <= end + SECOND // 2)).any():
            continue  # no xrun reported for this spin (see test_engine_jack: at least 9 of 10 are)
        holding = windows[(windows["start_ns"] <= start) & (windows["end_ns"] >= end)]
        assert len(holding) == 1, f"spin at {start}: {len(holding)} windows"
        if holding["status"].iloc[0] != "saved":
            lagged.append(str(holding["reason"].iloc[0]))
            continue
        window = _whole(out / holding["file"].iloc[0])
        profiles = thread_profiles(window)
        episodes = find_stalls(window, profiles=profiles)
        incidents, _ = find_incidents(
            window, episodes, select_threads(profiles), interval_ns=capture_interval_ns(window)
        )
        hit = incidents[(incidents["start_ns"] <= end + 5 * MS) & (incidents["end_ns"] >= start - 5 * MS)]
        spun = pd.DataFrame({"tid": [int(spin["tid"])], "start_ns": [start], "end_ns": [end]})
        if hit.empty and truth_unobservable(spun, thread_reads(window, spun["tid"]))[0]:
            # The recorder itself was kept off the CPU through the spin (a spinning real-time client above
            # it on one CPU, the other busy): the capture cannot show it; counted, not scored (the lab
            # accuracy tests' rule, analyses.truth.unobservable).
            unobservable.append(start)
            continue
        assert len(hit) >= 1, f"spin at {start}: no incident in {holding['file'].iloc[0]}"
        found += 1
    print(f"spins the recorder was kept off the CPU through: {len(unobservable)}; windows skipped: {lagged}")
    assert len(unobservable) <= 2, f"the recorder missed {len(unobservable)} of {SPINS} spins"
    assert found + len(unobservable) + len(lagged) >= SPINS - 1, (
        f"only {found} of {SPINS} spins gave an xrun with a window"
    )
    if found < 2:
        pytest.skip(f"the watcher fell behind the ring: {len(lagged)} of {SPINS} windows skipped ({lagged[:1]})")
    # One window per xrun or merged burst: every saved window holds an xrun or a late cycle it was saved for.
    for window in saved.itertuples(index=False):
        assert ((reported >= window.start_ns) & (reported <= window.end_ns)).any() or window.kind == "late"
    print(f"\n{SPINS} spins, {found} with xruns, {len(saved)} windows: " + "; ".join(saved["verdict"]))


def test_ring_options_are_checked_before_anything_starts(tmp_path: Path) -> None:
    for args, message in (
        (["--ring", "5s"], "too short"),
        (["--ring", "60s", "--trigger", "stall>soon"], "--trigger"),
        (["--ring", "60s", "--max-disk", "lots"], "not a size"),
        (["--trigger", "xrun"], "add --ring"),
    ):
        result = subprocess.run(
            catch_load_argv(*args, "-o", str(tmp_path / "out"), "--", "true"),
            capture_output=True, text=True, timeout=60, env=child_env(), cwd=REPO,
        )  # fmt: skip
        assert result.returncode != 0 and message in result.stderr, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert not (tmp_path / "out").exists()
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("mine")
    result = subprocess.run(
        catch_load_argv("--ring", "60s", "-o", str(tmp_path / "taken"), "--", "true"),
        capture_output=True, text=True, timeout=60, env=child_env(), cwd=REPO,
    )  # fmt: skip
    assert result.returncode != 0 and "holds files already" in result.stderr
    assert (tmp_path / "taken" / "x").read_text() == "mine"


def test_flight_counters_read_with_forensics_xruns(tmp_path: Path) -> None:
    """The hint catch-load prints works: `forensics xruns` on flight.ssf shows the per-minute counts."""
    minutes = pd.DataFrame({"t_ns": [0, 60 * SECOND], "covered_ns": [60 * SECOND] * 2, "xruns": [3, 1]})
    minutes = minutes.assign(missed_deadlines=[0, 2], markers=[0, 0])
    bursts = pd.DataFrame({"start_ns": [5 * SECOND], "end_ns": [7 * SECOND], "xruns": [3], "missed_deadlines": [0]})
    from capture.window import write_capture

    path = tmp_path / "flight.ssf"
    cap = Capture.from_frames(
        {"window": {"origin_ns": 0}, "flight": {"burst_gap_ns": 10 * SECOND}},
        {"end_reason": "flight"},
        flight_minutes=minutes,
        flight_bursts=bursts,
    )
    write_capture(path, cap)
    result = subprocess.run(
        [*catch_load_argv()[:2], "forensics", "xruns", str(path)],
        capture_output=True, text=True, timeout=120, env=child_env(), cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Per minute of the flight recording" in result.stdout
    assert "events less than 10 s apart" in result.stdout
