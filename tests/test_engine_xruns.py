"""The views agree with the engine (issue 22, item 5): one row per xrun the engine reported, with the
client it blamed; each xrun joined to the incident that covers it, numbered as `forensics stalls`
numbers it. Synthetic engine tables for the rules, the stored real captures for the views."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from analyses.engine import engine_xruns, xrun_figures
from analyses.incidents import xrun_rows
from capture.format import Capture

US = 1_000
MS = 1_000_000
JACK_PERIOD = 2_666_667  # 128 frames at 48 kHz
PW_PERIOD = 5_333_333  # 256 frames at 48 kHz


def _engine(kind: str, reports: list[tuple[int, str, float | None, str | None]], quantum: int) -> Capture:
    """A capture holding only an engine's xrun reports: (t_ns, source, delay_us, client)."""
    t, source, delay, client = zip(*reports, strict=True) if reports else ((), (), (), ())
    return Capture.from_frames(
        meta={"sources": {"engine": {"kind": kind}}},
        xruns=pd.DataFrame(
            {"t_ns": pd.array(t, dtype="int64"), "engine": kind, "delay_us": pd.array(delay, dtype="Float64"),
             "client": pd.array(client, dtype=object), "source": list(source), "text": None}
        ),
        engine_status=pd.DataFrame(
            {"t_ns": [0, 10**10], "engine": kind, "quantum_frames": quantum, "rate_hz": 48000}
        ),
    )  # fmt: skip


def test_jack_callbacks_of_one_xrun_are_one_row_with_the_client_the_log_blamed():
    """jack2 notified four callbacks within 0.3 ms of one late cycle (the driver's, one per client it found
    unfinished), and its log, followed from a file, came 40 ms later: the driver's XRun line and `p1 was
    not finished`. One xrun, blamed on p1, with the driver's delay. A second xrun 600 ms later that no
    log line names is `unknown` (None)."""
    at, later = 1_000 * MS, 1_600 * MS
    callbacks = [(at + k * 100 * US, "callback", 37.0, None) for k in range(4)]
    log = [(at + 40 * MS, "server-log", 12_000.0, None), (at + 40 * MS + 5 * US, "server-log", None, "p1")]
    second = [(later + k * 20 * US, "callback", 36.0, None) for k in range(3)]
    x = engine_xruns(_engine("jack", callbacks + log + second, 128))
    assert x["t_ns"].tolist() == [at, later]
    assert x["reports"].tolist() == [6, 3]
    assert x["client"].tolist() == ["p1", None]
    assert x["delay_us"].tolist() == [12_000.0, 36.0]
    assert x["source"].tolist() == ["callback, server-log", "callback"]
    figures = xrun_figures(_engine("jack", callbacks + log + second, 128))
    assert figures is not None and figures["xruns"] == 2 and figures["reports"] == 7


def test_a_log_line_that_joins_no_callback_is_an_xrun_of_its_own():
    """Without callbacks (the log is the engine's only report) its lines are grouped like reports; a log
    line long after every callback is an xrun of its own, still blamed."""
    lines = [(500 * MS, "server-log", 9_000.0, None), (500 * MS + 30 * US, "server-log", None, "fluidsynth")]
    x = engine_xruns(_engine("jack", lines, 128))
    assert x[["reports", "client"]].values.tolist() == [[2, "fluidsynth"]]
    alone = engine_xruns(_engine("jack", [(0, "callback", 5.0, None), (400 * MS, "server-log", None, "p0")], 128))
    assert alone["client"].tolist() == [None, "p0"]


def test_a_log_line_read_before_the_callbacks_it_announced_joins_them():
    """jack2 logs `cue was not finished` and then calls its clients one by one; a client holding its
    notification thread (the cue client spinning 20 ms with Python's GIL) held the recorder's callbacks
    15.8 ms past the line (captures/jack-client-spins.ssf). One xrun, beginning at the line, blamed on
    cue; a line more than SERVER_LOG_LEAD_NS before the next callbacks stays an xrun of its own."""
    at = 1_000 * MS
    line = [(at, "server-log", None, "cue")]
    callbacks = [(at + 15_800 * US + k * 20 * US, "callback", 0.0, None) for k in range(4)]
    x = engine_xruns(_engine("jack", line + callbacks, 128))
    assert x[["t_ns", "reports", "client"]].values.tolist() == [[at, 5, "cue"]]
    early = [(at - 101 * MS, "server-log", None, "cue")]
    x = engine_xruns(_engine("jack", early + callbacks, 128))
    assert x[["reports", "client"]].values.tolist() == [[1, "cue"], [4, None]]


