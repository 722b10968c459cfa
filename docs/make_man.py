"""Generate the man pages in docs/man/ from the click commands' help (click-man), one per command.

    python docs/make_man.py [--target docs/man]

catch-load(1), forensics(1) and forensics-COMMAND(1) for each subcommand. They are installed with the
package (pyproject.toml, data-files: share/man/man1) and a test checks they match the help of the code.
The date is fixed so that a regeneration without a change in the help changes nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DATE = "2026-12-01"


def write_pages(target: Path) -> list[Path]:
    import click
    from click_man.core import write_man_pages

    from forensics import __version__
    from forensics.cli import COMMANDS, cli
    from forensics.cli.catch_load import catch_load

    target.mkdir(parents=True, exist_ok=True)
    # click-man walks a group's `commands`; the lazy group loads them on demand, so hand it a plain one.
    group = click.Group("forensics", help=cli.help, commands={name: cli.get_command(None, name) for name in COMMANDS})  # type: ignore[arg-type]
    for name, command in (("catch-load", catch_load), ("forensics", group)):
        write_man_pages(name, command, version=__version__, target_dir=str(target), date=DATE)
    return sorted(target.glob("*.1"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=Path, default=REPO / "docs" / "man")
    args = parser.parse_args()
    for page in write_pages(args.target):
        print(page)


if __name__ == "__main__":
    main()
