"""Known causes injected into a real graph while catch-load records it, and the incidents scored against them.

The graph: a real engine the caller starts (jackd on its dummy driver at 256 frames, or a headless PipeWire
through pw-jack), the test client tests/workloads/jack_cue_client.py in it (JACK: fed by the driver,
feeding a jalv plugin; PipeWire: linked to itself). Five causes, each `per_cause` times, interleaved:

    hog    a SCHED_FIFO hog above the engine on every CPU (tests/workloads/fifo_hog.c): the engine's
           driver runnable without a CPU                                   root: the server's thread, runqueue
    spin   the client's callback burns the CPU                             root: the callback's thread, run
    lock   the callback waits for a lock a SCHED_OTHER thread holds        root: the callback's thread, lock
    read   the callback reads a file with O_DIRECT (each read on the disk) root: the callback's thread, io
    touch  the callback touches fresh anonymous pages                      root: the callback's thread, fault

The ground truth is what the test controls: the client's own CLOCK_MONOTONIC stamps of each cue it carried
out and its thread id, the hog's start and end. Scoring (score()): each injection must be exactly one
incident (overlapping it, within a margin) whose root is the expected thread with the expected verdict;
per cause, recall = right / injections and precision = right / incidents that overlap an injection and
are rooted with that cause's verdict at that cause's thread (a wrong label, or one injection split in
two, counts against it). An injection over hypervisor steal (/proc/stat steal grew over it, read by the
client or the hog around it; else between the capture's reads around it: analyses.truth.steal_around)
is the machine's: left out, counted per cause (`machine`), with the incidents over it. Incidents away
from every injection are the shared machine's own late cycles (other processes, the VM's stalls): not
ground truth the test controls; they are listed apart (`extra`).

The truth is kept beside the capture (HOG_SPANS: the hog's spans, written as each one ends; CUE_TRUTH: the
client's cues), so that a failed run's recording can be scored again offline: `recorded(capture)`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

import forensics
from analyses.incidents import find_incidents
from analyses.source import capture_interval_ns, proc_only
from analyses.stalls import find_stalls
from analyses.threads import select_threads, thread_profiles
from analyses.truth import steal_around
from tests.helpers import REPO, reap
from tests.jack_fixtures import (
    CUE_CLIENT,
    LV2_PLUGINS,
    CueClient,
    build_hog,
    env_with,
    jackd,
    run_hog,
    wait_engine_started,
)
from tests.pipewire_lab import QUANTUM, daemon_env, pipewire_daemon
from tests.recording import catch_load_argv, wait_capture_growing

CAUSES = {"hog": "runqueue", "spin": "run", "lock": "lock", "read": "io", "touch": "fault"}
HOG_PRIORITY = 95  # above jackd -R (10) and its clients (5), and PipeWire's data loops (88 as root)
MATCH_MARGIN_NS = 3_000_000  # an incident within this of an injection is that injection's
READ_FILE_BYTES = 64 << 20
HOG_SPANS = "hog.spans"  # JSON beside the capture: [[start_ns, end_ns, steal_ns or null], ...]
CUE_TRUTH = "cue.truth"  # the cue client's truth (JSON lines) beside the capture


@dataclass
class Injection:
    cause: str
    start_ns: int
    end_ns: int
    tid: int | None  # the callback's thread; None for the hog (its victim is the server's driver)
    steal_ns: int | None = None  # the machine's hypervisor steal over it (/proc/stat), where measured


@dataclass
class Recording:
    path: Path
    engine: str
    injections: list[Injection]
    server_pid: int
    client_pid: int
    log: str = ""
    extra: dict[str, object] = field(default_factory=dict)


def _inject(
    cue: CueClient, hog: Path, scratch: Path, per_cause: int, ms: int, gap_s: float, spans_path: Path
) -> list[tuple[int, int, int | None]]:
    """Every cause per_cause times, interleaved; returns the hog's spans with the steal over each (the
    cues' truth comes from the client), also written to `spans_path` as each ends (HOG_SPANS)."""
    hog_spans: list[tuple[int, int, int | None]] = []
    for _ in range(per_cause):
        for cause in CAUSES:
            if cause == "hog":
                # The hog measures the steal over its own spin: its children take 300 ms to get ready.
                hog_spans += run_hog(hog, priority=HOG_PRIORITY, spin_ms=ms, count=1, gap_ms=ms)
                spans_path.write_text(json.dumps([list(span) for span in hog_spans]))
            elif cause == "read":
                cue.cue(f"read {scratch} {ms}")
            elif cause == "lock":
                cue.cue(f"lock {ms}")
            else:
                cue.cue(f"{cause} {ms}")
            time.sleep(gap_s)
    return hog_spans


