"""Per-thread windows: deltas, reconciliation of late-accounted time, joins, streaming in batches."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analyses.source import STATE_CODE, load_samples, state_codes
from analyses.windows import core_type_map, iter_raw_windows, reconcile, thread_windows, window_deltas
from capture.format import Capture, CaptureWriter, load
from tests import synth
from tests.synth import MS, T0, Episode, Timeline


def _audio(episodes=(), seconds=2.0, **kw):
    return synth.audio_capture(episodes, seconds=seconds, **kw)


def _around(w: pd.DataFrame, start: int, end: int) -> pd.DataFrame:
    return w[(w["end_ns"] > start) & (w["start_ns"] < end)]


def test_state_codes_cover_letters_and_missing():
    codes = state_codes(pd.Series(["R", "S", "D", None, "Z", "?x"], dtype="category"))
    assert codes.tolist() == [STATE_CODE["R"], STATE_CODE["S"], STATE_CODE["D"], 0, STATE_CODE["Z"], 0]


def test_wall_time_is_split_exactly_per_window():
    cap = _audio([Episode("runqueue", 50, 10), Episode("run", 150, 10)])
    w = thread_windows(cap)
    total = w["on_cpu_ns"] + w["runqueue_ns"] + w["off_cpu_ns"]
    assert (total == w["wall_ns"]).all()
    assert (w[["on_cpu_ns", "runqueue_ns", "off_cpu_ns"]] >= 0).all().all()
    # Per thread the reconciled totals equal what the kernel accounted.
    assert w["on_cpu_ns"].sum() + w["runqueue_ns"].sum() == w["run_delta_ns"].sum() + w["wait_delta_ns"].sum()


def test_runqueue_wait_accounted_at_switch_in_is_moved_back():
    cap = _audio([Episode("runqueue", 50, 10)])
    truth = cap.truth.iloc[0]
    w = thread_windows(cap)
    during = _around(w, truth.start_ns + 2 * MS, truth.end_ns - 2 * MS)
    # Raw schedstat shows nothing while the thread waits (run_delay grows only at switch-in)...
    assert (during["wait_delta_ns"] == 0).all()
    assert w["wait_delta_ns"].max() > 9 * MS
    # ...reconciled, the wait is where it was lived.
    assert (during["runqueue_ns"] > 0.8 * during["wall_ns"]).all()


def test_tick_lag_of_a_running_thread_is_smoothed():
    cap = _audio([Episode("run", 50, 16)])
    truth = cap.truth.iloc[0]
    w = thread_windows(cap)
    during = _around(w, truth.start_ns + 2 * MS, truth.end_ns - 2 * MS)
    # With CONFIG_HZ=250 a read lags the tick: raw deltas alternate between 0 and 4 ms.
    assert (during["run_delta_ns"] == 0).any()
    assert (during["run_delta_ns"] > during["wall_ns"]).any()
    # Reconciled, every window of the run is (nearly) all on CPU. Where the catch-up could belong to two
    # windows the suffix minimum puts it in the later one, so the edge may be off by a little.
    assert (during["on_cpu_ns"] >= 0.95 * during["wall_ns"]).all()


def test_reused_tid_does_not_make_a_window():
    samples = pd.DataFrame(
        {
            "tick": [0, 1, 2, 3],
            "t_ns": [0, 2 * MS, 4 * MS, 6 * MS],
            "tid": [5, 5, 5, 5],
            "pid": [5, 5, 5, 5],
            "run_ns": [10 * MS, 11 * MS, 0, MS // 2],  # a new thread got tid 5 at tick 2
            "wait_ns": [0, 0, 0, 0],
            "slices": [40, 41, 1, 2],
            "state": np.array([STATE_CODE["S"]] * 4, dtype=np.int8),
        }
    )
    w = window_deltas(samples)
    assert w["tick"].tolist() == [1, 3]
    assert (w["run_delta_ns"] >= 0).all()


def test_blkio_is_unknown_without_delay_accounting_and_clamped_with_it():
    base = {
        "tick": [0, 1, 2],
        "t_ns": [0, 2 * MS, 4 * MS],
        "tid": [7, 7, 7],
        "pid": [7, 7, 7],
        "run_ns": [0, 0, 0],
        "wait_ns": [0, 0, 0],
        "slices": [1, 1, 1],
        "blkio_ticks": [0, 0, 4_000_000],  # the kernel bug: a jump to ~uptime x 100
    }
    off = window_deltas(pd.DataFrame(base), delayacct=False)
    assert off["blkio_ns"].isna().all()
    on = window_deltas(pd.DataFrame(base), delayacct=True)
    assert on["blkio_ns"].tolist() == [0, 2 * MS]


def test_core_types_and_slow_cores():
    meta = {"cpus": {"core_types": {"P-core": [0, 1], "E-core": [2, 3]}, "max_freq_khz": {"0": 5000, "2": 3000}}}
    mapping, slow = core_type_map(meta["cpus"])
    assert mapping == {0: "P-core", 1: "P-core", 2: "E-core", 3: "E-core"}
    assert slow == {"E-core"}
    named_only = {"cpus": {"core_types": {"core": [0], "atom": [1]}}}
    assert core_type_map(named_only["cpus"])[1] == {"atom"}
    tl = Timeline(tid=9, comm="a", cpu=0, cpu_changes=[(T0 + 500 * MS, 3)])
    synth.random_waker(tl, t0=T0, duration_ns=1_000 * MS, rate_hz=50)
    cap = synth.capture([tl], t0=T0, duration_ns=1_000 * MS)
    cap.meta["cpus"] = meta["cpus"]
    w = thread_windows(cap)
    assert set(w.loc[w["end_ns"] < T0 + 400 * MS, "core_type"].astype(str)) == {"P-core"}
    assert w.loc[w["end_ns"] > T0 + 600 * MS, "slow_core"].all()
    assert not w.loc[w["end_ns"] < T0 + 400 * MS, "slow_core"].any()


def test_sched_file_deltas_join_and_missing_schedstats_stay_out():
    cap = _audio(seconds=0.5)
    samples = cap.samples[cap.samples["tid"] == 1001]
    n = len(samples)
    sched = pd.DataFrame(
        {
            "tick": samples["tick"].to_numpy(),
            "t_ns": samples["t_ns"].to_numpy(),
            "tid": samples["tid"].to_numpy(),
            "nr_voluntary_switches": np.arange(n) * 2,
            "nr_involuntary_switches": np.arange(n) // 10,
            "wait_sum_ns": pd.array([pd.NA] * n, dtype="Int64"),  # no CONFIG_SCHEDSTATS
        }
    )
    cap2 = Capture.from_frames(meta=cap.meta, samples=cap.samples, threads=cap.table("threads"), sched=sched)
    w = thread_windows(cap2)
    assert (w["vol_switches"] == 2).all()
    assert w["invol_switches"].sum() == (n - 1) // 10
    assert "wait_sum_ns" not in w


def test_streaming_windows_match_whole_capture(tmp_path):
    worker = Timeline(tid=1002, comm="worker", cpu=0)
    synth.busy(worker, t0=T0, duration_ns=2_000 * MS)
    cap = _audio([Episode("run", 40, 8)], extra=[worker])
    path = tmp_path / "c.ssf"
    samples = cap.samples
    with CaptureWriter(path, cap.meta) as writer:
        for _, chunk in samples.groupby(samples["tick"] // 97):  # many small chunks
            writer.append("samples", chunk)
    on_disk = load(path)
    whole = window_deltas(load_samples(on_disk, ["pid", "run_ns", "wait_ns", "slices", "state"]))
    streamed = pd.concat(iter_raw_windows(on_disk, ["pid", "run_ns", "wait_ns", "slices", "state"], batch_rows=700))
    streamed = streamed.sort_values(["tid", "tick"]).reset_index(drop=True)
    assert len(streamed) == len(whole) == len(samples) - 2
    assert (streamed["run_delta_ns"].to_numpy() == whole["run_delta_ns"].to_numpy()).all()


def test_reconcile_keeps_time_before_the_first_read_out():
    # The first window carries a wait accounted for time before the capture began: not ours to place.
    windows = pd.DataFrame(
        {
            "tid": [1, 1, 1],
            "wall_ns": [2 * MS] * 3,
            "run_delta_ns": [0, MS, 0],
            "wait_delta_ns": [5 * MS, 0, 0],
        }
    )
    out = reconcile(windows)
    assert (out["on_cpu_ns"] + out["runqueue_ns"] + out["off_cpu_ns"] == out["wall_ns"]).all()
    assert out["runqueue_ns"].iloc[0] == 2 * MS


@pytest.mark.parametrize(
    "columns", [["pid", "run_ns", "wait_ns", "slices"], ["pid", "run_ns", "wait_ns", "slices", "state", "minflt"]]
)
def test_only_asked_columns_are_loaded(columns):
    cap = _audio(seconds=0.2)
    frame = load_samples(cap, columns)
    assert set(frame.columns) == {"tick", "t_ns", "tid", *columns}
    assert frame["tid"].dtype == np.int32
