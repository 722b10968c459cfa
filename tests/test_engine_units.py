"""The JACK source's pure parts: cycle assembly from slot snapshots, the choice to run it, the log lines."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from analyses.engine import node_lateness
from samplers.engine.choose import choose_jack, command_server, jack_server_name
from samplers.engine.cycles import CycleAssembler
from samplers.engine.jack import DRIVER_XRUN_LINE, XRUN_LINE
from samplers.engine.jack_shm import _DTYPE, CLIENT_NUM, TIMING, GraphTiming

PERIOD_US = 5333.0


def _late(cycles: list[dict], nodes: list[dict], period_ns: float) -> dict[int, bool | None]:
    """The analysis' verdict on the rows the assembler emitted: cycle start -> late (None: unknown)."""
    frame = pd.DataFrame(nodes).assign(engine="jack")
    starts = pd.DataFrame(cycles).assign(engine="jack", period_ns=period_ns)
    late = node_lateness(frame, starts)["late"]
    return {int(t): (None if pd.isna(v) else bool(v)) for t, v in zip(frame["t_ns"], late, strict=True)}


def _slots(driver_start: int, client: tuple[int, int, int, int]) -> np.ndarray:
    slots = np.zeros(CLIENT_NUM, dtype=_DTYPE)
    slots[0] = (driver_start, 0, driver_start, 3)
    slots[2] = client
    return slots


def test_timing_struct_is_jack2s_packed_layout() -> None:
    assert TIMING.size == 28 == _DTYPE.itemsize  # 3 x jack_time_t + jack_client_state_t, packed