def _truth(cue_lines: list[dict[str, object]], hog_spans: list[tuple[int, int, int | None]]) -> list[Injection]:
    out = [Injection("hog", s, e, None, stolen) for s, e, stolen in hog_spans]
    for line in cue_lines:
        if line.get("cue") in CAUSES:
            steal = line.get("steal_ns")
            out.append(
                Injection(
                    str(line["cue"]),
                    int(line["start_ns"]),  # type: ignore[call-overload]
                    int(line["end_ns"]),  # type: ignore[call-overload]
                    int(line["tid"]),  # type: ignore[call-overload]
                    int(steal) if isinstance(steal, int) else None,
                )
            )
    return sorted(out, key=lambda i: i.start_ns)


def _scratch(workdir: Path) -> Path:
    path = workdir / "scratch.bin"
    with open(path, "wb") as fh:
        block = os.urandom(1 << 20)
        for _ in range(READ_FILE_BYTES >> 20):
            fh.write(block)
        os.fsync(fh.fileno())
    return path


def _stop_recorder(recorder: subprocess.Popen[str]) -> str:
    recorder.send_signal(signal.SIGINT)
    _, err = recorder.communicate(timeout=600)  # the writer finishes an eBPF capture slowly on a loaded machine
    assert recorder.returncode == 0, err
    return err


