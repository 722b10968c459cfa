"""Incidents: the stall episodes of one late engine cycle (or of consecutive late cycles) as one finding.

An audio engine runs a graph once per period: the driver wakes, each client runs in graph order, woken by
the one upstream of it (DESIGN.md, "Engines, cycles and incidents"). When one link is late, every client
downstream of it waits longer than usual, and each of those waits is a stall episode of its own
(analyses.stalls): read one by one they look like lock waits. This module groups them:

1. The chain. Which watched threads are links of one engine's cycle, and who wakes whom, from the best
   source the capture holds:
   - `engine`: the engine's own tables (engine_clients, engine_nodes, engine_graph, engine_cycles;
     capture.format). A client's process thread is the periodic thread of its pid at the engine's
     period; graph order comes from the connections (the driver first). Each engine (JACK and PipeWire
     may be recorded together) is a chain of its own, at its own median period, with its own driver.
   - `ebpf`: sched_wakeup. A thread's usual wakers (tasks that end at least USUAL_WAKER_SHARE of its
     wake-ups, analyses.exact_stalls) are its upstream links when they are watched periodic threads too;
     the links joined that way are one engine. The driver is the link woken by an interrupt (its timer).
   - `proc`: periodic threads of one period (within `same_period_fraction`) are one engine, order
     unknown; the driver is guessed as the one link with the highest real-time priority (an engine runs
     its driver above its clients). Roots from this source are said to be inferred.
2. Incidents. Episodes of one engine's links that start before the current incident's end plus
   `join_periods` periods join it (one late cycle, or a run of them). An episode of a thread that is no
   link of any engine is an incident of its own (the lab: one thread, one incident per episode).
3. Root and upstream. A member that only waited asleep (verdict lock or unknown) for a link of its own
   chain (eBPF: its waker is a link; /proc, which names no waker: no thread outside the chain ran
   meanwhile, by the /proc suspect) waited for its `upstream`:
   that is the graph's order, never `lock`. The root is the earliest member that did not (a long run, a
   runnable wait, io, faults, or a lock whose holder is outside the chain: `lock` keeps its meaning,
   with its priority inversion when the holder ran at a lower priority). When every member only waited,
   the root is the link at the head of the chain (the driver), judged by its own wake-up: `late wake-up`
   when it was switched in later than a period plus its tolerance after its previous switch-in with
   nothing of the capture running instead, with the machine's evidence (/proc/stat steal and irq, PSI
   cpu, the sampler's own gap) where the capture holds it.

Pure functions: capture and episodes in, DataFrames out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analyses import rules
from analyses.engine import cycle_starts, engine_cycle_ends, engine_period_medians, engine_xruns, node_lateness
from analyses.machine import held_one_cpu_ns, machine_growth
from analyses.rules import (
    USUAL_WAKER_SHARE,
    XRUN_JOIN_NS,
    IncidentRules,
    after_the_recording,
    ended_at_an_attach,
    period_limit_ns,
    runs_engine_cycle_by_rate,
)
from capture.format import Capture

# --------------------------------------------------------------------------------------------------
# Incident thresholds: every value the incident rules use, in one place (why each, beside it).


INCIDENT_COLUMNS = [
    "incident", "start_ns", "end_ns", "duration_ns", "engine", "chain_source", "cycle", "xrun", "xruns",
    "root_tid", "root_comm", "root_client", "root_verdict", "root_episode", "inferred", "waited", "members",
    "evidence",
]  # fmt: skip
MEMBER_COLUMNS = ["incident", "role", "incident_verdict", "upstream_tid", "client"]
# Groups of episodes that are no incident, by why (find_incidents counts each in members.attrs).
NOT_INCIDENTS = ("on_time", "after_end", "at_attach")
WAIT_VERDICTS = ("lock", "unknown")  # asleep: what a client waiting for its upstream shows


# --------------------------------------------------------------------------------------------------
# 1. The chain


def chain_links(cap: Capture, threads: pd.DataFrame, rules: IncidentRules | None = None) -> pd.DataFrame:
    """Which threads are links of an engine's cycle: one row per link.

    `threads`: tid pid comm period_ns (the watched threads, analyses.threads). Columns: tid engine
    (a label) source ("engine" | "ebpf" | "proc") order (position in the chain, NaN when unknown) driver
    (bool) upstream (tuple of tids whose wake-up usually starts it) client (the engine's name of the
    client whose process thread it is; None where the chain comes from eBPF or /proc).
    """
    rules = rules or IncidentRules()
    for build in (_engine_links, _ebpf_links):
        links = build(cap, threads, rules)
        if links is not None and len(links):
            return links
    return _proc_links(threads, rules)


def _empty_links() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "tid": pd.Series(dtype=np.int64),
            "engine": pd.Series(dtype=object),
            "source": pd.Series(dtype=object),
            "order": pd.Series(dtype=np.float64),
            "driver": pd.Series(dtype=bool),
            "upstream": pd.Series(dtype=object),
            "client": pd.Series(dtype=object),
        }
    )


def _periodic(threads: pd.DataFrame) -> pd.DataFrame:
    out = threads[threads["period_ns"].notna()].copy()
    out["period_ns"] = out["period_ns"].astype(np.float64)
    return out


def _same_period(period: np.ndarray, target: float, rules: IncidentRules) -> np.ndarray:
    return np.abs(period - target) <= rules.same_period_fraction * target


def _engine_links(cap: Capture, threads: pd.DataFrame, rules: IncidentRules) -> pd.DataFrame | None:
    """Links from the engine's own tables (ENGINE_TABLES contract), or None without them: each engine's
    (JACK and PipeWire may be recorded together) at its own median period, with its own driver and graph."""
    names = set(cap.table_names)
    if not {"engine_clients", "engine_cycles"} <= names:
        return None
    clients = cap.table("engine_clients")
    cycles = cap.table("engine_cycles")
    if clients.empty or cycles.empty:
        return None
    periodic = _periodic(threads)
    # Threads /proc found no period for, that still run the cycle by their mean rate (a loaded machine).
    unsteady = threads[threads["period_ns"].isna()] if "wakeups_per_s" in threads else threads.iloc[0:0]
    chains = []
    claimed: set[int] = set()
    # Shortest period first: a thread of a client of both engines (PipeWire's JACK layer) that fits both is
    # the shorter one's link, as analyses.threads.engine_periods gives it the shorter period that fits.
    for engine, period in engine_period_medians(cycles).items():
        links = _links_of_engine(cap, str(engine), float(period), cycles, clients, periodic, unsteady, rules, claimed)
        if links is not None:
            chains.append(links)
            claimed |= set(links["tid"].tolist())
    return pd.concat(chains, ignore_index=True) if chains else None


def _links_of_engine(
    cap: Capture,
    engine: str,
    period: float,
    cycles: pd.DataFrame,
    clients: pd.DataFrame,
    periodic: pd.DataFrame,
    unsteady: pd.DataFrame,
    rules: IncidentRules,
    claimed: set[int],
) -> pd.DataFrame | None:
    """One engine's links (_engine_links): the threads of its clients' processes at its period (or at its
    rate), leaving out those `claimed` by an engine before it; None when it has none."""
    own = cycles[(cycles["engine"].astype(str) == engine).to_numpy()]
    driver_name = str(own["driver"].astype(str).mode().iloc[0]) if own["driver"].notna().any() else None
    mine_clients = clients[(clients["engine"].astype(str) == engine).to_numpy()]
    present = mine_clients[mine_clients["pid"].notna()].drop_duplicates("name", keep="last")
    pid_of = dict(zip(present["name"].astype(str), present["pid"].astype(np.int64), strict=True))
    # jackd_pid is the JACK source's: PipeWire's driver runs in a client of its own (the daemon).
    server = _server_pid(cap) if engine == "jack" else None
    if driver_name is not None and driver_name not in pid_of and server is not None:
        # JACK's driver ("system") is a client of no process of its own: it runs in the server's thread.
        pid_of[driver_name] = server
    order = _graph_order(cap, list(pid_of), driver_name, engine)
    by_rate = unsteady[
        runs_engine_cycle_by_rate(unsteady["wakeups_per_s"].to_numpy(), period, unsteady["wall_ns"].to_numpy())
    ]
    rows = []
    for name, pid in pid_of.items():
        mine = periodic[(periodic["pid"] == pid) & _same_period(periodic["period_ns"].to_numpy(), period, rules)]
        mine = pd.concat([mine, by_rate[by_rate["pid"] == pid]]) if (by_rate["pid"] == pid).any() else mine
        for tid in mine["tid"].astype(np.int64).tolist():  # a client's process thread(s)
            if tid in claimed:
                continue
            rows.append(
                {
                    "tid": tid,
                    "engine": engine,
                    "source": "engine",
                    "order": float(order.get(name, np.nan)),
                    "driver": name == driver_name,
                    "client": name,
                    "period_ns": period,
                }
            )
    if not rows:
        return None
    feeds = _graph_edges(cap, engine)
    # A process with several clients (ecasound registers `ecasound` and an unconnected
    # `ecasound-ctrl-PID`): its thread is the link of the client the graph connects, not of the first.
    connected = set(feeds) | {src for sources in feeds.values() for src in sources}
    links = pd.DataFrame(rows)
    links = links.assign(_off=~links["client"].isin(connected)).sort_values("_off", kind="stable")
    links = links.drop_duplicates("tid").drop(columns="_off").sort_index()
    # A client's upstream: the clients connected into it (engine_graph), as their process threads. The
    # driver has none: it starts each cycle on its clock, and what the clients feed into its playback ports
    # it writes out in the next cycle (jack2 JackAudioDriver::ProcessAsync: Read of this cycle's input, Write
    # of the previous cycle's output, then the graph), so no client holds its wake-up (as _graph_order ranks
    # it 0). Counted, a driver that woke late, seen alone, was blamed on a client feeding the playback.
    tids_of = links.groupby("client")["tid"].apply(tuple).to_dict()
    driver_tids = tuple(links.loc[links["driver"], "tid"].tolist())
    links["upstream"] = [
        () if d else tuple(t for src in feeds.get(c, ()) for t in tids_of.get(src, ())) or driver_tids
        for c, d in zip(links["client"], links["driver"], strict=True)
    ]
    return links.reset_index(drop=True)


def _server_pid(cap: Capture) -> int | None:
    """The engine server's pid as its source recorded it (jackd), or None."""
    pid = (cap.engine_sources.get("jack") or {}).get("jackd_pid")
    return pid if pid else None


