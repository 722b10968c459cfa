"""Real captures of a starved JACK graph as fixtures (captures/jack-starved-*.ssf): the incident analysis tested
without a live graph, the same answer every run.

captures/jack-starved-ebpf.ssf  catch-load --ebpf --jack --taskstats none of jackd (dummy, 128 frames), fluidsynth
                                and two jalv in series, starved twice for 12 ms by a SCHED_FIFO 80 hog on every CPU
captures/jack-starved-proc.ssf  the same from /proc alone (catch-load --jack --taskstats none)
captures/jack-machine-held.ssf  1.2 s cut (tests/real_captures.cut) of the live recording of
                                tests/test_incidents_real.py (four jalv, catch-load --ebpf --jack): the machine
                                held jalv p0 on CPU 1.3 ms its own clock did not count, and p1, signalled by it,
                                woke 1.4 ms late by the engine's stamps
captures/jack-signalled-late.ssf the same kind of cut of another run: the machine held fluidsynth, p0 woke
                                1.45 ms after its signal; read from /proc alone with the engine's tables
captures/jack-driver-suspect.ssf the same kind of cut of a run at a high load (hypervisor steal): jackd's driver
                                missed a wake-up while jackd's own non-real-time thread ran
captures/pipewire-late-client.ssf 1.3 s cut of tests/test_incident_causes_real.py's PipeWire recording
                                (headless PipeWire, the cue client through pw-jack, catch-load --ebpf): a hog
                                starvation, then the client's callback spinning 20 ms (a late client)
captures/jack-client-spins.ssf  jackd (dummy, 128 frames) and the cue client, catch-load --ebpf --jack following
                                jackd's log, while the client spun 20 ms three times: xrun callbacks and jackd's
                                "client = cue was not finished" lines (tests/real_captures.record_client_spins)
captures/jack-recorder-first.ssf the same spins as a new user records them: catch-load --match '^jackd$'
                                --children first, then jackd (its output to a file) and the cue client
                                (tests/real_captures.record_recorder_first)
captures/jack-shapes-recorder-first.ssf issue 22's graph, recorded as a new user does (catch-load --ebpf --match
                                '^jackd$' --children first): fluidsynth into four jalv in series (calf
                                Equalizer8Band, Compressor, Reverb with MIDI/atom ports unconnected; lsp
                                compressor_stereo) and ecasound -r running the same four in parallel (an engine
                                thread at FIFO 50 beside its process thread), starved three times for 12 ms by a
                                SCHED_FIFO 80 hog (`python bench/real_graph_shapes.py --fixture PATH`)
captures/jack-midi-norealtime-recorder-first.ssf another shape, recorded first from /proc alone: jackd
                                --no-realtime (every thread SCHED_OTHER, 512 frames), jack_midiseq's MIDI into
                                jack_midisine feeding two parallel chains of two jalv, jack_metro beside, starved
                                three times for 30 ms (`python bench/real_graph_shapes.py --engine jack-midi
                                --no-realtime --fixture PATH`); kept from the recording's start, the server's
                                start and the clients registering included

The first two and the last made by `python -m tests.real_captures captures/` on the project's VM (2 CPUs, kernel 6.18);
each says how it was made in its metadata (meta["made_by"]: the command, the graph, the hog and the span
of every starvation).
Goldens: `forensics stalls` (incidents, the default view) and `forensics xruns` of each, in tests/golden/;
when a change to an analysis is meant to change them, regenerate with
`FORENSICS_REGOLD=1 python -m pytest tests/test_real_captures.py` and review the diff of tests/golden/.
"""

from __future__ import annotations

import functools

import pytest

import forensics
from analyses.engine import engine_xruns, node_lateness
from analyses.incidents import xrun_rows
from tests import real_captures
from tests.helpers import REPO, assert_matches_golden

EBPF = "captures/jack-starved-ebpf.ssf"
PROC = "captures/jack-starved-proc.ssf"
HELD = "captures/jack-machine-held.ssf"
LATE = "captures/jack-signalled-late.ssf"
DRIVER = "captures/jack-driver-suspect.ssf"
PIPEWIRE = "captures/pipewire-late-client.ssf"
SPINS = "captures/jack-client-spins.ssf"
FIRST = "captures/jack-recorder-first.ssf"
SHAPES = "captures/jack-shapes-recorder-first.ssf"
MIDI = "captures/jack-midi-norealtime-recorder-first.ssf"
MIDI_PERIOD_NS = 512 / 48000 * 1e9  # its cycle: 10.667 ms
SPIN_MS = 12

