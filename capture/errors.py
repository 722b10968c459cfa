"""The one error type for user-facing failures.

Anything the user can fix (a bad path, a capture from a newer version, a missing permission) raises
`ForensicsError` with one sentence saying what was wrong and what to do. The CLI catches it once and
prints it as a single line with a non-zero exit; everything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class ForensicsError(Exception):
    """A failure the user can act on; `str(err)` is the whole message."""

    exit_code = 2


class CaptureFormatError(ForensicsError):
    """The file is not a capture, is damaged before any data, or comes from a newer format."""


class CaptureWarning(UserWarning):
    """The capture reads back, but not all of it: truncated, no trailer, a damaged record."""
