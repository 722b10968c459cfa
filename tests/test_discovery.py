"""Target discovery on a canned /proc: matching, descendants, pid reuse, zombies."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from samplers.procfs import ProcPaths
from samplers.targets import Discovery, TargetSpec
from tests.fakeproc import FakeProc, stat_line


def _proc(tmp_path: Path) -> FakeProc:
    fake = FakeProc(tmp_path / "proc")
    fake.add_thread(100, 100, comm="jackd", process_comm="jackd", cmdline="jackd -R -d dummy")
    fake.add_thread(100, 101, comm="jackd-rt")
    fake.add_thread(200, 200, comm="bash", process_comm="bash", cmdline="bash")
    return fake


def _set_ppid(fake: FakeProc, pid: int, ppid: int, comm: str, starttime: int = 1000, state: str = "S") -> None:
    line = stat_line(pid, pid, comm=comm, starttime=starttime, state=state).split(" ")
    line[3] = str(ppid)  # field 4
    (fake.root / str(pid) / "stat").write_text(" ".join(line))


def test_match_on_name_or_command_line_and_descendants_as_they_appear(tmp_path: Path) -> None:
    fake = _proc(tmp_path)
    spec = TargetSpec(match=re.compile(r"-d dummy"), children=True)
    discovery = Discovery(spec, ProcPaths(str(fake.root)))
    found = discovery.initial()
    assert [(p.pid, p.why) for p in found] == [(100, "match")]
    fake.add_thread(300, 300, comm="client", process_comm="client", cmdline="client")
    _set_ppid(fake, 300, 100, "client")
    fake.add_thread(301, 301, comm="grandchild", process_comm="grandchild", cmdline="gc")
    _set_ppid(fake, 301, 300, "grandchild")
    assert {(p.pid, p.why) for p in discovery.scan()} == {(300, "child"), (301, "child")}
    assert discovery.scan() == []  # known now: not found twice


def test_a_reused_pid_is_not_the_target(tmp_path: Path) -> None:
    fake = _proc(tmp_path)
    discovery = Discovery(TargetSpec(pids=[100]), ProcPaths(str(fake.root)))
    discovery.initial()
    assert discovery.still_alive(100)
    _set_ppid(fake, 100, 1, "imposter", starttime=99999)  # same pid, another process
    assert not discovery.still_alive(100)


def test_a_zombie_target_counts_as_exited(tmp_path: Path) -> None:
    fake = _proc(tmp_path)
    discovery = Discovery(TargetSpec(pids=[100]), ProcPaths(str(fake.root)))
    discovery.initial()
    _set_ppid(fake, 100, 1, "jackd", state="Z")
    assert not discovery.still_alive(100)


def test_a_process_caught_before_exec_is_looked_at_again(tmp_path: Path, monkeypatch) -> None:
    fake = _proc(tmp_path)
    discovery = Discovery(TargetSpec(match=re.compile("^synth$")), ProcPaths(str(fake.root)))
    assert discovery.initial() == []
    # A young process still carrying its parent's name (forked, not yet exec'd)...
    import samplers.targets as targets

    monkeypatch.setattr(targets.time, "clock_gettime", lambda _clock: 10.0)  # 1000 ticks after boot
    fake.add_thread(400, 400, comm="bash", process_comm="bash", cmdline="bash")
    _set_ppid(fake, 400, 200, "bash", starttime=1000)
    assert discovery.scan() == []
    # ...then exec'd: the next scan finds it.
    _set_ppid(fake, 400, 200, "synth", starttime=1000)
    assert [p.pid for p in discovery.scan()] == [400]


def test_the_recorders_ancestors_are_never_matched_unless_named_by_pid(tmp_path: Path) -> None:
    # `bash -c 'timeout 8 catch-load --match jackd'`: the pattern is in the command lines of bash and
    # timeout too; they launched the recorder and are not what the user asked to record.
    fake = _proc(tmp_path)
    fake.add_thread(400, 400, comm="bash", process_comm="bash", cmdline="bash -c timeout 8 catch-load --match jackd")
    _set_ppid(fake, 400, 200, "bash")
    fake.add_thread(450, 450, comm="timeout", process_comm="timeout", cmdline="timeout 8 catch-load --match jackd")
    _set_ppid(fake, 450, 400, "timeout")
    fake.add_thread(500, 500, comm="catch-load", process_comm="catch-load", cmdline="catch-load --match jackd")
    _set_ppid(fake, 500, 450, "catch-load")
    spec = TargetSpec(match=re.compile("jackd"), exclude={500}, recorder_pid=500)
    discovery = Discovery(spec, ProcPaths(str(fake.root)))
    assert discovery.ancestors >= {400, 450}
    assert [(p.pid, p.why) for p in discovery.initial()] == [(100, "match")]
    assert discovery.adopt(450, "engine") is None
    # A process that only looks like an ancestor's command line is still matched.
    fake.add_thread(600, 600, comm="timeout", process_comm="timeout", cmdline="timeout 8 jackd -d dummy")
    assert [(p.pid, p.why) for p in discovery.scan()] == [(600, "match")]
    # Named by pid, an ancestor is recorded.
    named_spec = TargetSpec(pids=[450], match=re.compile("jackd"), exclude={500}, recorder_pid=500)
    named = Discovery(named_spec, ProcPaths(str(fake.root)))
    assert {(p.pid, p.why) for p in named.initial()} == {(450, "pid"), (100, "match"), (600, "match")}


class _ExecClock:
    """samplers/targets.py's clocks, fake: sleeping moves time on and does what was due by then (the exec finishing),
    so the test's outcome does not hang on when a real thread gets a CPU (a thread with a 2.5 ms sleep was not run
    within the 10 ms wait in one CI run on a busy machine)."""

    CLOCK_BOOTTIME = time.CLOCK_BOOTTIME

    def __init__(self, boot_s: float) -> None:
        self.now_ns = 0
        self.boot_s = boot_s
        self.due: list[tuple[int, Callable[[], None]]] = []

    def monotonic_ns(self) -> int:
        return self.now_ns

    def clock_gettime(self, clock: int) -> float:
        assert clock == time.CLOCK_BOOTTIME
        return self.boot_s

    def sleep(self, seconds: float) -> None:
        self.now_ns += round(seconds * 1e9)
        for at_ns, action in [d for d in self.due if d[0] <= self.now_ns]:
            self.due.remove((at_ns, action))
            action()


def test_a_process_inside_exec_is_read_again_until_its_arguments_are_there(tmp_path: Path, monkeypatch) -> None:
    """catch-load's launched command can be found while its execve() sets up its memory: the command line reads
    empty and the comm is the old one (samplers/targets.py EXEC_SETTLE_NS). Read again, both are the new ones;
    a kernel thread's or an old process's empty command line is not waited for."""
    from samplers import targets
    from samplers.targets import EXEC_SETTLE_NS, read_process

    fake = _proc(tmp_path)
    clock = _ExecClock(boot_s=10.5)  # the processes below started 1000 ticks after boot: 0.5 s ago
    monkeypatch.setattr(targets, "time", clock)
    fake.add_thread(400, 400, comm="catch-load", process_comm="catch-load", cmdline="x")
    (fake.root / "400" / "cmdline").write_bytes(b"")

    def exec_done() -> None:
        (fake.root / "400" / "stat").write_text(stat_line(400, 400, comm="known_work.py"))
        (fake.root / "400" / "cmdline").write_bytes(b"python3\0known_work.py\0")

    clock.due.append((EXEC_SETTLE_NS // 4, exec_done))
    found = read_process(ProcPaths(str(fake.root)), 400)
    assert found is not None
    assert (found[0].comm, found[1]) == ("known_work.py", "python3 known_work.py")
    assert EXEC_SETTLE_NS // 4 <= clock.now_ns < EXEC_SETTLE_NS  # read again soon after, not at the deadline

    def took_ns(pid: int) -> int:
        began = clock.now_ns
        found = read_process(ProcPaths(str(fake.root)), pid)
        assert found is not None and found[1] == ""
        return clock.now_ns - began

    kernel_thread = stat_line(500, 500, comm="kworker/0:1").replace(" 4194368 ", f" {0x00208040} ")
    fake.add_thread(500, 500, comm="kworker/0:1", process_comm="kworker/0:1", cmdline="x")
    (fake.root / "500" / "stat").write_text(kernel_thread)
    (fake.root / "500" / "cmdline").write_bytes(b"")
    assert took_ns(500) == 0
    (fake.root / "400" / "cmdline").write_bytes(b"")  # blanked: waited for while young, not once old
    assert took_ns(400) >= EXEC_SETTLE_NS
    clock.boot_s = 1000.0
    assert took_ns(400) == 0
