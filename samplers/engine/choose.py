"""Whether a recording runs the JACK source, and with which server: decided before anything starts.

On by default when the launched command is a JACK server (its clients are then followed), or when a
JACK server is reachable and a target given by pid is jackd or one of its clients, or targets will only
appear later (--match, a command): then the clients are followed once a target turns out to be one.
`--jack [SERVER]` asks for it (a missing server or libjack is then said in one line); `--no-jack` turns
it off. With --match and no server yet (the "wait for jackd" use: the recorder starts first), the source
runs from the start and waits for a server through the whole recording (UNTIL_THE_END), looking for its
socket every SERVER_POLL_S and attaching once it takes clients.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

JACK_SERVERS = ("jackd", "jackdbus")
JACK_TMP_DIR = "/dev/shm"  # jack2's JACK_TMP_DIR on Linux: its server socket jack_<name>_<uid>_0 lives there
UNTIL_THE_END = float("inf")  # wait_s of a source that waits for its server as long as the recording runs
# How often a waiting source looks for the server's socket (a stat; libjack is tried only once it exists).
# Measured: attached 0.36-0.40 s after the socket appeared, most of it jackd's own start-up.
SERVER_POLL_S = 0.1


@dataclass
class JackChoice:
    server: str | None  # None: libjack's default ($JACK_DEFAULT_SERVER or "default")
    explicit: bool
    follow: bool  # follow every client as a target from the start
    launches_server: bool  # the recording launches jackd itself: its output is the server log
    wait_s: float


def command_server(command: tuple[str, ...]) -> str | bool | None:
    """False when the command is not a JACK server; else its -n/--name (None: the default server)."""
    if not command or Path(command[0]).name not in JACK_SERVERS:
        return False
    args = list(command[1:])
    for i, arg in enumerate(args):
        if arg in ("-n", "--name") and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--name="):
            return arg.split("=", 1)[1]
        if arg.startswith("-n") and len(arg) > 2 and not arg.startswith("--"):
            return arg[2:]
        if arg == "-d" or arg.startswith("--driver"):
            break  # driver options follow: not the server's
    return None


def jack_server_name(server: str | None) -> str:
    """The server libjack opens: the one asked for, else $JACK_DEFAULT_SERVER, else "default" (jack2
    common/JackTools.cpp DefaultServerName)."""
    return server or os.environ.get("JACK_DEFAULT_SERVER") or "default"


def server_reachable(server: str | None) -> bool:
    return Path(JACK_TMP_DIR, f"jack_{jack_server_name(server)}_{os.getuid()}_0").exists()


def in_jack_graph(pid: int, server: str | None, proc: str = "/proc") -> bool:
    """True when the process is a JACK server or client of `server`: jack2 maps one semaphore file per
    client, named jack_sem.<uid>_<server>_<client>, in the server and in every client (JackPosixSemaphore)."""
    marker = f"/jack_sem.{os.getuid()}_{jack_server_name(server)}_"
    try:
        with open(f"{proc}/{pid}/maps") as fh:
            return any(marker in line for line in fh)
    except OSError:
        return False


def choose_jack(
    jack: str | None,
    no_jack: bool,
    command: tuple[str, ...],
    pids: tuple[int, ...] = (),
    later: bool = False,
    by_name: bool = False,
) -> JackChoice | None:
    """`jack`: None when --jack was not given, "" for --jack without a name, else the server name.
    `pids`: the targets given now; `later`: targets will appear later (--match, a command); `by_name`:
    they are found by name (--match), so a server may be one of them and start after the recorder."""
    if no_jack:
        return None
    launched = command_server(command)
    if jack is not None:
        server = jack or (launched if isinstance(launched, str) else None)
        return JackChoice(server, True, True, launched is not False, 10.0 if launched is not False else 0.0)
    if launched is not False:
        return JackChoice(launched if isinstance(launched, str) else None, False, True, True, 10.0)
    if not server_reachable(None):
        # A command's own server is chosen above; one the user starts beside a --match recording is
        # waited for (quietly: the recording may have nothing to do with JACK).
        return JackChoice(None, False, False, False, UNTIL_THE_END) if by_name else None
    if any(in_jack_graph(pid, None) for pid in pids):
        return JackChoice(None, False, True, False, 0.0)
    if later:  # a target may join the graph: run it, follow the clients once one is a target
        return JackChoice(None, False, False, False, 0.0)
    return None
