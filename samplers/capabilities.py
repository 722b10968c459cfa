"""What this machine offers for forensics, and how it is set up for low-latency audio (`forensics doctor`).

`build_report()` returns one `Check` per item: its value, a rating ("good", "bad", "warn", "unknown",
"info"), the aspect it matters for ("audio": low-latency audio; "forensics": what a recording can see)
and one line of why. Every probe degrades to "unknown" with the reason when a file is missing or a
permission is refused: users' kernels differ, and the doctor must never fail on one.

The recorder reuses the individual probes (`probe_taskstats`, `probe_bcc`, `tracefs_status`,
`kernel_config`...) to record which sources were available in the capture.

Roots are parameters (proc, sys, dev) so tests can point them at a temporary tree with files removed.
Live probes (a taskstats query, a BCC compile, rlimits of this process) run only with `live=True`.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import platform
import resource
import struct
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

GOOD, BAD, WARN, UNKNOWN, INFO = "good", "bad", "warn", "unknown", "info"
AUDIO, FORENSICS = "audio", "forensics"

# /dev/cpu_dma_latency reads back PM_QOS_CPU_LATENCY_DEFAULT_VALUE (2000 s in us) when nobody holds it
# (include/linux/pm_qos.h).
PM_QOS_DEFAULT_US = 2_000_000_000


@dataclass(frozen=True)
class Check:
    name: str
    value: str
    rating: str  # good / bad / warn / unknown / info
    aspect: str  # audio / forensics
    why: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass
class Roots:
    proc: str = "/proc"
    sys: str = "/sys"
    dev: str = "/dev"
    boot: str = "/boot"


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text(errors="replace").strip()
    except OSError:
        return None


def kernel_config(roots: Roots | None = None, release: str | None = None) -> dict[str, str] | None:
    """The running kernel's config (/proc/config.gz, else /boot/config-<release>), or None."""
    roots = roots or Roots()
    text: str | None = None
    with contextlib.suppress(OSError, EOFError, gzip.BadGzipFile):
        text = gzip.decompress(Path(roots.proc, "config.gz").read_bytes()).decode(errors="replace")
    if text is None:
        text = _read(Path(roots.boot, f"config-{release or platform.release()}"))
    if text is None:
        return None
    config: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("CONFIG_") and "=" in line:
            key, _, value = line.partition("=")
            config[key] = value
        elif line.startswith("# CONFIG_") and line.endswith(" is not set"):
            config[line[2:].split()[0]] = "n"
    return config


def _cmdline(roots: Roots) -> list[str]:
    return (_read(Path(roots.proc, "cmdline")) or "").split()


def _sysctl(roots: Roots, name: str) -> str | None:
    return _read(Path(roots.proc, "sys", *name.split(".")))


# --------------------------------------------------------------------------------------------------
# Individual probes


def preemption_check(roots: Roots, config: dict[str, str] | None) -> Check:
    version = platform.version()
    cmdline = _cmdline(roots)
    # PREEMPT_DYNAMIC kernels pick the model at boot (preempt=) and show it in debugfs.
    dynamic_now = _read(Path(roots.sys, "kernel", "debug", "sched", "preempt"))
    boot_choice = next((a.split("=", 1)[1] for a in cmdline if a.startswith("preempt=")), None)
    if (config and config.get("CONFIG_PREEMPT_RT") == "y") or "PREEMPT_RT" in version:
        return Check(
            "preemption model",
            "PREEMPT_RT",
            GOOD,
            AUDIO,
            "fully preemptible kernel: the best wake-up latency for audio threads",
        )
    if config is None:
        return Check(
            "preemption model",
            f"unknown ({version})",
            UNKNOWN,
            AUDIO,
            "no kernel config readable (/proc/config.gz or /boot/config-*)",
        )
    model = None
    if dynamic_now:
        # "none voluntary (full) lazy": the active one is in parentheses
        model = next((w.strip("()") for w in dynamic_now.split() if w.startswith("(")), None)
    if model is None and boot_choice:
        model = boot_choice
    if model is None:
        for key, name in (
            ("CONFIG_PREEMPT", "full"),
            ("CONFIG_PREEMPT_LAZY", "lazy"),
            ("CONFIG_PREEMPT_VOLUNTARY", "voluntary"),
            ("CONFIG_PREEMPT_NONE", "none"),
        ):
            if config.get(key) == "y":
                model = name
                break
    is_dynamic = config.get("CONFIG_PREEMPT_DYNAMIC") == "y"
    dynamic = " (PREEMPT_DYNAMIC)" if is_dynamic else ""
    switch_hint = "; boot with preempt=full to switch" if is_dynamic else ""
    if model == "full":
        return Check(
            "preemption model", f"full{dynamic}", GOOD, AUDIO, "a woken audio thread preempts kernel code at once"
        )
    if model in ("voluntary", "lazy"):
        return Check(
            "preemption model",
            f"{model}{dynamic}",
            WARN,
            AUDIO,
            f"kernel code yields only at preemption points: longer wake-up latency than full/RT{switch_hint}",
        )
    return Check(
        "preemption model",
        f"{model or 'unknown'}{dynamic}",
        BAD if model == "none" else UNKNOWN,
        AUDIO,
        f"no kernel preemption: a woken audio thread waits until the kernel returns to user space{switch_hint}",
    )


