"""How late a periodic thread may wake before it counts as having missed a wake-up.

One rule for the /proc and the exact lock rules: a thread with a period of its own is judged against its
own period, with a tolerance that grows with that period. A fixed margin (a quarter of a 2 ms sampling
interval) suits an audio callback at 1.3-10 ms, but a 100 ms housekeeping thread (fluidsynth's nice-19
hotplug poller) sleeps 100.0 ms against a measured period of 99.4 ms: its own timer slack and the
measurement's error grow with the period (timer slack defaults to 50 us per sleep, and the period is a
median of switch-in gaps), so 0.6 ms late on 100 ms is its rhythm, not a stall.
"""

from __future__ import annotations

import numpy as np

# A periodic thread may wake this fraction of its period late and still be on time. 5 % of 5.333 ms is
# 0.27 ms, under the sampled rule's fixed 0.5 ms margin: audio periods up to 10 ms keep today's limit.
PERIOD_TOLERANCE_FRACTION = 0.05


def wake_limit_ns(period_ns: np.ndarray, margin_ns: np.ndarray | float) -> np.ndarray:
    """Per thread: the longest sleep that is still on time, `period + max(margin, fraction * period)`.
    NaN where the thread has no period (the rule does not apply)."""
    period = np.asarray(period_ns, dtype=np.float64)
    return period + np.maximum(np.asarray(margin_ns, dtype=np.float64), PERIOD_TOLERANCE_FRACTION * period)
