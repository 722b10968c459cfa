"""Incidents on real graphs against known causes (tests/injections.py): jackd and a headless PipeWire, each
with the test client in its graph, PER_CAUSE injections of each of five causes (a SCHED_FIFO hog above the
engine on every CPU, the client's callback spinning, waiting for a lock a SCHED_OTHER thread holds,
reading a file with O_DIRECT, touching fresh pages), recorded once with eBPF and analysed with it and
from /proc alone (the same capture without its exact tables).

Injections during which the machine's hypervisor stole time (/proc/stat in the capture) are the
machine's, not the test's: left out; the run is recorded again when more than half of a cause's were,
and a cause with fewer than three left is printed, not judged (tests/recording.judged_causes: a host
stealing 25-45 % for an hour leaves few).
Asserted per cause: recall and precision of at least MIN_SCORE (the figures are
bench/incident_causes.py's), an injection counting as found when it is exactly one incident rooted at
the right thread (the server's driver for the hog, the callback's thread otherwise) with the right verdict
(runqueue, run, lock, io, fault). /proc sees all five here: a lock wait of a period and more makes the
callback miss wake-ups (state S), the O_DIRECT reads show state D, fresh pages a fault storm, the hog a
runnable wait (schedstat); a lock wait shorter than a period would be invisible to /proc (README,
"What /proc cannot see"). The confusion matrices print with -s (bench/incident_causes.py prints them
for a report).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import forensics
from tests import injections
from tests.helpers import wait_for_quiet_machine
from tests.recording import judged_causes

pytestmark = [pytest.mark.slow, pytest.mark.needs_root, pytest.mark.needs_bcc]

# Recall and precision per cause above this: most injections of each cause are one incident with the right
# root and verdict, which a broken rule or root never reaches (the suite fails then). The figures themselves
# (0.9-1.0 on a quiet machine) are bench/incident_causes.py's: a live recording on this VM scored eBPF `io`
# at 0.8-0.89 (a 20 ms O_DIRECT read on a disk that answers in ~70 us is many short D waits between
# switch-ins; two PipeWire recordings here read 19 of 20 reads as io, the 20th over hypervisor steal), and
# 0.7 at load 25 (README, "What /proc cannot see on a graph"). The eBPF PipeWire view once rooted every hog
# starvation at the client as `lock`: the data loop, measured by /proc at 4.035 ms for the 5.333 ms quantum
# (woken twice a cycle, its two wake-ups often in one sampling window), was no link of the chain, so the
# client's wait for it read as a lock held outside it (rules.runs_engine_cycle now makes it the driver;
# tests/test_incidents.py pins it on a synthetic graph).
MIN_SCORE = 0.5


# Five of each cause, not the benchmark's ten: one short live case per engine (issue 22, item 4), a
# recording of ~14 s instead of ~28 s, and a rule removed still scores 0 of 5 (far under MIN_SCORE).
PER_CAUSE = 5
MAX_MACHINE = PER_CAUSE // 2  # injections of one cause over hypervisor steal (left out) before recording again
ATTEMPTS = 2
# A recording over which the hypervisor stole this share of the machine is the machine's as a whole, not only
# the injections it stole through: the callbacks' periods, which a late wake-up (the lock cause from /proc and
# eBPF alike) is measured against, are lost. Measured on the kept captures (2026-12-07): 13-33 % stolen over
# four recordings (two CI runs, one beside stress-ng), the client's callback without a period in each and no
# lock injection an incident (lock recall 0, every other cause 1.0); 0-3 % over seven others, every period
# found and lock 0.75-1.0. Recorded again; a recording still stolen that much is judged on nothing.
MAX_STOLEN_SHARE = 0.10


def _stolen_share(cap: forensics.Capture) -> float:
    """The share of all CPUs' time the hypervisor stole over the recording (its /proc/stat rows)."""
    system = cap.system
    machine = system[system["cpu"] == -1].sort_values("t_ns")
    cpus = system.loc[system["cpu"] >= 0, "cpu"].nunique()
    if len(machine) < 2 or not cpus or machine["steal"].isna().any():
        return 0.0
    stolen_s = float(machine["steal"].iloc[-1] - machine["steal"].iloc[0]) / cap.clk_tck
    return stolen_s / ((machine["t_ns"].iloc[-1] - machine["t_ns"].iloc[0]) / 1e9 * cpus)


