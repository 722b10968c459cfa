"""Incidents on a real JACK graph that the test starts: jackd (dummy driver, 128 frames at 48 kHz),
fluidsynth (with its nice-19 100 ms housekeeping thread) and four jalv clients in series, recorded once for
the module by catch-load with eBPF and the JACK source (tests/real_captures.record_starved), starved 8 times
by a SCHED_FIFO hog above jackd's priority on every CPU for 12 ms (tests/workloads/fifo_hog.c), 2 s apart.

The one recording is analysed as four recordings would be (tests/real_captures.VIEWS): with the engine's
own tables or without them, with eBPF or from /proc alone (the same capture without its exact tables).

Asserted, on what the capture shows happened: each starvation the recorder could see (no hypervisor steal
over it, the sampler not kept off the CPU well past the hog: each one left out is printed, at most
MAX_UNOBSERVABLE) is exactly one incident rooted at jackd's thread (runqueue, or late wake-up), its clients
`upstream`, never `lock`; no `lock` verdict anywhere (not the housekeeping thread, not a client); every
other incident is rooted at a link of the graph. With the engine's tables, every incident inside the
recording is a cycle the engine's own stamps show late. Figures print with -s for the record.

The /proc-only `lock` root at jackd this test was marked for: jackd's driver (`system`, no pid) is a link
of the chain and its asleep wait a late wake-up; the root's row among the members now says the incident's
verdict too (a /proc run here showed jackd `lock` there); a link the engine stamped signalled and awake
late is `runqueue` by those stamps, not `lock` (captures/jack-signalled-late.ssf).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import forensics
from analyses.engine import node_lateness
from analyses.rules import wake_limit_ns
from analyses.source import capture_interval_ns
from tests import real_captures
from tests.jack_fixtures import missing_graph_tools

pytestmark = [pytest.mark.needs_root, pytest.mark.needs_bcc]

STARVATIONS = 8
SPIN_MS = 12
GAP_MS = 2000  # 8 starvations over 16 s: long enough to find a 100 ms thread's period (threads.py)
MAX_UNOBSERVABLE = STARVATIONS // 2  # generous: a steal burst on this VM lasts minutes (tests/helpers.py)
ENGINE_MARGIN_NS = 5_000_000  # an incident this close to a cycle the engine saw late is that cycle's
# Of the incidents away from the starvations (a graph on a VM has thousands of late cycles: 4331 records in a
# 16 s clean-clone CI run), at most this share may be off every cycle the engine's stamps show late, or be
# rooted `lock` by /proc with no suspect outside the links: each printed. A CI run on a quiet machine had 1
# of 358 (eBPF) and 1 of 88 (/proc) off the engine's late cycles, and one /proc `lock` among 88; the
# starvations themselves are scored strictly (exactly one incident each, rooted at jackd). A recording with
# few incidents may hold two such (a CI run under steal: 2 of 18, one rooted at jackd switched in 5.3 ms
# after its wake-up, one where every link only waited): MAX_ODD_FLOOR.
MAX_ODD_SHARE = 0.02
MAX_ODD_FLOOR = 2


def _require() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: real-time priorities for jackd and the hog")
    missing = missing_graph_tools()
    if missing:
        pytest.skip(f"missing {', '.join(missing)} (tests/install-deps.sh installs them)")


@pytest.fixture(scope="module")
def starved(tmp_path_factory: pytest.TempPathFactory) -> real_captures.Starved:
    """The graph recorded once for every test here (a recording is the slow part: ~25 s)."""
    _require()
    workdir = tmp_path_factory.mktemp("starved-graph")
    return real_captures.record_starved(
        workdir, workdir / "graph.ssf", ebpf=True, jack=True, starvations=STARVATIONS, spin_ms=SPIN_MS,
        gap_ms=GAP_MS, quiet_before_s=1.0, quiet_after_s=1.0,
    )  # fmt: skip


_scores: dict[str, real_captures.StarvedScore] = {}


def _score(starved: real_captures.Starved, name: str) -> tuple[forensics.Capture, real_captures.StarvedScore]:
    """The view's analysis, once per view for the module (several tests read it)."""
    cap = real_captures.view(forensics.load(starved.path), name)
    if name not in _scores:
        _scores[name] = real_captures.score_starved(cap, starved.spans, starved.pids["jackd"], SPIN_MS)
    return cap, _scores[name]