CASES = [
    ("jack-shapes-recorder-first.stalls.txt", ["stalls", SHAPES]),
    ("jack-shapes-recorder-first.xruns.txt", ["xruns", SHAPES]),
    ("jack-midi-norealtime-recorder-first.stalls.txt", ["stalls", MIDI]),
    ("jack-midi-norealtime-recorder-first.xruns.txt", ["xruns", MIDI]),
    ("jack-starved-ebpf.stalls.txt", ["stalls", EBPF]),
    ("jack-starved-ebpf.xruns.txt", ["xruns", EBPF]),
    ("jack-starved-ebpf.proc-only.stalls.txt", ["stalls", EBPF, "--proc-only"]),
    ("jack-starved-proc.stalls.txt", ["stalls", PROC]),
    ("jack-starved-proc.xruns.txt", ["xruns", PROC]),
    ("jack-machine-held.stalls.txt", ["stalls", HELD]),
    ("jack-signalled-late.proc-only.stalls.txt", ["stalls", LATE, "--proc-only"]),
    ("jack-driver-suspect.proc-only.stalls.txt", ["stalls", DRIVER, "--proc-only"]),
    ("pipewire-late-client.stalls.txt", ["stalls", PIPEWIRE]),
    ("pipewire-late-client.xruns.txt", ["xruns", PIPEWIRE]),
    ("pipewire-late-client.info.txt", ["info", PIPEWIRE]),
    ("jack-client-spins.stalls.txt", ["stalls", SPINS]),
    ("jack-client-spins.xruns.txt", ["xruns", SPINS]),
    ("jack-recorder-first.stalls.txt", ["stalls", FIRST]),
    ("jack-recorder-first.xruns.txt", ["xruns", FIRST]),
    ("jack-recorder-first.info.txt", ["info", FIRST]),
]


@functools.cache
def _scored(path: str, name: str) -> tuple[forensics.Capture, forensics.Capture, real_captures.StarvedScore]:
    """(stored capture, its view, the score): analysed once per module run (an analysis takes seconds)."""
    stored = forensics.load(REPO / path)
    cap = real_captures.view(stored, name)
    spans = real_captures.starvations_of(stored)
    return stored, cap, real_captures.score_starved(cap, spans, stored.meta["made_by"]["pids"]["jackd"], SPIN_MS)


@pytest.mark.parametrize(("name", "args"), CASES, ids=[c[0] for c in CASES])
def test_golden_output(run_module, name, args):
    result = run_module("forensics", *args)
    assert result.returncode == 0, result.stderr
    assert_matches_golden(result.stdout, name)


@pytest.mark.parametrize("path", [EBPF, PROC, HELD, LATE, DRIVER, PIPEWIRE, SPINS, FIRST])
def test_each_capture_says_how_it_was_made(path):
    cap = forensics.load(REPO / path)
    made_by = cap.meta["made_by"]
    assert "tests.real_captures" in made_by["command"] and "catch-load" in made_by["how"]
    assert cap.complete and {"engine_cycles", "engine_nodes", "xruns"} <= set(cap.table_names)
    if path in (SPINS, FIRST):
        assert ("--jack-log" in made_by["how"]) == (path == SPINS) and len(made_by["spins"]) == 3
    elif path not in (HELD, LATE, DRIVER, PIPEWIRE):
        assert "fifo_hog" in made_by["how"] and ("--ebpf" in made_by["how"]) == ("ebpf" in path)
        assert len(real_captures.starvations_of(cap)) == made_by["hog"]["count"] == 2


@pytest.mark.parametrize(
    ("path", "name"),
    [(EBPF, view) for view in real_captures.VIEWS] + [(PROC, "jack+proc"), (PROC, "proc")],
)
def test_each_starvation_is_one_incident_rooted_at_jackd(path, name):
    """Every starvation the capture shows (both, in these): one incident rooted at jackd's thread, never
    `lock` anywhere; with the engine's tables, from eBPF wake-ups, or from /proc periods alone."""
    stored, cap, score = _scored(path, name)
    spans = real_captures.starvations_of(stored)
    print("\n" + score.report(f"{path} as {name}"))
    assert score.unobservable == [] and score.scored == len(spans)
    assert not score.wrong and len(score.right) == len(spans)
    assert not (score.members["incident_verdict"] == "lock").any()
    # Other incidents are late cycles of the graph itself (in the eBPF capture: fluidsynth runnable 0.7 ms,
    # and a jalv's 2.7 ms sleep read as a wait, rooted at jackd `unknown`): rooted at a link of the graph.
    pids = set(stored.meta["made_by"]["pids"].values())
    threads = cap.threads.drop_duplicates("tid", keep="last").set_index("tid")["pid"]
    assert score.extra["root_tid"].map(threads).isin(pids).all(), score.extra[["root_comm", "root_verdict"]]