def _graph_edges(cap: Capture, engine: str) -> dict[str, tuple[str, ...]]:
    """dst client -> src clients of every connection of `engine` the capture saw (engine_graph: its snapshots
    and `connected` events; a disconnection removes none), self-loops left out (a client of both engines may
    bear one name in each, its connections differ). A graph changed while recording keeps its old and new
    edges: a plugin x inserted between a0 and a1 (a0 -> x -> a1, a0 -> a1 disconnected) leaves a1 fed by a0
    and x, each a client it may have waited for at some time."""
    if "engine_graph" not in cap.table_names:
        return {}
    graph = cap.table("engine_graph")
    graph = graph[(graph["engine"].astype(str) == engine).to_numpy()]
    if graph.empty:
        return {}
    event = graph["event"].astype(str)
    ends = graph["src_client"].notna().to_numpy() & graph["dst_client"].notna().to_numpy()  # a port of no client
    graph = graph[event.isin(["connected", "snapshot"]).to_numpy() & ends]
    out: dict[str, set[str]] = {}
    for src, dst in zip(graph["src_client"].astype(str), graph["dst_client"].astype(str), strict=True):
        if src != dst:
            out.setdefault(dst, set()).add(src)
    return {k: tuple(sorted(v)) for k, v in out.items()}


def _graph_order(cap: Capture, clients: list[str], driver: str | None, engine: str) -> dict[str, int]:
    """Position of each client of `engine` in graph order: the driver 0, then by longest path from a source."""
    feeds = _graph_edges(cap, engine)
    depth: dict[str, int] = {}

    def walk(name: str, seen: frozenset[str]) -> int:
        if name in depth:
            return depth[name]
        ups = [u for u in feeds.get(name, ()) if u not in seen and u != driver]
        d = 1 + max((walk(u, seen | {name}) for u in ups), default=0)
        depth[name] = d
        return d

    out = {c: walk(c, frozenset()) for c in clients}
    if driver is not None:
        out[driver] = 0
    return out


def _ebpf_links(cap: Capture, threads: pd.DataFrame, rules: IncidentRules) -> pd.DataFrame | None:
    """Links from who woke whom (sched_wakeup "waking" rows), or None without them."""
    if "sched_wakeup" not in cap.table_names:
        return None
    periodic = _periodic(threads)
    if len(periodic) < 2:
        return None
    tids = periodic["tid"].astype(np.int64).to_numpy()
    wk = cap.table("sched_wakeup", columns=["t_ns", "kind", "tid", "waker_tid", "waker_context"])
    wk = wk[(wk["kind"].astype(str) == "waking").to_numpy() & wk["tid"].isin(tids).to_numpy()]
    if wk.empty:
        return None
    context = wk["waker_context"].astype(str).to_numpy()
    waker = pd.to_numeric(wk["waker_tid"], errors="coerce").fillna(-1).astype(np.int64).to_numpy()
    key = np.where(context == "task", waker, -1)  # -1: an interrupt (a timer, a device)
    counts = pd.DataFrame({"tid": wk["tid"].astype(np.int64).to_numpy(), "key": key}).value_counts().rename("n")
    counts = counts.reset_index()
    counts["share"] = counts["n"] / counts.groupby("tid")["n"].transform("sum")
    usual = counts[counts["share"] >= USUAL_WAKER_SHARE]
    period = periodic.set_index("tid")["period_ns"]
    # An edge waker -> woken between two watched periodic threads of one period.
    edges = usual[usual["key"].isin(tids)]
    woken_period = period.reindex(edges["tid"]).to_numpy()
    same = np.abs(woken_period - period.reindex(edges["key"]).to_numpy()) <= rules.same_period_fraction * woken_period
    edges = edges[same]
    if edges.empty:
        return None
    # Engines: the connected components of the edges.
    parent = {int(t): int(t) for t in np.r_[edges["tid"].to_numpy(), edges["key"].to_numpy()]}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in zip(edges["tid"].astype(int), edges["key"].astype(int), strict=True):
        parent[find(a)] = find(b)
    upstream = edges.groupby("tid")["key"].apply(lambda s: tuple(sorted(int(v) for v in s))).to_dict()
    interrupt_woken = set(usual.loc[usual["key"] == -1, "tid"].astype(int))
    comm = threads.set_index("tid")["comm"]
    rows = []
    for tid in parent:
        ups = upstream.get(tid, ())
        rows.append(
            {
                "tid": tid,
                "engine_root": find(tid),
                "source": "ebpf",
                "driver": not ups and tid in interrupt_woken,
                "upstream": ups,
                "client": None,  # who woke whom names no client
            }
        )
    links = pd.DataFrame(rows)
    depth = _depths(dict(zip(links["tid"], links["upstream"], strict=True)))
    links["order"] = links["tid"].map(depth).astype(np.float64)
    labels = {}
    for root, group in links.groupby("engine_root"):
        head = group.sort_values("order")["tid"].iloc[0]
        labels[root] = f"{comm.get(head, '?')} ({int(head)})"
    links["engine"] = links["engine_root"].map(labels)
    return links[["tid", "engine", "source", "order", "driver", "upstream", "client"]].reset_index(drop=True)


def _depths(upstream: dict[int, tuple[int, ...]]) -> dict[int, int]:
    """Longest path from a head (a link with no upstream link) to each link; cycles are cut."""
    depth: dict[int, int] = {}

    def walk(t: int, seen: frozenset[int]) -> int:
        if t in depth:
            return depth[t]
        ups = [u for u in upstream.get(t, ()) if u not in seen]
        d = 1 + max((walk(u, seen | {t}) for u in ups), default=-1)
        depth[t] = d
        return d

    for t in upstream:
        walk(t, frozenset())
    return depth


def _proc_links(threads: pd.DataFrame, rules: IncidentRules) -> pd.DataFrame:
    """Engines guessed from /proc: two or more periodic real-time-or-not threads of one period."""
    periodic = _periodic(threads).sort_values("period_ns")
    if len(periodic) < 2:
        return _empty_links()
    period = periodic["period_ns"].to_numpy()
    new = np.r_[True, period[1:] - period[:-1] > rules.same_period_fraction * period[:-1]]
    group = np.cumsum(new)
    rows = []
    comm = periodic["comm"].astype(str).to_numpy()
    for g in np.unique(group):
        members = np.flatnonzero(group == g)
        if len(members) < 2:
            continue
        label = f"{len(members)} threads at {np.median(period[members]) / 1e6:.3f} ms"
        for i in members:
            rows.append(
                {
                    "tid": int(periodic["tid"].iloc[i]),
                    "engine": label,
                    "source": "proc",
                    "order": np.nan,
                    "driver": False,
                    "upstream": (),
                    "client": None,  # a guess from /proc names no client
                    "comm": comm[i],
                }
            )
    if not rows:
        return _empty_links()
    links = pd.DataFrame(rows).drop(columns="comm")
    # The driver, guessed: an engine runs its driver above its clients (jackd -R: FIFO 10, clients 5;
    # PipeWire's data loop likewise); only a single highest real-time priority is taken as the driver.
    if "rtprio" in threads:
        prio = pd.to_numeric(threads.set_index("tid")["rtprio"], errors="coerce")
        for _, group in links.groupby("engine"):
            p = prio.reindex(group["tid"]).fillna(0).to_numpy()
            if len(p) and p.max() > 0 and (p == p.max()).sum() == 1:
                links.loc[group.index[int(p.argmax())], ["driver", "order"]] = [True, 0.0]
    return links


# --------------------------------------------------------------------------------------------------
# 2-3. Incidents, roots, upstream waits


