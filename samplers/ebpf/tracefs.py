"""tracefs: make sure it is mounted, read event formats, and decode sched_switch's prev_state the kernel's way.

BCC's TRACEPOINT_PROBE reads the tracepoint's format (and id) from tracefs, so tracefs must be mounted
at /sys/kernel/tracing (or the old /sys/kernel/debug/tracing). Some systems do not mount it at boot;
`ensure_tracefs` mounts it (root) and says so; `release` unmounts it again if we mounted it.

prev_state: the kernel reports the state a task left the CPU in as a bit per state letter
(__trace_sched_switch_state() in include/trace/events/sched.h: 1 << (__task_state_index() - 1), 0 for
runnable), plus a "preempted" bit that has moved across versions (TASK_REPORT_MAX: 0x100 on 4.14+
kernels, TASK_STATE_MAX 2048/4096 on older ones). The format file's print fmt spells out the kernel's
own rule: `prev_state & (MASK) ? __print_flags(prev_state & (MASK), "|", {0x1, "S"}, {0x2, "D"}, ...)
: "R", prev_state & (PREEMPT) ? "+" : ""`. `prev_state_rules` reads MASK, the letter table and PREEMPT
from it; `decode_prev_state` applies them: "S", "D", "R" (runnable, not preempted), "R+" (preempted),
"D|W"... exactly as `perf sched`/ftrace would print it.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import operator
import re
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

TRACEFS_PATHS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")


@dataclass
class TracefsStatus:
    path: str | None  # where tracefs is usable, None when it is not
    mounted_by_us: bool = False
    message: str = ""


def find_tracefs(candidates: Iterable[str] = TRACEFS_PATHS) -> str | None:
    for path in candidates:
        if Path(path, "events").is_dir():
            return path
    return None


def ensure_tracefs(mount: bool = True) -> TracefsStatus:
    """Find tracefs; mount it at /sys/kernel/tracing when it is not mounted and `mount` is set (root)."""
    found = find_tracefs()
    if found is not None:
        return TracefsStatus(found, False, f"tracefs at {found}")
    target = TRACEFS_PATHS[0]
    if not mount:
        return TracefsStatus(None, False, f"tracefs is not mounted (mount -t tracefs nodev {target})")
    if not Path(target).is_dir():
        return TracefsStatus(None, False, f"tracefs is not available: {target} does not exist (CONFIG_TRACING off?)")
    try:
        subprocess.run(
            ["mount", "-t", "tracefs", "nodev", target], check=True, capture_output=True, text=True, timeout=20
        )
    except FileNotFoundError:
        return TracefsStatus(None, False, "tracefs is not mounted and the `mount` command is missing")
    except subprocess.CalledProcessError as err:
        why = (err.stderr or "").strip().splitlines()[-1:] or [f"exit {err.returncode}"]
        return TracefsStatus(None, False, f"tracefs is not mounted and mounting it failed: {why[0]}")
    if find_tracefs([target]) is None:
        return TracefsStatus(None, False, f"mounted tracefs at {target} but it has no events directory")
    return TracefsStatus(target, True, f"mounted tracefs at {target} (it was not mounted; unmounted at the end)")


def release_tracefs(status: TracefsStatus) -> None:
    """Unmount tracefs if ensure_tracefs mounted it (busy: left mounted, harmless)."""
    if status.mounted_by_us and status.path:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["umount", status.path], capture_output=True, timeout=20, check=False)
        status.mounted_by_us = False


def read_format(category: str, event: str, tracefs: str | None = None) -> str | None:
    """The format file of a tracepoint, or None when tracefs or the event is missing."""
    base = tracefs or find_tracefs()
    if base is None:
        return None
    try:
        return Path(base, "events", category, event, "format").read_text()
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM):
            return None
        raise


def event_exists(category: str, event: str, tracefs: str | None = None) -> bool:
    base = tracefs or find_tracefs()
    return base is not None and Path(base, "events", category, event).is_dir()


# --------------------------------------------------------------------------------------------------
# prev_state


@dataclass(frozen=True)
class PrevStateRules:
    """How this kernel encodes sched_switch's prev_state (from its format file)."""

    state_mask: int  # bits that are state letters
    letters: dict[int, str] = field(default_factory=dict)  # bit -> letter, in the kernel's order
    preempt_mask: int = 0  # the "preempted" bit ("+" in the trace output); 0 when the kernel has none
    source: str = "format"  # "format": read from this kernel; "default": assumed (4.14+ layout)

    def to_json(self) -> dict[str, Any]:
        return {
            "state_mask": self.state_mask,
            "letters": {str(bit): letter for bit, letter in self.letters.items()},
            "preempt_mask": self.preempt_mask,
            "source": self.source,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PrevStateRules:
        return cls(
            int(data["state_mask"]),
            {int(bit): str(letter) for bit, letter in data["letters"].items()},
            int(data["preempt_mask"]),
            str(data.get("source", "format")),
        )


# The 4.14+ layout (TASK_REPORT with TASK_REPORT_IDLE = 0x80, TASK_REPORT_MAX = 0x100), as 6.x prints it.
DEFAULT_RULES = PrevStateRules(
    state_mask=0xFF,
    letters={0x1: "S", 0x2: "D", 0x4: "T", 0x8: "t", 0x10: "X", 0x20: "Z", 0x40: "P", 0x80: "I"},
    preempt_mask=0x100,
    source="default",
)

_BINOPS: dict[type, Callable[[int, int], int]] = {
    ast.BitOr: operator.or_,
    ast.BitAnd: operator.and_,
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.Mult: operator.mul,
}


def eval_const_expr(text: str) -> int:
    """Value of a C integer constant expression as a print fmt spells it ("(((0x1 | 0x2) + 1) << 1) - 1").

    Only integer literals, parentheses and | & + - << >> * are accepted (never Python's eval).
    """
    cleaned = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b", r"\1", text.strip())
    tree = ast.parse(cleaned, mode="eval")

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
            return ~value(node.operand)
        raise ValueError(f"not an integer constant expression: {text!r}")

    return value(tree)


def _balanced(text: str, start: int) -> int:
    """Index just after the parenthesis group that opens at text[start] == "("."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i + 1
    raise ValueError("unbalanced parentheses in print fmt")


def prev_state_rules(format_text: str | None) -> PrevStateRules:
    """The prev_state rules of the kernel that wrote this sched_switch format (DEFAULT_RULES if None).

    Raises ValueError when a format is given but its print fmt cannot be understood (better than a guess).
    """
    if format_text is None:
        return DEFAULT_RULES
    fmt_start = format_text.find("print fmt:")
    if fmt_start < 0:
        raise ValueError("sched_switch format has no print fmt")
    fmt = format_text[fmt_start:]
    flags = re.search(r"__print_flags\(\s*REC->prev_state\s*&\s*", fmt)
    if flags is None:
        raise ValueError("sched_switch print fmt has no __print_flags(REC->prev_state & ...)")
    mask_start = flags.end()
    # "& (MASK)" on most kernels; a bare "& 2047" on some old ones
    mask_end = _balanced(fmt, mask_start) if fmt[mask_start] == "(" else fmt.index(",", mask_start)
    state_mask = eval_const_expr(fmt[mask_start:mask_end])
    flags_end = _balanced(fmt, flags.start() + len("__print_flags"))
    letters = {
        eval_const_expr(bit): letter
        for bit, letter in re.findall(r"\{\s*([0-9a-fA-Fx]+)\s*,\s*\"([^\"]*)\"\s*\}", fmt[mask_end:flags_end])
    }
    preempt = re.search(r':\s*"R"\s*,\s*REC->prev_state\s*&\s*(.*?)\s*\?\s*"\+"', fmt[flags_end:], re.S)
    preempt_mask = eval_const_expr(preempt.group(1)) if preempt else 0
    if not letters:
        raise ValueError("sched_switch print fmt lists no state letters")
    return PrevStateRules(state_mask, letters, preempt_mask, "format")


def decode_prev_state(values: np.ndarray | Iterable[int], rules: PrevStateRules = DEFAULT_RULES) -> np.ndarray:
    """prev_state raw values -> the kernel's letters ("S", "D", "R", "R+", "D|K"...), as an object array."""
    raw = np.asarray(values, dtype=np.int64)
    distinct, inverse = np.unique(raw, return_inverse=True)  # a handful of distinct values: decode each once
    texts = np.array([decode_one(int(v), rules) for v in distinct] + [""], dtype=object)[:-1]
    return texts[inverse.reshape(raw.shape)] if raw.size else np.empty(raw.shape, dtype=object)


def decode_one(value: int, rules: PrevStateRules = DEFAULT_RULES) -> str:
    state = value & rules.state_mask
    if state:
        parts = [letter for bit, letter in rules.letters.items() if state & bit]
        unknown = state & ~sum(rules.letters)
        if unknown:
            parts.append(hex(unknown))
        text = "|".join(parts)
    else:
        text = "R"
    if rules.preempt_mask and value & rules.preempt_mask:
        text += "+"
    return text