def test_a_log_line_joined_to_an_xrun_carries_its_last_report_for_the_lines_after_it():
    """A log line moves the xrun it joins (or begins) to its own time: a later line within
    SERVER_LOG_LAG_NS of that line joins the same xrun though it is farther than that from the callbacks,
    and a line that began an xrun of its own gathers the lines after it alike (what engine_xruns' bisection
    over the callbacks' xruns must keep)."""
    at = 1_000 * MS
    callbacks = [(at + k * 100 * US, "callback", 37.0, None) for k in range(3)]
    chained = [(at + 60 * MS, "server-log", None, "p1"), (at + 150 * MS, "server-log", None, "p2")]
    alone = [(at + 500 * MS, "server-log", None, "p3"), (at + 550 * MS, "server-log", None, "p4")]
    x = engine_xruns(_engine("jack", callbacks + chained + alone, 128))
    assert x[["t_ns", "end_ns", "reports", "client"]].values.tolist() == [
        [at, at + 150 * MS, 5, "p1, p2"],
        [at + 500 * MS, at + 550 * MS, 2, "p3, p4"],
    ]


def test_callbacks_through_one_overrun_are_one_xrun_however_far_apart():
    """A client spinning 20 ms at a 2.667 ms period: jack2 notified it unfinished at every cycle start, and
    the recorder's callbacks came 2.3-5.4 ms apart (captures/jack-recorder-first.ssf); none of the cycles
    between them ended. One xrun. The same callbacks with a cycle ended on time between two of them: two."""
    at = 1_000 * MS
    gaps_us = [0, 2_300, 5_400, 2_600, 5_300]
    callbacks = [(at + sum(gaps_us[: k + 1]) * US, "callback", 0.0, None) for k in range(len(gaps_us))]
    starts = [at - JACK_PERIOD + k * JACK_PERIOD for k in range(9)]

    def with_cycles(ends: list[int | None]) -> Capture:
        cap = _engine("jack", callbacks, 128)
        cycles = pd.DataFrame(
            {"t_ns": pd.array(starts, dtype="int64"), "engine": "jack", "period_ns": JACK_PERIOD,
             "end_ns": pd.array(ends, dtype="Int64")}
        )  # fmt: skip
        return Capture.from_frames(meta=cap.meta, xruns=cap.xruns, engine_status=cap.table("engine_status"),
                                   engine_cycles=cycles)  # fmt: skip

    overrun = engine_xruns(with_cycles([starts[0] + 60 * US] + [None] * 8))
    assert overrun["reports"].tolist() == [5]
    recovered = [starts[0] + 60 * US] + [None] * 8
    recovered[2] = starts[2] + 80 * US  # between the 2nd (at + 2.3 ms) and 3rd (at + 7.7 ms) callbacks
    assert engine_xruns(with_cycles(recovered))["reports"].tolist() == [2, 3]
    assert engine_xruns(_engine("jack", callbacks, 128))["reports"].tolist() == [2, 2, 1]  # no cycles: by time


def test_pipewire_reports_of_consecutive_unfinished_cycles_are_one_xrun():
    """PipeWire reports each cycle it found unfinished at the next one's start, a period apart: a client
    stuck 20 ms is one xrun (four reports), naming the node; one two periods after the run is another."""
    start = 1_000 * MS
    run = [(start + k * PW_PERIOD, "profiler", None, "cue") for k in range(4)]
    apart = [(start + 5 * PW_PERIOD, "profiler", None, "jalv")]
    x = engine_xruns(_engine("pipewire", run + apart, 256))
    assert x[["reports", "client"]].values.tolist() == [[4, "cue"], [1, "jalv"]]


def test_pipewire_xrun_names_the_node_with_its_status_in_the_first_report():
    """The profiler's rows say why each node was unfinished: `triggered` (woken late) in the first
    report of the run, `awake` (running late) in the next: the xrun names cue as woken late."""
    cap = _engine("pipewire", [(MS, "profiler", None, "cue"), (MS + PW_PERIOD, "profiler", None, "cue")], 256)
    xruns = cap.table("xruns").assign(
        text=[f"graph not finished (driver Dummy-Driver): cue (node 31) {s}" for s in ("triggered", "awake")]
    )
    cap = Capture.from_frames(meta=cap.meta, xruns=xruns, engine_status=cap.table("engine_status"))
    assert engine_xruns(cap)["client"].tolist() == ["cue (triggered)"]