def find_incidents(
    cap: Capture,
    episodes: pd.DataFrame,
    threads: pd.DataFrame,
    *,
    rules: IncidentRules | None = None,
    interval_ns: int = 2_000_000,
    quiet_outside: bool = True,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(incidents, members): one incident row per late cycle or run of them (INCIDENT_COLUMNS), and the
    episodes (analyses.stalls.find_stalls rows, unchanged) with MEMBER_COLUMNS added: which incident,
    role ("root" | "upstream" | "member"), the verdict in the incident (`upstream` for a client that only
    waited for its upstream link), that upstream link's tid, and the thread's client as the engine names
    it (None off the engine's chain).

    `threads`: the watched threads (tid pid comm period_ns policy ...). With `quiet_outside` and an engine
    found, episodes of threads that are neither a link of it nor real-time (a client's housekeeping
    thread at a period of its own) are no incident of their own: they appear when they ran instead of a
    member, or on request (quiet_outside=False). Their count is in members.attrs["hidden"]. With
    `quiet_outside`, groups of episodes over cycles the engine recorded whole and on time
    (rules.engine_on_time) are no incident either, nor groups that began after the recording's end
    (rules.after_the_recording): counted in members.attrs["on_time"] and ["after_end"] (incidents,
    episodes), the rest numbered from 1.
    """
    rules = rules or IncidentRules()
    links = chain_links(cap, threads, rules)
    members = episodes.copy().reset_index(drop=True)
    if quiet_outside and len(links) and len(members):
        members, hidden = _outside_the_graph(members, links, threads)
    else:
        hidden = members.iloc[0:0]
    if members.empty:
        for column in MEMBER_COLUMNS:
            members[column] = pd.Series(dtype=object)
        members.attrs["hidden"] = {
            "episodes": len(hidden),
            "threads": int(hidden["tid"].nunique()) if len(hidden) else 0,
        }
        for name in NOT_INCIDENTS:
            members.attrs[name] = {"incidents": 0, "episodes": 0}
        return _empty_incidents(), members
    link = links.set_index("tid") if len(links) else None
    tid = members["tid"].astype(np.int64).to_numpy()
    engine = link["engine"].reindex(tid).astype(object).to_numpy() if link is not None else np.full(len(tid), None)
    members["inc_engine"] = engine
    period = pd.to_numeric(members["period_ns"], errors="coerce").to_numpy(dtype=np.float64)
    if link is not None and "period_ns" in link:  # a link known by its rate alone joins at its engine's period
        engine_period = pd.to_numeric(link["period_ns"], errors="coerce").reindex(tid).to_numpy(dtype=np.float64)
        period = np.where(np.isnan(period), engine_period, period)
    members = members.assign(inc_period=period).sort_values(["start_ns", "tid"], kind="stable").reset_index(drop=True)
    incident = np.full(len(members), -1, dtype=np.int64)
    cause_of = _caused_by(members)
    if "inc_culprit_only" in members:
        # Kept only as what ran instead of a member, yet joined to none (its victim was itself a
        # culprit): no incident of its own either.
        stray = members["inc_culprit_only"].to_numpy(dtype=bool) & ~np.isin(np.arange(len(members)), list(cause_of))
        if stray.any():
            hidden = pd.concat([hidden, members[stray]], ignore_index=True)
            members = members[~stray].reset_index(drop=True)
            cause_of = _caused_by(members)
        members = members.drop(columns="inc_culprit_only")
        incident = incident[: len(members)]
    open_end: dict[Any, tuple[int, float]] = {}  # engine -> (incident, end_ns + join window)
    next_id = 1  # incidents are numbered from 1, as users count them
    for i, row in enumerate(members.itertuples(index=False)):
        if i in cause_of:
            continue  # what ran instead of (or held up) another episode: joins that one's incident below
        key = row.inc_engine
        if key is None or (isinstance(key, float) and np.isnan(key)):
            incident[i] = next_id
            next_id += 1
            continue
        current = open_end.get(key)
        join = rules.join_periods * (row.inc_period if not np.isnan(row.inc_period) else 0.0)
        if current is not None and row.start_ns <= current[1]:
            incident[i] = current[0]
            open_end[key] = (current[0], max(current[1], row.end_ns + join))
        else:
            incident[i] = next_id
            open_end[key] = (next_id, row.end_ns + join)
            next_id += 1
    for i, j in cause_of.items():
        incident[i] = incident[j]
    members["incident"] = incident
    source = str(links["source"].iloc[0]) if len(links) else None
    rows = []
    roles = np.array(["member"] * len(members), dtype=object)
    verdicts = members["verdict"].astype(object).to_numpy().copy()
    upstream_tid = np.full(len(members), np.nan)
    events = _Wakeups(cap)
    records = _engine_records(cap, rules)
    for number, group in members.groupby("incident", sort=True):
        idx = group.index.to_numpy()
        culprits = {i: cause_of[i] for i in idx if i in cause_of}
        # drop() copies every column of the members' wide frame: 1 s over 274 incidents where none had
        # a culprit (the 30 M-sample capture, issue 12: analyses speed).
        victims = group.drop(index=list(culprits)) if culprits else group
        if victims.empty:  # cannot happen with the guards of _caused_by; keep every episode counted anyway
            victims, culprits = group, {}
        info = _judge(cap, events, records, victims, links, source, rules, interval_ns)
        info["roles"] += [(i, "ran instead" if members.at[j, "verdict"] == "runqueue" else "holder", None)
                          for i, j in culprits.items()]  # fmt: skip
        info["members"] += len(culprits)
        for i, role, up in info["roles"]:
            roles[i] = role
            if role == "root":  # the root's verdict in the incident is the incident's (a driver's late wake-up)
                verdicts[i] = info["root_verdict"]
            if role == "upstream":
                verdicts[i] = "upstream"
                upstream_tid[i] = np.nan if up is None else up
        rows.append({"incident": int(number), **{k: v for k, v in info.items() if k != "roles"}, "_idx": idx})
    # The driver sleeps on its clock (rule 3): its asleep wait, where it is no root, is a late wake-up too.
    drivers = set(links.loc[links["driver"].astype(bool), "tid"].astype(int)) if len(links) else set()
    driver_wait = members["tid"].isin(drivers).to_numpy() & np.isin(verdicts, WAIT_VERDICTS) & (roles == "member")
    verdicts[driver_wait] = "late wake-up"
    members["role"] = roles
    members["incident_verdict"] = verdicts
    members["upstream_tid"] = pd.array([None if np.isnan(v) else int(v) for v in upstream_tid], dtype="Int64")
    incidents = pd.DataFrame(rows)
    # The root's client, as the engine names it (a JACK user knows `p0`, not jalv's thread `python3`).
    client_of = dict(zip(links["tid"].astype(np.int64).tolist(), links["client"].tolist(), strict=True))
    roots = incidents["root_tid"].tolist() if len(incidents) else []
    incidents["root_client"] = pd.Series([_client_name(client_of.get(t)) for t in roots], dtype=object)
    # Each episode's thread as the engine names its client, as the root is (None off the engine's chain).
    members["client"] = pd.Series(
        [_client_name(client_of.get(int(t))) for t in members["tid"]], index=members.index, dtype=object
    )
    incidents = _add_cycles(cap, incidents, records, rules)
    members = members.drop(columns=["inc_engine", "inc_period"])
    on_time = incidents["on_time"].to_numpy(dtype=bool)
    ended_ns = (cap.trailer or {}).get("ended_ns")
    after_end = after_the_recording(incidents["start_ns"], int(ended_ns) if ended_ns is not None else None)
    at_attach = _ended_at_an_attach(cap, incidents, records) & ~after_end
    counts = {}
    if quiet_outside and (on_time.any() or after_end.any() or at_attach.any()):
        # Groups of episodes over cycles the engine recorded on time are no late cycle (rules.engine_on_time),
        # and those after the recording's end or ended while a source attached are the tool's own
        # (rules.after_the_recording, rules.ended_at_an_attach): no incident, counted; --all keeps them.
        # The others are numbered again from 1.
        drop = on_time | after_end | at_attach
        kinds = (
            ("on_time", on_time & ~after_end & ~at_attach), ("after_end", after_end), ("at_attach", at_attach)
        )  # fmt: skip
        for name, which in kinds:
            numbers = set(incidents.loc[which, "incident"].astype(int))
            counts[name] = {"incidents": len(numbers), "episodes": int(members["incident"].isin(numbers).sum())}
        dropped = set(incidents.loc[drop, "incident"].astype(int))
        gone = members["incident"].isin(dropped).to_numpy()
        incidents = incidents[~drop].reset_index(drop=True)
        renumber = {int(old): new for new, old in enumerate(incidents["incident"], start=1)}
        incidents["incident"] = np.arange(1, len(incidents) + 1, dtype=np.int64)
        members = members[~gone]  # its index stays: root_episode names a row of it
        members["incident"] = members["incident"].map(renumber).astype(np.int64)
    members.attrs["hidden"] = {"episodes": len(hidden), "threads": int(hidden["tid"].nunique()) if len(hidden) else 0}
    for name in NOT_INCIDENTS:
        members.attrs[name] = counts.get(name, {"incidents": 0, "episodes": 0})
    return incidents[INCIDENT_COLUMNS].reset_index(drop=True), members


def _ended_at_an_attach(cap: Capture, incidents: pd.DataFrame, records: _EngineRecords) -> np.ndarray:
    """Per incident: whether it ended while its engine's source attached (rules.ended_at_an_attach), from
    the attaches in the source's metadata and the engine's cycle records."""
    out = np.zeros(len(incidents), dtype=bool)
    if incidents.empty:
        return out
    engine_of = incidents["engine"].astype(object).to_numpy()
    ends = incidents["end_ns"].to_numpy(np.float64)
    cycles = records.cycles
    for kind, source in cap.engine_sources.items():
        attachments = source.get("attachments")
        mine = np.array([str(e) == kind for e in engine_of], dtype=bool)
        if not isinstance(attachments, list) or not mine.any():
            continue
        attached = np.array([a[0] for a in attachments if isinstance(a, list) and a and a[0] is not None], float)
        starts = np.sort(cycles.loc[(cycles["engine"].astype(str) == kind).to_numpy(), "t_ns"].to_numpy(np.float64))
        at = np.searchsorted(starts, attached, side="left")
        first = np.full(len(attached), np.nan)  # the engine's first cycle record at or after each attach
        found = at < len(starts)
        first[found] = starts[at[found]]
        period = float(records.periods.get(kind, np.nan))
        out |= mine & ended_at_an_attach(ends, attached, first, period)
    return out


def _client_name(value: Any) -> str | None:
    return value if isinstance(value, str) else None


RT_POLICIES = (1, 2, 6)  # SCHED_FIFO, SCHED_RR, SCHED_DEADLINE


def _outside_the_graph(
    members: pd.DataFrame, links: pd.DataFrame, threads: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(kept, hidden): episodes of threads outside every chain and not real-time are hidden, except those
    that ran instead of (or held up) a kept episode at the same time: those stay, as its culprits."""
    policy = threads.set_index("tid")["policy"] if "policy" in threads else pd.Series(dtype=float)
    tid = members["tid"].astype(np.int64)
    realtime = pd.to_numeric(policy.reindex(tid), errors="coerce").isin(RT_POLICIES).to_numpy()
    outside = ~tid.isin(links["tid"]).to_numpy() & ~realtime
    if not outside.any():
        return members, members.iloc[0:0]
    kept = members[~outside]
    start, end = members["start_ns"].to_numpy(np.int64), members["end_ns"].to_numpy(np.int64)
    blamed = [_blamed_tid(row) for row in kept.itertuples(index=False)]
    k_start, k_end = kept["start_ns"].to_numpy(np.int64), kept["end_ns"].to_numpy(np.int64)
    culprit = np.zeros(len(members), dtype=bool)
    for i in np.flatnonzero(outside):
        same = np.array([b == int(tid.iloc[i]) for b in blamed], dtype=bool)
        culprit[i] = bool((same & (k_start < end[i]) & (k_end > start[i])).any())
    hide = outside & ~culprit
    kept = members[~hide].assign(inc_culprit_only=(outside & culprit)[~hide])
    return kept.reset_index(drop=True), members[hide]


def _blamed_tid(row: Any) -> int | None:
    """The task an episode names as its cause: who ran instead of a runnable thread, who woke a lock
    wait (eBPF), or the /proc suspect (the busiest recorded thread meanwhile, analyses.evidence)."""
    for column in ("ran_instead_tid", "waker_tid", "suspect_tid"):
        value = row.get(column) if isinstance(row, pd.Series) else getattr(row, column, None)
        if value is not None and not pd.isna(value) and int(value) > 0:
            return int(value)
    return None


def _caused_by(members: pd.DataFrame) -> dict[int, int]:
    """Episode index -> index of an overlapping episode that names its thread as the cause (a hog's own
    long run while it kept the audio thread off the CPU is that incident's, not one of its own)."""
    out: dict[int, int] = {}
    start = members["start_ns"].to_numpy(np.int64)
    end = members["end_ns"].to_numpy(np.int64)
    tids = members["tid"].astype(np.int64).to_numpy()
    engine = members["inc_engine"].to_numpy()
    for j, row in enumerate(members.itertuples(index=False)):
        blamed = _blamed_tid(row) if row.verdict in ("runqueue", "lock") else None
        if blamed is None:
            continue
        for hit in np.flatnonzero((tids == blamed) & (start < end[j]) & (end > start[j])):
            i = int(hit)
            same_chain = engine[i] is not None and not pd.isna(engine[i]) and engine[i] == engine[j]
            # Only a thread outside the victim's chain (a link it waits for is its upstream, not a culprit),
            # and no chains of culprits: each culprit points at a victim that is no culprit itself.
            if i != j and not same_chain and i not in out and j not in out and i not in out.values():
                out[i] = j
    return out


def _empty_incidents() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in INCIDENT_COLUMNS})


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.1f} ms"


