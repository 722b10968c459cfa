"""Plots: the figure holds what a reader needs (checked on its artists, not on the file existing)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection

import forensics
from analyses.cycles import lab_cycles
from analyses.stalls import find_stalls
from capture.format import Capture
from forensics.plots import SLOW_CORE, VERDICT_COLORS, figure_bytes
from forensics.plots.compare import draw_compare
from forensics.plots.data import compare_data, jitter_data, timeline_data
from forensics.plots.jitter import LOST, draw_jitter
from forensics.plots.timeline import draw_timeline
from tests import synth
from tests.artefact_captures import CLEAN, EPISODES, with_markers
from tests.synth import MS, T0, Episode, Timeline


def _gids(fig, prefix: str) -> list[str]:
    return [a.get_gid() for a in fig.findobj() if isinstance(a.get_gid(), str) and a.get_gid().startswith(prefix)]


def _texts(fig) -> list[str]:
    return [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]


def _legend(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]


@pytest.fixture(scope="module")
def episodes_figure():
    cap = with_markers()
    data = timeline_data(cap, "lab-episodes")
    return cap, data, draw_timeline(data)


def test_timeline_shows_every_verdict_span_labelled(episodes_figure):
    cap, data, fig = episodes_figure
    stalls = find_stalls(cap)
    shown = stalls[stalls["tid"].isin(data.threads["tid"])]
    assert len(shown) == 7  # the lab's five episodes on lab-audio, and lab-hog's runs
    spans = _gids(fig, "verdict-span:")
    assert sorted(s.split(":")[1] for s in spans) == sorted(shown["verdict"])
    labels = [t for t in _texts(fig) if t.split(" ")[0] in VERDICT_COLORS and t.endswith(" ms")]
    assert sorted(label.split(" ")[0] for label in labels) == sorted(shown["verdict"])
    for verdict in ("run", "runqueue", "io", "fault", "lock"):
        assert f"stall: {verdict}" in _legend(fig)


def test_timeline_marks_the_markers_and_the_deadline(episodes_figure):
    cap, _, fig = episodes_figure
    texts = _texts(fig)
    assert "▼ load" in texts and "▼ loaded" in texts
    assert "marker (set while recording)" in _legend(fig)
    deadline = [a for a in fig.findobj() if a.get_gid() == "deadline"]
    assert len(deadline) == 1
    period_ms = float(np.median(np.diff(np.sort(cap.cycles["deadline_ns"].to_numpy())))) / 1e6
    assert deadline[0].get_ydata()[0] == pytest.approx(period_ms, rel=1e-3)
    late = [a for a in fig.findobj() if a.get_gid() == "late-cycles"]
    assert late and len(late[0].get_offsets()) == int(lab_cycles(cap)["missed"].sum()) == 5


def test_timeline_stacks_run_wait_and_blocked_with_their_amounts(episodes_figure):
    _, data, fig = episodes_figure
    legend = _legend(fig)
    assert {"on CPU", "waiting for a CPU (runqueue)", "blocked in D (IO, page-in)"} <= set(legend)
    assert {"on_cpu_ns", "runqueue_ns", "blocked_ns"} <= set(_gids(fig, ""))
    # The io episode of lab-audio is drawn as blocked time: the windows carry it.
    audio = data.windows[data.windows["tid"] == int(data.threads.iloc[0]["tid"])]
    assert audio["blocked_ns"].sum() > 15 * MS
    assert data.threads.iloc[0]["comm"] == "lab-audio"  # the periodic callback thread comes first


def test_timeline_span_and_thread_select(tmp_path):
    cap = with_markers()
    data = timeline_data(cap, "x", pattern="hog", t_range=(None, None))
    assert data.threads["comm"].tolist() == ["lab-hog"]
    origin = int(cap.samples["t_ns"].min())
    part = timeline_data(cap, "x", t_range=(origin + 3_000_000_000, origin + 4_000_000_000))
    assert part.windows["start_ns"].min() >= origin + 3_000_000_000 - 3 * MS
    assert "io" in set(part.stalls["verdict"])  # the episode at 3.3 s
    assert (part.stalls["start_ns"] >= origin + 3_000_000_000 - 3 * MS).all()  # none from before the span


def _hybrid() -> Capture:
    hog = Timeline(tid=1002, comm="hog", cpu=2)
    synth.busy(hog, t0=T0, duration_ns=2_000 * MS)
    cap = synth.audio_capture([Episode("run", 100, 10)], seconds=2, extra=[hog])
    samples = cap.samples.copy()
    moved = (samples["tid"] == 1001) & (samples["t_ns"] > T0 + 800 * MS) & (samples["t_ns"] < T0 + 1200 * MS)
    samples.loc[moved, "cpu"] = 3
    meta = synth.meta(cpus=(0, 1, 2, 3), core_types={"P-core": [0, 1], "E-core": [2, 3]})
    meta["cpus"]["max_freq_khz"] = {"0": 5_000_000, "1": 5_000_000, "2": 3_000_000, "3": 3_000_000}
    return Capture.from_frames(meta=meta, trailer=cap.trailer, samples=samples, threads=cap.table("threads"))


def test_placement_colours_hybrid_core_types():
    data = timeline_data(_hybrid(), "hybrid")
    fig = draw_timeline(data)
    assert "on E-core (slow)" in _legend(fig) and "on P-core" in _legend(fig)
    points = [a for a in fig.findobj(PathCollection) if a.get_gid() == "placement"]
    colors = {tuple(np.round(c, 3)) for p in points for c in p.get_facecolors()}
    slow = tuple(np.round(np.array([int(SLOW_CORE[i : i + 2], 16) / 255 for i in (1, 3, 5)] + [1.0]), 3))
    assert slow in colors and len(colors) == 2  # the E-core stint of lab-audio stands out
    assert any(t.get_text() == "cpu 3 E-core" for ax in fig.axes for t in ax.get_yticklabels())


def test_jitter_marks_lost_wakeups_at_multiples_of_the_period():
    fig = draw_jitter(jitter_data(forensics.load(EPISODES), "episodes"))
    assert "period-x4" in _gids(fig, "period-x")
    bars = [p for a in fig.axes for p in a.patches]
    lost = [p for p in bars if tuple(np.round(p.get_facecolor()[:3], 3)) == tuple(
        np.round([int(LOST[i : i + 2], 16) / 255 for i in (1, 3, 5)], 3))]  # fmt: skip
    assert lost and sum(p.get_height() for p in lost) == 5  # the five 20 ms episodes: 4x the period
    clean = draw_jitter(jitter_data(forensics.load(CLEAN), "clean"))
    assert _gids(clean, "period-x") == ["period-x1"]
    assert "no lost wake-up" in " ".join(_texts(clean))


def test_compare_plot_draws_both_arms_and_the_deadline():
    data = compare_data(forensics.load(CLEAN), forensics.load(EPISODES), "clean", "episodes")
    fig = draw_compare(data)
    assert {"cycles-A", "cycles-B", "deadline"} <= set(_gids(fig, ""))
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert any(t.startswith("stall episodes by verdict") for t in titles)
    assert any(t.startswith("CPU of the targets") and "%" in t for t in titles)
    assert figure_bytes(fig)[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_cli_writes_png_and_svg(run_module, tmp_path):
    out = tmp_path / "t.png"
    result = run_module("forensics", "plot", str(EPISODES), "-o", str(out), "--span", "2s..4s")
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = tmp_path / "j.svg"
    result = run_module("forensics", "plot", str(EPISODES), "--kind", "jitter", "-o", str(svg))
    assert result.returncode == 0 and "<svg" in svg.read_text()[:500]
    result = run_module("forensics", "plot", str(CLEAN), str(EPISODES), "-o", str(tmp_path / "ab.png"))
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-o", "x.jpg"], "name the file .png, .svg"),
        (["--kind", "pie", "-o", "x.png"], "unknown --kind 'pie'"),
        (["--kind", "compare", "-o", "x.png"], "--kind compare needs two captures"),
        (["--thread", "nomatch", "-o", "x.png"], "no thread of"),
    ],
)
def test_plot_cli_errors_are_one_line(run_module, tmp_path, args, message):
    result = run_module("forensics", "plot", str(EPISODES), *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("forensics: error:")
    assert "Traceback" not in result.stderr


def test_timeline_of_an_empty_span_is_an_error():
    cap = forensics.load(EPISODES)
    origin = int(cap.samples["t_ns"].min())
    with pytest.raises(forensics.ForensicsError):
        timeline_data(cap, "x", t_range=(origin + 100_000_000_000, None))
    assert isinstance(pd.DataFrame(), pd.DataFrame)


def _lab(color: str) -> np.ndarray:
    """sRGB hex -> CIELAB (D65): distances in it follow what eyes tell apart."""
    rgb = np.array([int(color[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    rgb = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ rgb
    xyz /= np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def test_thread_colours_never_look_like_verdict_or_part_colours():
    from itertools import combinations

    from forensics.colors import PART_COLORS, THREAD_COLORS

    taken = [*VERDICT_COLORS.values(), *PART_COLORS.values()]
    apart = min(np.linalg.norm(_lab(t) - _lab(v)) for t in THREAD_COLORS for v in taken)
    assert apart >= 20, apart
    assert min(np.linalg.norm(_lab(a) - _lab(b)) for a, b in combinations(THREAD_COLORS, 2)) >= 20


def _title_colors(fig) -> dict[str, str]:
    from matplotlib.colors import to_hex

    return {ax.get_title(loc="left").split(" ")[0]: to_hex(ax._left_title.get_color())
            for ax in fig.axes if ax.get_title(loc="left")}  # fmt: skip


def test_a_thread_keeps_its_colour_across_plots():
    cap = with_markers()
    both = _title_colors(draw_timeline(timeline_data(cap, "x")))
    alone = _title_colors(draw_timeline(timeline_data(cap, "x", pattern="hog")))
    hog = next(name for name in both if name.startswith("lab-hog"))
    assert alone[hog] == both[hog]
    audio = next(name for name in both if name.startswith("lab-audio"))
    assert both[audio] != both[hog]


def test_a_short_episode_on_a_long_timeline_is_a_few_pixels_wide():
    cap = synth.audio_capture([Episode("run", 5_000, 20)], seconds=60)
    data = timeline_data(cap, "long")
    assert len(data.stalls) >= 1
    fig = draw_timeline(data)
    fig.canvas.draw()
    spans = [a for a in fig.findobj() if str(a.get_gid()).startswith("verdict-span:")]
    assert spans
    widths = [s.get_window_extent().width for s in spans]
    assert min(widths) >= 3.5, widths  # 20 ms of 60 s would be 0.3 px wide


def test_compare_plot_without_episodes_has_sensible_axes():
    data = compare_data(forensics.load(CLEAN), forensics.load(CLEAN), "a", "b")
    fig = draw_compare(data)
    ax = next(ax for ax in fig.axes if ax.get_title(loc="left").startswith("stall episodes by verdict"))
    assert ax.get_ylim() == (0.0, 1.1)
    assert "no stall episode in A or B" in _texts(fig)
    assert figure_bytes(fig)[:8] == b"\x89PNG\r\n\x1a\n"


def test_jitter_draws_the_engines_cycle_starts_first():
    """Where the capture has engine cycles the jitter picture leads with the driver's own cycle starts
    (analyses.jitter.engine_jitter, exact): in captures/jack-starved-ebpf.ssf 9 starts came 2 periods
    apart (the starvations) and 3 far later (the longest 1.6 s): those 3 share the last bin, which says
    so, instead of stretching the bins over 1.6 s and lumping every ordinary start into one."""
    from tests.helpers import REPO

    data = jitter_data(forensics.load(REPO / "captures" / "jack-starved-ebpf.ssf"), "jack")
    fig = draw_jitter(data)
    assert (
        fig.axes[0].get_title(loc="left").startswith("jack engine, driver system: 1425 intervals between cycle starts")
    )
    bars = [p for p in fig.axes[0].patches if p.get_gid() == "engine-histogram"]
    assert sum(p.get_height() for p in bars) == 1425
    hist = data.engine_histogram
    assert int(hist.loc[hist["multiple"] == 2, "count"].sum()) == 9
    assert hist["beyond"].tolist()[-1] == 3 and hist["hi_ns"].max() < 6 * 2_666_667
    assert "3 of them longer ->" in _texts(fig)
    assert len(fig.axes) == 1 + len(data.stats)
    # Its threads (2.667 ms periods timed by /proc at 2 ms) cannot tell a lost wake-up: unknown, not 346.
    assert all(f.startswith("lost wake-ups unknown") for f in data.stats["flag"]) and data.stats["lost_2x"].isna().all()
    lab = jitter_data(forensics.load(EPISODES), "episodes")  # no engine cycles: threads only
    assert lab.engine_stats.empty and not _gids(draw_jitter(lab), "engine")


def test_a_threads_histogram_says_how_many_intervals_lay_past_its_last_bin():
    """A thread's histogram stops a period past 4x its period as the engine's does, and its last bin says
    how many of its intervals lay beyond (analyses.jitter HIST_COLUMNS keeps `beyond`): a 40 ms and a
    35 ms wait of a 5.333 ms callback are 2 of them, in the table's mark and on the picture."""
    from forensics.views.jitter import jitter_report

    cap = synth.audio_capture([Episode("lock", 200, 40), Episode("io", 400, 35)], seconds=3)
    data = jitter_data(cap, "synthetic")
    hist = data.histogram
    assert hist["beyond"].tolist()[-1] == 2 and hist["beyond"].sum() == 2
    assert hist["hi_ns"].max() < 6 * 5_333_333
    assert "2 of them longer ->" in _texts(draw_jitter(data))
    section = next(s for s in jitter_report(cap, "synthetic").sections if s.name == "histogram")
    assert section.frame["mark"].tolist()[-1] == "2 of them longer"


def test_a_timeline_whose_windows_hold_several_wake_ups_draws_no_cycles_and_says_why() -> None:
    from tests.test_stalls import _starved_in_long_windows

    data = timeline_data(_starved_in_long_windows(15), "bitwig-from-proc")
    assert data.cycles.empty
    assert "no per-wake-up estimate: read every 11 ms" in data.subtitle
    draw_timeline(data)  # drawn without its cycles panel