@pytest.mark.parametrize("path", [EBPF, PROC])
def test_every_xrun_the_engine_reported_falls_in_a_starvation_incident(path):
    cap, _, score = _scored(path, "jack+ebpf" if path == EBPF else "jack+proc")
    rows = xrun_rows(cap, score.incidents)
    reported = rows[rows["kind"] == "xrun"]
    assert len(reported) >= 2  # JACK reported each starvation, once or more
    assert reported["incident"].notna().all() and (reported["root_comm"] == "jackd").all()


def test_a_link_the_machine_held_is_the_root_not_the_link_it_woke_late():
    """p1 woke 1.4 ms after the engine stamped it signalled (past half the period: the engine's first late
    link), but the switch record names its waker: p0, its upstream, which the machine held on CPU 1.3 ms
    that its own clock did not count. p1 waited for p0 (not `lock`); the root is p0, with the machine's
    evidence. Before: p1, `lock`."""
    cap = forensics.load(REPO / HELD)
    incidents, members, _, _ = real_captures.incidents_of(cap)
    pids = cap.meta["made_by"]["pids"]
    threads = cap.threads.drop_duplicates("tid", keep="last").set_index("tid")["pid"]
    held = incidents[incidents["root_tid"].map(threads) == pids["p0"]]
    assert len(held) == 1, incidents[["root_comm", "root_tid", "root_verdict"]]
    row = held.iloc[0]
    assert row.root_verdict != "lock" and "the machine's" in row.evidence
    mine = members[members["incident"] == row.incident]
    p1 = mine[mine["tid"].map(threads) == pids["p1"]]
    assert len(p1) == 1 and p1["incident_verdict"].iloc[0] == "upstream"
    assert not (members["incident_verdict"] == "lock").any()


def test_a_link_the_engine_signalled_and_woke_late_is_no_lock_from_proc_alone():
    """From /proc alone (with the engine's tables) p0 slept through 3.8 ms, and a link of its own chain ran
    meanwhile: /proc reads a lock wait. The engine stamped it signalled on time and awake 1.45 ms later:
    the root is p0, runnable after its wake-up by the engine's stamps; its row among the members says the
    same (was: `lock`, the incident's and the row's)."""
    cap = real_captures.view(forensics.load(REPO / LATE), "jack+proc")
    incidents, members, _, _ = real_captures.incidents_of(cap)
    pids = cap.meta["made_by"]["pids"]
    threads = cap.threads.drop_duplicates("tid", keep="last").set_index("tid")["pid"]
    p0 = incidents[incidents["root_tid"].map(threads) == pids["p0"]]
    assert len(p0) == 1, incidents[["root_comm", "root_tid", "root_verdict"]]
    assert p0["root_verdict"].iloc[0] == "runqueue" and "the engine's own stamps" in p0["evidence"].iloc[0]
    roots = members[members["role"] == "root"].set_index("incident")["incident_verdict"]
    assert (roots == incidents.set_index("incident")["root_verdict"].reindex(roots.index)).all()
    assert not (members["incident_verdict"] == "lock").any()


def test_the_driver_is_no_lock_for_a_thread_proc_saw_run_meanwhile():
    """From /proc alone (with the engine's tables) jackd's driver slept 4.0 ms through its 2.7 ms period while
    jackd's own non-real-time thread ran 0.2 ms: the driver sleeps on its clock, so that thread is no lock
    holder of it. Root jackd, a late wake-up (here with the machine's steal named), never `lock` (was: the
    /proc-only `lock` root at jackd of the real-graph test)."""
    cap = real_captures.view(forensics.load(REPO / DRIVER), "jack+proc")
    incidents, members, _, _ = real_captures.incidents_of(cap)
    jackd = incidents[incidents["start_ns"] == 5233286669992]
    assert len(jackd) == 1 and jackd["root_comm"].iloc[0] == "jackd", incidents[["start_ns", "root_comm"]]
    assert jackd["root_verdict"].iloc[0] == "late wake-up", jackd["evidence"].iloc[0]
    assert "same process, OTHER" in jackd["evidence"].iloc[0]  # the thread /proc saw run meanwhile
    assert not (incidents["root_verdict"] == "lock").any()
    driver = members[members["tid"] == jackd["root_tid"].iloc[0]]  # its other rows too, root or not
    assert len(driver) and not (driver["incident_verdict"] == "lock").any(), driver[["role", "incident_verdict"]]


