"""Capture bytes built by hand for the damage tests and bench/resync_bench.py: records with valid CRCs,
garbage between them, and the crafted garbage that made finding the next intact record quadratic (issue
23 item 8): fake table headers every few bytes, each claiming to run to the end of the file."""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

from capture.format import _HEADER, _RECORD, MAGIC, TAG_META, TAG_TABLE, TAG_TRAILER, record_crc

META = b'{"tool": "crafted"}'
TRAILER = b'{"end_reason": "crafted", "rows": {}}'


def record(version: int, tag: bytes, payload: bytes) -> bytes:
    return _RECORD.pack(tag, len(payload), record_crc(version, tag, len(payload), payload)) + payload


def encode(version: int, recs: list[tuple[bytes, bytes]]) -> bytes:
    """A capture of these (tag, payload) records, each with its right CRC."""
    return _HEADER.pack(MAGIC, version, 0) + b"".join(record(version, tag, payload) for tag, payload in recs)


def with_garbage(garbage: bytes, version: int = 2) -> bytes:
    """Metadata, then `garbage` where records should be, then a trailer: what reads back is the trailer."""
    return encode(version, [(TAG_META, META)]) + garbage + record(version, TAG_TRAILER, TRAILER)


def random_garbage(size: int, seed: int = 23) -> bytes:
    return random.Random(seed).randbytes(size)


def crafted_garbage(size: int, spacing: int = 64, *, lead: int = 0, tail: int = 0) -> bytes:
    """`size` bytes of fake table headers, one every `spacing` bytes (12 at least), each with a length that
    runs to the end of these bytes and `tail` more, when they start `lead` bytes into a file; the first
    one's tag is zeroed (the damage the reader meets first). A reader that checks each fake record's CRC
    over the length it claims reads ~size**2 / (2 * spacing) bytes."""
    body = bytearray(size)
    end = lead + size + tail
    for at in range(0, size - _RECORD.size + 1, spacing):
        struct.pack_into("<4sII", body, at, TAG_TABLE, end - (lead + at) - _RECORD.size, 0)
    body[0:4] = bytes(4)
    return bytes(body)


def crafted(size: int, spacing: int = 64, version: int = 2) -> bytes:
    """with_garbage() of crafted_garbage() whose fake records each claim to run up to the trailer."""
    lead = len(encode(version, [(TAG_META, META)]))
    return with_garbage(crafted_garbage(size, spacing, lead=lead), version)


def many_holes(count: int, gap: int = 4096, version: int = 2) -> bytes:
    """`count` damaged records, each claiming to run to the end of the file and followed by `gap` bytes
    of an intact metadata record: every hole starts with a long record whose check must not read it."""
    meta = record(version, TAG_META, b'{"pad": "' + b"x" * max(0, gap - 24) + b'"}')
    unit = len(meta) + _RECORD.size
    head = encode(version, [(TAG_META, META)])
    tail = record(version, TAG_TRAILER, TRAILER)
    end = len(head) + count * unit + len(tail)
    parts = [head]
    for k in range(count):
        at = len(head) + k * unit
        parts.append(_RECORD.pack(TAG_TABLE, end - at - _RECORD.size - 1, 0) + meta)
    parts.append(tail)
    return b"".join(parts)


@contextmanager
def crc_bytes_counted() -> Iterator[list[int]]:
    """While inside: every byte the capture reader hands to CRC-32 is counted (the list's one item): the
    work of reading, as a number that does not depend on the machine's speed or load."""
    import capture.format

    counted = [0]

    def crc32(data: bytes | memoryview, value: int = 0) -> int:
        counted[0] += len(data)
        return zlib.crc32(data, value)

    real = capture.format.zlib
    capture.format.zlib = SimpleNamespace(crc32=crc32)  # type: ignore[assignment]
    try:
        yield counted
    finally:
        capture.format.zlib = real