def threadirqs_check(roots: Roots, config: dict[str, str] | None) -> Check:
    cmdline = _cmdline(roots)
    rt = bool(config and config.get("CONFIG_PREEMPT_RT") == "y")
    if rt or "threadirqs" in cmdline:
        why = "forced by PREEMPT_RT" if rt else "threadirqs on the command line"
        return Check(
            "threaded IRQs",
            "yes",
            GOOD,
            AUDIO,
            f"{why}: IRQ handlers are threads whose priority can be set below/above audio",
        )
    if config is not None and config.get("CONFIG_IRQ_FORCED_THREADING") != "y":
        return Check(
            "threaded IRQs",
            "not available",
            WARN,
            AUDIO,
            "kernel built without CONFIG_IRQ_FORCED_THREADING: IRQ handlers cannot be prioritised",
        )
    return Check(
        "threaded IRQs",
        "no",
        WARN,
        AUDIO,
        "boot with `threadirqs` to give the sound card's IRQ thread a real-time priority (rtirq)",
    )


def schedstats_checks(roots: Roots, config: dict[str, str] | None) -> list[Check]:
    value = _sysctl(roots, "kernel.sched_schedstats")
    compiled = None if config is None else config.get("CONFIG_SCHEDSTATS") == "y"
    if value is not None:
        compiled = True  # the sysctl exists only with CONFIG_SCHEDSTATS (kernel/sched/core.c)
    if compiled is False:
        return [
            Check(
                "schedstats",
                "not compiled in",
                BAD,
                FORENSICS,
                "no CONFIG_SCHEDSTATS: /proc/.../sched lacks wait/sleep/block sums (eBPF or taskstats fill in)",
            )
        ]
    if compiled is None:
        return [
            Check(
                "schedstats", "unknown", UNKNOWN, FORENSICS, "no kernel config and no kernel.sched_schedstats to tell"
            )
        ]
    if value == "1":
        return [
            Check(
                "schedstats", "compiled in, on", GOOD, FORENSICS, "sched files carry wait/sleep/block sums and maxima"
            )
        ]
    return [
        Check(
            "schedstats",
            "compiled in, off",
            WARN,
            FORENSICS,
            "record with --schedstats to turn kernel.sched_schedstats on for the recording (restored after)",
        )
    ]


def delayacct_check(roots: Roots, config: dict[str, str] | None) -> Check:
    value = _sysctl(roots, "kernel.task_delayacct")
    if config is not None and config.get("CONFIG_TASK_DELAY_ACCT") != "y":
        return Check(
            "delay accounting",
            "not compiled in",
            BAD,
            FORENSICS,
            "no CONFIG_TASK_DELAY_ACCT: no per-thread IO/reclaim/swap delays",
        )
    if value is None:
        if config is None:
            return Check(
                "delay accounting",
                "unknown",
                UNKNOWN,
                FORENSICS,
                "neither the kernel config nor kernel.task_delayacct is readable",
            )
        # Before 5.14 there is no switch: compiled in means on (unless booted with nodelayacct).
        off = "nodelayacct" in _cmdline(roots)
        return Check(
            "delay accounting",
            "off (nodelayacct)" if off else "on (no switch on this kernel)",
            BAD if off else GOOD,
            FORENSICS,
            "per-thread blkio/swapin/reclaim delays through taskstats and stat field 42",
        )
    if value == "1":
        return Check(
            "delay accounting",
            "on (kernel.task_delayacct=1)",
            GOOD,
            FORENSICS,
            "taskstats and stat field 42 carry IO/reclaim/swap delays",
        )
    return Check(
        "delay accounting",
        "off (kernel.task_delayacct=0)",
        WARN,
        FORENSICS,
        "--delayacct turns it on for a recording (restored after), but only threads created after that are "
        "accounted (set up at fork): start the engine after it, or boot with `delayacct`",
    )


