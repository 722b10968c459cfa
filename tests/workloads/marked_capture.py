"""Record captures/lab-markers.ssf: the lab with two markers typed while recording, as a user does.

    python tests/workloads/marked_capture.py [-o captures/lab-markers.ssf]

catch-load runs on a pseudo-terminal (it reads marker labels from its standard input only when that is a
terminal). Once its status line counts the lab's callback thread (3 threads: lab-main, lab-hog,
lab-audio), `load` is typed 0.5 s later and `loaded` 4 s later, each followed by Enter: the three
episodes (1 s apart) fall between them, and the README's `--span load..loaded` example has a capture.
"""

from __future__ import annotations

import argparse
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-o", "--output", default=str(REPO / "captures" / "lab-markers.ssf"))
    args = parser.parse_args()
    primary, secondary = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    argv = [sys.executable, "-m", "forensics.cli.catch_load", "-o", args.output, "--force",
            "--lab", "--episodes", "run:1,runqueue:1,io:1", "--spacing", "1s", "--seed", "3"]  # fmt: skip
    child = subprocess.Popen(argv, stdin=secondary, stdout=secondary, stderr=secondary, env=env, cwd=REPO)
    os.close(secondary)
    typed = {0.5: b"load\n", 4.0: b"loaded\n"}  # seconds after the callback thread is seen
    output = b""
    seen_at = None
    while child.poll() is None:
        status = re.findall(rb"\r\s*([0-9]+\.[0-9]) s  ([0-9]+) threads", output[-400:])
        if status and seen_at is None and int(status[-1][1]) >= 3:
            seen_at = float(status[-1][0])
        for at, text in list(typed.items()):
            if seen_at is not None and float(status[-1][0]) >= seen_at + at:
                os.write(primary, text)
                del typed[at]
        ready, _, _ = select.select([primary], [], [], 0.05)
        if ready:
            try:
                output += os.read(primary, 4096)
            except OSError:
                break
    child.wait()
    sys.stdout.write(output.decode(errors="replace").replace("\r", "\n"))
    sys.exit(child.returncode)


if __name__ == "__main__":
    main()