def test_xrun_figures_of_jack_and_pipewire_recorded_together_are_each_engines_own():
    """JACK (two callbacks of one xrun, 128 frames) and PipeWire (one profiler report, 256 frames) in one
    capture: each engine's figures are its own reports, counted as it counts them; all together they are
    both engines' (was: the callbacks, JACK's count, left PipeWire's profiler report uncounted, and the
    figures named only the engine recorded last)."""
    jack = _engine("jack", [(100 * MS, "callback", 37.0, None), (100 * MS + 200 * US, "callback", 37.0, None)], 128)
    pipewire = _engine("pipewire", [(300 * MS, "profiler", None, "cue")], 256)
    engines = {"jack": {"kind": "jack"}, "pipewire": {"kind": "pipewire"}}
    cap = Capture.from_frames(
        meta={"sources": {"engine": {"kind": "pipewire"}, "engines": engines}},
        **{t: pd.concat([jack.table(t), pipewire.table(t)], ignore_index=True) for t in ("xruns", "engine_status")},
    )
    mine = {e: xrun_figures(cap, engine=e) for e in ("jack", "pipewire")}
    assert mine["jack"] is not None and mine["pipewire"] is not None
    assert (mine["jack"]["engine"], mine["jack"]["reports"], mine["jack"]["xruns"]) == ("jack", 2, 1)
    assert mine["jack"]["counted_from"] == "callback" and mine["jack"]["delay_max_us"] == 37.0
    assert (mine["pipewire"]["engine"], mine["pipewire"]["reports"], mine["pipewire"]["xruns"]) == ("pipewire", 1, 1)
    assert mine["pipewire"]["counted_from"] == "profiler" and mine["pipewire"]["blamed"] == {"cue": 1}
    both = xrun_figures(cap)
    assert both is not None and (both["engine"], both["reports"], both["xruns"]) == ("jack, pipewire", 3, 2)
    assert both["counted_from"] == "callback, profiler"
    # `forensics jitter`'s cycle ends, one row per engine: each with its own engine's xruns.
    from analyses.jitter import engine_jitter

    cycles = pd.concat(
        [pd.DataFrame({"t_ns": np.arange(0, 400 * MS, period), "engine": engine, "driver": driver,
                       "period_ns": period, "end_ns": np.arange(0, 400 * MS, period) + 300 * US})
         for engine, driver, period in (("jack", "system", JACK_PERIOD), ("pipewire", "Dummy-Driver", PW_PERIOD))],
        ignore_index=True,
    )  # fmt: skip
    with_cycles = Capture.from_frames(
        meta=cap.meta, xruns=cap.table("xruns"), engine_status=cap.table("engine_status"), engine_cycles=cycles
    )
    ends = engine_jitter(with_cycles)[2].set_index("engine")
    assert ends["xrun_reports"].to_dict() == {"jack": 2.0, "pipewire": 1.0}
    assert ends["xruns_from"].to_dict() == {"jack": "callback", "pipewire": "profiler"}
    unavailable = {**engines, "pipewire": {"kind": "pipewire", "unavailable": "no server"}}
    alone = Capture.from_frames(
        meta={"sources": {"engine": {"kind": "jack"}, "engines": unavailable}}, xruns=cap.table("xruns")
    )
    assert xrun_figures(alone, engine="pipewire") is None  # its source could not record


def test_xrun_joins_the_incident_that_covers_it_not_the_last_in_its_window():
    """An xrun reported inside incident 2 belongs to 2, though incident 3 began within 20 ms after it
    (was: the last incident within the join window, 3). One reported 1 ms after incident 3 ended, with
    incident 4 starting 2 ms after it, belongs to 3: an engine reports an xrun after its late cycle."""
    cap = _engine("jack", [(105 * MS, "callback", 10.0, None), (141 * MS, "callback", 10.0, None)], 128)
    incidents = pd.DataFrame(
        {"incident": [1, 2, 3, 4], "start_ns": [50 * MS, 100 * MS, 115 * MS, 143 * MS],
         "end_ns": [60 * MS, 110 * MS, 140 * MS, 150 * MS], "root_comm": ["a", "b", "c", "d"],
         "root_client": None, "root_verdict": "runqueue"}
    )  # fmt: skip
    rows = xrun_rows(cap, incidents)
    assert rows["incident"].tolist() == [2, 3]
    assert rows["root_comm"].tolist() == ["b", "c"]


