"""Import BCC's Python module (Debian's python3-bpfcc) from any Python, never PyPI's unrelated `bcc`.

BCC's Python side is pure Python over libbcc.so (ctypes), installed for the system Python under
/usr/lib/python3/dist-packages/bcc. The project runs on another Python (pyenv); putting the whole
dist-packages on sys.path would shadow our own packages with Debian's builds (numpy, pandas...), so
we put a directory holding ONLY a symlink `bcc -> .../dist-packages/bcc` first on sys.path. The PyPI
package named `bcc` is a lattice library with no `BPF`: if it is what `import bcc` finds, it is refused.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

SYSTEM_BCC_DIRS = (
    "/usr/lib/python3/dist-packages/bcc",  # Debian, Ubuntu
    "/usr/lib/python3/site-packages/bcc",
)


class BccUnavailable(RuntimeError):
    """BCC's Python module cannot be imported; the message says why and what to install."""


def _is_real_bcc(module: ModuleType) -> bool:
    return hasattr(module, "BPF") and hasattr(module, "lib")


def _system_bcc_dir() -> Path | None:
    for candidate in SYSTEM_BCC_DIRS:
        if Path(candidate, "__init__.py").is_file():
            return Path(candidate)
    for version_dir in sorted(Path("/usr/lib").glob("python3*/site-packages/bcc")):
        if (version_dir / "__init__.py").is_file():
            return version_dir
    return None


def _link_dir(cache_dir: Path | None, target: Path) -> Path:
    """A directory that holds only the symlink `bcc -> target` (created once, re-pointed if stale)."""
    base = cache_dir or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "spike-stall-forensics")
    link_dir = base / "bcc-pythonpath"
    try:
        link_dir.mkdir(parents=True, exist_ok=True)
    except OSError:
        link_dir = Path(tempfile.mkdtemp(prefix="ssf-bcc-"))
    link = link_dir / "bcc"
    if link.is_symlink() and Path(os.readlink(link)) == target:
        return link_dir
    tmp = link_dir / f".bcc-{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(target, target_is_directory=True)
    os.replace(tmp, link)  # atomic: another process importing at the same moment sees old or new
    return link_dir


def import_bcc(cache_dir: Path | None = None) -> ModuleType:
    """The `bcc` module (BCC's), importing it through the symlink directory when needed."""
    existing = sys.modules.get("bcc")
    if existing is not None:
        if _is_real_bcc(existing):
            return existing
        raise BccUnavailable(
            "the `bcc` module already imported is not BCC (PyPI's unrelated `bcc` package?): "
            "uninstall it and install Debian's python3-bpfcc"
        )
    target = _system_bcc_dir()
    if target is None:
        raise BccUnavailable(
            "BCC's Python module is not installed: apt-get install python3-bpfcc libbpfcc "
            "(never `pip install bcc`: that is an unrelated package)"
        )
    link_dir = str(_link_dir(cache_dir, target))
    if link_dir not in sys.path:
        sys.path.insert(0, link_dir)
    try:
        module = importlib.import_module("bcc")
    except Exception as err:  # libbcc.so missing or broken: the ctypes load fails inside the import
        sys.modules.pop("bcc", None)
        raise BccUnavailable(f"BCC's Python module failed to import ({type(err).__name__}: {err})") from err
    if not _is_real_bcc(module):
        sys.modules.pop("bcc", None)
        raise BccUnavailable(
            f"`import bcc` found {getattr(module, '__file__', '?')}, which is not BCC: "
            "uninstall PyPI's `bcc` and install Debian's python3-bpfcc"
        )
    return module
