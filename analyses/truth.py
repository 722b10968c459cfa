"""Checking verdicts against the lab's ground truth: matches, a confusion matrix, recall and precision.

A truth episode (cause, tid, start_ns, end_ns) at least `min_ns` long is *found* by the stall episode of
the same thread that overlaps it most (within `tolerance_ns` either side: a window boundary). A stall
episode of a thread that has ground truth and overlaps no truth episode at all is a *false alarm*; one
that overlaps only truth episodes shorter than `min_ns` is neither. Recall of a cause = found with that
verdict / truth episodes of that cause; precision of a verdict = right / (stall episodes with that
verdict that matched an eligible truth episode, or were false alarms). With the lab's cycles log, a
stall episode on a callback that really was late (past its deadline, half its period or longer, or
started 2 ms or more after its period began) though the lab injected nothing there is counted apart: a
real stall of the machine, not a false alarm. So is an episode the lab's own record says was not what its
cause says (`as_injected`: an io episode that never left the CPU): the machine did something else, and the
verdict on it is neither right nor wrong. And so is an episode the recorder was kept off the CPU through
(`unobservable`: the sampler did not read the thread for most of it): the capture cannot show it.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from analyses.machine import machine_growth
from analyses.rules import DEFAULT_RULES, LAB_INTERVAL_NS, IncidentRules, min_stall_ns, overslept_margin_ns
from analyses.source import iter_samples
from capture.format import Capture

CAUSE_ALIASES = {"majfault": "fault", "major": "fault", "minor": "fault"}

# Causes whose episode keeps the callback thread off its CPU: it sleeps (io, lock) or waits runnable.
OFF_CPU_CAUSES = ("io", "lock", "runqueue")
# An off-CPU episode is what its cause says when the thread's own CPU time over it is at most this share
# of its length. On a fast virtual disk a request can complete before the thread sleeps: the io episode
# is then a loop of syscalls on the CPU (blkio delay 0 for four fsyncs, seen in CI), and `run` is the
# scheduler's true answer, not a wrong verdict.
OFF_CPU_MAX_SHARE = 0.5
LABEL_NOT_AS_INJECTED = "not as injected"
LABEL_UNOBSERVABLE = "unobservable"
# An io episode is an IO wait when the machine's IO pressure ("some": a task in io_schedule()) grew by at
# least this share of the thread's off-CPU time over it. CI runs here had 6 ms io episodes with the thread
# off CPU 4.9 ms, switched in 15 times, and IO pressure 1.3 ms over the 50 ms around it: the kernel did
# not count most of that time as a wait for IO, so no source can show it as io. In 12 CI lab captures (110
# io episodes without steal) 7 fell below 0.3, all 6 ms ones, 4 of them below 0.1; 17 of the 12 ms ones
# fell at 0.4-0.5 (a bar of 0.5 cut that group in two) and the rest higher. And the IO wait must last at
# least a sampling interval (LAB_INTERVAL_NS): a shorter one can fall between two reads of the thread in D,
# so /proc cannot be expected to see it (CI: a 6 ms episode with 1.36 ms of IO pressure, missed).
IO_PRESSURE_MIN_SHARE = 0.3
# An episode whose thread's own CPU clock counted at least this share of it was on its CPU, running, for
# all of it: the host took nothing from that thread, whatever /proc/stat's machine-wide steal (summed over
# every vCPU, in 10 ms ticks) grew by meanwhile. A thread's clock does not run while its vCPU is stolen
# (the rq task clock leaves steal out: kernel/sched/core.c update_rq_clock_task), so a stolen run episode
# shows as CPU time short of its length. Measured here beside stress-ng: a 29 ms run episode with 13 ms of
# CPU time and 30 ms of steal; and 3 of 10 run episodes with 10 ms of machine steal and 12.01 ms of CPU
# time in 12.01-12.06 ms, each given its own verdict.
ON_CPU_UNSTOLEN_SHARE = 0.95
# Causes whose thread is on its CPU through the episode: the host's steal is taken from it (it reads
# neither running nor waiting: analyses.exact_stalls uncounted_ns), so the verdict may not be the cause's.
# The others (OFF_CPU_CAUSES) keep the thread off its CPU: steal lands on other tasks and can lengthen the
# wait (the holder, the disk's completion or the hog ran slower) but not change what the thread waited
# in, so their verdicts stay scorable; their timing does not (as_injected's `timing`). Measured here with
# eBPF under 25-45 % steal (vmstat st), 3 lab captures of 50 episodes: off-CPU episodes with steal got
# their own verdict 54 of 57 times (lock 20/20, runqueue 19/19, io 15/18, the other 3 `unknown`); run and
# fault episodes with steal 31 of 54; the off-CPU ones' edges were off by 0.6-16 ms in nearly half.
ON_CPU_CAUSES = ("run", "fault")


def as_injected(truth: pd.DataFrame, *, timing: bool = False) -> np.ndarray:
    """Per truth episode, whether the lab's own record says it was what its cause says: not when the
    hypervisor stole time from the machine during an episode of an on-CPU cause (`steal_ns`: a thread on a
    vCPU the host took away reads R, neither running nor waiting; CI runs here saw 14-45 % steal for
    minutes) unless the thread's own clock shows it ran through all of it (ON_CPU_UNSTOLEN_SHARE), or of
    any cause at all with `timing` (for checks of edges and delay shares: steal moves them); an
    off-CPU cause with the thread on CPU for more than OFF_CPU_MAX_SHARE of it was not; an io
    episode over which the machine's IO pressure grew by less than IO_PRESSURE_MIN_SHARE of the thread's
    off-CPU time, or by less than a sampling interval, was not a wait for IO by the kernel's own count; a
    minor-fault episode whose pages per ms of the thread's CPU time fell below the fault-storm rate
    (analyses.rules) was not a storm. True where the record lacks the figures (a truth file from before
    the lab kept them)."""
    ok = np.ones(len(truth), dtype=bool)
    if truth.empty:
        return ok
    cause = truth["cause"].map(lambda c: CAUSE_ALIASES.get(str(c), str(c))).to_numpy()
    length = (truth["end_ns"] - truth["start_ns"]).to_numpy(dtype=np.float64)
    has_cpu = "cpu_ns" in truth.columns
    cpu = (
        pd.to_numeric(truth["cpu_ns"], errors="coerce").to_numpy(dtype=np.float64)
        if has_cpu
        else np.full(len(truth), np.nan)
    )
    if "steal_ns" in truth.columns:
        stolen = pd.to_numeric(truth["steal_ns"], errors="coerce").fillna(0).to_numpy(dtype=np.float64) > 0
        # With `timing`, any steal spoils: a stolen instant moves an edge even where the thread's clock
        # counted nearly all of the episode (a CI run: a fault storm so admitted read `unknown` by eBPF).
        if not timing:
            ran_through = (cpu >= ON_CPU_UNSTOLEN_SHARE * length) & (length > 0)
            stolen &= np.isin(cause, ON_CPU_CAUSES) & ~ran_through
        ok &= ~stolen
    if not has_cpu:
        return ok
    known = ~np.isnan(cpu) & (length > 0)
    off = np.isin(cause, OFF_CPU_CAUSES) & known
    ok[off] &= cpu[off] <= OFF_CPU_MAX_SHARE * length[off]
    if "io_pressure_ns" in truth.columns:
        pressure = pd.to_numeric(truth["io_pressure_ns"], errors="coerce").to_numpy(dtype=np.float64)
        io = (cause == "io") & known & ~np.isnan(pressure)
        ok[io] &= pressure[io] >= np.maximum(IO_PRESSURE_MIN_SHARE * (length[io] - cpu[io]), LAB_INTERVAL_NS)
    if "pages" in truth.columns:
        pages = pd.to_numeric(truth["pages"], errors="coerce").to_numpy(dtype=np.float64)
        kind = truth["fault_kind"].astype(str).to_numpy() if "fault_kind" in truth.columns else None
        minor = (cause == "fault") & known & ~np.isnan(pages) & (cpu > 0)
        if kind is not None:
            minor &= kind != "major"
        rate = np.divide(pages, cpu / 1e6, out=np.zeros(len(cpu)), where=minor)
        ok[minor] &= rate[minor] >= DEFAULT_RULES.fault_rate_per_ms
    return ok


# The sampler missed its own ticks when two consecutive reads of a thread are this many intervals apart
# (the incidents' sampler gap, analyses.rules.IncidentRules.sampler_gap_intervals).
SAMPLER_GAP_INTERVALS = IncidentRules().sampler_gap_intervals
# An episode is unobservable when such a gap covers at least this share of it: its windows then hold the
# gap's wall time as well, and the reads that would have caught its state letter were not made (a 12 ms
# run episode inside a 30 ms gap fills under half its window: not hot).
UNOBSERVABLE_GAP_SHARE = 0.5


def read_gap_ns(truth: pd.DataFrame, reads: pd.DataFrame) -> np.ndarray:
    """Per truth episode: how much of it the longest gap between two consecutive reads of its thread by the
    sampler (`reads`: tid, t_ns, from the capture's samples) covers, where that gap is a sampler gap
    (SAMPLER_GAP_INTERVALS intervals or longer at the reads' own median spacing); 0 otherwise. An episode
    with no read of its thread on both sides is covered whole."""
    out = np.zeros(len(truth), dtype=np.int64)
    if truth.empty:
        return out
    by_tid = {int(tid): np.sort(g["t_ns"].to_numpy(np.int64)) for tid, g in reads.groupby("tid")}
    for i, row in enumerate(truth.itertuples(index=False)):  # one loop per truth episode (tens)
        t = by_tid.get(int(row.tid))
        start, end = int(row.start_ns), int(row.end_ns)
        if t is None or len(t) < 2:
            out[i] = end - start
            continue
        interval = float(np.median(np.diff(t)))
        lo = max(int(np.searchsorted(t, start, side="right")) - 1, 0)
        hi = min(int(np.searchsorted(t, end, side="left")), len(t) - 1)
        if t[lo] > start or t[hi] < end:  # the thread was not read before or after it: not seen whole
            out[i] = end - start
            continue
        a, b = t[lo:hi], t[lo + 1 : hi + 1]
        long = (b - a) >= SAMPLER_GAP_INTERVALS * interval
        covered = np.minimum(b, end) - np.maximum(a, start)
        out[i] = int(covered[long].max()) if long.any() else 0
    return out


def unobservable(truth: pd.DataFrame, reads: pd.DataFrame | None) -> np.ndarray:
    """Per truth episode, whether the recorder was kept off the CPU through it: a sampler gap
    (read_gap_ns) covers UNOBSERVABLE_GAP_SHARE of it or more. All False without the reads."""
    if reads is None or truth.empty:
        return np.zeros(len(truth), dtype=bool)
    length = (truth["end_ns"] - truth["start_ns"]).to_numpy(np.float64)
    return read_gap_ns(truth, reads) >= UNOBSERVABLE_GAP_SHARE * length


def thread_reads(cap: Capture, tids: Iterable[int]) -> pd.DataFrame:
    """The sampler's reads (tid, t_ns) of the given threads, from a capture's samples."""
    batches = [b[["tid", "t_ns"]] for b in iter_samples(cap, [], tids=[int(t) for t in tids])]
    return pd.concat(batches, ignore_index=True) if batches else pd.DataFrame({"tid": [], "t_ns": []})


def match_truth(
    stalls: pd.DataFrame,
    truth: pd.DataFrame,
    *,
    min_ns: int = 5_000_000,
    tolerance_ns: int = 2_000_000,
    reads: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per eligible truth episode: cause tid start_ns end_ns as_injected observable verdict (or
    "missed") stall_start_ns. `reads`: the sampler's reads of the threads (thread_reads), for
    `observable` (all True without them)."""
    eligible = truth[(truth["end_ns"] - truth["start_ns"]) >= min_ns].copy()
    eligible["as_injected"] = as_injected(eligible)
    eligible["observable"] = ~unobservable(eligible, reads)
    eligible["cause"] = eligible["cause"].map(lambda c: CAUSE_ALIASES.get(str(c), str(c)))
    verdicts, starts = [], []
    by_tid = {tid: group for tid, group in stalls.groupby("tid")} if len(stalls) else {}
    for row in eligible.itertuples(index=False):  # one loop per truth episode (tens to hundreds)
        group = by_tid.get(row.tid)
        if group is None:
            verdicts.append("missed")
            starts.append(pd.NA)
            continue
        lo = np.maximum(group["start_ns"].to_numpy(np.int64), row.start_ns - tolerance_ns)
        hi = np.minimum(group["end_ns"].to_numpy(np.int64), row.end_ns + tolerance_ns)
        overlap = hi - lo
        if (overlap <= 0).all():
            verdicts.append("missed")
            starts.append(pd.NA)
            continue
        best = int(np.argmax(overlap))
        verdicts.append(str(group["verdict"].iloc[best]))
        starts.append(int(group["start_ns"].iloc[best]))
    eligible["verdict"] = verdicts
    eligible["stall_start_ns"] = pd.array(starts, dtype="Int64")
    return eligible.reset_index(drop=True)


def false_alarms(stalls: pd.DataFrame, truth: pd.DataFrame, *, tolerance_ns: int = 2_000_000) -> pd.DataFrame:
    """Stall episodes of threads with ground truth that overlap no truth episode at all."""
    if stalls.empty:
        return stalls
    watched = stalls[stalls["tid"].isin(truth["tid"].unique())]
    keep = []
    for row in watched.itertuples(index=False):
        same = truth[truth["tid"] == row.tid]
        hit = (same["start_ns"] - tolerance_ns < row.end_ns) & (same["end_ns"] + tolerance_ns > row.start_ns)
        keep.append(not bool(hit.any()))
    return watched[np.asarray(keep, dtype=bool)]


def _lab_period_ns(cycles: pd.DataFrame) -> float:
    """The lab's period: the median spacing of a thread's callback deadlines (0.0 without two of them)."""
    if cycles.empty:
        return 0.0
    spacing = cycles.sort_values(["tid", "deadline_ns"]).groupby("tid")["deadline_ns"].diff()
    return float(spacing[spacing > 0].median()) if (spacing > 0).any() else 0.0


def late_cycles(
    cycles: pd.DataFrame,
    *,
    min_ns: int = 5_000_000,
    delay_ns: int = 2_000_000,
    overslept_ns: int | None = None,
    interval_ns: int = LAB_INTERVAL_NS,
) -> pd.DataFrame:
    """Callbacks that really were late, long or delayed (the lab's own log): end past the deadline, an end
    half the period or more (at most min_ns) after the period began, a start delay_ns or more after the
    period began (a late wake-up), or a sleep since the thread's previous callback longer than a period
    plus overslept_ns (it missed its wake-up: what the missed wake-up rule claims,
    analyses.rules.overslept_margin_ns of the capture's interval; one clean lab run here had a callback
    start 1.55 ms late after a 6.64 ms sleep, no thread of the capture running meanwhile: a real late
    wake-up of the machine, which the rule rightly reported)."""
    if cycles.empty:
        return cycles
    if overslept_ns is None:
        overslept_ns = overslept_margin_ns(interval_ns)
    ordered = cycles.sort_values(["tid", "deadline_ns"])
    period = _lab_period_ns(cycles)
    # Long: a callback that ended half its period or more after its period began (the min stall of a
    # periodic thread, analyses.rules: it lost half its period) is a stall by the rule the verdicts use,
    # whatever held it; min_ns caps that bar. Measured from the period's start, not the callback's: the
    # thread's wake-up and loop before the callback run slow too when the machine does.
    if period:
        bar = min(min_ns, int(min_stall_ns(np.array([period]), interval_ns)[0]))
        long = (ordered["end_ns"] - (ordered["deadline_ns"] - period)) >= bar
    else:
        long = (ordered["end_ns"] - ordered["start_ns"]) >= min_ns
    delayed = (ordered["start_ns"] - (ordered["deadline_ns"] - period)) >= delay_ns if period else long & False
    slept = ordered["start_ns"] - ordered.groupby("tid")["end_ns"].shift(1)
    overslept = (slept > period + overslept_ns).fillna(False).astype(bool) if period else long & False
    return ordered[(ordered["end_ns"] > ordered["deadline_ns"]) | long | delayed | overslept]


def within_log(stalls: pd.DataFrame, cycles: pd.DataFrame) -> np.ndarray:
    """Per stall episode, whether it lies within its thread's cycles log (from the first callback's start
    to the last one's end): the lab's thread starting up, or running on after its last callback as it
    exits, is outside what the lab logs, so a verdict there is neither right nor wrong. True for threads
    without a log."""
    if stalls.empty or cycles.empty:
        return np.ones(len(stalls), dtype=bool)
    span = cycles.groupby("tid").agg(first_ns=("start_ns", "min"), last_ns=("end_ns", "max"))
    first = span["first_ns"].reindex(stalls["tid"]).to_numpy(dtype=float)
    last = span["last_ns"].reindex(stalls["tid"]).to_numpy(dtype=float)
    start, end = stalls["start_ns"].to_numpy(dtype=float), stalls["end_ns"].to_numpy(dtype=float)
    return np.isnan(first) | ((start >= first) & (end <= last))


def steal_around(system: pd.DataFrame | None, stalls: pd.DataFrame) -> np.ndarray:
    """Per stall episode, whether hypervisor steal (/proc/stat) grew between the system reads that
    bracket it, on the machine row (cpu -1) or on any CPU's row: the host took a vCPU then. Both, because
    each line is its own truncation to USER_HZ ticks (fs/proc/stat.c show_stat converts the summed ns for
    the machine line and each CPU's ns for its own): steal on one CPU can move that CPU's line and leave
    the machine line as it was (seen in CI: cpu1 153463 -> 153464 while cpu -1 stayed 308498, over a `run`
    verdict of lab-audio on CPU 1 whose callbacks were logged on time). False where the capture has no
    such reads."""
    if stalls.empty:
        return np.zeros(0, dtype=bool)
    starts, ends = stalls["start_ns"].to_numpy(np.int64), stalls["end_ns"].to_numpy(np.int64)
    stolen = np.zeros(len(stalls), dtype=bool)
    cpus = [-1] if system is None or system.empty else sorted(int(c) for c in pd.unique(system["cpu"]))
    for cpu in cpus:
        _, grew = machine_growth(system, starts, ends, ["steal"], cpu=cpu)
        stolen |= np.nan_to_num(grew["steal"]) > 0
    return stolen


def split_alarms(
    alarms: pd.DataFrame,
    cycles: pd.DataFrame,
    *,
    tolerance_ns: int = 2_000_000,
    interval_ns: int = LAB_INTERVAL_NS,
    system: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(false, real): alarms that overlap no late callback, and those that overlap one the lab did not
    inject (a real stall of the machine: the verdict is then not checkable, but it is not a false alarm),
    or (with the capture's `system` table) that overlap hypervisor steal (steal_around). Alarms outside
    the cycles log (within_log) are in neither."""
    alarms = alarms[within_log(alarms, cycles)]
    late = late_cycles(cycles, interval_ns=interval_ns)
    stolen = steal_around(system, alarms)
    if alarms.empty:
        return alarms, alarms.iloc[0:0]
    period = _lab_period_ns(cycles)
    real = []
    for row, machine in zip(alarms.itertuples(index=False), stolen, strict=True):
        same = late[late["tid"] == row.tid] if "tid" in late else late
        # A callback woken late starts after the stall that delayed it: look one period past its end.
        hit = (same["start_ns"] - tolerance_ns < row.end_ns + period) & (same["end_ns"] + tolerance_ns > row.start_ns)
        real.append(bool(hit.any()) or bool(machine))
    mask = np.asarray(real, dtype=bool)
    return alarms[~mask], alarms[mask]


def confusion(
    stalls: pd.DataFrame,
    truth: pd.DataFrame,
    *,
    cycles: pd.DataFrame | None = None,
    min_ns: int = 5_000_000,
    tolerance_ns: int = 2_000_000,
    interval_ns: int = LAB_INTERVAL_NS,
    system: pd.DataFrame | None = None,
    reads: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(matrix, scores): truth cause x verdict counts (with `missed`; a `none` row of false alarms; with
    `cycles`, a `late, not injected` row of verdicts on callbacks that really were late but that the lab
    did not cause, or with `system` on hypervisor steal, left out of precision; a `not as injected` row
    of the verdicts on episodes the lab's own record says were not what their cause says (as_injected),
    left out of recall and precision; with the sampler's `reads` (thread_reads), an `unobservable` row
    of the verdicts on episodes the recorder was kept off the CPU through (unobservable), left out the
    same way); per cause: episodes (as injected and observable), not_as_injected, unobservable (with
    `reads`), recall, precision."""
    matched = match_truth(stalls, truth, min_ns=min_ns, tolerance_ns=tolerance_ns, reads=reads)
    other = matched[~matched["as_injected"]] if len(matched) else matched
    matched = matched[matched["as_injected"]] if len(matched) else matched
    unseen = matched[~matched["observable"]] if len(matched) else matched
    matched = matched[matched["observable"]] if len(matched) else matched
    alarms = false_alarms(stalls, truth, tolerance_ns=tolerance_ns)
    real = alarms.iloc[0:0]
    if cycles is not None:
        alarms, real = split_alarms(alarms, cycles, tolerance_ns=tolerance_ns, interval_ns=interval_ns, system=system)
    table = pd.crosstab(matched["cause"], matched["verdict"]) if len(matched) else pd.DataFrame()
    rows_apart = (("late, not injected", real), (LABEL_NOT_AS_INJECTED, other), (LABEL_UNOBSERVABLE, unseen))
    for label, rows in (*rows_apart, ("none", alarms)):
        if len(rows):
            extra = rows["verdict"].value_counts().rename(label).to_frame().T
            table = pd.concat([table, extra]).fillna(0)
    table = table.astype(int) if len(table) else table
    causes = sorted(
        set(matched["cause"])
        | set(other["cause"] if len(other) else [])
        | set(unseen["cause"] if len(unseen) else [])
        | set(alarms["verdict"] if len(alarms) else [])
    )
    scores = []
    for cause in causes:
        n = int((matched["cause"] == cause).sum())
        right = int(((matched["cause"] == cause) & (matched["verdict"] == cause)).sum())
        said = int((matched["verdict"] == cause).sum()) + int((alarms["verdict"] == cause).sum() if len(alarms) else 0)
        score = {
            "cause": cause,
            "episodes": n,
            "not_as_injected": int((other["cause"] == cause).sum()) if len(other) else 0,
        }
        if reads is not None:
            score["unobservable"] = int((unseen["cause"] == cause).sum()) if len(unseen) else 0
        score |= {
            "found_right": right,
            "said": said,
            "recall": right / n if n else float("nan"),
            "precision": right / said if said else float("nan"),
        }
        scores.append(score)
    matrix = table.reset_index().rename(columns={"index": "truth", "cause": "truth"}) if len(table) else table
    return matrix, pd.DataFrame(scores)


def edge_errors(stalls: pd.DataFrame, truth: pd.DataFrame, cycles: pd.DataFrame | None = None) -> pd.DataFrame:
    """How far each truth episode's edges are from the stall episode that found it (the one of the same
    thread overlapping it most), comparing what the sources can see:

    - io, lock, runqueue: the wait itself (the lab starts its clock, then waits; the exact episode runs
      from the switch-out to the switch-in or the wake-up);
    - fault: the storm (first to last page fault);
    - run: the start of the burn, and the end of the callback that holds it (`cycles`): the burn and the
      callback's own work after it are one stretch on the CPU, which no scheduler event divides.

    Columns: cause tid start_ns end_ns verdict stall_start_ns stall_end_ns start_error_ns end_error_ns
    end_reference ("episode" or "callback") basis waker_tid (and holder_tid when the truth has it).
    Errors are stall minus truth, in ns (null when no stall episode overlaps it).
    """
    out = truth.copy()
    out["cause"] = out["cause"].map(lambda c: CAUSE_ALIASES.get(str(c), str(c)))
    end_ref = out["end_ns"].astype("int64").to_numpy().copy()
    reference = np.array(["episode"] * len(out), dtype=object)
    if cycles is not None and len(cycles):
        ordered = cycles.sort_values("start_ns")
        for i, row in enumerate(out.itertuples(index=False)):  # one loop per truth episode
            if row.cause != "run":
                continue
            same = ordered[(ordered["tid"] == row.tid) & (ordered["start_ns"] <= row.start_ns)]
            if len(same):
                end_ref[i] = int(same["end_ns"].iloc[-1])
                reference[i] = "callback"
    columns = ["verdict", "stall_start_ns", "stall_end_ns", "basis", "waker_tid"]
    found: dict[str, list] = {c: [] for c in columns}
    for row in out.itertuples(index=False):
        group = stalls[stalls["tid"] == row.tid] if len(stalls) else stalls
        overlap = (
            np.minimum(group["end_ns"].to_numpy(np.int64), row.end_ns)
            - np.maximum(group["start_ns"].to_numpy(np.int64), row.start_ns)
            if len(group)
            else np.zeros(0)
        )
        if len(group) == 0 or (overlap <= 0).all():
            for c in columns:
                found[c].append(None)
            continue
        best = group.iloc[int(np.argmax(overlap))]
        found["verdict"].append(str(best["verdict"]))
        found["stall_start_ns"].append(int(best["start_ns"]))
        found["stall_end_ns"].append(int(best["end_ns"]))
        found["basis"].append(best.get("basis"))
        waker = best.get("waker_tid")
        found["waker_tid"].append(None if waker is None or pd.isna(waker) else int(waker))
    for c in columns:
        out[c] = pd.array(found[c], dtype="Int64") if c.endswith("_ns") or c == "waker_tid" else found[c]
    out["start_error_ns"] = out["stall_start_ns"] - out["start_ns"].astype("Int64")
    out["end_error_ns"] = out["stall_end_ns"] - pd.array(end_ref, dtype="Int64")
    out["end_reference"] = reference
    return out.reset_index(drop=True)


# The lab's clock stops at the end of the wait or the storm; the thread then finishes its callback (about
# 1 ms of DSP here) and does the lab's idle-part work (after a fault episode, giving 2048 of its pages back:
# forensics.lab.episodes.RELEASE_PAGES_PER_CYCLE) before it sleeps: one stretch on the CPU that no scheduler
# event divides, which no truth times. When that stretch reaches the run bar of the thread (min_stall_ns:
# half the period), the exact episode rightly takes it in (analyses.exact_stalls rule 3: a run that long is
# significant) and ends at its switch-out, not where the lab's clock stopped. Measured beside stress-ng (8
# lab captures, 80 fault episodes): the stretch ran 1.25-2.85 ms past a storm's end (median 1.86); the one
# over the 2.67 ms bar ended its episode 2.85 ms late, exactly at that switch-out, with 2.88 ms of run in
# its components. After a wait the stretch ran 0.64-1.94 ms here; with a slower callback (--taps 90, not
# 32: 1.3-2.8 ms after a wait, as on a slower CI machine) io episodes ended 2.70-2.82 ms late, and 16 of
# 50 episodes (io, lock, runqueue, fault) were late, every one at the switch-out of that stretch. Such an
# end is left out of the edge check, not compared: the truth does not time it. A shorter run taken in is
# still compared.
def run_after_ns(errors: pd.DataFrame, on_cpu: pd.DataFrame) -> np.ndarray:
    """Per edge_errors row whose truth is the wait or the storm itself (end_reference "episode") and whose
    stall episode ends past the truth's end at the switch-out of the thread's on-CPU interval (the switch
    record's, tid start_ns end_ns) that holds the truth's end: how long the thread ran after the wait or
    the storm in that stretch, from its switch-in when that came after the truth's start (the end of a wait
    by the switch record) or else from the truth's end (a storm is on the CPU too); 0 for the others."""
    out = np.zeros(len(errors), dtype=np.int64)
    if errors.empty or on_cpu.empty:
        return out
    by_tid = {int(tid): g for tid, g in on_cpu.groupby("tid")}
    for i, row in enumerate(errors.itertuples(index=False)):  # one loop per truth episode (tens)
        if row.end_reference != "episode" or pd.isna(row.stall_end_ns):
            continue
        stall_end, truth_end = int(row.stall_end_ns), int(row.end_ns)
        mine = by_tid.get(int(row.tid))
        if mine is None or stall_end <= truth_end:
            continue
        holds = mine[(mine["start_ns"] <= truth_end) & (mine["end_ns"] == stall_end)]
        if len(holds):
            switch_in = int(holds["start_ns"].iloc[0])
            out[i] = stall_end - (switch_in if switch_in > int(row.start_ns) else truth_end)
    return out


def ends_in_own_run(errors: pd.DataFrame, on_cpu: pd.DataFrame, cycles: pd.DataFrame) -> np.ndarray:
    """Per edge_errors row: whether its stall episode ends at the switch-out of the thread's run after the
    truth's end (run_after_ns) and that run reached the thread's run bar (half the lab's period, from the
    cycles log): a run the episode is right to take in, whose end the truth does not time."""
    period = _lab_period_ns(cycles)
    if not period:
        return np.zeros(len(errors), dtype=bool)
    bar = float(min_stall_ns(np.array([period]), LAB_INTERVAL_NS)[0])
    return run_after_ns(errors, on_cpu) >= bar
