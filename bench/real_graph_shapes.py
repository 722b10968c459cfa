"""Roots of starvations on a JACK graph of a shape no test was built for (issue 22's graph), both start orders.

The graph: `jackd -R -d dummy -p 128`; fluidsynth holding a note feeds four jalv clients in series (calf
Equalizer8Band, calf Compressor, calf Reverb, lsp compressor_stereo: the calf ones have MIDI/atom ports left
unconnected); in parallel ecasound (`-r`: its engine thread SCHED_FIFO 50 beside its FIFO process thread)
runs the same four LV2 plugins from fluidsynth to the playback ports. A SCHED_FIFO hog above jackd starves
every CPU 12 ms, `--starvations` times, one second apart (tests/workloads/fifo_hog.c).

Recorded four ways: the graph up first and catch-load given its processes (`-p` each, `--jack NAME`), or
catch-load started first as a new user does (`--match '^jackd$' --children`, told nothing else), each from
eBPF (`--ebpf`) and from /proc alone (the same capture without its exact tables). For each starvation: the
incidents overlapping it (3 ms either side) and their root; right when there is exactly one and its root is
`runqueue` at a thread of the graph's processes (the driver, or the first starved link: a client the hog
preempted mid-cycle); findings away from every starvation are listed.

`--engine jack-midi`: another JACK shape: jack_midiseq's MIDI into jack_midisine, whose audio feeds two
parallel chains of two jalv each (lsp comp_delay_mono -> para_equalizer_x16_mono, lsp compressor_mono ->
limiter_mono), jack_metro beside them unconnected, at 512 frames (10.667 ms), the hog spinning 30 ms
(MIDI_SPIN_MS). `--no-realtime` runs jackd and so its clients SCHED_OTHER (a user without rtprio), where
the server's cycle thread has no period /proc can find and is told from its request thread by its
switch-ins (rules.ENGINE_RATE_MIN_WOKEN_BLOCKS).

`--engine pipewire`: the real-graphs issue's PipeWire graph instead (headless PipeWire, Dummy-Driver
256/48000, calf Reverb into lsp compressor_stereo as two jalv through pw-jack, the data loop and the
clients at FIFO 88 as root; a FIFO 90 hog), recorder first with `--match '^pipewire$' --children`.

    sudo python bench/real_graph_shapes.py [--starvations 8] [--order both|graph|recorder] [--keep DIR]
    sudo python bench/real_graph_shapes.py --fixture captures/jack-shapes-recorder-first.ssf
    sudo python bench/real_graph_shapes.py --engine jack-midi --no-realtime [--order recorder]
    sudo python bench/real_graph_shapes.py --engine jack-midi --no-realtime \
        --fixture captures/jack-midi-norealtime-recorder-first.ssf

--fixture records the recorder-first case from eBPF with 3 starvations 600 ms apart (`--taskstats none`:
no source of the incidents, the largest table) and writes its stretch from 1 s before the first to 0.5 s
after the last, with meta["made_by"] (the graph, the hog, each starvation's span, the pids): the stored
fixture of tests/test_real_captures.py. With `--engine jack-midi` it records from /proc alone, after
MIDI_FIXTURE_SETTLE_S of quiet, and keeps the recording from its start (the server's start and the clients
registering are that fixture's point).

Needs root (eBPF, SCHED_FIFO), jackd, jalv, fluidsynth, ecasound, calf-plugins and lsp-plugins-lv2
(tests/install-deps.sh installs them). Prints one table per recording and the totals.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import forensics  # noqa: E402
from tests.helpers import REPO, child_env  # noqa: E402
from tests.injections import incidents_of  # noqa: E402
from tests.jack_fixtures import LV2_PLUGINS, build_hog, env_with, jackd, run_hog  # noqa: E402
from tests.recording import catch_load_argv, wait_capture_growing  # noqa: E402

PLUGINS = (
    "http://calf.sourceforge.net/plugins/Equalizer8Band",
    "http://calf.sourceforge.net/plugins/Compressor",
    "http://calf.sourceforge.net/plugins/Reverb",
    "http://lsp-plug.in/plugins/lv2/compressor_stereo",
)
HOG_PRIORITY = 80  # above jackd -R (10), its clients (5) and ecasound -r (50)
SPIN_MS = 12
MARGIN_NS = 3_000_000
TOOLS = ("jackd", "jalv", "fluidsynth", "ecasound", "jack_connect", "jack_lsp", "gcc")
PLAYBACK = ("system:playback_1", "system:playback_2")
MIDI_TOOLS = ("jack_midiseq", "jack_midisine", "jack_metro")  # jackd2's example clients
MIDI_PERIOD = 512  # frames: 10.667 ms at 48 kHz
# A spin of 12 ms can fall between two of its wake-ups 10.667 ms apart and delay the next by a millisecond
# (no late cycle: one of three in the first fixture recording); 30 ms holds a wake-up at least 19 ms.
MIDI_SPIN_MS = 30
# The fixture's quiet stretch before the starvations: jackd --no-realtime's request thread is switched in
# about 4300 times while the clients register, then hardly at all; over a recording of 15 s or more its
# mean rate is that of 1-4 wake-ups a 10.667 ms cycle (93-375 a second), the case the fixture keeps
# (rules.ENGINE_RATE_MIN_WOKEN_BLOCKS); over 10 s it is above them and nothing takes it for the cycle's.
MIDI_FIXTURE_SETTLE_S = 9.0


def build_graph(server, log_dir: Path) -> dict[str, subprocess.Popen[bytes]]:  # type: ignore[no-untyped-def]
    processes = {"fluidsynth": server.fluidsynth("noteon 0 60 100\n")}
    server.wait_client("fluidsynth", timeout=60)
    for k, uri in enumerate(PLUGINS):
        processes[f"p{k}"] = server.jalv(f"p{k}", uri)
        server.wait_client(f"p{k}", timeout=60)
    server.connect_in_series(
        server.audio_ports("fluidsynth", "output"), [f"p{k}" for k in range(len(PLUGINS))], PLAYBACK
    )
    chain = [arg for uri in PLUGINS for arg in ("-elv2:" + uri,)]
    processes["ecasound"] = server.start(
        "ecasound", "-q", "-r", "-f:f32,2,48000", "-i", "jack,fluidsynth", *chain, "-o", "jack,system",
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    server.wait_client("ecasound", timeout=60)
    for name, process in processes.items():
        if process.poll() is not None:
            raise SystemExit(f"{name} exited early (code {process.returncode})")
    return processes


def build_midi_graph(server, log_dir: Path) -> dict[str, subprocess.Popen[bytes]]:  # type: ignore[no-untyped-def]
    """jack_midiseq (a note every half second) -> jack_midisine -> two parallel chains of two jalv each into
    the playback ports; jack_metro beside them, unconnected."""
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    processes = {"seq": server.start("jack_midiseq", "seq", "24000", "0", "60", "12000", **quiet)}
    server.wait_client("seq", timeout=60)
    processes["midisine"] = server.start("jack_midisine", **quiet)
    server.wait_client("midisine", timeout=60)
    processes["metro"] = server.start("jack_metro", "-b", "120", "-n", "metro", **quiet)
    server.wait_client("metro", timeout=60)
    server.connect("seq:out", "midisine:midi_in")
    for chain, plugins, playback in (("a", LV2_PLUGINS[:2], PLAYBACK[:1]), ("b", LV2_PLUGINS[2:], PLAYBACK[1:])):
        for k, uri in enumerate(plugins):
            processes[f"{chain}{k}"] = server.jalv(f"{chain}{k}", uri)
            server.wait_client(f"{chain}{k}", timeout=60)
        server.connect_in_series(["midisine:audio_out"], [f"{chain}{k}" for k in range(len(plugins))], playback)
    for name, process in processes.items():
        if process.poll() is not None:
            raise SystemExit(f"{name} exited early (code {process.returncode})")
    return processes


def record(
    order: str,
    ebpf: bool,
    starvations: int,
    workdir: Path,
    gap_ms: int = 1000,
    extra: tuple[str, ...] = (),
    period: int = 128,
    shape: str = "jack",
    realtime: bool = True,
    spin_ms: int = SPIN_MS,
    settle_s: float = 3.0,
) -> tuple[Path, list[tuple[int, int, int | None]], dict[str, int]]:
    hog = build_hog(workdir)
    out = workdir / f"{order}-{'ebpf' if ebpf else 'proc'}.ssf"
    name = f"t{uuid.uuid4().hex[:10]}"
    common = ["-q", "-o", str(out), *(["--ebpf"] if ebpf else []), *extra]
    first = _recorder_first(common, "^jackd$", env_with(name)) if order == "recorder" else None
    with jackd(workdir, period=period, name=name, realtime=realtime) as server:
        processes = (build_midi_graph if shape == "jack-midi" else build_graph)(server, workdir)
        recorder = first
        if recorder is None:
            args = [*common, "--jack", name, "-p", str(server.process.pid)]
            for process in processes.values():
                args += ["-p", str(process.pid)]
            recorder = subprocess.Popen(
                [*catch_load_argv(), *args], env=child_env(base=server.env), cwd=REPO,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
        wait_capture_growing(out, recorder, timeout_s=120.0, growths=2, poll_s=0.5)
        time.sleep(settle_s)
        spans = run_hog(hog, priority=HOG_PRIORITY, spin_ms=spin_ms, count=starvations, gap_ms=gap_ms)
        time.sleep(1.0)
        recorder.send_signal(2)
        _, err = recorder.communicate(timeout=600)
        if recorder.returncode != 0:
            raise SystemExit(f"catch-load failed: {err}")
        pids = {"jackd": server.process.pid, **{k: p.pid for k, p in processes.items()}}
    return out, spans, pids


PW_PLUGINS = PLUGINS[2:]  # calf Reverb (MIDI/atom ports unconnected) into lsp compressor_stereo
PW_HOG_PRIORITY = 90  # above PipeWire's data loops and its JACK clients' (88 as root)


def _recorder_first(common: list[str], match: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """catch-load --match MATCH --children, started before the engine and told nothing of it."""
    first = subprocess.Popen(
        [*catch_load_argv(), *common, "--match", match, "--children"],
        env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(2.0)
    return first


def record_pipewire(
    order: str, ebpf: bool, starvations: int, workdir: Path
) -> tuple[Path, list[tuple[int, int, int | None]], dict[str, int]]:
    """Headless PipeWire (Dummy-Driver, 256/48000), two jalv through pw-jack in series, starved by a FIFO 90
    hog: the issue's PipeWire graph."""
    from tests.pipewire_lab import daemon_env, pipewire_daemon

    hog = build_hog(workdir)
    out = workdir / f"pw-{order}-{'ebpf' if ebpf else 'proc'}.ssf"
    runtime = Path(tempfile.mkdtemp(prefix="pw-shapes-"))
    common = ["-q", "-o", str(out), *(["--ebpf"] if ebpf else [])]
    first = _recorder_first(common, "^pipewire$", daemon_env(runtime)) if order == "recorder" else None
    with pipewire_daemon(runtime) as daemon:
        clients = {f"p{k}": daemon.jalv(f"p{k}", uri) for k, uri in enumerate(PW_PLUGINS)}
        deadline = time.monotonic() + 60
        while not all(daemon.ports(name, "output") for name in clients) and time.monotonic() < deadline:
            time.sleep(0.3)
        daemon.connect(*zip(daemon.ports("p0", "output"), daemon.ports("p1", "input"), strict=False))
        recorder = first
        if recorder is None:
            args = [*common, "-p", str(daemon.pid)]
            for k in range(len(PW_PLUGINS)):
                args += ["-p", str(clients[f"p{k}"].pid)]
            recorder = subprocess.Popen(
                [*catch_load_argv(), *args], env=daemon.env, cwd=REPO,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
        wait_capture_growing(out, recorder, timeout_s=120.0, growths=2, poll_s=0.5)
        time.sleep(3.0)
        spans = run_hog(hog, priority=PW_HOG_PRIORITY, spin_ms=SPIN_MS, count=starvations, gap_ms=1000)
        time.sleep(2.5)  # the profiler module sends its records once a second
        recorder.send_signal(2)
        _, err = recorder.communicate(timeout=600)
        if recorder.returncode != 0:
            raise SystemExit(f"catch-load failed: {err}")
        pids = {"pipewire": daemon.pid, **{k: p.pid for k, p in clients.items()}}
    return out, spans, pids


def write_midi_fixture(target: Path, realtime: bool) -> None:
    """The MIDI graph's recorder-first recording from /proc of 3 starvations, cut and stamped."""
    from tests.real_captures import cut

    workdir = Path(tempfile.mkdtemp(prefix="shapes-fixture-"))
    path, spans, pids = record(
        "recorder", False, 3, workdir, gap_ms=600, extra=("--taskstats", "none"), period=MIDI_PERIOD,
        shape="jack-midi", realtime=realtime, spin_ms=MIDI_SPIN_MS, settle_s=MIDI_FIXTURE_SETTLE_S,
    )  # fmt: skip
    server = "-R" if realtime else "--no-realtime (every thread SCHED_OTHER)"
    made_by = {
        "how": (
            f"catch-load --taskstats none --match '^jackd$' --children started first, then jackd {server} dummy "
            f"48000 Hz {MIDI_PERIOD} frames, jack_midiseq into jack_midisine, whose audio feeds two parallel "
            "chains of two jalv each (" + ", ".join(LV2_PLUGINS) + "), jack_metro unconnected, while "
            f"tests/workloads/fifo_hog.c (SCHED_FIFO {HOG_PRIORITY} on every CPU) starved it {len(spans)} times "
            f"for {MIDI_SPIN_MS} ms, 600 ms apart"
        ),
        "script": "bench/real_graph_shapes.py",
        "command": f"python bench/real_graph_shapes.py --engine jack-midi{'' if realtime else ' --no-realtime'} "
        f"--fixture {target}",
        "pids": pids,
        "hog": {"priority": HOG_PRIORITY, "spin_ms": MIDI_SPIN_MS, "gap_ms": 600, "count": len(spans)},
        "starvations": [{"start_ns": s, "end_ns": e, "steal_ns": st} for s, e, st in spans],
    }
    # From the recording's start: the server's start while the clients register is the shape's point.
    cut(path, target, 0, spans[-1][1] + 500_000_000, made_by)
    print(f"{target}: {target.stat().st_size} bytes, starvations {spans}")
    shutil.rmtree(workdir, ignore_errors=True)


def write_fixture(target: Path) -> None:
    """The recorder-first eBPF recording of 3 starvations, cut and stamped (tests/real_captures.cut)."""
    from tests.real_captures import cut

    workdir = Path(tempfile.mkdtemp(prefix="shapes-fixture-"))
    path, spans, pids = record("recorder", True, 3, workdir, gap_ms=600, extra=("--taskstats", "none"))
    made_by = {
        "how": (
            "catch-load --ebpf --taskstats none --match '^jackd$' --children started first, then jackd -R dummy "
            "48000 Hz 128 frames, fluidsynth holding a note into four jalv in series (" + ", ".join(PLUGINS) + "; "
            "the calf ones with MIDI/atom ports unconnected) and ecasound -r running the same four from "
            "fluidsynth to the playback ports in parallel (an engine thread at FIFO 50 beside its process "
            f"thread), while tests/workloads/fifo_hog.c (SCHED_FIFO {HOG_PRIORITY} on every CPU) starved it "
            f"{len(spans)} times for {SPIN_MS} ms, 600 ms apart"
        ),
        "script": "bench/real_graph_shapes.py",
        "command": f"python bench/real_graph_shapes.py --fixture {target}",
        "pids": pids,
        "hog": {"priority": HOG_PRIORITY, "spin_ms": SPIN_MS, "gap_ms": 600, "count": len(spans)},
        # CLOCK_MONOTONIC, the capture's clock; steal_ns: the hypervisor's steal over it (None: unread).
        "starvations": [{"start_ns": s, "end_ns": e, "steal_ns": st} for s, e, st in spans],
    }
    cut(path, target, spans[0][0] - 1_000_000_000, spans[-1][1] + 500_000_000, made_by)
    print(f"{target}: {target.stat().st_size} bytes, starvations {spans}")
    shutil.rmtree(workdir, ignore_errors=True)


def judge(path: Path, spans: list[tuple[int, int]], pids: dict[str, int], ebpf: bool) -> dict[str, object]:
    cap = forensics.load(path)
    incidents = incidents_of(cap, ebpf=ebpf)
    graph_tids = set(cap.threads.loc[cap.threads["pid"].isin(list(pids.values())), "tid"].astype(int))
    starts = incidents["start_ns"].to_numpy(np.int64)
    ends = incidents["end_ns"].to_numpy(np.int64)
    used: set[int] = set()
    rows = []
    for s, e in spans:
        hit = np.flatnonzero((starts <= e + MARGIN_NS) & (ends >= s - MARGIN_NS))
        used.update(int(k) for k in hit)
        roots = [
            f"{incidents.iloc[k]['root_client'] or incidents.iloc[k]['root_comm']} {incidents.iloc[k]['root_verdict']}"
            for k in hit
        ]
        # The driver, or the first starved link: a client preempted mid-cycle by the hog (its cycle
        # was running when the hog began) is runnable from the hog's start, and the driver only after.
        one = incidents.iloc[hit[0]] if len(hit) == 1 else None
        right = one is not None and one["root_verdict"] == "runqueue" and int(one["root_tid"]) in graph_tids
        rows.append((s, len(hit), "; ".join(roots) or "-", right))
    away = incidents.iloc[[k for k in range(len(incidents)) if k not in used]]
    span_s = (cap.end_ns - cap.start_ns) / 1e9 if hasattr(cap, "end_ns") else float("nan")
    return {"rows": rows, "away": away, "span_s": span_s, "engine": sorted(cap.engine_sources)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--starvations", type=int, default=8)
    parser.add_argument("--order", choices=("both", "graph", "recorder"), default="both")
    parser.add_argument("--keep", type=Path, help="a directory to keep the captures in")
    parser.add_argument("--fixture", type=Path, help="write the stored fixture there instead (see above)")
    parser.add_argument("--engine", choices=("jack", "jack-midi", "pipewire"), default="jack")
    parser.add_argument(
        "--period", type=int, help="JACK's frames a cycle (64: 1.333 ms, under the 2 ms sampling interval; "
        f"default 128, {MIDI_PERIOD} with --engine jack-midi)"
    )  # fmt: skip
    parser.add_argument("--no-realtime", action="store_true", help="jackd --no-realtime (JACK shapes)")
    args = parser.parse_args()
    missing = [tool for tool in (*TOOLS, *MIDI_TOOLS) if shutil.which(tool) is None]
    if missing:
        raise SystemExit(f"real_graph_shapes: missing {', '.join(missing)} (tests/install-deps.sh installs them)")
    period = args.period or (MIDI_PERIOD if args.engine == "jack-midi" else 128)
    if args.fixture and args.engine == "jack-midi":
        write_midi_fixture(args.fixture, realtime=not args.no_realtime)
        return
    if args.fixture:
        write_fixture(args.fixture)
        return
    orders = ("graph", "recorder") if args.order == "both" else (args.order,)
    for order in orders:
        workdir = Path(tempfile.mkdtemp(prefix=f"shapes-{order}-"))
        if args.engine == "pipewire":
            path, hog_spans, pids = record_pipewire(order, True, args.starvations, workdir)
        else:
            path, hog_spans, pids = record(
                order, True, args.starvations, workdir, period=period, shape=args.engine,
                realtime=not args.no_realtime, spin_ms=MIDI_SPIN_MS if args.engine == "jack-midi" else SPIN_MS,
            )  # fmt: skip
        spans = [(s, e) for s, e, _ in hog_spans]
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, args.keep / path.name)
        for ebpf in (True, False):
            result = judge(path, spans, pids, ebpf)
            right = sum(r[3] for r in result["rows"])  # type: ignore[index,union-attr]
            print(
                f"\n{order} first, {'eBPF' if ebpf else '/proc'}: {right}/{len(spans)} right, "
                f"{len(result['away'])} away from the starvations, engine sources {result['engine']}"
            )  # type: ignore[arg-type]
            for s, n, roots, ok in result["rows"]:  # type: ignore[union-attr]
                print(f"  {(s - spans[0][0]) / 1e9:6.2f} s  {n} incident(s)  {'ok ' if ok else 'BAD'}  {roots}")
            away = result["away"]
            for _, r in away.iterrows():  # type: ignore[union-attr]
                print(
                    f"  away: {(r['start_ns'] - spans[0][0]) / 1e9:6.2f} s {r['root_client'] or r['root_comm']} "
                    f"{r['root_verdict']}"
                )
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
