"""The analyses' numpy fast paths give exactly what their pandas paths give (issue 12: analyses speed).

analyses.source reads a file's samples straight from Arrow, analyses.threads reduces a batch of samples
by numpy; each keeps the pandas way for what it does not take (in-memory tables, nullable columns, a tid
that was two threads in one batch), and both ways must agree frame for frame.
"""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import forensics
from analyses import evidence, source, stalls, summary, threads
from analyses.windows import RawWindows, _in_thread_order, iter_raw_windows, window_deltas
from tests.helpers import REPO

CAPTURES = [REPO / "captures" / name for name in ("jack-starved-proc.ssf", "lab-episodes.ssf", "lab-clean.ssf")]
PROFILE_COLUMNS = ["pid", "run_ns", "wait_ns", "slices", "policy", "rtprio", "nice", "starttime"]
ALL_COLUMNS = [*PROFILE_COLUMNS, "state", "minflt", "majflt", "utime", "stime", "cpu", "blkio_ticks"]


def _load(path: Path) -> forensics.Capture:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return forensics.load(path)


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_samples_from_arrow_are_the_pandas_ones(path: Path) -> None:
    cap, by_pandas = _load(path), _load(path)
    by_pandas.prepared_chunks = lambda *_a, **_k: None  # type: ignore[method-assign]
    assert cap.prepared_chunks("samples", None, len) is not None
    tids = sorted(set(next(cap.iter_chunks("samples", ["tid"]))["tid"]))[:2]
    t0 = int(next(cap.iter_chunks("samples", ["t_ns"]))["t_ns"].min())
    for options in (
        {},
        {"tids": tids},
        {"tids": []},
        {"t_range": (t0 + 500_000_000, None)},
        {"t_range": (None, t0 + 1_000_000_000), "tids": tids[:1]},
        {"batch_rows": 1000},
        {"near": lambda t: (t // 1_000_000) % 7 < 2, "t_range": (t0 + 100_000_000, None)},
    ):
        for columns in (ALL_COLUMNS, PROFILE_COLUMNS, []):
            fast = list(source.iter_samples(cap, columns, **options))  # type: ignore[arg-type]
            slow = list(source.iter_samples(by_pandas, columns, **options))  # type: ignore[arg-type]
            assert len(fast) == len(slow)
            for a, b in zip(fast, slow, strict=True):
                pd.testing.assert_frame_equal(a, b, check_exact=True)


def _both(batch: pd.DataFrame, batch_rows_origin: int) -> None:
    last = pd.Series([3.0], index=[int(batch["tid"].iloc[0])])
    fast = threads._batch_aggregates(batch, batch_rows_origin, threads.BLOCK_NS, last)
    slow = threads._batch_aggregates_pandas(batch, batch_rows_origin, threads.BLOCK_NS, last)
    for a, b in zip(fast[:2], slow[:2], strict=True):
        pd.testing.assert_frame_equal(a.sort_index(), b.sort_index(), check_exact=True)
    assert fast[2].sort_index().to_dict() == slow[2].sort_index().to_dict()


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_profile_batches_by_numpy_are_the_pandas_ones(path: Path) -> None:
    cap = _load(path)
    batches = list(source.iter_samples(cap, PROFILE_COLUMNS, batch_rows=5000))
    origin = int(batches[0]["t_ns"].min())
    for batch in batches[:4]:
        _both(batch, origin)
        # Out of time order within a thread, and a tid that was two threads (its second life):
        shuffled = batch.sample(frac=1.0, random_state=1).reset_index(drop=True)
        _both(shuffled, origin)
        reused = batch.copy()
        tid = reused["tid"].to_numpy()
        second = (tid == tid[0]) & (reused["t_ns"].to_numpy() > np.median(reused["t_ns"].to_numpy()))
        reused["starttime"] = pd.array(np.where(second, 99_999, 5), dtype="Int64")
        _both(reused, origin)
        # Start times unknown (null) for one thread, nullable for all: the fast way still (threads._lives).
        unknown = batch.copy()
        unknown["starttime"] = pd.array(np.where(tid == tid[0], None, 5), dtype="Int64")
        _both(unknown, origin)
        # A thread whose policy, priority and nice change (the last row's count) and whose pid is another
        # for its later rows (taken from a row, never reduced):
        changed = batch.copy()
        later = (tid == tid[0]) & (changed["t_ns"].to_numpy() > np.median(changed["t_ns"].to_numpy()))
        for name, value in (("policy", 1), ("rtprio", 50), ("nice", -5), ("pid", 77)):
            changed[name] = np.where(later, value, changed[name].to_numpy()).astype(changed[name].dtype)
        _both(changed, origin)


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_profiles_by_numpy_are_the_pandas_ones(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = threads._profiles(_load(path), t_range=None, block_ns=threads.BLOCK_NS)
    monkeypatch.setattr(threads, "_batch_aggregates", threads._batch_aggregates_pandas)
    slow = threads._profiles(_load(path), t_range=None, block_ns=threads.BLOCK_NS)
    pd.testing.assert_frame_equal(fast, slow, check_exact=True)


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_chunks_decoded_ahead_are_those_decoded_one_by_one(path: Path) -> None:
    """Capture._read_arrow_chunks decodes the next chunk on a worker thread: the same tables, in file order."""
    from capture.format import _read_chunk

    cap = _load(path)
    columns = ["tick", "t_ns", "tid", *ALL_COLUMNS]
    ahead = [table for _, table in cap.arrow_chunks("samples", columns) or []]
    with open(path, "rb") as fh:
        one_by_one = []
        for offset, length in cap._chunks["samples"]:
            fh.seek(offset)
            one_by_one.append(_read_chunk("samples", fh.read(length), columns)[0])
    assert len(ahead) == len(one_by_one) > 1
    for a, b in zip(ahead, one_by_one, strict=True):
        assert a.equals(b)
    # A reader left after its first chunk stops its worker (the next decode is waited for, then dropped).
    first = cap.arrow_chunks("samples", columns)
    assert first is not None and next(first)[1].equals(one_by_one[0])
    first.close()
    # Only the chunks asked for by number, numbered as in the file.
    odd = [(n, t) for n, t in cap.arrow_chunks("samples", columns, only=lambda n: n % 2 == 1) or []]
    assert [n for n, _ in odd] == list(range(1, len(one_by_one), 2))
    assert all(t.equals(one_by_one[n]) for n, t in odd)
    # Prepared on the worker: what `prepare` makes of each table; its error raised at its chunk.
    assert [(n, rows) for n, rows in cap.prepared_chunks("samples", columns, len) or []] == [
        (n, t.num_rows) for n, t in enumerate(one_by_one)
    ]

    def first_only(table: Any) -> int:
        if not table.equals(one_by_one[0]):
            raise KeyError("prepare")
        return 1

    calls: list[int] = []
    with pytest.raises(KeyError, match="prepare"):
        for _, one in cap.prepared_chunks("samples", columns, first_only) or []:
            calls.append(one)
    assert calls == [1]


def test_chunks_are_decoded_ahead_up_to_a_bound_of_file_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker is handed every chunk within DECODE_AHEAD_BYTES of the file before the reader takes the
    first (it decodes on while a batch is worked on), and at least the next one whatever the bound."""
    from capture import format as capture_format

    submitted: list[int] = []

    class Counted(capture_format.ThreadPoolExecutor):
        def submit(self, *args: Any, **kwargs: Any) -> Any:
            submitted.append(1)
            return super().submit(*args, **kwargs)

    monkeypatch.setattr(capture_format, "ThreadPoolExecutor", Counted)
    cap = _load(CAPTURES[1])
    spans = cap._chunks["samples"]
    assert len(spans) > 2 and sum(length for _, length in spans) < capture_format.DECODE_AHEAD_BYTES
    for bound, handed in ((capture_format.DECODE_AHEAD_BYTES, len(spans)), (1, 2)):  # (1: the first and the next)
        monkeypatch.setattr(capture_format, "DECODE_AHEAD_BYTES", bound)
        submitted.clear()
        chunks = cap.arrow_chunks("samples", ["tick", "t_ns", "tid"])
        assert chunks is not None and next(chunks)[0] == 0
        assert len(submitted) == handed, bound
        chunks.close()


def _count_decoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gets one item per chunk the capture format decodes from now on."""
    from capture import format as capture_format

    decoded: list[int] = []
    read_chunk = capture_format._read_chunk

    def counting(*args: object, **kwargs: object) -> object:
        decoded.append(1)
        return read_chunk(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(capture_format, "_read_chunk", counting)
    return decoded


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_chunks_left_unread_by_their_times_change_no_row(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass keeping a time range or rows near some spans (source.Near) skips the chunks whose times an
    earlier pass noted and that hold none of them: the same batches as reading every chunk, fewer chunks."""

    seen = _load(path)
    times = sorted({int(t) for b in source.iter_samples(seen, []) for t in b["t_ns"].to_numpy()[::50]})
    assert len(source._CHUNK_TIMES[seen]) == len(seen._chunks["samples"]) > 1
    t0, t1 = times[0], times[-1]
    starts = np.array([t0 + (t1 - t0) // 5, t0 + (t1 - t0) // 5 + 1_000_000, t0 + 3 * (t1 - t0) // 4])
    decoded = _count_decoded(monkeypatch)
    skipped = 0
    for options in (
        {"t_range": (t0 + (t1 - t0) // 2, None)},
        {"t_range": (None, t0 + (t1 - t0) // 3), "tids": [int(seen.threads["tid"].iloc[0])]},
        {"near": source.Near(starts, starts + 30_000_000), "t_range": (t0, None)},
        {"near": source.Near(starts[::-1], starts[::-1] + 2_000_000), "batch_rows": 1000},
    ):
        for columns in (ALL_COLUMNS, []):
            decoded.clear()
            fast = list(source.iter_samples(seen, columns, **options))  # type: ignore[arg-type]
            skipped += len(seen._chunks["samples"]) - len(decoded)
            fresh = _load(path)
            slow = list(source.iter_samples(fresh, columns, **options))  # type: ignore[arg-type]
            assert len(fast) == len(slow) > 0
            for a, b in zip(fast, slow, strict=True):
                pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert skipped > 0


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_suspects_by_numpy_are_the_pandas_ones(path: Path) -> None:
    cap = _load(path)
    samples = source.load_samples(cap, ["pid", "run_ns", "wait_ns", "slices", "cpu", "policy", "rtprio"])
    others = window_deltas(samples)
    t = others["end_ns"].to_numpy()
    step = max((int(t.max()) - int(t.min())) // 40, 1)
    asked: list[evidence.Asked] = []
    for k, tid in enumerate(sorted(set(others["tid"].tolist()))[:6]):
        for start in range(int(t.min()) - step, int(t.max()) + step, step):
            cpus = None if k % 2 else sorted(set(others["cpu"].tolist()))[: k % 3 + 1]
            asked.append((int(tid), start, start + step * (k + 1) // 3, cpus))
    fast = evidence._busiest_others(others, asked)
    assert any(f is not None for f in fast) and any(f is None for f in fast)
    assert fast == evidence._busiest_others_pandas(others, asked)
    # Out of tid order (a thread's windows not one run) the fast way steps aside.
    shuffled = others.sample(frac=1.0, random_state=2).reset_index(drop=True)
    assert evidence._busiest_others(shuffled, asked) == evidence._busiest_others_pandas(shuffled, asked)


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_window_order_by_tid_alone_is_lexsorts(path: Path) -> None:
    """source.thread_order, what iter_raw_windows sorts each batch (and the carried rows) by, is
    np.lexsort((tick, tid)), also where a thread's ticks do not rise in the rows as given."""
    cap = _load(path)
    batches = list(source.iter_samples(cap, [], batch_rows=1))  # a chunk each
    carried = pd.concat([batches[0].tail(40), batches[1]], ignore_index=True)
    shuffled = batches[0].sample(frac=1.0, random_state=3)
    for frame in (batches[0], carried, shuffled, batches[0].iloc[::-1]):
        tid, tick = frame["tid"].to_numpy(), frame["tick"].to_numpy()
        np.testing.assert_array_equal(source.thread_order(tid, tick), np.lexsort((tick, tid)))
        # Tids spanning more than 2^16 are sorted as they are, not as 16-bit offsets (source._narrow).
        wide = np.where(tid == tid.min(), tid.astype(np.int64) + 2**20, tid.astype(np.int64) - 5)
        assert source._narrow(wide) is wide and source._narrow(tid).dtype == np.uint16
        np.testing.assert_array_equal(source.thread_order(wide, tick), np.lexsort((tick, wide)))


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_rows_kept_by_the_profiles_pass_are_those_read_again(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole capture's thread profiles keep the rows of the threads real-time or periodic in their first
    batch (threads._keep); load_samples of those threads takes them without decoding a chunk, and gives the
    frame reading them again gives. Threads not kept are read again, all of them."""

    cap, fresh = _load(path), _load(path)
    profiles = threads.thread_profiles(cap)
    kept = source._KEPT.get(cap)
    assert kept is not None and len(kept.tids) > 0
    watched = threads.select_threads(profiles)["tid"].tolist()
    others = sorted(set(profiles["tid"].tolist()) - set(kept.tids.tolist()))
    decoded = _count_decoded(monkeypatch)
    for tids, columns in (
        (watched, stalls.WINDOW_COLUMNS),
        (kept.tids.tolist()[:1], ["run_ns", "state"]),
        (kept.tids.tolist() + others[:1], stalls.WINDOW_COLUMNS),
    ):
        decoded.clear()
        fast = source.load_samples(cap, columns, tids=tids)
        from_kept = not decoded
        slow = source.load_samples(fresh, columns, tids=tids)
        pd.testing.assert_frame_equal(fast, slow, check_exact=True)
        assert from_kept == (set(tids) <= set(kept.tids.tolist())), tids


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_bin_sums_by_numpy_are_the_pandas_ones(path: Path) -> None:
    """summary.bin_sums, the per-batch sums of summarize's timeline, breakdown and faults, give what
    pandas' groupby gives once each batch's sums are joined as _stream joins them: the windows in
    iter_raw_windows' order, in an order whose times do not rise, and with a nullable column."""
    cap = _load(path)
    windows = next(iter_raw_windows(cap, ["pid", "run_ns", "wait_ns", "slices", "minflt", "majflt"]))
    bins = (windows["end_ns"].to_numpy() - int(windows["end_ns"].min())) // 50_000_000
    columns = {"on": "run_delta_ns", "rq": "wait_delta_ns", "wall": "wall_ns", "switches": "switches",
               "minflt": "minflt", "majflt": "majflt"}  # fmt: skip
    for frame in (windows, windows.iloc[::-1], windows.sample(frac=1.0, random_state=5)):
        tid, bin_index = frame["tid"].to_numpy(), bins[frame.index.to_numpy()]
        sums = {name: frame[column].to_numpy() for name, column in columns.items()}
        by_pandas = pd.DataFrame({"tid": tid, "bin": bin_index, **sums}).groupby(["tid", "bin"]).sum()
        pd.testing.assert_frame_equal(summary.bin_sums(tid, bin_index, sums).groupby(level=[0, 1]).sum(), by_pandas)
    nullable = {**sums, "minflt": pd.array(sums["minflt"], dtype="Int64")}
    pd.testing.assert_frame_equal(
        summary.bin_sums(tid, bin_index, nullable),
        pd.DataFrame({"tid": tid, "bin": bin_index, **nullable}).groupby(["tid", "bin"], sort=False).sum(),
    )


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_windows_batches_ordered_by_numpy_are_the_pandas_ones(path: Path) -> None:
    """windows._in_thread_order joins the carried rows and a batch and orders them by numpy as pandas' concat
    and take do; a nullable column, or carried rows of other dtypes, go the pandas way."""
    cap = _load(path)
    batches = list(source.iter_samples(cap, ["pid", "run_ns", "wait_ns", "slices", "state", "cpu"], batch_rows=1))
    carry = batches[0].sample(frac=0.3, random_state=7).reset_index(drop=True)
    nullable = batches[1].astype({"cpu": "Int64"})
    for rows, carried in ((batches[1], None), (batches[1], carry), (nullable, carry.astype({"cpu": "Int64"})),
                          (batches[1], carry.astype({"pid": "int64"}))):  # fmt: skip
        frame = rows if carried is None else pd.concat([carried, rows], ignore_index=True)
        expected = frame.take(np.lexsort((frame["tick"].to_numpy(), frame["tid"].to_numpy()))).reset_index(drop=True)
        pd.testing.assert_frame_equal(_in_thread_order(rows, carried), expected)


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
@pytest.mark.parametrize("batch_rows", [3000, 40_000, summary.STREAM_BATCH_ROWS])
def test_windows_of_runs_are_those_of_the_ordered_rows(path: Path, batch_rows: int) -> None:
    """RawWindows(any_order=True) takes each batch's windows where its rows lie (runs of a thread, chunk by
    chunk) and each run's first from the thread's read before it: the windows of ordering the rows by (tid,
    tick) first, batch for batch, carried rows included, once in (tid, tick) order; and it is taken here."""
    cap = _load(path)
    ordered, any_order = RawWindows(cap), RawWindows(cap, any_order=True)
    taken = batches = 0
    for batch in source.iter_samples(cap, summary.STREAM_COLUMNS, batch_rows=batch_rows):
        batches += 1
        taken += any_order._windows_of_runs(batch.copy()) is not None
        any_order.carry = ordered.carry  # the probe above moved it on: back to where both were
        expected, got = ordered(batch), any_order(batch)
        pd.testing.assert_frame_equal(got.sort_values(["tid", "tick"], kind="stable", ignore_index=True), expected)
        pd.testing.assert_frame_equal(any_order.carry, ordered.carry)
    assert taken == batches > 0


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
@pytest.mark.parametrize("batch_rows, fine_bins", [(summary.STREAM_BATCH_ROWS, summary.FINE_BINS), (3000, 600)])
def test_summarize_in_one_pass_is_its_two(
    path: Path, batch_rows: int, fine_bins: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """summarize's bins and placement summed on the thread profiles' pass (summary._OnePass: batches by bins
    of 10^k ns joined into the width found at the end, the placement of the threads likely watched cut to
    those watched) are what its own pass over the raw windows gives (summary._stream), view for view; the
    profiles read in the batches of that pass are the usual ones. With small batches and few fine bins,
    each batch's bins are wider than the last's."""
    monkeypatch.setattr(summary, "STREAM_BATCH_ROWS", batch_rows)
    monkeypatch.setattr(summary, "FINE_BINS", fine_bins)
    own_passes: list[int] = []
    stream = summary._stream

    def counted(*args: object, **kwargs: object) -> dict[str, pd.DataFrame]:
        own_passes.append(1)
        return stream(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(summary, "_stream", counted)
    made: list[summary._OnePass] = []

    class Seen(summary._OnePass):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(summary, "_OnePass", Seen)
    cap = _load(path)
    profiles = threads.thread_profiles(cap)
    watched = threads.select_threads(profiles)["tid"].tolist()
    t0, t1 = int(profiles["first_ns"].min()), int(profiles["last_ns"].max())
    tapped = threads.thread_profiles(
        _load(path), tap=threads.SamplesTap(summary.STREAM_COLUMNS, batch_rows, lambda *_: None)
    )
    pd.testing.assert_frame_equal(tapped, profiles, check_exact=True)
    two_passes = summary._OnePass.sums
    for options, one in (
        ({}, True),
        ({"tids": tuple(watched[:1])}, True),
        ({"tids": (int(profiles["tid"].iloc[-1]),)}, True),
        ({"t_range": (t0 + (t1 - t0) // 3, None)}, None),
        ({"bins": 7}, None),
    ):
        own_passes.clear()
        fast = summary.summarize(_load(path), **options)  # type: ignore[arg-type]
        if one is not None:
            assert own_passes == ([] if one else [1]), options
        if not options:
            widths = [part.bin_ns for part in made[-1].parts]
            assert widths == sorted(widths) and (len(set(widths)) > 1) == (batch_rows < summary.STREAM_BATCH_ROWS)
        monkeypatch.setattr(summary._OnePass, "sums", lambda *_: None)
        own_passes.clear()
        slow = summary.summarize(_load(path), **options)  # type: ignore[arg-type]
        assert own_passes == [1]
        monkeypatch.setattr(summary._OnePass, "sums", two_passes)
        assert (fast.bin_ns, fast.origin_ns, list(fast.views)) == (slow.bin_ns, slow.origin_ns, list(slow.views))
        assert fast.views["placement"].shape[0] > 0 or not options
        for name, view in fast.views.items():
            pd.testing.assert_frame_equal(view, slow.views[name], check_exact=True, obj=f"{name} {options}")


def _sparse_capture() -> forensics.Capture:
    """An eBPF sampler's capture in memory: a thread's row stored where it changed and at its keyframes (the
    analyses fill the rest: source._Fill), a missed tick (17), a thread that ended (103), each tick read at its
    own time."""
    keyframe, t0 = 4, 1_000_000_000
    ticks = np.array([t for t in range(40) if t != 17], dtype=np.int64)
    times = t0 + ticks * 2_000_000 + (ticks % 3) * 1_000
    rows = [
        {"tick": tick, "t_ns": t, "tid": tid, "pid": 100, "state": "S", "run_ns": tick // 5 if tid == 101 else 0}
        for tid, last in ((101, 39), (102, 39), (103, 20))
        for tick, t in zip(ticks.tolist(), times.tolist(), strict=True)
        if tick <= last and ((tick + tid) % keyframe == 0 or (tid == 101 and tick % 5 == 0) or tick == 0)
    ]
    samples = pd.DataFrame(rows).astype({"tick": np.uint32, "tid": np.int32, "pid": np.int32})
    grid = pd.DataFrame({"tick": ticks.astype(np.uint32), "t_ns": times})
    return forensics.Capture.from_frames(
        {"ebpf_sampler": {"keyframe_ticks": keyframe}}, samples=samples, sampler_ticks=grid
    )


def test_tick_times_of_an_ebpf_sampler_capture_come_from_its_tick_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """tick_start_times reads an eBPF sampler's capture's sampler_ticks instead of filling every row again (1 ms
    against 1.7 s on 60 s of the Bitwig shape), and gets what the filled rows give."""
    by_rows = pd.concat([b.groupby("tick")["t_ns"].min() for b in source.iter_samples(_sparse_capture(), [])])
    assert sorted(by_rows.index) == [t for t in range(40) if t != 17]  # the fill gave every tick but the missed one
    monkeypatch.setattr(source, "iter_samples", None)  # the fast path reads no row
    got = source.tick_start_times(_sparse_capture())
    assert got.tolist() == np.sort(by_rows.groupby(level=0).min().to_numpy()).tolist()


def test_a_sparse_capture_read_near_some_times_fills_only_those_ticks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading an eBPF sampler's capture with t_range or near (the suspects of `stalls`), only the ticks kept are
    filled, and the rows are those of filling every tick, then keeping them."""
    columns = ["pid", "run_ns", "state"]
    whole = pd.concat(list(source.iter_samples(_sparse_capture(), columns)), ignore_index=True)
    near = source.Near(np.array([1_010_000_000, 1_060_000_000]), np.array([1_014_000_000, 1_064_000_000]))
    span = (1_005_000_000, 1_070_000_000)
    expected = whole[source.in_span(whole["t_ns"].to_numpy(), span) & near(whole["t_ns"].to_numpy())]
    made: list[int] = []
    fill_call = source._Fill.__call__

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        out = fill_call(self, *args, **kwargs)
        made.append(len(out))
        return out

    monkeypatch.setattr(source._Fill, "__call__", counted)
    got = pd.concat(list(source.iter_samples(_sparse_capture(), columns, t_range=span, near=near)), ignore_index=True)
    pd.testing.assert_frame_equal(got, expected.reset_index(drop=True))
    assert 0 < sum(made) == len(expected) < len(whole) // 4


def _fill_by_definition(stored: pd.DataFrame, made: np.ndarray, made_t: np.ndarray, keyframe: int) -> pd.DataFrame:
    """The fill as DESIGN.md ("Storing") says it, thread by thread and tick by tick: at each tick made, the
    thread's last stored row at or before it (the later of two at one tick), if under `keyframe` ticks old, and
    not a row that has the thread in R unless at that row's own tick."""
    out = []
    for _, rows in stored.groupby("tid", sort=True):
        rows = rows.sort_values("tick", kind="stable")
        ticks = rows["tick"].to_numpy()
        for m, m_t in zip(made.tolist(), made_t.tolist(), strict=True):
            at = int(np.searchsorted(ticks, m, side="right")) - 1
            if at < 0 or m - ticks[at] >= keyframe:
                continue
            row = rows.iloc[at]
            if row["state"] == "R" and ticks[at] != m:
                continue
            out.append({**row.to_dict(), "tick": m, "t_ns": m_t})
    return pd.DataFrame(out, columns=stored.columns)


@pytest.mark.parametrize("seed", range(6))
def test_the_fill_of_stored_rows_is_its_definition(seed: int) -> None:
    """_Fill (ranges of ticks per stored row) against _fill_by_definition on random sparse rows: threads that
    start late and end early, rows in R, two rows of a thread at one tick, ticks the kernel missed, the rows cut
    into chunks at random ticks, some ticks not kept (iter_samples' t_range and near)."""
    rng = np.random.default_rng(seed)
    keyframe, n = 7, 60
    missed = rng.choice(np.arange(1, n - 1), size=6, replace=False)  # ticks the kernel did not take
    grid = np.setdiff1d(np.arange(n), missed).astype(np.int64)
    grid_t = 1_000_000_000 + grid * 2_000_000 + rng.integers(0, 1000, len(grid))
    parts = []
    for tid in range(100, 112):
        ticks = np.sort(rng.choice(grid, size=int(rng.integers(1, 20)), replace=True))
        parts.append(
            pd.DataFrame(
                {
                    "tick": ticks, "t_ns": 0, "tid": tid, "pid": 7,
                    "run_ns": rng.integers(0, 10**6, len(ticks)), "state": rng.choice(["R", "S", "D"], len(ticks)),
                }
            )
        )  # fmt: skip
    stored = pd.concat(parts, ignore_index=True).sort_values(["tick", "tid"], kind="stable", ignore_index=True)
    stored["tick"] = stored["tick"].astype(np.int64)
    kept_times = np.sort(rng.choice(grid_t, size=len(grid_t) * 2 // 3, replace=False))
    for keep in (None, lambda times: np.isin(times, kept_times)):
        fill = source._Fill(grid, grid_t, keyframe)
        # Chunks end at ticks taken (each holds some: the writer's chunks end at ticks it stored).
        cuts = [-1, *np.sort(rng.choice(grid[5:-5], size=3, replace=False)).tolist(), n - 1]
        chunks = [stored[(stored["tick"] > a) & (stored["tick"] <= b)] for a, b in itertools.pairwise(cuts)]
        got = pd.concat([fill(chunk, int(chunk_end), keep) for chunk, chunk_end in zip(chunks, cuts[1:], strict=True)])
        made = grid if keep is None else grid[keep(grid_t)]
        made_t = grid_t if keep is None else grid_t[keep(grid_t)]
        expected = _fill_by_definition(stored, made, made_t, keyframe)
        order = ["tid", "tick"]
        got = got.sort_values(order, ignore_index=True)
        expected = expected.sort_values(order, ignore_index=True).astype(got.dtypes.to_dict())
        pd.testing.assert_frame_equal(got, expected)
