"""CSV and Parquet tables of a capture, one file per table in one directory (for pandas, DuckDB, Spark).

A directory rather than one file: CSV holds one table per file, and a directory of `samples.parquet`,
`windows.parquet`, `verdicts.parquet`... reads in DuckDB as `FROM 'DIR/windows.parquet'` and in pandas
as `pd.read_parquet('DIR/windows.parquet')`, and many bug reports' exports query together with a glob.
Tables are written piece by piece (a writer per table), so a long capture never sits in memory whole.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from capture.errors import ForensicsError


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
