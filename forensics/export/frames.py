"""The DataFrames the exports write: per-thread windows (bounded memory) and the stall verdicts."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from capture.errors import ForensicsError
from capture.format import Capture
from forensics.describe import asked_threads

GROUP_SAMPLES = 3_000_000  # samples of the threads read at once (about 0.5 GB of windows at most)


def export_windows(
    cap: Capture,
    profiles: pd.DataFrame,
    *,
    t_range: tuple[int | None, int | None] | None = None,
    group_samples: int = GROUP_SAMPLES,
) -> Iterator[pd.DataFrame]:
    """Reconciled windows (analyses.windows) of the given threads, a group of threads at a time, with
    `blocked_ns` (off-CPU time of a window whose read found the thread in D at either end, the test
    analyses.stalls uses for io) and the state letters as text."""
    from analyses.rules import blocked_ns
    from analyses.source import STATE_D
    from analyses.windows import state_letters, thread_windows

    counts = profiles["samples"].to_numpy(dtype=np.int64)
    group = np.cumsum(counts) // max(group_samples, 1)
    for g in np.unique(group):
        tids = profiles["tid"].to_numpy()[group == g].tolist()
        w = thread_windows(cap, tids=tids, t_range=t_range)
        if w.empty:
            continue
        w = w.assign(
            blocked_ns=blocked_ns(
                w["state"].to_numpy(), w["state_start"].to_numpy(), w["off_cpu_ns"].to_numpy(), STATE_D
            ),
            state=state_letters(w["state"].to_numpy()),
            state_start=state_letters(w["state_start"].to_numpy()),
            core_type=w["core_type"].astype(str),
        )
        yield w


def flat_verdicts(episodes: pd.DataFrame) -> pd.DataFrame:
    """Stall episodes with only flat columns (for CSV/Parquet): the components dict is already spread
    over the *_ns columns; lists become '; '-joined text."""
    out = episodes.drop(columns=["components"], errors="ignore").copy()
    for column in ("sources", "undecided"):
        if column in out:
            out[column] = ["; ".join(v) if isinstance(v, list | tuple) else v for v in out[column]]
    for column in out.columns:
        if isinstance(out[column].dtype, pd.CategoricalDtype):
            out[column] = out[column].astype(str)
        elif out[column].dtype == object:
            out[column] = out[column].astype("string")
    return out


def export_threads(
    cap: Capture, pattern: str | None, t_range: tuple[int | None, int | None] | None, tids: tuple[int, ...] = ()
) -> pd.DataFrame:
    """The threads exported: every one, or those --thread REGEX or --tid N select (either)."""
    from analyses.threads import select_threads, thread_profiles

    profiles = thread_profiles(cap, t_range=t_range)
    if pattern is not None or tids:
        profiles = select_threads(profiles, pattern=pattern, tids=tids)
        if profiles.empty:
            raise ForensicsError(f"no thread matches {asked_threads(pattern, tids)}: see `forensics summarize`")
    return profiles


def export_verdicts(
    cap: Capture,
    profiles: pd.DataFrame,
    pattern: str | None,
    t_range: tuple[int | None, int | None] | None,
    tids: tuple[int, ...] = (),
) -> pd.DataFrame:
    from analyses.stalls import find_stalls

    return find_stalls(cap, pattern=pattern, tids=tids, t_range=t_range, profiles=profiles)
