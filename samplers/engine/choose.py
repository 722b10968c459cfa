"""Whether a recording runs the JACK source, and with which server: decided before anything starts.

On by default when the launched command is a JACK server (its clients are then followed), or when a
target given by pid is jackd or a client of a running server, whatever its name (the server is then the
target's), or when the default server is reachable and targets will only appear later (--match, a command):
then the clients are followed once a target turns out to be one.
`--jack [SERVER]` asks for it (a missing server or libjack is then said in one line); `--no-jack` turns
it off. With --match and no server yet (the "wait for jackd" use: the recorder starts first), the source
runs from the start and waits for a server through the whole recording (UNTIL_THE_END), looking for its
socket every SERVER_POLL_S and attaching once it takes clients. Where JACK_DEFAULT_SERVER does not name the
server, it also takes a server of any name or user whose graph a --match process joins (JackChoice.match:
root recording a user's jackd started after it, the eBPF sampler's case).
"""

from __future__ import annotations

import contextlib
import os
import stat
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
    user: tuple[int, int] | None = None  # (uid, gid) of another user's server: the source opens it as that user
    # --match's pattern: while waiting, the server (any name, any user) whose graph a matching process joins
    match: str | None = None


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


def server_reachable(server: str | None, tmp_dir: str = JACK_TMP_DIR, uid: int | None = None) -> bool:
    """Whether `server` of user `uid` (default ours) has its socket."""
    uid = os.geteuid() if uid is None else uid
    return Path(tmp_dir, f"jack_{jack_server_name(server)}_{uid}_0").exists()


@dataclass(frozen=True)
class JackServer:
    name: str
    uid: int  # the user it runs as: its socket and semaphore files carry it
    gid: int = -1  # its socket's group: the server's group


def jack_servers(tmp_dir: str = JACK_TMP_DIR) -> list[JackServer]:
    """The JACK servers running, of every user: each listens on a socket jack_<name>_<uid>_0 in JACK_TMP_DIR
    (jack2 posix/JackSocket.cpp BuildName; `which` 0 is the server's request channel; the uid is the user
    libjack ran as, common/JackTools.cpp GetUID)."""
    try:
        entries = list(os.scandir(tmp_dir))
    except OSError:
        return []
    servers = []
    for entry in entries:
        name, uid = _socket_name(entry.name)
        if name is None:
            continue
        with contextlib.suppress(OSError):  # gone since the listing: that server stopped
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISSOCK(info.st_mode):
                servers.append(JackServer(name, uid, info.st_gid))
    return sorted(servers, key=lambda server: (server.uid, server.name))


def _socket_name(file_name: str) -> tuple[str | None, int]:
    """(server name, uid) of a server socket's file name jack_<name>_<uid>_0, else (None, -1)."""
    if not (file_name.startswith("jack_") and file_name.endswith("_0")) or file_name.startswith("jack_sem."):
        return None, -1
    name, _, uid = file_name[len("jack_") : -len("_0")].rpartition("_")
    return (name, int(uid)) if name and uid.isdigit() else (None, -1)


def others_running(asked: str, uid: int, tmp_dir: str = JACK_TMP_DIR) -> str:
    """The servers running other than `asked` of `uid`, for a line that says it is not there: "" when none,
    else "; running: 'studio', 'live' (uid 1000)"."""
    others = [s for s in jack_servers(tmp_dir) if (s.name, s.uid) != (asked, uid)]
    if not others:
        return ""
    named = [repr(s.name) + (f" (uid {s.uid})" if s.uid != uid else "") for s in others]
    return "; running: " + ", ".join(named)


def graph_server(pid: int, servers: list[JackServer], proc: str = "/proc") -> JackServer | None:
    """The server of `servers` whose graph the process is in (jackd itself or a client), or None: jack2 maps one
    semaphore file per client, named jack_sem.<uid>_<server>_<client>, in the server and in every client
    (posix/JackPosixSemaphore.cpp BuildName). The longest name whose marker shows wins: the semaphores of a
    server named "a_b" also start with the marker of a server named "a". Another user's process's mappings
    are readable by root only (ptrace access): without root, only our own graphs are found."""
    try:
        with open(f"{proc}/{pid}/maps") as fh:
            maps = fh.read()
    except OSError:
        return None
    for server in sorted(servers, key=lambda server: len(server.name), reverse=True):
        if f"/jack_sem.{server.uid}_{server.name}_" in maps:
            return server
    return None


def choose_jack(
    jack: str | None,
    no_jack: bool,
    command: tuple[str, ...],
    pids: tuple[int, ...] = (),
    later: bool = False,
    matched: tuple[int, ...] = (),
    match: str | None = None,
    proc: str = "/proc",
    tmp_dir: str = JACK_TMP_DIR,
) -> JackChoice | None:
    """`jack`: None when --jack was not given, "" for --jack without a name, else the server name.
    `pids`: the targets given now; `later`: targets will appear later (--match, a command); `matched`: the
    processes --match finds now; `match`: its pattern (targets found by name, so a server may be one of them
    and start after the recorder). `proc` and `tmp_dir`: where /proc and JACK_TMP_DIR
    are (tests)."""
    if no_jack:
        return None
    launched = command_server(command)
    # A target given by pid that is jackd or a client: the server it belongs to, whatever its name (a shell
    # where JACK_DEFAULT_SERVER is not set records `jackd -n studio` as well as the default server).
    # Processes --match finds now bring theirs only where libjack's default is neither named nor running:
    # a JACK_DEFAULT_SERVER set, or a default server up, says which graph the user means (the regex may also
    # match some other server's jackd).
    fuzzy = [] if os.environ.get("JACK_DEFAULT_SERVER") or server_reachable(None, tmp_dir) else list(matched)
    candidates = [*pids, *fuzzy]
    # Another user's server (root recording a user's jackd, the eBPF sampler's case): the source runs as that
    # user to libjack (JackChoice.user); without root its mappings are not readable and nothing is found.
    servers = jack_servers(tmp_dir) if candidates and launched is False and not jack else []
    found = next((server for server in (graph_server(pid, servers, proc) for pid in candidates) if server), None)
    user = None if found is None or found.uid == os.geteuid() else (found.uid, found.gid)
    # libjack's default server needs no name, unless the source opens it as another user
    targets_server = None if found is None or (user is None and found.name == jack_server_name(None)) else found.name
    if jack is not None:
        # `user` is set only from the targets' server, i.e. for --jack without a name and no launched server.
        server = jack or (launched if isinstance(launched, str) else targets_server)
        return JackChoice(server, True, True, launched is not False, 10.0 if launched is not False else 0.0, user)
    if launched is not False:
        return JackChoice(launched if isinstance(launched, str) else None, False, True, True, 10.0)
    if found is not None:
        return JackChoice(targets_server, False, True, False, 0.0, user)
    if not server_reachable(None, tmp_dir):
        # A command's own server is chosen above; one the user starts beside a --match recording is
        # waited for (quietly: the recording may have nothing to do with JACK).
        # libjack's default is root's own server when root records: a user's jackd, started later, is found
        # by the graph a matching process joins, unless JACK_DEFAULT_SERVER names the server meant.
        named = bool(os.environ.get("JACK_DEFAULT_SERVER"))
        if match is None:
            return None
        return JackChoice(None, False, False, False, UNTIL_THE_END, match=None if named else match)
    if later:  # a target may join the graph: run it, follow the clients once one is a target
        return JackChoice(None, False, False, False, 0.0)
    return None