@pytest.mark.parametrize("name", ["jack+ebpf", "jack+proc"])
def test_a_late_pipewire_client_is_one_incident_rooted_at_its_callback(name):
    """The cue client's callback spun 20 ms (its own CLOCK_MONOTONIC stamps, made_by): one incident over it,
    rooted at the callback's thread, `run`; the hog before it rooted at PipeWire's data loop, `runqueue`;
    nothing else, and no `lock`. With eBPF and from /proc alone (the engine's tables are PipeWire's profiler)."""
    stored = forensics.load(REPO / PIPEWIRE)
    incidents, members, _, _ = real_captures.incidents_of(real_captures.view(stored, name))
    (spin,) = stored.meta["made_by"]["injections"]
    hit = incidents[(incidents["start_ns"] <= spin["end_ns"] + 3_000_000) & (incidents["end_ns"] >= spin["start_ns"])]
    assert len(hit) == 1 and (hit["root_tid"].iloc[0], hit["root_verdict"].iloc[0]) == (spin["tid"], "run")
    threads = stored.threads.drop_duplicates("tid", keep="last").set_index("tid")["pid"]
    rest = incidents.drop(hit.index)
    assert len(rest) == 1 and threads[rest["root_tid"].iloc[0]] == stored.meta["made_by"]["pids"]["pipewire"]
    assert rest["root_verdict"].iloc[0] == "runqueue"
    assert not (members["incident_verdict"] == "lock").any()


@pytest.mark.parametrize("path", [SPINS, FIRST])
def test_each_client_spin_is_one_xrun_the_engine_blamed_on_it_rooted_at_its_callback(path):
    """The cue client spun 20 ms three times (its own stamps, made_by): jack2 reported each as xrun
    callbacks and as "client = cue was not finished" lines of its log. One xrun row per spin, blamed on
    cue, joined to one incident rooted at the client's callback thread, `run`. SPINS: one log line was
    read before the callbacks it announced. FIRST (catch-load started before jackd, told nothing of its
    log): the log was found as jackd's output, and one spin's callbacks came 2.3-5.4 ms apart (was:
    three rows, two of them `unknown`)."""
    cap = forensics.load(REPO / path)
    spins = cap.meta["made_by"]["spins"]
    xruns = engine_xruns(cap)
    assert len(xruns) == len(spins) == 3, xruns
    assert (xruns["client"] == "cue").all() and xruns["source"].str.contains("server-log").all()
    incidents, _, _, _ = real_captures.incidents_of(cap)
    rows = xrun_rows(cap, incidents)
    cue_pid = cap.meta["made_by"]["pids"]["cue"]
    threads = cap.threads.drop_duplicates("tid", keep="last").set_index("tid")["pid"]
    for spin in spins:
        row = rows[(rows["kind"] == "xrun") & rows["t_ns"].between(spin["start_ns"], spin["end_ns"] + 100_000_000)]
        assert len(row) == 1, rows
        (incident,) = incidents[incidents["incident"] == row["incident"].iloc[0]].itertuples()
        assert threads[incident.root_tid] == cue_pid and incident.root_verdict == "run"


def test_an_old_jack_capture_keeps_its_recorded_flag_only_where_no_finish_was_seen():
    """captures/jack-driver-suspect.ssf was recorded when the JACK source set engine_nodes.xrun itself (no
    resignal_ns): 10 client-cycles flagged. Read now, the times decide where a finish was seen, and the
    recorder's flag (its reading of the re-signal) is read only where none was: 4 clients of the starved
    cycle, never seen finishing. The flag it set against a nominal start (the poller missed the next one,
    and the finish came before the next start it saw) is unknown, not late."""
    cap = forensics.load(REPO / DRIVER)
    nodes = cap.engine_nodes
    assert nodes["resignal_ns"].isna().all() and int((nodes["xrun"] == True).sum()) == 10  # noqa: E712 - nullable
    judged = node_lateness(nodes, cap.engine_cycles)
    late = judged["late"].fillna(False).astype(bool)
    unseen = nodes["finish_ns"].isna()
    assert int(late.sum()) == 9 and int((late & unseen).sum()) == 4
    assert ((nodes["xrun"] == True) & unseen).sum() == 4  # noqa: E712 - the flags read as recorded
    by_times = late & ~unseen
    assert (nodes["finish_ns"][by_times] > judged["next_start_ns"][by_times]).all()
    nominal = nodes["xrun"].fillna(False).astype(bool) & ~late
    assert int(nominal.sum()) == 1 and judged["late"][nominal].isna().all()
    assert judged["next_start_ns"][nominal].isna().all()


