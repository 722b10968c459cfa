"""The eBPF cache (headers compiled into a program the kernel runs, BTF offsets it reads at) is trusted only
from a directory its user owns and no one else can write; root never takes it from the environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from capture.errors import ForensicsError
from samplers.ebpf import kernel_stub


def test_root_ignores_the_cache_directory_the_environment_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = tmp_path / "user-cache"
    (planted / "spike-stall-forensics").mkdir(parents=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(planted))  # what `sudo -E` keeps
    monkeypatch.setattr(kernel_stub.os, "geteuid", lambda: 0)
    monkeypatch.setattr(kernel_stub, "ROOT_CACHE_DIR", str(tmp_path / "root-cache"))
    if os.geteuid() != 0:  # the directory made here is this user's: ownership is checked against euid 0
        monkeypatch.setattr(kernel_stub.os, "lstat", lambda p: _owned_by_root(os.stat(p, follow_symlinks=False)))
    got = kernel_stub.toolkit_cache_dir()
    assert got == tmp_path / "root-cache"
    assert kernel_stub.default_cache_dir() == tmp_path / "root-cache" / "bcc-stub"
    assert (got.stat().st_mode & 0o777) == 0o700


@pytest.mark.parametrize("kind", ["writable by others", "a link"])
def test_a_cache_directory_others_can_change_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    cache = tmp_path / "cache"
    if kind == "a link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        cache.symlink_to(tmp_path / "elsewhere")
    else:
        cache.mkdir()
        cache.chmod(0o777)
    monkeypatch.setattr(kernel_stub, "ROOT_CACHE_DIR", str(cache))
    monkeypatch.setattr(kernel_stub.os, "geteuid", lambda: 0)
    with pytest.raises(ForensicsError, match="link, not yours, or writable by others"):
        kernel_stub.toolkit_cache_dir()


def _owned_by_root(info: os.stat_result) -> os.stat_result:
    fields = list(info)
    fields[4] = 0  # st_uid
    return os.stat_result(fields)
