"""The line each view prints with the thresholds it used (README, "Explaining a spike"): the values
come from analyses.rules (defined once there) or from the options that replaced them."""

from __future__ import annotations

from analyses import rules as R
from forensics.describe import fmt_ns


def stall_thresholds(rules: R.StallRules, interval_ns: int) -> str:
    if rules.min_stall_ns is not None:
        least = f"{fmt_ns(rules.min_stall_ns)} (--min-stall)"
    else:
        least = (
            f"half the period of a periodic thread, {fmt_ns(R.MIN_STALL_INTERVALS * interval_ns)} otherwise "
            "(--min-stall)"
        )
    return (
        f"Thresholds: an episode is listed when its stall beyond the thread's normal busy time is at least "
        f"{least}; a window is hot from {rules.busy_fraction:.0%} busy (--busy-fraction), or, one the sampler "
        "left long, when its runnable time over its switch-ins reaches that least stall; a fault storm "
        f"from {rules.fault_rate_per_ms:g} faults per ms on CPU (--fault-rate); a wake-up is missed after "
        f"the period + max({fmt_ns(rules.wake_margin_intervals * interval_ns)}, "
        f"{R.PERIOD_TOLERANCE_FRACTION:.0%} of the period) without a switch-in, or, in a window the sampler "
        "left long, when its time off CPU over its switch-ins + 1 exceeds that (a lower bound)."
    )


def spike_thresholds(factor: float, min_ns: int, deadline_ns: int | None) -> str:
    deadline = f"{fmt_ns(deadline_ns)}" if deadline_ns is not None else "the thread's period (periodic threads)"
    return (
        f"Thresholds: an outlier window has {factor:g}x the thread's typical CPU (--factor) and at least "
        f"{fmt_ns(min_ns)} (--min); a deadline spike is busy through windows adding up to {deadline} (--deadline)."
    )


def jitter_thresholds(interval_ns: int) -> str:
    return (
        f"Thresholds: an interval within max({R.LOST_WAKEUP_TOLERANCE:.0%} of the period, the timing's "
        f"resolution: exact for lab cycles, {fmt_ns(interval_ns)} from /proc) of 2x, 3x or 4x the period is a "
        "lost wake-up."
    )


def system_thresholds() -> str:
    return (
        "Thresholds: an XRUN is a cycle that ended after its deadline (its nominal start + the period); a "
        "delay (how late a cycle began after its nominal start) is counted above the cycle's spare time (the "
        "period less its run time) and above 1000 us."
    )


def xrun_thresholds() -> str:
    return (
        f"Thresholds: an engine's reports within {R.XRUN_REPORT_GAP_PERIODS:g} periods of the one before, or "
        "with none of its recorded cycles between them ended on time, are one xrun; a missed deadline is a "
        "cycle that ended after its period; incidents are those `forensics stalls` finds with its default "
        "thresholds."
    )
