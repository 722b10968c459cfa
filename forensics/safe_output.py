"""Opening output files safely: the toolkit often runs as root beside other users' files.

The classic attack on a root tool that writes `-o /tmp/x` (or a predictable default name in a shared
directory) is a symlink planted at that name: an `open(O_CREAT|O_TRUNC)` follows it and truncates
whatever it points at. So every output here is created, never opened over something that exists:

- a whole file (a report, a plot, a trace) is written to a new temporary file with a random name in the
  same directory (`O_CREAT|O_EXCL|O_NOFOLLOW`: an existing name or a planted link makes it fail, it
  never follows one), then published with link(2), which also fails when the name exists and never
  follows a link there; with `--force`, rename(2), which replaces the name itself (a link, not its
  target). A reader never sees half a file, and an interrupted write leaves the old file as it was.
- a file that is streamed for a long time (the capture) is created with `O_EXCL|O_NOFOLLOW` in place;
  `--force` first unlinks the old name (the link itself, never its target).
- every operation in a directory goes through one descriptor of it, opened once: swapping the directory
  for a link half-way cannot redirect the later files.

An output that exists is never replaced without `--force`: the error says so in one line.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from capture.errors import ForensicsError
from capture.vocabulary import file_kind

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_MODE = 0o644  # before the umask, as open(2) would make it


def _describe(err: OSError) -> str:
    return err.strerror or str(err)


def _exists_error(path: Path | str) -> ForensicsError:
    return ForensicsError(f"{path} exists already: give another name, or --force to replace it")


def check_new_output(path: str | os.PathLike[str], force: bool, *, directory_ok: bool = False) -> None:
    """Fail early (before a long computation) when `path` would need --force, or can never be written."""
    p = Path(path)
    try:
        info = os.lstat(p)
    except FileNotFoundError:
        parent = p.parent if str(p.parent) else Path(".")
        if not parent.is_dir():
            raise ForensicsError(f"cannot write {p}: directory {parent} does not exist") from None
        return
    except OSError as err:  # ELOOP, ENAMETOOLONG, EACCES on a parent...
        raise ForensicsError(f"cannot write {p}: {_describe(err)}") from None
    if stat.S_ISDIR(info.st_mode) and not directory_ok:
        raise ForensicsError(f"{p} is a directory; give a file name")
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        # A named pipe, a socket, a device (-o /dev/null): not an output a file may replace, even with --force.
        raise ForensicsError(f"{p} is {file_kind(info.st_mode)}, not a file: give the name of a file to write")
    if not force and not (stat.S_ISDIR(info.st_mode) and directory_ok):
        raise _exists_error(p)


def _open_parent(path: Path) -> int:
    parent = path.parent if str(path.parent) else Path(".")
    try:
        return os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise ForensicsError(f"cannot write {path}: {parent}: {_describe(err)}") from None


class AtomicFile:
    """`with AtomicFile(path, force=...) as fh: fh.write(...)`: the file appears whole, or not at all.

    `dir_fd`: the directory descriptor to create it in (then `path` is a bare name in it)."""

    def __init__(self, path: str | os.PathLike[str], *, force: bool, dir_fd: int | None = None) -> None:
        self.path = Path(path)
        self.force = force
        self._own_dir = dir_fd is None
        self._dir_fd = _open_parent(self.path) if dir_fd is None else dir_fd
        self._name = self.path.name if dir_fd is None else str(path)
        self._tmp = f".{self._name[:200]}.{secrets.token_hex(6)}.tmp"
        self._fh: BinaryIO | None = None

    def __enter__(self) -> BinaryIO:
        try:
            fd = os.open(self._tmp, _CREATE, FILE_MODE, dir_fd=self._dir_fd)
        except OSError as err:
            self._close_dir()
            raise ForensicsError(f"cannot write {self.path}: {_describe(err)}") from None
        self._fh = open(fd, "wb")
        return self._fh

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        fh = self._fh
        assert fh is not None
        try:
            if kind is None:
                try:
                    fh.flush()
                    os.fsync(fh.fileno())
                    fh.close()
                except OSError as err:  # ENOSPC, EIO, EDQUOT: often only known here
                    raise ForensicsError(f"cannot write {self.path}: {_describe(err)}") from None
                self._publish()
        finally:
            if not fh.closed:
                with contextlib.suppress(OSError):
                    fh.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._tmp, dir_fd=self._dir_fd)  # after link(2), or after a failure
            self._close_dir()

    def _publish(self) -> None:
        fd = self._dir_fd
        try:
            if self.force:
                os.rename(self._tmp, self._name, src_dir_fd=fd, dst_dir_fd=fd)
                return
            try:
                # link(2) never follows a link at the new name and fails if the name exists: no window.
                os.link(self._tmp, self._name, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
            except OSError as err:
                if err.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                    raise
                # A file system without hard links (vfat...): check, then rename (a narrow window).
                with contextlib.suppress(FileNotFoundError):
                    os.lstat(self._name, dir_fd=fd)
                    raise FileExistsError(errno.EEXIST, "exists") from None
                os.rename(self._tmp, self._name, src_dir_fd=fd, dst_dir_fd=fd)
        except FileExistsError:
            raise _exists_error(self.path) from None
        except IsADirectoryError:
            raise ForensicsError(f"{self.path} is a directory; give a file name") from None
        except OSError as err:
            raise ForensicsError(f"cannot write {self.path}: {_describe(err)}") from None

    def _close_dir(self) -> None:
        if self._own_dir and self._dir_fd >= 0:
            os.close(self._dir_fd)
            self._dir_fd = -1


def write_file(path: str | os.PathLike[str], data: bytes, *, force: bool) -> None:
    """Write `data` as a new file at `path` (replacing an existing one only with `force`)."""
    with AtomicFile(path, force=force) as fh:
        try:
            fh.write(data)
        except OSError as err:
            raise ForensicsError(f"cannot write {path}: {_describe(err)}") from None


def create_streamed(path: str | os.PathLike[str], *, force: bool) -> int:
    """A new file for writing as it goes (O_EXCL, no link followed); `force` unlinks an old one first.

    Returns the descriptor. Raises OSError (the caller words it): EEXIST when the name exists."""
    if force:
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISDIR(os.lstat(path).st_mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
            os.unlink(path)  # the name only: a link goes, its target stays untouched
    return os.open(path, _CREATE, FILE_MODE)


def open_output_directory(path: str | os.PathLike[str]) -> int:
    """A descriptor of the directory `path`, made if missing; never through a link at `path`.

    Files go in with `AtomicFile(name, dir_fd=...)`, so an existing file needs --force there too."""
    p = Path(path)
    try:
        os.mkdir(p, 0o755)
    except FileExistsError:
        pass  # opened below without following a link
    except OSError as err:
        raise ForensicsError(f"cannot make the directory {p}: {_describe(err)}") from None
    try:
        return os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            raise ForensicsError(f"{p} is not a directory (a link or a file): name a directory") from None
        raise ForensicsError(f"cannot open the directory {p}: {_describe(err)}") from None
