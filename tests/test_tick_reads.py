"""The recorder's tick reads (samplers/tick_reads.py): the compiled loop (samplers/_tick.c) makes the same
frames and leaves the same state as the Python loop, tick after tick, on canned files that change between
ticks: schedstat moved or not, stat lines in R, S and D, forced reads, sched baselines, empty reads and
reads that fail (a thread gone)."""

from __future__ import annotations

import os
import random
import shutil
import sysconfig
import time
from pathlib import Path

import pytest

from samplers import frames
from samplers.compiled import PURE_PYTHON_ENV
from samplers.tick_reads import compiled_read_tick, read_tick_python, tick_reader
from tests.fakeproc import stat_line

COMPILED = compiled_read_tick()


def _can_build() -> bool:
    include = sysconfig.get_paths()["include"]
    return shutil.which(os.environ.get("CC", "cc")) is not None and Path(include, "Python.h").exists()


def test_the_compiled_loop_is_built_where_it_can_be() -> None:
    """setup.py builds it optional: an install with a compiler and Python's headers (CI's, tests/install-deps.sh)
    must have it, or the recorder would fall back to the Python loop unseen."""
    if not _can_build():
        pytest.skip("no C compiler or Python.h here: the recorder uses the Python loop (the capture says so)")
    assert COMPILED is not None, "samplers/_tick.c was not built: pip install -e . with python3-dev and gcc"


class Files:
    """Per thread: schedstat, stat and sched files, rewritten in place (the fds held open see the change)."""

    def __init__(self, root: Path, n: int) -> None:
        self.root = root
        self.fds: list[tuple[int, int, int]] = []
        self.paths: list[tuple[Path, Path, Path]] = []
        for i in range(n):
            paths = (root / f"{i}.schedstat", root / f"{i}.stat", root / f"{i}.sched")
            for p in paths:
                p.write_bytes(b"")
            self.paths.append(paths)
            self.fds.append(tuple(os.open(p, os.O_RDONLY) for p in paths))  # type: ignore[misc]

    def write(self, i: int, schedstat: bytes, stat: bytes, sched: bytes) -> None:
        for path, text in zip(self.paths[i], (schedstat, stat, sched), strict=True):
            with open(path, "r+b") as f:
                f.truncate(0)
                f.write(text)

    def close(self) -> None:
        for fds in self.fds:
            for fd in fds:
                os.close(fd)


def _decoded(frame: bytes | None, threads: int) -> tuple[object, ...] | None:
    if frame is None:
        return None
    kind, length = frames.FRAME.unpack_from(frame)
    assert kind == frames.TICK and length == len(frame) - frames.FRAME.size
    t = frames.decode_tick(frame[frames.FRAME.size :], threads)
    return (t.tick, t.layout_id, t.t_ns, t.missing.tolist(), t.stat_lengths.tolist(), t.schedstat, t.stat, t.sched)


def _times(frame: bytes, threads: int) -> list[int]:
    return frames.decode_tick(frame[frames.FRAME.size :], threads).times.tolist()