def test_the_perfetto_export_marks_late_the_client_cycles_the_analysis_finds_late():
    """On the same old capture: a busy slice (wake-up to finish) is named late where node_lateness finds
    the client late; the recorder's flag against a nominal start (its next start missed) is a plain one."""
    import json

    from analyses.source import capture_origin_ns
    from forensics.export.perfetto import perfetto_trace
    from forensics.export.perfetto_engine import ENGINE_PID

    cap = forensics.load(REPO / DRIVER)
    nodes = cap.engine_nodes
    late = node_lateness(nodes, cap.engine_cycles)["late"].fillna(False).astype(bool)
    busy = nodes["awake_ns"].notna() & nodes["finish_ns"].notna()
    origin = capture_origin_ns(cap)
    assert origin is not None

    def ts(rows):  # type: ignore[no-untyped-def]
        return {round((int(a) - origin) / 1e3, 3) for a in nodes.loc[rows, "awake_ns"]}

    slices = [e for e in json.loads(perfetto_trace(cap, "driver"))["traceEvents"] if e.get("pid") == ENGINE_PID]
    named_late = {e["ts"] for e in slices if e.get("ph") == "X" and e["name"] == "late"}
    plain = {e["ts"] for e in slices if e.get("ph") == "X" and e["name"] == "process"}
    assert named_late and named_late <= ts(busy & late)
    nominal = busy & nodes["xrun"].fillna(False).astype(bool) & ~late
    assert ts(nominal) and ts(nominal) <= plain


def _shapes(view: str):  # type: ignore[no-untyped-def]
    cap = real_captures.view(forensics.load(REPO / SHAPES), view)
    spans = real_captures.starvations_of(cap)
    return cap, spans, real_captures.score_starved(cap, spans, cap.meta["made_by"]["pids"]["jackd"], SPIN_MS)


def test_issue_22s_graph_has_the_shape_no_other_fixture_has():
    """The fixture is the shape it says: a parallel chain (fluidsynth feeds p0 and ecasound), a client with
    two real-time threads at different priorities (ecasound's FIFO 50 and its process thread), and
    plugins whose MIDI/atom ports no connection names."""
    cap = forensics.load(REPO / SHAPES)
    graph = cap.table("engine_graph")
    fed = set(graph.loc[graph["src_client"] == "fluidsynth", "dst_client"].astype(str))
    assert {"p0", "ecasound"} <= fed
    threads = cap.threads.drop_duplicates("tid", keep="last")
    ecasound = threads[threads["pid"] == cap.meta["made_by"]["pids"]["ecasound"]]
    assert {1, 2} & set(ecasound["policy"].astype(int)) and len(set(ecasound["rtprio"].astype(int)) - {0}) >= 2
    assert "calf" in cap.meta["made_by"]["how"]


def test_the_parallel_branch_is_a_link_of_its_own_fed_by_the_synth():
    """ecasound registers two JACK clients in one process (`ecasound`, connected, and `ecasound-ctrl-PID`,
    not): its process thread is the link of `ecasound`, fed by fluidsynth beside p0, and the driver's
    playback is fed by both branches, which are not its upstream (was: the unconnected client's link, fed by
    the driver, second in graph order). Its episodes are named as the engine names it."""
    from analyses.incidents import _graph_edges, chain_links
    from analyses.threads import select_threads, thread_profiles

    cap = forensics.load(REPO / SHAPES)
    links = chain_links(cap, select_threads(thread_profiles(cap))).set_index("client")
    assert "ecasound" in links.index and not links.index.str.startswith("ecasound-ctrl").any()
    fluidsynth, ecasound = (int(links.at[c, "tid"]) for c in ("fluidsynth", "ecasound"))
    assert links.at["ecasound", "upstream"] == (fluidsynth,)
    assert links.at["ecasound", "order"] == links.at["p0", "order"]
    # The driver's playback is fed by both branches; still the driver has no upstream: it starts each cycle
    # on its clock (analyses.incidents._links_of_engine).
    assert set(_graph_edges(cap, "jack")["system"]) == {"ecasound", "p3"}
    assert links.at["system", "upstream"] == () and links.at["fluidsynth", "upstream"] == (
        int(links.at["system", "tid"]),
    )
    _, _, score = _shapes("jack+ebpf")
    assert (score.members.loc[score.members["tid"] == ecasound, "client"] == "ecasound").all()


