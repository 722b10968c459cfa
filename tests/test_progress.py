"""Progress shows on a terminal only, in one line that fits 100 columns, without colour codes."""

from __future__ import annotations

import io

from forensics.progress import Progress


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_fits_and_is_cleared():
    stream = FakeTerminal()
    with Progress("forensics report", 3, stream=stream) as progress:
        progress.step("reading the capture")
        progress.step("finding stalls in a very long thread name " + "x" * 200)
    text = stream.getvalue()
    assert "forensics report: reading the capture (1/3, " in text
    assert "(2/3" not in text or len(text.split("\r")[2]) <= 99
    assert all(len(part) <= 100 for part in text.split("\r"))
    assert "\x1b" not in text  # no colour or cursor codes
    assert text.endswith("\r")  # the last thing written clears the line


def test_no_progress_when_not_a_terminal():
    stream = io.StringIO()
    with Progress("forensics plot", 2, stream=stream) as progress:
        progress.step("drawing")
    assert stream.getvalue() == ""
