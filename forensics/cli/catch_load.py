"""`catch-load`: record every thread of the targets at 2 ms into one capture file."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from capture.errors import ForensicsError
from capture.format import SUFFIX
from capture.vocabulary import file_kind, parse_duration_ns
from forensics import __version__
from forensics.cli import run_cli
from forensics.cli.flight_options import (
    flight_config,
    flight_options,
    make_flight_directories,
    start_watcher,
    status_text,
    summary_lines,
)
from forensics.cli.options import DURATION, INTERVAL
from forensics.describe import fmt_ns
from forensics.flight.run import WatcherProcess
from forensics.safe_output import check_new_output
from samplers.engine.choose import JackChoice, choose_jack
from samplers.metadata import recording_meta
from samplers.procfs import ProcPaths
from samplers.recorder import Recorder, RecorderOptions, Status
from samplers.sampler_choice import AUTO_EBPF_ABOVE_THREADS, EBPF, choose_sampler, could_not_start
from samplers.session import RecordingSession, package_env
from samplers.sysctl_guard import SysctlGuard
from samplers.targets import Discovery, TargetSpec, missing_process, read_process, thread_group
from samplers.tiers import SLOW_AUTO


def _default_output() -> str:
    """catch-DATE-TIME.ssf, or -2, -3... when taken: the name is predictable, so one planted in a shared
    directory must not stop the recording (the writer creates it exclusively in any case)."""
    stem = f"catch-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    for n in range(1, 100):
        name = f"{stem}{SUFFIX}" if n == 1 else f"{stem}-{n}{SUFFIX}"
        if not os.path.lexists(name):
            return name
    raise ForensicsError(f"{stem}{SUFFIX} and 98 more names are taken here: give the capture a name with -o")


# Below this, the sampler's own per-tick cost (sampler_cpu_ns / ticks in a capture's trailer: 60-120 us
# on the project's VMs with one to five target threads) fills the interval: ticks are missed.
SENSIBLE_INTERVAL_NS = 250_000


def _processes_of(pids: tuple[int, ...], quiet: bool) -> tuple[int, ...]:
    """-p takes processes; a thread id (which /proc also answers to) means its process, said once."""
    out = []
    for pid in pids:
        tgid = thread_group(ProcPaths(), pid)
        if tgid is not None and tgid != pid:
            if not quiet:
                _say(f"{pid} is a thread of process {tgid}: recording process {tgid} (all its threads)")
            pid = tgid
        if pid not in out:
            out.append(pid)
    return tuple(out)


def _check_log_file(path: str) -> None:
    """--jack-log is followed from its end as a file grows: a named pipe would block its reader until a writer
    came, a device (/dev/zero) would never reach an end. Anything but a regular file is refused at once."""
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        raise ForensicsError(f"cannot read --jack-log {path}: {err.strerror}") from None
    if not stat.S_ISREG(mode):
        raise ForensicsError(f"--jack-log {path} is {file_kind(mode)}: give the file jackd writes its log to")


def _prepare_output(out: Path, force: bool) -> None:
    """An existing capture is replaced only with --force, and then only the name is removed (a link
    goes, never its target); the writer then creates the file exclusively."""
    check_new_output(out, force)
    if force:
        try:
            os.unlink(out)
        except FileNotFoundError:
            pass
        except OSError as err:
            raise ForensicsError(f"cannot replace {out}: {err.strerror}") from None


EPILOG = """\b
Examples:
  catch-load --lab                          record the built-in lab (no audio hardware needed)
  catch-load --match jackd                  wait for jackd, record it, its clients and its xruns
  catch-load -d 60s -o x.ssf -- jackd -R -d dummy -p 256   start jackd, record it, its clients, its log
  catch-load -p $(pidof pipewire)           the PipeWire graph: the daemon, its clients, their cycles
  catch-load -p 1234 -p 5678 -d 30s -o load.ssf
  catch-load -- my-plugin-host --load foo.so   launch a command and record it until it exits