def probe_taskstats() -> tuple[str, str]:
    """(rating, text): can this process query per-thread taskstats?"""
    from samplers.taskstats import TaskstatsClient, TaskstatsUnavailable

    try:
        with TaskstatsClient() as client:
            client.check_permission()
            fields = client.query(os.getpid()) or {}
    except TaskstatsUnavailable as err:
        return (BAD if "CONFIG_TASKSTATS" in str(err) else WARN), str(err)
    except OSError as err:
        return UNKNOWN, f"netlink refused: {err.strerror}"
    return GOOD, f"reachable, struct version {fields.get('version')} ({fields.get('struct_len')} bytes)"


def taskstats_check(live: bool) -> Check:
    if not live:
        return Check("taskstats", "not checked", UNKNOWN, FORENSICS, "live probes were not run")
    rating, text = probe_taskstats()
    why = {
        GOOD: "per-thread cpu/blkio/swapin/reclaim/thrashing/compaction delays readable at each tick",
        WARN: "per-thread delay totals need root (CAP_NET_ADMIN)",
    }.get(rating, "per-thread delay totals unavailable")
    return Check("taskstats", text, rating, FORENSICS, why)


def tracefs_check(roots: Roots) -> Check:
    for rel in ("kernel/tracing", "kernel/debug/tracing"):
        if Path(roots.sys, rel, "events").is_dir():
            return Check(
                "tracefs",
                f"mounted at /sys/{rel}",
                GOOD,
                FORENSICS,
                "tracepoints (sched_switch, wake-ups, faults, block) can be attached",
            )
    if Path(roots.sys, "kernel", "tracing").is_dir():
        return Check(
            "tracefs",
            "not mounted",
            WARN,
            FORENSICS,
            "recording with --ebpf mounts it (mount -t tracefs nodev /sys/kernel/tracing) and says so",
        )
    return Check("tracefs", "absent", BAD, FORENSICS, "no /sys/kernel/tracing: kernel without tracing, no tracepoints")


_PROBE_PROGRAM = "int ssf_doctor_probe(void *ctx) { return 0; }\n"


def probe_bcc() -> tuple[str, str]:
    """(rating, text): BCC importable, and a trivial program compiles (stub headers if needed) and loads."""
    from samplers.ebpf.bcc_import import BccUnavailable, import_bcc
    from samplers.ebpf.kernel_stub import StubUnavailable, configure_bcc_environment

    try:
        bcc = import_bcc()
    except BccUnavailable as err:
        return BAD, str(err)
    version = getattr(getattr(bcc, "version", None), "__version__", None) or "?"
    if os.geteuid() != 0:
        return WARN, f"BCC {version} importable; compiling a probe needs root (not tried)"
    try:
        headers = configure_bcc_environment()
    except (StubUnavailable, OSError) as err:
        return BAD, f"BCC {version} importable but {err}"
    from samplers.ebpf.collector import compiler_reason, output_captured

    try:
        with output_captured() as output:
            prog = bcc.BPF(text=_PROBE_PROGRAM.encode())
            prog.load_func(b"ssf_doctor_probe", bcc.BPF.TRACEPOINT)
            prog.cleanup()
    except Exception as err:  # BCC raises bare Exception
        return BAD, f"BCC {version} importable but a probe does not compile/load: {compiler_reason(output) or err}"
    how = "stub headers from the kernel config" if "stub" in headers else headers
    return GOOD, f"BCC {version}: a probe compiles and loads ({how})"


def bcc_check(live: bool) -> Check:
    if not live:
        return Check("eBPF (BCC)", "not checked", UNKNOWN, FORENSICS, "live probes were not run")
    rating, text = probe_bcc()
    why = {
        GOOD: "--ebpf records exact switches, their states and who woke whom",
        WARN: "run as root for --ebpf",
    }.get(rating, "--ebpf unavailable: off-CPU causes are inferred from 2 ms samples only")
    return Check("eBPF (BCC)", text, rating, FORENSICS, why)


