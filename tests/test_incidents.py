"""Incidents on synthetic captures (tests/synth.py): each root kind, and the upstream chain from each of
the three sources (engine tables, eBPF wake-ups, /proc periods); the lab captures: one incident per
episode with the right root verdict; the period tolerance of periodic threads."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import forensics
from analyses import rules
from analyses.incidents import chain_links, find_incidents, graph_rank, xrun_rows
from analyses.source import capture_interval_ns
from analyses.stalls import find_stalls
from analyses.threads import select_threads, thread_profiles
from tests import synth
from tests.helpers import REPO
from tests.synth import MS, T0, US, Episode, Timeline, Waker

PERIOD = 5_333_333
SECONDS = 2.0
DURATION = int(SECONDS * 1e9)
STARVED_CYCLE = 200  # ~1.07 s in


def _graph(driver_episodes=(), client_episodes=None, clients=3, driver_lag_ns=0):
    """A driver (FIFO 10, its own pid) and `clients` clients (FIFO 5, a pid each) at one period; client j
    wakes 60 us after the link above it, as a graph's order does."""
    client_episodes = client_episodes or {}
    driver = Timeline(tid=500, comm="driverd", pid=500, policy=1, rtprio=10, cpu=0)
    synth.periodic(driver, t0=T0, duration_ns=DURATION, period_ns=PERIOD, episodes=driver_episodes, work_ns=50 * US)
    links = [driver]
    for j in range(clients):
        tl = Timeline(tid=600 + j, comm=f"client{j}", pid=600 + j, policy=1, rtprio=5, cpu=(j + 1) % 2)
        synth.periodic(
            tl, t0=T0 + (j + 1) * 60 * US + driver_lag_ns, duration_ns=DURATION, period_ns=PERIOD,
            episodes=client_episodes.get(j, ()), work_ns=50 * US, seed=j + 1,
        )  # fmt: skip
        links.append(tl)
    return links


def _starved(ms=12.0):
    """The driver runnable `ms` without a CPU in one cycle; every client asleep that long, waiting for it."""
    return _graph(
        driver_episodes=[Episode("runqueue", STARVED_CYCLE, ms)],
        client_episodes={j: [Episode("lock", STARVED_CYCLE, ms)] for j in range(3)},
    )


def _by_tid_waker(links, extra=()):
    """ebpf_tables applies one Waker list to every thread: give each client its own upstream waker."""
    tables = {}
    for k, tl in enumerate(links):
        wakers = [*extra] if k == 0 else [*extra, Waker(T0, T0 + 2 * DURATION, links[k - 1].tid, links[k - 1].comm)]
        one = synth.ebpf_tables([tl], wakers=wakers)
        for name, frame in one.items():
            tables.setdefault(name, []).append(frame)
    return {name: pd.concat(frames, ignore_index=True).sort_values("t_ns", kind="stable").reset_index(drop=True)
            for name, frames in tables.items()}  # fmt: skip


def _analyse(cap):
    profiles = thread_profiles(cap)
    episodes = find_stalls(cap, profiles=profiles)
    watched = select_threads(profiles)
    incidents, members = find_incidents(cap, episodes, watched, interval_ns=capture_interval_ns(cap))
    return episodes, incidents, members


def _capture(links, ebpf=None, **tables):
    cap = synth.capture(links, t0=T0, duration_ns=DURATION, **tables)
    return synth.with_ebpf(cap, ebpf) if ebpf is not None else cap


# ---------------------------------------------------------------------------------------------------
# The chain from each source


def test_proc_chain_one_incident_rooted_at_the_earliest_with_clients_upstream():
    episodes, incidents, members = _analyse(_capture(_starved()))
    assert (episodes["verdict"] == "lock").sum() >= 1, "without incidents the clients read as lock"
    assert len(incidents) == 1
    row = incidents.iloc[0]
    assert (row.root_tid, row.root_verdict, row.chain_source) == (500, "runqueue", "proc")
    assert row.inferred and "inferred" in row.evidence
    clients = members[members["tid"] != 500]
    assert len(clients) and (clients["incident_verdict"] == "upstream").all()
    assert not (members["incident_verdict"] == "lock").any()


def test_ebpf_chain_upstream_named_by_the_waker():
    links = _starved()
    cap = _capture(links, ebpf=_by_tid_waker(links))
    chain = chain_links(cap, select_threads(thread_profiles(cap))).set_index("tid")
    assert chain.loc[601, "upstream"] == (600,) and chain.loc[600, "upstream"] == (500,)
    assert bool(chain.loc[500, "driver"])
    _, incidents, members = _analyse(cap)
    assert len(incidents) == 1
    row = incidents.iloc[0]
    assert (row.root_tid, row.root_verdict, row.chain_source, row.inferred) == (500, "runqueue", "ebpf", False)
    clients = members[members["tid"] != 500].set_index("tid")
    assert (clients["incident_verdict"] == "upstream").all() and row.waited == len(clients)
    assert clients.loc[602, "upstream_tid"] == 601