@pytest.mark.parametrize("view", ["jack+ebpf", "jack+proc"])
def test_issue_22s_graph_recorded_first_roots_every_starvation_at_jackd_and_nothing_else(view):
    """Issue 22's graph recorded as a new user does, from eBPF and from /proc: each starvation is one
    incident rooted at jackd (runqueue), every xrun the engine reported joins one rooted at jackd, and
    nothing else is an incident. Reported in the issue on this shape: 7 of 8 starvations rooted at
    `fluidsynth lock` from eBPF, none found from /proc, a crash on the unconnected ports' NaN."""
    cap, spans, score = _shapes(view)
    assert score.scored == len(spans) and len(score.right) == len(spans), score.report(view)
    assert score.extra.empty, score.report(view)
    rows = xrun_rows(cap, score.incidents)
    reported = rows[rows["kind"] == "xrun"]
    assert len(reported) >= len(spans)
    assert reported["incident"].notna().all() and (reported["root_comm"] == "jackd").all(), reported


def test_a_norealtime_midi_graph_recorded_first_roots_every_starvation_at_jackds_cycle_thread():
    """jackd --no-realtime recorded from its start (catch-load first, /proc alone): its request thread, busy
    while the clients registered and then asleep, was taken for the server's cycle thread by its mean rate,
    and the starvations read as a 598 ms `late wake-up` of that sleeping thread, one incident over two of
    them (rules.ENGINE_RATE_MIN_WOKEN_BLOCKS). Each starvation is one incident rooted at the thread that ran
    jackd's cycles meanwhile, waiting for a CPU; nothing else is an incident; the MIDI link (seq -> midisine)
    and both parallel chains are upstream of it."""
    import numpy as np

    from analyses.incidents import chain_links
    from analyses.threads import select_threads, thread_profiles

    stored = forensics.load(REPO / MIDI)
    made_by = stored.meta["made_by"]
    assert "--no-realtime" in made_by["how"] and "jack_midiseq" in made_by["how"]
    cap = real_captures.view(stored, "jack+proc")
    spans = real_captures.starvations_of(stored)
    spin_ms = made_by["hog"]["spin_ms"]
    score = real_captures.score_starved(cap, spans, made_by["pids"]["jackd"], spin_ms)
    print("\n" + score.report(MIDI))
    assert score.unobservable == [] and len(score.right) == len(spans) == 3, score.report(MIDI)
    assert score.extra.empty, score.report(MIDI)
    # The thread that ran the cycles: of jackd's, the one switched in most from the first starvation to the
    # last (read from the samples, not from the analysis under test).
    samples = cap.samples
    jackd = samples[(samples["pid"] == made_by["pids"]["jackd"]).to_numpy()]
    during = jackd[(jackd["t_ns"] >= spans[0][0]) & (jackd["t_ns"] <= spans[-1][1])]
    switches = during.groupby("tid")["slices"].agg(lambda s: int(s.max() - s.min()))
    cycle_tid = int(switches.idxmax())
    assert switches[cycle_tid] > 0.8 * (spans[-1][1] - spans[0][0]) / MIDI_PERIOD_NS
    roots = score.incidents
    assert (roots["root_tid"] == cycle_tid).all() and (roots["root_verdict"] == "runqueue").all(), roots
    assert (roots["end_ns"] - roots["start_ns"] < 2 * spin_ms * 1_000_000).all(), roots
    links = chain_links(cap, select_threads(thread_profiles(cap))).set_index("client")
    assert int(links.at["system", "tid"]) == cycle_tid
    tid = {name: int(links.at[name, "tid"]) for name in ("seq", "midisine", "a0", "a1", "b0", "b1")}
    assert links.at["midisine", "upstream"] == (tid["seq"],)
    assert links.at["a0", "upstream"] == links.at["b0", "upstream"] == (tid["midisine"],)
    assert links.at["a1", "upstream"] == (tid["a0"],) and links.at["b1", "upstream"] == (tid["b0"],)
    assert np.isfinite(links["order"]).all()
