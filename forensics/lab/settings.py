"""The lab's settings: parsed, checked, and turned back into a command line.

Every option of `forensics lab` / `python -m forensics.lab` lands in one frozen `LabSettings`. Bad values raise
ForensicsError with one sentence (what was wrong, what to give instead). `to_argv()` is the inverse of the
command line, so a launcher can start the same lab as `python -m forensics.lab ...` (catch-load --lab does).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from capture.errors import ForensicsError

CAUSES = ("run", "runqueue", "io", "fault", "lock")
TOPOLOGIES = ("chain", "series")
POLICIES = ("fifo", "other")
IO_MODES = ("read", "write", "fsync")
FAULT_KINDS = ("minor", "major")

# The default schedule: the README's first command records it, so it shows every cause a few times in
# about 11 s (1 s lead-in, 15 episodes 0.6 s apart, 1 s clean tail).
DEFAULT_EPISODES = "run:3,runqueue:3,io:3,fault:3,lock:3"
DEFAULT_CLEAN_DURATION_NS = 10_000_000_000  # `--episodes none` without --duration
MAX_EPISODE_NS = 2_000_000_000
MAX_EPISODES = 10_000
_RAM_FILESYSTEMS = {"tmpfs", "ramfs", "devtmpfs", "hugetlbfs", "proc", "sysfs"}


def check_io_dir(directory: str, what: str) -> str:
    """The filesystem type of --io-dir; ForensicsError when it cannot hold disk-backed scratch files."""
    from forensics.lab.linux import filesystem_of

    if not os.path.isdir(directory):
        raise ForensicsError(f"--io-dir {directory} is not a directory; give a directory on a disk")
    fs_type = filesystem_of(directory)
    if fs_type in _RAM_FILESYSTEMS:
        raise ForensicsError(
            f"--io-dir {directory} is on {fs_type}, which never touches a disk, so {what} episodes would not "
            "wait for IO; give a directory on a disk with --io-dir"
        )
    return fs_type


def parse_episodes(spec: str) -> dict[str, int]:
    """ "run:5,io:2" -> {"run": 5, "io": 2}. "none" or "" -> {}. ForensicsError on anything else.

    Order of causes in the text does not matter (the schedule shuffles them by seed); a count of 0 is
    allowed and means none of that cause.
    """
    text = spec.strip()
    if text.lower() in ("", "none"):
        return {}
    counts: dict[str, int] = {}
    for item in text.split(","):
        item = item.strip()
        cause, sep, number = item.partition(":")
        cause = cause.strip().lower()
        if cause not in CAUSES:
            raise ForensicsError(
                f"--episodes: unknown cause {cause!r} in {spec!r}; causes are {', '.join(CAUSES)} "
                "(write them as cause:count, e.g. run:5,io:2)"
            )
        if not sep:
            raise ForensicsError(f"--episodes: {item!r} has no count; write cause:count, e.g. {cause}:3")
        try:
            count = int(number.strip())
        except ValueError:
            raise ForensicsError(f"--episodes: the count in {item!r} is not a whole number") from None
        if count < 0:
            raise ForensicsError(f"--episodes: the count in {item!r} is negative; give 0 or more")
        if cause in counts:
            raise ForensicsError(f"--episodes: {cause} is given twice in {spec!r}; give each cause once")
        counts[cause] = count
    if sum(counts.values()) > MAX_EPISODES:
        raise ForensicsError(f"--episodes: {sum(counts.values())} episodes is too many (at most {MAX_EPISODES})")
    return counts


def format_episodes(counts: Mapping[str, int]) -> str:
    return ",".join(f"{cause}:{counts[cause]}" for cause in CAUSES if cause in counts) or "none"


@dataclass(frozen=True)
class LabSettings:
    rate: int = 48_000
    quantum: int = 256
    episodes: dict[str, int] = field(default_factory=lambda: parse_episodes(DEFAULT_EPISODES))
    episode_ns: int = 20_000_000
    spacing_ns: int = 600_000_000
    seed: int = 1
    duration_ns: int | None = None
    lead_in_ns: int = 1_000_000_000
    tail_ns: int = 1_000_000_000
    topology: str = "chain"
    stages: int = 4
    taps: int = 32
    channels: int = 2
    policy: str = "fifo"
    rtprio: int = 70
    cpu: int | None = None
    io_mode: str = "read"
    io_dir: str = "/var/tmp"
    io_kib: int = 256  # O_DIRECT request size: 256 KiB takes ~0.2-0.3 ms on a virtio disk, so D is hit closely
    fault_kind: str = "minor"
    fault_pages: int = 0
    truth: str | None = None
    quiet: bool = False

    @property
    def period_ns(self) -> float:
        return self.quantum * 1e9 / self.rate

    def boundary_ns(self, period: int) -> int:
        """Offset of period `period` from the clock origin, exact in integer ns (no drift over hours)."""
        return period * self.quantum * 1_000_000_000 // self.rate

    def first_period_at(self, offset_ns: int) -> int:
        """The first period whose boundary is at or after `offset_ns` (integer ceil, no float rounding)."""
        return -(-offset_ns * self.rate // (self.quantum * 1_000_000_000))

    @property
    def total_episodes(self) -> int:
        return sum(self.episodes.values())

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["episodes"] = format_episodes(self.episodes)
        return out

    def to_argv(self) -> list[str]:
        """The command line that gives these settings back (`python -m forensics.lab` + this)."""
        argv = [
            f"--rate={self.rate}",
            f"--quantum={self.quantum}",
            f"--episodes={format_episodes(self.episodes)}",
            f"--episode-ms={self.episode_ns / 1e6!r}",
            f"--spacing={self.spacing_ns}ns",
            f"--seed={self.seed}",
            f"--topology={self.topology}",
            f"--stages={self.stages}",
            f"--taps={self.taps}",
            f"--policy={self.policy}",
            f"--rtprio={self.rtprio}",
            f"--io-mode={self.io_mode}",
            f"--io-dir={self.io_dir}",
            f"--io-kib={self.io_kib}",
            f"--fault-kind={self.fault_kind}",
            f"--fault-pages={self.fault_pages}",
        ]
        if self.duration_ns is not None:
            argv.append(f"--duration={self.duration_ns}ns")
        if self.cpu is not None:
            argv.append(f"--cpu={self.cpu}")
        if self.truth is not None:
            argv.append(f"--truth={self.truth}")
        if self.quiet:
            argv.append("--quiet")
        return argv


def make_settings(
    *,
    rate: int = 48_000,
    quantum: int = 256,
    episodes: str | None = None,
    episode_ms: float = 20.0,
    spacing_ns: int = 600_000_000,
    seed: int = 1,
    duration_ns: int | None = None,
    topology: str = "chain",
    stages: int = 4,
    taps: int = 32,
    policy: str = "fifo",
    rtprio: int = 70,
    cpu: int | None = None,
    io_mode: str = "read",
    io_dir: str = "/var/tmp",
    io_kib: int = 256,
    fault_kind: str = "minor",
    fault_pages: int = 0,
    truth: str | None = None,
    quiet: bool = False,
) -> LabSettings:
    """Check every option and build the settings; the first problem raises ForensicsError."""
    counts = parse_episodes(DEFAULT_EPISODES if episodes is None else episodes)
    if not 8_000 <= rate <= 768_000:
        raise ForensicsError(f"--rate {rate} is out of range; give a sample rate in Hz from 8000 to 768000")
    if not 16 <= quantum <= 16_384:
        raise ForensicsError(f"--quantum {quantum} is out of range; give a buffer size in frames from 16 to 16384")
    topology = topology.strip().lower()
    if topology not in TOPOLOGIES:
        raise ForensicsError(f"--topology {topology!r} is unknown; give chain (one thread) or series (N threads)")
    if not 1 <= stages <= 64:
        raise ForensicsError(f"--stages {stages} is out of range; give 1 to 64")
    if not 1 <= taps <= 4096:
        raise ForensicsError(f"--taps {taps} is out of range; give 1 to 4096 filter taps per stage")
    policy = policy.strip().lower()
    if policy not in POLICIES:
        raise ForensicsError(f"--policy {policy!r} is unknown; give fifo or other")
    if not 1 <= rtprio <= 98:
        # 98, not 99: the runqueue competitor runs one priority above the callback thread.
        raise ForensicsError(f"--rtprio {rtprio} is out of range; give 1 to 98")
    if cpu is not None:
        allowed = sorted(os.sched_getaffinity(0))
        if cpu not in allowed:
            raise ForensicsError(f"--cpu {cpu} is not a CPU this process may use; give one of {allowed}")
    io_mode = io_mode.strip().lower()
    if io_mode not in IO_MODES:
        raise ForensicsError(f"--io-mode {io_mode!r} is unknown; give read, write or fsync")
    if not 4 <= io_kib <= 8192 or io_kib % 4:
        raise ForensicsError(f"--io-kib {io_kib} is out of range; give a multiple of 4 from 4 to 8192 KiB")
    fault_kind = fault_kind.strip().lower()
    if fault_kind not in FAULT_KINDS:
        raise ForensicsError(f"--fault-kind {fault_kind!r} is unknown; give minor or major")
    if fault_pages < 0:
        raise ForensicsError(f"--fault-pages {fault_pages} is negative; give 0 or more pages")
    episode_ns = round(episode_ms * 1e6)
    if not 0 < episode_ns <= MAX_EPISODE_NS:
        raise ForensicsError(f"--episode-ms {episode_ms:g} is out of range; give more than 0 and at most 2000")
    if duration_ns is not None and duration_ns <= 0:
        raise ForensicsError("--duration must be longer than zero")
    # Episodes land at least 0.75 x spacing apart (the schedule adds up to a quarter of the spacing as
    # seeded jitter); each needs its own length plus 50 ms of clean cycles after it for the effects (a
    # missed deadline, the lock holder going back to sleep) to settle before the next one.
    needed_ns = (episode_ns + 50_000_000) * 4 // 3
    if sum(counts.values()) > 1 and spacing_ns < needed_ns:
        raise ForensicsError(
            f"--spacing {spacing_ns / 1e6:g}ms is too short for {episode_ms:g} ms episodes; "
            f"give at least {needed_ns / 1e6:.0f}ms"
        )
    if counts.get("io"):
        check_io_dir(io_dir, "io")
    if counts.get("fault") and fault_kind == "major":
        check_io_dir(io_dir, "major fault")
    if duration_ns is None and not any(counts.values()):
        duration_ns = DEFAULT_CLEAN_DURATION_NS
    return LabSettings(
        rate=rate,
        quantum=quantum,
        episodes=counts,
        episode_ns=episode_ns,
        spacing_ns=spacing_ns,
        seed=seed,
        duration_ns=duration_ns,
        topology=topology,
        stages=stages,
        taps=taps,
        policy=policy,
        rtprio=rtprio,
        cpu=cpu,
        io_mode=io_mode,
        io_dir=io_dir,
        io_kib=io_kib,
        fault_kind=fault_kind,
        fault_pages=fault_pages,
        truth=truth,
        quiet=quiet,
    )
