"""Explaining verdicts: the sentences and source lists behind each stall episode, apart from the rules.

analyses.rules and the stall analyses decide (numbers in DataFrames); this module says why, in words:
the evidence line of an episode (the numbers behind its verdict), the sources it rests on (the deciding
ones first), who ran meanwhile (a suspicion for /proc lock and runqueue verdicts) and what the capture
could not decide (generated from the table of analyses.data_sources).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from analyses.data_sources import undecided_for_lack
from analyses.rules import can_hold_cpu_against, machine_held, runqueue_suspect_held
from analyses.source import Near, iter_samples
from analyses.threads import policy_label, thread_names
from analyses.windows import window_deltas
from capture.format import Capture
from capture.vocabulary import RT_POLICIES, policy_name

if TYPE_CHECKING:
    from analyses.exact_stalls import ExactData


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.1f} ms"


# --------------------------------------------------------------------------------------------------
# What the capture could not decide


def undecided(
    sources: dict[str, bool],
    data: ExactData | None,
    chosen: pd.DataFrame,
    t_range: tuple[int | None, int | None] | None,
) -> list[str]:
    """What this capture had no source for (said as unknown, never as a silent zero)."""
    missing = undecided_for_lack(sources, exact=data is not None)
    if data is None:
        return missing
    if not chosen["periodic"].all():
        missing.append("lock waits of watched threads that are not periodic (a worker waiting for work looks alike)")
    tids = chosen["tid"].to_numpy()
    gaps = data.gaps[data.gaps["tid"].isin(tids)]
    if t_range is not None and len(gaps):
        lo = -np.inf if t_range[0] is None else t_range[0]
        hi = np.inf if t_range[1] is None else t_range[1]
        gaps = gaps[(gaps["end_ns"] > lo) & (gaps["start_ns"] < hi)]
    if len(gaps):
        missing.append(
            f"the watched threads' state for {(gaps['end_ns'] - gaps['start_ns']).sum() / 1e6:.1f} ms in "
            f"{len(gaps)} holes of the switch record (no switch recorded: the kernel emitted none, events were "
            "lost, or the process was not yet a target of the probes): /proc decides there"
        )
    if data.sched_lost:
        missing.append(
            f"{data.sched_lost} scheduler events lost (the eBPF ring buffer was full) or skipped by the kernel (a "
            "probe already running on that CPU): intervals across them may be wrong"
        )
    return missing


# --------------------------------------------------------------------------------------------------
# Episodes from the /proc windows


def proc_sources(episodes: pd.DataFrame, sources: dict[str, bool]) -> list[list[str]]:
    """Sources of /proc-based episodes, the deciding ones first: "proc:..." for what the 2 ms reads gave
    (schedstat times, the state letter, fault counts, stat field 42, the sched file), "taskstats:..."
    for delay accounting read through netlink."""
    out = []
    for row in episodes.itertuples(index=False):
        used = []
        ts_blkio = sources["ts_blkio"] and not pd.isna(row.ts_blkio_ns)
        if row.verdict in ("io", "unknown") and ts_blkio:
            used.append("taskstats:blkio")
        if row.verdict == "reclaim":
            used.append("taskstats:reclaim")
        if row.verdict == "fault":
            used.append("proc:faults")
        if row.pressure_windows and row.verdict == "io" and not row.d_reads:
            used.append("proc:pressure/io")
        used.append("proc:schedstat")
        if row.pressure_windows:
            used.append("proc:pressure/io")
        if row.d_reads or row.lock_ns or row.unknown_ns or row.verdict in ("io", "lock"):
            used.append("proc:state")
        if row.minflt or row.majflt or row.verdict == "fault":
            used.append("proc:faults")
        if sources["delayacct"] and not pd.isna(row.blkio_ns):
            used.append("proc:blkio_ticks")
        if sources["schedstats"] and not pd.isna(row.iowait_ns):
            used.append("proc:schedstats")
        if sources["sched"] and not pd.isna(row.invol_switches):
            used.append("proc:sched")
        if ts_blkio:
            used.append("taskstats:blkio")
        if sources["taskstats"] and not pd.isna(row.reclaim_ns) and row.reclaim_ns:
            used.append("taskstats:reclaim")
        out.append(list(dict.fromkeys(used)))
    return out


def proc_evidence(episodes: pd.DataFrame, sources: dict[str, bool]) -> list[str]:
    """One line per episode: the numbers behind the verdict. A loop over episodes, not samples."""
    lines = []
    for row in episodes.itertuples(index=False):
        parts = [f"{row.windows} window{'s' if row.windows != 1 else ''}, {_ms(row.duration_ns)}"]
        on_cpu = row.c_run + row.c_fault_cpu
        small = 0.05 * row.stall_ns
        if on_cpu > small:
            parts.append(f"on CPU {_ms(on_cpu)}")
        if row.runqueue_ns > small:
            rq = f"runnable waiting for a CPU {_ms(row.runqueue_ns)}"
            if not pd.isna(row.invol_switches) and row.invol_switches:
                rq += f" ({int(row.invol_switches)} preemptions)"
            parts.append(rq)
        if row.minflt + row.majflt >= 10 or row.majflt:
            on_ms = max(on_cpu / 1e6, 1e-3)
            parts.append(
                f"{int(row.minflt)} minor + {int(row.majflt)} major faults ({row.minflt / on_ms:.0f}/ms on CPU)"
            )
        if row.d_reads:
            parts.append(f"state D at {int(row.d_reads)} of {row.reads} reads")
        if row.pressure_windows:
            parts.append(
                f"blocked and woken repeatedly in {int(row.pressure_windows)} window"
                f"{'s' if row.pressure_windows != 1 else ''} with no read in D or S, while the machine's IO "
                f"pressure (PSI io some) rose {_ms(row.pressure_ns)} around it (machine-wide: another task's IO "
                "counts too)"
            )
        if row.lock_ns or row.unknown_ns:
            letters = f"state S at {int(row.s_reads)} of {row.reads} reads"
            period = "" if pd.isna(row.period_ns) else f" (period {_ms(row.period_ns)})"
            # Where a window had too few switch-ins for its length (analyses.stalls: sparse), only a lower bound
            least = "at least " if row.sparse_windows else ""
            parts.append(f"no wake-up for {least}{_ms(row.lock_ns + row.unknown_ns)}{period}, {letters}")
        if sources["delayacct"] and not pd.isna(row.blkio_ns):
            parts.append(f"blkio delay {_ms(row.blkio_ns)} (delay accounting)")
        if not pd.isna(row.iowait_ns):
            parts.append(f"iowait {_ms(row.iowait_ns)} (schedstats)")
        if not pd.isna(row.ts_blkio_ns):
            parts.append(f"block-IO delay {_ms(row.ts_blkio_ns)} (taskstats)")
        if row.not_block_ns:
            parts.append(
                f"uninterruptible {_ms(row.not_block_ns)} not accounted as block IO (a kernel lock, a journal "
                "commit, NFS or FUSE)"
            )
        if row.reclaim_ns is not pd.NA and not pd.isna(row.reclaim_ns) and row.reclaim_ns:
            parts.append(f"reclaim/compaction/thrashing delay {_ms(row.reclaim_ns)} (taskstats)")
        if isinstance(row.suspect, str) and row.suspect:
            parts.append(row.suspect)
        elif row.verdict == "lock":
            parts.append(
                "no recorded thread ran meanwhile: a lock held outside the capture, or a late wake-up "
                "(timer, interrupt); /proc cannot tell these apart, eBPF's waker can"
            )
        parts.append(f"CPU {row.cpus} ({row.core_types}), {row.policy}")
        lines.append("; ".join(parts))
    return lines


def add_suspects(cap: Capture, episodes: pd.DataFrame, interval: int, only: np.ndarray | None = None) -> pd.DataFrame:
    """For lock and runqueue verdicts: which recorded thread ran meanwhile (the likely holder or hog).

    runqueue: the thread with the most CPU time on the victim's CPU(s) during the episode; lock: the
    busiest other recorded thread (the holder of a lock is often busy while the waiter sleeps; it may
    live in another process). Only threads in the capture are candidates, and "ran meanwhile" is a
    suspicion, not proof: eBPF's waker is.
    """
    wanted = episodes["verdict"].isin(["lock", "runqueue"]).to_numpy().copy()
    if only is not None:
        wanted &= only
    suspects = np.array([""] * len(episodes), dtype=object)
    # The numbers the incidents decide with (analyses.incidents._blamed_tid); the sentence is for people.
    suspect_tids = pd.array([pd.NA] * len(episodes), dtype="Int32")
    if not wanted.any():
        return episodes.assign(suspect=suspects, suspect_tid=suspect_tids)
    spans = episodes.loc[wanted, ["start_ns", "end_ns"]].to_numpy()
    lo = int(spans[:, 0].min()) - 2 * interval
    hi = int(spans[:, 1].max()) + interval
    frames = []
    columns = ["pid", "run_ns", "wait_ns", "slices", "cpu", "policy", "rtprio"]
    near = Near(spans[:, 0] - 2 * interval, spans[:, 1] + interval)  # rows near any episode
    for batch in iter_samples(cap, columns, t_range=(lo, hi), near=near):
        frames.append(batch)
    if not frames:
        return episodes.assign(suspect=suspects, suspect_tid=suspect_tids)
    samples = pd.concat(frames, ignore_index=True)
    order = np.lexsort((samples["tick"].to_numpy(), samples["tid"].to_numpy()))
    others = window_deltas(samples.take(order).reset_index(drop=True))
    names = thread_names(cap).set_index("tid")["comm"]
    # Each thread's policy and priority at its last window here: who could have held a CPU against whom.
    last = others.drop_duplicates("tid", keep="last")
    policies = pd.to_numeric(last["policy"], errors="coerce").fillna(-1).astype(int).tolist()
    rtprios = pd.to_numeric(last["rtprio"], errors="coerce").fillna(0).astype(int).tolist()
    classes = {  # a thread whose policy no read gave (-1) is compared with nobody
        int(tid): (policy, rtprio)
        for tid, policy, rtprio in zip(last["tid"].tolist(), policies, rtprios, strict=True)
        if policy >= 0
    }
    rows = episodes.iloc[np.flatnonzero(wanted)]
    asked = []
    for row in rows.itertuples(index=False):
        cpus = None
        if row.verdict == "runqueue":
            cpus = [int(c) for c in str(row.cpus).split(",") if c.strip().lstrip("-").isdigit()]
        asked.append((int(row.tid), int(row.start_ns), int(row.end_ns), cpus))
    for i, row, found in zip(
        np.flatnonzero(wanted), rows.itertuples(index=False), _busiest_others(others, asked), strict=True
    ):
        if found is None:
            continue
        top, on, pid, policy, rtprio, cpu, all_on = found
        comm = names.get(top, "?")
        family = ", same process" if pid == int(row.pid) else f", pid {pid}"
        who = f"{comm} ({top}{family}, {policy_label(policy, rtprio)})"
        waited = int(row.runqueue_ns) if row.runqueue_ns is not None and not pd.isna(row.runqueue_ns) else 0
        victim = classes.get(int(row.tid))
        could = victim is None or can_hold_cpu_against(policy, rtprio, *victim)
        if row.verdict == "runqueue" and not (could and runqueue_suspect_held(on, waited)):
            # Wording, not a verdict: the busiest is worth a name where it ran a tenth of the wait or more.
            outside = "went to something the capture does not hold (another process, interrupts, the hypervisor)"
            if all_on <= waited:
                ran = f"recorded threads ran {_ms(all_on)} on CPU {row.cpus} of the {_ms(waited)} it waited"
                rest = f"the rest {outside}"
            else:
                # The windows around the wait are longer than it (a sampler that missed ticks): what ran in them
                # is not a share of the wait, and whether it or something outside the capture held the CPU
                # meanwhile they cannot tell.
                ran = (
                    f"recorded threads ran {_ms(all_on)} on CPU {row.cpus} in the windows around its "
                    f"{_ms(waited)} wait (longer than it)"
                )
                rest = "the windows cannot tell what held the CPU"
            if on * 10 < waited:
                suspects[i] = f"{ran}; {rest}"
            elif not could:
                assert victim is not None
                suspects[i] = (
                    f"{who} ran {_ms(on)} on CPU {cpu} meanwhile but cannot keep a {policy_label(*victim)} thread "
                    f"waiting; the CPU {outside}"
                )
            else:
                suspects[i] = f"{ran} (the most, {who}: {_ms(on)}); {rest}"
            continue
        where = f" on CPU {cpu}" if row.verdict == "runqueue" else ""
        suspects[i] = f"meanwhile {who} ran {_ms(on)}{where}"
        suspect_tids[i] = top
    return episodes.assign(suspect=suspects, suspect_tid=suspect_tids)


# An episode asked about by add_suspects: its thread, start_ns, end_ns, and its CPUs for a runqueue verdict
# (None: any CPU).
Asked = tuple[int, int, int, "list[int] | None"]
# Who ran most meanwhile: tid, its run time in ns, and its pid, policy, rtprio and CPU at its last window; then
# the run time of every other recorded thread there, summed.
Busiest = tuple[int, int, int, int, int, int, int]
_BUSIEST_COLUMNS = ("tid", "start_ns", "end_ns", "run_delta_ns", "pid", "policy", "rtprio", "cpu")


def _busiest_others(others: pd.DataFrame, asked: list[Asked]) -> list[Busiest | None]:
    """Per episode asked about: the other recorded thread with the most run time in the windows that
    overlap it (on its CPUs for a runqueue verdict), the lowest tid of a tie; None when none ran. With
    plain integer columns sorted by tid (window_deltas of samples in (tid, tick) order), each episode's
    windows are runs of one thread and are reduced by numpy; otherwise by pandas (_busiest_others_pandas).
    Both give the same (tests/test_fast_paths.py): per episode a pandas groupby cost ~15 ms, 1.3 s of
    `forensics stalls` on a 30 M-sample capture."""
    column = {name: others[name].to_numpy() for name in _BUSIEST_COLUMNS}
    tid = column["tid"]
    if not all(isinstance(v, np.ndarray) and v.dtype.kind in "iu" for v in column.values()) or np.any(
        tid[1:] < tid[:-1]
    ):
        return _busiest_others_pandas(others, asked)
    out: list[Busiest | None] = []
    for victim, start_ns, end_ns, cpus in asked:
        inside = (column["end_ns"] > start_ns) & (column["start_ns"] < end_ns) & (tid != victim)
        if cpus is not None:
            inside &= np.isin(column["cpu"], cpus)
        rows = np.flatnonzero(inside)
        if not len(rows):
            out.append(None)
            continue
        firsts = np.flatnonzero(np.r_[True, tid[rows[1:]] != tid[rows[:-1]]])
        on = np.add.reduceat(column["run_delta_ns"][rows], firsts)
        top = int(np.argmax(on))
        if on[top] <= 0:
            out.append(None)
            continue
        last = rows[np.r_[firsts[1:], len(rows)][top] - 1]
        pid, policy, rtprio, cpu = (int(column[name][last]) for name in ("pid", "policy", "rtprio", "cpu"))
        out.append((int(tid[last]), int(on[top]), pid, policy, rtprio, cpu, int(on[on > 0].sum())))
    return out


def _busiest_others_pandas(others: pd.DataFrame, asked: list[Asked]) -> list[Busiest | None]:
    out: list[Busiest | None] = []
    for victim, start_ns, end_ns, cpus in asked:
        inside = (others["end_ns"] > start_ns) & (others["start_ns"] < end_ns) & (others["tid"] != victim)
        if cpus is not None:
            inside &= others["cpu"].isin(cpus)
        ran = (
            others[inside]
            .groupby("tid")
            .agg(
                on=("run_delta_ns", "sum"),
                pid=("pid", "last"),
                policy=("policy", "last"),
                rtprio=("rtprio", "last"),
                cpu=("cpu", "last"),
            )
        )
        if ran.empty or ran["on"].max() <= 0:
            out.append(None)
            continue
        top = ran["on"].idxmax()
        best = ran.loc[top]
        pid, policy, rtprio, cpu = (int(best[name]) for name in ("pid", "policy", "rtprio", "cpu"))
        out.append((int(top), int(best["on"]), pid, policy, rtprio, cpu, int(ran["on"][ran["on"] > 0].sum())))
    return out


# --------------------------------------------------------------------------------------------------
# Episodes from the exact timeline (eBPF)


def prio_label(prio: Any, policy: Any = None, rtprio: Any = None, nice: Any = None) -> str:
    """Scheduling class of a task from the /proc policy when known, else from the kernel prio alone."""
    if policy is not None and not pd.isna(policy):
        name = policy_name(policy)
        if int(policy) in RT_POLICIES:
            return f"SCHED_{name} {int(rtprio) if rtprio is not None and not pd.isna(rtprio) else '?'}"
        shown_nice = int(nice) if nice is not None and not pd.isna(nice) else None
        return f"SCHED_{name}" + (f", nice {shown_nice}" if shown_nice is not None else "")
    if prio is None or pd.isna(prio):
        return "priority unknown"
    prio = int(prio)
    # Kernel prio (include/linux/sched/prio.h): 0-99 real-time (99 - rtprio), 100-139 normal (120 + nice).
    if prio < 0:
        return "SCHED_DEADLINE"
    if prio < 100:
        return f"real-time priority {99 - prio}"
    return f"normal priority, nice {prio - 120}"


def exact_headline(row: Any) -> str:
    """The one sentence that says what happened (the verdict in words)."""
    comm, verdict = row.comm, row.verdict
    if verdict == "lock":
        waits = f" in {int(row.lock_waits)} waits" if row.lock_waits > 1 else ""
        text = f"{comm} waited {_ms(row.lock_ns)} asleep (S){waits}"
        if isinstance(row.waker, str):
            text += f"; woken by {row.waker}"
            if row.priority_inversion:
                text += " — priority inversion"
        return text
    if verdict == "io":
        waits = f"{int(row.d_waits)} uninterruptible (D) wait" + ("s" if row.d_waits != 1 else "")
        issuing = getattr(row, "io_cpu_ns", 0) or 0
        if issuing:  # the CPU between the waits (rules.issues_block_io)
            return (
                f"{comm} spent {_ms(row.io_ns)} on block IO: {_ms(row.io_ns - issuing)} in {waits}, "
                f"{_ms(issuing)} on CPU between them taking in and issuing the requests"
            )
        return f"{comm} waited {_ms(row.io_ns)} for block IO in {waits}"
    if verdict == "runqueue":
        text = f"{comm} was runnable {_ms(row.runqueue_ns)} without a CPU"
        if isinstance(row.ran_instead, str):
            text += f"; {row.ran_instead} ran instead"
        return text
    if verdict == "run":
        return f"{comm} ran {_ms(row.run_ns)} on CPU"
    if verdict == "fault":
        return f"{comm} spent {_ms(row.fault_ns)} taking page faults"
    if verdict == "reclaim":
        return f"{comm} spent {_ms(row.reclaim_ns)} in memory reclaim, thrashing or compaction"
    if machine_held(verdict, row.uncounted_ns, row.unknown_ns):
        return (
            f"{comm} was on CPU {_ms(row.uncounted_ns)} by the switch record that its own clock did not count: "
            "the machine's (hypervisor steal or interrupts)"
        )
    if row.not_block_ns >= row.unknown_ns / 2 and row.not_block_ns > 0:
        return (
            f"{comm} was uninterruptible (D) {_ms(row.not_block_ns)} without block-IO delay: a kernel lock, "
            "a journal commit, NFS or FUSE"
        )
    return f"{comm} was off CPU {_ms(row.unknown_ns)} in an undecided state"


def exact_evidence(ep: pd.DataFrame, has_block: bool) -> list[str]:
    """One line per episode, headline first. A loop over episodes, not events."""
    lines = []
    for row in ep.itertuples(index=False):
        parts = [exact_headline(row), f"exact span {_ms(row.duration_ns)}"]
        small = 0.05 * max(row.stall_ns, 1)
        if row.run_ns > small and row.verdict != "run":
            parts.append(f"on CPU {_ms(row.run_ns)}")
        if row.runqueue_ns > small and row.verdict != "runqueue":
            parts.append(f"runnable {_ms(row.runqueue_ns)}")
        if row.uncounted_ns > small and row.verdict != "unknown":
            parts.append(
                f"{_ms(row.uncounted_ns)} on CPU by the switch record but not counted by its own clock: the "
                "machine's (hypervisor steal or interrupts), not its run"
            )
        if row.preemptions:
            parts.append(f"{int(row.preemptions)} preemption{'s' if row.preemptions != 1 else ''}")
        if row.d_ns and row.verdict != "io":
            parts.append(f"uninterruptible (D) {_ms(row.d_ns)} in {int(row.d_waits)} waits")
        if row.lock_ns and row.verdict != "lock":
            parts.append(f"asleep waiting for another task {_ms(row.lock_ns)}")
        if row.page_faults:
            rate = row.page_faults / max(row.fault_ns / 1e6, 1e-3)
            parts.append(f"{int(row.page_faults)} page faults in storms ({rate:.0f}/ms)")
        elif row.proc_storm:
            parts.append(f"{int(row.minflt)} minor + {int(row.majflt)} major faults (/proc)")
        if row.major:
            parts.append(f"{int(row.majflt)} major faults: D time is paging in")
        waited = bool(row.d_ns or row.lock_ns or row.verdict in ("io", "lock", "unknown"))
        if not pd.isna(row.ts_blkio_ns) and waited:
            parts.append(f"blkio delay {_ms(row.ts_blkio_ns)} (taskstats)")
        elif row.d_ns:
            parts.append("blkio delay unknown (no delay accounting for this thread)")
        if has_block and not pd.isna(row.block_requests) and (row.d_ns or row.block_requests):
            parts.append(f"{int(row.block_requests)} block requests issued by it")
        if row.reclaim_ns is not pd.NA and not pd.isna(row.reclaim_ns) and row.reclaim_ns:
            parts.append(f"reclaim/compaction/thrashing delay {_ms(row.reclaim_ns)} (taskstats)")
        if row.near_gap:
            parts.append("next to a hole in the switch record: the thread's state there is unknown")
        parts.append(f"CPU {row.cpus} ({row.core_types}), {row.policy}")
        lines.append("; ".join(parts))
    return lines


def exact_sources(ep: pd.DataFrame, has_block: bool) -> list[list[str]]:
    """Per episode, the sources its verdict rests on: the deciding ones first."""
    out = []
    for row in ep.itertuples(index=False):
        woken = bool(row.lock_ns or row.d_ns or (row.runqueue_ns and row.preemptions == 0))
        fault_source = "proc:faults" if (row.proc_storm or row.major) else "ebpf:page_faults"
        waited = bool(row.d_ns or row.lock_ns or row.verdict in ("io", "lock", "unknown"))
        blkio = ["taskstats:blkio"] if waited and not pd.isna(row.ts_blkio_ns) else []
        block = ["ebpf:block_rq"] if has_block and not pd.isna(row.block_requests) and row.block_requests else []
        first = {
            "run": ["ebpf:sched_switch"],
            "runqueue": ["ebpf:sched_switch"],
            "io": [*blkio, "ebpf:sched_switch"],
            "fault": [fault_source, "ebpf:sched_switch"],
            "lock": ["ebpf:sched_switch", "ebpf:sched_wakeup"],
            "reclaim": ["taskstats:reclaim"],
            "unknown": ["ebpf:sched_switch", *blkio],
        }[row.verdict]
        more = ["ebpf:sched_switch"]
        if woken:
            more.append("ebpf:sched_wakeup")
        if row.page_faults:
            more.append("ebpf:page_faults")
        if row.proc_storm or row.major:
            more.append("proc:faults")
        more += blkio + block
        if row.reclaim_ns is not pd.NA and not pd.isna(row.reclaim_ns) and row.reclaim_ns:
            more.append("taskstats:reclaim")
        out.append(list(dict.fromkeys([*first, *more])))
    return out