@pytest.mark.may_skip  # only when the host stole through most starvations: nothing to judge
@pytest.mark.parametrize("name", real_captures.VIEWS)
def test_starved_jack_graph_is_one_incident_per_starvation(starved, name):
    _, score = _score(starved, name)
    print("\n" + score.report(name))
    if len(score.unobservable) > MAX_UNOBSERVABLE:  # the host stole through most: too few left to judge
        pytest.skip(f"{len(score.unobservable)} of {STARVATIONS} starvations unobservable: {score.unobservable}")
    assert not score.wrong, score.wrong
    assert len(score.right) == score.scored
    members, incidents = score.members, score.incidents
    locks = members[members["incident_verdict"] == "lock"]
    if "ebpf" not in name:
        # /proc names no waker: a link's missed wake-up is read as a possible lock when a thread outside the
        # graph's links ran meanwhile (its suspect). On a loaded machine one always does: a limit of /proc
        # (README, "What /proc cannot see on a graph"), printed, not failed. A suspect that is a link, or none, fails.
        blamed = locks["suspect_tid"].astype("Float64")
        outside = blamed.notna() & ~blamed.isin(score.chain)
        print(f"{int(outside.sum())} episodes read as lock from /proc, their suspect outside the graph's links")
        locks = locks[~outside.to_numpy()]
    # In a starvation's incident never (those are scored above: rooted at jackd); among the graph's other
    # late cycles, a bounded few, printed.
    in_starvation = ~locks["incident"].isin(score.extra["incident"])
    assert not in_starvation.any(), locks[in_starvation][["comm", "tid", "role", "suspect", "evidence"]]
    if len(locks):
        print(locks[["comm", "tid", "role", "suspect", "evidence"]].to_string())
    assert len(locks) <= max(1, MAX_ODD_SHARE * len(incidents)), locks[["comm", "tid", "role", "suspect", "evidence"]]
    # fluidsynth's nice-19 housekeeping thread (100 ms): no incident of its own on the graph and never
    # a lock in one.
    profiles = score.profiles
    # Not real-time: a test run under `nice -n 19` gives every thread of the graph nice 19, its audio thread too.
    housekeeping = profiles[
        (profiles["pid"] == starved.pids["fluidsynth"]) & (profiles["nice"] >= 19) & ~profiles["rt"].astype(bool)
    ]
    theirs = members[members["tid"].isin(housekeeping["tid"])]
    assert not (theirs["incident_verdict"] == "lock").any(), theirs[["comm", "incident_verdict", "role"]]
    assert not incidents["root_tid"].isin(housekeeping["tid"]).any()
    # Every other incident is a late cycle of the graph itself: rooted at one of its links.
    links = score.links
    extra = score.extra
    assert extra["root_tid"].isin(links).all(), extra[["root_comm", "root_tid", "root_verdict"]]


def _engine_late_spans(cap: forensics.Capture, interval_ns: int) -> np.ndarray:
    """(from, to) of every cycle the engine's own records show late: it began later than a period plus a
    periodic thread's tolerance after the previous one (analyses.rules.wake_limit_ns), a client ran (awake)
    later in its cycle than it usually does by more than that tolerance, the cycle's late start included
    (the lateness adds up down the chain: a cycle 0.23 ms late whose first client woke 0.38 ms after its
    signal has every link after it 0.6 ms late), or the engine reported an xrun."""
    cycles = cap.table("engine_cycles").sort_values("t_ns")
    period = float(pd.to_numeric(cycles["period_ns"], errors="coerce").median())
    t = cycles["t_ns"].to_numpy(np.int64)
    limit = float(wake_limit_ns(np.array([period]), interval_ns)[0])
    late = [(int(t[k]), int(t[k + 1])) for k in np.flatnonzero(np.diff(t) > limit)]
    start_late = pd.Series(np.r_[0.0, np.maximum(np.diff(t) - period, 0.0)], index=t)
    nodes = cap.table("engine_nodes")
    offset = (nodes["awake_ns"].astype("Float64") - nodes["t_ns"].astype("Float64")).astype(np.float64)
    usual = offset.groupby(nodes["name"].astype(str).to_numpy()).transform("median")
    lateness = offset - usual + start_late.reindex(nodes["t_ns"].to_numpy()).fillna(0.0).to_numpy()
    ran = (nodes["finish_ns"].astype("Float64") - nodes["awake_ns"].astype("Float64")).astype(np.float64)
    tolerance = limit - period
    xrun = node_lateness(nodes, cycles)["late"].fillna(False).to_numpy(dtype=bool)
    flagged = ((lateness > tolerance) | (ran > tolerance)).fillna(False).to_numpy(dtype=bool) | xrun
    late += [(int(s), int(s + 2 * period)) for s in nodes.loc[flagged, "t_ns"]]
    late += [(int(s - 2 * period), int(s)) for s in cap.table("xruns")["t_ns"]]
    return np.array(late, dtype=np.int64).reshape(-1, 2)