def record_jack(
    workdir: Path,
    *,
    per_cause: int = 10,
    ms: int = 20,
    gap_s: float = 0.5,
    ebpf: bool = True,
    recorder_first: bool = False,
) -> Recording:
    """jackd (dummy, 256 frames) -> cue -> jalv -> playback, recorded while the causes are injected.
    recorder_first: the README's "wait for jackd" use, `catch-load --match '^jackd$' --children` started
    before jackd and told nothing of it (its clients followed, its log found as jackd's output); else
    catch-load is given the running server, its log and its pids."""
    hog = build_hog(workdir)
    scratch = _scratch(workdir)
    out = workdir / "jack-injections.ssf"
    name = f"t{uuid.uuid4().hex[:10]}"
    with (
        _started_first(recorder_first, out, "^jackd$", env_with(name), ebpf) as first,
        jackd(workdir, period=256, name=name) as server,
    ):
        cue = server.cue_client("cue")
        server.jalv("p0", LV2_PLUGINS[0])
        server.wait_ports("p0:in", "p0:out", timeout=60)
        for src, dst in (("system:capture_1", "cue:in"), ("cue:out", "p0:in"), ("p0:out", "system:playback_1")):
            server.connect(src, dst)
        args = ["--jack", server.name, "--jack-log", str(server.log), "-p", str(server.process.pid)]
        args += ["-p", str(cue.process.pid), *(["--ebpf"] if ebpf else [])]
        recorder = first or subprocess.Popen(
            [*catch_load_argv(), "-q", "-o", str(out), *args],
            env=server.env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            if first is not None:
                wait_engine_started(out, timeout=60)
            wait_capture_growing(out, recorder, timeout_s=90.0, growths=2, poll_s=0.5)
            time.sleep(1.0)
            hog_spans = _inject(cue, hog, scratch, per_cause, ms, gap_s, workdir / HOG_SPANS)
            time.sleep(1.0)
        finally:
            err = _stop_recorder(recorder)
        lines = cue.quit()  # after the recording: deactivating the client is no injection
        (workdir / CUE_TRUTH).write_text("".join(json.dumps(line) + "\n" for line in lines))  # jackd's dir goes
        return Recording(out, "jack", _truth(lines, hog_spans), server.process.pid, cue.process.pid, err)


@contextlib.contextmanager
def _started_first(
    now: bool, out: Path, match: str, env: dict[str, str], ebpf: bool
) -> Iterator[subprocess.Popen[str] | None]:
    """`catch-load --match MATCH --children` started before the engine (when `now`), told nothing of it;
    killed when the recording fails to start (a recording that started is stopped by the caller)."""
    if not now:
        yield None
        return
    first = subprocess.Popen(
        [*catch_load_argv(), "-q", "-o", str(out), "--match", match, "--children", *(["--ebpf"] if ebpf else [])],
        env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        yield first
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()


@contextlib.contextmanager
def _pw_cue(env: dict[str, str], workdir: Path) -> Iterator[CueClient]:
    control, truth = workdir / "cue.ctl", workdir / CUE_TRUTH
    os.mkfifo(control)
    process = subprocess.Popen(
        ["pw-jack", sys.executable, str(CUE_CLIENT), "--name", "cue", "--control", str(control),
         "--truth", str(truth), "--link-self"],
        env={**env, "PIPEWIRE_QUANTUM": QUANTUM},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not (truth.exists() and truth.read_text().strip()):
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the cue client did not start under pw-jack (exit {process.poll()})")
            time.sleep(0.1)
        pid = json.loads(truth.read_text().splitlines()[0])["pid"]
        assert pid > 0
        yield CueClient("cue", process, control, truth)
    finally:
        if process.poll() is None:
            process.terminate()
        reap(process)


def record_pipewire(
    workdir: Path,
    *,
    per_cause: int = 10,
    ms: int = 20,
    gap_s: float = 0.5,
    ebpf: bool = True,
    recorder_first: bool = False,
) -> Recording:
    """A headless PipeWire (Dummy-Driver, 256/48000) with the cue client through pw-jack, recorded.
    recorder_first: `catch-load --match '^pipewire$' --children` started before the daemon, told nothing
    of it (the client followed once the PipeWire source names it); else given the daemon's and client's pids."""
    hog = build_hog(workdir)
    scratch = _scratch(workdir)
    out = workdir / "pw-injections.ssf"
    runtime = Path(tempfile.mkdtemp(prefix="pw-test-"))  # short: its socket's path has a limit (108 bytes)
    with (
        _started_first(recorder_first, out, "^pipewire$", daemon_env(runtime), ebpf) as first,
        pipewire_daemon(runtime) as daemon,
        _pw_cue(daemon.env, workdir) as cue,
    ):
        # pw-jack execs python: the cue's pid is the Popen's.
        args = ["-p", str(daemon.pid), "-p", str(cue.process.pid), *(["--ebpf"] if ebpf else [])]
        recorder = first or subprocess.Popen(
            [*catch_load_argv(), "-q", "-o", str(out), *args],
            env=daemon.env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            daemon.wait_for_client("catch-load", timeout_s=90)
            wait_capture_growing(out, recorder, timeout_s=90.0, growths=2, poll_s=0.5)
            time.sleep(1.0)
            hog_spans = _inject(cue, hog, scratch, per_cause, ms, gap_s, workdir / HOG_SPANS)
            time.sleep(2.5)  # the profiler module sends its records once a second
        finally:
            err = _stop_recorder(recorder)
        lines = cue.quit()  # after the recording: deactivating the client is no injection
        return Recording(out, "pipewire", _truth(lines, hog_spans), daemon.pid, cue.process.pid, err)


def recorded(capture: Path) -> Recording:
    """The Recording of a capture made by record_jack or record_pipewire, from the files beside it
    (HOG_SPANS, CUE_TRUTH) and the engine source's metadata (the server's pid): to score a failed run
    again offline."""
    cap = forensics.load(capture)
    lines = [json.loads(line) for line in (capture.parent / CUE_TRUTH).read_text().splitlines() if line.strip()]
    stored = json.loads((capture.parent / HOG_SPANS).read_text())
    spans = [(int(s), int(e), None if st is None else int(st)) for s, e, st in stored]
    engine = "pipewire" if "pipewire" in cap.engine_sources else "jack"
    meta = cap.engine_sources[engine]
    server = int(meta["daemon_pid" if engine == "pipewire" else "jackd_pid"])
    client = next(int(line["pid"]) for line in lines if "pid" in line)
    return Recording(capture, engine, _truth(lines, spans), server, client)


# --------------------------------------------------------------------------------------------------
# Scoring


def incidents_of(cap: forensics.Capture, *, ebpf: bool) -> pd.DataFrame:
    """The incidents `forensics stalls` lists, with eBPF or from /proc alone (the same capture without
    its exact tables, analyses.source.proc_only)."""
    if not ebpf:
        cap = proc_only(cap)
    profiles = thread_profiles(cap)
    episodes = find_stalls(cap, profiles=profiles)
    incidents, _ = find_incidents(cap, episodes, select_threads(profiles), interval_ns=capture_interval_ns(cap))
    return incidents


@dataclass
class Score:
    rows: pd.DataFrame  # one row per injection: cause, found (incidents overlapping), root, verdict, right
    confusion: pd.DataFrame  # injected cause x predicted cause (+ "none" incidents, "missed" injections)
    recall: dict[str, float]
    precision: dict[str, float]
    extra: pd.DataFrame  # incidents overlapping no injection
    # injections over hypervisor steal (analyses.truth.steal_around): the machine's, left out of recall and
    # precision, per cause
    machine: dict[str, int] = field(default_factory=dict)


def _predicted(row: pd.Series, server_tids: set[int], client_tids: set[int]) -> str:
    """The cause an incident names: its root's verdict at the thread that cause roots at."""
    verdict, tid = row["root_verdict"], row["root_tid"]
    tid = None if tid is None or pd.isna(tid) else int(tid)
    for cause, wanted in CAUSES.items():
        where = server_tids if cause == "hog" else client_tids
        if verdict == wanted and tid in where:
            return cause
    return f"other: {verdict}"


def score(cap: forensics.Capture, rec: Recording, incidents: pd.DataFrame) -> Score:
    threads = cap.threads
    server_tids = set(threads.loc[threads["pid"] == rec.server_pid, "tid"].astype(int))
    client_tids = {i.tid for i in rec.injections if i.tid is not None}
    predicted = [_predicted(r, server_tids, client_tids) for _, r in incidents.iterrows()]
    incidents = incidents.assign(predicted=predicted)
    starts = incidents["start_ns"].to_numpy(np.int64) if len(incidents) else np.zeros(0, np.int64)
    ends = incidents["end_ns"].to_numpy(np.int64) if len(incidents) else np.zeros(0, np.int64)
    used: set[int] = set()
    rows = []
    spans = pd.DataFrame(
        {"start_ns": [i.start_ns for i in rec.injections], "end_ns": [i.end_ns for i in rec.injections]},
        dtype=np.int64,
    )
    # The host took a vCPU during it (measured around the injection itself; else from the capture's
    # /proc/stat reads around it): not what the test controls.
    around = steal_around(cap.system, spans)
    stolen = [
        bool(i.steal_ns) if i.steal_ns is not None else bool(a) for i, a in zip(rec.injections, around, strict=True)
    ]
    machine_hits: set[int] = set()  # incidents over a machine-disturbed injection: counted neither way
    for inj, machine in zip(rec.injections, stolen, strict=True):
        hit = np.flatnonzero((starts <= inj.end_ns + MATCH_MARGIN_NS) & (ends >= inj.start_ns - MATCH_MARGIN_NS))
        if machine:
            machine_hits.update(int(k) for k in hit)
            rows.append((inj.cause, inj.start_ns, len(hit), "", None, "machine", False))
            continue
        used.update(int(k) for k in hit)
        if len(hit) == 1:
            r = incidents.iloc[int(hit[0])]
            expected = server_tids if inj.cause == "hog" else {inj.tid}
            right = r["predicted"] == inj.cause and int(r["root_tid"]) in expected
            rows.append((inj.cause, inj.start_ns, 1, r["root_comm"], r["root_verdict"], r["predicted"], bool(right)))
        else:
            names = "; ".join(
                f"{incidents.iloc[int(k)]['root_comm']} {incidents.iloc[int(k)]['root_verdict']}" for k in hit
            )
            rows.append((inj.cause, inj.start_ns, len(hit), names, None, "missed" if not len(hit) else "split", False))
    table = pd.DataFrame(rows, columns=["cause", "start_ns", "incidents", "root", "verdict", "predicted", "right"])
    used -= machine_hits
    extra = incidents.iloc[[k for k in range(len(incidents)) if k not in used and k not in machine_hits]]
    disturbed = table[table["predicted"] == "machine"]
    table = table[table["predicted"] != "machine"].reset_index(drop=True)
    confusion = pd.crosstab(
        pd.Series([*table["cause"], *["none"] * len(extra)], name="injected"),
        pd.Series([*table["predicted"], *extra["predicted"]], name="found"),
    )
    recall, precision = {}, {}
    for cause in CAUSES:
        mine = table[table["cause"] == cause]
        right = int(mine["right"].sum())
        recall[cause] = right / len(mine) if len(mine) else float("nan")
        named = int((incidents.iloc[sorted(used)]["predicted"] == cause).sum())
        precision[cause] = right / named if named else float("nan")
    machine_counts = disturbed["cause"].value_counts().to_dict()
    return Score(table, confusion, recall, precision, extra, {c: int(machine_counts.get(c, 0)) for c in CAUSES})