def _limit_checks(soft: int, mem_soft: int, root: bool, who: str) -> list[Check]:
    checks = []
    if root:
        checks.append(
            Check(
                "RLIMIT_RTPRIO",
                f"{soft} (root: CAP_SYS_NICE){who}",
                GOOD,
                AUDIO,
                "root may use SCHED_FIFO/RR regardless of the limit",
            )
        )
    elif soft >= 70:
        checks.append(
            Check("RLIMIT_RTPRIO", f"{soft}{who}", GOOD, AUDIO, "audio threads may run SCHED_FIFO up to this priority")
        )
    elif soft > 0:
        checks.append(
            Check(
                "RLIMIT_RTPRIO",
                f"{soft}{who}",
                WARN,
                AUDIO,
                "real-time allowed but low: JACK/PipeWire ask for 70-95 (audio group in limits.conf)",
            )
        )
    else:
        checks.append(
            Check(
                "RLIMIT_RTPRIO",
                f"0{who}",
                BAD,
                AUDIO,
                "no real-time scheduling for this user: add it to the audio group (rtprio 95)",
            )
        )
    unlimited = mem_soft == resource.RLIM_INFINITY
    text = ("unlimited" if unlimited else f"{mem_soft // 1024} KiB") + who
    rating = GOOD if unlimited or root else WARN
    checks.append(
        Check(
            "RLIMIT_MEMLOCK",
            text,
            rating,
            AUDIO,
            "audio engines mlock their buffers; a low limit makes page faults possible in the callback",
        )
    )
    return checks


