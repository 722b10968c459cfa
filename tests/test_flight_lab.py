"""The flight recorder on the lab (README, "Flight recorder"): a run with ten episodes (two of each cause)
gives a window for each, with the verdict a full capture of the same run gives. The run keeps its ring (a
ring longer than the run): its segments joined are that full capture. Episodes 3.5 s apart (at least
2.6 s: the lab adds up to a quarter of the spacing as jitter) keep the windows (1 s before and after)
apart while the run stays under 40 s (it was 6 s apart with 2 s windows, a 60 s run: 71 s of the suite's
live lane); the 10-minute figures (memory flat, CPU beside plain recording) are bench/flight_bench.py's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd
import pytest

from analyses.stalls import find_stalls
from analyses.truth import as_injected
from capture.segments import list_segments
from capture.window import join
from tests.helpers import REPO, child_env
from tests.recording import catch_load_argv
from tests.test_flight_live import _flight_file, _whole

LAB_EPISODES = "run:2,runqueue:2,io:2,fault:2,lock:2"


def _verdict_at(stalls: pd.DataFrame, tid: int, start_ns: int, end_ns: int) -> str | None:
    """The verdict of the thread's stall episode (of find_stalls' `stalls`) that overlaps [start, end] most
    (None: no episode)."""
    stalls = stalls[stalls["tid"] == tid]
    overlap = (stalls["end_ns"].clip(upper=end_ns) - stalls["start_ns"].clip(lower=start_ns)).to_numpy()
    if not len(stalls) or overlap.max() <= 0:
        return None
    return str(stalls["verdict"].iloc[int(overlap.argmax())])


@pytest.mark.slow
def test_ten_lab_episodes_give_ten_windows_with_the_full_capture_verdicts(tmp_path: Path) -> None:
    out = tmp_path / "flight"
    result = subprocess.run(
        catch_load_argv(
            "--ring", "200s", "--keep-ring", "--before", "1s", "--after", "1s", "--trigger", "stall>8ms",
            "-o", str(out), "--lab", "--episodes", LAB_EPISODES, "--spacing", "3500ms", "--duration", "38s",
        ),
        capture_output=True, text=True, timeout=900, env=child_env(), cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    full = join(s.path for s in list_segments(out / ".ring"))  # the whole run: the ring outlived it
    truth = full.truth
    assert len(truth) == 10
    audio = int(full.cycles["tid"].iloc[0])
    windows = _flight_file(out).table("flight_windows")
    saved = windows[windows["status"] == "saved"]
    report = []
    full_stalls = find_stalls(full)  # once: the full run's analysis is the slow part of this test
    made = as_injected(
        truth, timing=True
    )  # the lab's own record (analyses.truth): an io episode may have stayed on CPU
    for episode, as_made in zip(truth.itertuples(index=False), made, strict=True):
        holding = saved[(saved["start_ns"] <= episode.start_ns) & (saved["end_ns"] >= episode.end_ns)]
        if not as_made and holding.empty:  # the machine disturbed it: it may not have stalled as injected
            report.append(f"{episode.cause}: not as injected, no window")
            continue
        assert len(holding) == 1, f"{episode.cause} at {episode.start_ns}: {len(holding)} windows hold it"
        window = _whole(out / holding["file"].iloc[0])
        expected = _verdict_at(full_stalls, audio, episode.start_ns, episode.end_ns)
        got = _verdict_at(find_stalls(window), audio, episode.start_ns, episode.end_ns)
        report.append(f"{episode.cause}: full {expected}, window {got}")
        assert got == expected, report[-1]
        # Whether the full capture finds an episode at all is the accuracy tests' question; one the lab did
        # not make as its cause says may hold no stall.
        assert expected is not None or not as_made, report[-1]
    # A window without an episode holds a stall the full capture shows too (a callback late on a busy
    # machine): never one the window alone would invent.
    for extra in saved.itertuples(index=False):
        if ((truth["start_ns"] >= extra.start_ns) & (truth["end_ns"] <= extra.end_ns)).any():
            continue
        near = full_stalls[(full_stalls["start_ns"] <= extra.end_ns) & (full_stalls["end_ns"] >= extra.start_ns)]
        assert len(near), f"window {extra.file} at {extra.t_ns}: no stall in the full capture"
    print(f"\n{len(saved)} windows for 10 episodes; " + "; ".join(report))