# ---------------------------------------------------------------------------------------------------
# The stored real captures


def _json(run_module, *args: str) -> dict:
    result = run_module("forensics", *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize(
    ("path", "expected"),
    [("captures/jack-starved-ebpf.ssf", 2), ("captures/jack-starved-proc.ssf", 2),
     ("captures/pipewire-late-client.ssf", 2)],
)  # fmt: skip
def test_xruns_gives_one_row_per_engine_xrun_numbered_as_stalls(run_module, path, expected):
    """Each starvation (JACK: 3-4 callbacks each; PipeWire: the hog, then a client stuck 4 cycles) is one
    xrun row, and its incident is the one `forensics stalls` prints covering it, by the same number."""
    xruns = [r for r in _json(run_module, "xruns", path)["sections"]["xruns"] if r["kind"] == "xrun"]
    assert len(xruns) == expected, [(r["t_ns"], r["reports"]) for r in xruns]
    incidents = {r["incident"]: r for r in _json(run_module, "stalls", path)["sections"]["incidents"]}
    for row in xruns:
        assert row["incident"] in incidents
        shown = incidents[row["incident"]]
        assert shown["start_ns"] - 20 * MS <= row["t_ns"] <= shown["end_ns"] + 20 * MS
        assert shown["root_comm"] == row["root_comm"] and shown["root_verdict"] == row["root_verdict"]


# ---------------------------------------------------------------------------------------------------
# Cycles: their numbers, the cycles a driver never started, the incident's cycle


def test_cycle_starts_count_jacks_cycles_on_the_drivers_clock():
    """jack2 has no cycle counter: cycles are counted from the first recorded one. A gap of two whole
    periods is a cycle the poller missed (it ran: counted, not missed); a starved driver's 14.3 ms gap
    leaves four cycles that never started, and the late one is counted once."""
    from analyses.engine import cycle_starts

    gaps = [JACK_PERIOD, 2 * JACK_PERIOD, JACK_PERIOD, 14_331_000, JACK_PERIOD]
    t = np.r_[0, np.cumsum(gaps)] + 10**9
    cycles = pd.DataFrame(
        {"t_ns": t, "engine": "jack", "driver": "system", "cycle": pd.array([None] * len(t), dtype="Int64"),
         "period_ns": JACK_PERIOD}
    )  # fmt: skip
    starts = cycle_starts(cycles)
    assert starts["cycle"].tolist() == [0, 1, 3, 4, 5, 6] and starts["counted"].all()
    assert starts["missed_before"].tolist() == [0, 0, 0, 0, 4, 0]
    own = cycle_starts(cycles.assign(cycle=pd.array([7, 8, 10, 11, 12, 13], dtype="Int64")))
    assert own["cycle"].tolist() == [7, 8, 10, 11, 12, 13] and not own["counted"].any()


@pytest.mark.parametrize(
    ("path", "expected"),
    [("captures/jack-starved-ebpf.ssf", {1: 1706, 2: 1927}), ("captures/jack-starved-proc.ssf", {1: 804, 2: 1025}),
     ("captures/pipewire-late-client.ssf", {1: 1185, 2: 1287})],
)  # fmt: skip
def test_incidents_carry_their_late_cycle_and_whether_the_engine_reported_it(run_module, path, expected):
    """Each starvation's incident names the cycle the driver started late after the cycles it never
    started (JACK: counted on its clock; PipeWire: its own counter), the client stuck 20 ms its first
    unfinished cycle; each with the one engine xrun `forensics xruns` joins to it."""
    incidents = {r["incident"]: r for r in _json(run_module, "stalls", path)["sections"]["incidents"]}
    for number, cycle in expected.items():
        row = incidents[number]
        assert (row["cycle"], row["xrun"], row["xruns"]) == (cycle, True, 1), row
    others = [r for n, r in incidents.items() if n not in expected]
    assert all(r["xrun"] is False and r["xruns"] == 0 and r["cycle"] is not None for r in others)


# ---------------------------------------------------------------------------------------------------
# system: its XRUN and cycle rows from the engine's cycles, counting the cycles never begun


def test_system_counts_the_cycles_a_starved_driver_never_began():
    """A JACK record with a cycle the poller missed (two periods on the grid: it ran) and a 14.3 ms
    starvation (four cycles never began): four deadline misses, from the engine, not 'unknown: needs
    cycle ends'; the delay is the late start's, the cycle time the last client's finish."""
    from analyses.system import system_figures

    gaps = [JACK_PERIOD] * 10 + [2 * JACK_PERIOD] + [JACK_PERIOD] * 10 + [14_331_000] + [JACK_PERIOD] * 10
    t = np.r_[0, np.cumsum(gaps)] + 10**10
    cap = Capture.from_frames(
        meta={"sources": {"engine": {"kind": "jack"}}},
        engine_cycles=pd.DataFrame(
            {"t_ns": t, "engine": "jack", "driver": "system", "cycle": pd.array([None] * len(t), dtype="Int64"),
             "quantum_frames": 128, "rate_hz": 48000, "period_ns": JACK_PERIOD,
             "end_ns": pd.array(t + 200 * US, dtype="Int64")}
        ),
    )  # fmt: skip
    figures = system_figures(cap).set_index("figure")
    assert figures.loc["XRUNs (deadline misses)", "value"] == 4
    assert figures.loc["XRUNs (deadline misses)", "source"] == "jack cycles: 0 ended late, 4 never began"
    assert figures.loc["Delay maximum", "value"] == pytest.approx((14_331_000 - JACK_PERIOD) / 1e3)
    assert figures.loc["Cycle maximum", "value"] == 200
    assert figures.loc["Cycles never begun (engine)", "value"] == 4


@pytest.mark.parametrize(
    ("path", "source"),
    [("captures/jack-starved-ebpf.ssf", "jack cycles: 0 ended late, 8 never began"),
     ("captures/pipewire-late-client.ssf", "pipewire cycles: 4 ended late, 3 never began")],
)  # fmt: skip
def test_system_takes_its_xrun_rows_from_the_engine(run_module, path, source):
    """Each JACK starvation left 4 cycles never begun (8); PipeWire's hog 3, its stuck client 4 cycles
    that ended late. The engine's figures, where it said 'unknown: needs cycle ends'."""
    figures = {f["figure"]: f for f in _json(run_module, "system", path)["sections"]["figures"]}
    misses = figures["XRUNs (deadline misses)"]
    assert misses["source"] == source and misses["value"] == int(source.split()[2]) + int(source.split()[5])
    assert figures["Delay maximum"]["value"] > 10_000  # the starved driver's late start, in us
    assert figures["Delay maximum"]["source"].startswith(source.split()[0] + " engine cycles")


def test_jitter_plot_and_compare_count_the_cycles_never_begun_and_compare_the_incidents():
    """jack-starved-ebpf: each starvation left 4 cycles never begun. jitter's engine ends, the timeline's
    label and compare's deadline misses count them (all said 0: no cycle that ended late)."""
    import forensics
    from analyses.compare import capture_figures
    from analyses.jitter import engine_jitter
    from forensics.plots.data import timeline_data
    from tests.helpers import REPO

    cap = forensics.load(REPO / "captures/jack-starved-ebpf.ssf")
    _, _, ends = engine_jitter(cap)
    assert ends.set_index("engine").loc["jack", "never_begun"] == 8
    assert "0 late, 8 never began" in timeline_data(cap, "jackd").cycles_label
    figures = capture_figures(cap)
    assert figures["deadline misses"][0] == 8 and figures["  never began"][0] == 8
    # compare's incidents are those of `forensics stalls` (2 here: the two starvations; the waits over
    # cycles recorded on time are none, nor a client woken 0.7 ms late 70 ms after the last tick)
    assert figures["incidents"][0] == 2
    assert figures["incidents per minute"][0] == pytest.approx(2 / (figures["duration"][0] / 60))


def test_the_timeline_marks_each_incident_numbered_as_stalls():
    """captures/jack-starved-ebpf.ssf: the incidents `forensics stalls` prints in the plotted span (1 and
    2, the starvations rooted at jackd) are grey spans on the top panel, labelled with their number, root
    and verdict."""
    import forensics
    from forensics.plots.data import timeline_data
    from forensics.plots.timeline import draw_timeline
    from tests.helpers import REPO

    data = timeline_data(forensics.load(REPO / "captures/jack-starved-ebpf.ssf"), "jackd")
    assert data.incidents["incident"].tolist() == [1, 2]
    assert data.incidents["root_verdict"].tolist() == ["runqueue", "runqueue"]
    fig = draw_timeline(data)
    assert [a.get_gid() for a in fig.findobj()].count("incident") == 2
    labels = [a.get_text() for a in fig.findobj() if a.get_gid() == "incident-label"]
    assert labels == ["#1 jackd runqueue", "#2 jackd runqueue"]
