"""The views on an engine's own cycles (jitter, plot, report), on a synthetic capture with engine tables.

The captures in captures/ have no engine tables: their outputs are pinned by tests/test_golden.py.
"""

from __future__ import annotations

import pandas as pd

from capture.format import Capture

PERIOD_NS = 5_333_333  # 256 frames at 48 kHz


def engine_capture(t0: int = 10_000_000_000, base: Capture | None = None) -> Capture:
    """(`base`'s tables plus) 40 JACK cycles from t0: one lost cycle (a 2x spacing) and one lost pair (3x),
    one cycle ending after its deadline, one whose end is unknown; two xrun callbacks within a period and a
    log line blaming `cue`."""
    starts, t = [], t0
    for i in range(40):
        starts.append(t)
        t += PERIOD_NS * (2 if i == 10 else 3 if i == 20 else 1)
    ends: list[int | None] = [s + 400_000 for s in starts]
    ends[30] = starts[30] + 7_000_000  # ended after the next cycle was due
    ends[35] = None
    late = int(starts[30] + 7_000_000)
    engine = {"kind": "jack", "version": "1.9.22"}
    meta = (
        dict(base.meta, sources=dict(base.meta["sources"], engine=engine)) if base else {"sources": {"engine": engine}}
    )
    frames = {name: base.table(name) for name in base.table_names} if base else {}
    return Capture.from_frames(
        meta=meta,
        trailer=base.trailer if base else None,
        **frames,
        engine_cycles=pd.DataFrame(
            {"t_ns": starts, "engine": "jack", "driver": "system", "quantum_frames": 256, "rate_hz": 48000,
             "period_ns": PERIOD_NS, "end_ns": pd.array(ends, dtype="Int64")}
        ),
        xruns=pd.DataFrame(
            {"t_ns": [late, late + 30_000, late + 60_000], "engine": "jack", "delay_us": [1700.0, 1700.0, None],
             "client": [None, None, "cue"], "source": ["callback", "callback", "server-log"], "text": None}
        ),
        engine_status=pd.DataFrame(
            {"t_ns": [starts[0], starts[-1]], "engine": "jack", "quantum_frames": 256, "rate_hz": 48000,
             "dsp_load_percent": [3.0, 4.0]}
        ),
    )  # fmt: skip


def test_engine_jitter_figures() -> None:
    from analyses.jitter import engine_jitter

    starts, hist, ends = engine_jitter(engine_capture())
    assert len(starts) == 1
    row = starts.iloc[0]
    assert (row["engine"], row["driver"], row["nominal_ns"]) == ("jack", "system", PERIOD_NS)
    assert row["n"] == 39 and row["lost_2x"] == 1 and row["lost_3x"] == 1 and row["lost_4x"] == 0
    assert "engine cycles" in row["source"]
    assert set(hist.loc[hist["count"] > 0, "multiple"]) == {0, 2, 3}
    assert int(hist["count"].sum()) == 39
    e = ends.iloc[0]
    assert (e["cycles"], e["cycles_with_end"], e["deadline_misses"], e["misses_unknown"]) == (40, 39, 1, 1)
    assert e["end_p50_ns"] == 400_000 and e["end_max_ns"] == 7_000_000
    assert e["xruns"] == 1 and e["xrun_reports"] == 2 and e["xrun_delay_max_us"] == 1700.0
    assert e["xruns_from"] == "callback"


def test_engine_jitter_is_empty_without_engine_cycles() -> None:
    from analyses.jitter import engine_jitter

    assert all(f.empty for f in engine_jitter(Capture.from_frames(meta={})))


def test_jitter_view_shows_the_engine_sections() -> None:
    from forensics.render import render
    from forensics.views.jitter import jitter_report

    report = jitter_report(engine_capture(), "synthetic")
    names = [s.name for s in report.sections]
    assert {"engine_starts", "engine_histogram", "engine_ends"} <= set(names)
    text = render(report, "table")
    assert "jack engine cycles" in text and "2x period" in text and "3x period" in text


def test_timeline_top_panel_uses_the_engine_cycles_and_marks_its_xruns() -> None:
    from forensics.plots.data import timeline_data
    from forensics.plots.timeline import draw_timeline
    from tests import synth

    cap = engine_capture(synth.T0 + 100_000_000, synth.audio_capture(seconds=1.0))
    data = timeline_data(cap, "engine")
    assert len(data.cycles) == 39  # the cycle without an end has no point
    assert data.cycles["value_ns"].max() == 7_000_000 and int(data.cycles["missed"].sum()) == 1
    assert data.deadline_ns == PERIOD_NS and "jack" in data.deadline_label and "jack engine cycles" in data.cycles_label
    assert len(data.xruns) == 3
    fig = draw_timeline(data)
    gids = [a.get_gid() for a in fig.findobj()]
    assert gids.count("xrun") == 3 and "late-cycles" in gids
    # Without the engine tables the same threads give the /proc estimate, and no xrun mark.
    plain = timeline_data(synth.audio_capture(seconds=1.0), "plain")
    assert "engine" not in plain.cycles_label and plain.xruns.empty


