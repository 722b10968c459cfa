"""CSV and Parquet tables of a capture, one file per table in one directory (for pandas, DuckDB, Spark).

A directory rather than one file: CSV holds one table per file, and a directory of `samples.parquet`,
`windows.parquet`, `verdicts.parquet`... reads in DuckDB as `FROM 'DIR/windows.parquet'` and in pandas
as `pd.read_parquet('DIR/windows.parquet')`, and many bug reports' exports query together with a glob.
Tables are written piece by piece (a writer per table), so a long capture never sits in memory whole.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from capture.errors import ForensicsError
from capture.format import Capture
from forensics.progress import Progress


class TableWriter:
    """Appends DataFrames to DIR/NAME.csv or DIR/NAME.parquet."""

    def __init__(self, directory: Path, fmt: str) -> None:
        self.directory = directory
        self.fmt = fmt
        self.files: dict[str, Path] = {}
        self.rows: dict[str, int] = {}
        self._parquet: dict[str, pq.ParquetWriter] = {}
        self._schemas: dict[str, pa.Schema] = {}

    def append(self, name: str, frame: pd.DataFrame) -> None:
        path = self.directory / f"{name}.{self.fmt}"
        first = name not in self.files
        self.files[name] = path
        self.rows[name] = self.rows.get(name, 0) + len(frame)
        try:
            if self.fmt == "csv":
                frame.to_csv(path, mode="w" if first else "a", header=first, index=False)
                return
            table = pa.Table.from_pandas(frame, preserve_index=False)
            if first:
                self._schemas[name] = table.schema
                self._parquet[name] = pq.ParquetWriter(path, table.schema, compression="zstd")
            else:
                table = table.cast(self._schemas[name])
            self._parquet[name].write_table(table)
        except OSError as err:
            raise ForensicsError(f"cannot write {path}: {err.strerror}") from err

    def close(self) -> None:
        for writer in self._parquet.values():
            writer.close()
        self._parquet.clear()

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def plain_samples(chunk: pd.DataFrame) -> pd.DataFrame:
    """A samples chunk as plain columns (the state letter as text, not a dictionary)."""
    if "state" in chunk and isinstance(chunk["state"].dtype, pd.CategoricalDtype):
        chunk = chunk.assign(state=chunk["state"].astype("string"))
    return chunk


def write_tables(
    cap: Capture,
    directory: Path,
    fmt: str,
    *,
    pattern: str | None = None,
    t_range: tuple[int | None, int | None] | None = None,
    progress: Progress | None = None,
    announce: Callable[[str], None] | None = None,
) -> dict[str, int]:
    """One file per table in `directory`; `announce` is told each file written (path and rows)."""
    from forensics.export.frames import export_threads, export_verdicts, export_windows, flat_verdicts

    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ForensicsError(f"cannot make the directory {directory}: {err.strerror}") from err
    profiles = export_threads(cap, pattern, t_range)
    tids = profiles["tid"].to_numpy(dtype=np.int32)
    with TableWriter(directory, fmt) as writer:
        if progress:
            progress.step("samples")
        for chunk in cap.iter_chunks("samples"):
            keep = np.isin(chunk["tid"].to_numpy(), tids)
            if t_range is not None:
                from analyses.span import in_span

                keep &= in_span(chunk["t_ns"].to_numpy(), t_range)
            if keep.any():
                writer.append("samples", plain_samples(chunk[keep]))
        if progress:
            progress.step("windows")
        for windows in export_windows(cap, profiles, t_range=t_range):
            writer.append("windows", windows)
        if progress:
            progress.step("verdicts")
        writer.append("verdicts", flat_verdicts(export_verdicts(cap, profiles, pattern, t_range)))
        threads = cap.threads
        writer.append("threads", threads[threads["tid"].isin(tids)])
        writer.append("events", cap.events)
    if progress:
        progress.done()
    for name, path in writer.files.items():
        if announce is not None:
            announce(f"{path} ({writer.rows[name]} rows)")
    return writer.rows