# What _judge reads of each member's row: its own test, _machine_held, _overlaps and _blamed_tid.
_JUDGED_COLUMNS = (
    "tid", "start_ns", "end_ns", "verdict", "uncounted_ns", "unknown_ns", "evidence", "waker_tid", "ran_instead_tid",
    "suspect_tid",
)  # fmt: skip


def _judge(
    cap: Capture,
    events: _Wakeups,
    records: _EngineRecords,
    group: pd.DataFrame,
    links: pd.DataFrame,
    source: str | None,
    rules: IncidentRules,
    interval_ns: int,
) -> dict[str, Any]:
    """Root, roles and evidence of one incident (rule 3)."""
    start = int(group["start_ns"].min())
    end = int(group["end_ns"].max())
    engine = group["inc_engine"].iloc[0]
    in_chain = engine is not None and not (isinstance(engine, float) and np.isnan(engine))
    chain = links[links["engine"] == engine] if in_chain else links.iloc[0:0]
    chain_tids = set(chain["tid"].astype(int).tolist())
    upstream_of = dict(zip(chain["tid"].astype(int), chain["upstream"], strict=True)) if len(chain) else {}
    order = graph_rank(chain)
    roles: list[tuple[int, str, int | None]] = []
    waits: dict[int, int | None] = {}
    # The link the engine's own records show late first (woken late, or running long): it did not only
    # wait for its upstream, whatever its own episode says (a callback blocked inside its call sleeps too).
    first_late = _engine_first_late(records, start, end, chain, rules) if source == "engine" else None
    late = first_late[0] if first_late is not None else None
    # Rows as Series of the columns read of them only: a row of the members' wide frame costs each of its
    # columns (0.2 s of 0.75 over 274 incidents on the 30 M-sample capture, issue 12); each column's values
    # are the same either way (a row's values are taken column by column). Taken only where a row of it is
    # read, in a chain or of a group of more than one episode (below): choosing the columns of each
    # one-episode incident outside a chain was 0.2 s of 0.4 on that capture (issue 12), `group` unread.
    narrow = group[[c for c in _JUDGED_COLUMNS if c in group]] if in_chain or len(group) > 1 else group
    # Outside a chain no member waits for an upstream link: the loop has no row to read (and iterrows of
    # an empty frame still joins its columns).
    for i, row in narrow.iterrows() if in_chain else ():
        if row["verdict"] not in WAIT_VERDICTS or _machine_held(row):
            continue
        waker = row.get("waker_tid")
        waker = None if waker is None or pd.isna(waker) else int(waker)
        woken_by_link = source in ("ebpf", "engine") and waker in chain_tids
        # The engine stamps a link's signal before its upstream makes the wake-up call: when the switch
        # record names that upstream link as the waker, the link waited for it, however late it woke.
        if first_late is not None and _overlaps(row, first_late) and not woken_by_link:
            continue
        if source in ("ebpf", "engine") and waker is not None:
            if waker in chain_tids:  # woken by a link of its own chain: it waited for its upstream
                waits[i] = waker
        elif source == "engine" and waker is None and upstream_of.get(int(row["tid"])):
            waits[i] = upstream_of[int(row["tid"])][0]
        elif source == "proc":
            # /proc names no waker: a link's missed wake-up is a wait for its upstream unless the thread
            # that ran meanwhile (the suspect) is outside the chain, a possible lock holder.
            blamed = _blamed_tid(row)
            if blamed is None or blamed in chain_tids:
                waits[i] = None
        elif source == "ebpf" and waker is None and upstream_of.get(int(row["tid"])):
            waits[i] = upstream_of[int(row["tid"])][0]  # a hole in the record: its usual upstream
    candidates = [i for i in group.index if i not in waits]
    root_tid: int | None
    root_episode: int | None
    if source == "engine" and late is not None:
        in_group = [i for i in candidates if int(group.at[i, "tid"]) == late]
        candidates = in_group or candidates
    if candidates:
        # A candidate kept off the CPU by another candidate (who ran instead) is that one's victim.
        tids = {int(group.at[i, "tid"]) for i in candidates}
        if len(tids) > 1:  # of one thread, `tids - {its tid}` is empty: every candidate stays, none read
            causes = [i for i in candidates if _blamed_tid(narrow.loc[i]) not in tids - {int(group.at[i, "tid"])}]
            candidates = causes or candidates
        # The first in graph order, then the earliest: a hog on every CPU delays the driver and a client
        # still runnable in the cycle together, and the cycle's chain starts at the driver.
        root = min(candidates, key=lambda i: (order.get(int(group.at[i, "tid"]), np.inf), group.at[i, "start_ns"]))
        roles = [
            (i, "root" if i == root else ("upstream" if i in waits else "member"), waits.get(i)) for i in group.index
        ]
        row = group.loc[root]
        drivers = set(chain.loc[chain["driver"].astype(bool), "tid"].astype(int)) if len(chain) else set()
        verdict, evidence = _root_verdict(cap, row, chain_tids, rules, interval_ns, int(row["tid"]) in drivers)
        root_tid, root_comm, root_episode = int(row["tid"]), str(row["comm"]), int(root)
        blamed = _blamed_tid(row)  # a holder the switch record or /proc names outside the chain keeps `lock`
        named_holder = blamed is not None and blamed not in chain_tids
        if (
            source == "engine" and verdict in WAIT_VERDICTS and root_tid == late and root_tid not in drivers
            and not named_holder
        ):  # fmt: skip
            # The engine stamped this link signalled and then awake much later, and nothing outside the
            # chain held it: it was woken late, not waiting on a lock (a link still blocked in its previous
            # callback on a lock another thread holds shows that thread as its waker, or /proc's suspect).
            signalled = _engine_slow_wakeup(records, start, end, chain, interval_ns)
            if signalled is not None and signalled[0] == root_tid:
                said = f"the engine signalled {signalled[1]} and it ran {_ms(signalled[2])} later"
                verdict, evidence = "runqueue", f"{said} (the engine's own stamps); {evidence}"
    else:
        # Every member only waited: the head of the chain is the first late link.
        roles = [(i, "upstream", waits.get(i)) for i in group.index]
        head = _chain_head(chain, group, waits)
        root_tid, verdict, evidence = _head_verdict(
            cap, events, records, head, start, end, group, chain, rules, interval_ns
        )
        root_comm, root_episode = _comm_of(cap, root_tid), None
    inferred = source == "proc" and in_chain
    if inferred:
        evidence = "inferred from /proc (no wake-up record: the earliest link late in this cycle); " + evidence
    return {
        "start_ns": start,
        "end_ns": end,
        "duration_ns": end - start,
        "engine": engine if in_chain else None,
        "chain_source": source if in_chain else None,
        "root_tid": root_tid,
        "root_comm": root_comm,
        "root_verdict": verdict,
        "root_episode": root_episode,
        "inferred": bool(inferred),
        "waited": sum(1 for _, r, _ in roles if r == "upstream"),
        "members": len(group),
        "evidence": evidence,
        "roles": roles,
    }


