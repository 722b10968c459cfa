"""Issue 23's acceptance sweep: every command x every bad option value, one line each, exit 2, no hang.

The options come from click's own command objects (the `forensics` group, `forensics lab` among them, and
catch-load), classified by their type or metavar into the kinds of bad value issue 23 names: a regular
expression that does not compile, a number that is not finite or out of range, a --tid that is not a
positive integer, a duration without its unit or garbage, a --span that is none, a CPU the recorder may
not use, a file to read that is not a regular file. A new option of a known type is swept without a word
here; one of no known kind fails `test_every_option_taking_a_value_is_swept_or_excused` until it is given a
kind or an excuse.

Every case runs in this process (the commands' own `main`, as the console scripts call it), under an alarm:
a case that blocks (a FIFO opened for reading) is a failure, not a hung suite. Nothing may be written: the
outputs named go to a directory that must stay empty.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from forensics.cli.options import Duration, Regex
from tests.helpers import REPO, one_error_line

CAPTURE = str(REPO / "captures" / "lab-clean.ssf")
TIMEOUT_S = 30.0  # one case; they take 0.01-0.5 s (those that read the capture first the most)

# Bad values by kind. `{fifo}`, `{dir}` are made per case (a named pipe, a directory).
REGEX_BAD = ("(", "[", "*")
NOT_FINITE = ("nan", "inf", "1e400")
DURATION_BAD = ("5", "x", "nan", "inf", "1e400", "-1", "0", "1e400s")
SPAN_BAD = ("5", "x", "2ms..1ms", "nan..", "..x", "1e400s..")
TID_BAD = ("x", "0", "-1", "1.5", *NOT_FINITE)
CPU_BAD = ("-1", "4096", "x")
PICK_BAD = ("x",)  # an option whose metavar lists its values (chain|series)
SIZE_BAD = ("x", "-1", "0", "nan", "inf", "1e400")
INPUT_BAD = ("{fifo}", "{dir}", "/dev/zero")
STRING_KINDS = {  # STRING options by metavar: the kinds their text has
    "REGEX": REGEX_BAD,
    "DURATION|off": DURATION_BAD,
    "DURATION|off|auto": DURATION_BAD,
    "SIZE": SIZE_BAD,
    "FROM..TO": SPAN_BAD,
    "CAUSE:N,...": ("x", "run:-1", "run:x", "run:1e400"),
    "RULE": ("x", "stall>5", "stall>x", "stall:bogus"),
}

# Options that take a value of no kind above, each with why it is not swept.
UNSWEPT = {
    ("dump", "--table"): "a table's name: an unknown one is refused once the capture is read (test_cli_views)",
    ("doctor", "--user"): "a user's name: doctor reports on one that does not exist, it does not fail",
    ("doctor", "--proc"): "a root to read the kernel's files under (tests point it at a fake /proc)",
    ("doctor", "--sys"): "as --proc",
    ("doctor", "--dev"): "as --proc",
    ("restore", "--proc"): "as doctor --proc",
    ("lab", "--io-dir"): "a directory for scratch files: checked when an io episode opens it",
    ("catch-load", "--jack"): "a JACK server's name: any text",
    ("catch-load", "--lab"): "the lab's own command line: its values are swept as `forensics lab`",
}
# Paths written (or, for restore, a state directory): test_output_safety's (links, FIFOs, devices at the name).
OUTPUTS = ("-o", "--output", "--truth", "--state-dir")
# (command, option, value) pairs whose value is valid for that option, with why.
VALID = {
    ("lab", "--seed", "-1"): "any integer seeds the schedule",
    ("lab", "--seed", "0"): "any integer seeds the schedule",
    ("lab", "--fault-pages", "0"): "0 is the default: no least number of pages",
    ("catch-load", "--rt-priority", "0"): "0 leaves the sampler at SCHED_OTHER (documented)",
}

# What each command needs besides the option swept; outputs go to {out}, which must stay empty.
BASE: dict[str, tuple[str, ...]] = {
    "info": (CAPTURE,),
    "dump": (CAPTURE,),
    "stalls": (CAPTURE, "-o", "{out}/x.json"),
    "xruns": (CAPTURE, "-o", "{out}/x.json"),
    "spikes": (CAPTURE, "-o", "{out}/x.json"),
    "summarize": (CAPTURE, "-o", "{out}/x.json"),
    "system": (CAPTURE, "-o", "{out}/x.json"),
    "jitter": (CAPTURE, "-o", "{out}/x.json"),
    "compare": (CAPTURE, CAPTURE, "-o", "{out}/x.json"),
    "plot": (CAPTURE, "-o", "{out}/x.png"),
    "report": (CAPTURE, "-o", "{out}/x.html"),
    "export": (CAPTURE, "--format", "perfetto", "-o", "{out}/x.json"),
    "lab": ("--duration", "100ms", "--episodes", "none", "--truth", "{out}/truth.json", "--quiet"),
    "restore": ("--state-dir", "{out}/state"),
    "doctor": (),
    "catch-load": ("-q", "-o", "{out}/x.ssf", "-d", "100ms"),
}
TAIL = {"catch-load": ("--", "true")}  # its command comes last
RING_BASE = ("-q", "-d", "100ms", "--ring", "60s", "-o")  # every catch-load case is run with this base too


def _commands() -> dict[str, click.Command]:
    from forensics.cli import COMMANDS, cli
    from forensics.cli.catch_load import catch_load

    with click.Context(cli) as ctx:
        commands = {name: cli.get_command(ctx, name) for name in COMMANDS}
    commands["catch-load"] = catch_load
    return {name: command for name, command in commands.items() if command is not None}


def _range_bad(kind: click.types._NumberRangeBase, is_int: bool) -> tuple[str, ...]:
    """nan, inf, 1e400, and -1, 0 and a value above the range where they are outside it."""
    values = list(NOT_FINITE)
    for candidate in (-1, 0):
        low = kind.min is not None and (candidate < kind.min or (kind.min_open and candidate == kind.min))
        if low:
            values.append(str(candidate))
    if kind.max is not None:
        values.append(str(int(kind.max) + 1 if is_int else kind.max * 10 + 1))
    return tuple(values)


def bad_values(command: str, param: click.Parameter) -> tuple[str, ...] | None:
    """The bad values of one parameter by its type or metavar; None for no kind (UNSWEPT must say why)."""
    kind = param.type
    name = param.opts[-1] if param.opts else param.name
    if isinstance(param, click.Argument):
        return INPUT_BAD if isinstance(kind, click.Path) else None
    if name == "--tid":
        return TID_BAD
    if name == "--cpu":
        return CPU_BAD
    if isinstance(kind, Regex):
        return REGEX_BAD
    if isinstance(kind, Duration):
        return DURATION_BAD
    if isinstance(kind, click.IntRange | click.FloatRange):
        return _range_bad(kind, isinstance(kind, click.IntRange))
    if kind is click.INT:
        return (*NOT_FINITE, "x", "-1", "0")
    if kind is click.FLOAT:
        return (*NOT_FINITE, "x")
    if isinstance(kind, click.Choice):
        return ("x",)
    if isinstance(kind, click.Path):
        return None if name in OUTPUTS else INPUT_BAD
    metavar = getattr(param, "metavar", None) or ""
    if metavar in STRING_KINDS:
        return STRING_KINDS[metavar]
    if "|" in metavar and "[" not in metavar:
        return PICK_BAD
    return None


@dataclass(frozen=True)
class Case:
    command: str
    option: str | None  # None: a positional argument (`position`: which)
    value: str
    names: tuple[str, ...] = ()  # how the error line may name the option: its opts, or the argument's name
    position: int = 0
    ring: bool = False  # catch-load as a flight recorder (--ring: -o is a directory it makes)

    @property
    def id(self) -> str:
        command = "catch-load --ring" if self.ring else self.command
        return f"{command} {self.option or self.names[0]} {self.value}"


def _sweep() -> list[Case]:
    cases = []
    for command, obj in _commands().items():
        for param in obj.params:
            if isinstance(param, click.Option) and (param.is_flag or param.count or param.hidden):
                continue
            option = param.opts[-1] if isinstance(param, click.Option) else None
            values = bad_values(command, param)
            names = tuple(param.opts) if option else (param.human_readable_name,)
            position = sum(isinstance(p, click.Argument) for p in obj.params[: obj.params.index(param)])
            for value in values or ():
                if (command, option, value) not in VALID:
                    for ring in (False, True) if command == "catch-load" else (False,):
                        cases.append(Case(command, option, value, names, position, ring))
    return cases


CASES = _sweep()


def test_every_option_taking_a_value_is_swept_or_excused() -> None:
    """A new option is swept by its type, or named in UNSWEPT with why; an excuse for an option that no
    longer exists (or is swept now) is stale."""
    unknown, swept = [], set()
    for command, obj in _commands().items():
        for param in obj.params:
            if isinstance(param, click.Option) and (param.is_flag or param.count or param.hidden):
                continue
            option = param.opts[-1] if isinstance(param, click.Option) else None
            if bad_values(command, param) is None:
                excused = (command, option) in UNSWEPT or option in OUTPUTS or param.name == "command"
                if not excused:
                    unknown.append((command, option))
            else:
                swept.add((command, option))
    assert unknown == [], f"options of no bad-value kind: give them one, or say in UNSWEPT why not: {unknown}"
    assert not swept & set(UNSWEPT), swept & set(UNSWEPT)
    assert {(c, o) for c, o, _ in VALID} <= swept
    assert len(CASES) > 400, len(CASES)


class _Hung(Exception):
    pass


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    def ring(_signum: int, _frame: object) -> None:
        raise _Hung(f"no answer within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class _WouldRun(Exception):
    """The command got past its checks and would now record or run the lab: the value was accepted."""


def _run(main: Callable[[list[str]], None], args: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    code: int | str | None = 0
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err), _alarm(TIMEOUT_S):
        try:
            main(args)
        except SystemExit as stop:
            code = stop.code
    return (code if isinstance(code, int) else 1), err.getvalue()


def _given(case: Case, tmp: Path) -> str:
    """The value as given: the placeholders made paths."""
    return {"{fifo}": str(tmp / "in" / "fifo"), "{dir}": str(tmp / "in")}.get(case.value, case.value)


def _args(case: Case, tmp: Path) -> list[str]:
    value = _given(case, tmp)
    base = [a.replace("{out}", str(tmp / "out")) for a in BASE[case.command]]
    if case.option is None:  # a capture: replaced by the bad path
        base[case.position] = value
        given: list[str] = []
    else:
        given = [case.option, value]
    if case.ring:
        base = [*RING_BASE, str(tmp / "out" / "ring")]
    if case.command == "catch-load":  # --pid and --match are targets, as the command after -- is
        return [*base, *given, *(() if case.option in ("--pid", "--match") else TAIL["catch-load"])]
    return [case.command, *base, *given]  # `forensics lab` too


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "in").mkdir()
    os.mkfifo(tmp_path / "in" / "fifo")
    (tmp_path / "out").mkdir()
    monkeypatch.chdir(tmp_path / "out")  # a default output name lands here too
    monkeypatch.setenv("TMPDIR", str(tmp_path / "out"))

    def would_run(*_args: object, **_kwargs: object) -> None:
        raise _WouldRun

    import forensics.cli.catch_load as catch_load
    import forensics.lab.cli as lab_cli

    monkeypatch.setattr(catch_load, "_switch_on", would_run)  # the first step once every option is checked
    monkeypatch.setattr(lab_cli, "settings_from_params", _checked_then(lab_cli.settings_from_params, would_run))
    return tmp_path


def _checked_then(check: Callable[..., object], then: Callable[..., None]) -> Callable[..., object]:
    def run(*args: object, **kwargs: object) -> object:
        check(*args, **kwargs)
        then()
        return None

    return run


@pytest.mark.parametrize("ring", [False, True], ids=["plain", "ring"])
def test_the_command_lines_swept_are_accepted_but_for_the_bad_value(sandbox: Path, ring: bool) -> None:
    """The base command lines get past every check (to the point where catch-load would start recording
    and the lab would run), so that each case is refused for its own bad value."""
    from forensics.cli import main
    from forensics.cli.catch_load import main as catch_load_main

    out = str(sandbox / "out")
    with pytest.raises(_WouldRun):
        if ring:
            _run(catch_load_main, [*RING_BASE, f"{out}/ring", *TAIL["catch-load"]])
        else:
            _run(catch_load_main, [*(a.replace("{out}", out) for a in BASE["catch-load"]), *TAIL["catch-load"]])
    if not ring:
        with pytest.raises(_WouldRun):
            _run(main, ["lab", *(a.replace("{out}", out) for a in BASE["lab"])])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_bad_option_value_is_one_line_and_exit_2(sandbox: Path, case: Case) -> None:
    from forensics.cli import main
    from forensics.cli.catch_load import main as catch_load_main

    args = _args(case, sandbox)
    run = catch_load_main if case.command == "catch-load" else main
    started = time.monotonic()
    try:
        code, stderr = _run(run, args)
    except _WouldRun:
        pytest.fail(f"accepted: {' '.join(args)}")
    assert code == 2, (code, stderr)
    assert len(stderr.strip().splitlines()) == 1, stderr
    line = one_error_line(stderr)
    given = _given(case, sandbox)
    said = [*case.names, f"'{given}'", f"{case.option} {given}", f" {given}"]
    assert any(word in line for word in said), f"the error is not about {case.id}: {line}"
    assert sorted(os.listdir(sandbox / "out")) == [], "nothing is written on a refused command line"
    assert time.monotonic() - started < TIMEOUT_S