def _engine_tables(names, pids, late_node=0, woke_late_ns=12 * MS, end_late_ns=13 * MS, xrun=True):
    """JACK-like engine tables of the _graph: each client signalled 60 us after the one above it; in
    STARVED_CYCLE node `late_node` woke `woke_late_ns` after its signal, the cycle ended `end_late_ns`
    after its start (past the period: a missed deadline) and, with `xrun`, the engine reported one."""
    clients = pd.DataFrame(
        {"t_ns": T0, "engine": "jack", "event": "present", "name": names, "pid": pids, "node_id": None}
    )
    graph = pd.DataFrame(
        {"t_ns": T0, "engine": "jack", "event": "snapshot", "src_client": names[:-1], "src_port": "out",
         "dst_client": names[1:], "dst_port": "in"}
    )  # fmt: skip
    k = np.arange(int(DURATION // PERIOD))
    t = T0 + k * PERIOD
    end = t + 300 * US
    late = k == STARVED_CYCLE
    end[late] = t[late] + end_late_ns
    cycles = pd.DataFrame(
        {"t_ns": t, "engine": "jack", "driver": "driverd", "cycle": k, "quantum_frames": 256, "rate_hz": 48000,
         "period_ns": PERIOD, "delay_ns": 0, "end_ns": end, "xruns_total": (late & xrun).cumsum()}
    )  # fmt: skip
    node_rows = []
    for j, name in enumerate(names):
        signal = t + j * 60 * US
        awake = signal + 10 * US + np.where(late & (j == late_node), woke_late_ns, 0)
        node_rows.append(
            pd.DataFrame(
                {
                    "t_ns": t,
                    "engine": "jack",
                    "node_id": j,
                    "name": name,
                    "signal_ns": signal,
                    "awake_ns": awake,
                    "finish_ns": awake + 50 * US,
                    "status": 0,
                    "xrun": late & xrun,
                }
            )
        )
    xruns = pd.DataFrame(
        {"t_ns": [int(t[late][0] + end_late_ns)] if xrun else [], "engine": "jack",
         "delay_us": [12000.0] if xrun else [], "client": [None] if xrun else [], "source": "callback",
         "text": [None] if xrun else []}
    )  # fmt: skip
    return {
        "engine_clients": clients, "engine_graph": graph, "engine_cycles": cycles,
        "engine_nodes": pd.concat(node_rows, ignore_index=True), "xruns": xruns,
    }  # fmt: skip


def test_a_client_never_seen_finishing_is_the_first_late_link_by_the_times_the_source_read():
    """JACK tables as the source writes them (no late flag: xrun null): client1 woke on time in the starved
    cycle, was signalled again before it finished (its finish stamp then older than its wake-up) and was
    never seen finishing: the engine's first late link, from those times (analyses.engine.node_lateness)."""
    from analyses.incidents import _engine_first_late, _engine_records

    links = _starved()
    names = ["driverd", "client0", "client1", "client2"]
    tables = _engine_tables(names, [500, 600, 601, 602], woke_late_ns=0, end_late_ns=300 * US, xrun=False)
    nodes = tables["engine_nodes"].astype({"finish_ns": "Int64"}).assign(xrun=None)
    start = T0 + STARVED_CYCLE * PERIOD
    row = ((nodes["name"] == "client1") & (nodes["t_ns"] == start)).to_numpy()
    nodes.loc[row, "finish_ns"] = pd.NA
    nodes["resignal_ns"] = nodes["t_ns"] + PERIOD + 2 * 60 * US  # its next signal, in the next cycle
    nodes["finish_at_resignal_ns"] = nodes["finish_ns"].where(~row, start - PERIOD + 300 * US)
    tables["engine_cycles"]["end_ns"] = (
        tables["engine_cycles"]["end_ns"].astype("Int64").mask(tables["engine_cycles"]["t_ns"] == start)
    )
    cap = _capture(links, **{**tables, "engine_nodes": nodes})
    chain = chain_links(cap, select_threads(thread_profiles(cap)))
    first = _engine_first_late(_engine_records(cap), start, start + 12 * MS, chain, rules.IncidentRules())
    assert first is not None and first[:2] == (601, start), first  # client1 is tid 601


@pytest.mark.parametrize("driver_pid", ["client", "server"])
def test_engine_tables_give_the_chain_and_the_late_node(driver_pid):
    """`server`: as JACK records it, the driver is a client of no process (jackd's `system`): its thread
    is the server's, from the source's jackd_pid."""
    links = _starved()
    names = ["driverd", "client0", "client1", "client2"]
    pids = [500 if driver_pid == "client" else None, 600, 601, 602]
    cap = _capture(links, **_engine_tables(names, pids))
    if driver_pid == "server":
        cap = cap.without([], meta={"sources": {**cap.sources, "engine": {"kind": "jack", "jackd_pid": 500}}})
    chain = chain_links(cap, select_threads(thread_profiles(cap))).set_index("tid")
    assert set(chain["source"]) == {"engine"} and chain.loc[602, "upstream"] == (601,)
    assert chain.loc[500, "order"] == 0 and chain.loc[602, "order"] == 3
    _, incidents, members = _analyse(cap)
    assert len(incidents) == 1
    row = incidents.iloc[0]
    assert (row.root_tid, row.root_verdict, row.chain_source) == (500, "runqueue", "engine")
    assert row.root_client == "driverd"  # the engine's name for the root, beside its thread's comm
    assert row.cycle == STARVED_CYCLE and row.xrun and row.xruns == 1
    assert (members.loc[members["tid"] != 500, "incident_verdict"] == "upstream").all()
    x = xrun_rows(cap, incidents)
    assert set(x["kind"]) == {"xrun", "missed deadline"} and (x["incident"] == row.incident).all()
    assert set(x["root_client"]) == {"driverd"}


def test_client_the_engine_woke_late_is_the_root_from_proc_alone():
    """From /proc alone (no switch record), client0 signalled on time by the engine but running 2.5 ms
    later: under the engine's own late share (half the period), past a periodic thread's tolerance; the
    cycle ended past its period (a missed deadline, no xrun). The clients after it only waited (their
    /proc episodes: 8 ms asleep, long enough to be listed). The root is client0, runnable after its
    wake-up, from the engine's stamps (the quiet real graph showed it: a jalv woken 0.95 ms late at
    2.67 ms read `unknown`)."""
    woke = 2500 * US
    links = _graph(client_episodes={j: [Episode("lock", STARVED_CYCLE, 8.0)] for j in (1, 2)})
    names = ["driverd", "client0", "client1", "client2"]
    tables = _engine_tables(
        names, [500, 600, 601, 602], late_node=1, woke_late_ns=woke, end_late_ns=PERIOD + woke, xrun=False
    )
    assert woke < rules.IncidentRules().engine_late_share * PERIOD  # not a late link by the engine's share
    _, incidents, members = _analyse(_capture(links, **tables))
    assert len(incidents) == 1
    row = incidents.iloc[0]
    assert (row.root_tid, row.root_verdict, row.chain_source) == (600, "runqueue", "engine"), row.evidence
    assert row.root_client == "client0"
    assert "engine's own stamps" in row.evidence and "2.5 ms" in row.evidence
    assert (members["incident_verdict"] == "upstream").all()


def test_waits_over_cycles_the_engine_recorded_on_time_are_no_incident():
    """The same /proc episodes (client0 running 2.5 ms after its signal, under the engine's late share;
    the clients after it 8 ms asleep), but the engine recorded every cycle around them, each ended within
    its period, none late to start, no xrun: no late cycle, so no incident; counted, and kept on request
    (quiet_outside=False, `--all`). On a real graph (issue 22's: calf and lsp plugins, ecasound beside)
    such groups were 3 of 12 incidents from eBPF in 13 s, none at a late cycle."""
    woke = 2500 * US
    links = _graph(client_episodes={j: [Episode("lock", STARVED_CYCLE, 8.0)] for j in (1, 2)})
    names = ["driverd", "client0", "client1", "client2"]
    tables = _engine_tables(names, [500, 600, 601, 602], late_node=1, woke_late_ns=woke, end_late_ns=woke, xrun=False)
    cap = _capture(links, **tables)
    episodes, incidents, members = _analyse(cap)
    assert incidents.empty and members.empty
    assert members.attrs["on_time"] == {"incidents": 1, "episodes": 2}
    kept, _ = find_incidents(
        cap, episodes, select_threads(thread_profiles(cap)), interval_ns=capture_interval_ns(cap), quiet_outside=False
    )
    assert kept["root_tid"].tolist() == [600]
    # A cycle that ended past its period (the test above), or a hole in the engine's record around the
    # episodes (the cycles there unknown), keeps the incident.
    cycles = tables["engine_cycles"]
    around = (cycles["cycle"] - STARVED_CYCLE).abs() <= 2
    _, holed, _ = _analyse(_capture(links, **{**tables, "engine_cycles": cycles[~around.to_numpy()]}))
    assert holed["root_tid"].tolist() == [600]


def test_a_group_that_began_after_the_recordings_end_is_no_incident():
    """Episodes that begin after the recording's last tick (the trailer's ended_ns) are the tool's own end
    (its engine sources leaving the graph while the probes still run): no incident, counted, kept on
    request. The same episodes before the end are one incident. On issue 22's PipeWire graph (recorder
    first, eBPF) this was the one incident away from 40 injections, 6 ms after the last tick."""
    episodes_of = {0: [Episode("run", STARVED_CYCLE, 12.0)], 1: [Episode("lock", STARVED_CYCLE, 12.0)]}
    links = _graph(client_episodes=episodes_of)
    at = T0 + STARVED_CYCLE * PERIOD
    cap = _capture(links, ebpf=_by_tid_waker(links))
    cap.trailer["ended_ns"] = at + 60 * MS  # after the group: it stays
    _, kept, _ = _analyse(cap)
    assert kept["root_tid"].tolist() == [600]
    cap.trailer["ended_ns"] = at - PERIOD  # the recording ended a period before the group began
    episodes, incidents, members = _analyse(cap)
    assert incidents.empty and members.empty
    assert members.attrs["after_end"] == {"incidents": 1, "episodes": 2}
    assert members.attrs["on_time"] == {"incidents": 0, "episodes": 0}
    all_kept, _ = find_incidents(
        cap, episodes, select_threads(thread_profiles(cap)), interval_ns=capture_interval_ns(cap), quiet_outside=False
    )
    assert all_kept["root_tid"].tolist() == [600]


def test_a_group_that_ended_while_the_engine_source_attached_is_no_incident():
    """A group of episodes that ended between an engine source's attach and the engine's first cycle
    record after it (at most a period) is the engine answering the tool (rules.ended_at_an_attach: on
    issue 22's PipeWire graph, the data loop woken by the daemon's main thread 0.42 ms after catch-load's
    profiler bind): no incident, counted. The engine's records begin at the attach, as a source writes them."""
    links = _starved()
    names = ["driverd", "client0", "client1", "client2"]
    tables = _engine_tables(names, [500, 600, 601, 602])
    _, before, grouped = _analyse(_capture(links, **tables))
    assert len(before) == 1
    end = int(before.iloc[0].end_ns)

    def attached_at(attach_ns, first_record_ns=None):
        cycles, nodes = tables["engine_cycles"], tables["engine_nodes"]
        first = attach_ns if first_record_ns is None else first_record_ns
        kept = {"engine_cycles": cycles[cycles["t_ns"] >= first], "engine_nodes": nodes[nodes["t_ns"] >= first]}
        if first_record_ns is not None:  # one record at first_record_ns, off the period grid
            kept["engine_cycles"] = pd.concat([cycles.iloc[:1].assign(t_ns=first_record_ns), kept["engine_cycles"]])
        cap = _capture(links, **{**tables, **kept})
        engines = {"jack": {"kind": "jack", "jackd_pid": 500, "attachments": [[attach_ns, None]]}}
        return _analyse(cap.without([], meta={"sources": {**cap.sources, "engines": engines}}))

    _, incidents, members = attached_at(end - 1 * MS)  # the group's waits ended 1 ms after the attach
    assert incidents.empty and members.attrs["at_attach"] == {"incidents": 1, "episodes": len(grouped)}
    _, kept, _ = attached_at(end + 100 * US)  # attached after the group ended: the engine's own
    assert kept["root_tid"].tolist() == [500]
    _, kept, _ = attached_at(end - 1 * MS, first_record_ns=end - 500 * US)  # a cycle on record before it ended
    assert kept["root_tid"].tolist() == [500]
    _, kept, members = attached_at(end - PERIOD - 1 * MS, first_record_ns=end + 20 * MS)  # over a period on
    assert kept["root_tid"].tolist() == [500] and members.attrs["at_attach"]["incidents"] == 0


# ---------------------------------------------------------------------------------------------------
# Root kinds


@pytest.mark.parametrize("cause", ["run", "runqueue", "io", "fault"])
def test_root_kind_in_a_client_with_downstream_upstream(cause):
    """A client (client0) late for its own reason: it is the root; the clients after it only waited."""
    links = _graph(
        client_episodes={0: [Episode(cause, STARVED_CYCLE, 12.0)], 1: [Episode("lock", STARVED_CYCLE, 12.0)],
                         2: [Episode("lock", STARVED_CYCLE, 12.0)]}
    )  # fmt: skip
    cap = _capture(links, ebpf=_by_tid_waker(links))
    _, incidents, members = _analyse(cap)
    assert len(incidents) == 1
    row = incidents.iloc[0]
    assert (row.root_tid, row.root_verdict) == (600, cause)
    down = members[members["tid"].isin([601, 602])]
    assert len(down) == 2 and (down["incident_verdict"] == "upstream").all()


def test_lock_outside_the_chain_stays_lock():
    """client1's wait ended by a thread outside the graph (a mutex holder): lock, the root; client2 only waited."""
    at = T0 + STARVED_CYCLE * PERIOD
    holder = Waker(at, at + 20 * MS, 900, "holder")
    links = _graph(
        client_episodes={1: [Episode("lock", STARVED_CYCLE, 12.0)], 2: [Episode("lock", STARVED_CYCLE, 12.0)]}
    )
    tables = {}
    for k, tl in enumerate(links):
        wakers = [] if k == 0 else [Waker(T0, T0 + 2 * DURATION, links[k - 1].tid, links[k - 1].comm)]
        if tl.tid == 601:
            wakers = [holder, *wakers]
        for name, frame in synth.ebpf_tables([tl], wakers=wakers).items():
            tables.setdefault(name, []).append(frame)
    ebpf = {
        n: pd.concat(f, ignore_index=True).sort_values("t_ns", kind="stable").reset_index(drop=True)
        for n, f in tables.items()
    }
    _, incidents, members = _analyse(_capture(links, ebpf=ebpf))
    assert len(incidents) == 1
    row = incidents.iloc[0]
    assert (row.root_tid, row.root_verdict) == (601, "lock") and "holder" in row.evidence
    assert members.set_index("tid").loc[602, "incident_verdict"] == "upstream"


def test_clients_feeding_the_drivers_playback_are_not_its_upstream():
    """A real JACK graph: the clients' outputs connected to the driver's playback ports (system:playback_1).
    The driver still starts each cycle on its clock, so a driver that woke late, the only thread seen
    stalled (the clients slept through the skipped cycles), is the root, not the client feeding its
    playback (seen on jackd with two jalv chains and fluidsynth: the root was a jalv, 'no episode')."""
    links = _graph(driver_episodes=[Episode("lock", STARVED_CYCLE, 9.0)])
    names = ["driverd", "client0", "client1", "client2"]
    tables = _engine_tables(names, [500, 600, 601, 602], late_node=0, end_late_ns=300 * US, xrun=False)
    playback = pd.DataFrame(
        {"t_ns": T0, "engine": "jack", "event": "snapshot", "src_client": ["client2"], "src_port": "out",
         "dst_client": ["driverd"], "dst_port": "playback_1"}
    )  # fmt: skip
    tables["engine_graph"] = pd.concat([tables["engine_graph"], playback], ignore_index=True)
    cap = _capture(links, **tables)
    chain = chain_links(cap, select_threads(thread_profiles(cap))).set_index("tid")
    assert chain.loc[500, "upstream"] == () and chain.loc[600, "upstream"] == (500,)
    _, incidents, members = _analyse(cap)
    assert len(incidents) == 1
    row = incidents.iloc[0]
    assert (row.root_tid, row.root_verdict) == (500, "late wake-up"), row.evidence
    assert members.loc[members["tid"] == 500, "role"].tolist() == ["root"]


def test_late_wakeup_of_the_driver_without_an_episode_of_its_own():
    """The driver's timer fired 9 ms late (a sleep ended by an interrupt: no episode of its own); every
    client waited: the root is the driver, `late wake-up`, measured from its switch-ins."""
    links = _graph(
        driver_episodes=[Episode("lock", STARVED_CYCLE, 9.0)],
        client_episodes={j: [Episode("lock", STARVED_CYCLE, 9.0)] for j in range(3)},
    )
    cap = _capture(links, ebpf=_by_tid_waker(links))
    _, incidents, members = _analyse(cap)
    assert len(incidents) == 1
    row = incidents.iloc[0]
    assert (row.root_tid, row.root_verdict) == (500, "late wake-up") and "late" in row.evidence
    assert 500 not in set(members["tid"]) and (members["incident_verdict"] == "upstream").all()


def test_threads_of_no_engine_are_incidents_of_their_own():
    """One periodic thread (the lab in miniature): each episode is one incident, its verdict unchanged."""
    cap = synth.audio_capture([Episode("run", 100, 15.0), Episode("lock", 300, 15.0)])
    episodes, incidents, members = _analyse(cap)
    assert len(incidents) == len(episodes) == 2
    assert list(incidents["root_verdict"]) == ["run", "lock"] and incidents["engine"].isna().all()
    assert (members["role"] == "root").all()


# ---------------------------------------------------------------------------------------------------
# The lab captures: each episode one incident with the right root verdict


@pytest.mark.parametrize("name", ["lab-episodes.ssf", "lab-ebpf.ssf"])
def test_lab_episode_is_one_incident_with_its_verdict(name):
    cap = forensics.load(REPO / "captures" / name)
    _, incidents, _ = _analyse(cap)
    audio = cap.cycles["tid"].iloc[0]
    for truth in cap.truth.itertuples(index=False):
        hit = incidents[(incidents["start_ns"] < truth.end_ns) & (incidents["end_ns"] > truth.start_ns)]
        hit = hit[hit["root_tid"] == audio]
        assert len(hit) == 1, (truth.cause, hit)
        assert hit["root_verdict"].iloc[0] == truth.cause
    xr = xrun_rows(cap, incidents)
    assert len(xr) and xr["incident"].notna().all(), "every missed lab deadline belongs to an incident"


# ---------------------------------------------------------------------------------------------------
# A periodic thread is judged against its own period


def test_wake_limit_scales_with_the_period():
    limit = rules.period_limit_ns(np.array([PERIOD, 100 * MS, np.nan]), 0.5 * MS)
    assert limit[0] == PERIOD + 0.5 * MS  # audio periods keep the fixed margin
    assert limit[1] == 105 * MS and np.isnan(limit[2])


def test_an_engine_thread_woken_twice_a_cycle_takes_the_engines_period():
    """PipeWire's data loop is switched in twice a cycle (its timer, then its client's finish): measured,
    half the quantum; with the engine's cycles in the capture its period is the engine's."""
    driver = Timeline(tid=500, comm="data-loop.0", pid=500, policy=1, rtprio=88, cpu=0)
    synth.periodic(driver, t0=T0, duration_ns=DURATION, period_ns=PERIOD // 2, work_ns=50 * US)
    other = Timeline(tid=700, comm="other", pid=700, policy=1, rtprio=5, cpu=1)
    synth.periodic(other, t0=T0, duration_ns=DURATION, period_ns=PERIOD // 2, work_ns=50 * US)
    k = np.arange(int(DURATION // PERIOD))
    cycles = pd.DataFrame(
        {"t_ns": T0 + k * PERIOD, "engine": "pipewire", "driver": "Dummy-Driver", "cycle": k, "quantum_frames": 256,
         "rate_hz": 48000, "period_ns": PERIOD, "delay_ns": 0, "end_ns": T0 + k * PERIOD + 300 * US,
         "xruns_total": 0}
    )  # fmt: skip
    clients = pd.DataFrame(
        {"t_ns": [T0], "engine": "pipewire", "event": "present", "name": ["Dummy-Driver"], "pid": [500],
         "node_id": [27]}
    )  # fmt: skip
    measured = thread_profiles(_capture([driver, other])).set_index("tid")["period_ns"]
    assert abs(measured[500] - PERIOD / 2) < 0.01 * PERIOD
    with_engine = thread_profiles(_capture([driver, other], engine_cycles=cycles, engine_clients=clients))
    period = with_engine.set_index("tid")["period_ns"]
    assert period[500] == PERIOD  # the engine's process
    assert abs(period[700] - PERIOD / 2) < 0.01 * PERIOD  # no engine process: as measured


JACK_PERIOD = 2_666_667  # 128 frames at 48 kHz
PW_PERIOD = 5_333_333  # 256 frames at 48 kHz


def _cycles(engine: str, period: int, every: int) -> pd.DataFrame:
    """One engine's cycles over the capture, every `every`-th one recorded (JACK's are polled)."""
    k = np.arange(0, int(DURATION // period), every)
    return pd.DataFrame(
        {"t_ns": T0 + k * period, "engine": engine, "driver": "system" if engine == "jack" else "Dummy-Driver",
         "cycle": k, "quantum_frames": 128 if engine == "jack" else 256, "rate_hz": 48000, "period_ns": period,
         "delay_ns": 0, "end_ns": T0 + k * period + 300 * US, "xruns_total": 0}
    )  # fmt: skip


@pytest.mark.parametrize("jack_every", [1, 3], ids=["jack-every-cycle", "jack-every-third-cycle"])
def test_each_engine_gives_its_own_period_to_its_own_threads(jack_every):
    """JACK at 2.667 ms and PipeWire at 5.333 ms in one capture: jackd's thread (its pid from the JACK
    source's jackd_pid) woken twice a JACK cycle takes JACK's period, PipeWire's data loop woken twice a
    quantum takes PipeWire's, a JACK client at JACK's period keeps its own. One median over both engines'
    cycles is JACK's when it has the most rows (the data loop kept at 2.667 ms) and PipeWire's when
    JACK's poller saw a third of its cycles (jackd's thread and the JACK client given 5.333 ms)."""

    def thread(tid, comm, period, cpu):
        tl = Timeline(tid=tid, comm=comm, pid=tid, policy=1, rtprio=80, cpu=cpu)
        synth.periodic(tl, t0=T0, duration_ns=DURATION, period_ns=period, work_ns=50 * US, seed=tid)
        return tl

    jackd = thread(400, "jackd", JACK_PERIOD // 2, 0)
    client = thread(410, "jack-client", JACK_PERIOD, 1)
    data_loop = thread(500, "data-loop.0", PW_PERIOD // 2, 0)
    other = thread(700, "other", PW_PERIOD // 2, 1)
    links = [jackd, client, data_loop, other]
    cycles = pd.concat(
        [_cycles("jack", JACK_PERIOD, jack_every), _cycles("pipewire", PW_PERIOD, 1)], ignore_index=True
    ).sort_values("t_ns", kind="stable")
    clients = pd.DataFrame(
        {"t_ns": T0, "engine": ["jack", "pipewire"], "event": "present", "name": ["jack-client", "Dummy-Driver"],
         "pid": [410, 500], "node_id": [None, 27]}
    )  # fmt: skip
    engines = {
        "jack": {"kind": "jack", "server": "default", "jackd_pid": 400, "clock_offset_ns": 0},
        "pipewire": {"kind": "pipewire", "server": "pipewire-0", "clock_offset_ns": 0},
    }
    cap = _capture(links, engine_cycles=cycles, engine_clients=clients)
    cap = cap.without([], meta={"sources": {**cap.sources, "engines": engines}})
    measured = thread_profiles(_capture(links)).set_index("tid")["period_ns"]
    for tid, period in [(400, JACK_PERIOD / 2), (410, JACK_PERIOD), (500, PW_PERIOD / 2), (700, PW_PERIOD / 2)]:
        assert abs(measured[tid] - period) < 0.01 * period, (tid, measured[tid])
    period = thread_profiles(cap).set_index("tid")["period_ns"]
    assert period[400] == JACK_PERIOD  # jackd's thread: JACK's cycle
    assert period[410] == measured[410]  # at JACK's period already: as measured
    assert period[500] == PW_PERIOD  # PipeWire's data loop: PipeWire's cycle
    assert period[700] == measured[700]  # no engine's process: as measured


def test_a_process_client_of_both_engines_takes_the_shorter_period_that_fits():
    """A process in both engines' client tables (PipeWire's JACK layer): a thread that agrees with either
    engine's period keeps its own; one that fits both takes the shorter (fewer wake-ups a cycle); one
    that fits only PipeWire's takes PipeWire's."""
    from analyses.threads import engine_periods

    cycles = pd.concat([_cycles("jack", JACK_PERIOD, 1), _cycles("pipewire", PW_PERIOD, 1)], ignore_index=True)
    clients = pd.DataFrame(
        {"t_ns": T0, "engine": ["jack", "pipewire"], "event": "present", "name": "both", "pid": 800,
         "node_id": [None, 31]}
    )  # fmt: skip
    cap = forensics.Capture.from_frames(meta=synth.meta(), engine_cycles=cycles, engine_clients=clients)
    measured = [1_400_000.0, 2_700_000.0, 4_000_000.0, 5_300_000.0]
    profiles = pd.DataFrame({"tid": [801, 802, 803, 804], "pid": 800, "periodic": True, "period_ns": measured})
    period = engine_periods(cap, profiles).set_index("tid")["period_ns"]
    assert period.to_dict() == {801: JACK_PERIOD, 802: 2_700_000.0, 803: PW_PERIOD, 804: 5_300_000.0}


def _system(rows: list[tuple[int, int, int]]) -> pd.DataFrame:
    """A system table of (t_ns, cpu, steal ticks) reads: machine row -1 and per-CPU rows."""
    return pd.DataFrame([{"t_ns": t, "cpu": cpu, "steal": steal, "irq": 0, "softirq": 0} for t, cpu, steal in rows])


def test_machine_time_that_covers_a_wait_is_one_cpus_certain_ticks() -> None:
    """A thread waits on one CPU at a time, and a growth of k ticks is at least k - 1 whole ones: the
    machine certainly held one CPU for the largest per-CPU (k - 1) ticks, never for the machine total."""
    from analyses.incidents import _machine_covers
    from analyses.machine import held_one_cpu_ns

    tick = 10 * MS
    t0, t1 = T0, T0 + 100 * MS
    # Two ticks of steal in the 100 ms around a wait, one per CPU: nothing certain on either CPU.
    split = _system([(t0, -1, 0), (t0, 0, 0), (t0, 1, 0), (t1, -1, 2), (t1, 0, 1), (t1, 1, 1)])
    assert held_one_cpu_ns(split, t0 + MS, t1 - MS, tick) == 0
    # Three ticks on CPU 1: at least 20 ms certain there.
    one_cpu = _system([(t0, -1, 0), (t0, 0, 0), (t0, 1, 0), (t1, -1, 3), (t1, 0, 0), (t1, 1, 3)])
    assert held_one_cpu_ns(one_cpu, t0 + MS, t1 - MS, tick) == 20 * MS
    # A capture without per-CPU rows: the machine row's ticks, the same k - 1 bound.
    machine_only = one_cpu[one_cpu["cpu"] == -1]
    assert held_one_cpu_ns(machine_only, t0 + MS, t1 - MS, tick) == 20 * MS

    def covers(system: pd.DataFrame, stall_ms: float) -> bool:
        cap = forensics.Capture.from_frames({"host": {"clk_tck": 100}}, {}, system=system)
        row = pd.Series({"start_ns": t0 + MS, "end_ns": t1 - MS, "stall_ns": stall_ms * MS})
        return _machine_covers(cap, row, 0)

    assert not covers(split, 16)  # a 16 ms lock wait stays a lock wait
    assert covers(one_cpu, 16) and not covers(one_cpu, 25)


def test_stalls_and_xruns_number_incidents_alike_with_a_real_time_thread_outside_the_graph():
    """A FIFO 50 thread of no engine client (a plugin's worker) ran long before the engine's starved
    cycle: real-time, so an incident of its own (1) in `forensics stalls` as in `forensics xruns`, and
    the xrun is incident 2 in both. Was: stalls handed the analysis policy labels ("FIFO 50"), read as not
    real-time, hid the worker and numbered the starvation 1 while xruns numbered it 2."""
    from forensics.views.stalls import stalls_report

    links = _starved()
    worker = Timeline(tid=700, comm="worker", pid=700, policy=1, rtprio=50, cpu=1)
    synth.periodic(worker, t0=T0, duration_ns=DURATION, period_ns=10 * MS, episodes=[Episode("run", 50, 15.0)])
    names = ["driverd", "client0", "client1", "client2"]
    tables = _engine_tables(names, [500, 600, 601, 602])
    # The worker's run made the engine's cycle at 0.5 s miss its deadline too (no xrun reported): a late
    # cycle, so an incident (one over cycles the engine recorded on time would be none).
    cycles = tables["engine_cycles"]
    missed = (cycles["t_ns"] - (T0 + 500 * MS)).abs().idxmin()
    cycles.loc[missed, "end_ns"] = cycles.loc[missed, "t_ns"] + PERIOD + MS
    cap = _capture([*links, worker], **tables)
    _, incidents, _ = _analyse(cap)
    xruns = xrun_rows(cap, incidents)
    report = stalls_report(cap, "synthetic", incidents=True, for_json=True)
    shown = next(s.frame for s in report.sections if s.name == "incidents")
    assert shown["root_tid"].tolist() == incidents["root_tid"].tolist() == [700, 500]
    starved = xruns.loc[xruns["kind"] == "xrun", "incident"].tolist()
    assert starved == [2] and shown.set_index("incident").loc[2, "root_tid"] == 500


FINISH = 1 * MS  # the client's finish wakes the data loop again this long after the cycle's start


def _pipewire_graph(starved_ms: float = 12.0) -> tuple[list[Timeline], dict[str, pd.DataFrame]]:
    """PipeWire in miniature, as the real causes test records it: the daemon's data loop (tid 500 of pid
    499, FIFO 88) runs the driver: its timer wakes it at each cycle's start, it signals the client (tid
    600, FIFO 88), and the client's finish wakes it again FINISH later (two switch-ins a cycle, 1 ms apart:
    on the 2 ms read grid one cycle in three puts them in two windows, so its windows read 4.0 ms, as
    4.035 ms was read on a real recording). In STARVED_CYCLE a FIFO hog above them keeps the
    data loop runnable `starved_ms` from its timer; the client sleeps that long and is woken by it late.
    The two cycles due meanwhile never start. Returns the timelines and their eBPF tables."""
    loop = Timeline(tid=500, comm="pipewire", pid=499, policy=1, rtprio=88, cpu=0)
    client = Timeline(tid=600, comm="python", pid=600, policy=1, rtprio=88, cpu=1)
    loop_wakers, client_wakers = [], [Waker(T0, T0 + 2 * DURATION, 500, "pipewire")]
    late = int(starved_ms * MS)
    for k in range(int(DURATION // PERIOD)):
        if STARVED_CYCLE < k < STARVED_CYCLE + 3:
            continue  # due while the driver was starved: never started
        start = T0 + k * PERIOD
        delay = late if k == STARVED_CYCLE else 15 * US
        t = loop.add(loop.ends[-1] if loop.ends else start, start, synth.SLEEP)
        t = loop.add(t, start + delay, synth.RUNNABLE)  # its timer fired: runnable (starved: the hog ran)
        signal = loop.add(t, t + 60 * US, synth.USER)
        c = client.add(client.ends[-1] if client.ends else T0, signal, synth.SLEEP)  # woken by the data loop
        c = client.add(c, c + 10 * US, synth.RUNNABLE)
        finish = client.add(c, start + delay + FINISH - 20 * US, synth.USER)
        loop.add(signal, finish + 5 * US, synth.SLEEP)
        loop_wakers.append(Waker(finish + 5 * US, finish + 5 * US, 600, "python"))  # the client's finish
        loop.add(finish + 5 * US, finish + 35 * US, synth.USER)
    loop.add(loop.ends[-1], T0 + DURATION + PERIOD, synth.SLEEP)
    client.add(client.ends[-1], T0 + DURATION + PERIOD, synth.SLEEP)
    tables: dict[str, list[pd.DataFrame]] = {}
    for tl, wakers in ((loop, loop_wakers), (client, client_wakers)):
        for name, frame in synth.ebpf_tables([tl], wakers=wakers).items():
            tables.setdefault(name, []).append(frame)
    ebpf = {
        n: pd.concat(f, ignore_index=True).sort_values("t_ns", kind="stable").reset_index(drop=True)
        for n, f in tables.items()
    }
    return [loop, client], ebpf


def _pipewire_tables() -> dict[str, pd.DataFrame]:
    """The PipeWire source's tables of _pipewire_graph: the Dummy-Driver in the daemon (pid 499), the client
    `cue` (pid 600) linked to itself, the cycles at the quantum."""
    clients = pd.DataFrame(
        {"t_ns": T0, "engine": "pipewire", "event": "present", "name": ["Dummy-Driver", "cue"], "pid": [499, 600],
         "node_id": [27, 31]}
    )  # fmt: skip
    graph = pd.DataFrame(
        {"t_ns": [T0], "engine": "pipewire", "event": "snapshot", "src_client": ["cue"], "src_port": ["out"],
         "dst_client": ["cue"], "dst_port": ["in"]}
    )  # fmt: skip
    k = np.array([k for k in range(int(DURATION // PERIOD)) if not STARVED_CYCLE < k < STARVED_CYCLE + 3])
    t = T0 + k * PERIOD + np.where(k == STARVED_CYCLE, 12 * MS, 0)
    cycles = pd.DataFrame(
        {"t_ns": t, "engine": "pipewire", "driver": "Dummy-Driver", "cycle": k, "quantum_frames": 256,
         "rate_hz": 48000, "period_ns": PERIOD, "delay_ns": 0, "end_ns": t + FINISH, "xruns_total": 0}
    )  # fmt: skip
    return {"engine_clients": clients, "engine_graph": graph, "engine_cycles": cycles}


def test_pipewire_data_loop_woken_twice_a_cycle_within_a_window_is_the_driver_of_the_chain():
    """The eBPF PipeWire causes test read all 10 hog starvations of the data loop as `lock` rooted at the
    client (the data loop, measured by its windows at 4.035 ms for a 5.333 ms quantum, was no link: the
    client's wake-up by it read as a lock held outside the chain). Its two wake-ups a cycle fall in one
    sampling window or two, so its measured period lies between a half and one quantum, no k-th of it:
    with the engine's cycles it takes the engine's period, is the chain's driver, and the starvation is
    rooted at it, runqueue; the client only waited for it."""
    links, ebpf = _pipewire_graph()
    measured = thread_profiles(_capture(links)).set_index("tid")["period_ns"]
    assert abs(measured[500] - 4 * MS) < 0.01 * PERIOD, measured[500]  # a blend of one and two wake-ups a cycle
    cap = _capture(links, ebpf=ebpf, **_pipewire_tables())
    chain = chain_links(cap, select_threads(thread_profiles(cap))).set_index("tid")
    assert 500 in chain.index, "the data loop is no link: its client's wait for it reads as a lock"
    assert bool(chain.loc[500, "driver"]) and chain.loc[600, "upstream"] == (500,)
    _, incidents, members = _analyse(cap)
    assert len(incidents) == 1, incidents[["root_comm", "root_verdict", "evidence"]]
    row = incidents.iloc[0]
    assert (row.root_tid, row.root_verdict, row.chain_source) == (500, "runqueue", "engine"), row.evidence
    client = members[members["tid"] == 600]
    assert len(client) and (client["incident_verdict"] == "upstream").all()


# Cycles a loaded machine's driver skipped, per 200 ms block of the capture (analyses.threads.BLOCK_NS), in
# turn: the switch-ins per block of the data loop and its client wander by 0-7 cycles,
# more than the periodicity test's steadiness allows, while their mean rates stay those of the cycle.
LOADED_SKIPS = (1, 4, 7, 2, 5, 0, 3, 6)


def _loaded_pipewire_graph(starved_ms: float = 12.0) -> tuple[list[Timeline], dict[str, pd.DataFrame], np.ndarray]:
    """_pipewire_graph on a loaded machine, as the /proc PipeWire causes test recorded it beside a process
    using 90 % of a core and 4-37 % steal: the driver skips LOADED_SKIPS cycles per block (the data loop 46 %
    and the client 49 % steady blocks there, no period: no link, every episode an incident of its own), and
    the daemon's SCHED_OTHER main loop (tid 499, periodic at 10 ms here) sleeps `starved_ms` past a wake-up
    over the starvation (the real one, read periodic at 85 ms, slept 100-150 ms as usual: 172 `lock`
    incidents, 7 of 8 hog starvations split in two). Returns the timelines, their eBPF tables and the
    cycles that started."""
    loop = Timeline(tid=500, comm="pipewire", pid=499, policy=1, rtprio=88, cpu=0)
    client = Timeline(tid=600, comm="python", pid=600, policy=1, rtprio=88, cpu=1)
    late = int(starved_ms * MS)
    started = []
    per_block = round(200 * MS / PERIOD)
    for k in range(int(DURATION // PERIOD)):
        block, place = divmod(k, per_block)
        if STARVED_CYCLE < k < STARVED_CYCLE + 3 or place < LOADED_SKIPS[block % len(LOADED_SKIPS)]:
            continue  # due while the driver was starved, or skipped on the loaded machine: never started
        started.append(k)
        start = T0 + k * PERIOD
        delay = late if k == STARVED_CYCLE else 15 * US
        t = loop.add(loop.ends[-1] if loop.ends else start, start, synth.SLEEP)
        t = loop.add(t, start + delay, synth.RUNNABLE)
        signal = loop.add(t, t + 60 * US, synth.USER)
        c = client.add(client.ends[-1] if client.ends else T0, signal, synth.SLEEP)
        c = client.add(c, c + 10 * US, synth.RUNNABLE)
        finish = client.add(c, start + delay + FINISH - 20 * US, synth.USER)
        loop.add(signal, finish + 5 * US, synth.SLEEP)
        loop.add(finish + 5 * US, finish + 35 * US, synth.USER)
    loop.add(loop.ends[-1], T0 + DURATION + PERIOD, synth.SLEEP)
    client.add(client.ends[-1], T0 + DURATION + PERIOD, synth.SLEEP)
    main = Timeline(tid=499, comm="pipewire", pid=499, policy=0, rtprio=0, cpu=1)
    main_period = 10 * MS
    synth.periodic(
        main, t0=T0, duration_ns=DURATION, period_ns=main_period, work_ns=100 * US,
        episodes=[synth.Episode("lock", (T0 + STARVED_CYCLE * PERIOD - T0) // main_period, starved_ms + 10)],
    )  # fmt: skip
    links = [loop, client, main]
    tables: dict[str, list[pd.DataFrame]] = {}
    for tl in links:
        for name, frame in synth.ebpf_tables([tl]).items():
            tables.setdefault(name, []).append(frame)
    ebpf = {
        n: pd.concat(f, ignore_index=True).sort_values("t_ns", kind="stable").reset_index(drop=True)
        for n, f in tables.items()
    }
    return links, ebpf, np.array(started)


def test_a_loaded_machines_data_loop_and_client_without_a_period_are_links_by_their_rate():
    """On a loaded machine the /proc periodicity test found no period for PipeWire's data loop or its client
    (their switch-ins per block wander with the cycles the driver skips): no thread was a link, and the
    daemon's SCHED_OTHER main loop, whose episode over the hog starvation is no incident on an idle
    machine (outside the graph, not real-time), made each starvation two incidents. Their mean switch-in
    rates are the cycle's (rules.runs_engine_cycle_by_rate): they are the chain, the starvation is one
    incident rooted at the data loop, and the main loop's episode is hidden."""
    links, _, started = _loaded_pipewire_graph()
    tables = _pipewire_tables()
    cycles = tables["engine_cycles"]
    tables["engine_cycles"] = cycles[cycles["cycle"].isin(started)].reset_index(drop=True)
    # The daemon runs its cycle in the real-time data loop (no period, the cycle's rate): a SCHED_OTHER
    # request thread beside it at the cycle's rate is neither watched nor a link.
    requests = _requests_thread(497, 499, TIMESHARED_EXTRA)
    cap = _capture([*links, requests], **tables)
    profiles = thread_profiles(cap).set_index("tid")
    assert not profiles.loc[500, "periodic"] and not profiles.loc[600, "periodic"], profiles["steady_fraction"]
    assert profiles.loc[499, "periodic"], "the main loop keeps a period of its own"
    assert not profiles.loc[497, "periodic"] and profiles.loc[497, "steady_fraction"] < 0.5
    assert 497 not in set(select_threads(thread_profiles(cap))["tid"].tolist())
    episodes, incidents, members = _analyse(cap)
    main = episodes[episodes["tid"] == 499]
    assert len(main) == 1 and main["verdict"].iloc[0] == "lock", episodes[["tid", "verdict", "start_ns"]]
    chain = chain_links(cap, select_threads(thread_profiles(cap))).set_index("tid")
    assert {500, 600} <= set(chain.index) and not {499, 497} & set(chain.index), chain
    assert bool(chain.loc[500, "driver"])
    assert len(incidents) == 1, incidents[["root_tid", "root_verdict", "evidence"]]
    row = incidents.iloc[0]
    assert (row.root_tid, row.root_verdict, row.chain_source) == (500, "runqueue", "engine"), row.evidence
    assert members.attrs["hidden"]["episodes"] == 1 and 499 not in set(members["tid"])


def _requests_thread(tid: int, pid: int, extra: tuple[int, ...]) -> Timeline:
    """A SCHED_OTHER thread beside an engine's cycle thread in its process, woken by requests once a cycle and
    twice in the first `extra[block]` cycles of each 200 ms block: irregular (no period), at the cycle's
    mean rate (jackd --no-realtime's request thread: 158-236 switch-ins a second through xruns)."""
    requests = Timeline(tid=tid, comm="requests", pid=pid, policy=0, rtprio=0, cpu=1)
    per_block = round(200 * MS / PERIOD)
    for k in range(int(DURATION // PERIOD)):
        block, place = divmod(k, per_block)
        for at in (1 * MS, 3 * MS)[: 2 if place < extra[block % len(extra)] else 1]:
            t = requests.add(requests.ends[-1] if requests.ends else T0, T0 + k * PERIOD + at, synth.SLEEP)
            requests.add(t, t + 20 * US, synth.USER)
    requests.add(requests.ends[-1], T0 + DURATION + PERIOD, synth.SLEEP)
    return requests


# Extra wake-ups of a time-shared client per 200 ms block, in turn (its other threads' requests, a wait for a
# CPU split in two): its switch-ins per block wander, as a jackd --no-realtime graph's clients' did beside
# three CPU hogs (revA 31 %, fluidsynth 9 % steady blocks), while its mean rate stays the cycle's.
TIMESHARED_EXTRA = (0, 9, 26, 4, 17, 33, 2, 12)
TIMESHARED_WAIT_MS = 5.0  # the client's wait for a CPU in the late cycle: it ends past the period


def _timeshared_graph() -> tuple[list[Timeline], dict[str, pd.DataFrame]]:
    """PipeWire's data loop (500 in the daemon, 499) and a SCHED_OTHER client (600) whose switch-ins per block
    wander (TIMESHARED_EXTRA), the client runnable TIMESHARED_WAIT_MS without a CPU in STARVED_CYCLE, a
    request thread (498) beside the data loop; the engine's tables."""
    loop = Timeline(tid=500, comm="pipewire", pid=499, policy=0, rtprio=0, cpu=0)
    client = Timeline(tid=600, comm="python", pid=600, policy=0, rtprio=0, cpu=1)
    per_block = round(200 * MS / PERIOD)
    wait = int(TIMESHARED_WAIT_MS * MS)
    for k in range(int(DURATION // PERIOD)):
        start = T0 + k * PERIOD
        t = loop.add(loop.ends[-1] if loop.ends else T0, max(start, loop.ends[-1] if loop.ends else T0), synth.SLEEP)
        t = loop.add(t, t + 15 * US, synth.RUNNABLE)
        signal = loop.add(t, t + 60 * US, synth.USER)
        c = client.add(client.ends[-1] if client.ends else T0, signal, synth.SLEEP)
        c = client.add(c, c + (wait if k == STARVED_CYCLE else 10 * US), synth.RUNNABLE)
        finish = client.add(c, c + FINISH - 100 * US, synth.USER)
        block, place = divmod(k, per_block)
        if place < TIMESHARED_EXTRA[block % len(TIMESHARED_EXTRA)]:  # a second wake-up in this cycle
            c = client.add(finish, finish + 300 * US, synth.SLEEP)
            finish = client.add(c, c + 50 * US, synth.USER)
        loop.add(signal, finish + 5 * US, synth.SLEEP)
        loop.add(finish + 5 * US, finish + 35 * US, synth.USER)
    loop.add(loop.ends[-1], T0 + DURATION + PERIOD, synth.SLEEP)
    client.add(client.ends[-1], T0 + DURATION + PERIOD, synth.SLEEP)
    # The process runs its cycle in the driver's thread: a request thread beside it is no link.
    requests = _requests_thread(498, 499, TIMESHARED_EXTRA)
    tables = _pipewire_tables()
    k = np.arange(int(DURATION // PERIOD))
    start = T0 + k * PERIOD
    tables["engine_cycles"] = tables["engine_cycles"].iloc[0:0].reindex(range(len(k))).assign(
        t_ns=start, engine="pipewire", driver="Dummy-Driver", cycle=k, quantum_frames=256, rate_hz=48000,
        period_ns=PERIOD, delay_ns=0, end_ns=start + FINISH + np.where(k == STARVED_CYCLE, wait, 0), xruns_total=0,
    )  # fmt: skip
    return [loop, client, requests], tables


def test_a_timeshared_client_without_a_period_is_watched_and_its_wait_for_a_cpu_is_the_root():
    """An engine without real-time priority (jackd --no-realtime; no rtprio for its user): on a busy machine its
    clients' switch-ins per block wander and /proc finds them no period, so they were watched by nobody, their
    waits for a CPU were no episodes, and the late cycles they made were rooted at an `unknown` driver (79 of
    189 xruns of such a graph). Their mean rate is the cycle's: they take the engine's period, are watched,
    and the cycle one of them ended late, runnable without a CPU, is rooted at it."""
    timelines, tables = _timeshared_graph()
    cap = _capture(timelines, **tables)
    profiles = thread_profiles(cap).set_index("tid")
    assert (profiles.loc[[600, 498], "steady_fraction"] < 0.5).all(), "they must have no period of their own"
    both = profiles.loc[[600, 498]]
    assert rules.runs_engine_cycle_by_rate(both["wakeups_per_s"].to_numpy(), PERIOD, both["wall_ns"].to_numpy()).all()
    watched = set(select_threads(thread_profiles(cap))["tid"].tolist())
    assert 600 in watched, "the client is watched"
    assert 498 not in watched, "the driver's process runs its cycle in the driver's thread"
    _, incidents, _ = _analyse(cap)
    assert len(incidents) == 1, incidents[["root_comm", "root_verdict", "evidence"]]
    row = incidents.iloc[0]
    assert (row.root_tid, row.root_verdict) == (600, "runqueue"), row.evidence


def test_a_thread_busy_at_the_start_and_then_asleep_does_not_run_the_cycle_by_its_mean_rate():
    """catch-load started before jackd --no-realtime records the server's request thread busy while the clients
    register (4146 switch-ins, all but 7 in its first 3 s) and asleep after: by its mean rate (274 a second,
    3.2 a cycle) it was switched in most of its process and taken for the cycle's thread over the one running
    it, and the driver's late cycles were rooted at a thread asleep through them (a recorded MIDI graph with
    two parallel chains). It was switched in in a fifth of its blocks: no cycle is run so
    (rules.ENGINE_RATE_MIN_WOKEN_BLOCKS); the client's cycle thread is still the link and the root."""
    timelines, tables = _timeshared_graph()
    busy = Timeline(tid=601, comm="requests", pid=600, policy=0, rtprio=0, cpu=0)
    t = T0
    while t < T0 + DURATION // 5:  # ten switch-ins a cycle for the first 400 ms, then asleep
        t = busy.add(t, t + PERIOD // 10 - 20 * US, synth.SLEEP)
        t = busy.add(t, t + 20 * US, synth.USER)
    busy.add(t, T0 + DURATION + PERIOD, synth.SLEEP)
    cap = _capture([*timelines, busy], **tables)
    profiles = thread_profiles(cap).set_index("tid")
    assert not profiles.loc[601, "periodic"] or profiles.loc[601, "period_source"] != "/proc switch-ins"
    assert profiles.loc[601, "wakeups_per_s"] > profiles.loc[600, "wakeups_per_s"], "switched in most on average"
    assert rules.runs_engine_cycle_by_rate(
        profiles.loc[[601], "wakeups_per_s"].to_numpy(), PERIOD, profiles.loc[[601], "wall_ns"].to_numpy()
    ).all(), "its mean rate alone is the cycle's"
    watched = set(select_threads(profiles.reset_index())["tid"].tolist())
    assert 600 in watched and 601 not in watched, watched
    _, incidents, _ = _analyse(cap)
    assert len(incidents) == 1, incidents[["root_comm", "root_verdict", "evidence"]]
    row = incidents.iloc[0]
    assert (row.root_tid, row.root_verdict) == (600, "runqueue"), row.evidence


# ---------------------------------------------------------------------------------------------------
# JACK and PipeWire in one capture: each engine's chain, period and cycles (issue 22, real graphs)

PW_LATE_START = 200  # PipeWire's cycle that started 4 ms late (its timer fired late)
PW_LONG_RUN = 100  # PipeWire's cycle in which cue ran 2 ms: late by JACK's period, on time by its own
PW_MISSED, JACK_MISSED = 300, 599  # a cycle of each engine that ended past its period, 2.4 ms apart


def _two_engines(**tables: pd.DataFrame) -> forensics.Capture:
    """JACK at 2.667 ms (its driver `system` in jackd, pid 400; jack-client, pid 410) and PipeWire at 5.333
    ms (its Dummy-Driver in the daemon's data loop, tid 500 of pid 499; cue, pid 600) in one capture,
    every cycle of both recorded (JACK's are the most rows: one median over both is JACK's period). Each
    client is signalled 60 us after the one above it, wakes 10 us later and runs 50 us, except: PipeWire's
    cycle PW_LATE_START began 4 ms late, cue ran 2 ms in PW_LONG_RUN, and PW_MISSED and JACK_MISSED ended
    past their periods. `tables`: more of the capture's tables (xruns)."""

    def thread(tid: int, pid: int, comm: str, period: int, cpu: int) -> Timeline:
        tl = Timeline(tid=tid, comm=comm, pid=pid, policy=1, rtprio=80, cpu=cpu)
        synth.periodic(tl, t0=T0, duration_ns=DURATION, period_ns=period, work_ns=50 * US, seed=tid)
        return tl

    links = [
        thread(400, 400, "jackd", JACK_PERIOD, 0),
        thread(410, 410, "jack-client", JACK_PERIOD, 1),
        thread(500, 499, "data-loop.0", PW_PERIOD, 0),
        thread(600, 600, "cue", PW_PERIOD, 1),
    ]
    jack, pw = _cycles("jack", JACK_PERIOD, 1), _cycles("pipewire", PW_PERIOD, 1)
    late_start = (pw["cycle"] == PW_LATE_START).to_numpy()
    pw.loc[late_start, ["t_ns", "end_ns"]] += 4 * MS
    pw.loc[(pw["cycle"] == PW_MISSED).to_numpy(), "end_ns"] += 7 * MS
    jack.loc[(jack["cycle"] == JACK_MISSED).to_numpy(), "end_ns"] += 4 * MS
    cycles = pd.concat([jack, pw], ignore_index=True).sort_values("t_ns", kind="stable").reset_index(drop=True)
    nodes = []
    for engine, frame, names in (("jack", jack, ["system", "jack-client"]), ("pipewire", pw, ["Dummy-Driver", "cue"])):
        for j, name in enumerate(names):
            signal = frame["t_ns"].to_numpy(np.int64) + j * 60 * US
            run = np.where((frame["cycle"] == PW_LONG_RUN).to_numpy() & (name == "cue"), 2 * MS, 50 * US)
            nodes.append(
                pd.DataFrame(
                    {"t_ns": frame["t_ns"].to_numpy(np.int64), "engine": engine, "node_id": j, "name": name,
                     "signal_ns": signal, "awake_ns": signal + 10 * US, "finish_ns": signal + 10 * US + run,
                     "status": 0, "xrun": False}
                )
            )  # fmt: skip
    clients = pd.DataFrame(
        {"t_ns": T0, "engine": ["jack", "jack", "pipewire", "pipewire"], "event": "present",
         "name": ["system", "jack-client", "Dummy-Driver", "cue"], "pid": [None, 410, 499, 600],
         "node_id": [None, None, 27, 31]}
    )  # fmt: skip
    graph = pd.DataFrame(
        {"t_ns": T0, "engine": ["jack", "pipewire"], "event": "snapshot", "src_client": ["system", "Dummy-Driver"],
         "src_port": "out", "dst_client": ["jack-client", "cue"], "dst_port": "in"}
    )  # fmt: skip
    engines = {
        "jack": {"kind": "jack", "server": "default", "jackd_pid": 400, "clock_offset_ns": 0},
        "pipewire": {"kind": "pipewire", "server": "pipewire-0", "clock_offset_ns": 0},
    }
    cap = _capture(
        links, engine_cycles=cycles, engine_nodes=pd.concat(nodes, ignore_index=True), engine_clients=clients,
        engine_graph=graph, **tables,
    )  # fmt: skip
    return cap.without([], meta={"sources": {**cap.sources, "engines": engines}})


def _pw_start(cap: forensics.Capture, cycle: int) -> int:
    cycles = cap.table("engine_cycles")
    return int(cycles.loc[(cycles["engine"] == "pipewire") & (cycles["cycle"] == cycle), "t_ns"].iloc[0])


def test_each_engines_links_get_its_own_period_engine_and_driver():
    """JACK's links (jackd's driver thread from jackd_pid, jack-client) are JACK's at 2.667 ms with `system`
    their driver; PipeWire's (the data loop, cue) PipeWire's at 5.333 ms with the data loop its driver.
    Was: one median over all cycles (JACK's: it had the most rows) and the first row's engine, so
    PipeWire's threads, at 5.333 ms, were no link of any chain."""
    cap = _two_engines()
    chain = chain_links(cap, select_threads(thread_profiles(cap))).set_index("tid")
    assert sorted(chain.index) == [400, 410, 500, 600], chain
    assert chain.loc[[400, 410], "engine"].tolist() == ["jack", "jack"]
    assert chain.loc[[500, 600], "engine"].tolist() == ["pipewire", "pipewire"]
    assert chain.loc[[400, 410], "period_ns"].tolist() == [JACK_PERIOD, JACK_PERIOD]
    assert chain.loc[[500, 600], "period_ns"].tolist() == [PW_PERIOD, PW_PERIOD]
    assert chain["driver"].to_dict() == {400: True, 410: False, 500: True, 600: False}
    assert chain.loc[410, "upstream"] == (400,) and chain.loc[600, "upstream"] == (500,)


def test_a_pipewire_cycle_is_judged_by_pipewires_period_and_its_own_starts():
    """cue running 2 ms is late by half of JACK's period, not of PipeWire's: no late link (was: cue, by one
    median over both engines' cycles, JACK's). PipeWire's cycle that began 4 ms late (9.3 ms after the one
    before, past 1.5 periods) makes its driver, the data loop, the first late link, though JACK's cycles
    kept starting meanwhile (was: both engines' starts as one series, no gap). The gap between cycle
    starts is each engine's own."""
    from analyses.incidents import _cycle_start_gap, _engine_first_late, _engine_records

    cap = _two_engines()
    records = _engine_records(cap)
    # PipeWire's chain as chain_links gives it (the test above), written out: judged here on its own.
    pipewire = pd.DataFrame(
        {"tid": [500, 600], "engine": "pipewire", "source": "engine", "order": [0.0, 1.0], "driver": [True, False],
         "period_ns": float(PW_PERIOD), "upstream": [(), (500,)]}
    )  # fmt: skip
    long_run = _pw_start(cap, PW_LONG_RUN)
    assert _engine_first_late(records, long_run, long_run + 3 * MS, pipewire, rules.IncidentRules()) is None
    late = _pw_start(cap, PW_LATE_START)
    due = _pw_start(cap, PW_LATE_START - 1) + PW_PERIOD
    first = _engine_first_late(records, late - MS, late + 6 * MS, pipewire, rules.IncidentRules())
    assert first == (500, due, late), first
    gap, period = _cycle_start_gap(records, late - MS, late + 6 * MS, "pipewire") or (None, None)
    assert (gap, period) == (late - _pw_start(cap, PW_LATE_START - 1), PW_PERIOD)
    assert _cycle_start_gap(records, late - MS, late + 6 * MS, "jack") == (JACK_PERIOD, JACK_PERIOD)
    assert _cycle_start_gap(records, late - MS, late + 6 * MS, None) is None  # whose cycles: unknown


def test_an_incidents_cycle_is_one_of_its_own_engines():
    """A JACK cycle and a PipeWire cycle 2.4 ms apart both ended past their periods: the PipeWire incident's
    cycle is PipeWire's (PW_MISSED), the JACK incident's JACK's (JACK_MISSED). Was: both engines' cycles as
    one series at one median period, and the PipeWire incident given JACK's cycle, the earlier late one."""
    from analyses.incidents import _add_cycles, _engine_records

    cap = _two_engines()
    pw_start = _pw_start(cap, PW_MISSED)
    jack_start = T0 + JACK_MISSED * JACK_PERIOD
    incidents = pd.DataFrame(
        {"start_ns": [jack_start, pw_start - MS], "end_ns": [jack_start + 5 * MS, pw_start + 8 * MS],
         "engine": ["jack", "pipewire"]}
    )  # fmt: skip
    assert _add_cycles(cap, incidents, _engine_records(cap), rules.IncidentRules())["cycle"].tolist() == [
        JACK_MISSED,
        PW_MISSED,
    ]


def test_an_xrun_joins_an_incident_of_its_own_engine():
    """The JACK incident (its cycle JACK_MISSED) and the PipeWire one (PW_MISSED, begun 1.4 ms later)
    overlap in time. JACK's xrun, reported 3 ms into JACK's cycle, and JACK's missed deadline are the JACK
    incident's; PipeWire's missed deadline the PipeWire incident's. Was: by time alone, each to the
    overlapping incident that began last, the PipeWire one (and its xrun count 1, JACK's 0)."""
    from analyses.incidents import _add_cycles, _engine_records

    jack_start = T0 + JACK_MISSED * JACK_PERIOD
    xruns = pd.DataFrame(
        {"t_ns": pd.array([jack_start + 3 * MS], dtype="int64"), "engine": "jack",
         "delay_us": pd.array([37.0], dtype="Float64"), "client": pd.array([None], dtype=object),
         "source": "callback", "text": None}
    )  # fmt: skip
    cap = _two_engines(xruns=xruns)
    pw_start = _pw_start(cap, PW_MISSED)
    assert jack_start < pw_start - MS < jack_start + 5 * MS  # they overlap
    incidents = pd.DataFrame(
        {"incident": [1, 2], "start_ns": [jack_start, pw_start - MS],
         "end_ns": [jack_start + 5 * MS, pw_start + 8 * MS], "engine": ["jack", "pipewire"],
         "root_comm": ["jackd", "data-loop.0"], "root_client": [None, None], "root_verdict": "runqueue"}
    )  # fmt: skip
    rows = xrun_rows(cap, incidents)
    assert rows[["kind", "client", "incident"]].values.tolist() == [
        ["missed deadline", "system", 1],
        ["missed deadline", "Dummy-Driver", 2],
        ["xrun", None, 1],
    ], rows
    counted = _add_cycles(cap, incidents, _engine_records(cap), rules.IncidentRules())
    assert counted["xruns"].tolist() == [1, 0] and counted["xrun"].tolist() == [True, False]


def test_the_engines_records_are_read_once_per_call(monkeypatch):
    """A stored JACK capture with many incidents: find_incidents derives each engine's period
    (engine_period_medians: once for the chain, once for judging) and its nodes' lateness (node_lateness)
    a fixed number of times, not once per candidate incident (was: both per incident, node_lateness over
    the whole node table each time)."""
    import analyses.incidents as module

    cap = forensics.load(REPO / "captures/jack-driver-suspect.ssf")
    profiles = thread_profiles(cap)
    episodes = find_stalls(cap, profiles=profiles)
    calls = dict.fromkeys(("engine_period_medians", "node_lateness"), 0)

    def counting(name):
        real = getattr(module, name)

        def counted(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        return counted

    for name in calls:
        monkeypatch.setattr(module, name, counting(name))
    incidents, _ = find_incidents(cap, episodes, select_threads(profiles), interval_ns=capture_interval_ns(cap))
    assert len(incidents) > 3 and (incidents["chain_source"] == "engine").all(), incidents
    assert calls == {"engine_period_medians": 2, "node_lateness": 1}, calls


def test_a_head_of_the_engines_chain_is_judged_by_its_engines_period():
    """Every member only waited and the one member (cue) is known by its rate alone (no period of its
    own): the head of PipeWire's chain, the data loop, switched in 9 ms after its previous switch-in, is
    judged against PipeWire's 5.333 ms period: a late wake-up. Was: the members' own periods, none, so no
    judgement of the head at all (`unknown`)."""
    from types import SimpleNamespace

    from analyses.incidents import _engine_records, _head_verdict, _Wakeups

    cap = _two_engines()
    pipewire = pd.DataFrame(
        {"tid": [500, 600], "engine": "pipewire", "source": "engine", "order": [0.0, 1.0], "driver": [True, False],
         "period_ns": float(PW_PERIOD), "upstream": [(), (500,)]}
    )  # fmt: skip
    start = _pw_start(cap, 150)
    switch_ins = np.r_[start - 4 * PW_PERIOD : start + PW_PERIOD : PW_PERIOD, start + 9 * MS]
    switches = pd.DataFrame({"t_ns": switch_ins.astype(np.int64), "next_tid": 500})
    events = _Wakeups(SimpleNamespace(table_names=["sched_switch"], table=lambda name, columns=None: switches))
    group = pd.DataFrame({"tid": [600], "start_ns": [start], "end_ns": [start + 8 * MS], "period_ns": [np.nan]})
    tid, verdict, evidence = _head_verdict(
        cap, events, _engine_records(cap), 500, start, start + 8 * MS, group, pipewire, rules.IncidentRules(), 2 * MS
    )
    assert (tid, verdict) == (500, "late wake-up"), evidence
    assert "(period 5.3 ms)" in evidence, evidence


def test_the_engine_overview_gives_each_engine_its_own_period():
    """The report's engine section with JACK and PipeWire recorded together: each engine's median period
    beside the figures of the one with the most cycles (JACK's). Was: one median over both engines'
    cycles, whichever recorded more rows."""
    from analyses.engine import engine_overview
    from forensics.views.report import engine_rows

    overview = engine_overview(_two_engines())
    assert overview is not None and overview["engine"] == "jack" and overview["period_ns"] == JACK_PERIOD
    assert overview["periods_ns"] == {"jack": JACK_PERIOD, "pipewire": PW_PERIOD}
    assert engine_rows(overview)["periods"] == "jack 2.667 ms, pipewire 5.333 ms"


def test_a_link_of_unknown_place_ranks_after_the_driver() -> None:
    """From /proc alone only the driver's place in the graph is known (0; the clients NaN). A NaN sort key
    is neither less nor more than 0: min() kept the first candidate, a client whose window began before
    the hog, ahead of the starved driver. Unknown places rank last."""
    chain = pd.DataFrame({"tid": [10, 20, 30], "order": [0.0, np.nan, np.nan]})
    rank = graph_rank(chain)
    assert rank == {10: 0.0, 20: np.inf, 30: np.inf}
    starts = {20: 100, 10: 2_000_000, 30: 50}  # the clients' windows began first
    assert min(starts, key=lambda tid: (rank[tid], starts[tid])) == 10
    assert graph_rank(chain.iloc[0:0]) == {}


def test_an_xrun_report_joins_the_incident_that_began_before_it_not_a_later_one_its_reports_overlap():
    """Recorded (issue 22's graph, the recorder first): a starved driver's incident ended 0.7 ms before
    the xrun's first report; the clients' catch-up, 13 ms later, lay within the xrun's 51 ms of callbacks
    and log lines. The report follows what it reports: the xrun is the starvation's. A missed deadline
    (not a report) still goes to the latest incident it overlaps."""
    from analyses.incidents import _covering_incident

    starts, ends = np.array([0, 27_500_000]), np.array([14_200_000, 31_800_000])
    assert _covering_incident(14_900_000, 65_700_000, starts, ends, after=True) == 0
    assert _covering_incident(14_900_000, 65_700_000, starts, ends, after=False) == 1
    # With no incident begun by the first report, the one the reports overlap.
    assert _covering_incident(14_900_000, 65_700_000, starts[1:], ends[1:], after=True) == 0