def _machine_held(row: pd.Series) -> bool:
    """An unknown episode the machine held on CPU (hypervisor steal or interrupts, rules.machine_held):
    the link was not waiting for its upstream, it was itself held up."""
    return rules.machine_held(row["verdict"], row.get("uncounted_ns"), row.get("unknown_ns"))


def _comm_of(cap: Capture, tid: int | None) -> str:
    if tid is None:
        return "?"
    threads = cap.threads
    found = threads.loc[threads["tid"] == tid, "comm"]
    return str(found.iloc[-1]) if len(found) else "?"


def graph_rank(chain: pd.DataFrame) -> dict[int, float]:
    """Each link's place in its graph's order, inf where unknown. From /proc alone only the driver's place
    is known (order 0, the clients NaN); a NaN in a sort key is neither less nor more than 0, so min() kept
    whichever candidate came first, the earliest start: a client whose 2 ms window began before the hog
    was rooted ahead of the starved driver (CI beside stress-ng, test_incidents_real [proc])."""
    if not len(chain):
        return {}
    return {
        int(tid): float(place) if pd.notna(place) else np.inf
        for tid, place in zip(chain["tid"], chain["order"], strict=True)
    }


def _chain_head(chain: pd.DataFrame, group: pd.DataFrame, waits: dict[int, int | None]) -> int | None:
    """Where to look for the late link: the upstream link of the member first in graph order (then the
    earliest), else the driver of the chain, else the earliest member."""
    order = graph_rank(chain)
    ranked = sorted(group.index, key=lambda i: (order.get(int(group.at[i, "tid"]), np.inf), group.at[i, "start_ns"]))
    for i in ranked:
        if waits.get(i) is not None:
            return waits[i]
    if len(chain):
        drivers = chain[chain["driver"]]
        if len(drivers):
            return int(drivers["tid"].iloc[0])
    return int(group.at[ranked[0], "tid"]) if ranked else None


def _root_verdict(
    cap: Capture, row: pd.Series, chain: set[int], rules: IncidentRules, interval_ns: int, driver: bool = False
) -> tuple[str, str]:
    """The root episode's verdict and evidence. A wait asleep with no task outside the chain named as
    its cause (no waker, or an interrupt; /proc: no thread outside the chain ran meanwhile) is a late
    wake-up when the machine's evidence says so, and always for the chain's driver: it sleeps on its
    clock (a timer, a device's interrupt), never on a lock."""
    verdict = str(row["verdict"])
    evidence = str(row.get("evidence") or "")
    waker = row.get("waker_tid")
    known_waker = waker is not None and not pd.isna(waker) and int(waker) != 0
    if verdict == "lock" and known_waker and int(waker) not in chain:
        return "lock", evidence  # a holder outside the chain: a lock (its inversion is in the evidence)
    blamed = _blamed_tid(row)
    # What ran meanwhile, when named, counts only from outside the chain (a link ran its own cycle).
    outside_ran = blamed is not None and blamed not in chain
    # The driver sleeps on its clock: a thread outside the chain that /proc saw run meanwhile (jackd's own
    # non-real-time thread, in a real /proc run) is no lock holder of it; only a waker the switch record
    # names (above) would be.
    if verdict in WAIT_VERDICTS and (not outside_ran or (driver and not known_waker)):
        machine, gap = _machine_reading(cap, int(row["start_ns"]), int(row["end_ns"]), rules, interval_ns)
        if _strong(machine) and _machine_covers(cap, row, gap):
            return "late wake-up", f"{evidence}; {machine}"
        if driver:
            said = machine or "no task outside the graph ran instead"
            return "late wake-up", f"{evidence}; the driver waits for its clock alone: {said}"
    return verdict, evidence


def _strong(machine: str) -> bool:
    """Evidence that the machine, not a task, held the thread: hypervisor steal, interrupt time, or a
    gap every thread saw. CPU pressure alone is not: on a busy machine it always rises."""
    return any(word in machine for word in ("steal", "interrupt time", "the sampler itself"))


def _head_verdict(
    cap: Capture,
    events: _Wakeups,
    records: _EngineRecords,
    head: int | None,
    start: int,
    end: int,
    group: pd.DataFrame,
    chain: pd.DataFrame,
    rules: IncidentRules,
    interval_ns: int,
) -> tuple[int | None, str, str]:
    """(root tid, verdict, evidence) when every member only waited: walk up the chain from `head` (the
    link that woke the most upstream member) while the link above it was switched in late too; the last
    late link is the root, judged by its own switch-ins (eBPF). `late wake-up` when it was woken late,
    `runqueue` when most of its lateness was spent runnable after its wake-up."""
    machine = machine_evidence(cap, start, end, rules, interval_ns)
    # The chain's engine's period where the chain is the engine's: a member known by its rate alone has
    # none of its own. Else (a chain from eBPF or /proc) the members' own.
    engine = _chain_engine(chain)
    periods = pd.to_numeric(group["period_ns"], errors="coerce").dropna()
    period = float(periods.median()) if len(periods) else np.nan
    if engine is not None and engine in records.periods.index:
        period = float(records.periods[engine])
    upstream_of = dict(zip(chain["tid"].astype(int), chain["upstream"], strict=True)) if len(chain) else {}
    timing = _link_timing(events, head, start, end, period)
    seen = {head}
    while timing is not None and head is not None:
        above = [u for u in upstream_of.get(head, ()) if u not in seen]
        later = []
        for u in above:
            t = _link_timing(events, u, start, end, period)
            if t is not None and t["late"]:
                later.append((u, t))
        if not later:
            break
        head, timing = later[0]
        seen.add(head)
    waited = f"{len(group)} link{'s' if len(group) != 1 else ''} waited for it"
    name = f"{_comm_of(cap, head)} ({head})"
    if timing is not None and timing["late"]:
        text = (
            f"{name} was switched in {_ms(timing['gap_ns'])} after its previous cycle (period {_ms(period)}): "
            f"{_ms(timing['late_ns'])} late, below its own stall bar"
        )
        if timing["waker"]:
            text += f"; woken by {timing['waker']}"
        if timing["ready_ns"] >= 0.5 * timing["late_ns"]:
            text += f"; runnable {_ms(timing['ready_ns'])} after its wake-up"
            return head, "runqueue", "; ".join(p for p in (text, waited) if p)
        return head, "late wake-up", "; ".join(p for p in (text, machine, waited) if p)
    text = f"every member only waited for its upstream; the head of the chain {name} has no episode"
    text += " and no switch record" if timing is None else " and no late switch-in"
    drivers = chain.loc[chain["driver"].astype(bool), "tid"].astype(int).tolist() if len(chain) else []
    gap = _cycle_start_gap(records, start, end, _chain_engine(chain))
    if timing is None and drivers and gap is not None and gap[0] > float(period_limit_ns(np.array([gap[1]]), 0.0)[0]):
        # No switch record, but the engine's own stamps: the cycle began late, so its driver woke late.
        head = drivers[0]
        said = f"the engine's cycle started {_ms(gap[0])} after the previous one (period {_ms(gap[1])})"
        return (
            head,
            "late wake-up",
            "; ".join(p for p in (f"{_comm_of(cap, head)} ({head}): {said}", machine, waited) if p),
        )
    signalled = _engine_slow_wakeup(records, start, end, chain, interval_ns) if timing is None else None
    if signalled is not None:
        # No switch record, but the engine's own stamps: it signalled this link on time and the link ran
        # only later, past the tolerance a periodic thread has; everything downstream waited for it.
        # Runnable after its wake-up, as the eBPF rule above calls a lateness spent after the wake-up.
        tid, name, woke_ns = signalled
        said = f"the engine signalled {name} and it ran {_ms(woke_ns)} later (the engine's own stamps)"
        return tid, "runqueue", "; ".join(p for p in (f"{_comm_of(cap, tid)} ({tid}): {said}", machine, waited) if p)
    if _strong(machine):
        return head, "late wake-up", f"{text}; {machine}"
    return head, "unknown", "; ".join(p for p in (text, machine) if p)


def _engine_slow_wakeup(
    records: _EngineRecords, start: int, end: int, chain: pd.DataFrame, interval_ns: int
) -> tuple[int, str, float] | None:
    """The first link (signal order) the engine's records show woken late over [start - period, end]:
    awake - signal beyond a periodic thread's tolerance (rules.wake_limit_ns less the period, the bar of
    a missed wake-up), as (its thread, its client name, awake - signal); None without engine nodes or
    such a link. Below the engine's own late share (IncidentRules.engine_late_share) the cycle can still
    end in time, yet the links after it were woken that much late: what their episodes show. Each node is
    judged against its own engine's period, and only the chain's engine's nodes when the chain is from
    the engine's tables (_chain_engine)."""
    if not records.clients or chain.empty:
        return None
    periods = _periods_of(records.periods, _chain_engine(chain))
    if periods.empty:
        return None
    every = records.nodes[["t_ns", "engine", "name", "signal_ns", "awake_ns", "finish_ns"]]
    period = every["engine"].astype(str).map(periods).to_numpy(np.float64)  # NaN: a node of no engine in scope
    every = every.assign(inc_period=period)
    every = every[((every["t_ns"] >= start - 3 * period) & (every["t_ns"] <= end)).to_numpy(dtype=bool)]
    every = every.sort_values("t_ns", kind="stable")
    nodes = every[(every["t_ns"] >= start - every["inc_period"]).to_numpy(dtype=bool)]
    woke = (nodes["awake_ns"].astype("Float64") - nodes["signal_ns"].astype("Float64")).astype(np.float64)
    node_period = nodes["inc_period"].to_numpy(np.float64)
    tolerance = rules.wake_limit_ns(node_period, interval_ns) - node_period
    late = nodes[(woke > tolerance).fillna(False).to_numpy(dtype=bool)]
    for _, node in late.sort_values(["t_ns", "signal_ns"]).iterrows():
        before = every[
            (every["name"].astype(str) == str(node["name"])).to_numpy()
            & (every["engine"].astype(str) == str(node["engine"])).to_numpy()
            & (every["t_ns"] < node["t_ns"]).to_numpy()
        ]
        if before.empty or pd.isna(before["finish_ns"].iloc[-1]) or before["finish_ns"].iloc[-1] > node["signal_ns"]:
            continue  # still inside its previous callback (blocked there, on a lock): not woken late
        tid = _link_of_client(records.cap, str(node["name"]), chain, str(node["engine"]))
        if tid is not None:
            return tid, str(node["name"]), float(node["awake_ns"] - node["signal_ns"])
    return None