def user_limits(user: str) -> tuple[int, int] | None:
    """(RLIMIT_RTPRIO soft, RLIMIT_MEMLOCK soft in bytes or RLIM_INFINITY) of a session of `user`:
    `runuser` opens one through PAM, so pam_limits applies /etc/security/limits.conf and limits.d as at
    the user's login (where audio-group real-time limits are set). Root only; None when it cannot."""
    if os.geteuid() != 0:
        return None
    try:
        done = subprocess.run(
            ["runuser", "-u", user, "--", "sh", "-c", "ulimit -r; ulimit -l"],
            capture_output=True,
            text=True,
            timeout=10,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.split()
    if done.returncode != 0 or len(lines) != 2:
        return None
    rtprio = resource.RLIM_INFINITY if lines[0] == "unlimited" else int(lines[0])
    memlock = resource.RLIM_INFINITY if lines[1] == "unlimited" else int(lines[1]) * 1024
    return rtprio, memlock


def rt_checks(roots: Roots, live: bool, user: str | None = None) -> list[Check]:
    """Real-time limits of whoever runs the engine: `user` (judged through a session of theirs), else this
    process's own (root's, when doctor runs under sudo, would say nothing about the audio user)."""
    checks = []
    if live and user is not None:
        limits = user_limits(user)
        if limits is None:
            why = "run doctor as root to open a session of that user" if os.geteuid() else "runuser failed"
            checks.append(Check("RLIMIT_RTPRIO", f"unknown for user {user}", UNKNOWN, AUDIO, why))
            checks.append(Check("RLIMIT_MEMLOCK", f"unknown for user {user}", UNKNOWN, AUDIO, why))
        else:
            soft, mem_soft = limits
            checks += _limit_checks(soft, mem_soft, user == "root", f" (user {user})")
    elif live:
        soft, _hard = resource.getrlimit(resource.RLIMIT_RTPRIO)
        mem_soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        checks += _limit_checks(soft, mem_soft, os.geteuid() == 0, "")
    runtime = _sysctl(roots, "kernel.sched_rt_runtime_us")
    period = _sysctl(roots, "kernel.sched_rt_period_us")
    if runtime is None:
        checks.append(Check("RT throttling", "unknown", UNKNOWN, AUDIO, "kernel.sched_rt_runtime_us not readable"))
    elif runtime == "-1":
        checks.append(
            Check(
                "RT throttling",
                "off (sched_rt_runtime_us=-1)",
                WARN,
                AUDIO,
                "a runaway SCHED_FIFO thread can lock up a CPU; fine for a tuned audio box",
            )
        )
    else:
        checks.append(
            Check(
                "RT throttling",
                f"{runtime}/{period} us",
                INFO,
                AUDIO,
                "RT threads may use this share of each period; beyond it they are throttled (a glitch, not a hang)",
            )
        )
    return checks


def governor_check(roots: Roots) -> Check:
    base = Path(roots.sys, "devices", "system", "cpu")
    governors: dict[str, list[str]] = {}
    with contextlib.suppress(OSError):
        for node in sorted(base.glob("cpu[0-9]*")):
            gov = _read(node / "cpufreq" / "scaling_governor")
            if gov:
                governors.setdefault(gov, []).append(node.name[3:])
    if not governors:
        return Check(
            "CPU governor",
            "none (no cpufreq)",
            INFO,
            AUDIO,
            "frequency is not scaled by this kernel (VM or fixed clock): nothing to tune",
        )
    text = ", ".join(f"{g} (cpus {','.join(c)})" for g, c in governors.items())
    if set(governors) == {"performance"}:
        return Check(
            "CPU governor", text, GOOD, AUDIO, "cores stay at full clock: a callback's cost does not depend on ramp-up"
        )
    return Check(
        "CPU governor",
        text,
        WARN,
        AUDIO,
        "frequency ramps after load appears: the first callbacks after idle run slower",
    )


def core_types_check(roots: Roots) -> Check:
    types = {}
    for pmu, label in (("cpu_core", "P-core"), ("cpu_atom", "E-core")):
        cpus = _read(Path(roots.sys, "devices", pmu, "cpus"))
        if cpus:
            types[label] = cpus
    if types:
        text = ", ".join(f"{k}: {v}" for k, v in types.items())
        return Check(
            "core types",
            text,
            WARN,
            AUDIO,
            "hybrid CPU: an audio thread placed on an E-core runs slower; pin or check placement",
        )
    capacities = set()
    with contextlib.suppress(OSError):
        for node in Path(roots.sys, "devices", "system", "cpu").glob("cpu[0-9]*"):
            cap = _read(node / "cpu_capacity")
            if cap:
                capacities.add(cap)
    if len(capacities) > 1:
        return Check(
            "core types",
            f"capacities {sorted(capacities, key=int)}",
            WARN,
            AUDIO,
            "big.LITTLE: cores differ in speed; placement matters",
        )
    return Check(
        "core types", "uniform", GOOD, AUDIO, "all cores are alike: placement changes only contention, not speed"
    )


def dma_latency_check(roots: Roots, live: bool) -> Check:
    path = Path(roots.dev, "cpu_dma_latency")
    if not path.exists():
        return Check(
            "/dev/cpu_dma_latency",
            "absent",
            INFO,
            AUDIO,
            "no PM QoS device: C-state exit latency cannot be capped from user space",
        )
    if not live:
        return Check(
            "/dev/cpu_dma_latency",
            "present",
            INFO,
            AUDIO,
            "an audio server can hold it open to keep CPUs out of deep C-states",
        )
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            raw = os.read(fd, 4)
        finally:
            os.close(fd)
        (value,) = struct.unpack("<i", raw)
    except (OSError, struct.error) as err:
        reason = getattr(err, "strerror", None) or str(err)
        return Check(
            "/dev/cpu_dma_latency",
            f"present, not readable ({reason})",
            INFO,
            AUDIO,
            "an audio server can hold it open to keep CPUs out of deep C-states",
        )
    if value >= PM_QOS_DEFAULT_US:
        return Check(
            "/dev/cpu_dma_latency",
            "present, nobody holds it",
            WARN,
            AUDIO,
            "deep C-states allowed: wake-up from idle can add 100s of us (write 0 and keep it open while playing)",
        )
    return Check(
        "/dev/cpu_dma_latency",
        f"held at {value} us",
        GOOD,
        AUDIO,
        "someone caps the C-state exit latency: fast wake-ups from idle",
    )


def compiled_check() -> Check:
    """The compiled tick and parse (samplers/compiled.py): built at install where gcc and python3-dev were."""
    from samplers.compiled import PURE_PYTHON_ENV, compiled_module, pure_python_asked

    missing = [name for name in ("_tick", "_parse") if compiled_module(name) is None]
    if not missing:
        return Check("compiled tick", "yes", GOOD, FORENSICS, "the recorder's tick and the writer's parse run in C")
    why = (
        f"{PURE_PYTHON_ENV} is set"
        if pure_python_asked()
        else "not built at install (reinstall with gcc and python3-dev)"
    )
    return Check(
        "compiled tick",
        f"no ({', '.join(f'samplers/{name}.c' for name in missing)}: {why})",
        WARN,
        FORENSICS,
        "the same work in Python: on a big engine (hundreds of threads) from /proc the recorder takes about 1.5 "
        "times the CPU and misses more ticks",
    )


def swappiness_check(roots: Roots) -> Check:
    value = _sysctl(roots, "vm.swappiness")
    if value is None:
        return Check("vm.swappiness", "unknown", UNKNOWN, AUDIO, "not readable")
    swaps = _read(Path(roots.proc, "swaps"))
    no_swap = swaps is not None and len(swaps.splitlines()) <= 1
    if no_swap:
        return Check(
            "vm.swappiness",
            f"{value} (no swap active)",
            GOOD,
            AUDIO,
            "nothing can be swapped out, so swap-in faults cannot stall a callback",
        )
    rating = GOOD if int(value) <= 10 else WARN
    return Check(
        "vm.swappiness",
        value,
        rating,
        AUDIO,
        "high values swap out idle plugin memory: the next touch is a major fault in the callback",
    )


def hz_check(config: dict[str, str] | None) -> Check:
    if config is None:
        return Check("CONFIG_HZ", "unknown", UNKNOWN, FORENSICS, "no kernel config")
    hz = config.get("CONFIG_HZ", "?")
    return Check(
        "CONFIG_HZ",
        hz,
        INFO,
        FORENSICS,
        f"utime/stime and stat field 42 move in 1/{hz} s ticks; schedstat, taskstats and eBPF are ns-exact",
    )


def kernel_check(config: dict[str, str] | None) -> Check:
    return Check(
        "kernel",
        f"{platform.release()} {platform.machine()}",
        INFO,
        FORENSICS,
        "recorded in every capture: facilities and their quirks differ by version",
    )


# --------------------------------------------------------------------------------------------------


def build_report(roots: Roots | None = None, live: bool = True, user: str | None = None) -> list[Check]:
    """Every check, in a stable order. Never raises for a missing file or a refused probe. The real-time
    limits are `user`'s when given (the user who runs the engine), else this process's."""
    roots = roots or Roots()
    config = kernel_config(roots)
    builders: list[tuple[str, Callable[[], Check | list[Check]]]] = [
        ("kernel", lambda: kernel_check(config)),
        ("preemption model", lambda: preemption_check(roots, config)),
        ("threaded IRQs", lambda: threadirqs_check(roots, config)),
        ("CONFIG_HZ", lambda: hz_check(config)),
        ("schedstats", lambda: schedstats_checks(roots, config)),
        ("delay accounting", lambda: delayacct_check(roots, config)),
        ("taskstats", lambda: taskstats_check(live)),
        ("tracefs", lambda: tracefs_check(roots)),
        ("eBPF (BCC)", lambda: bcc_check(live)),
        ("real-time limits", lambda: rt_checks(roots, live, user)),
        ("CPU governor", lambda: governor_check(roots)),
        ("core types", lambda: core_types_check(roots)),
        ("/dev/cpu_dma_latency", lambda: dma_latency_check(roots, live)),
        ("vm.swappiness", lambda: swappiness_check(roots)),
        ("compiled tick", compiled_check),
    ]
    checks: list[Check] = []
    for name, build in builders:
        try:
            result = build()
        except Exception as err:  # a probe's own bug must not hide the other lines
            checks.append(Check(name, "error", UNKNOWN, FORENSICS, f"the check failed: {type(err).__name__}: {err}"))
            continue
        checks.extend(result if isinstance(result, list) else [result])
    return checks


def sources_summary(checks: list[Check]) -> dict[str, Any]:
    """The forensics sources as booleans/None, for a capture's metadata."""
    by_name = {c.name: c for c in checks}

    def state(name: str) -> bool | None:
        check = by_name.get(name)
        if check is None or check.rating == UNKNOWN:
            return None
        return check.rating == GOOD

    return {
        "schedstats": state("schedstats"),
        "delayacct": state("delay accounting"),
        "taskstats": state("taskstats"),
        "tracefs": state("tracefs"),
        "ebpf": state("eBPF (BCC)"),
    }
