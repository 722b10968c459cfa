"""Offsets of kernel struct members from the running kernel's BTF (/sys/kernel/btf/vmlinux), in pure Python.

The eBPF sampler copies the scheduler's own counters out of `struct task_struct` at each switch, so its
figures are the ones /proc prints (se.sum_exec_runtime, sched_info.run_delay, sched_info.pcount). Without
kernel headers BCC cannot compile `task->se.sum_exec_runtime`; the offsets are read here from BTF
(CONFIG_DEBUG_INFO_BTF) and given to the program as -D constants. Only what that needs is parsed: the type
section's records are walked to find a struct by name and a member by dotted path (through anonymous
struct and union members, as C does).

Format: include/uapi/linux/btf.h and Documentation/bpf/btf.rst.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

VMLINUX = "/sys/kernel/btf/vmlinux"
_HEADER = struct.Struct("<HBBIIIII")  # magic version flags hdr_len type_off type_len str_off str_len
_TYPE = struct.Struct("<III")  # name_off info size_or_type
_MAGIC = 0xEB9F

KIND_INT, KIND_PTR, KIND_ARRAY, KIND_STRUCT, KIND_UNION, KIND_ENUM = 1, 2, 3, 4, 5, 6
KIND_TYPEDEF, KIND_VOLATILE, KIND_CONST, KIND_RESTRICT = 8, 9, 10, 11
KIND_FUNC_PROTO, KIND_VAR, KIND_DATASEC, KIND_DECL_TAG, KIND_TYPE_TAG, KIND_ENUM64 = 13, 14, 15, 17, 18, 19
# Bytes that follow a type's 12-byte record: fixed, or per vlen item.
_EXTRA_FIXED = {KIND_INT: 4, KIND_ARRAY: 12, KIND_VAR: 4, KIND_DECL_TAG: 4}
_EXTRA_PER_ITEM = {KIND_STRUCT: 12, KIND_UNION: 12, KIND_ENUM: 8, KIND_FUNC_PROTO: 8, KIND_DATASEC: 12, KIND_ENUM64: 12}
_MODIFIERS = (KIND_TYPEDEF, KIND_VOLATILE, KIND_CONST, KIND_RESTRICT, KIND_TYPE_TAG)


class BtfError(RuntimeError):
    """The BTF is missing, malformed, or lacks the member asked for; str() says which."""


@dataclass(frozen=True)
class _Type:
    name: str
    kind: int
    kind_flag: bool
    size_or_type: int
    members: tuple[tuple[str, int, int], ...]  # (name, type id, bit offset) of a struct or union


class Btf:
    def __init__(self, data: bytes) -> None:
        if len(data) < _HEADER.size:
            raise BtfError("BTF data too short")
        magic, _version, _flags, hdr_len, type_off, type_len, str_off, str_len = _HEADER.unpack_from(data)
        if magic != _MAGIC:
            raise BtfError("not BTF data (bad magic)")
        self._strings = data[hdr_len + str_off : hdr_len + str_off + str_len]
        self.types: list[_Type | None] = [None]  # type id 0 is void
        self._by_name: dict[tuple[int, str], int] = {}
        offset = hdr_len + type_off
        end = offset + type_len
        while offset < end:
            name_off, info, size_or_type = _TYPE.unpack_from(data, offset)
            offset += _TYPE.size
            kind = (info >> 24) & 0x1F
            vlen = info & 0xFFFF
            members: tuple[tuple[str, int, int], ...] = ()
            if kind in (KIND_STRUCT, KIND_UNION):
                items = []
                for i in range(vlen):
                    m_name, m_type, m_offset = _TYPE.unpack_from(data, offset + 12 * i)
                    bit_offset = m_offset & 0xFFFFFF if info >> 31 else m_offset
                    items.append((self._string(m_name), m_type, bit_offset))
                members = tuple(items)
            offset += _EXTRA_FIXED.get(kind, 0) + _EXTRA_PER_ITEM.get(kind, 0) * vlen
            name = self._string(name_off)
            self.types.append(_Type(name, kind, bool(info >> 31), size_or_type, members))
            if name and kind in (KIND_STRUCT, KIND_UNION):
                self._by_name.setdefault((kind, name), len(self.types) - 1)

    @classmethod
    def load(cls, path: str = VMLINUX) -> Btf:
        try:
            return cls(Path(path).read_bytes())
        except OSError as err:
            why = f"cannot read {path} ({err.strerror}): the kernel has no BTF (CONFIG_DEBUG_INFO_BTF)"
            raise BtfError(why) from err

    def _string(self, offset: int) -> str:
        end = self._strings.find(b"\0", offset)
        return self._strings[offset:end].decode(errors="replace")

    def _resolve(self, type_id: int) -> int:
        while True:
            t = self.types[type_id]
            if t is None or t.kind not in _MODIFIERS:
                return type_id
            type_id = t.size_or_type

    def size_of(self, type_id: int) -> int:
        t = self.types[self._resolve(type_id)]
        if t is None or t.kind in (KIND_PTR,):
            return 8
        return t.size_or_type

    def member(self, struct_name: str, path: str) -> tuple[int, int]:
        """(byte offset, byte size) of `path` ("se.sum_exec_runtime") inside `struct struct_name`."""
        type_id = self._by_name.get((KIND_STRUCT, struct_name))
        if type_id is None:
            raise BtfError(f"this kernel's BTF has no struct {struct_name}")
        offset_bits = 0
        for part in path.split("."):
            found = self._find(type_id, part)
            if found is None:
                raise BtfError(f"this kernel's struct {struct_name} has no member {path}")
            type_id, bits = found
            offset_bits += bits
        if offset_bits % 8:
            raise BtfError(f"{struct_name}.{path} is a bitfield")
        return offset_bits // 8, self.size_of(type_id)

    def _find(self, type_id: int, name: str) -> tuple[int, int] | None:
        """(type id, bit offset) of member `name` of the struct/union `type_id`, looking into anonymous members."""
        t = self.types[self._resolve(type_id)]
        if t is None:
            return None
        for m_name, m_type, bits in t.members:
            if m_name == name:
                return m_type, bits
        for m_name, m_type, bits in t.members:
            if not m_name:
                inner = self._find(m_type, name)
                if inner is not None:
                    return inner[0], bits + inner[1]
        return None