def _chain_engine(chain: pd.DataFrame) -> str | None:
    """The engine whose tables a chain was built from (its links' `engine`), else None (a chain from eBPF
    wake-ups or /proc periods: of no engine the capture names)."""
    if chain.empty or "source" not in chain or not (chain["source"] == "engine").all():
        return None
    return str(chain["engine"].iloc[0])


def _periods_of(periods: pd.Series, engine: str | None) -> pd.Series:
    """engine -> its median period (_EngineRecords.periods): `engine`'s alone when known."""
    return periods[periods.index == engine] if engine is not None else periods


def _link_of_client(cap: Capture, name: str, chain: pd.DataFrame, engine: str | None = None) -> int | None:
    """The chain link (process thread) of an engine client (of `engine`, when given: the two engines may
    each have a client of that name), by its pid (engine_clients); None if none."""
    clients = cap.table("engine_clients")
    if engine is not None:
        clients = clients[(clients["engine"].astype(str) == engine).to_numpy()]
    pid = clients.loc[clients["name"].astype(str) == name, "pid"].dropna()
    if pid.empty:
        return None
    threads = cap.threads
    tids = set(threads.loc[threads["pid"] == int(pid.iloc[-1]), "tid"].astype(int)) & set(chain["tid"].astype(int))
    return min(tids) if tids else None


def _cycle_start_gap(records: _EngineRecords, start: int, end: int, engine: str | None) -> tuple[float, float] | None:
    """The longest time between two consecutive cycle starts of `engine` (its own stamps) that ends within
    its period of [start, end], and that period; None without its cycles there. `engine` None (a chain not
    from the engine's tables): the one engine of the capture; with several, which one the chain runs is
    unknown, and None."""
    cycles = records.cycles
    names = set(cycles["engine"].astype(str))
    if engine is None and len(names) == 1:
        engine = names.pop()
    cycles = cycles[(cycles["engine"].astype(str) == engine).to_numpy()]
    if len(cycles) < 2:
        return None
    period = float(records.periods.get(engine, np.nan))
    t = np.sort(cycles["t_ns"].to_numpy(np.int64))
    k = np.flatnonzero((t[1:] >= start) & (t[1:] <= end + period)) + 1
    if not len(k) or not np.isfinite(period):
        return None
    return float((t[k] - t[k - 1]).max()), period


@dataclass(frozen=True)
class _EngineRecords:
    """The engine's tables as every incident of one find_incidents call reads them, read and derived once:
    each engine's median period (analyses.engine.engine_period_medians: the one period of an engine in
    this module), its cycles, and its nodes with whether each was late (node_lateness: a node's lateness
    needs its own row and its engine's cycle starts alone, so one reading of the whole table serves every
    incident; it was rerun on the whole table per candidate)."""

    cap: Capture
    periods: pd.Series  # engine -> its median period_ns, shortest first (empty without engine cycles)
    cycles: pd.DataFrame  # engine_cycles (empty, with its columns, without)
    nodes: pd.DataFrame  # engine_nodes with node_late (boolean, NA unknown) and link_late (_late_nodes)
    clients: bool  # whether the capture has engine_clients: a node's thread is found through them


def _engine_records(cap: Capture, rules: IncidentRules | None = None) -> _EngineRecords:
    names = set(cap.table_names)
    # A table the capture lacks is read with columns named: a whole-table read is kept in the capture and
    # then listed among its tables (the lab's missed deadlines would give way to an empty engine_cycles).
    cycles = cap.table("engine_cycles", None if "engine_cycles" in names else ["t_ns", "engine", "period_ns"])
    nodes = cap.table("engine_nodes", None if "engine_nodes" in names else ["t_ns", "engine", "name"])
    clients = "engine_nodes" in names and "engine_clients" in names
    if clients and len(nodes) and len(cycles):
        nodes = nodes.assign(node_late=node_lateness(nodes, cycles)["late"])
    else:
        nodes = nodes.assign(node_late=pd.Series(pd.NA, index=nodes.index, dtype="boolean"))
    periods = engine_period_medians(cycles)
    if len(nodes) and "awake_ns" in nodes:  # each row against its own engine's period
        node_period = pd.Series(nodes["engine"].astype(str).map(periods).to_numpy(np.float64), index=nodes.index)
        nodes = nodes.assign(link_late=_late_nodes(nodes, node_period, rules or IncidentRules()))
    else:
        nodes = nodes.assign(link_late=np.zeros(len(nodes), dtype=bool))
    return _EngineRecords(cap=cap, periods=periods, cycles=cycles, nodes=nodes, clients=clients)


class _Wakeups:
    """Switch-ins and wakings of the links, read from the capture once per find_incidents call."""

    def __init__(self, cap: Capture) -> None:
        self.cap = cap
        self._switch_ins: dict[int, np.ndarray] | None = None
        self._wakings: dict[int, pd.DataFrame] | None = None

    def switch_ins(self, tid: int) -> np.ndarray | None:
        if self._switch_ins is None:
            if "sched_switch" not in self.cap.table_names:
                return None
            sw = self.cap.table("sched_switch", columns=["t_ns", "next_tid"])
            self._switch_ins = {
                int(k): np.sort(v.to_numpy(np.int64)) for k, v in sw.groupby("next_tid", observed=True)["t_ns"]
            }
        return self._switch_ins.get(tid, np.zeros(0, np.int64))

    def wakings(self, tid: int) -> pd.DataFrame | None:
        if self._wakings is None:
            if "sched_wakeup" not in self.cap.table_names:
                return None
            columns = ["t_ns", "kind", "tid", "waker_tid", "waker_comm", "waker_context"]
            wk = self.cap.table("sched_wakeup", columns=columns)
            wk = wk[(wk["kind"].astype(str) == "waking").to_numpy()]
            self._wakings = {int(k): v.sort_values("t_ns") for k, v in wk.groupby("tid", observed=True)}
        return self._wakings.get(tid)


def _link_timing(events: _Wakeups, tid: int | None, start: int, end: int, period: float) -> dict[str, Any] | None:
    """A link's switch-ins around [start, end] (eBPF): its longest gap between two, how late that is
    against its period and tolerance, the runnable time before that switch-in (from its wake-up) and
    who woke it. None without a switch record of it."""
    if tid is None or np.isnan(period):
        return None
    t = events.switch_ins(tid)
    if t is None:
        return None
    t = t[(t >= start - 2 * period) & (t <= end + period)]
    if len(t) < 2:
        return None
    gaps = np.diff(t)
    k = int(gaps.argmax())
    gap = float(gaps[k])
    limit = float(rules.period_limit_ns(np.array([period]), 0.0)[0])
    switch_in = int(t[k + 1])
    ready, waker = 0.0, ""
    mine = events.wakings(tid)
    if mine is not None:
        mine = mine[(mine["t_ns"] <= switch_in).to_numpy() & (mine["t_ns"] > t[k]).to_numpy()]
        if len(mine):
            last = mine.iloc[-1]
            ready = float(switch_in - int(last["t_ns"]))
            if str(last["waker_context"]) == "task":
                waker = f"{last['waker_comm']} ({int(last['waker_tid'])})"
            else:
                waker = f"an interrupt ({last['waker_context']})"
    return {"gap_ns": gap, "late_ns": gap - period, "late": gap > limit, "ready_ns": ready, "waker": waker}


def machine_evidence(cap: Capture, start: int, end: int, rules: IncidentRules, interval_ns: int) -> str:
    """What the machine shows over [start, end]: /proc/stat steal and irq+softirq deltas, PSI cpu some,
    and a gap in the sampler's own ticks (every thread unread at once). Empty when it shows nothing."""
    return _machine_reading(cap, start, end, rules, interval_ns)[0]


def _machine_reading(cap: Capture, start: int, end: int, rules: IncidentRules, interval_ns: int) -> tuple[str, int]:
    """machine_evidence's text, and the sampler's gap it reports (0 when it reports none)."""
    parts = []
    system = cap.system
    span, grew = machine_growth(system, [start], [end], ("steal", "irq", "softirq", "psi_cpu_some_us"))
    if not np.isnan(span[0]):
        jiffy_ns = _jiffy_ns(cap)
        where = f"over the {_ms(span[0])} around it"
        steal = grew["steal"][0] * jiffy_ns
        irq = (grew["irq"][0] + grew["softirq"][0]) * jiffy_ns
        if steal >= rules.machine_evidence_min_ns:
            parts.append(f"hypervisor steal {_ms(steal)} {where} (/proc/stat)")
        if irq >= rules.machine_evidence_min_ns:
            parts.append(f"interrupt time {_ms(irq)} {where} (/proc/stat irq+softirq)")
        if "psi_cpu_some_us" in system:
            psi = grew["psi_cpu_some_us"][0] * 1000
            if psi >= rules.machine_evidence_min_ns:
                parts.append(f"CPU pressure (PSI cpu some) rose {_ms(psi)} {where}")
    gap = _sampler_gap(cap, start, end, interval_ns)
    if gap is not None and gap >= rules.sampler_gap_intervals * interval_ns:
        parts.append(f"the sampler itself read nothing for {_ms(gap)} (every thread unseen at once)")
        return "; ".join(parts), gap
    return "; ".join(parts), 0


