"""One test per verdict rule of analyses.rules, at its boundary: each fails if its rule or its default
threshold changes (DESIGN.md, "The rules", says why each value)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyses import rules
from analyses.source import STATE_CODE, STATE_D

MS = 1_000_000
US = 1_000
A = np.array


def test_causes_are_one_list_in_component_order() -> None:
    assert rules.CAUSES == ("run", "runqueue", "io", "fault", "lock", "reclaim", "unknown")


def test_hot_window_is_half_of_its_wall_time_busy() -> None:
    wall = A([2 * MS, 2 * MS, 20 * MS])
    busy = A([1 * MS, 1 * MS - 1, 5 * MS])  # the last: a 5 ms burst averaged away in a 20 ms window
    assert rules.is_hot(busy, wall).tolist() == [True, False, False]
    assert rules.is_hot(A([5 * MS]), A([20 * MS]), busy_fraction=0.25).tolist() == [True]


def test_fault_storm_is_twenty_faults_per_ms_on_cpu() -> None:
    on = A([1 * MS, 1 * MS, 1 * MS, 0])
    faults = A([20, 19, 0, 50])  # at the bar, under it, none, faults without CPU time
    assert rules.is_fault_storm(faults, on).tolist() == [True, False, False, False]
    assert rules.is_fault_storm(A([19]), A([1 * MS]), rate_per_ms=10).tolist() == [True]


def test_blocked_in_d_is_a_read_in_d_at_either_end_of_the_window() -> None:
    d, s, r = int(STATE_D), int(STATE_CODE["S"]), int(STATE_CODE["R"])
    end = A([d, r, s, r])
    start = A([r, d, s, r])
    off = A([3, 5, 7, 11])
    assert rules.read_in_d(end, start, d).tolist() == [True, True, False, False]
    assert rules.blocked_ns(end, start, off, d).tolist() == [3, 5, 0, 0]


def test_missed_wake_up_is_a_period_plus_a_quarter_interval() -> None:
    period = A([5.333 * MS, np.nan])
    limit = rules.wake_limit_ns(period, 2 * MS)
    assert limit[0] == 5.333 * MS + 0.5 * MS
    assert np.isnan(limit[1])  # not periodic: no wake-up to miss
    assert rules.wake_limit_ns(A([4.0 * MS]), 8 * MS)[0] == 6 * MS  # the margin follows the interval


def test_overslept_margin_of_the_truth_is_the_missed_wake_up_margin() -> None:
    assert rules.overslept_margin_ns(2 * MS) == 500 * US
    assert rules.overslept_margin_ns(4 * MS) == 1 * MS
    period = A([5 * MS])
    assert rules.wake_limit_ns(period, 2 * MS)[0] == period[0] + rules.overslept_margin_ns(2 * MS)


def test_min_stall_is_half_a_period_or_two_intervals() -> None:
    got = rules.min_stall_ns(A([6 * MS, np.nan]), 2 * MS)
    assert got.tolist() == [3 * MS, 4 * MS]
    fixed = rules.min_stall_ns(A([6 * MS, np.nan]), 2 * MS, rules.StallRules(min_stall_ns=1 * MS))
    assert fixed.tolist() == [1 * MS, 1 * MS]


def test_smallest_spike_is_a_quarter_interval() -> None:
    assert rules.spike_min_ns(2 * MS) == 500 * US
    assert rules.SPIKE_FACTOR == 5.0


def test_reclaim_is_taken_from_fault_then_run_then_io() -> None:
    parts = {"fault": A([3, 0]), "run": A([4, 2]), "io": A([10, 1])}
    left, placed = rules.take_reclaim(A([5, 10]), parts)
    assert left["fault"].tolist() == [0, 0]
    assert left["run"].tolist() == [2, 0]
    assert left["io"].tolist() == [10, 0]
    assert placed.tolist() == [5, 3]  # reclaim beyond fault + run + io is not placed


def test_the_verdict_is_the_largest_component() -> None:
    components = A([[1, 5, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0], [2, 0, 2, 0, 0, 0, 0]])
    stall, verdict, share = rules.decide(components)
    assert stall.tolist() == [6, 0, 4]
    assert verdict.tolist() == ["runqueue", "run", "run"]  # a tie goes to the earlier cause
    assert share.tolist() == [0.833, 0.0, 0.5]


def test_a_runqueue_suspect_is_named_when_it_ran_half_the_wait() -> None:
    assert rules.runqueue_suspect_held(5 * MS, 10 * MS)
    assert not rules.runqueue_suspect_held(5 * MS - 1, 10 * MS)  # most of the CPU went to a thread unrecorded
    assert rules.runqueue_suspect_held(0, 0)


def test_only_a_thread_ranked_as_high_can_hold_a_cpu_against_a_runnable_one() -> None:
    other, fifo, rr, deadline, batch = 0, 1, 2, 6, 3
    assert rules.can_hold_cpu_against(fifo, 80, fifo, 80)  # equal FIFO priorities do not preempt each other
    assert rules.can_hold_cpu_against(rr, 81, fifo, 80) and not rules.can_hold_cpu_against(fifo, 79, fifo, 80)
    assert not rules.can_hold_cpu_against(other, 0, fifo, 1)  # the fair class runs after every real-time one
    assert rules.can_hold_cpu_against(batch, 0, other, 0) and rules.can_hold_cpu_against(fifo, 1, other, 0)
    assert rules.can_hold_cpu_against(deadline, 0, fifo, 99) and not rules.can_hold_cpu_against(fifo, 99, deadline, 0)


def test_exact_path_thresholds() -> None:
    # The exact rules' margins, from measurements quoted beside them in analyses.rules.
    assert rules.MINOR_NS == 100 * US
    assert rules.FAULT_GAP_NS == 1 * MS
    assert rules.LOCK_OVERSLEEP == 1.25
    assert rules.USUAL_WAKER_SHARE == 0.2
    assert rules.BLKIO_SLACK_PER_WAIT_NS == 20 * US
    assert rules.BLKIO_COVER_SHARE == 0.5


def test_reports_of_one_xrun_are_at_most_a_period_and_a_quarter_apart() -> None:
    period = 2_666_667.0
    gaps = A([0, 300 * US, 1.25 * period, 1.25 * period + 1, 3 * period])
    assert rules.same_xrun(gaps, period).tolist() == [True, True, True, False, False]
    assert rules.same_xrun(A([0, 1]), float("nan")).tolist() == [True, False]  # no period: one instant only
    assert rules.SERVER_LOG_LAG_NS == 100 * MS  # a followed log file is read within 50 ms
    assert rules.SERVER_LOG_LEAD_NS == 100 * MS  # callbacks held 15.8 ms behind a client's 20 ms spin


def test_reports_farther_apart_are_one_xrun_while_no_cycle_between_them_ended_on_time() -> None:
    # cycles recorded between two reports, and how many of them ended on time before the later report
    between, recovered = A([8, 3, 0, 1]), A([0, 1, 0, 0])
    assert rules.overrun_goes_on(between, recovered).tolist() == [True, False, False, True]


def test_the_very_next_start_is_one_less_than_a_period_and_a_half_after() -> None:
    period = A([4 * MS, 4 * MS, 4 * MS])
    following = A([6 * MS - 1, 6 * MS, np.nan])  # within, at the bar (a start the poller missed), none held
    assert rules.next_start_seen(A([0, 0, 0]), following, period).tolist() == [True, False, False]
    assert rules.NEXT_START_MAX_PERIODS == 1.5


def test_a_jack_client_is_late_when_the_next_start_came_before_it_finished() -> None:
    """jack2's CheckXRun at the next cycle's start, made from what the JACK source read (ns, NaN unseen)."""
    nan, nxt = np.nan, 4 * MS
    awake = A([1 * MS] * 8)
    # on time at the start, late one ns after it; the next start missed: unknown, late past a later one;
    # no finish seen: its stamp at the re-signal older than the wake-up, never finished, up to date, unread.
    finish = A([nxt, nxt + 1, nxt, 9 * MS, nan, nan, nan, nan])
    resignal = A([nan, nan, nan, nan, nxt, nxt, nxt, nan])
    finish_at_resignal = A([nan, nan, nan, nan, 1 * MS - 1, nan, 1 * MS, nan])
    following = A([nxt, nxt, 8 * MS, 8 * MS, nxt, nxt, nxt, nxt])
    very_next = A([True, True, False, False, True, True, True, True])
    late, known = rules.jack_client_late(awake, finish, resignal, finish_at_resignal, following, very_next)
    assert late.tolist() == [False, True, False, True, True, True, False, False]
    assert known.tolist() == [True, True, False, True, True, True, False, False]


def test_cycles_missed_in_a_gap_off_the_drivers_grid_of_whole_periods() -> None:
    period = 2_666_667.0
    ratios = A([1.0, 1.5, 1.98, 2.0, 2.03, 5.374, 609.001, np.nan])
    # on time, late by half, on the grid (the record missed one, twice), 2.03 periods: one never
    # started; a starved driver's 14.3 ms: four; a 1.6 s hole on the grid: none; no period: none
    assert rules.missed_cycles(ratios * period, A([period] * 8)).tolist() == [0, 0, 0, 0, 1, 4, 0, 0]
    assert rules.CYCLE_GRID_TOLERANCE == 0.02


def test_lost_wake_ups_are_judged_only_where_the_timing_tells_them_apart() -> None:
    """A /proc-timed wake-up reads as period +- one sampling interval: at a period of at most twice the
    interval, on-time wake-ups alias onto 2x the period (a 2.667 ms JACK period at 2 ms reads 2, 2, 4 ms)."""
    assert rules.lost_wakeups_resolvable(5.333 * MS, 2 * MS)
    assert not rules.lost_wakeups_resolvable(2.667 * MS, 2 * MS)
    assert not rules.lost_wakeups_resolvable(4 * MS, 2 * MS)
    assert rules.lost_wakeups_resolvable(2.667 * MS, 0)  # exact timing (the lab's clock, eBPF)


def test_a_thread_of_an_engine_process_runs_its_cycle_from_a_quarter_period_to_fifteen_percent_over() -> None:
    period = 5_333_333.0
    low = period / 4 * 0.98
    measured = A([low - 1, low, period / 2, 4.035 * MS, period, 1.15 * period, 1.15 * period + 1, 100 * MS, np.nan])
    # below four wake-ups a cycle, at it, the data loop by switch-ins, by its windows (a recording here),
    # once a cycle, a loaded machine's skipped cycles at the bar, beyond, a housekeeping thread, not periodic
    expected = [False, True, True, True, True, True, False, False, False]
    assert rules.runs_engine_cycle(measured, period).tolist() == expected
    assert (rules.ENGINE_WAKES_MAX, rules.ENGINE_PERIOD_FRACTION, rules.ENGINE_SLOW_FRACTION) == (4, 0.02, 0.15)


def test_a_thread_without_a_period_runs_the_engine_cycle_by_its_mean_switch_in_rate() -> None:
    period = 5_333_333.0
    top = 1e9 / (period / 4 * 0.98)  # four wake-ups a cycle, less the agreement of one graph's threads
    bottom = 1e9 / (1.15 * period)
    rate = A([top + 1, top, 340.9, 170.8, bottom, bottom - 0.01, 13.4, 0.0, np.nan])
    # beyond four a cycle, at it, the data loop and the client on the loaded recording, at the slow bar,
    # under it, the daemon's main loop there, never switched in, unknown
    expected = [False, True, True, True, True, False, False, False, False]
    second = np.full(len(rate), 1e9)
    assert rules.runs_engine_cycle_by_rate(rate, period, second).tolist() == expected
    # jack_connect, a client for 30 ms at 435 switch-ins a second: too short a life for a mean rate
    assert rules.runs_engine_cycle_by_rate(A([435.0, 435.0]), period, A([30e6, 1e9 - 1])).tolist() == [False, False]
    # jackd --no-realtime's request thread recorded from the server's start: 274 a second on average, woken in
    # 20 % of its blocks (busy while the clients registered); the server's cycle thread in all of them; a
    # share not known is not judged
    share = A([0.195, 1.0, rules.ENGINE_RATE_MIN_WOKEN_BLOCKS, np.nan])
    rate = A([274.0, 107.0, 107.0, 107.0])
    assert rules.runs_engine_cycle_by_rate(rate, 11_609_977.0, np.full(4, 15e9), share).tolist() == [
        False, True, True, True
    ]  # fmt: skip
    assert rules.runs_engine_cycle_by_rate(rate, 11_609_977.0, np.full(4, 15e9)).tolist() == [True] * 4


def test_a_cycle_that_ends_after_its_period_missed_its_deadline() -> None:
    period = 2_666_667.0
    ends = np.array([0.0, period - 1, period, period + 1, 3 * period, np.nan])
    assert rules.ended_late(ends, period).tolist() == [False, False, False, True, True, False]
    # The nullable columns of engine_cycle_ends: a missing end is neither late nor on time.
    late = rules.ended_late(pd.array([1, int(period) + 1, None], dtype="Int64"), period)
    assert late.tolist()[:2] == [False, True] and late.isna().tolist() == [False, False, True]


def test_the_engine_says_on_time_only_from_a_whole_record_of_cycles_that_met_their_deadlines() -> None:
    period, share = 2_666_667.0, 0.5
    whole = A([period, period * 1.02, period * 0.98])
    ok, known = A([False, False, False]), A([True, True, True])
    assert rules.engine_on_time(whole, period, ok, known, 0, share)
    assert not rules.engine_on_time(whole, period, A([False, True, False]), known, 0, share)  # one was late
    assert not rules.engine_on_time(whole, period, ok, A([True, False, True]), 0, share)  # one end unknown
    assert not rules.engine_on_time(whole, period, ok, known, 1, share)  # the engine reported an xrun
    assert not rules.engine_on_time(A([period, 2 * period]), period, ok[:2], known[:2], 0, share)  # a hole
    assert not rules.engine_on_time(A([period, 1.5 * period]), period, ok[:2], known[:2], 0, share)  # late start
    assert rules.engine_on_time(A([period, 1.49 * period]), period, ok[:2], known[:2], 0, share)
    assert not rules.engine_on_time(A([]), period, A([]), A([]), 0, share)  # nothing recorded there


def test_a_group_is_after_the_recording_only_when_it_began_after_the_last_tick() -> None:
    ended = 1_000_000_000
    starts = np.array([ended - 1, ended, ended + 1], dtype=np.int64)
    assert rules.after_the_recording(starts, ended).tolist() == [False, False, True]
    assert not rules.after_the_recording(starts, None).any()  # no trailer: its end is not known


def test_a_group_ended_at_an_attach_only_between_the_attach_and_the_first_record_within_a_period() -> None:
    attached = np.array([1_000_000_000.0, 2_000_000_000.0])
    first = np.array([1_001_000_000.0, np.nan])  # the second attach: no record after it
    period = 5_000_000.0
    ends = np.array([999_999_999, 1_000_000_000, 1_000_999_999, 1_001_000_001, 2_004_999_999, 2_005_000_001])
    got = rules.ended_at_an_attach(ends, attached, first, period).tolist()
    assert got == [False, True, True, False, True, False]
    assert not rules.ended_at_an_attach(ends, np.zeros(0), np.zeros(0), period).any()  # never attached
    # Without a period the window ends at the first record; without either it is empty.
    assert rules.ended_at_an_attach(ends, attached, first, np.nan).tolist() == [False, True, True, False, False, False]


def test_the_windows_are_the_median_read_spacing_where_most_ticks_were_missed() -> None:
    # A kept 2 ms tick jitters by microseconds: its median stays the interval asked for.
    assert rules.kept_interval_ns(2_000_000, 2_000_040.0) == 2_000_000
    assert rules.kept_interval_ns(2_000_000, 2_490_000.0) == 2_000_000
    assert rules.kept_interval_ns(2_000_000, 2_500_000.0) == 2_500_000  # from 1.25 intervals
    assert rules.kept_interval_ns(2_000_000, 9_103_500.0) == 9_103_500  # 534 threads from /proc, 78 % missed
    assert rules.kept_interval_ns(2_000_000, None) == 2_000_000  # no trailer: what was asked


def test_a_window_left_long_is_hot_when_one_wait_for_a_cpu_in_it_was_a_stall() -> None:
    def hot(runqueue_ns: int, switches: int, wall_ns: int) -> bool:
        half_period = np.array([2_666_666.0])
        return bool(
            rules.long_wait_in_window(
                np.array([runqueue_ns]), np.array([switches]), np.array([wall_ns]), half_period, 2_000_000
            )[0]
        )

    assert hot(12_400_000, 4, 31_000_000)  # 12.4 ms runnable over 4 switch-ins: one wait of 3.1 ms at least
    assert not hot(12_400_000, 5, 31_000_000)  # over 5, only 2.48 ms each is certain: not enough
    assert not hot(3_000_000, 1, 3_900_000)  # a window under two intervals: the busy fraction alone (is_hot)
    assert not hot(9_000_000, 0, 31_000_000)  # no switch-in: the wait has not ended, nothing known of it yet


def test_wake_ups_are_timed_from_proc_only_with_windows_no_longer_than_the_period() -> None:
    assert rules.wakeups_timed(5_333_333, 2_000_000)
    assert rules.wakeups_timed(2_000_000, 2_000_000)  # at most one wake-up a window
    assert not rules.wakeups_timed(1_333_333, 2_000_000)  # 64 frames at 48 kHz, read at 2 ms
    assert not rules.wakeups_timed(5_360_000, 11_242_500)  # the Bitwig shape from /proc, most ticks missed


def test_machine_held_is_uncounted_on_cpu_time_at_least_half_the_unknown() -> None:
    # At the bar, under it, none uncounted, a /proc episode (no switch record: None, NaN, NA).
    assert rules.machine_held("unknown", 1 * MS, 2 * MS) and rules.machine_held("unknown", 2 * MS, 2 * MS)
    assert not rules.machine_held("unknown", 1 * MS - 1, 2 * MS)
    assert not rules.machine_held("unknown", 0, 0)
    assert not any(rules.machine_held("unknown", u, 2 * MS) for u in (None, np.nan, pd.NA))
    assert not rules.machine_held("run", 2 * MS, 2 * MS)  # an episode with another verdict is its own
    assert rules.MACHINE_HELD_MIN_SHARE == 0.5
