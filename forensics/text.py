"""Text for a terminal: what the recorded programs and the user typed, made safe to print.

Light on purpose (no pandas): the CLI's error printer uses it before any command is imported.
"""

from __future__ import annotations


def printable(text: str) -> str:
    """`text` with what a terminal would act on escaped: control characters (ESC, BEL, newlines, tabs),
    format and other non-printable code points, as Python writes them (\\x1b, \\n, \\u200b). Thread and
    process names come from the recorded programs, which may set them to anything (PR_SET_NAME: 15 bytes,
    any but NUL), and paths from the user; printed raw, an ESC sequence can retitle or rewrite the
    terminal, and a newline breaks a table's rows or a one-line error in two."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