def _jiffy_ns(cap: Capture) -> int:
    """One /proc/stat tick in ns (USER_HZ as the capture's host reported it; 100 by default)."""
    return 1_000_000_000 // cap.clk_tck


def _machine_covers(cap: Capture, row: pd.Series, sampler_gap_ns: int) -> bool:
    """Whether what the machine certainly took can cover the episode's stall: the time it held one CPU
    (machine.held_one_cpu_ns), or the sampler's own gap when every thread went unread at once (as
    machine_evidence reported it). A 10 ms steal tick somewhere on the machine in the 50-100 ms around a
    16 ms lock wait, or a 5.5 ms gap in the sampler during an 18 ms one, does not make it a late wake-up
    (JACK lock injections in CI read so)."""
    start, end = int(row["start_ns"]), int(row["end_ns"])
    stall = float(row.get("stall_ns") or 0)
    held = held_one_cpu_ns(cap.system, start, end, _jiffy_ns(cap))
    return max(held, float(sampler_gap_ns)) >= stall


def _sampler_gap(cap: Capture, start: int, end: int, interval_ns: int) -> int | None:
    """The longest time between two consecutive ticks of the sampler that began within [start, end]
    (give or take two intervals), or None with fewer than two there."""
    from analyses.source import tick_start_times

    t = tick_start_times(cap)
    lo = int(np.searchsorted(t, start - 2 * interval_ns, side="left"))
    hi = int(np.searchsorted(t, end + 2 * interval_ns, side="right"))
    return int(np.diff(t[lo:hi]).max()) if hi - lo >= 2 else None


def _overlaps(row: pd.Series, late: tuple[int, int, int]) -> bool:
    """Whether an episode is of the late link and overlaps its late cycle (tid, from_ns, to_ns)."""
    return int(row["tid"]) == late[0] and int(row["start_ns"]) <= late[2] and int(row["end_ns"]) >= late[1]


def _engine_first_late(
    records: _EngineRecords, start: int, end: int, chain: pd.DataFrame, rules: IncidentRules
) -> tuple[int, int, int] | None:
    """The first link the engine's own records show late over [start, end]: the driver when a cycle
    started engine_late_share of a period or more after the previous one's start plus a period (the
    driver woke late: nothing downstream could run), else the first node in signal order woken
    (awake - signal) or running (finish - awake) at least engine_late_share of the period. Its thread's
    tid and the span of its late cycle (its start to its finish, or to the incident's end unfinished),
    or None. The chain's engine's records alone (_chain_engine), each engine's against its own period:
    a PipeWire cycle at 5.333 ms is not late by JACK's 2.667 ms, nor are two engines' starts one series."""
    nodes, cycles = records.nodes, records.cycles
    if not records.clients or nodes.empty or cycles.empty:
        return None
    periods = _periods_of(records.periods, _chain_engine(chain))
    nodes = nodes[nodes["engine"].astype(str).isin(periods.index).to_numpy()]
    cycles = cycles[cycles["engine"].astype(str).isin(periods.index).to_numpy()]
    period = pd.Series(nodes["engine"].astype(str).map(periods).to_numpy(np.float64), index=nodes.index)
    # Cycles that ran over [start, end]: a /proc episode of a callback blocked inside its call may only
    # begin a period or more after its cycle started (its missed wake-ups are what /proc sees).
    finish = nodes["finish_ns"].astype("Float64").fillna(nodes["t_ns"].astype("Float64") + period)
    nodes = nodes[((nodes["t_ns"] <= end) & (finish >= start)).to_numpy(dtype=bool)]
    finish = finish[nodes.index]
    late = nodes[nodes["link_late"].to_numpy(dtype=bool)]
    # The earliest cycle of an engine in scope that started late: (its due time, its start).
    slow_start: tuple[int, int] | None = None
    for name, engine_period in periods.items():
        starts = np.sort(cycles.loc[(cycles["engine"].astype(str) == name).to_numpy(), "t_ns"].to_numpy(np.int64))
        k = np.flatnonzero((starts[1:] >= start) & (starts[:-1] <= end)) + 1
        slow = k[starts[k] - starts[k - 1] >= (1 + rules.engine_late_share) * engine_period]
        if len(slow) and (slow_start is None or int(starts[slow[0]]) < slow_start[1]):
            slow_start = int(starts[slow[0] - 1] + engine_period), int(starts[slow[0]])
    drivers = chain.loc[chain["driver"].astype(bool), "tid"].astype(int).tolist() if len(chain) else []
    if slow_start is not None and drivers and (late.empty or slow_start[1] <= int(late["t_ns"].min())):
        return drivers[0], *slow_start
    if late.empty:
        return None
    first = late.sort_values(["t_ns", "signal_ns"]).iloc[0]
    span_end = max(int(finish.loc[first.name]), end) if pd.isna(first["finish_ns"]) else int(first["finish_ns"])
    tid = _link_of_client(records.cap, str(first["name"]), chain, str(first["engine"]))
    return (tid, int(first["t_ns"]), span_end) if tid is not None else None


def _late_nodes(nodes: pd.DataFrame, period: pd.Series, rules: IncidentRules) -> np.ndarray:
    """Per engine_nodes row (with node_late): whether the node was woken (awake - signal) or ran (finish -
    awake) engine_late_share of `period` (its engine's, per row) or more: a late link of its cycle."""
    woken = nodes["awake_ns"].astype("Float64") - nodes["signal_ns"].astype("Float64")
    ran = nodes["finish_ns"].astype("Float64") - nodes["awake_ns"].astype("Float64")
    # Awake and never seen finishing, and late (the next cycle came before it finished): it ran past its period.
    late_node = nodes["node_late"]
    unfinished = (nodes["awake_ns"] >= nodes["signal_ns"]) & nodes["finish_ns"].isna() & late_node.fillna(False)
    ran = ran.mask(unfinished.fillna(False), period)
    late = (woken >= rules.engine_late_share * period) | (ran >= rules.engine_late_share * period)
    return late.fillna(False).to_numpy(dtype=bool)


def _add_cycles(cap: Capture, incidents: pd.DataFrame, records: _EngineRecords, rule: IncidentRules) -> pd.DataFrame:
    """The engine cycle an incident is about and whether the engine reported it late.

    With the engine's cycles: `cycle` is the first cycle of the incident's own engine (of the capture's
    one engine when the incident is of no engine's chain; NA with several) its records show late near the
    incident (ended past its period, a node counted late, or started after cycles that never started:
    analyses.engine.cycle_starts), else the cycle running when it began; its number is the engine's own
    counter, else counted on the driver's clock (jack2 has none). `xruns` counts the engine's xruns
    (analyses.engine.engine_xruns, their reports merged) joined to the incident as `forensics xruns`
    joins them (by engine and time: _incident_of); `xrun` is whether there is one (None when the capture
    has no xrun record). Without the engine's tables, the lab's callbacks that ended past their deadline."""
    n = len(incidents)
    on_time = np.zeros(n, dtype=bool)
    cycle = pd.array([pd.NA] * n, dtype="Int64")
    xrun: list[bool | None] = [None] * n
    xruns = np.zeros(n, dtype=np.int64)
    starts = incidents["start_ns"].to_numpy(np.int64)
    ends = incidents["end_ns"].to_numpy(np.int64)
    names = set(cap.table_names)
    if "engine_cycles" in names and not records.cycles.empty:
        cycles = records.cycles
        begun = cycle_starts(cycles)
        ended = engine_cycle_ends(cycles, cap.engine_nodes)
        begun = begun.merge(ended[["t_ns", "engine", "missed"]], on=["t_ns", "engine"], how="left")
        begun = begun.sort_values("t_ns", kind="stable").reset_index(drop=True)
        # Each engine's cycles against its own period, numbered by its own counter: an incident's cycle is
        # one of its own engine's (JACK and PipeWire may run at once).
        per_engine = {}
        nodes = records.nodes
        late_links = nodes.loc[nodes["link_late"].to_numpy(dtype=bool), ["engine", "t_ns"]]
        for name, mine in begun.groupby(begun["engine"].astype(str), sort=True):
            t = mine["t_ns"].to_numpy(np.int64)
            # A cycle with a link the engine stamped late (_late_nodes) is late for the incidents, as it
            # is for their roots (_engine_first_late), though it may still have met its deadline.
            linked = np.isin(t, late_links.loc[(late_links["engine"].astype(str) == name).to_numpy(), "t_ns"])
            per_engine[str(name)] = (
                t,
                float(records.periods.get(str(name), np.nan)),
                (mine["missed_before"].to_numpy(np.int64) > 0) | mine["missed"].fillna(False).to_numpy(dtype=bool),
                mine["cycle"].to_numpy(np.int64),
                mine["missed"].notna().to_numpy(dtype=bool),
                linked,
            )
        engine_of = _engines_of(incidents, set(per_engine))
        around: dict[int, np.ndarray] = {}  # each incident's cycles, a period either side of it
        for i, engine in enumerate(engine_of):
            if engine is None:
                continue
            t, period, late, numbers, _, _ = per_engine[engine]
            around[i] = np.flatnonzero((t >= starts[i] - period) & (t <= ends[i] + period))
            near = around[i][late[around[i]]]
            k = int(near[0]) if len(near) else int(np.searchsorted(t, starts[i], side="right")) - 1
            cycle[i] = int(numbers[max(k, 0)])
        if "xruns" in names:
            reported = engine_xruns(cap)
            owners = _xrun_owners(cap, incidents)
            spans = zip(reported["t_ns"].to_numpy(np.int64), reported["end_ns"].to_numpy(np.int64), strict=True)
            for (lo, hi), engine in zip(spans, reported["engine"].astype(str), strict=True):
                hit = _incident_of(int(lo), int(hi), engine, starts, ends, owners, after=True)
                if hit is not None:
                    xruns[hit] += 1
            xrun = [bool(v) for v in xruns]
        for i, mine in around.items():  # after the xruns: an incident with one is not on time
            t, period, late, _, known, linked = per_engine[str(engine_of[i])]
            # Each cycle around it with the gap from the start recorded before it: a first cycle with none
            # before is no whole record.
            after = mine[mine > 0]
            on_time[i] = rules.engine_on_time(
                t[after] - t[after - 1], period, late[after] | linked[after], known[after], int(xruns[i]),
                rule.engine_late_share,
            )  # fmt: skip
    else:
        lab = cap.cycles
        if not lab.empty:
            late_lab = lab[lab["end_ns"] > lab["deadline_ns"]]
            for i in range(n):
                hit = late_lab[(late_lab["end_ns"] >= starts[i]) & (late_lab["start_ns"] <= ends[i])]
                xruns[i] = len(hit)
                xrun[i] = bool(len(hit))
    return incidents.assign(cycle=cycle, xrun=xrun, xruns=xruns, on_time=on_time)


