"""catch-load's summary says what would keep the interval when the recorder missed many ticks (a Bitwig-sized
session from /proc on 2 vCPUs missed 78 % of them), and says nothing when it kept it."""

from __future__ import annotations

from types import SimpleNamespace

from forensics.cli.catch_load import _missed_hint, _StatusLine
from samplers.recorder import RecorderOptions, Status


def _recorder(**options: object) -> SimpleNamespace:
    recorder_options = RecorderOptions(output="x.ssf", **options)  # type: ignore[arg-type]
    tiers = SimpleNamespace(enabled=recorder_options.slow_interval_ns > 0)  # as they ended
    return SimpleNamespace(options=recorder_options, threads_seen=534, tiers=tiers)


def test_a_recorder_that_kept_its_interval_gets_no_hint() -> None:
    assert _missed_hint(0, 2500, _recorder(), 0.2) == []
    assert _missed_hint(24, 2476, _recorder(), 0.2) == []  # under 1 %: a busy moment


def test_proc_reads_that_did_not_fit_are_named_with_what_would_keep_the_interval() -> None:
    lines = _missed_hint(1970, 535, _recorder(slow_interval_ns=0), 0.695)
    assert "534 threads" in lines[0] and "2.000 ms" in lines[0] and "70% of a core" in lines[0]
    assert "--sampler ebpf" in lines[1] and "--slow-interval 20ms" in lines[1]
    # Tiers already on: only the eBPF sampler is left to try.
    tiered = _missed_hint(1970, 535, _recorder(slow_interval_ns=20_000_000), 0.72)
    assert "--sampler ebpf" in tiered[1] and "--slow-interval" not in tiered[1]


def test_under_the_ebpf_sampler_a_missed_tick_is_the_machines() -> None:
    (line,) = _missed_hint(100, 900, _recorder(sampler="ebpf"), 0.03)
    assert "kernel's tick" in line


def test_a_recorder_that_was_not_busy_was_held_by_the_machine() -> None:
    (line,) = _missed_hint(300, 2200, _recorder(), 0.12)  # a few threads, a loaded machine
    assert "the machine held the recorder" in line and "12% of a core" in line


def _status(ticks: int, missed: int) -> Status:
    return Status(
        elapsed_ns=(ticks + missed) * 2_000_000, threads=534, processes=1, interval_p50_ns=9.1e6,
        interval_p99_ns=14.8e6, missed_ticks=missed, ticks=ticks, file_bytes=0,
    )  # fmt: skip


def test_while_recording_most_ticks_missed_is_said_once_with_what_would_keep_the_interval(capsys) -> None:
    line = _StatusLine(enabled=True, options=RecorderOptions(output="x.ssf", slow_interval_ns=0))
    line.say_missing(_status(100, 300))  # under a second of ticks: not yet
    assert capsys.readouterr().err == ""
    line.say_missing(_status(110, 400))
    said = capsys.readouterr().err
    assert "78% of ticks missed so far" in said and "534 threads" in said and "--sampler ebpf" in said
    line.say_missing(_status(200, 800))  # once
    assert capsys.readouterr().err == ""


def test_a_recorder_keeping_its_interval_or_a_quiet_one_says_nothing(capsys) -> None:
    _StatusLine(enabled=True, options=RecorderOptions(output="x.ssf")).say_missing(_status(900, 100))
    _StatusLine(enabled=False, options=RecorderOptions(output="x.ssf")).say_missing(_status(110, 400))  # -q
    _StatusLine(enabled=True, options=RecorderOptions(output="x.ssf", sampler="ebpf")).say_missing(_status(110, 400))
    assert capsys.readouterr().err == ""
