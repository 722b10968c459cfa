"""Reading past damage: how long the capture reader takes to find the next intact record after a damaged
one, and how many bytes it checks doing so (issue 23 item 8).

    python bench/resync_bench.py [--garbage-mb 100] [--crafted-mb 1 4 16] [--spacing 64] [--repeat 3]

Cases (tests/damaged.py builds them): a capture whose metadata is followed by N MB of random bytes and
then its trailer (what a disk or a transfer that mangled a stretch leaves), and one whose N MB are
crafted: a fake table header every `--spacing` bytes, each claiming to run to the trailer, so that a
reader checking each one's CRC over the length it claims reads ~N**2 / (2 * spacing) bytes. Per case:
the median seconds of `capture.format.load` over --repeat runs, the bytes handed to CRC-32 per byte of
file (the work, independent of the machine's load), and the reference: the reader before this change
(its resync kept below, quadratic) on the crafted cases of --reference-mb and less. Writes
bench/out/resync_bench.json.
"""

from __future__ import annotations

import argparse
import json
import mmap
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from capture.format import _HEADER, _RECORD, KNOWN_TAGS, load, record_crc  # noqa: E402
from tests.damaged import crafted, crc_bytes_counted, random_garbage, with_garbage  # noqa: E402


def quadratic_resync(buf: mmap.mmap, start: int, size: int, version: int) -> int | None:
    """The resync this change replaced: every candidate's CRC over the whole length it claims."""
    candidates = {tag: buf.find(tag, start) for tag in KNOWN_TAGS}
    while True:
        live = [at for at in candidates.values() if at >= 0]
        if not live:
            return None
        at = min(live)
        if at + _RECORD.size <= size:
            tag, length, crc = _RECORD.unpack_from(buf, at)
            end = at + _RECORD.size + length
            if end <= size and record_crc(version, tag, length, buf[at + _RECORD.size : end]) == crc:
                return at
        for tag, where in candidates.items():
            if where == at:
                candidates[tag] = buf.find(tag, at + 1)


def timed(path: Path, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cap = load(path)
        runs.append(time.perf_counter() - start)
        assert cap.complete, "the trailer after the damage was not found"
    return statistics.median(runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--garbage-mb", type=float, nargs="*", default=[100.0])
    parser.add_argument("--crafted-mb", type=float, nargs="*", default=[1.0, 4.0, 16.0])
    parser.add_argument("--spacing", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--reference-mb", type=float, default=1.0, help="time the old reader up to this size")
    args = parser.parse_args()
    cases = [("random", mb) for mb in args.garbage_mb] + [("crafted", mb) for mb in args.crafted_mb]
    results = []
    print(f"{'case':<8} {'MB':>6} {'seconds':>8} {'MB/s':>7} {'CRC bytes/byte':>15} {'old reader, s':>14}")
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        path = Path(tmp) / "damaged.ssf"
        for kind, mb in cases:
            size = int(mb * 2**20)
            data = with_garbage(random_garbage(size)) if kind == "random" else crafted(size, args.spacing)
            path.write_bytes(data)
            seconds = timed(path, args.repeat)
            with crc_bytes_counted() as counted, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                load(path)
            old = None
            if kind == "crafted" and mb <= args.reference_mb:
                with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                    start = time.perf_counter()
                    quadratic_resync(buf, _HEADER.size + 1, len(data), 2)
                    old = time.perf_counter() - start
            row = {
                "case": kind,
                "mb": mb,
                "spacing": args.spacing if kind == "crafted" else None,
                "seconds": round(seconds, 3),
                "mb_per_s": round(mb / seconds, 1),
                "crc_bytes_per_byte": round(counted[0] / len(data), 2),
                "old_seconds": None if old is None else round(old, 3),
            }
            results.append(row)
            print(
                f"{kind:<8} {mb:>6g} {seconds:>8.3f} {row['mb_per_s']:>7} {row['crc_bytes_per_byte']:>15} "
                f"{'' if old is None else f'{old:.3f}':>14}"
            )
    out = REPO / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "resync_bench.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