# --------------------------------------------------------------------------------------------------
# Xruns: one row per engine-reported xrun or missed deadline, joined to its incident


XRUN_COLUMNS = [
    "t_ns", "kind", "client", "delay_us", "reports", "source", "incident", "root_comm", "root_client", "root_verdict"
]  # fmt: skip


def xrun_rows(cap: Capture, incidents: pd.DataFrame) -> pd.DataFrame:
    """Engine-reported xruns (one row per xrun, its reports merged: analyses.engine.engine_xruns) and
    missed deadlines (engine_cycles ending past a period, or the lab's callbacks past their deadline),
    each with the incident it falls in (null: none)."""
    names = set(cap.table_names)
    frames = []
    if "xruns" in names:
        x = engine_xruns(cap)
        frames.append(
            pd.DataFrame(
                {
                    "t_ns": x["t_ns"].to_numpy(np.int64),
                    "kind": "xrun",
                    "client": x["client"].astype(object).to_numpy(),
                    "delay_us": pd.to_numeric(x["delay_us"], errors="coerce").to_numpy(),
                    "reports": x["reports"].to_numpy(np.int64),
                    "source": x["source"].astype(str).to_numpy(),
                    "_from": x["t_ns"].to_numpy(np.int64),
                    "_to": x["end_ns"].to_numpy(np.int64),
                    "_reported": True,
                    "_engine": x["engine"].astype(str).to_numpy(dtype=object),
                }
            )
        )
    if "engine_cycles" in names:
        c = cap.table("engine_cycles")
        over = (c["end_ns"].astype("Float64") - c["t_ns"].astype("Float64")) > c["period_ns"].astype("Float64")
        c = c[over.fillna(False).to_numpy()]
        frames.append(
            pd.DataFrame(
                {
                    "t_ns": c["t_ns"].to_numpy(np.int64),
                    "kind": "missed deadline",
                    "client": c["driver"].astype(object).to_numpy(),
                    "delay_us": ((c["end_ns"] - c["t_ns"] - c["period_ns"]) / 1000.0).to_numpy(),
                    "reports": 1,
                    "source": "engine_cycles",
                    "_from": c["t_ns"].to_numpy(np.int64),
                    "_to": c["end_ns"].to_numpy(np.int64),
                    "_reported": False,
                    "_engine": c["engine"].astype(str).to_numpy(dtype=object),
                }
            )
        )
    elif not cap.cycles.empty:
        lab = cap.cycles
        late = lab[lab["end_ns"] > lab["deadline_ns"]]
        frames.append(
            pd.DataFrame(
                {
                    "t_ns": late["deadline_ns"].to_numpy(np.int64),
                    "kind": "missed deadline",
                    "client": [_comm_of(cap, int(t)) for t in late["tid"]],
                    "delay_us": ((late["end_ns"] - late["deadline_ns"]) / 1000.0).to_numpy(),
                    "reports": 1,
                    "source": "cycles",
                    "_from": late["start_ns"].to_numpy(np.int64),
                    "_to": late["end_ns"].to_numpy(np.int64),
                    "_reported": False,
                    "_engine": None,  # the lab's callbacks: of no engine the capture names
                }
            )
        )
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in XRUN_COLUMNS})
    out = pd.concat(frames, ignore_index=True).sort_values("t_ns", kind="stable").reset_index(drop=True)
    incident = np.full(len(out), -1, dtype=np.int64)
    if len(incidents):
        starts = incidents["start_ns"].to_numpy(np.int64)
        ends = incidents["end_ns"].to_numpy(np.int64)
        numbers = incidents["incident"].to_numpy(np.int64)
        owners = _xrun_owners(cap, incidents)
        spans = zip(out["_from"].to_numpy(np.int64), out["_to"].to_numpy(np.int64), out["_reported"], strict=True)
        for i, ((lo, hi, reported), engine) in enumerate(zip(spans, out["_engine"], strict=True)):
            k = _incident_of(int(lo), int(hi), engine, starts, ends, owners, after=bool(reported))
            incident[i] = -1 if k is None else int(numbers[k])
    out["incident"] = pd.array([None if v < 0 else int(v) for v in incident], dtype="Int64")
    roots = incidents.set_index("incident") if len(incidents) else None

    def of_root(name: str, value: Callable[[Any], Any] = lambda v: v) -> pd.Series:
        # dtype object: None stays None where no incident (pandas 3 makes a list of names and None a string
        # column with NaN, which a view prints as "nan").
        values = [
            value(roots.at[int(i), name]) if roots is not None and not pd.isna(i) else None for i in out["incident"]
        ]
        return pd.Series(values, index=out.index, dtype=object)

    out["root_comm"] = of_root("root_comm")
    out["root_client"] = of_root("root_client", _client_name)
    out["root_verdict"] = of_root("root_verdict")
    return out[XRUN_COLUMNS]


def _engines_of(incidents: pd.DataFrame, engines: set[str]) -> list[str | None]:
    """Each incident's engine among `engines`: its chain's, else the capture's one engine (an incident of no
    engine's chain: a thread of no client, a chain from eBPF or /proc, labelled by its own chain); None
    with several, where whose it is is unknown."""
    own = incidents["engine"].tolist() if "engine" in incidents else [None] * len(incidents)
    only = next(iter(engines)) if len(engines) == 1 else None
    return [str(e) if isinstance(e, str) and e in engines else only for e in own]


def _xrun_owners(cap: Capture, incidents: pd.DataFrame) -> np.ndarray:
    """Each incident's engine for joining xruns and missed deadlines to it (_engines_of among the engines
    whose cycles or xruns the capture holds), as an object array."""
    engines = set(cap.table("engine_cycles", columns=["engine"])["engine"].astype(str))
    engines |= set(cap.table("xruns", columns=["engine"])["engine"].astype(str))
    return np.array(_engines_of(incidents, engines), dtype=object)


def _incident_of(
    lo: int, hi: int, engine: str | None, starts: np.ndarray, ends: np.ndarray, owners: np.ndarray, *, after: bool
) -> int | None:
    """_covering_incident among the incidents of the xrun's own engine (`owners`: each incident's, from
    _xrun_owners): JACK and PipeWire may run at once, and one engine's xrun is no incident of the other's
    however near in time. `engine` None (the lab's callbacks, of no engine): any incident."""
    mine = np.flatnonzero(owners == engine) if engine is not None else np.arange(len(starts))
    k = _covering_incident(lo, hi, starts[mine], ends[mine], after=after)
    return None if k is None else int(mine[k])


def _covering_incident(lo: int, hi: int, starts: np.ndarray, ends: np.ndarray, *, after: bool) -> int | None:
    """The position of the incident an xrun or a missed deadline spanning [lo, hi] belongs to: the one
    that overlaps it (the latest to begin, when several do; for a report, first the latest to begin by
    its first report), else the nearest within XRUN_JOIN_NS. An
    engine reports an xrun after its late cycle (`after`: JACK ~0.3 ms after the starved driver ran
    again), so an incident that ended before the report comes first; a missed deadline's cycle may
    begin before the episode's first window, so one that begins after it comes first."""
    if after:
        # A report follows the late cycle it reports: an incident that began by its first report and
        # ended at most XRUN_JOIN_NS before it comes before one that began later, even one the merged
        # reports overlap (recorded: a starved driver's incident ended 0.7 ms before the first report,
        # and the clients' catch-up 13 ms later was within the xrun's 51 ms of reports and log lines).
        began = np.flatnonzero((starts <= lo) & (ends >= lo - XRUN_JOIN_NS))
        if len(began):
            return int(began[np.argmax(starts[began])])
    overlap = np.flatnonzero((starts <= hi) & (ends >= lo))
    if len(overlap):
        return int(overlap[np.argmax(starts[overlap])])
    before = np.flatnonzero((ends < lo) & (ends >= lo - XRUN_JOIN_NS))
    later = np.flatnonzero((starts > hi) & (starts <= hi + XRUN_JOIN_NS))
    nearest_before = int(before[np.argmax(ends[before])]) if len(before) else None
    nearest_after = int(later[np.argmin(starts[later])]) if len(later) else None
    first, second = (nearest_before, nearest_after) if after else (nearest_after, nearest_before)
    return first if first is not None else second
