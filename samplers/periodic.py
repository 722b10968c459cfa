"""The recorder's periodic work between ticks, spread so that no tick carries more than it has room for.

At the Bitwig shape (534 threads) each job costs 0.2-1 ms beside a tick of about 1 ms at a 2 ms interval
(medians: the thread scan's listdir 0.75 ms, the real-time sources' policy look-ups 1.1 ms, /proc/stat and
PSI 0.3 ms, the demotion check 0.2 ms; `python bench/recorder_jobs.py`). The scan, /proc/stat and the
demotion check had fallen due on the same tick every 50 ms, and every 250 ms the discovery ran the scan and
the look-ups in one go, 2.2 ms: such a tick cannot keep the interval. So:

- the job due longest runs first (earliest due; ties in the order the jobs were given), so none waits for
  ever however busy the ticks are;
- the next due job runs on the same tick only while the tick is still in the first half of its interval;
  the others wait a tick or two of their 50-250 ms cadences.

Bookkeeping only: the recorder runs the jobs, this says which and when (a fake clock in tests).
"""

from __future__ import annotations

from collections.abc import Callable

NEVER_NS = 1 << 62  # a job not due until something makes it so


class PeriodicJobs:
    def __init__(self, due_ns: dict[str, int]) -> None:
        self.due_ns = dict(due_ns)  # job -> when it is due next (the job's runner sets the next time)
        self.next_ns = min(self.due_ns.values(), default=NEVER_NS)  # the earliest: the hot loop compares `now` with it

    def run_due(
        self, now: int, tick_due_ns: int, interval_ns: int, run: Callable[[str, int], None], clock: Callable[[], int]
    ) -> int:
        """Run the jobs due at `now` on the tick due at `tick_due_ns`: the earliest due first, the next only
        while clock() is within the first half of the interval. `run(job, now)` does the work and sets
        due_ns[job] (and may set others'). Returns how many ran."""
        due = self.due_ns
        ran = 0
        while True:
            job = min(due, key=due.__getitem__)
            if due[job] > now:
                break
            run(job, now)
            ran += 1
            if clock() - tick_due_ns >= interval_ns // 2:
                break
        self.next_ns = min(due.values())
        return ran
