"""Names the recorded programs chose reach the terminal escaped, and no library warning turns into a crash.

A thread can name itself anything but NUL (PR_SET_NAME); Wine, Bitwig and localized plugins use names
outside ASCII. Checked end to end on a synthetic capture (tests/synth.py) whose threads are named with a
terminal-title escape (ESC ] 0 ; ... BEL), a newline, and in Chinese.
"""

from __future__ import annotations

import pandas as pd
import pytest

from capture.format import CaptureWriter
from forensics.text import printable
from tests import synth
from tests.synth import MS, T0, Episode, Timeline

RETITLE = "\x1b]0;pwned\x07"  # sets the terminal's title where it is printed raw
NEWLINE = "two\nlines"
CHINESE = "音频"  # "audio": a glyph DejaVu Sans (matplotlib's default font) does not have


def test_printable_escapes_what_a_terminal_acts_on() -> None:
    assert printable(RETITLE) == "\\x1b]0;pwned\\x07"
    assert printable(NEWLINE) == "two\\nlines"
    assert printable("tab\there") == "tab\\there"
    assert printable("zero\u200bwidth") == "zero\\u200bwidth"  # a format character: invisible, yet there
    assert printable(CHINESE) == CHINESE  # printable text is left alone
    assert printable("lab-audio") == "lab-audio"


@pytest.fixture(scope="module")
def named(tmp_path_factory: pytest.TempPathFactory) -> str:
    hogs = [Timeline(tid=1002 + i, comm=name, cpu=0) for i, name in enumerate((RETITLE, NEWLINE, CHINESE))]
    for i, hog in enumerate(hogs):
        synth.busy(hog, t0=T0 + i * 700 * MS, duration_ns=600 * MS)
    cap = synth.audio_capture([Episode("run", 100, 10), Episode("lock", 300, 15)], seconds=2.5, extra=hogs)
    path = tmp_path_factory.mktemp("names") / "names.ssf"
    with CaptureWriter(path, cap.meta) as writer:
        writer.append("samples", cap.samples)
        writer.append("threads", cap.table("threads"))
        writer.append("truth", cap.truth)
    return str(path)


@pytest.mark.parametrize("command", ["stalls", "summarize", "spikes", "info", "jitter"])
def test_text_views_print_no_control_characters(run_module, named, command) -> None:  # type: ignore[no-untyped-def]
    result = run_module("forensics", command, named)  # not a terminal: no colour of its own either
    assert result.returncode == 0, result.stderr
    controls = {ch for ch in result.stdout if not ch.isprintable() and ch != "\n"}
    assert not controls, f"{command} printed {controls!r}"
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr


def test_the_names_are_shown_escaped_where_threads_are_listed(run_module, named) -> None:  # type: ignore[no-untyped-def]
    result = run_module("forensics", "summarize", named)
    assert result.returncode == 0, result.stderr
    assert "\\x1b]0;pwned\\x07" in result.stdout or "two\\nlines" in result.stdout, result.stdout[-2000:]


def test_a_plot_with_a_name_its_font_cannot_draw_is_drawn(run_module, named, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """matplotlib warns of the missing glyph: printed as Python prints warnings, never a TypeError."""
    out = tmp_path / "names.png"
    result = run_module("forensics", "plot", named, "-o", str(out), timeout=300)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and out.stat().st_size > 0


def test_an_error_message_with_a_newline_in_a_path_is_one_line(run_module, tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = run_module("forensics", "info", str(tmp_path / "no\nsuch.ssf"))
    assert result.returncode != 0
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "no\\nsuch.ssf" in result.stderr


def test_a_foreign_warning_is_printed_not_raised() -> None:
    """The printer has warnings.showwarning's six-argument signature."""
    import io
    import sys
    import warnings

    from forensics.cli import _show_warning

    saved, sys.stderr = sys.stderr, io.StringIO()
    try:
        _show_warning(UserWarning("Glyph 38899 missing"), UserWarning, "font.py", 7, None, None)
        printed = sys.stderr.getvalue()
    finally:
        sys.stderr = saved
    assert "font.py:7: UserWarning: Glyph 38899 missing" in printed
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        warnings.simplefilter("always")
        pd.Series([1e308]).astype(float) * 10  # numpy's overflow warning goes through the same printer
