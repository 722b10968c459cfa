"""The lab's helper processes: series stages, the runqueue competitor, the lock holder.

Run as `python -m forensics.lab.helpers CONFIG_JSON` by the engine, never by hand. Each helper is its own process
(its own GIL): the competitor and the lock holder must burn CPU at the same time as the callback thread
wants it, which threads of one Python process cannot do without the callback thread waiting for the GIL,
a wait the toolkit would rightly call a lock. Series stages are processes for the same reason (and like
the clients of an audio graph linked in series, each is a process of its own).

Protocol: the helper prints one JSON line on stdout when it is ready ({"tid", "policy", "rtprio", ...}),
does its job when its eventfd is written, leaves its loop when the control block's `stop` is set, and
prints one more JSON line (its results) before it exits. stderr is the lab's. It dies with the engine
(PR_SET_PDEATHSIG) and ignores SIGINT (a Ctrl-C reaches the whole process group; the engine stops its
helpers itself, after writing nothing it would lose).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

from forensics.lab import linux
from forensics.lab.shared import SharedArea

HOLD_LIMIT_NS = 10_000_000_000  # a holder never burns longer than this past its hold time (lab-audio gone?)


def _report(payload: dict[str, Any]) -> None:
    os.write(1, (json.dumps(payload) + "\n").encode())


def _burn_until(t_ns: int) -> None:
    monotonic_ns = time.monotonic_ns
    while monotonic_ns() < t_ns:
        pass


def _setup(config: dict[str, Any]) -> dict[str, Any]:
    linux.set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != config["parent"]:  # the engine died before the line above: go now
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    linux.set_thread_name(config["name"])
    note = None
    if config.get("fifo"):
        note = linux.set_policy(os.SCHED_FIFO, int(config["rtprio"]))
    else:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    if config.get("cpus"):
        os.sched_setaffinity(0, config["cpus"])
    linux.set_timer_slack(1)
    policy, rtprio = linux.current_policy()
    return {
        "role": config["role"],
        "pid": os.getpid(),
        "tid": linux.gettid(),
        "comm": linux.thread_name(),
        "policy": policy,
        "rtprio": rtprio,
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "cpus": sorted(os.sched_getaffinity(0)),
        "policy_note": note,
    }


def _stage(config: dict[str, Any], area: SharedArea) -> dict[str, Any]:
    from forensics.lab.dsp import FirStage, OutputDigest

    index = int(config["stage"])  # 1-based; stage 1 is the callback thread itself
    stage = FirStage(config["seed"], index, config["taps"], config["channels"], config["quantum"])
    source, sink = area.buffer(index - 1), area.buffer(index)
    in_fd, next_fd = config["in_fd"], config.get("next_fd")
    done_fd = config.get("done_fd")
    digest = OutputDigest() if done_fd is not None else None
    control = area.control
    _report(config["ready"])
    while True:
        os.eventfd_read(in_fd)
        if control.stop:
            if next_fd is not None:
                os.eventfd_write(next_fd, 1)
            break
        cycle = control.cycle
        stage.process(source, sink)
        if digest is not None and done_fd is not None:
            digest.update(sink)
            control.done_ns = time.monotonic_ns()
            control.done_cycle = cycle
            os.eventfd_write(done_fd, 1)
        elif next_fd is not None:
            os.eventfd_write(next_fd, 1)
    return {"output": digest.summary()} if digest is not None else {}


def _competitor(config: dict[str, Any], area: SharedArea) -> dict[str, Any]:
    control = area.control
    wake_fd = config["in_fd"]
    bursts = 0
    _report(config["ready"])
    while True:
        os.eventfd_read(wake_fd)
        if control.stop:
            break
        _burn_until(control.hog_until_ns)
        bursts += 1
    return {"bursts": bursts}


def _holder(config: dict[str, Any], area: SharedArea) -> dict[str, Any]:
    control = area.control
    arm_fd = config["in_fd"]
    held_address, released_address = area.address("held_seq"), area.address("released_seq")
    holds = 0
    _report(config["ready"])
    while True:
        os.eventfd_read(arm_fd)
        if control.stop:
            break
        seq = control.arm_seq
        hold_ns = control.hold_ns
        control.held_ns = time.monotonic_ns()
        control.held_seq = seq
        linux.futex_wake(held_address)
        # The busy part of the inversion: a SCHED_OTHER worker computing while it holds the lock, until
        # lab-audio has waited for it hold_ns (however late lab-audio came to wait), or the lab stops.
        give_up = control.held_ns + hold_ns + HOLD_LIMIT_NS
        while True:
            now = time.monotonic_ns()
            since = control.waiting_since_ns  # read after the seq below was seen: 0 means not yet
            if control.waiting_seq == seq and since and now >= since + hold_ns:
                break
            if control.stop or now > give_up:
                break
        control.released_ns = time.monotonic_ns()
        control.released_seq = seq
        linux.futex_wake(released_address)
        holds += 1
    return {"holds": holds}


ROLES = {"stage": _stage, "competitor": _competitor, "holder": _holder}


def main(argv: list[str]) -> int:
    config = json.loads(argv[0])
    config["ready"] = _setup(config)
    area = SharedArea(config["buffers"], config["channels"], config["quantum"], fd=config["shared_fd"])
    result = ROLES[config["role"]](config, area)
    _report({"role": config["role"], "pid": os.getpid(), "done": True, **result})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
