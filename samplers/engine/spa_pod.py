"""SPA POD, the value encoding of PipeWire's native protocol: just enough to speak to the daemon.

Layout (spa/include/spa/pod/pod.h): every value is `u32 size | u32 type | body`, the body padded to 8
bytes (`size` excludes the padding). A Struct's body is its children one after another; an Object's
body is `u32 object type | u32 object id` then properties `u32 key | u32 flags | value`. Little-endian
on every machine PipeWire runs on here (the protocol uses the host's byte order).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

NONE, BOOL, ID, INT, LONG, FLOAT, DOUBLE, STRING, BYTES, RECTANGLE, FRACTION = range(1, 12)
BITMAP, ARRAY, STRUCT, OBJECT, SEQUENCE, POINTER, FD, CHOICE, POD = range(12, 21)

_HEAD = struct.Struct("<II")


class PodError(ValueError):
    """Bytes that are not a well-formed POD (a protocol mismatch or a truncated message)."""


@dataclass
class PodObject:
    type: int
    id: int
    props: list[tuple[int, Any]] = field(default_factory=list)  # a key may repeat (profiler followers)


def _pad(n: int) -> int:
    return (n + 7) & ~7


def parse(buf: bytes | memoryview, offset: int = 0) -> tuple[Any, int]:
    """(value, offset after it, padding included) of the POD at `offset`."""
    if offset + 8 > len(buf):
        raise PodError("truncated POD header")
    size, kind = _HEAD.unpack_from(buf, offset)
    body = offset + 8
    end = body + size
    if end > len(buf):
        raise PodError(f"POD of {size} bytes runs past the message")
    return _body(buf, kind, body, size), body + _pad(size)


def _body(buf: bytes | memoryview, kind: int, body: int, size: int) -> Any:
    if kind == NONE:
        return None
    if kind in (BOOL, INT):
        value = struct.unpack_from("<i", buf, body)[0]
        return bool(value) if kind == BOOL else value
    if kind == ID:
        return struct.unpack_from("<I", buf, body)[0]
    if kind in (LONG, FD):
        return struct.unpack_from("<q", buf, body)[0]
    if kind == FLOAT:
        return struct.unpack_from("<f", buf, body)[0]
    if kind == DOUBLE:
        return struct.unpack_from("<d", buf, body)[0]
    if kind == STRING:
        raw = bytes(buf[body : body + size])
        return raw.split(b"\0", 1)[0].decode(errors="replace")
    if kind in (BYTES, SEQUENCE, BITMAP):
        return bytes(buf[body : body + size])
    if kind in (RECTANGLE, FRACTION):
        return struct.unpack_from("<II", buf, body)
    if kind == POINTER:
        return struct.unpack_from("<Q", buf, body + 8)[0]
    if kind == STRUCT:
        items = []
        at, end = body, body + size
        while at < end:
            value, at = parse(buf, at)
            items.append(value)
        return items
    if kind == OBJECT:
        obj_type, obj_id = struct.unpack_from("<II", buf, body)
        obj = PodObject(obj_type, obj_id)
        at, end = body + 8, body + size
        while at < end:
            key, _flags = struct.unpack_from("<II", buf, at)
            value, at = parse(buf, at + 8)
            obj.props.append((key, value))
        return obj
    if kind in (ARRAY, CHOICE):
        skip = 8 if kind == CHOICE else 0  # choice: u32 type, u32 flags before the child header
        child_size, child_type = _HEAD.unpack_from(buf, body + skip)
        at, end = body + skip + 8, body + size
        values = []
        while child_size and at + child_size <= end:
            values.append(_body(buf, child_type, at, child_size))
            at += child_size
        return values
    return bytes(buf[body : body + size])  # a type this client does not need: kept raw


# Encoding: only the types this client sends (Int, Long, String, Struct).
def _pod(kind: int, body: bytes) -> bytes:
    return _HEAD.pack(len(body), kind) + body + b"\0" * (_pad(len(body)) - len(body))


def int_(value: int) -> bytes:
    return _pod(INT, struct.pack("<i", value))


def string(value: str) -> bytes:
    return _pod(STRING, value.encode() + b"\0")


def struct_(*items: bytes) -> bytes:
    return _pod(STRUCT, b"".join(items))


def dict_(items: dict[str, str]) -> bytes:
    """A spa_dict as the protocol sends it: Struct(Int n, String key, String value, ...)."""
    parts = [int_(len(items))]
    for key, value in items.items():
        parts += [string(key), string(value)]
    return struct_(*parts)
