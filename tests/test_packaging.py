"""What the distribution installs: its top-level packages are the toolkit's own layers (DESIGN.md,
"Layers"), and the lab lives under `forensics` so that no top-level `lab` collides with another
distribution's."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from setuptools import find_packages

from tests.helpers import REPO

LAYERS = {"capture", "samplers", "analyses", "forensics"}


def _shipped_packages() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    return find_packages(where=str(REPO), include=include)


def test_top_level_packages_are_the_layers_only() -> None:
    packages = _shipped_packages()
    assert {p.split(".")[0] for p in packages} == LAYERS
    assert "forensics.lab" in packages
    assert not (REPO / "lab").exists()


def test_the_lab_runs_under_the_toolkits_name() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "forensics.lab", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "--episodes" in out.stdout
