"""The recorder's periodic jobs spread over the ticks (samplers/periodic.py), on a fake clock."""

from __future__ import annotations

import itertools

from samplers.periodic import NEVER_NS, PeriodicJobs

MS = 1_000_000
INTERVAL = 2 * MS


def simulate(
    jobs: PeriodicJobs, periods: dict[str, int], cost_ns: dict[str, int], tick_cost_ns: int, ticks: int
) -> list[list[tuple[str, int]]]:
    """Ticks every INTERVAL, each costing tick_cost_ns, then the due jobs; per tick the (job, due) that ran."""
    clock = [0]
    ran: list[list[tuple[str, int]]] = []

    def run(job: str, now: int) -> None:
        ran[-1].append((job, jobs.due_ns[job]))
        clock[0] += cost_ns[job]
        jobs.due_ns[job] = now + periods[job]

    for tick in range(ticks):
        due = tick * INTERVAL
        clock[0] = max(clock[0], due)
        now = clock[0]
        clock[0] += tick_cost_ns
        ran.append([])
        if now >= jobs.next_ns:
            jobs.run_due(now, due, INTERVAL, run, lambda: clock[0])
    return ran


def test_costly_jobs_due_together_run_on_successive_ticks() -> None:
    """Three 0.7 ms jobs due on the same tick every 50 ms beside a 1 ms tick: one a tick, each in turn."""
    periods = {"system": 50 * MS, "scan": 50 * MS, "demote": 50 * MS}
    jobs = PeriodicJobs(dict.fromkeys(periods, 0))
    ran = simulate(jobs, periods, dict.fromkeys(periods, 700_000), 1 * MS, ticks=500)
    assert max(len(r) for r in ran) == 1  # never two on one tick: 1 + 0.7 + 0.7 ms overruns 2 ms
    assert [r[0][0] for r in ran[:3]] == ["system", "scan", "demote"]  # ties: in the order given
    for job in periods:
        times = [i for i, r in enumerate(ran) if r and r[0][0] == job]
        assert len(times) >= 19  # one second: each about every 50 ms, none left behind
        assert max(b - a for a, b in itertools.pairwise(times)) <= 27  # 50 ms and a tick or two


def test_cheap_jobs_due_together_run_on_one_tick() -> None:
    periods = {"system": 50 * MS, "scan": 50 * MS}
    jobs = PeriodicJobs(dict.fromkeys(periods, 0))
    ran = simulate(jobs, periods, dict.fromkeys(periods, 10_000), 200_000, ticks=30)
    assert [job for job, _ in ran[0]] == ["system", "scan"]


def test_a_job_always_due_does_not_starve_the_others() -> None:
    """Earliest due first: a job due every tick (its period shorter than the ticks) lets the one due longest run."""
    periods = {"hog": 1, "rare": 10 * MS}
    jobs = PeriodicJobs({"hog": 0, "rare": 10 * MS, "never": NEVER_NS})
    periods["never"] = NEVER_NS
    ran = simulate(jobs, periods, {"hog": 1_500_000, "rare": 1_500_000, "never": 0}, 200_000, ticks=100)
    rare = [i for i, r in enumerate(ran) if any(job == "rare" for job, _ in r)]
    assert len(rare) >= 8 and rare[0] <= 6  # due at tick 5: at most a tick late
    assert not any(job == "never" for r in ran for job, _ in r)