\b
While recording: press Enter (optionally after typing a label) or `kill -USR1 <recorder pid>` to
add a marker; Ctrl-C ends the recording cleanly. Then: `forensics info FILE`, `forensics stalls FILE`.
"""


def _tier_options(slow_interval: str, fast: str | None, interval_ns: int) -> tuple[int, re.Pattern[str] | None]:
    """--slow-interval and --fast as the recorder takes them (samplers/tiers.py); one-line errors."""
    fast_regex = None
    if fast is not None:
        try:
            fast_regex = re.compile(fast)
        except re.error as err:
            raise ForensicsError(f"--fast {fast!r} is not a valid regular expression: {err}") from None
    if slow_interval.strip().lower() == "off":
        return 0, fast_regex
    if slow_interval.strip().lower() == "auto":
        return SLOW_AUTO, fast_regex
    try:
        slow_ns = parse_duration_ns(slow_interval)
    except ValueError as err:
        raise ForensicsError(f"--slow-interval {slow_interval!r}: {err}") from None
    if slow_ns < interval_ns:
        raise ForensicsError(
            f"--slow-interval {slow_interval} is shorter than the interval ({fmt_ns(interval_ns)}): give a longer one, "
            "or off"
        )
    return slow_ns, fast_regex


@click.command(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=EPILOG,
)
@click.option("-p", "--pid", "pids", type=int, multiple=True, help="Record this process (repeatable).")
@click.option(
    "-m",
    "--match",
    "match",
    metavar="REGEX",
    help="Record processes whose name or command line matches (also those that start later).",
)
@click.option("--children", is_flag=True, help="Also record descendants of the targets, as they appear.")
@click.option(
    "-o",
    "--output",
    type=click.Path(),  # a file; with --ring a directory (checked with the other options)
    default=None,
    help=f"Capture file to write [default: catch-DATE-TIME{SUFFIX}]. An existing file needs --force. "
    "With --ring: the directory of the windows [default: flight-DATE-TIME].",
)
@click.option("--force", is_flag=True, help="Replace the capture file if it exists (the name, never a link's target).")
@click.option(
    "-i",
    "--interval",
    type=INTERVAL,
    default="2ms",
    show_default=True,
    help="Sampling interval with its unit: 2ms, 500us.",
)
@click.option(
    "-d",
    "--duration",
    type=DURATION,
    default=None,
    help="Stop after this long (default: when the targets exit, or Ctrl-C).",
)
@click.option(
    "--sched",
    "sched_mode",
    type=click.Choice(["rt", "all", "none"]),
    default="rt",
    show_default=True,
    help="Also read /proc/.../sched (switch counts, migrations, schedstats sums; ~3x the cost of "
    "schedstat) for real-time threads, all threads, or none: at the ticks the thread ran since, is R or "
    "sleeps in D (its counters cannot move otherwise).",
)
@click.option(
    "--taskstats",
    "taskstats_mode",
    type=click.Choice(["auto", "rt", "all", "none"]),
    default="auto",
    show_default=True,
    help="Query per-thread taskstats (netlink; root): CPU, block-IO, swap-in, reclaim, thrashing and compaction "
    "delays in exact ns (~5 us a query), at the ticks the thread ran since, is R or sleeps in D (its counters "
    "cannot move otherwise), for real-time threads, all threads, or none. The delays beyond CPU need "
    "--delayacct. auto: the real-time threads, but beside their sched file only with delay accounting on "
    "(without it a reply holds nothing the analyses lack: README, 'Read tiers').",
)
@click.option(
    "--delayacct",
    is_flag=True,
    help="Turn kernel.task_delayacct on for the recording (root; restored at the end, or by `forensics "
    "restore` after a crash). Only threads created after that are accounted: start the target afterwards.",
)
@click.option(
    "--schedstats",
    is_flag=True,
    help="Turn kernel.sched_schedstats on for the recording (root, kernels with CONFIG_SCHEDSTATS): wait, "
    "sleep and block sums in the sched file. Restored like --delayacct.",
)
@click.option(
    "--ebpf",
    is_flag=True,
    help="Also record exact scheduler events with eBPF (root, Debian's python3-bpfcc): every switch with the "
    "state the thread left in, who woke whom, page faults, block requests. Without root or BCC it says so "
    "and records without them.",
)
@click.option(
    "--sampler",
    type=click.Choice(["auto", "proc", "ebpf"]),
    default="auto",
    show_default=True,
    help="How each tick reads the threads: two /proc files per thread, or (ebpf: root, BCC, kernel BTF) the "
    "run time, runqueue wait, switches, state and CPU the kernel keeps in a BPF map at each switch and wake-up, "
    "one copy per tick, with each thread's stat line read every 250 ms (a sleeping thread's only after it ran or "
    "woke, at least every 1 s). With ebpf, --sched and --taskstats "
    "default to none (give them to read those files too). auto: ebpf for targets (--pid, or what --match finds "
    f"at the start) of more than {AUTO_EBPF_ABOVE_THREADS} threads when it can start (root), else proc (with "
    "--sched, --slow-interval or --fast given too); `forensics info` says which and why.",
)
@click.option(
    "--jack",
    "jack",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[SERVER]",
    help="Record the JACK server's own view beside the threads: xruns with the delay it reports, buffer size, "
    "rate, cpu_load(), clients with their pids, ports and connections, per-client cycle times (jack2), and "
    "follow every client as a target. On by default when the command is jackd, or when a target is a running "
    "server or one of its clients (that server, whatever its name). A passive client: it is never woken in the "
    "graph's cycle.",
)
@click.option("--no-jack", is_flag=True, help="Do not record JACK data even when a server is running.")
@click.option(
    "--jack-log",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="Follow this jackd log for its 'client = NAME was not finished' xrun lines (automatic when catch-load "
    "starts jackd itself, or when jackd's output goes to a file).",
)
@click.option(
    "--pipewire/--no-pipewire",
    "pipewire",
    default=None,
    help="Record PipeWire's profiler stream beside the threads: per cycle the driver's times, quantum, rate "
    "and xrun count, each node's signal/awake/finish/status, and which process owns each node (its clients "
    "become targets). Default: on when a target is a PipeWire client or the daemon. A daemon that is not up "
    "yet (--match started first) is waited for, and one restarted during the recording is attached again.",
)
@click.option(
    "--slow-interval",
    default="auto",
    show_default=True,
    metavar="DURATION|off|auto",
    help="Read tiers: threads that are not real-time, not the engine's, not matching --fast and not seen "
    "running in the last 0.25 s are read this often instead of every tick, and read every tick again within "
    "one slow interval of running or turning real-time (README, 'Read tiers'), e.g. 20ms. off: every thread "
    "every tick. auto: off while the targets have at most 100 threads, 20ms from when they have more (a big "
    "engine cannot be read whole every tick); `forensics info` says when.",
)
@click.option(
    "--fast",
    "fast",
    metavar="REGEX",
    default=None,
    help="Threads whose name matches are always read every tick (with the read tiers).",
)
@click.option("--cpu", type=int, default=None, help="Pin the sampler to this CPU.")
@click.option(
    "--rt-priority",
    type=click.IntRange(0, 99),
    default=None,
    metavar="0-99",
    help="Sampler priority: SCHED_FIFO at this priority; 0 for SCHED_OTHER. Default: FIFO 1 when permitted "
    "(root), so a real-time thread hogging a CPU cannot make the sampler miss ticks (the kernel moves it "
    "to another CPU); FIFO 1 preempts only SCHED_OTHER work, for ~50 us a tick.",
)
@click.option("--redact", is_flag=True, help="Do not store command lines (for captures attached to public bugs).")
@click.option("--mark-on-new-process", is_flag=True, help="Add a marker whenever a new target process appears.")
@click.option("-q", "--quiet", is_flag=True, help="No live status line.")
@click.option(
    "--lab",
    "lab_args",
    metavar="[LAB OPTIONS]",
    default=None,
    help="Record the built-in lab (no audio hardware needed); everything after --lab goes to the lab: "
    "`catch-load --lab --help` lists its options.",
)
@flight_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND ARGS...]")
@click.version_option(__version__, prog_name="catch-load")
def catch_load(
    pids: tuple[int, ...],
    match: str | None,
    children: bool,
    output: str | None,
    force: bool,
    interval: int,
    duration: int | None,
    sched_mode: str,
    taskstats_mode: str,
    delayacct: bool,
    schedstats: bool,
    ebpf: bool,
    sampler: str,
    jack: str | None,
    no_jack: bool,
    jack_log: str | None,
    pipewire: bool | None,
    slow_interval: str,
    fast: str | None,
    cpu: int | None,
    rt_priority: int | None,
    redact: bool,
    mark_on_new_process: bool,
    quiet: bool,
    lab_args: str | None,
    command: tuple[str, ...],
    **flight: Any,
) -> None:
    """Record every thread of the target processes at 2 ms into one capture file.

    Each tick reads every target thread's schedstat (ns on CPU, ns waiting for a CPU, switches) and stat
    (state, faults, CPU, policy, priority) from /proc, plus sched for real-time threads, and /proc/stat
    and pressure for the machine. Threads and processes that start later are picked up within 250 ms.
    Run as root on targets of more than 100 threads at the start, the eBPF sampler reads them instead (--sampler).

    Targets: --pid, --match, --children, a command after `--`, or `--lab [LAB OPTIONS]` (everything after
    --lab goes to the built-in lab workload; see `forensics lab --help`).
    """
    lab_argv = shlex.split(lab_args) if lab_args is not None else None
    if sum(bool(x) for x in (pids or match, command, lab_argv is not None)) > 1:
        raise ForensicsError("give targets (--pid/--match), a command after --, or --lab: not several")
    if not (pids or match or command or lab_argv is not None):
        raise ForensicsError("nothing to record: give --pid PID, --match REGEX, --lab, or -- COMMAND ARGS")
    regex = None
    if match:
        try:
            regex = re.compile(match)
        except re.error as err:
            raise ForensicsError(f"--match {match!r} is not a valid regular expression: {err}") from None
    slow_interval_ns, fast_regex = _tier_options(slow_interval, fast, interval)
    out = Path(output or _default_output())
    for pid in pids:  # before anything is created or launched
        if read_process(ProcPaths(), pid) is None:
            raise missing_process(pid)
    pids = _processes_of(pids, quiet)
    if interval < SENSIBLE_INTERVAL_NS:
        _say(
            f"warning: -i {fmt_ns(interval)} is below {fmt_ns(SENSIBLE_INTERVAL_NS)}: a tick costs the sampler "
            "60-120 us of CPU here (two /proc reads per thread and a wake-up), so it would keep a core busy "
            "and miss most ticks (counted in the capture); 2ms is the default"
        )
    allowed_cpus = os.sched_getaffinity(0)
    if cpu is not None and cpu not in allowed_cpus:
        allowed = ",".join(str(c) for c in sorted(allowed_cpus))
        raise ForensicsError(f"--cpu {cpu} is not a CPU this recorder may run on (CPUs {allowed})")
    flight_setup = flight_config(output, force, flight)  # --ring: -o is a directory of windows
    if flight_setup is not None:
        out = flight_setup[0]
    else:
        check_new_output(out, force)  # refused now (exists without --force); removed once all is checked
    if jack_log:
        _check_log_file(jack_log)

    truth_path: Path | None = None
    stdin_markers = sys.stdin.isatty()
    if lab_argv is not None:
        _check_lab_args(lab_argv)
        command = (sys.executable, "-m", "forensics.lab", *lab_argv)  # --truth FILE added once all is checked
    if no_jack and (jack is not None or jack_log):
        raise ForensicsError("--no-jack contradicts --jack/--jack-log: give one")
    # --match: the processes it finds now may bring their JACK server (a running `jackd -n studio` matched;
    # samplers/engine/choose.py says when); the recording finds them again as it starts.
    matching = (
        tuple(info.pid for info in Discovery(TargetSpec(match=regex), ProcPaths()).scan())
        if regex is not None and jack is None and not no_jack and not command
        else ()
    )
    jack_choice = choose_jack(
        jack,
        no_jack,
        command,
        pids,
        later=bool(match or command),
        matched=matching,
        match=regex.pattern if regex is not None else None,
    )
    spec = TargetSpec(pids=list(pids), match=regex, children=children)
    if sampler == "ebpf":
        sched_mode, taskstats_mode = _ebpf_modes(sched_mode, taskstats_mode)
        if sched_mode != "none":  # its tick stores the kernel's counters, no per-thread /proc text
            raise ForensicsError("--sched reads /proc at the /proc sampler's tick: with --sampler ebpf leave it out")
    if flight_setup is None:  # every option checked: only now may --force remove the old capture
        _prepare_output(out, force)
    else:  # ... or the flight recorder's directories be made
        make_flight_directories(out, flight_setup[1], force)
    if lab_argv is not None:  # ... and only now is the lab's truth file made (a refused command leaves none)
        truth_fd, truth_name = tempfile.mkstemp(prefix="lab-truth-", suffix=".json")
        os.close(truth_fd)
        truth_path = Path(truth_name)
        command = (*command, "--truth", str(truth_path))
    options = RecorderOptions(
        output=str(out),
        interval_ns=interval,
        duration_ns=duration,
        sched=sched_mode,
        taskstats=taskstats_mode,
        ebpf=ebpf,
        sampler=sampler,
        cpu=cpu,
        rt_priority=rt_priority,
        redact=redact,
        mark_on_new_process=mark_on_new_process,
        stdin_markers=stdin_markers,
        engine=_engine_options(jack_choice, jack_log),
        pipewire={None: "auto", True: "on", False: "off"}[pipewire],
        slow_interval_ns=slow_interval_ns,
        fast=fast_regex,
        ring={k: flight_setup[1][k] for k in ("segment_ns", "keep_ns")} if flight_setup else None,
    )
    if flight_setup is not None:
        options.output = flight_setup[1]["ring"]
    guard = _switch_on(delayacct, schedstats, quiet)
    watcher = start_watcher(flight_setup[1], package_env()) if flight_setup else None
    if watcher is not None:
        spec.exclude.add(watcher.pid)
    sized = pids  # the processes whose size --sampler auto goes by: -p's, or those --match finds now
    if sampler == "auto" and not pids and regex is not None:
        found = Discovery(TargetSpec(match=regex, exclude={os.getpid()}), ProcPaths()).scan()  # not catch-load
        sized = tuple(info.pid for info in found)
    ebpf_started = None
    try:
        ebpf_started = _auto_sampler(options, sized, quiet) if sampler == "auto" else None
        command_status = _record(
            spec,
            options,
            command,
            lab_argv,
            truth_path,
            out,
            quiet,
            regex,
            guard,
            explicit_taskstats=delayacct or taskstats_mode in ("rt", "all"),
            flight=watcher,
            ebpf_started=ebpf_started,
        )
    except BaseException:
        if ebpf_started is not None:  # started by auto, and the recording failed: detached (stop() is idempotent)
            ebpf_started[0].sampler.stop()
        raise
    finally:
        if watcher is not None and not watcher.finished:  # an error ended the recording
            with contextlib.suppress(ForensicsError):
                watcher.finish()
        if guard is not None:
            for message in guard.restore():
                _say(message)
    if command_status:
        # `catch-load -- CMD` is used in scripts: it fails as CMD failed (128 + N when killed by N).
        sys.exit(command_status if command_status > 0 else 128 - command_status)


def _auto_sampler(options: RecorderOptions, pids: tuple[int, ...], quiet: bool) -> tuple[Any, dict[str, Any]] | None:
    """--sampler auto (samplers/sampler_choice.py): the sampler set in `options` with why; the eBPF sampler
    started when chosen (its start is the only test of BCC and the kernel's BTF: /proc when it fails). Under
    it --sched and --taskstats default to none, as with --sampler ebpf. Said on a big target, where the choice
    is the recording's cost (a small one is read from /proc, as always)."""
    proc_options = [
        option
        for option, given in (
            ("--sched", _given("sched_mode") and options.sched != "none"),
            ("--slow-interval", _given("slow_interval")),
            ("--fast", _given("fast")),
        )
        if given
    ]
    choice = choose_sampler(ProcPaths(), pids, proc_options=proc_options)
    started = None
    if choice.sampler == EBPF:
        from samplers.ebpf import EbpfUnavailable
        from samplers.recorder import start_ebpf_ticker

        try:
            started = start_ebpf_ticker(options)
        except EbpfUnavailable as err:
            choice = could_not_start(choice, str(err))
    options.sampler, options.sampler_why = choice.sampler, choice.why
    if not quiet and choice.threads is not None and choice.threads > AUTO_EBPF_ABOVE_THREADS:
        _say(f"reading the threads with the {'eBPF' if started is not None else '/proc'} sampler ({choice.why})")
    if started is not None:
        options.sched, options.taskstats = _ebpf_modes(options.sched, options.taskstats)
    return started


def _ebpf_modes(sched_mode: str, taskstats_mode: str) -> tuple[str, str]:
    """--sched and --taskstats under the eBPF sampler: the per-thread /proc reads it replaces, none unless given."""
    return _unless_given("sched_mode", sched_mode, "none"), _unless_given("taskstats_mode", taskstats_mode, "none")


def _given(name: str) -> bool:
    """Whether the option was given on the command line."""
    return click.get_current_context().get_parameter_source(name) != click.core.ParameterSource.DEFAULT


def _unless_given(name: str, value: str, default: str) -> str:
    """`value` when the option was given on the command line, else `default`."""
    return value if _given(name) else default


def _say(message: str) -> None:
    """One line on stderr; a terminal that went away (SIGHUP) must not turn the end into a traceback."""
    with contextlib.suppress(OSError):
        click.echo(f"catch-load: {message}", err=True)


def _engine_options(choice: JackChoice | None, jack_log: str | None) -> dict[str, Any] | None:
    if choice is None:
        return None
    return {
        "kind": "jack",
        "server": choice.server,
        # Say in one line what could not be recorded whenever JACK data was expected (asked for, or a
        # target is jackd or a client); quiet only when it was a guess (targets not known yet).
        "explicit": choice.explicit or choice.follow,
        "follow": choice.follow,
        "wait_s": choice.wait_s,
        "log_file": jack_log,
        "user": choice.user,
        "match": choice.match,
        # When catch-load starts jackd, its output passes through the source (echoed, XRun lines kept).
        "log_fd": os.pipe() if choice.launches_server and not jack_log else None,
    }


def _switch_on(delayacct: bool, schedstats: bool, quiet: bool) -> SysctlGuard | None:
    """Apply --delayacct / --schedstats before anything starts (delay accounting is set up at fork)."""
    wanted = {}
    if delayacct:
        wanted["kernel.task_delayacct"] = "1"
    if schedstats:
        wanted["kernel.sched_schedstats"] = "1"
    if not wanted:
        return None
    guard = SysctlGuard(wanted)
    for outcome in guard.apply():
        if not quiet or not outcome.in_force:
            click.echo(f"catch-load: {outcome.message}", err=True)
    return guard


def _record(
    spec: TargetSpec,
    options: RecorderOptions,
    command: tuple[str, ...],
    lab_argv: list[str] | None,
    truth_path: Path | None,
    out: Path,
    quiet: bool,
    regex: re.Pattern[str] | None,
    guard: SysctlGuard | None,
    explicit_taskstats: bool,
    flight: WatcherProcess | None = None,
    ebpf_started: tuple[Any, dict[str, Any]] | None = None,
) -> int:
    """Record; the launched command's exit status (0 without one). `ebpf_started`: the eBPF sampler --sampler
    auto started (_auto_sampler)."""
    launched: subprocess.Popen[bytes] | None = None
    ended_by_us = False  # the recording's end stopped the command: its status is ours, not its own
    interval = options.interval_ns
    status_line = _StatusLine(enabled=not quiet and sys.stderr.isatty(), flight=flight, options=options)
    log_pipe = options.engine.get("log_fd") if options.engine else None
    if options.engine is not None and log_pipe is not None:
        options.engine["log_fd"] = log_pipe[0]  # the source reads jackd's output; the command writes it
    session = RecordingSession(spec, options, on_status=status_line.show)
    recorder = session.recorder

    def on_signal(signum: int, _frame: Any) -> None:
        recorder.stop(f"interrupted ({signal.Signals(signum).name})", urgent=True)

    # SIGHUP (the terminal closed) ends the recording as SIGTERM does: trailer written, sysctls restored.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, on_signal)
    signal.signal(signal.SIGUSR1, lambda *_: recorder.add_marker("SIGUSR1"))

    session.wait_ready()  # a launched command must not start before the recording can
    try:
        recorder.prepare(ebpf_started)  # the eBPF sampler's compile and attach: before the command starts
    except ForensicsError:
        session.abandon()
        raise
    if command:
        try:
            launched = subprocess.Popen(
                list(command),
                stdin=subprocess.DEVNULL if options.stdin_markers else None,
                stdout=log_pipe[1] if log_pipe is not None else None,
                stderr=log_pipe[1] if log_pipe is not None else None,
                env=package_env() if lab_argv is not None else None,
            )
        except OSError as err:
            session.abandon()
            raise ForensicsError(f"cannot run {command[0]!r}: {err.strerror}") from err
        spec.command_pid = launched.pid
    if log_pipe is not None:
        os.close(log_pipe[1])

    meta = recording_meta(
        spec,
        options,
        writer_pid=session.writer.pid,
        lab_argv=lab_argv,
        guard=guard,
        argv=_own_argv(options.redact),
        tool_version=__version__,
    )
    if not quiet:
        what = " ".join(command) if command else ", ".join(f"{k}={v}" for k, v in spec.describe().items() if v)
        click.echo(
            f"catch-load: recording {what} every {fmt_ns(interval)} into {out} "
            f"(Enter or SIGUSR1 to mark, Ctrl-C to stop)",
            err=True,
        )
        if regex is not None and not spec.pids:
            click.echo(f"catch-load: waiting for a process matching {regex.pattern!r}...", err=True)
    try:
        trailer = session.record(meta)
        status_line.clear()
        if explicit_taskstats:  # the default (auto) says nothing when it cannot run; `info` shows it
            for note in session.recorder.notes:
                click.echo(f"catch-load: {note}", err=True)
        # What an engine source could not record (an engine a target uses, or one asked for): said when it
        # came, or here if it came after the last status.
        status_line.say_notes(session.recorder.engines.notes)
        if launched is not None:
            # The command ended the recording (wait long), or a stop request did (it carries on).
            try:
                launched.wait(timeout=30 if recorder.stop_reason == "the command exited" else 0.2)
            except subprocess.TimeoutExpired:
                launched.terminate()
                ended_by_us = True
                try:
                    launched.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    launched.kill()
                    launched.wait()
            trailer["command_exit_code"] = launched.returncode
        if truth_path is not None:
            _store_truth(session, truth_path)
    except ForensicsError:
        status_line.clear()
        if launched is not None and launched.poll() is None:
            launched.terminate()
        session.abandon()
        raise
    finally:
        if truth_path is not None:
            truth_path.unlink(missing_ok=True)
    session.finish(trailer, say=None if quiet else _say)
    for note in session.notes:
        _say(note)
    flight_status = flight.finish() if flight is not None else None
    if flight is not None and flight.note:
        _say(flight.note)
    if not quiet:
        with contextlib.suppress(OSError):
            _print_summary(out, trailer, session.recorder, flight_status)
    if launched is None or ended_by_us or launched.returncode is None:
        return 0
    return launched.returncode


def _writer_text(trailer: dict[str, Any], duration_ns: int) -> str:
    """The writer's CPU during the recording, and after it (the eBPF sampler's rows are made then); unknown when
    the writer had not finished when catch-load returned."""
    writer_ns = trailer.get("writer_cpu_ns")
    if writer_ns is None:
        return "unknown: still finishing the file"
    after_ns = trailer.get("writer_decode_cpu_ns")
    after = f", then {after_ns / 1e9:.2f} s of CPU after the end making the eBPF rows" if after_ns else ""
    return f"{100.0 * writer_ns / max(1, duration_ns):.1f} %{after}"


def _own_argv(redact: bool) -> list[str]:
    """The recorder's command line for the metadata; with --redact, without the launched command's."""
    argv = ["catch-load", *sys.argv[1:]]
    if redact and "--" in argv:
        argv = [*argv[: argv.index("--") + 1], "<redacted>"]
    return argv


def _check_lab_args(lab_argv: list[str]) -> None:
    """Refuse bad lab options before anything starts (they would end the recording at once)."""
    from forensics.lab.cli import settings_from_args

    try:
        settings_from_args(lab_argv)
    except click.ClickException as err:
        raise ForensicsError(
            f"--lab: {err.format_message()} (everything after --lab goes to the lab: put catch-load's own "
            f"options before --lab; see `forensics lab --help`)"
        ) from None


def _store_truth(recorder: RecordingSession, truth_path: Path) -> None:
    from forensics.lab.truth import read_truth

    try:
        truth = read_truth(truth_path)
    except FileNotFoundError:
        raise ForensicsError("the lab ended without writing its ground truth (did it crash? see above)") from None
    recorder.add_table("truth", _json_columns(truth.episodes))
    recorder.add_table("cycles", _json_columns(truth.cycles))
    if truth.lab:
        recorder.add_meta({"lab": truth.lab})


def _json_columns(frame: Any) -> dict[str, list[Any]]:
    """Columns as JSON-ready lists: missing values (pd.NA in nullable columns, NaN) become null."""
    import pandas as pd

    return {c: [None if pd.isna(v) else v for v in frame[c].tolist()] for c in frame.columns}


class _StatusLine:
    def __init__(
        self, enabled: bool, flight: WatcherProcess | None = None, options: RecorderOptions | None = None
    ) -> None:
        self.enabled = enabled
        self.width = 0
        self.flight = flight
        self.notes_said = 0  # the engine sources' notes said so far (each once, when it comes)
        self.options = options
        self.missing_said = False  # the line that most ticks are being missed, said once

    def say_missing(self, status: Status) -> None:
        """Once, while it can still be restarted: the /proc sampler is missing most ticks (a big engine), and what
        would keep the interval."""
        options = self.options
        taken = status.ticks + status.missed_ticks
        if self.missing_said or options is None or options.sampler != "proc" or not self.enabled:
            return
        if taken * options.interval_ns < LIVE_MISSED_AFTER_NS or status.missed_ticks < LIVE_MISSED_SHARE * taken:
            return
        self.clear()
        tips = " or ".join(
            f"{flag} ({short})" if short else flag for flag, short, _ in _interval_keepers(status.tiers_on)
        )
        click.echo(
            f"catch-load: {status.missed_ticks / taken:.0%} of ticks missed so far: the reads of {status.threads} "
            f"threads do not fit in {fmt_ns(options.interval_ns)} (the capture stays readable); to keep it, "
            f"stop and record with {tips}",
            err=True,
        )
        self.missing_said = True

    def say_notes(self, notes: Sequence[str]) -> None:
        """The engine sources' notes not said yet, one line each, above the status line (even when quiet:
        what is not recorded must be said)."""
        if len(notes) <= self.notes_said:
            return
        self.clear()
        for note in notes[self.notes_said :]:
            click.echo(f"catch-load: {note}", err=True)
        self.notes_said = len(notes)

    def show(self, status: Status) -> None:
        flight = self.flight.read_status() if self.flight is not None else None  # drained even when quiet
        self.say_notes(status.notes)
        self.say_missing(status)
        if not self.enabled:
            return
        p50 = fmt_ns(status.interval_p50_ns) if status.interval_p50_ns is not None else "-"
        p99 = fmt_ns(status.interval_p99_ns) if status.interval_p99_ns is not None else "-"
        text = (
            f"{status.elapsed_ns / 1e9:7.1f} s  {status.threads} threads in {status.processes} processes  "
            f"interval p50 {p50} p99 {p99}  missed {status.missed_ticks}  "
            + (f"{status.file_bytes / 1e6:.1f} MB" if flight is None else status_text(flight))
        )
        if status.waiting_for:
            text += f"  (waiting for {status.waiting_for})"
        if status.last_marker is not None:  # the confirmation that Enter or SIGUSR1 was taken
            at_ns, label = status.last_marker
            text += f"  marker {status.markers} {label[:24]!r} at {at_ns / 1e9:.1f} s"
        sys.stderr.write("\r" + text.ljust(self.width))
        sys.stderr.flush()
        self.width = len(text)

    def clear(self) -> None:
        if self.enabled and self.width:
            sys.stderr.write("\r" + " " * self.width + "\r")
            sys.stderr.flush()
            self.width = 0


def _print_summary(
    out: Path, trailer: dict[str, Any], recorder: Recorder, flight: dict[str, Any] | None = None
) -> None:
    ticks = trailer["ticks"]
    missed = trailer["missed_ticks"]
    lost = trailer.get("lost_ticks", 0)
    unseen = trailer.get("threads_unseen_min", 0)
    duration = trailer["duration_ns"]
    cpu = trailer["sampler_cpu_ns"]
    size = out.stat().st_size if flight is None else int(trailer.get("bytes") or 0)  # --ring: all segments
    lines = [
        f"catch-load: recorded {duration / 1e9:.1f} s ({trailer['end_reason']}): "
        f"{recorder.threads_seen} threads in {recorder.processes_seen} processes",
        f"  ticks {ticks}, interval p50 {fmt_ns(trailer['interval_p50_ns'])}, "
        f"p99 {fmt_ns(trailer['interval_p99_ns'])}, max {fmt_ns(trailer['interval_max_ns'])}, "
        f"missed {missed} ({100.0 * missed / max(1, ticks + missed):.2f} %)"
        + (f", lost {lost} (read, but the writer fell behind: not in the capture)" if lost else ""),
        f"  sampler CPU {100.0 * cpu / max(1, duration):.1f} % of a core (writer {_writer_text(trailer, duration)}); "
        f"file {size / 1e6:.2f} MB "
        f"({size / max(1, recorder.sample_rows):.1f} bytes per thread-sample, whole file)",
        *(
            [f"  at least {unseen} short-lived threads started and ended between thread scans, never sampled"]
            if unseen
            else []
        ),
        *_missed_hint(missed, ticks, recorder, cpu / max(1, duration)),
        *(
            [f"capture: {out}", f"next: forensics info {out}   |   forensics stalls {out}"]
            if flight is None
            else summary_lines(out, flight, duration)
        ),
    ]
    click.echo("\n".join(lines), err=True)


# While recording, from a second of ticks on, a /proc sampler missing most of them is told so once, while the
# recording can still be started again another way (the Bitwig shape: 78 % from the first second).
LIVE_MISSED_SHARE = 0.5
LIVE_MISSED_AFTER_NS = 1_000_000_000
# From this share of missed ticks the summary says what would keep the interval: a loaded machine misses a
# few now and then (0.02-0.6 % measured here), a recorder with more reads than an interval holds most of them.
MISSED_HINT_SHARE = 0.01
# A recorder busy this share of a core or more had more reads than its interval holds (534 threads from /proc:
# 61-70 %); below it the ticks were missed while it waited for a CPU: the machine held it.
BUSY_RECORDER_SHARE = 0.5


def _missed_hint(missed: int, ticks: int, recorder: Recorder, cpu_share: float) -> list[str]:
    """What to try when the recorder kept its interval badly (one line each; none when it kept it). `cpu_share`:
    the recorder's CPU over the recording, as a share of one core."""
    if missed < MISSED_HINT_SHARE * max(1, ticks + missed):
        return []
    options = recorder.options
    if options.sampler == "ebpf":
        return ["  the kernel's tick was held up: the machine was busy (the analyses use the reads there are)"]
    if cpu_share < BUSY_RECORDER_SHARE:
        return [
            f"  the machine held the recorder (it used {cpu_share:.0%} of a core): the analyses take the windows as "
            "they came (`forensics stalls` says so)"
        ]
    lines = [
        f"  the /proc reads of {recorder.threads_seen} threads did not fit in {fmt_ns(options.interval_ns)} "
        f"({cpu_share:.0%} of a core): the analyses take the windows as they came (`forensics stalls` says so)"
    ]
    tips = [f"{flag} ({why})" for flag, _, why in _interval_keepers(recorder.tiers.enabled)]
    return [*lines, "  to keep the interval, try " + "; ".join(tips)]


def _interval_keepers(tiers_on: bool) -> list[tuple[str, str, str]]:
    """What would keep the interval of a /proc recording whose reads did not fit, said live (say_missing) and in
    the summary (_missed_hint): (option, a short note, why). The eBPF sampler always; read tiers unless on."""
    keepers = [("--sampler ebpf", "root", "root: the kernel takes the tick and keeps 2 ms for 2000 threads")]
    if not tiers_on:
        keepers.append(("--slow-interval 20ms", "", "threads that sleep are read less often"))
    return keepers


def _split_lab(argv: list[str]) -> list[str]:
    """`catch-load [OPTIONS] --lab [LAB OPTIONS]`: everything after --lab belongs to the lab."""
    if "--lab" not in argv:
        return argv
    at = argv.index("--lab")
    if "--" in argv[:at]:
        return argv
    return [*argv[:at], "--lab", shlex.join(argv[at + 1 :])]


def _lab_help(argv: list[str]) -> bool:
    """`catch-load [OPTIONS] --lab ... --help`: the help asked for is the lab's."""
    if "--lab" not in argv or "--" in argv[: argv.index("--lab")]:
        return False
    return bool({"-h", "--help"} & set(argv[argv.index("--lab") + 1 :]))


def main(args: list[str] | None = None) -> None:
    argv = sys.argv[1:] if args is None else args
    if _lab_help(argv):
        from forensics.lab.cli import lab_command

        run_cli(lab_command, "catch-load [CATCH-LOAD OPTIONS] --lab", ["--help"])
        return
    run_cli(catch_load, "catch-load", _split_lab(argv))


if __name__ == "__main__":
    main()