@pytest.mark.parametrize("name", ["jack+ebpf", "jack+proc"])
def test_every_incident_is_a_cycle_the_engine_saw_late(starved, name):
    """The graph between its starvations is quiet: every incident inside the recording, with eBPF and
    from /proc alone, is a cycle the engine's own stamps show late, rooted at a link of the graph, never
    `lock`, and `unknown` only off the starvations, saying why (printed). Outside the recording (after its end,
    where eBPF events of the recorder's drain may still lie: no engine record there) incidents are
    printed, not judged."""
    cap, score = _score(starved, name)
    interval = capture_interval_ns(cap)
    late = _engine_late_spans(cap, interval)
    incidents = score.incidents
    ended_ns = int((cap.trailer or {}).get("ended_ns") or incidents["end_ns"].max())
    inside = incidents[incidents["start_ns"] <= ended_ns]
    seen = np.array(
        [((late[:, 0] <= e + ENGINE_MARGIN_NS) & (late[:, 1] >= s - ENGINE_MARGIN_NS)).any() for s, e in
         zip(inside["start_ns"], inside["end_ns"], strict=True)], dtype=bool,
    )  # fmt: skip
    print(
        f"\n{name}: {len(late)} late cycle records of the engine, {len(inside)} incidents in the recording "
        f"({len(incidents) - len(inside)} after its end), {int(seen.sum())} on a cycle the engine saw late; "
        f"roots {inside[['root_comm', 'root_verdict']].value_counts().to_dict()}"
    )
    # An incident the machine's evidence covers (hypervisor steal, a thread held on CPU) is the machine's:
    # the engine's stamps may show it or not (its own clock is late with it). Printed, not judged.
    machine = inside["evidence"].astype(str).str.contains("hypervisor steal|the machine's").to_numpy()
    print(f"{int((~seen & machine).sum())} incidents off the engine's late cycles with the machine's evidence")
    seen = seen | machine
    if (~seen).any():
        print(inside[~seen].drop(columns=["evidence"]).to_string())
        # How far each is from the nearest cycle the engine saw late: for the reader of a failure.
        for start in inside.loc[~seen, "start_ns"]:
            nearest = np.abs(late - int(start)).min() if len(late) else -1
            print(f"incident at {start}: nearest late engine cycle {nearest / 1e6:.1f} ms away")
    links = score.links
    assert (~seen).sum() <= max(MAX_ODD_FLOOR, MAX_ODD_SHARE * len(inside)), inside[~seen][
        ["start_ns", "root_comm", "root_verdict", "evidence"]
    ]
    # A thread of the graph's processes (the engine's client table and jackd): chain_links over this
    # test's own thread selection came out empty in a CI run under 25-45 % steal (links: jackd's threads
    # only) while the incidents rooted at fluidsynth and jalv, the graph's clients.
    pids = set(pd.to_numeric(cap.engine_clients["pid"], errors="coerce").dropna().astype(int))
    pids.add(int(starved.pids["jackd"]))
    graph = set(cap.threads.loc[cap.threads["pid"].isin(pids), "tid"].astype(int)) | set(links)
    theirs = inside[~machine]  # the machine's incidents (steal, a thread held on CPU) may root anywhere
    assert theirs["root_tid"].isin(graph).all(), theirs[["root_comm", "root_tid", "evidence"]]
    locked = inside[inside["root_verdict"] == "lock"]
    if "ebpf" not in name:  # the /proc limit of the test above: a suspect outside the links ran meanwhile
        roots = score.members[score.members["role"] == "root"].set_index("incident")["suspect_tid"]
        blamed = roots.reindex(locked["incident"]).astype("Float64")
        outside = (blamed.notna() & ~blamed.isin(score.chain)).to_numpy()
        print(f"{int(outside.sum())} roots read as lock from /proc, their suspect outside the graph's links")
        locked = locked[~outside]
    assert len(locked) <= max(1, MAX_ODD_SHARE * len(inside)), locked[["root_comm", "evidence"]]
    # `unknown` says the analysis could not name a cause, never a wrong one. On this VM it comes two ways,
    # both the machine's own jitter: a cycle where every link only waited and the head shows no late
    # switch-in, or a link held on CPU by the switch record that its own clock did not count (steal or
    # interrupts: `machine` above; a submission's CI run had 2 such and 1 of the first). Never on a
    # starvation (each is scored above, rooted at jackd); among the graph's other late cycles, printed, not
    # counted: how many the machine makes is its own (a clean-clone CI run had 6 besides the 8 starvations,
    # 4 of them `unknown`; the figure is bench/incident_causes.py's). Each says what the analysis looked for.
    is_unknown = (inside["root_verdict"] == "unknown").to_numpy()
    unknown = inside[is_unknown]
    print(unknown[["start_ns", "root_comm", "evidence"]].to_string() if len(unknown) else "no unknown root")
    assert unknown["incident"].isin(score.extra["incident"]).all(), unknown[["root_comm", "evidence"]]
    head_unseen = unknown["evidence"].astype(str).str.contains("the head of the chain").to_numpy()
    assert (head_unseen | machine[is_unknown]).all(), unknown["evidence"].tolist()


def test_the_recording_says_how_it_was_made(starved, tmp_path: Path):
    """What tests/real_captures.py stamps into a stored capture: the starvations it was made with."""
    stamped = real_captures.stamp(starved.path, tmp_path / "stamped.ssf", starved.made_by)
    cap = forensics.load(stamped)
    assert real_captures.starvations_of(cap) == [tuple(s) for s in starved.spans]
    original = forensics.load(starved.path)
    assert cap.table_names == original.table_names and cap.meta["made_by"]["how"] == starved.made_by["how"]
    assert {k: v for k, v in cap.trailer.items() if k != "rows"} == {
        k: v for k, v in original.trailer.items() if k != "rows"
    }