def test_a_client_that_spins_through_the_next_cycle_is_late_in_its_cycle_only() -> None:
    asm = CycleAssembler(0, to_ns=lambda us: us * 1000)
    t1, t2, t3, t4 = 1000, 6333, 11666, 16999
    polls = [
        (t1, (t1, t1 + 10, t1 + 100, 3)),  # cycle 1: done in 100 us
        (t2, (t2, t2 + 7, t1 + 100, 2)),  # cycle 2: woke, running (spinning)
        (t3, (t3, t2 + 7, t1 + 100, 1)),  # cycle 3 re-signals it while its finish is still cycle 1's
        (t4, (t3, t2 + 7, t1 + 100, 1)),
        (t4, (t3, t2 + 7, t2 + 20_007, 3)),  # the spin ends 20 ms after it woke
        (t4, (t3, t2 + 20_010, t2 + 20_007, 2)),  # it wakes for cycle 3 at once
        (t4, (t3, t2 + 20_010, t2 + 20_100, 3)),
    ]
    for start, client in polls:
        asm.observe(_slots(start, client), [2])
    cycles, nodes = asm.take(10**9, PERIOD_US, {0: "system", 2: "cue"}, flush=True)
    by_cycle = {n["t_ns"] // 1000: n for n in nodes}
    late = {t // 1000: v for t, v in _late(cycles, nodes, PERIOD_US * 1000).items()}
    assert late[t1] is False and by_cycle[t1]["finish_ns"] == (t1 + 100) * 1000
    assert late[t2] is True and by_cycle[t2]["finish_ns"] == (t2 + 20_007) * 1000
    # Re-signalled for cycle 3 while its finish stamp was still cycle 1's: recorded as read.
    assert (by_cycle[t2]["resignal_ns"], by_cycle[t2]["finish_at_resignal_ns"]) == (t3 * 1000, (t1 + 100) * 1000)
    assert by_cycle[t2]["awake_ns"] == (t2 + 7) * 1000
    assert by_cycle[t3]["awake_ns"] == (t2 + 20_010) * 1000 and late[t3] is True
    assert "xrun" not in by_cycle[t1]  # the sampler decides no lateness
    ends = {c["t_ns"] // 1000: c["end_ns"] for c in cycles}
    assert ends[t1] == (t1 + 100) * 1000 and ends[t2] == (t2 + 20_007) * 1000
    assert ends[t4] is None  # no client ran in it (as far as seen): its end is unknown, not made up
    assert {n["name"] for n in nodes} == {"cue"}


def test_a_value_from_a_cycle_never_seen_starting_is_not_placed() -> None:
    asm = CycleAssembler(0, to_ns=lambda us: us)
    asm.observe(_slots(5000, (4000, 4010, 4100, 3)), [2])  # signaled before the first start we saw
    _, nodes = asm.take(10**9, PERIOD_US, {}, flush=True)
    assert nodes == [] and asm.unplaced == 1


def test_cycles_are_kept_until_old_enough() -> None:
    asm = CycleAssembler(0, to_ns=lambda us: us)
    asm.observe(_slots(1000, (1000, 1010, 1100, 3)), [2])
    assert asm.take(1000 + 1000, PERIOD_US, {}) == ([], [])
    cycles, _ = asm.take(1000 + 10**6, PERIOD_US, {})
    assert len(cycles) == 1


def test_choose_jack() -> None:
    assert command_server(("jackd", "-n", "studio", "-R", "-d", "dummy")) == "studio"
    assert command_server(("/usr/bin/jackd", "-R", "-d", "alsa", "-n", "3")) is None  # -n after -d: driver's
    assert command_server(("ardour",)) is False
    launched = choose_jack(None, False, ("jackd", "-nstudio", "-d", "dummy"))
    assert launched is not None and launched.server == "studio" and launched.follow and launched.launches_server
    assert choose_jack(None, True, ("jackd",)) is None
    explicit = choose_jack("", False, ())
    assert explicit is not None and explicit.explicit and explicit.server is None


def test_a_match_recording_waits_for_a_server_that_is_not_there_yet(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`catch-load --match jackd` started before jackd: the source runs and waits for the server through
    the recording; a command's recording (the lab, a script) with no server does not run it."""
    from samplers.engine.choose import UNTIL_THE_END

    monkeypatch.setenv("JACK_DEFAULT_SERVER", f"absent-{os.getpid()}")
    waiting = choose_jack(None, False, (), later=True, match="^jackd")
    assert waiting is not None and waiting.wait_s == UNTIL_THE_END
    assert not (waiting.explicit or waiting.follow or waiting.launches_server)  # quiet, follows once joined
    assert choose_jack(None, False, ("python3", "-m", "forensics.lab"), later=True) is None
    assert choose_jack(None, True, (), later=True, match="^jackd") is None  # --no-jack
    # A server named by JACK_DEFAULT_SERVER is the one meant; unnamed, any server a match joins (JackChoice.match)
    assert choose_jack(None, False, (), later=True, match="^jackd").match is None  # type: ignore[union-attr]
    monkeypatch.delenv("JACK_DEFAULT_SERVER")
    unnamed = choose_jack(None, False, (), later=True, match="^jackd", tmp_dir=str(tmp_path))
    assert unnamed is not None and unnamed.wait_s == UNTIL_THE_END and unnamed.match == "^jackd"


def test_server_log_lines() -> None:
    line = "JackEngine::XRun: client = cue was not finished, state = Running"
    m = XRUN_LINE.search(line)
    assert m is not None and m.group(1) == "cue" and m.group(2) == "Running"
    m = DRIVER_XRUN_LINE.search("JackTimedDriver::Process XRun = 21 usec")
    assert m is not None and float(m.group(2)) == 21.0
    assert XRUN_LINE.search("JackEngine::XRun: client = my client: 2 was not finished, state = Triggered").group(1) == (
        "my client: 2"
    )


def test_late_without_a_seen_finish_is_still_late() -> None:
    """The poller missed the spin's finish (overwritten at once by the next cycle's): the re-signal while
    the finish stamp was older than the wake-up is jack2's 'not finished' by itself."""
    asm = CycleAssembler(0, to_ns=lambda us: us)
    t1, t2, t3 = 10_000, 15_333, 20_666
    for start, client in [
        (t1, (t1, t1 + 10, t1 - 4000, 2)),  # woke, running
        (t2, (t2, t1 + 10, t1 - 4000, 1)),  # re-signaled: not finished
        (t3, (t2, t1 + 20_050, t1 + 20_100, 3)),  # its finish for t1 was never seen, only t2's
    ]:
        asm.observe(_slots(start, client), [2])
    cycles, nodes = asm.take(10**9, PERIOD_US, {}, flush=True)
    by_cycle = {n["t_ns"]: n for n in nodes}
    assert by_cycle[t1]["finish_ns"] is None and by_cycle[t1]["finish_at_resignal_ns"] == t1 - 4000
    assert _late(cycles, nodes, PERIOD_US)[t1] is True


def test_a_finish_of_a_cycle_the_poller_never_saw_is_not_given_to_the_cycle_before() -> None:
    """The poller, held off the CPU (a FIFO hog on every CPU, test_incidents_real), sees a client woken for a
    cycle, then nothing for 13 ms: meanwhile the driver ran a late cycle the poller never saw start, and the
    client's slot holds that cycle's wake-up and finish. The finish is the wake-up's beside it (jack2 stamps
    both in order), not the earlier cycle's: given to it, the client ran 13 ms there, a late link the kernel
    had asleep between two 30 us runs (its switch records)."""
    asm = CycleAssembler(0, to_ns=lambda us: us)
    t1 = 10_000
    missed = t1 + 13_050  # the late cycle after the stall: its start never read
    t2 = missed + 170  # the next one, read
    for start, client in [
        (t1, (t1 + 200, t1 + 230, t1 - 2_000, 2)),  # woken for t1, still in its callback at this read
        (t2, (t2 + 5, missed + 150, missed + 170, 1)),  # after the stall: the missed cycle's wake-up and finish
        (t2, (t2 + 5, t2 + 30, t2 + 60, 3)),
    ]:
        asm.observe(_slots(start, client), [2])
    cycles, nodes = asm.take(10**9, PERIOD_US, {}, flush=True)
    by_cycle = {n["t_ns"]: n for n in nodes}
    assert by_cycle[t1]["awake_ns"] == t1 + 230 and by_cycle[t1]["finish_ns"] is None
    # Its slot had a finish newer than that wake-up by the time it was signalled again: not unfinished. When it
    # finished is unknown, and so is whether it was late (late before: it ran 13 ms).
    assert by_cycle[t1]["finish_at_resignal_ns"] == missed + 170
    assert _late(cycles, nodes, PERIOD_US)[t1] is None
    assert by_cycle[t2]["finish_ns"] == t2 + 60


def test_a_wake_up_read_after_a_hole_in_the_polls_is_not_given_to_a_cycle_signalled_before_it() -> None:
    """The poller read a client signalled by the driver at a cycle's start, then nothing for 13 ms (a FIFO hog
    on every CPU, test_incidents_real): the client woke and finished in that cycle, and again in a late cycle
    whose start the poller never saw; the next read shows the late cycle's wake-up and finish. Given to the
    cycle it saw, the client was woken 13 ms late, the first late link of the starvation (the kernel had it
    run at once, and asleep after). After a hole of a period or more, a value read is the cycle's before it
    only when the cycle was signalled inside the hole: here none is, and the cycle's wake-up is unknown."""
    period = 2_667
    t1 = 10_000
    missed = t1 + 13_100  # the late cycle after the stall: its start never read
    t2 = missed + 190
    polls = [
        (t1 + 50, t1, (t1, t1 - 2_600, t1 - 2_550, 1)),  # signalled by the driver at the start, not yet awake
        (t2 + 20, t2, (t2, missed + 160, missed + 180, 1)),  # after the stall: the missed cycle's stamps
        (t2 + 700, t2, (t2 + 40, t2 + 60, t2 + 90, 3)),
    ]
    for held in (False, True):
        asm = CycleAssembler(0, to_ns=lambda us: us)
        for now, start, client in polls:
            asm.observe(_slots(start, client), [2], now_us=now if held else None, period_us=period)
        _, nodes = asm.take(10**9, period, {}, flush=True)
        first = {n["t_ns"]: n for n in nodes}[t1]
        if held:
            assert first["awake_ns"] is None and first["finish_ns"] is None and asm.holes == 1
        else:  # without the poll times the hole is not known: the missed cycle's wake-up lands here
            assert first["awake_ns"] == missed + 160


def test_the_rows_the_source_writes_read_back_with_the_late_cycle_derived(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The assembler's rows through a capture file, as the JACK source writes them: they hold no late
    flag (the `xrun` column is null), and the analysis derives it: the cycle whose client was signalled
    again before it finished is a miss although its end is unknown."""
    from analyses.engine import engine_cycles
    from capture.format import CaptureWriter, load

    asm = CycleAssembler(0, to_ns=lambda us: us)
    t1, t2, t3 = 10_000, 15_333, 20_666
    for start, client in [
        (t1, (t1, t1 + 10, t1 - 4000, 2)),
        (t2, (t2, t1 + 10, t1 - 4000, 1)),  # re-signalled, its finish stamp older than its wake-up
        (t3, (t2, t1 + 20_050, t1 + 20_100, 3)),
    ]:
        asm.observe(_slots(start, client), [2])
    cycles, nodes = asm.take(10**9, PERIOD_US, {2: "cue"}, flush=True)
    path = tmp_path / "jack.ssf"
    with CaptureWriter(path, {"sources": {"engine": {"kind": "jack"}}}) as writer:
        writer.append("engine_cycles", pd.DataFrame(cycles).assign(engine="jack", period_ns=round(PERIOD_US)))
        writer.append("engine_nodes", pd.DataFrame(nodes).assign(engine="jack"))
    cap = load(path)
    assert cap.engine_nodes["xrun"].isna().all() and cap.engine_nodes["resignal_ns"].notna().any()
    ends = engine_cycles(cap).set_index("t_ns")
    assert pd.isna(ends.loc[t1, "end_ns"]) and ends.loc[t1, "missed"] == True  # noqa: E712 - nullable


def test_graph_server_reads_the_semaphore_mappings(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os

    from samplers.engine.choose import JackServer, graph_server

    def in_graph(pid: int, server: str) -> bool:
        return graph_server(pid, [JackServer(server, os.geteuid())], proc=str(tmp_path)) is not None

    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "maps").write_text(
        f"7f00-7f01 rw-s 00000000 00:1b 14   /dev/shm/jack_sem.{os.getuid()}_studio_cue\n"
    )
    assert in_graph(42, "studio")
    assert not in_graph(42, "other")
    assert not in_graph(43, "studio")


def test_a_target_given_by_pid_brings_its_own_server_whatever_its_name(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`catch-load -p $(pidof jackd)` for `jackd -n studio`, from a shell where JACK_DEFAULT_SERVER is not set:
    the server is the one whose semaphores the target maps, found among the sockets of the running servers
    of every user (a file of that name that is not a socket is no server); the longest name wins ("a_b" over
    "a"); another user's server is opened as that user (JackChoice.user)."""
    import socket

    from samplers.engine.choose import JackServer, graph_server, jack_servers

    monkeypatch.delenv("JACK_DEFAULT_SERVER", raising=False)
    shm, proc, uid, gid = tmp_path / "shm", tmp_path / "proc", os.geteuid(), os.getegid()
    shm.mkdir()
    listening = []
    hers = uid + 1  # another user's
    for name, owner in (("studio", uid), ("a", uid), ("a_b", uid), ("hers", hers)):
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(shm / f"jack_{name}_{owner}_0"))
        listening.append(sock)
    (shm / f"jack_notasocket_{uid}_0").write_text("")
    (shm / f"jack_sem.{uid}_studio_cue").write_text("")
    servers = [JackServer(name, uid) for name in ("a", "a_b")]
    try:
        assert [(s.name, s.uid) for s in jack_servers(str(shm))] == sorted(
            [("a", uid), ("a_b", uid), ("studio", uid), ("hers", hers)], key=lambda pair: (pair[1], pair[0])
        )
        assert {s.gid for s in jack_servers(str(shm))} == {gid}  # the socket's group
        maps = {42: f"{uid}_studio_cue", 43: f"{uid}_a_b_fx", 44: f"{uid}_a_fx", 47: f"{hers}_hers_synth"}
        for pid, sem in maps.items():
            (proc / str(pid)).mkdir(parents=True)
            (proc / str(pid) / "maps").write_text(f"7f00-7f01 rw-s 00000000 00:1b 14   /dev/shm/jack_sem.{sem}\n")
        assert graph_server(42, jack_servers(str(shm)), str(proc)) == JackServer("studio", uid, gid)
        assert graph_server(43, servers, str(proc)) == JackServer("a_b", uid)
        assert graph_server(44, servers, str(proc)) == JackServer("a", uid)
        assert graph_server(45, servers, str(proc)) is None  # gone, or no /proc entry
        choice = choose_jack(None, False, (), pids=(42,), proc=str(proc), tmp_dir=str(shm))
        assert choice is not None and choice.server == "studio" and choice.follow and not choice.launches_server
        assert choice.user is None  # ours
        theirs = choose_jack(None, False, (), pids=(47,), proc=str(proc), tmp_dir=str(shm))
        assert theirs is not None and theirs.server == "hers" and theirs.user == (hers, gid)
        asked = choose_jack("", False, (), pids=(42,), proc=str(proc), tmp_dir=str(shm))  # --jack, no name
        assert asked is not None and asked.server == "studio" and asked.explicit
        named = choose_jack("other", False, (), pids=(42,), proc=str(proc), tmp_dir=str(shm))  # --jack other
        assert named is not None and named.server == "other" and named.user is None
        # --match found it running: its server, unless libjack's default is named (or running): the regex may
        # match another server's jackd, and the user said which graph.
        matched = choose_jack(
            None, False, (), later=True, match="^jackd", matched=(42,), proc=str(proc), tmp_dir=str(shm)
        )
        assert matched is not None and matched.server == "studio" and matched.follow
        monkeypatch.setenv("JACK_DEFAULT_SERVER", "later")
        waits = choose_jack(
            None, False, (), later=True, match="^jackd", matched=(42,), proc=str(proc), tmp_dir=str(shm)
        )
        assert waits is not None and waits.server is None and not waits.follow  # waits for "later"
        monkeypatch.delenv("JACK_DEFAULT_SERVER")
        # What a line saying a server is not there adds: the ones that run (another user's with its uid).
        from samplers.engine.choose import others_running

        said = others_running("studio", uid, str(shm))
        assert said == f"; running: 'a', 'a_b', 'hers' (uid {hers})", said
        assert others_running("x", uid, str(tmp_path / "none")) == ""
        # Not in any graph and no default server: no JACK source, as before.
        (proc / "46").mkdir()
        (proc / "46" / "maps").write_text("")
        assert choose_jack(None, False, (), pids=(46,), proc=str(proc), tmp_dir=str(shm)) is None
    finally:
        for sock in listening:
            sock.close()


class _Named:
    """Stands for a running source (samplers/engine/source.py EngineProcess): the pids it named so far."""

    def __init__(self) -> None:
        self.pids: list[int] = []
        self.notes: list[str] = []

    def poll(self) -> list[int]:
        return []


def test_an_engines_clients_are_recorded_once_a_target_is_one_of_them() -> None:
    """Without --jack (a --match recording beside a JACK server), the clients a source names are recorded
    only once a target is among them; then every one, earlier and later, once each."""
    from samplers.engine.source import EngineSources
    from samplers.procfs import ProcPaths

    sources = EngineSources("off", ProcPaths(), set())
    named = _Named()
    sources.running["jack"], sources.follow["jack"], sources.followed["jack"] = named, False, 0  # type: ignore[assignment]
    named.pids += [20]
    assert sources.poll({10}) == []  # 10 is not a client: 20 is not followed
    named.pids += [10]
    assert sources.poll({10}) == [20, 10]
    assert sources.poll({10, 20}) == []
    named.pids += [30]
    assert sources.poll({10, 20}) == [30]


def test_a_followed_engine_hands_over_its_clients_at_once() -> None:
    """An engine the recording follows (it launched the server, --jack, a PipeWire source started for a
    target) hands over every client it names, whatever the targets."""
    from samplers.engine.source import EngineSources
    from samplers.procfs import ProcPaths

    sources = EngineSources("off", ProcPaths(), set())
    named = _Named()
    sources.running["pipewire"], sources.follow["pipewire"], sources.followed["pipewire"] = named, True, 0  # type: ignore[assignment]
    named.pids += [7, 8]
    assert sources.poll(set()) == [7, 8]


def test_engine_analyses_on_a_synthetic_capture() -> None:
    import pandas as pd

    from analyses.engine import engine_cycles, xrun_figures
    from capture.format import Capture

    period = 5_333_333
    starts = [i * period for i in range(5)]
    ends = [s + 400_000 for s in starts]
    ends[2] = starts[2] + 21_000_000  # one cycle ends after the next one was due
    cap = Capture.from_frames(
        meta={"sources": {"engine": {"kind": "jack"}}},
        engine_cycles=pd.DataFrame(
            {"t_ns": starts, "engine": "jack", "end_ns": pd.array([*ends[:4], None], dtype="Int64"),
             "period_ns": period}
        ),
        xruns=pd.DataFrame(
            {"t_ns": [ends[2], ends[2] + 30_000, ends[2] + 60_000, 10**10], "engine": "jack",
             "delay_us": [85.0, 85.0, None, 33.0], "client": [None, None, "cue", None],
             "source": ["callback", "callback", "server-log", "callback"], "text": None}
        ),
        engine_status=pd.DataFrame(
            {"t_ns": [0, 3_600_000_000_000], "engine": "jack", "quantum_frames": 256, "rate_hz": 48000}
        ),
    )  # fmt: skip
    cycles = engine_cycles(cap)
    assert len(cycles) == 4  # the cycle without an end is not counted
    assert cycles["missed"].tolist() == [False, False, True, False]
    figures = xrun_figures(cap)
    assert figures is not None
    assert figures["reports"] == 3 and figures["xruns"] == 2  # two callbacks within one period: one xrun
    assert figures["per_hour"] == 2.0 and figures["delay_max_us"] == 85.0
    assert figures["blamed"] == {"cue": 1} and figures["counted_from"] == "callback"
    assert xrun_figures(Capture.from_frames(meta={})) is None


class _PreemptedCopy:
    """The graph segment as a poller below the driver's priority sees it: the driver wakes during the
    array's copy, starts a cycle and its client runs it, so the copy ends with the client's new values
    and begins with the old start; whatever is read after the copy sees the segment as it now is."""

    def __init__(self, torn: bytes, now: bytes) -> None:
        self.torn, self.now, self.copied = torn, now, False

    def __getitem__(self, key: slice) -> bytes:
        if not self.copied:
            self.copied = True
            return self.torn[key]
        return self.now[key]


def test_a_cycle_started_during_the_copy_files_the_clients_values_under_it() -> None:
    """A quiet graph: every cycle done in 100 us, no xrun. One poll's copy is preempted by the driver's
    next cycle start: its clients' slots are new, the driver's start old. read() gives the start as it is
    after the copy; either way the assembler places the client's new values in no earlier cycle."""
    t1, t2 = 10_000, 15_333
    before = _slots(t1, (t1, t1 + 10, t1 + 100, 3))
    after = _slots(t2, (t2, t2 + 10, t2 + 100, 3))
    torn = after.copy()
    torn[0] = before[0]
    timing = GraphTiming.__new__(GraphTiming)
    timing.offset = 0
    timing._map = _PreemptedCopy(torn.tobytes(), after.tobytes())  # type: ignore[assignment]
    read = timing.read(0)
    assert read[0]["finished"] == t2 and read[2]["signaled"] == t2
    for snapshot, cycles in ((read, {t1, t2}), (torn, {t1})):  # torn: the new values are placed in no cycle
        asm = CycleAssembler(0, to_ns=lambda us: us)
        asm.observe(before, [2])
        asm.observe(snapshot, [2])
        asm.observe(after, [2])
        rows, nodes = asm.take(10**9, PERIOD_US, {}, flush=True)
        assert True not in _late(rows, nodes, PERIOD_US).values(), nodes
        assert {n["t_ns"] for n in nodes} == cycles


@pytest.mark.parametrize("seen_before", ["finished", "signaled"])
def test_a_signal_of_a_cycle_whose_start_was_missed_is_placed_in_none(seen_before: str) -> None:
    """Measured in a quiet run: the poller, late by two periods, read the client's slot during a cycle it
    never saw start and the driver's slot after the next one began. Those values are the missed cycle's;
    filed under the last start seen they finish past its check: a late flag jack2 never notified."""
    t1 = 10_000
    missed, t3 = t1 + 5_343, t1 + 10_670
    first = (t1 + 4, t1 + 49, t1 + 94, 3) if seen_before == "finished" else (t1 + 4, 0, 0, 1)
    asm = CycleAssembler(0, to_ns=lambda us: us)
    asm.observe(_slots(t1, first), [2])
    asm.observe(_slots(t3, (missed, missed + 5_225, missed + 5_263, 0)), [2])
    asm.observe(_slots(t3, (t3 + 3, t3 + 21, t3 + 32, 3)), [2])
    cycles, nodes = asm.take(10**9, PERIOD_US, {}, flush=True)
    assert True not in _late(cycles, nodes, PERIOD_US).values(), nodes
    assert asm.unplaced == 1
    assert {n["t_ns"] for n in nodes} <= {t1, t3}


def test_a_wake_up_or_finish_of_a_missed_cycle_goes_to_no_older_cycle() -> None:
    """Measured in CI (series graph, jalv p1): the poller missed p1's wake-up and finish in one cycle, and
    later, stalled through a cycle it never saw start, read a wake-up and finish of that unseen cycle. They
    went to the oldest record still without them, three cycles back, where they finished past its check:
    a late flag jack2 never reported (it named other clients). A client runs its cycles one after the
    other, so a wake-up or finish never belongs to a record older than one already woken or finished."""
    t0 = 100_000
    asm = CycleAssembler(0, to_ns=lambda us: us)
    for start, client in [
        (t0 - 5235, (t0 - 3892, t0 - 3860, t0 - 3674, 3)),
        (t0, (t0 + 2214, t0 - 3860, t0 - 3674, 1)),  # signaled; its wake-up and finish are never seen
        (t0 + 5368, (t0 + 8293, t0 + 8847, t0 + 9203, 3)),
        (t0 + 10679, (t0 + 10929, t0 + 10961, t0 + 11739, 3)),
        # Stalled through the cycle started near t0 + 16000 (never seen): its values, read with the next.
        (t0 + 21683, (t0 + 21686, t0 + 20125, t0 + 20962, 1)),
        (t0 + 21683, (t0 + 21686, t0 + 21700, t0 + 21800, 3)),
        (t0 + 27016, (t0 + 27020, t0 + 27030, t0 + 27100, 3)),
    ]:
        asm.observe(_slots(start, client), [2])
    cycles, nodes = asm.take(10**9, PERIOD_US, {}, flush=True)
    by_cycle = {n["t_ns"]: n for n in nodes}
    assert by_cycle[t0]["awake_ns"] is None and by_cycle[t0]["finish_ns"] is None, by_cycle[t0]
    assert by_cycle[t0 + 10679]["finish_ns"] == t0 + 11739
    assert by_cycle[t0 + 21683]["awake_ns"] == t0 + 21700 and by_cycle[t0 + 21683]["finish_ns"] == t0 + 21800
    late = _late(cycles, nodes, PERIOD_US)
    assert late[t0] is None and True not in late.values(), late


def test_a_recording_with_a_jack_and_a_pipewire_source_keeps_both(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A JACK server beside PipeWire: both sources run and each sends its metadata as
    meta["sources"]["engine"]; the second replaced the first (jackd's pid, clock offset and version were
    lost, and with them the server's threads in the incidents). Now each is kept by kind, and "engine"
    is the one that recorded (the last that spoke, unless it could not record and another did)."""
    import json

    from analyses.incidents import _server_pid
    from capture.errors import CaptureWarning
    from capture.format import load
    from forensics.describe import describe_capture
    from samplers import frames
    from samplers.engine import merge_sources
    from samplers.writer_process import CaptureSink

    jack = {"kind": "jack", "version": "jack2 1.9.21", "server": "studio", "jackd_pid": 4242, "clock_offset_ns": 7}
    pipewire = {"kind": "pipewire", "version": "0.3.65", "server": "pipewire-0", "clock_offset_ns": 9}
    out = tmp_path / "both.ssf"
    sink = CaptureSink(str(out))
    sink.handle(frames.META, json.dumps({"format_version": 3, "sources": {"ebpf": False}}).encode())
    read_end, write_end = os.pipe()  # the JACK source's own pipe to the writer
    sink.follow_engine(read_end)
    frames.write_all(write_end, frames.encode_json(frames.META, {"sources": {"engine": jack}}))
    os.close(write_end)
    sink.take_engine(wait_end_s=5.0)
    sink.handle(frames.META, json.dumps({"sources": {"engine": pipewire}}).encode())  # via the recorder
    sink.close()
    with pytest.warns(CaptureWarning, match="no trailer"):  # no recorder here to end it
        cap = load(out)
    assert cap.engine_sources == {"jack": jack, "pipewire": pipewire}
    assert cap.sources["engine"] == pipewire and cap.sources["ebpf"] is False
    assert _server_pid(cap) == 4242  # jackd's, though PipeWire spoke last
    sections = describe_capture(cap)["sections"]
    assert sections["Engine (jack)"]["source"] == "jack jack2 1.9.21"
    assert sections["Engine (pipewire)"]["server"] == "pipewire-0" and "Engine" not in sections
    # A source that could not record never hides one that did; an older capture reads as before.
    merged = merge_sources({"engine": pipewire}, {"engine": {"kind": "jack", "unavailable": "no JACK server"}})
    assert merged["engine"] == pipewire and set(merged["engines"]) == {"jack", "pipewire"}
    alone = merge_sources({}, {"engine": {"kind": "jack", "unavailable": "no JACK server"}})
    assert alone["engine"]["unavailable"] == "no JACK server"


@pytest.mark.parametrize("client_status", [0, 3])
def test_the_timing_array_is_found_once_on_a_machine_up_for_a_day(client_status: int) -> None:
    """After 2**36 us of uptime the high half of a time word passes as fPortMax; 8 and 16 bytes into the
    last used client's slot, with its status reset to NotTriggered, the shifted reads look like arrays of
    their own. They lie inside the real one, which starts first: it is the one found."""
    now_us = (17 << 32) + 5_000_000  # about 3.4 days of jack_get_time()
    slots = np.zeros(CLIENT_NUM, dtype=_DTYPE)
    slots[0] = (now_us - 100, 0, now_us - 100, 3)
    slots[2] = (now_us - 96, now_us - 51, now_us - 6, client_status)
    segment = bytes(1000) + (2048).to_bytes(4, "little") + slots.tobytes() + bytes(4000)
    timing = GraphTiming.__new__(GraphTiming)
    timing._map, timing.size, timing.path = segment, len(segment), "/dev/shm/jack-0-0"  # type: ignore[assignment]
    assert timing._locate(now_us) == (1004, 2048)


@pytest.mark.parametrize(
    ("asked", "env", "named"),
    [("studio", "other", "studio"), (None, "t1", "t1"), (None, "", "default"), (None, None, "default")],
)
def test_the_capture_names_the_server_libjack_opens(monkeypatch, asked, env, named) -> None:  # type: ignore[no-untyped-def]
    """Without --jack NAME libjack opens $JACK_DEFAULT_SERVER: `forensics info` said "default" for it."""
    from samplers.engine.jack import JackSource

    if env is None:
        monkeypatch.delenv("JACK_DEFAULT_SERVER", raising=False)
    else:
        monkeypatch.setenv("JACK_DEFAULT_SERVER", env)
    source = JackSource(asked, rows_fd=-1, recorder_fd=-1, explicit=asked is not None)
    assert source.meta["server"] == named == jack_server_name(asked)


def test_a_server_that_exited_before_the_end_went_away_even_unannounced() -> None:
    """Asked to end, the source says the server went away where its shutdown callback is queued, or where
    jackd had exited though libjack had not said so yet (a loaded machine: the test that kills jackd then
    stops the recording read 'recording ended'); a running jackd is no death."""
    import subprocess

    from samplers.engine.jack import JackSource

    gone = subprocess.Popen(["true"])
    gone.wait()
    for pid, went in ((gone.pid, True), (os.getpid(), False)):
        source = JackSource(None, -1, -1, explicit=False)
        source.jackd_pid = pid
        source.stop_reason = "recording ended"
        source._server_gone_by_the_end()
        assert source.server_went_away() == went, source.stop_reason
    queued = JackSource(None, -1, -1, explicit=False)
    queued.events.put(("shutdown", 0, ("killed",)))
    queued.stop_reason = "recording ended"
    queued._server_gone_by_the_end()
    assert queued.stop_reason == "the JACK server went away (killed)"
