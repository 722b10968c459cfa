"""Incidents on a real JACK graph that the test starts: jackd (dummy driver, 128 frames at 48 kHz),
fluidsynth (with its nice-19 100 ms housekeeping thread) and four jalv clients in series, recorded by
catch-load with eBPF and from /proc alone, starved 8 times by a SCHED_FIFO hog above jackd's priority
on every CPU for 12 ms (tests/workloads/fifo_hog.c).

Asserted: each starvation is exactly one incident rooted at jackd's thread (runqueue, or late wake-up),
its clients listed as `upstream`, never `lock`; no `lock` verdict anywhere (not the housekeeping thread,
not a client); every other incident is rooted at a link of the graph (a late cycle of the graph itself).
The figures (found, missed, extra incidents and their roots) print with -s for the record.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import forensics
from analyses.incidents import chain_links, find_incidents
from analyses.source import capture_interval_ns, iter_samples, proc_only
from analyses.stalls import find_stalls
from analyses.threads import select_threads, thread_profiles
from tests import real_graph
from tests.helpers import REPO, child_env
from tests.recording import catch_load_argv

INJECTIONS = 8
SPIN_MS = 12
GAP_MS = 2000  # 8 starvations over 16 s: long enough to find a 100 ms thread's period (threads.py)
HOG_PRIORITY = 80  # above jackd -R's default 10 and its clients' 5


def _require() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: real-time priorities for jackd and the hog")
    missing = real_graph.missing_tools()
    if missing:
        pytest.skip(f"missing {', '.join(missing)} (tests/install-deps.sh installs them)")


def _wait_recording(path: Path, recorder: subprocess.Popen[str], timeout_s: float = 60.0) -> None:
    """Until the capture file grows (the recorder is past its start-up: eBPF compiled and attached)."""
    deadline = time.monotonic() + timeout_s
    last = -1
    while time.monotonic() < deadline:
        if recorder.poll() is not None:
            raise AssertionError(f"catch-load exited early: {recorder.stderr.read() if recorder.stderr else ''}")
        size = path.stat().st_size if path.exists() else -1
        if size > 0 and last > 0 and size > last:
            return
        last = size
        time.sleep(0.5)
    raise AssertionError("catch-load did not start recording in time")


def _record(tmp_path: Path, ebpf: bool) -> tuple[Path, list[tuple[int, int]], dict[str, int]]:
    hog = real_graph.build_hog(tmp_path)
    out = tmp_path / ("graph-ebpf.ssf" if ebpf else "graph-proc.ssf")
    with real_graph.jack_graph(tmp_path) as graph:
        time.sleep(1.0)  # the graph settles into its rhythm
        args = [*catch_load_argv(), "-q", "-o", str(out)]
        for pid in graph.pids.values():
            args += ["-p", str(pid)]
        if ebpf:
            args.append("--ebpf")
        env = child_env()
        recorder = subprocess.Popen(args, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
        try:
            _wait_recording(out, recorder)
            time.sleep(1.0)  # a quiet second before the first starvation
            spans = real_graph.run_hog(hog, priority=HOG_PRIORITY, spin_ms=SPIN_MS, count=INJECTIONS, gap_ms=GAP_MS)
            time.sleep(1.0)
        finally:
            recorder.send_signal(signal.SIGINT)
            _, err = recorder.communicate(timeout=60)
        assert recorder.returncode == 0, err
        return out, spans, graph.pids


@pytest.mark.parametrize("ebpf", [False, True], ids=["proc", "ebpf"])
@pytest.mark.xfail(
    strict=False,
    reason=(
        "open: from /proc alone one clean-clone CI run rooted an incident at jackd as lock; found since: "
        "jackd's driver (`system`, no pid) was no link of the chain and its asleep wait read as lock (now a "
        "late wake-up, unit-tested); not yet confirmed by a real run (the shared machine timed it out)"
    ),
)
def test_starved_jack_graph_is_one_incident_per_starvation(tmp_path, ebpf):
    _require()
    path, spans, pids = _record(tmp_path, ebpf)
    cap = forensics.load(path)
    profiles = thread_profiles(cap)
    episodes = find_stalls(cap, profiles=profiles)
    watched = select_threads(profiles)
    incidents, members = find_incidents(cap, episodes, watched, interval_ns=capture_interval_ns(cap))
    links = chain_links(cap, watched)
    threads = cap.threads.drop_duplicates("tid", keep="last").set_index("tid")
    jackd_tids = set(threads.index[threads["pid"] == pids["jackd"]])
    link_tids = set(links["tid"])

    # A starvation inside a hole of the recording (the sampler itself kept off every CPU for longer than
    # the hog, on a loaded machine: one run lost 1.2 s) left no data to analyse: it is not scored.
    ticks = np.sort(pd.concat([b.groupby("tick")["t_ns"].min() for b in iter_samples(cap, ["tid"])]).to_numpy(np.int64))
    interval = capture_interval_ns(cap)
    covered = []
    for start, end, _steal in spans:
        k = np.searchsorted(ticks, start)
        if 0 < k < len(ticks) and ticks[k] - ticks[k - 1] <= end - start + 10 * interval:
            covered.append((start, end))
    assert len(covered) >= INJECTIONS - 2, f"only {len(covered)} starvations recorded"
    found, missed = 0, 0
    hit_rows = set()
    for start, end in covered:
        hit = incidents[(incidents["start_ns"] <= end + 3_000_000) & (incidents["end_ns"] >= start - 3_000_000)]
        if len(hit) != 1:
            missed += 1
            near = incidents[(incidents["start_ns"] <= end + 50_000_000) & (incidents["end_ns"] >= start - 50_000_000)]
            print(f"\nstarvation at {start}: {len(hit)} incidents\n{near.drop(columns=['evidence']).to_string()}")
            continue
        row = hit.iloc[0]
        hit_rows.add(row.incident)
        right = row.root_tid in jackd_tids and row.root_verdict in ("runqueue", "late wake-up")
        found += int(right)
        if not right:
            print(f"\nstarvation at {start}: root {row.root_comm} ({row.root_tid}) {row.root_verdict}: {row.evidence}")
        mine = members[members["incident"] == row.incident]
        others = mine[mine["role"] != "root"]
        assert not (others["incident_verdict"] == "lock").any(), others[["comm", "incident_verdict"]]
    extra = incidents[~incidents["incident"].isin(hit_rows)]
    print(
        f"\n{'eBPF' if ebpf else '/proc'}: {len(spans)} starvations, {len(covered)} recorded, {found} found "
        "with the right root, "
        f"{missed} missed or split; {len(episodes)} episodes in {len(incidents)} incidents; {len(extra)} other "
        f"incidents, roots: {extra[['root_comm', 'root_verdict']].value_counts().to_dict()}; chain from "
        f"{sorted(set(links['source']))}, {len(link_tids)} links"
    )
    # fluidsynth's nice-19 housekeeping thread (100 ms): no incident of its own on the graph and never
    # a lock in one. (With --all its own /proc episodes are printed for the record: under load its
    # period estimate and its runnable waits are not reliable from /proc, see the README.)
    housekeeping = profiles[(profiles["pid"] == pids["fluidsynth"]) & (profiles["nice"] >= 19)]
    theirs = members[members["tid"].isin(housekeeping["tid"])]
    assert not (theirs["incident_verdict"] == "lock").any(), theirs[["comm", "incident_verdict", "role"]]
    assert not incidents["root_tid"].isin(housekeeping["tid"]).any()
    everything = find_stalls(cap, profiles=profiles, everything=True)
    on_request = everything[everything["tid"].isin(housekeeping["tid"])]
    print(
        f"housekeeping threads {housekeeping[['comm', 'period_ns']].to_dict('records')}: in incidents "
        f"{theirs['incident_verdict'].value_counts().to_dict()}; "
        f"with --all {on_request['verdict'].value_counts().to_dict()}"
    )
    assert found == len(covered) and missed == 0
    assert not (members["incident_verdict"] == "lock").any(), members[members["incident_verdict"] == "lock"]
    # Every other incident is a late cycle of the graph itself: rooted at one of its links.
    assert extra["root_tid"].isin(link_tids | jackd_tids).all(), extra[["root_comm", "root_tid", "root_verdict"]]


def _engine_late_spans(cap: forensics.Capture, interval_ns: int) -> np.ndarray:
    """(from, to) of every cycle the engine's own records show late: it began later than a period plus
    its tolerance after the previous one (analyses.rules.wake_limit_ns), a client woke or ran half a
    period or more (IncidentRules.engine_late_share) or never finished, or the engine reported an xrun."""
    from analyses.rules import IncidentRules, wake_limit_ns

    cycles = cap.table("engine_cycles").sort_values("t_ns")
    period = float(pd.to_numeric(cycles["period_ns"], errors="coerce").median())
    t = cycles["t_ns"].to_numpy(np.int64)
    limit = float(wake_limit_ns(np.array([period]), interval_ns)[0])
    late = [(int(t[k]), int(t[k + 1])) for k in np.flatnonzero(np.diff(t) > limit)]
    nodes = cap.table("engine_nodes")
    share = IncidentRules().engine_late_share * period
    woken = (nodes["awake_ns"].astype("Float64") - nodes["signal_ns"].astype("Float64")) >= share
    ran = (nodes["finish_ns"].astype("Float64") - nodes["awake_ns"].astype("Float64")) >= share
    flagged = (woken.fillna(False) | ran.fillna(False) | (nodes["xrun"] == True)).to_numpy(dtype=bool)  # noqa: E712
    late += [(int(s), int(s + 2 * period)) for s in nodes.loc[flagged, "t_ns"]]
    late += [(int(s - 2 * period), int(s)) for s in cap.table("xruns")["t_ns"]]
    return np.array(late, dtype=np.int64).reshape(-1, 2)


@pytest.mark.slow
@pytest.mark.xfail(
    strict=False,
    reason="new: not yet seen to complete on the shared machine (its recorder and analysis timed out at load 25-225)",
)
def test_quiet_graph_has_no_incident_the_engine_did_not_see(tmp_path):
    """60 s of the quiet graph (fluidsynth with its nice-19 100 ms housekeeping thread, four jalv in
    series), recorded with eBPF and the JACK source: every incident, with eBPF and from /proc alone, is a
    cycle the engine itself saw late, rooted at a link of the graph, never `lock`, never `unknown`."""
    _require()
    out = tmp_path / "quiet.ssf"
    with real_graph.jack_graph(tmp_path) as graph:
        time.sleep(1.0)
        args = [*catch_load_argv(), "-q", "-o", str(out), "--ebpf", "--jack", graph.server, "-d", "60s"]
        for pid in graph.pids.values():
            args += ["-p", str(pid)]
        env = child_env(base=graph.env)
        recorder = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        assert recorder.returncode == 0, recorder.stderr
        pids = graph.pids
    cap = forensics.load(out)
    interval = capture_interval_ns(cap)
    late = _engine_late_spans(cap, interval)
    threads = cap.threads.drop_duplicates("tid", keep="last").set_index("tid")
    jackd_tids = set(threads.index[threads["pid"] == pids["jackd"]])
    for source in ("eBPF", "/proc"):
        view = cap if source == "eBPF" else proc_only(cap)
        profiles = thread_profiles(view)
        watched = select_threads(profiles)
        incidents, members = find_incidents(view, find_stalls(view, profiles=profiles), watched, interval_ns=interval)
        links = set(chain_links(view, watched)["tid"]) | jackd_tids
        seen = np.array(
            [((late[:, 0] <= e + 5_000_000) & (late[:, 1] >= s - 5_000_000)).any() for s, e in
             zip(incidents["start_ns"], incidents["end_ns"], strict=True)], dtype=bool,
        )  # fmt: skip
        print(
            f"\nquiet 60 s, {source}: {len(late)} late cycle records of the engine, {len(incidents)} incidents, "
            f"{int(seen.sum())} on a cycle the engine saw late; roots "
            f"{incidents[['root_comm', 'root_verdict']].value_counts().to_dict()}"
        )
        if (~seen).any():
            print(incidents[~seen].drop(columns=["evidence"]).to_string())
        assert seen.all(), incidents[~seen][["start_ns", "root_comm", "root_verdict", "evidence"]]
        assert incidents["root_tid"].isin(links).all(), incidents[["root_comm", "root_tid"]]
        assert not incidents["root_verdict"].isin(["lock", "unknown"]).any(), incidents[["root_comm", "evidence"]]
        assert not (members["incident_verdict"] == "lock").any()
