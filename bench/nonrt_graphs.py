"""Roots of the xruns of an engine WITHOUT real-time priority beside CPU hogs, both engines, both start orders.

An engine whose user has no rtprio (or `jackd --no-realtime`, or PipeWire without module-rt) runs its cycle
in SCHED_OTHER threads: beside a CPU-bound load they wait for a CPU, their switch-ins per 200 ms wander,
and /proc finds their clients' process threads no period. This bench records such graphs and counts the
xruns `forensics xruns` gives no root, and the roots of the others:

  jack       `jackd --no-realtime -d dummy -p 128`; fluidsynth holding a note into calf Reverb (MIDI/atom
             ports unconnected) into lsp compressor_stereo (two jalv) into the playback ports
  pipewire   headless PipeWire without module-rt (its configuration copied without it, for the daemon and
             its clients: PIPEWIRE_CONFIG_DIR), Dummy-Driver at 256/48000, the same two jalv through pw-jack

Recorded the two ways a user does: the recorder first (`--match ... --children`, told nothing else) or the
graph first (`-p` each process), from the eBPF sampler or /proc. After 3 s, `stress-ng --cpu 3` (SCHED_OTHER,
nice 0) for --hog-seconds on the 2 CPUs.

    sudo python bench/nonrt_graphs.py [--engine both|jack|pipewire] [--order both|graph|recorder]
                                      [--sampler both|proc|ebpf] [--hog-seconds 4] [--keep DIR]

Needs root (the eBPF sampler), jackd, pipewire, pw-jack, jalv, fluidsynth, calf-plugins, lsp-plugins-lv2,
stress-ng (tests/install-deps.sh installs them). Prints one line per recording: xruns, those without a root,
and the roots counted by client and verdict.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests.helpers import REPO, child_env  # noqa: E402
from tests.jack_fixtures import jackd  # noqa: E402
from tests.recording import catch_load_argv, wait_capture_growing  # noqa: E402

REVERB = "http://calf.sourceforge.net/plugins/Reverb"
COMPRESSOR = "http://lsp-plug.in/plugins/lv2/compressor_stereo"
TOOLS = ("jackd", "pipewire", "pw-jack", "jalv", "fluidsynth", "jack_connect", "jack_lsp", "stress-ng")
PIPEWIRE_CONFIGS = ("pipewire.conf", "client.conf", "client-rt.conf", "jack.conf")


def without_module_rt(text: str) -> str:
    """A PipeWire configuration with its `{ name = libpipewire-module-rt ... }` block left out."""
    while (at := text.find("libpipewire-module-rt")) != -1:
        start = text.rfind("{", 0, at)
        depth, end = 0, start
        for end in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            if depth == 0:
                break
        text = text[:start] + text[end + 1 :]
    return text


def nonrt_pipewire_config(workdir: Path) -> Path:
    conf = workdir / "pipewire-conf"
    conf.mkdir()
    for name in PIPEWIRE_CONFIGS:
        source = Path("/usr/share/pipewire") / name
        if source.exists():
            (conf / name).write_text(without_module_rt(source.read_text()))
    return conf


def _recorder(common: list[str], env: dict[str, str], targets: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*catch_load_argv(), *common, *targets], env=env, cwd=REPO,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _hog_and_stop(out: Path, recorder: subprocess.Popen[str], hog_s: float) -> None:
    wait_capture_growing(out, recorder, timeout_s=120.0, growths=2, poll_s=0.5)
    time.sleep(3.0)
    subprocess.run(["stress-ng", "--cpu", "3", "--timeout", f"{hog_s:g}s", "-q"], check=True)
    time.sleep(2.5)  # PipeWire's profiler sends its records once a second
    recorder.send_signal(2)
    _, err = recorder.communicate(timeout=600)
    if recorder.returncode != 0:
        raise SystemExit(f"catch-load failed: {err}")


def record_jack(order: str, sampler: str, hog_s: float, workdir: Path) -> Path:
    out = workdir / f"jack-{order}-{sampler}.ssf"
    name = f"nrt{os.getpid()}"
    common = ["-q", "-o", str(out), *(["--sampler", "ebpf"] if sampler == "ebpf" else [])]
    env = child_env(JACK_DEFAULT_SERVER=name, JACK_NO_AUDIO_RESERVATION="1")
    first = _recorder(common, env, ["--match", f"^jackd -n {name} ", "--children"]) if order == "recorder" else None
    if first is not None:
        time.sleep(2.0)
    with jackd(workdir, period=128, name=name, realtime=False) as server:
        processes = {"fluidsynth": server.fluidsynth("noteon 0 60 100\n")}
        server.wait_client("fluidsynth", timeout=60)
        for client, uri in (("revA", REVERB), ("compA", COMPRESSOR)):
            processes[client] = server.jalv(client, uri)
            server.wait_client(client, timeout=60)
        server.connect_in_series(
            server.audio_ports("fluidsynth", "output"), ["revA", "compA"], ("system:playback_1", "system:playback_2")
        )
        recorder = first
        if recorder is None:
            pids = [str(p.pid) for p in (server.process, *processes.values())]
            recorder = _recorder(
                common, child_env(base=server.env), ["--jack", name, *[a for p in pids for a in ("-p", p)]]
            )
        _hog_and_stop(out, recorder, hog_s)
    return out


def record_pipewire(order: str, sampler: str, hog_s: float, workdir: Path) -> Path:
    from tests.pipewire_lab import daemon_env, pipewire_daemon

    out = workdir / f"pipewire-{order}-{sampler}.ssf"
    os.environ["PIPEWIRE_CONFIG_DIR"] = str(nonrt_pipewire_config(workdir))  # the daemon's and its clients'
    runtime = Path(tempfile.mkdtemp(prefix="pw-nonrt-"))
    common = ["-q", "-o", str(out), *(["--sampler", "ebpf"] if sampler == "ebpf" else [])]
    first = (
        _recorder(common, daemon_env(runtime), ["--match", "^pipewire$", "--children"]) if order == "recorder" else None
    )
    if first is not None:
        time.sleep(2.0)
    with pipewire_daemon(runtime) as daemon:
        clients = {"revB": daemon.jalv("revB", REVERB), "compB": daemon.jalv("compB", COMPRESSOR)}
        deadline = time.monotonic() + 60
        while not all(daemon.ports(name, "output") for name in clients) and time.monotonic() < deadline:
            time.sleep(0.3)
        daemon.connect(*zip(daemon.ports("revB", "output"), daemon.ports("compB", "input"), strict=False))
        policies = {
            tid.name: (tid / "stat").read_text().rsplit(")", 1)[1].split()[38]
            for tid in Path(f"/proc/{daemon.pid}/task").iterdir()
        }
        if any(policy != "0" for policy in policies.values()):
            raise SystemExit(f"PipeWire's threads are not all SCHED_OTHER: {policies}")
        recorder = first
        if recorder is None:
            pids = [str(p) for p in (daemon.pid, *(c.pid for c in clients.values()))]
            recorder = _recorder(common, daemon.env, [a for p in pids for a in ("-p", p)])
        _hog_and_stop(out, recorder, hog_s)
    os.environ.pop("PIPEWIRE_CONFIG_DIR")
    return out


def roots(path: Path) -> tuple[int, int, collections.Counter[str]]:
    """(xruns, those without a root, the roots as 'client verdict' counted) of `forensics xruns --json`."""
    printed = subprocess.run(
        [sys.executable, "-m", "forensics", "xruns", str(path), "--json"], cwd=REPO, env=child_env(),
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    rows = [r for r in json.loads(printed.stdout)["sections"]["xruns"] if r["kind"] == "xrun"]
    rooted = collections.Counter(
        f"{r['root_client']} {r['root_verdict']}" for r in rows if r["root_verdict"] not in (None, "unknown")
    )
    return len(rows), len(rows) - sum(rooted.values()), rooted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=("both", "jack", "pipewire"), default="both")
    parser.add_argument("--order", choices=("both", "graph", "recorder"), default="both")
    parser.add_argument("--sampler", choices=("both", "proc", "ebpf"), default="both")
    parser.add_argument("--hog-seconds", type=float, default=4.0)
    parser.add_argument("--keep", type=Path, help="a directory to keep the captures in")
    args = parser.parse_args()
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise SystemExit(f"missing: {', '.join(missing)} (bash tests/install-deps.sh installs them)")
    if os.geteuid() != 0:
        raise SystemExit("run as root: the eBPF sampler needs it")
    engines = ("jack", "pipewire") if args.engine == "both" else (args.engine,)
    orders = ("recorder", "graph") if args.order == "both" else (args.order,)
    samplers = ("ebpf", "proc") if args.sampler == "both" else (args.sampler,)
    workdir = Path(tempfile.mkdtemp(prefix="nonrt-"))
    record = {"jack": record_jack, "pipewire": record_pipewire}
    print(f"{'engine':9} {'order':9} {'sampler':7} {'xruns':>5} {'no root':>7}  roots (client verdict: xruns)")
    for engine in engines:
        for order in orders:
            for sampler in samplers:
                run_dir = workdir / f"{engine}-{order}-{sampler}"  # each its own fifos and logs
                run_dir.mkdir()
                path = record[engine](order, sampler, args.hog_seconds, run_dir)
                total, unrooted, rooted = roots(path)
                shown = ", ".join(f"{k}: {n}" for k, n in rooted.most_common())
                print(f"{engine:9} {order:9} {sampler:7} {total:5} {unrooted:7}  {shown}", flush=True)
                if args.keep:
                    args.keep.mkdir(parents=True, exist_ok=True)
                    shutil.copy(path, args.keep / re.sub(r"[^\w.-]", "_", path.name))
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