def _recorded(engine: str, tmp_path: Path) -> tuple[injections.Recording, forensics.Capture]:
    """A recording in which the machine disturbed at most MAX_MACHINE injections of each cause (steal:
    injections.score), again up to ATTEMPTS times: whether it did is measured from /proc/stat, not from
    the verdicts."""
    record = injections.record_jack if engine == "jack" else injections.record_pipewire
    for attempt in range(1, ATTEMPTS + 1):
        workdir = tmp_path / f"attempt-{attempt}"
        workdir.mkdir()
        wait_for_quiet_machine()
        rec = record(workdir, per_cause=PER_CAUSE)
        counts = pd.Series([i.cause for i in rec.injections]).value_counts().to_dict()
        assert counts == dict.fromkeys(injections.CAUSES, PER_CAUSE), counts  # every cue carried out
        cap = forensics.load(rec.path)
        machine = injections.score(cap, rec, _incidents_of(cap, ebpf=False)).machine
        stolen = _stolen_share(cap)
        print(f"attempt {attempt}: injections over hypervisor steal per cause {machine}, {stolen:.0%} stolen in all")
        if max(machine.values()) <= MAX_MACHINE and stolen < MAX_STOLEN_SHARE:
            break
    return rec, cap


_recordings: dict[str, tuple[injections.Recording, forensics.Capture]] = {}
_incidents: dict[tuple[Path | None, bool], pd.DataFrame] = {}


def _incidents_of(cap: forensics.Capture, *, ebpf: bool) -> pd.DataFrame:
    """injections.incidents_of once per recording and view (each takes 5-20 s here, and every test asks
    for the /proc view to measure the machine's steal)."""
    key = (cap.path, ebpf)  # each attempt records into a directory of its own
    if key not in _incidents:
        _incidents[key] = injections.incidents_of(cap, ebpf=ebpf)
    return _incidents[key]


def _check(engine: str, tmp_path_factory: pytest.TempPathFactory, ebpf_views: tuple[bool, ...] = (True, False)) -> None:
    """Score the engine's recording (made once for the module) from eBPF and/or /proc alone."""
    if engine not in _recordings:
        _recordings[engine] = _recorded(engine, tmp_path_factory.mktemp(engine))
    rec, cap = _recordings[engine]
    disturbed = injections.score(cap, rec, _incidents_of(cap, ebpf=False)).machine
    scored = pd.Series({cause: PER_CAUSE - disturbed[cause] for cause in injections.CAUSES})
    stolen = _stolen_share(cap)
    if stolen >= MAX_STOLEN_SHARE:  # the periods are lost: nothing is scorable (MAX_STOLEN_SHARE)
        print(f"{engine}: the hypervisor stole {stolen:.0%} of the machine over the recording")
        scored[:] = 0
    judged = judged_causes(scored, tuple(injections.CAUSES), f"{engine}: ")
    failures = []
    for ebpf in ebpf_views:
        label = "eBPF" if ebpf else "/proc"
        score = injections.score(cap, rec, _incidents_of(cap, ebpf=ebpf))
        with pd.option_context("display.width", 200):
            print(f"\n{engine}, {label}:\n{score.confusion.to_string()}")
            print(f"recall {score.recall}\nprecision {score.precision}")
            wrong = score.rows[~score.rows["right"]]
            if len(wrong):
                print(wrong.to_string())
            print(f"{len(score.extra)} incidents away from every injection: "
                  f"{score.extra['root_verdict'].value_counts().to_dict()}")  # fmt: skip
        for cause in judged:
            if score.recall[cause] < MIN_SCORE or score.precision[cause] < MIN_SCORE:
                failures.append(
                    f"{label} {cause}: recall {score.recall[cause]:.2f} precision {score.precision[cause]:.2f}"
                )
    assert not failures, failures


@pytest.mark.may_skip  # only when the host stole through every cause's injections or the recording (judged_causes)
def test_jack_causes_are_one_incident_each_with_the_right_root(tmp_path_factory: pytest.TempPathFactory) -> None:
    _check("jack", tmp_path_factory)


@pytest.mark.may_skip  # only when the host stole through every cause's injections or the recording (judged_causes)
def test_pipewire_causes_from_proc_are_one_incident_each_with_the_right_root(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    _check("pipewire", tmp_path_factory, ebpf_views=(False,))


@pytest.mark.may_skip  # only when the host stole through every cause's injections or the recording (judged_causes)
def test_pipewire_causes_with_ebpf_are_one_incident_each_with_the_right_root(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    _check("pipewire", tmp_path_factory, ebpf_views=(True,))
