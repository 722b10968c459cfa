"""Run exact_workload.py under the eBPF collector (and taskstats), for the end-to-end tests and the bench."""

from __future__ import annotations

import json
import selectors
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from samplers.ebpf import EbpfCollector, EbpfOptions, merge_tables
from samplers.sysctl_guard import read_sysctl
from samplers.taskstats import TaskstatsClient, taskstats_table

WORKLOAD = Path(__file__).with_name("exact_workload.py")
REPO = WORKLOAD.parent.parent.parent


@dataclass
class Observation:
    pid: int
    spinner_pids: list[int]
    tids: dict[str, int]
    truth: dict[str, list[dict[str, int]]]
    tables: dict[str, pd.DataFrame]
    stats: dict[str, Any]
    meta: dict[str, Any]
    taskstats_before: dict[int, dict[str, int]] = field(default_factory=dict)
    taskstats_after: dict[int, dict[str, int]] = field(default_factory=dict)
    taskstats: pd.DataFrame = field(default_factory=pd.DataFrame)  # the "taskstats" table, one row per poll
    wall_s: float = 0.0

    def table(self, name: str) -> pd.DataFrame:
        return self.tables.get(name, pd.DataFrame())


def observe_workload(
    fsync_dir: str | Path,
    options: EbpfOptions | None = None,
    rounds: int = 5,
    poll_ms: int = 20,
    taskstats: bool = True,
    delayacct: bool | None = None,
) -> Observation:
    """Run the workload, collect its eBPF events, and (taskstats=True, root) query every thread at each poll.

    `delayacct`: whether kernel.task_delayacct is on during the run (for the taskstats table's nulls).
    """
    proc = subprocess.Popen(
        [sys.executable, str(WORKLOAD), "--fsync-dir", str(fsync_dir), "--rounds", str(rounds)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stdin is not None and proc.stdout is not None
    collector = EbpfCollector([], options)
    client = TaskstatsClient() if taskstats else None
    try:
        info = json.loads(proc.stdout.readline())
        collector.start()
        collector.add_tgids([info["pid"]])
        collector.add_tgids(info["spinner_pids"])  # processes added one by one, as a recorder finds them
        tids = {name: int(tid) for name, tid in info["tids"].items()}
        before = {tid: client.query(tid) or {} for tid in tids.values()} if client else {}
        rows: list[tuple[int, int, int, bytes | None]] = []
        if client is not None:  # the state before "go" is the baseline of every increment
            rows += [(0, time.monotonic_ns(), tid, client.query_raw(tid)) for tid in tids.values()]
        t0 = time.monotonic()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        batches = []
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        tick = 0
        while not sel.select(timeout=0):
            batches.append(collector.poll(poll_ms))
            if client is not None:
                tick += 1
                for tid in tids.values():
                    rows.append((tick, time.monotonic_ns(), tid, client.query_raw(tid)))
        truth = json.loads(proc.stdout.readline())
        wall = time.monotonic() - t0
        after = {tid: client.query(tid) or {} for tid in tids.values()} if client else {}
        if client is not None:  # the final state too, so that the per-poll increments add up to the whole run
            tick += 1
            rows += [(tick, time.monotonic_ns(), tid, client.query_raw(tid)) for tid in tids.values()]
        batches.append(collector.poll(0))
        proc.stdin.write("finish\n")
        proc.stdin.flush()
        proc.wait(timeout=60)
        batches.append(collector.stop())
        stats = collector.stats()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        collector.stop()
        if client is not None:
            client.close()
    tables = {name: table.to_pandas() for name, table in merge_tables(batches).items()}
    stats_table = taskstats_table(rows, delayacct).to_pandas() if rows else pd.DataFrame()
    meta = dict(collector.meta(), delayacct=delayacct, delayacct_sysctl_after=read_sysctl("kernel.task_delayacct"))
    return Observation(
        info["pid"], info["spinner_pids"], tids, truth, tables, stats, meta, before, after, stats_table, wall
    )
