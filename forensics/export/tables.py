"""CSV and Parquet tables of a capture, one file per table in one directory (for pandas, DuckDB, Spark).

A directory rather than one file: CSV holds one table per file, and a directory of `samples.parquet`,
`windows.parquet`, `verdicts.parquet`... reads in DuckDB as `FROM 'DIR/windows.parquet'` and in pandas
as `pd.read_parquet('DIR/windows.parquet')`, and many bug reports' exports query together with a glob.
Every table of forensics/export/schemas.py is written, empty where the capture has none, each with its
one versioned schema, so that the exports of many captures stack.
Tables are written piece by piece (a writer per table), so a long capture never sits in memory whole.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from capture.errors import ForensicsError
from capture.format import Capture
from forensics.export.schemas import RECORDED, conform
from forensics.progress import Progress
from forensics.safe_output import AtomicFile, open_output_directory


class TableWriter:
    """Appends DataFrames to DIR/NAME.csv or DIR/NAME.parquet.

    DIR is made if missing and used through one descriptor (never through a link at its name); each
    file is written under a temporary name and appears whole at the end, and an existing one is only
    replaced with `force` (see forensics/safe_output.py)."""

    def __init__(self, directory: Path, fmt: str, *, force: bool = False) -> None:
        self.directory = directory
        self.fmt = fmt
        self.force = force
        self.files: dict[str, Path] = {}
        self.rows: dict[str, int] = {}
        self._parquet: dict[str, pq.ParquetWriter] = {}
        self._schemas: dict[str, pa.Schema] = {}
        self._open: dict[str, tuple[AtomicFile, BinaryIO]] = {}
        self._dir_fd = open_output_directory(directory)
        self._stack = contextlib.ExitStack()

    def _file(self, name: str) -> BinaryIO:
        if name not in self._open:
            filename = f"{name}.{self.fmt}"
            if not self.force:
                with contextlib.suppress(FileNotFoundError):
                    os.lstat(filename, dir_fd=self._dir_fd)
                    raise ForensicsError(
                        f"{self.directory / filename} exists already: export into another directory, or --force "
                        "to replace it"
                    )
            atomic = AtomicFile(filename, force=self.force, dir_fd=self._dir_fd)
            self._open[name] = (atomic, self._stack.enter_context(atomic))
        return self._open[name][1]

    def append(self, name: str, frame: pd.DataFrame) -> None:
        path = self.directory / f"{name}.{self.fmt}"
        first = name not in self.files
        fh = self._file(name)
        self.files[name] = path
        self.rows[name] = self.rows.get(name, 0) + len(frame)
        table = conform(name, frame)
        if first:
            self._schemas[name] = table.schema
        else:
            schema = self._schemas[name]
            if table.schema.names != schema.names:  # a chunk with a column more or less (a hand-made capture)
                table = pa.table(
                    {
                        f.name: table[f.name] if f.name in table.column_names else pa.nulls(len(table), f.type)
                        for f in schema
                    }
                )
            table = table.cast(schema)
        try:
            if self.fmt == "csv":
                # Through pandas: pyarrow's CSV writer quotes every header name. Integers with gaps stay
                # integers (object), never floats.
                text = io.TextIOWrapper(fh, encoding="utf-8", newline="", write_through=True)
                table.to_pandas(integer_object_nulls=True).to_csv(text, header=first, index=False)
                text.detach()  # the file stays open for the next chunk
                return
            if first:
                self._parquet[name] = pq.ParquetWriter(fh, table.schema, compression="zstd")
            self._parquet[name].write_table(table)
        except OSError as err:
            raise ForensicsError(f"cannot write {path}: {err.strerror}") from err

    def close(self, failed: bool = False) -> None:
        for writer in self._parquet.values():
            writer.close()
        self._parquet.clear()
        if failed:  # the temporary files go; nothing half-written appears under a table's name
            self._stack.__exit__(ForensicsError, None, None)
        else:
            self._stack.close()
        if self._dir_fd >= 0:
            os.close(self._dir_fd)
            self._dir_fd = -1

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close(failed=kind is not None)


def plain_samples(chunk: pd.DataFrame) -> pd.DataFrame:
    """A samples chunk as plain columns (the state letter as text, not a dictionary)."""
    if "state" in chunk and isinstance(chunk["state"].dtype, pd.CategoricalDtype):
        chunk = chunk.assign(state=chunk["state"].astype("string"))
    return chunk


def _recorded(
    cap: Capture, name: str, tids: np.ndarray | None, t_range: tuple[int | None, int | None] | None
) -> pd.DataFrame:
    """Table `name` as recorded, with only the rows of the chosen threads (where it has a `tid` column)
    and inside the span (by `t_ns`, else `start_ns`); empty with no columns when the capture lacks it."""
    from analyses.span import in_span

    frame = cap.table(name) if name in cap.table_names else pd.DataFrame()
    if frame.empty:
        return frame
    keep = np.ones(len(frame), dtype=bool)
    if tids is not None and "tid" in frame.columns:
        keep &= frame["tid"].isin(tids).to_numpy()
    time_column = "t_ns" if "t_ns" in frame.columns else "start_ns" if "start_ns" in frame.columns else None
    if t_range is not None and time_column is not None:
        keep &= in_span(frame[time_column].to_numpy(dtype=np.int64), t_range)
    return frame[keep]


def write_tables(
    cap: Capture,
    directory: Path,
    fmt: str,
    *,
    pattern: str | None = None,
    t_range: tuple[int | None, int | None] | None = None,
    progress: Progress | None = None,
    announce: Callable[[str], None] | None = None,
    force: bool = False,
    tids: tuple[int, ...] = (),
) -> dict[str, int]:
    """One file per table in `directory`; `announce` is told each file written (path and rows); an
    existing table file is replaced only with `force`. `pattern` and `tids` (--thread, --tid): only the
    rows of the threads either selects, in the tables with a tid column."""
    from forensics.export.frames import export_threads, export_verdicts, export_windows, flat_verdicts

    profiles = export_threads(cap, pattern, t_range, tids)
    chosen = profiles["tid"].to_numpy(dtype=np.int32)
    selected = pattern is not None or bool(tids)  # else every thread: the recorded tables whole
    with TableWriter(directory, fmt, force=force) as writer:
        if progress:
            progress.step("samples")
        for chunk in cap.iter_chunks("samples"):
            keep = np.isin(chunk["tid"].to_numpy(), chosen)
            if t_range is not None:
                from analyses.span import in_span

                keep &= in_span(chunk["t_ns"].to_numpy(), t_range)
            if keep.any():
                writer.append("samples", plain_samples(chunk[keep]))
        if progress:
            progress.step("windows")
        for windows in export_windows(cap, profiles, t_range=t_range):
            writer.append("windows", windows)
        for name in ("samples", "windows"):  # none in the span: the file is there, empty, with its columns
            if name not in writer.files:
                writer.append(name, pd.DataFrame())
        if progress:
            progress.step("verdicts")
        writer.append("verdicts", flat_verdicts(export_verdicts(cap, profiles, pattern, t_range, tids)))
        threads = cap.threads
        writer.append("threads", threads[threads["tid"].isin(chosen)])
        if progress:
            progress.step("recorded tables")
        for name in RECORDED:
            if name == "samples":
                continue
            writer.append(name, _recorded(cap, name, chosen if selected else None, t_range))
    if progress:
        progress.done()
    for name, path in writer.files.items():
        if announce is not None:
            announce(f"{path} ({writer.rows[name]} rows)")
    return writer.rows
