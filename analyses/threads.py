"""Who is who: one row per thread, with its scheduling class and whether it wakes up periodically.

An audio callback thread is the thread to watch even when it did not get a real-time policy (a JACK
client without rtprio, a plugin host's audio thread still at SCHED_OTHER): what gives it away is its
wake-up pattern. Switch-ins (schedstat field 3) are counted per block of `block_ns` (200 ms); a thread
is periodic when

- it wakes at least 10 times a second (median of at least 2 switch-ins per block); a slow waker's blocks
  are merged so that each holds about 20 wake-ups,
- its count per block is steady: in at least half of the blocks within max(1, 5 %) of the median, and
  those blocks vary by at most a tenth of a Poisson count's spread (var/mean <= 0.1). A thread woken at
  random varies like a Poisson count (+-sqrt(n)); a periodic one by one at most, except in the blocks
  where it stalled (the lab injects an episode every 0.6 s: a third of the blocks),
- and it sleeps: busy (on CPU or runnable) for at most 70 % of the block. A CPU-bound thread sharing a CPU
  is switched in at a steady rate too, by the scheduler's time slices, and is not a periodic waker.

Its period is the blocks' time divided by their switch-ins. An engine thread that is switched in more
than once a cycle (it also waits for workers) shows a fraction of its real period: the limits are in
the README.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyses.source import iter_samples
from capture.format import Capture
from capture.vocabulary import RT_POLICIES, policy_name

BLOCK_NS = 200_000_000
MIN_WAKEUPS_PER_BLOCK = 2
MIN_COUNT = 20  # wake-ups per (merged) block
MAX_MERGE = 25  # at most 5 s blocks
MIN_BLOCKS = 5
STEADY_FRACTION = 0.5
MAX_DISPERSION = 0.1
MAX_BUSY_FRACTION = 0.7


def policy_label(policy: int, rtprio: int, nice: int | None = None) -> str:
    name = policy_name(policy)
    if int(policy) in RT_POLICIES:
        return f"{name} {int(rtprio)}"
    return name if nice is None or int(nice) == 0 else f"{name} nice {int(nice)}"


def thread_names(cap: Capture) -> pd.DataFrame:
    """tid -> comm, process (latest names: a process is named by its leader thread's latest comm)."""
    threads = cap.threads
    if threads.empty:
        return pd.DataFrame({"tid": pd.Series(dtype="int32"), "comm": pd.Series(dtype=object), "process": []})
    return pd.DataFrame(
        {
            "tid": threads["tid"].astype("int32").to_numpy(),
            "comm": threads["comm"].astype(object).to_numpy(),
            "process": threads["process"].astype(object).to_numpy(),
        }
    )


def thread_profiles(
    cap: Capture, *, t_range: tuple[int | None, int | None] | None = None, block_ns: int = BLOCK_NS
) -> pd.DataFrame:
    """One row per thread: names, policy, totals, wake-up rate, `periodic` and `period_ns`.

    Streams the capture (bounded memory): per batch, per thread and block, the last cumulative counters.
    """
    columns = ["pid", "run_ns", "wait_ns", "slices", "policy", "rtprio", "nice"]
    origin: int | None = None
    per_block: list[pd.DataFrame] = []
    per_thread: list[pd.DataFrame] = []
    for batch in iter_samples(cap, columns, t_range=t_range):
        if origin is None:
            origin = int(batch["t_ns"].min())
        rt = np.isin(batch["policy"].to_numpy(), RT_POLICIES)
        frame = batch.assign(
            block=(batch["t_ns"].to_numpy() - origin) // block_ns,
            busy=batch["run_ns"].to_numpy() + batch["wait_ns"].to_numpy(),
            rt=rt,
            rt_prio=np.where(rt, batch["rtprio"].to_numpy(), -1),
        )
        per_block.append(
            frame.groupby(["tid", "block"], sort=False).agg(
                t_last=("t_ns", "max"), slices=("slices", "max"), busy=("busy", "max")
            )
        )
        ordered = frame.sort_values("t_ns", kind="stable")
        per_thread.append(
            ordered.groupby("tid", sort=False).agg(
                pid=("pid", "last"),
                samples=("t_ns", "size"),
                first_ns=("t_ns", "min"),
                last_ns=("t_ns", "max"),
                run_first=("run_ns", "min"),
                run_last=("run_ns", "max"),
                wait_first=("wait_ns", "min"),
                wait_last=("wait_ns", "max"),
                slices_first=("slices", "min"),
                slices_last=("slices", "max"),
                rt=("rt", "max"),
                max_rtprio=("rt_prio", "max"),
                policy=("policy", "last"),
                rtprio=("rtprio", "last"),
                nice=("nice", "last"),
            )
        )
    if not per_thread:
        return _empty_profiles()
    threads = (
        pd.concat(per_thread)
        .groupby(level=0)
        .agg(
            pid=("pid", "last"),
            samples=("samples", "sum"),
            first_ns=("first_ns", "min"),
            last_ns=("last_ns", "max"),
            run_first=("run_first", "min"),
            run_last=("run_last", "max"),
            wait_first=("wait_first", "min"),
            wait_last=("wait_last", "max"),
            slices_first=("slices_first", "min"),
            slices_last=("slices_last", "max"),
            rt=("rt", "max"),
            max_rtprio=("max_rtprio", "max"),
            policy=("policy", "last"),
            rtprio=("rtprio", "last"),
            nice=("nice", "last"),
        )
    )
    blocks = pd.concat(per_block).groupby(level=[0, 1]).max().reset_index().sort_values(["tid", "block"])
    periodic = _periodicity(blocks)
    out = threads.join(periodic, how="left")
    out["wall_ns"] = out["last_ns"] - out["first_ns"]
    out["on_cpu_ns"] = out["run_last"] - out["run_first"]
    out["runqueue_ns"] = out["wait_last"] - out["wait_first"]
    out["switches"] = out["slices_last"] - out["slices_first"]
    out["wakeups_per_s"] = np.where(out["wall_ns"] > 0, out["switches"] / (out["wall_ns"] / 1e9), np.nan)
    out["periodic"] = out["periodic"].fillna(False).astype(bool)
    out = out.reset_index().rename(columns={"index": "tid"})
    out = out.merge(thread_names(cap), on="tid", how="left")
    out["comm"] = out["comm"].fillna("?")
    out["process"] = out["process"].fillna("?")
    keep = [
        "tid", "pid", "comm", "process", "policy", "rtprio", "nice", "rt", "max_rtprio", "samples",
        "first_ns", "last_ns", "wall_ns", "on_cpu_ns", "runqueue_ns", "switches", "wakeups_per_s",
        "periodic", "period_ns", "steady_fraction",
    ]  # fmt: skip
    return out[keep].sort_values("tid").reset_index(drop=True)


def _periodicity(blocks: pd.DataFrame) -> pd.DataFrame:
    """Per tid: periodic flag, period_ns and the fraction of steady blocks (module docstring)."""
    tid = blocks["tid"].to_numpy()
    block = blocks["block"].to_numpy()
    same = np.r_[False, (tid[1:] == tid[:-1]) & (block[1:] == block[:-1] + 1)]
    prev = np.r_[0, np.arange(len(tid) - 1)]
    counts = blocks["slices"].to_numpy() - blocks["slices"].to_numpy()[prev]
    spans = blocks["t_last"].to_numpy() - blocks["t_last"].to_numpy()[prev]
    busy = blocks["busy"].to_numpy() - blocks["busy"].to_numpy()[prev]
    ok = same & (counts >= 0) & (spans > 0)
    d = pd.DataFrame({"tid": tid[ok], "block": block[ok], "count": counts[ok], "span": spans[ok], "busy": busy[ok]})
    if d.empty:
        return pd.DataFrame(columns=["periodic", "period_ns", "steady_fraction"])
    # Slow wakers get longer blocks (k consecutive ones) so that a block holds about MIN_COUNT wake-ups:
    # a Poisson count of n varies by +-sqrt(n), so "steady within +-1" only separates the two from ~20 up.
    rate = d.groupby("tid")["count"].transform("median").to_numpy()
    k = np.clip(np.ceil(MIN_COUNT / np.maximum(rate, 1.0)), 1, MAX_MERGE).astype(np.int64)
    d["group"] = d["block"].to_numpy() // k
    d["k"] = k
    grouped = d.groupby(["tid", "group"]).agg(
        count=("count", "sum"), span=("span", "sum"), busy=("busy", "sum"), n=("count", "size"), k=("k", "first")
    )
    d = grouped[grouped["n"] == grouped["k"]].reset_index()  # whole groups only
    if d.empty:
        return pd.DataFrame(columns=["periodic", "period_ns", "steady_fraction"])
    d["busy"] = d["busy"] / d["span"]
    d["rate"] = d["count"] / d["k"]  # wake-ups per BLOCK_NS, for the rate test
    median = d.groupby("tid")["count"].transform("median")
    tolerance = np.maximum(1.0, 0.05 * median)
    d["steady"] = (d["count"] - median).abs() <= tolerance
    steady = d[d["steady"]]
    agg = d.groupby("tid").agg(n=("count", "size"), rate=("rate", "median"), busy=("busy", "median"))
    agg["steady_fraction"] = d.groupby("tid")["steady"].mean()
    sums = steady.groupby("tid").agg(span=("span", "sum"), count=("count", "sum"))
    spread = steady.groupby("tid")["count"].agg(lambda c: c.var(ddof=0) / c.mean() if c.mean() > 0 else np.inf)
    agg = agg.join(sums, how="left").join(spread.rename("dispersion"), how="left")
    agg["periodic"] = (
        (agg["n"] >= MIN_BLOCKS)
        & (agg["rate"] >= MIN_WAKEUPS_PER_BLOCK)
        & (agg["steady_fraction"] >= STEADY_FRACTION)
        & (agg["dispersion"] <= MAX_DISPERSION)
        & (agg["busy"] <= MAX_BUSY_FRACTION)
    )
    agg["period_ns"] = np.where(
        agg["periodic"] & (agg["count"] > 0), agg["span"] / agg["count"].where(agg["count"] > 0), np.nan
    )
    return agg[["periodic", "period_ns", "steady_fraction"]]


def _empty_profiles() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "tid": pd.Series(dtype="int32"),
            "pid": pd.Series(dtype="int32"),
            "comm": pd.Series(dtype=object),
            "process": pd.Series(dtype=object),
            "policy": pd.Series(dtype="int8"),
            "rtprio": pd.Series(dtype="int16"),
            "nice": pd.Series(dtype="int8"),
            "rt": pd.Series(dtype=bool),
            "max_rtprio": pd.Series(dtype="int16"),
            "samples": pd.Series(dtype="int64"),
            "first_ns": pd.Series(dtype="int64"),
            "last_ns": pd.Series(dtype="int64"),
            "wall_ns": pd.Series(dtype="int64"),
            "on_cpu_ns": pd.Series(dtype="int64"),
            "runqueue_ns": pd.Series(dtype="int64"),
            "switches": pd.Series(dtype="int64"),
            "wakeups_per_s": pd.Series(dtype="float64"),
            "periodic": pd.Series(dtype=bool),
            "period_ns": pd.Series(dtype="float64"),
            "steady_fraction": pd.Series(dtype="float64"),
        }
    )


def select_threads(profiles: pd.DataFrame, *, pattern: str | None = None, everything: bool = False) -> pd.DataFrame:
    """Threads of interest: all (`everything`), those whose comm or process matches `pattern`, or by
    default the real-time threads and the periodic ones. Adds a `why` column."""
    if everything:
        return profiles.assign(why="all threads")
    if pattern is not None:
        regex = re.compile(pattern)
        match = profiles["comm"].astype(str).map(lambda s: bool(regex.search(s))) | profiles["process"].astype(str).map(
            lambda s: bool(regex.search(s))
        )
        return profiles[match.to_numpy()].assign(why=f"name matches {pattern!r}")
    rt = profiles["rt"].to_numpy(dtype=bool)
    periodic = profiles["periodic"].to_numpy(dtype=bool)
    chosen = profiles[rt | periodic].copy()
    why = np.where(rt & periodic, "real-time, periodic", np.where(rt, "real-time", "periodic"))
    chosen["why"] = why[rt | periodic]
    return chosen