def test_report_engine_rows() -> None:
    from analyses.engine import engine_overview
    from forensics.views.report import engine_rows

    rows = engine_rows(engine_overview(engine_capture()) or {})
    assert rows["engine"] == "jack" and rows["version"] == "1.9.22"
    assert rows["quantum / rate"].startswith("256 frames / 48000 Hz")
    assert rows["cycles observed"] == "40 (39 with an end)" and rows["cycle end max"] == "7.000 ms"
    assert rows["deadline misses"] == "1 (1 cycles unknown)" and rows["clients blamed"] == "cue (1)"
    assert engine_overview(Capture.from_frames(meta={})) is None


def test_xruns_without_an_incident_show_no_root() -> None:
    """An xrun no incident explains, beside one an incident does: its root is empty, never the text "nan" (a
    column of roots mixing names and none holds NaN where none)."""
    from analyses.incidents import INCIDENT_COLUMNS
    from forensics.views.incidents import xruns_report

    cap = engine_capture()
    later = cap.table("xruns").iloc[:1].assign(t_ns=lambda x: x["t_ns"] + 300_000_000)  # one more, 300 ms on
    cap = Capture.from_frames(
        meta=cap.meta,
        trailer=None,
        **{name: cap.table(name) for name in cap.table_names if name != "xruns"},
        xruns=pd.concat([cap.table("xruns"), later], ignore_index=True),
    )
    # One incident around the late cycle and its xrun only.
    late = int(cap.table("xruns")["t_ns"].min())
    one = {c: [None] for c in INCIDENT_COLUMNS}
    one |= {"incident": [1], "start_ns": [late - 8_000_000], "end_ns": [late], "root_comm": ["x"]}
    frame = xruns_report(cap, "synthetic", pd.DataFrame(one), origin_ns=0).sections[0].frame
    assert frame["incident"].notna().tolist() == [True, True, False], frame
    assert frame["root_text"].tolist()[:2] == ["x", "x"] and pd.isna(frame["root_text"].iloc[2]), frame["root_text"]


def test_xruns_before_the_recordings_first_read_are_said_to_be() -> None:
    """The engine's sources attach before the threads' sampler reads (a real jackd found by --match: 9 xruns
    of its start-up at negative times, root unknown): the view says why they have no root."""
    from analyses.incidents import INCIDENT_COLUMNS
    from analyses.source import first_sample_ns
    from forensics.views.incidents import xruns_report
    from tests import synth

    thread = synth.Timeline(tid=7, comm="jackd", pid=7)
    synth.periodic(thread, t0=10_000_000_000, duration_ns=300_000_000, period_ns=PERIOD_NS)
    cap = engine_capture(base=synth.capture([thread], t0=10_000_000_000, duration_ns=300_000_000))
    first_read = first_sample_ns(cap)
    assert first_read is not None
    none = pd.DataFrame({c: [] for c in INCIDENT_COLUMNS})
    xruns = cap.table("xruns")
    for shift_ns, said in ((0, None), (first_read - int(xruns["t_ns"].min()) - 1, 1)):
        moved = xruns.iloc[:1].assign(t_ns=lambda x, s=shift_ns: x["t_ns"] + s)
        early = Capture.from_frames(
            meta=cap.meta,
            trailer=None,
            **{n: cap.table(n) for n in cap.table_names if n != "xruns"},
            xruns=pd.concat([moved, xruns.iloc[1:]], ignore_index=True),
        )
        notes = xruns_report(early, "synthetic", none, origin_ns=0).notes
        before = [note for note in notes if "before the recording's first read" in note]
        expected = [] if said is None else [
            f"{said} of these came before the recording's first read of the threads (the engine's sources "
            "attached first): no thread was read then, so their root is unknown."
        ]  # fmt: skip
        assert before == expected, notes


def test_xruns_after_the_recordings_end_are_said_to_be() -> None:
    """The engine's sources stop after the threads' sampler: an xrun they saw after the recording's end has
    no incident, and the view says why (seen on a real jackd: two xruns 0.3 s after the end, root unknown);
    the missed deadline of the cycle before the end is not counted."""
    from analyses.incidents import INCIDENT_COLUMNS
    from forensics.views.incidents import xruns_report

    cap = engine_capture()
    first = int(cap.table("xruns")["t_ns"].min())
    none = pd.DataFrame({c: [] for c in INCIDENT_COLUMNS})
    for ended_ns, said in ((first - 1, True), (first + 1_000_000_000, False)):
        ended = Capture.from_frames(
            meta=cap.meta, trailer={"ended_ns": ended_ns}, **{n: cap.table(n) for n in cap.table_names}
        )
        notes = xruns_report(ended, "synthetic", none, origin_ns=0).notes
        after = [note for note in notes if "after the recording's end" in note]
        assert (after == ["1 of these came after the recording's end (the engine's sources stop after the threads' "
                          "sampler): no thread was read then, so their root is unknown."]) == said, notes  # fmt: skip
