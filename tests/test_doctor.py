"""forensics doctor: every line has a value, a rating and a why; missing files never raise."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from samplers.capabilities import Roots, build_report, sources_summary
from samplers.ebpf.bcc_import import BccUnavailable, import_bcc

RunModule = Callable[..., subprocess.CompletedProcess[str]]
ITEMS = {
    "kernel",
    "preemption model",
    "threaded IRQs",
    "CONFIG_HZ",
    "schedstats",
    "delay accounting",
    "taskstats",
    "tracefs",
    "eBPF (BCC)",
    "RT throttling",
    "CPU governor",
    "core types",
    "/dev/cpu_dma_latency",
    "vm.swappiness",
}


def empty_roots(tmp_path: Path) -> Roots:
    for name in ("proc", "sys", "dev", "boot"):
        (tmp_path / name).mkdir()
    return Roots(
        proc=str(tmp_path / "proc"), sys=str(tmp_path / "sys"), dev=str(tmp_path / "dev"), boot=str(tmp_path / "boot")
    )


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_nothing_there_is_unknown_not_a_crash(tmp_path: Path) -> None:
    checks = build_report(empty_roots(tmp_path), live=False)
    names = {c.name for c in checks}
    assert names >= ITEMS
    for c in checks:
        assert c.value and c.why and c.rating in {"good", "bad", "warn", "unknown", "info"}
        assert c.aspect in {"audio", "forensics"}
    by_name = {c.name: c for c in checks}
    assert by_name["schedstats"].rating == "unknown"
    assert by_name["delay accounting"].rating == "unknown"
    assert by_name["tracefs"].rating == "bad"  # no /sys/kernel/tracing at all
    assert sources_summary(checks)["schedstats"] is None


def test_canned_machine(tmp_path: Path) -> None:
    roots = empty_roots(tmp_path)
    proc, sys_ = Path(roots.proc), Path(roots.sys)
    config = "CONFIG_PREEMPT_RT=y\nCONFIG_TASK_DELAY_ACCT=y\n# CONFIG_SCHEDSTATS is not set\nCONFIG_HZ=1000\n"
    (proc / "config.gz").write_bytes(gzip.compress(config.encode()))
    write(proc / "sys/kernel/task_delayacct", "1\n")
    write(proc / "sys/kernel/sched_rt_runtime_us", "-1\n")
    write(proc / "sys/kernel/sched_rt_period_us", "1000000\n")
    write(proc / "sys/vm/swappiness", "60\n")
    write(proc / "swaps", "Filename Type Size Used Priority\n/swapfile file 1048572 0 -2\n")
    write(proc / "cmdline", "quiet threadirqs\n")
    write(sys_ / "devices/cpu_core/cpus", "0-7\n")
    write(sys_ / "devices/cpu_atom/cpus", "8-15\n")
    for cpu in (0, 1):
        write(sys_ / f"devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor", "performance\n")
    (sys_ / "kernel/tracing/events").mkdir(parents=True)
    by_name = {c.name: c for c in build_report(roots, live=False)}
    assert (by_name["preemption model"].value, by_name["preemption model"].rating) == ("PREEMPT_RT", "good")
    assert by_name["threaded IRQs"].rating == "good"
    assert (by_name["schedstats"].value, by_name["schedstats"].rating) == ("not compiled in", "bad")
    assert by_name["delay accounting"].rating == "good"
    assert by_name["CONFIG_HZ"].value == "1000"
    assert by_name["tracefs"].rating == "good"
    assert by_name["RT throttling"].rating == "warn"
    assert by_name["CPU governor"].rating == "good"
    assert "P-core: 0-7" in by_name["core types"].value and by_name["core types"].rating == "warn"
    assert by_name["vm.swappiness"].rating == "warn"  # swap is active and swappiness high
    assert by_name["/dev/cpu_dma_latency"].value == "absent"


def test_dynamic_preemption_reads_the_boot_choice(tmp_path: Path) -> None:
    roots = empty_roots(tmp_path)
    config = "CONFIG_PREEMPT_DYNAMIC=y\nCONFIG_PREEMPT_NONE=y\n"
    (Path(roots.proc) / "config.gz").write_bytes(gzip.compress(config.encode()))
    write(Path(roots.proc) / "cmdline", "preempt=full\n")
    check = next(c for c in build_report(roots, live=False) if c.name == "preemption model")
    assert (check.value, check.rating) == ("full (PREEMPT_DYNAMIC)", "good")
    write(Path(roots.proc) / "cmdline", "quiet\n")
    check = next(c for c in build_report(roots, live=False) if c.name == "preemption model")
    assert check.rating == "bad" and "preempt=full" in check.why


def test_cli_json_on_missing_files(tmp_path: Path, run_module: RunModule) -> None:
    roots = empty_roots(tmp_path)
    result = run_module(
        "forensics", "doctor", "--json", "--no-live", "--proc", roots.proc, "--sys", roots.sys, "--dev", roots.dev
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    body = json.loads(result.stdout)
    assert body["format_version"] == 1 and body["main"] == "checks"
    checks = body["sections"]["checks"]
    assert {c["name"] for c in checks} >= ITEMS
    assert all(set(c) == {"name", "value", "rating", "aspect", "why"} for c in checks)


def test_cli_text(run_module: RunModule) -> None:
    result = run_module("forensics", "doctor", "--no-live")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) >= len(ITEMS)
    assert any("preemption model" in line for line in lines)


@pytest.mark.needs_root  # taskstats and the BCC probes
def test_live_probes_as_root() -> None:
    by_name = {c.name: c for c in build_report()}
    assert by_name["taskstats"].rating == "good", by_name["taskstats"]
    assert "struct version" in by_name["taskstats"].value
    try:
        import_bcc()
    except BccUnavailable:
        assert by_name["eBPF (BCC)"].rating == "bad"  # and it says why
        return
    assert by_name["eBPF (BCC)"].rating == "good", by_name["eBPF (BCC)"]


def test_the_report_fits_100_columns(run_module) -> None:
    result = run_module("forensics", "doctor", "--no-live")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) > 10 and max(len(line) for line in lines) <= 100


def test_fail_on_exits_1_only_when_a_check_has_that_rating(tmp_path: Path, run_module: RunModule) -> None:
    roots = empty_roots(tmp_path)
    where = ("--no-live", "--proc", roots.proc, "--sys", roots.sys, "--dev", roots.dev)
    (Path(roots.proc) / "config.gz").write_bytes(gzip.compress(b"# CONFIG_SCHEDSTATS is not set\n"))
    listed = run_module("forensics", "doctor", "--json", *where)
    assert listed.returncode == 0, listed.stderr  # without --fail-on a BAD row is no failure
    ratings = {c["name"]: c["rating"] for c in json.loads(listed.stdout)["sections"]["checks"]}
    assert ratings["schedstats"] == "bad"
    for args in (("--fail-on", "bad"), ("--fail-on", "bad", "--json"), ("--fail-on", "warn")):
        result = run_module("forensics", "doctor", *args, *where)
        assert result.returncode == 1 and "schedstats" in result.stdout and not result.stderr
    good = {name for name, rating in ratings.items() if rating not in {"bad", "warn"}}
    assert good  # and those alone never fail: --fail-on looks at the ratings, not at the presence of rows


@pytest.mark.needs_root  # runuser opens a session of another user
def test_real_time_limits_are_judged_for_the_engine_user(run_module: RunModule) -> None:
    def limits(*args: str, env: dict[str, str] | None = None) -> dict[str, dict]:
        from tests.helpers import child_env

        result = subprocess.run(
            [sys.executable, "-m", "forensics", "doctor", "--json", *args],
            capture_output=True, text=True, timeout=180, env=dict(child_env(), **(env or {})),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return {
            c["name"]: c for c in json.loads(result.stdout)["sections"]["checks"] if c["name"].startswith("RLIMIT_")
        }

    own = limits()
    assert own["RLIMIT_RTPRIO"]["rating"] == "good" and "root" in own["RLIMIT_RTPRIO"]["value"]
    # nobody gets no real-time priority from pam_limits here: root's limits would have hidden that.
    for checked in (limits("--user", "nobody"), limits(env={"SUDO_USER": "nobody"})):
        assert checked["RLIMIT_RTPRIO"]["value"] == "0 (user nobody)"
        assert checked["RLIMIT_RTPRIO"]["rating"] == "bad"
        assert checked["RLIMIT_MEMLOCK"]["value"].endswith(" (user nobody)")
    unknown = limits("--user", "no-such-user-here")
    assert unknown["RLIMIT_RTPRIO"]["rating"] == "unknown"


def test_values_print_whole() -> None:
    from forensics.cli.doctor import doctor

    long = "x" * 60 + " " + "y" * 60 + " end-of-the-value"
    fake = [build_report(live=False)[0]]
    fake[0] = type(fake[0])(fake[0].name, long, fake[0].rating, fake[0].aspect, fake[0].why)
    from unittest import mock

    from click.testing import CliRunner

    with mock.patch("forensics.cli.doctor.build_report", return_value=fake):
        out = CliRunner().invoke(doctor, ["--no-live"]).output
    assert "end-of-the-value" in out and "..." not in out
    assert max(len(line) for line in out.splitlines()) <= 100
