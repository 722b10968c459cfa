"""Real captures of a starved JACK graph: made by the toolkit (catch-load) on a real graph
(tests/jack_fixtures.py series_graph), used live by tests/test_incidents_real.py and stored small as fixtures in
captures/ (tests/test_real_captures.py).

    python -m tests.real_captures captures/

records captures/jack-starved-ebpf.ssf (catch-load --ebpf --jack), captures/jack-starved-proc.ssf (the same
graph and starvations, catch-load --jack from /proc alone) and captures/jack-client-spins.ssf (a client
spinning in its callback, with jackd's log followed: the client the engine blamed). Each capture says in its
metadata how it was made (meta["made_by"]: this command, the graph, the hog or the spins, and the
CLOCK_MONOTONIC span of every injection), so a test on the stored file can score the incidents against what was
injected without the live graph.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import forensics
from analyses.incidents import chain_links, find_incidents
from analyses.source import capture_interval_ns, iter_samples, proc_only
from analyses.stalls import find_stalls
from analyses.threads import select_threads, thread_profiles
from analyses.truth import steal_around
from capture.format import ENGINE_SCHEMAS, Capture, CaptureWriter
from tests.helpers import REPO, child_env
from tests.jack_fixtures import (
    BALANCE_PLUGIN,
    CueClient,
    build_hog,
    catch_load,
    env_with,
    jackd,
    run_hog,
    series_graph,
    stop_recording,
    wait_engine_started,
    wait_recording,
)
from tests.recording import catch_load_argv, wait_capture_growing

HOG_PRIORITY = 80  # above jackd -R's default 10 and its clients' 5


@dataclass
class Starved:
    path: Path
    spans: list[tuple[int, int, int | None]]  # (start_ns, end_ns, steal_ns) of each starvation
    pids: dict[str, int]
    made_by: dict[str, Any]


def record_starved(
    workdir: Path,
    out: Path,
    *,
    ebpf: bool,
    jack: bool,
    starvations: int,
    spin_ms: int = 12,
    gap_ms: int = 2000,
    clients: int = 4,
    quiet_before_s: float = 0.5,
    quiet_after_s: float = 0.5,
    extra: tuple[str, ...] = (),
) -> Starved:
    """The graph (jackd dummy 128 frames, fluidsynth, `clients` jalv in series) recorded by catch-load while
    fifo_hog starves every CPU `starvations` times for spin_ms, gap_ms apart. The quiet seconds before and
    after let the analysis see the graph's own rhythm around them (not a wait for anything)."""
    hog = build_hog(workdir)
    with series_graph(workdir, clients=clients) as graph:
        args = [*catch_load_argv(), "-q", "-o", str(out)]
        for pid in graph.pids.values():
            args += ["-p", str(pid)]
        args += ["--ebpf"] if ebpf else []
        args += ["--jack", graph.server.name] if jack else ["--no-jack"]
        args += extra
        recorder = subprocess.Popen(
            args, cwd=REPO, env=child_env(base=graph.env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        try:
            wait_capture_growing(out, recorder, timeout_s=120.0)
            time.sleep(quiet_before_s)
            spans = run_hog(hog, priority=HOG_PRIORITY, spin_ms=spin_ms, count=starvations, gap_ms=gap_ms)
            time.sleep(quiet_after_s)
        finally:
            recorder.send_signal(signal.SIGINT)
            # Bounded by the recorder ending with its trailer: an eBPF capture drains slowly under load.
            _, err = recorder.communicate(timeout=600)
        assert recorder.returncode == 0, err
        pids = graph.pids
    made_by = {
        "how": (
            f"a real JACK graph (jackd -R dummy 48000 Hz 128 frames, fluidsynth, {clients} jalv "
            f"{BALANCE_PLUGIN} in series; tests/jack_fixtures.py series_graph) recorded by catch-load "
            f"{'--ebpf ' if ebpf else ''}{'--jack' if jack else '--no-jack'} {' '.join(extra)} "
            "while tests/workloads/fifo_hog.c "
            f"(SCHED_FIFO {HOG_PRIORITY} on every CPU) starved it {starvations} times for {spin_ms} ms, "
            f"{gap_ms} ms apart"
        ),
        "script": "tests/real_captures.py",
        "pids": pids,
        "hog": {"priority": HOG_PRIORITY, "spin_ms": spin_ms, "gap_ms": gap_ms, "count": starvations},
        # CLOCK_MONOTONIC, the capture's clock; steal_ns: the hypervisor's steal over it (None: unread).
        "starvations": [{"start_ns": s, "end_ns": e, "steal_ns": st} for s, e, st in spans],
    }
    return Starved(out, spans, pids, made_by)


def _spins(cue: CueClient, spins: int, spin_ms: int, gap_s: float) -> list[dict[str, Any]]:
    """The cue client's callback spun `spins` times, gap_s apart (and before the first: the graph's own
    rhythm; after each: a spin's reports come up to 200 ms after it, the log is followed at 20 Hz); the
    client's own record of each spin, once it quit."""
    time.sleep(gap_s)
    for done in range(1, spins + 1):
        cue.cue(f"spin {spin_ms}")
        cue.wait_done(done)
        time.sleep(gap_s)
    return [t for t in cue.quit() if t["cue"] == "spin"]


def record_client_spins(workdir: Path, out: Path, *, spins: int = 3, spin_ms: int = 20, gap_s: float = 0.4) -> Starved:
    """jackd (dummy, 128 frames) launched apart, the cue client between system:capture_1 and
    system:playback_1, recorded by catch-load --ebpf --jack following jackd's log, while the cue client spins
    `spins` times for spin_ms in its process callback: late cycles the engine reports twice, as xrun
    callbacks and as jackd's "client = cue was not finished" log lines (the client the engine blamed)."""
    with jackd(workdir, period=128) as server:
        cue = server.cue_client("cue")
        server.connect("system:capture_1", "cue:in")
        server.connect("cue:out", "system:playback_1")
        rec = catch_load(
            server, out, "--ebpf", "--jack", server.name, "--jack-log", str(server.log), "--taskstats", "none",
            "-p", str(server.process.pid),
        )  # fmt: skip
        wait_recording(out, rec)
        truth = _spins(cue, spins, spin_ms, gap_s)
        pids = {"jackd": server.process.pid, "cue": cue.process.pid}
        stop_recording(rec)
    made_by = {
        "how": (
            "jackd -R dummy 48000 Hz 128 frames (tests/jack_fixtures.py jackd) with the cue client "
            "(tests/workloads, between system:capture_1 and system:playback_1), recorded by catch-load --ebpf "
            f"--jack NAME --jack-log LOG --taskstats none -p JACKD while the cue client spun {spins} times for "
            f"{spin_ms} ms in its process callback, {gap_s} s apart"
        ),
        "script": "tests/real_captures.py",
        "pids": pids,
        # CLOCK_MONOTONIC, the capture's clock: the cue client's own record of each spin.
        "spins": [{"start_ns": int(t["start_ns"]), "end_ns": int(t["end_ns"])} for t in truth],  # type: ignore[call-overload]
    }
    return Starved(out, [(int(t["start_ns"]), int(t["end_ns"]), None) for t in truth], pids, made_by)  # type: ignore[call-overload]


def record_recorder_first(
    workdir: Path, out: Path, *, spins: int = 3, spin_ms: int = 20, gap_s: float = 0.5
) -> Starved:
    """The README's "wait for jackd" use as a new user runs it: `catch-load --match '^jackd$' --children`
    first, then `jackd ... > jackd.log 2>&1` (tests/jack_fixtures.py jackd) and the cue client, which spins
    `spins` times for spin_ms in its process callback. Nothing names the server or its log to catch-load."""
    name = f"t{uuid.uuid4().hex[:10]}"
    args = [*catch_load_argv(), "-q", "-o", str(out), "-d", "120s", "--match", "^jackd$", "--children"]
    rec = subprocess.Popen(
        args, env=env_with(name), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and out.stat().st_size > 0) and rec.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)  # the capture's first bytes: sources chosen, no target yet
        with jackd(workdir, period=128, name=name) as server:
            wait_engine_started(out)
            cue = server.cue_client("cue")
            server.connect("system:capture_1", "cue:in")
            server.connect("cue:out", "system:playback_1")
            truth = _spins(cue, spins, spin_ms, gap_s)
            pids = {"jackd": server.process.pid, "cue": cue.process.pid}
            stop_recording(rec)
    finally:
        if rec.poll() is None:
            rec.kill()
            rec.wait()
    made_by = {
        "how": (
            "catch-load --match '^jackd$' --children started first, then jackd -R dummy 48000 Hz 128 frames "
            "with its output to a file (tests/jack_fixtures.py jackd) and the cue client (tests/workloads, between "
            f"system:capture_1 and system:playback_1), which spun {spins} times for {spin_ms} ms in its process "
            f"callback, {gap_s} s apart"
        ),
        "script": "tests/real_captures.py",
        "pids": pids,
        "spins": [{"start_ns": int(t["start_ns"]), "end_ns": int(t["end_ns"])} for t in truth],  # type: ignore[call-overload]
    }
    return Starved(out, [(int(t["start_ns"]), int(t["end_ns"]), None) for t in truth], pids, made_by)  # type: ignore[call-overload]


def stamp(src: Path, dst: Path, made_by: dict[str, Any]) -> Path:
    """A copy of a capture with meta["made_by"] added (every table, chunk for chunk, and its trailer)."""
    cap = forensics.load(src)
    with CaptureWriter(dst, dict(cap.meta, made_by=made_by)) as writer:
        for name in cap.table_names:
            for chunk in cap.iter_chunks(name):
                writer.append(name, chunk)
        writer.close(dict(cap.trailer or {}))
    return dst


# --------------------------------------------------------------------------------------------------
# Analysing them: views of one recording, and which starvations it could show


VIEWS = ("jack+ebpf", "jack+proc", "ebpf", "proc")  # what each view keeps: the engine's records, eBPF


def view(cap: Capture, name: str) -> Capture:
    """The capture as a recording with fewer sources would be: `proc` without eBPF (analyses.source
    .proc_only), and without `jack+` without the engine's own tables (the chain then comes from eBPF
    wake-ups or /proc periods alone)."""
    out = cap if "ebpf" in name else proc_only(cap)
    return out if name.startswith("jack+") else out.without(ENGINE_SCHEMAS)


def incidents_of(cap: Capture) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(incidents, members, episodes, watched profiles) as `forensics stalls` decides them."""
    profiles = thread_profiles(cap)
    episodes = find_stalls(cap, profiles=profiles)
    watched = select_threads(profiles)
    incidents, members = find_incidents(cap, episodes, watched, interval_ns=capture_interval_ns(cap))
    return incidents, members, episodes, profiles


def starvations_of(cap: Capture) -> list[tuple[int, int, int | None]]:
    """The starvations a stored capture says it was made with (meta["made_by"])."""
    return [(s["start_ns"], s["end_ns"], s["steal_ns"]) for s in cap.meta["made_by"]["starvations"]]


def unobservable(cap: Capture, spans: list[tuple[int, int, int | None]], spin_ms: int) -> list[str | None]:
    """Per starvation, why the capture cannot show it (None: it can). The machine's, not the graph's:
    the hypervisor stole time over it (the hog's own /proc/stat reads, or the capture's), or the
    sampler itself was kept off every CPU well past the hog's spin (no tick within 10 intervals of
    either end: a hole in the recording, nothing to analyse)."""
    ticks = np.sort(pd.concat([b.groupby("tick")["t_ns"].min() for b in iter_samples(cap, ["tid"])]).to_numpy(np.int64))
    interval = capture_interval_ns(cap)
    frame = pd.DataFrame({"start_ns": [s for s, _, _ in spans], "end_ns": [e for _, e, _ in spans]}, dtype=np.int64)
    stolen_around = steal_around(cap.system, frame)
    out: list[str | None] = []
    for (start, _end, steal_ns), around in zip(spans, stolen_around, strict=True):
        k = int(np.searchsorted(ticks, start))
        gap_ns = int(ticks[k] - ticks[k - 1]) if 0 < k < len(ticks) else None
        if steal_ns:
            out.append(f"hypervisor steal over it ({steal_ns / 1e6:.0f} ms by the hog's reads)")
        elif around:  # the hog reads in 10 ms jiffies around a 12 ms spin: the capture's reads see more
            out.append("hypervisor steal between the capture's /proc/stat reads around it")
        elif gap_ns is None:
            out.append("outside the recorded ticks")
        elif gap_ns > spin_ms * 1_000_000 + 10 * interval:
            out.append(f"the sampler read nothing for {gap_ns / 1e6:.1f} ms around a {spin_ms} ms starvation")
        else:
            out.append(None)
    return out


@dataclass
class StarvedScore:
    scored: int  # starvations the capture could show
    right: list[int]  # their start_ns where exactly one incident rooted at jackd (runqueue / late wake-up)
    wrong: list[str]  # the others, each with what was found
    unobservable: list[str]  # starvations left out, each with why
    extra: pd.DataFrame  # incidents over no starvation
    incidents: pd.DataFrame
    members: pd.DataFrame
    jackd_tids: set[int]
    profiles: pd.DataFrame  # every thread's profile (analyses.threads.thread_profiles)
    links: set[int]  # the graph's link threads (analyses.incidents.chain_links) and jackd's
    chain: set[int]  # the link threads alone

    def report(self, label: str) -> str:
        return (
            f"{label}: {self.scored} starvations scored, {len(self.right)} one incident rooted at jackd; "
            f"wrong {self.wrong}; unobservable {self.unobservable}; {len(self.incidents)} incidents, "
            f"{len(self.extra)} over no starvation, roots "
            f"{self.extra[['root_comm', 'root_verdict']].value_counts().to_dict()}"
        )


MATCH_MARGIN_NS = 3_000_000  # an incident within this of a starvation is that starvation's


def score_starved(cap: Capture, spans: list[tuple[int, int, int | None]], jackd_pid: int, spin_ms: int) -> StarvedScore:
    """Each observable starvation must be exactly one incident rooted at jackd's thread (runqueue, or a
    late wake-up); the rest are reported with why they are not scored."""
    incidents, members, _, profiles = incidents_of(cap)
    threads = cap.threads
    jackd_tids = set(threads.loc[threads["pid"] == jackd_pid, "tid"].astype(int))
    why_not = unobservable(cap, spans, spin_ms)
    right, wrong, hit_rows = [], [], set()
    for (start, end, _), why in zip(spans, why_not, strict=True):
        hit = incidents[
            (incidents["start_ns"] <= end + MATCH_MARGIN_NS) & (incidents["end_ns"] >= start - MATCH_MARGIN_NS)
        ]
        hit_rows.update(hit["incident"].tolist())
        if why is not None:
            continue
        root_ok = len(hit) == 1 and int(hit["root_tid"].iloc[0]) in jackd_tids
        if root_ok and hit["root_verdict"].iloc[0] in ("runqueue", "late wake-up"):
            right.append(start)
        else:
            found = [f"{r.root_comm} ({r.root_tid}) {r.root_verdict}: {r.evidence}" for r in hit.itertuples()]
            wrong.append(f"starvation at {start}: {len(hit)} incidents {found}")
    unseen = [f"starvation at {s}: {why}" for (s, _, _), why in zip(spans, why_not, strict=True) if why is not None]
    extra = incidents[~incidents["incident"].isin(hit_rows)]
    chain = set(chain_links(cap, select_threads(profiles))["tid"].astype(int))
    return StarvedScore(
        len(spans) - len(unseen), right, wrong, unseen, extra, incidents, members, jackd_tids, profiles,
        chain | jackd_tids, chain,
    )  # fmt: skip


def cut(src: Path, dst: Path, from_ns: int, to_ns: int, made_by: dict[str, Any]) -> Path:
    """A copy of [from_ns, to_ns] of a capture (rows of every timed table inside it; the thread and
    process tables whole), with meta["made_by"]: a real moment of a long recording, small enough to keep."""
    cap = forensics.load(src)
    with CaptureWriter(dst, dict(cap.meta, made_by=made_by)) as writer:
        for name in cap.table_names:
            for chunk in cap.iter_chunks(name):
                if "t_ns" in chunk and name not in ("threads", "tiers", "processes", "engine_clients", "engine_graph"):
                    chunk = chunk[((chunk["t_ns"] >= from_ns) & (chunk["t_ns"] <= to_ns)).to_numpy(dtype=bool)]
                if len(chunk):
                    writer.append(name, chunk)
        writer.close(dict(cap.trailer or {}, ended_ns=min(to_ns, int((cap.trailer or {}).get("ended_ns") or to_ns))))
    return dst


CLIENT_SPINS = "jack-client-spins.ssf"  # record_client_spins: jackd's log names the late client
RECORDER_FIRST = "jack-recorder-first.ssf"  # record_recorder_first: the "wait for jackd" use, its log found
FIXTURES = {
    # name: (eBPF?) -- both with the JACK source, for `forensics xruns`
    "jack-starved-ebpf.ssf": True,
    "jack-starved-proc.ssf": False,
}


def main(argv: list[str]) -> int:
    target = Path(argv[0]) if argv else REPO / "captures"
    work = Path(tempfile.mkdtemp(prefix="incidents-graph-"))
    for name, ebpf in FIXTURES.items():
        workdir = work / Path(name).stem  # the graph's fifos and logs, one directory per recording
        workdir.mkdir()
        # Small on purpose (a few hundred KB): two clients, two starvations; taskstats are no source of
        # the incident analysis, and the largest table of a short capture.
        rec = record_starved(
            workdir, workdir / name, ebpf=ebpf, jack=True, starvations=2, gap_ms=600, clients=2,
            quiet_before_s=0.3, quiet_after_s=0.3, extra=("--taskstats", "none"),
        )  # fmt: skip
        rec.made_by["command"] = f"python -m tests.real_captures {target}"
        stamp(rec.path, target / name, rec.made_by)
        print(f"{target / name}: {(target / name).stat().st_size} bytes, starvations {rec.spans}")
    for name, record in ((CLIENT_SPINS, record_client_spins), (RECORDER_FIRST, record_recorder_first)):
        workdir = work / Path(name).stem
        workdir.mkdir()
        rec = record(workdir, workdir / name)
        rec.made_by["command"] = f"python -m tests.real_captures {target}"
        stamp(rec.path, target / name, rec.made_by)
        print(f"{target / name}: {(target / name).stat().st_size} bytes, spins {rec.spans}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