@pytest.mark.skipif(COMPILED is None, reason="samplers/_tick.c not built here (no compiler at install)")
def test_compiled_and_python_loops_agree_tick_after_tick(tmp_path: Path) -> None:
    assert COMPILED is not None
    rng = random.Random(7)
    n = 12
    files = Files(tmp_path, n)
    # A closed fd: its reads fail as a gone thread's do (any OSError is a thread gone).
    gone_fd = os.open(tmp_path / "0.schedstat", os.O_RDONLY)
    os.close(gone_fd)
    run = [0] * n
    comms = ["worker", "a) R (b", "x y", "jackd", "Loop)"]
    try:
        states: list[dict[str, list]] = [
            {"last_ss": [b""] * n, "last_stat": [b""] * n, "moved": [-1] * n, "sched_base": [True] * n}
            for _ in range(2)
        ]
        seen = {"skipped": 0, "dead": 0, "empty": 0, "sched_read": 0, "sched_skipped": 0}
        for tick in range(300):
            for i in range(n):
                if rng.random() < 0.4:
                    run[i] += rng.randrange(1, 100_000)
                schedstat = b"" if rng.random() < 0.03 else f"{run[i]} {run[i] // 7} {run[i] // 1000}\n".encode()
                state = rng.choice("RSSSD")
                stat = stat_line(1000 + i, 1000, comm=comms[i % len(comms)], state=state, utime=run[i] // 10)
                files.write(i, schedstat, stat.encode(), f"sched of {i} at {tick}\n".encode() * rng.randrange(1, 90))
            hot = []
            for i in range(n):
                fd_ss, fd_st, _ = files.fds[i]
                if rng.random() < 0.05:
                    fd_ss = gone_fd
                elif rng.random() < 0.03:
                    fd_st = gone_fd
                hot.append((fd_ss, fd_st, rng.random() < 0.2, i))
            rng.shuffle(hot)
            hot = hot[: rng.randrange(n - 3, n + 1)]
            sched = [(files.fds[i][2] if rng.random() > 0.05 else gone_fd, i) for i in range(0, n, 2)]
            if tick % 50 == 17:
                for state_lists in states:
                    state_lists["sched_base"][4] = True
            before = time.monotonic_ns()
            got_c = COMPILED(hot, sched, *states[0].values(), tick, 40 + tick % 3, tick * 2_000_000)
            got_py = read_tick_python(hot, sched, *states[1].values(), tick, 40 + tick % 3, tick * 2_000_000)
            after = time.monotonic_ns()
            frame_c, reads_c, rows_c, dead_c = got_c
            frame_py, reads_py, rows_py, dead_py = got_py
            assert _decoded(frame_c, len(hot)) == _decoded(frame_py, len(hot)), f"tick {tick}"
            assert (reads_c, rows_c) == (reads_py, rows_py), f"tick {tick}"
            assert [i for i, _ in dead_c] == [i for i, _ in dead_py], f"tick {tick}"
            assert states[0] == states[1], f"tick {tick}"
            if frame_c is not None:
                times = _times(frame_c, len(hot))
                assert times == sorted(times) and before <= times[0] and times[-1] <= after
                assert [t for _, t in dead_c] == [times[i] for i, _ in dead_c]
            decoded = _decoded(frame_py, len(hot))
            if decoded is not None:
                seen["skipped"] += decoded[4].count(0)  # type: ignore[attr-defined]
                seen["sched_read"] += sum(1 for text in decoded[7] if text)  # type: ignore[attr-defined]
                seen["sched_skipped"] += sum(1 for text in decoded[7] if not text)  # type: ignore[attr-defined]
            seen["dead"] += len(dead_py)
            seen["empty"] += len(decoded[3]) - len(dead_py) if decoded else 0  # type: ignore[arg-type]
        # The sequence went through every case the loops decide on.
        assert all(count > 20 for count in seen.values()), seen
    finally:
        files.close()


@pytest.mark.skipif(COMPILED is None, reason="samplers/_tick.c not built here (no compiler at install)")
def test_an_empty_hot_list_reads_sched_and_makes_no_frame(tmp_path: Path) -> None:
    assert COMPILED is not None
    files = Files(tmp_path, 1)
    try:
        files.write(0, b"1 2 3\n", stat_line(5, 5).encode(), b"sched text\n")
        for read in (COMPILED, read_tick_python):
            base = [True]
            frame, reads, rows, dead = read([], [(files.fds[0][2], 0)], [b""], [b""], [-1], base, 3, 1, 0)
            assert (frame, reads, rows, dead, base) == (None, 1, 0, [], [False])
    finally:
        files.close()


def test_the_compiled_loop_needs_the_real_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """It reads CLOCK_MONOTONIC itself: a test's fake clock gets the Python loop, and FORENSICS_PURE_PYTHON=1
    asks for it (benchmarks)."""
    assert tick_reader(lambda: 5)[1] == "python"
    assert tick_reader(time.monotonic_ns)[1] == ("c" if COMPILED is not None else "python")
    monkeypatch.setenv(PURE_PYTHON_ENV, "1")
    assert tick_reader(time.monotonic_ns)[1] == "python"
