"""The command lines' help, and the recorder's light start-up (README "Recording: catch-load")."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO, child_env

HEAVY = ("pandas", "matplotlib", "psutil")  # the analysis stack: the recorder writes with pyarrow alone


def _modules_after(entry: str, *args: str) -> tuple[str, list[str]]:
    """Run ENTRY (module:function) with ARGS in a fresh interpreter: (its output, heavy modules loaded)."""
    module, _, function = entry.partition(":")
    code = (
        "import sys\n"
        f"from {module} import {function} as main\n"
        "try:\n"
        f"    main({list(args)!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print('LOADED', sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), cwd=REPO, timeout=60, check=True
    )
    output, _, loaded = done.stdout.rpartition("LOADED ")
    return output, eval(loaded)  # a list literal of module names, printed by the child above


def test_catch_load_help_does_not_import_the_analysis_stack() -> None:
    output, loaded = _modules_after("forensics.cli.catch_load:main", "--help")
    assert "Usage: catch-load" in output
    assert loaded == []


def test_catch_load_help_lists_the_lab(run_module) -> None:
    shown = run_module("forensics.cli.catch_load", "--help")
    assert shown.returncode == 0 and "--lab [LAB OPTIONS]" in shown.stdout


def test_catch_load_lab_help_is_the_labs_under_catch_loads_name(run_module) -> None:
    for argv in (["--lab", "--help"], ["-d", "5s", "--lab", "--episodes", "run:1", "-h"]):
        shown = run_module("forensics.cli.catch_load", *argv)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.startswith("Usage: catch-load [CATCH-LOAD OPTIONS] --lab [OPTIONS]")
        assert "--episodes" in shown.stdout and "--quantum" in shown.stdout  # the lab's own options
    # After `--` the words are the launched command's, --help included: not the lab's help.
    assert not _lab_help_asked(["--", "prog", "--lab", "--help"])


def _lab_help_asked(argv: list[str]) -> bool:
    from forensics.cli.catch_load import _lab_help

    return _lab_help(argv)


def test_forensics_catch_load_points_at_the_recorder(run_module) -> None:
    """`forensics catch-load ...`: the recorder is a command of its own; said in one line, exit 2."""
    shown = run_module("forensics", "catch-load", "-p", "1")
    assert shown.returncode == 2 and "`catch-load --help`" in shown.stderr, shown.stderr
    assert len(shown.stderr.strip().splitlines()) == 1


def test_stalls_help_has_examples(run_module) -> None:
    shown = run_module("forensics", "stalls", "--help")
    assert shown.returncode == 0
    examples = shown.stdout.split("Examples:")[1]
    assert "forensics stalls load.ssf --episodes" in examples
    listed = run_module("forensics", "--help").stdout
    assert "When the watched threads stalled, and why." in listed


def test_man_pages_match_the_help(tmp_path) -> None:
    """docs/man holds one page per command, as docs/make_man.py writes them from the code's help now
    (after a change in a command's help or options: `make man`)."""
    import pytest

    pytest.importorskip("click_man", reason="click-man is a test-time extra ([test]); not installed here")
    sys.path.insert(0, str(REPO / "docs"))
    try:
        from make_man import write_pages
    finally:
        sys.path.remove(str(REPO / "docs"))
    fresh = {page.name: page.read_text() for page in write_pages(tmp_path)}
    committed = {page.name: page.read_text() for page in (REPO / "docs" / "man").glob("*.1")}
    from forensics.cli import COMMANDS

    assert set(fresh) == {"catch-load.1", "forensics.1", *(f"forensics-{name}.1" for name in COMMANDS)}
    stale = sorted(name for name in fresh if committed.get(name) != fresh[name])
    assert not stale, f"{stale} differ from the help: run `make man`"
    assert ".SH SYNOPSIS" in fresh["forensics-stalls.1"] and "\\-\\-episodes" in fresh["forensics-stalls.1"]


def test_shell_completion_completes_commands_and_options() -> None:
    def complete(module: str, var: str, words: str) -> list[str]:
        env = dict(child_env(), **{var: "bash_complete", "COMP_WORDS": words, "COMP_CWORD": "1"})
        done = subprocess.run(
            [sys.executable, "-m", module], capture_output=True, text=True, env=env, cwd=REPO, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert "plain,stalls" in complete("forensics", "_FORENSICS_COMPLETE", "forensics sta")
    assert "plain,--lab" in complete("forensics.cli.catch_load", "_CATCH_LOAD_COMPLETE", "catch-load --la")
