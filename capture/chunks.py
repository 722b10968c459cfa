"""A table chunk's bytes: one Arrow IPC file (format version 3 on) or one Parquet file (versions 1 and 2).

Writing: an Arrow IPC file of one record batch, its buffers zstd-compressed (level 3), the rows sorted by
(tid, tick or t_ns) so that a thread's slowly moving counters lie together. Parquet was the writer's single
largest cost on the eBPF sampler's Bitwig-shaped stream (its encoding, not the compression: 40 of its 54 ms
for 8 s of chunks were spent with compression off); the IPC file of the same tables took 24 ms and 15 %
fewer bytes (bench/chunk_codecs.py). Reading dispatches on the chunk's own magic, so every capture ever
written reads: "ARROW1" (Arrow IPC file) or "PAR1" (Parquet). Both are standard: any Arrow or Parquet
reader opens a chunk cut out of the container.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.ipc as ipc

ARROW_MAGIC = b"ARROW1"
PARQUET_MAGIC = b"PAR1"
ZSTD_LEVEL = 3  # level 1 was no faster on these chunks and 10-25 % larger (bench/chunk_codecs.py)
_WRITE_OPTIONS = ipc.IpcWriteOptions(compression=pa.Codec("zstd", ZSTD_LEVEL), use_threads=False)


@dataclass(frozen=True)
class ChunkHead:
    """What a chunk says of itself without decoding its columns."""

    rows: int
    schema: pa.Schema


def in_order(first: pa.ChunkedArray, then: pa.ChunkedArray) -> bool:
    """Whether the rows are already sorted by (first, then), no nulls: sort_by would keep them as they are."""
    import pyarrow.compute as pc

    n = len(first)
    if n < 2 or first.null_count or then.null_count:
        return n < 2
    a0, a1, b0, b1 = first.slice(0, n - 1), first.slice(1), then.slice(0, n - 1), then.slice(1)
    ahead = pc.or_(pc.less(a0, a1), pc.and_(pc.equal(a0, a1), pc.less_equal(b0, b1)))
    return bool(pc.all(ahead).as_py())


def encode_chunk(table: pa.Table) -> bytes:
    """`table` as one chunk: an Arrow IPC file of one record batch, zstd-compressed buffers."""
    if "tid" in table.column_names and ("tick" in table.column_names or "t_ns" in table.column_names):
        order = "tick" if "tick" in table.column_names else "t_ns"
        if not in_order(table["tid"], table[order]):  # the eBPF writer's rows come sorted: a sort is 15 % of a chunk
            table = table.sort_by([("tid", "ascending"), (order, "ascending")])
    if any(column.num_chunks > 1 for column in table.columns):
        # One batch: an IPC file holds one dictionary per column, so pieces with dictionaries of their own
        # (a concatenation) are unified first.
        table = table.unify_dictionaries().combine_chunks()
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, table.schema, options=_WRITE_OPTIONS) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _is_arrow(data: bytes | memoryview) -> bool:
    """Whether the chunk is an Arrow IPC file (format 3 on), else taken for a Parquet file (formats 1 and 2)."""
    return bytes(data[: len(ARROW_MAGIC)]) == ARROW_MAGIC


def chunk_head(data: bytes | memoryview) -> ChunkHead:
    """The chunk's row count and schema (raises pa.ArrowException, OSError or ValueError for bytes that are
    neither format, or a damaged footer)."""
    if _is_arrow(data):
        reader = ipc.open_file(pa.BufferReader(data))
        return ChunkHead(reader.count_rows(), reader.schema)
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(pa.BufferReader(data))
    return ChunkHead(parquet.metadata.num_rows, parquet.schema_arrow)


def read_chunk_columns(data: bytes | memoryview, columns: list[str] | None = None) -> pa.Table:
    """The chunk's columns of `columns` that it has, in its own order (None: all); only those are decoded.
    One thread: the caller decodes on a worker of its own (capture/format.py _read_arrow_chunks)."""
    wanted = None if columns is None else set(columns)
    if _is_arrow(data):
        if wanted is None:
            options = ipc.IpcReadOptions(use_threads=False)
        else:
            names = ipc.open_file(pa.BufferReader(data)).schema.names
            fields = [i for i, name in enumerate(names) if name in wanted]
            options = ipc.IpcReadOptions(included_fields=fields, use_threads=False)
        table = ipc.open_file(pa.BufferReader(data), options=options).read_all()
        # An IPC file's buffers are taken as they are (offsets, dictionary indices): a capture from someone
        # else's bug report could point them outside the data, read later by pandas. Checked here (raises
        # pa.ArrowInvalid: the chunk is skipped with a warning); ~2 % of a chunk's reading.
        table.validate(full=True)
        return table
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(pa.BufferReader(data))
    present = parquet.schema_arrow.names
    return parquet.read(columns=[c for c in present if wanted is None or c in wanted], use_threads=False)


def parquet_chunk(table: pa.Table) -> bytes:
    """`table` as versions 1 and 2 wrote a chunk (one Parquet file, integers delta-encoded, zstd): for the
    benchmark that compares the two (bench/chunk_codecs.py), never written by the recorder now."""
    import pyarrow.parquet as pq

    delta_columns = [f.name for f in table.schema if pa.types.is_integer(f.type) and table.num_rows > 0]
    buf = io.BytesIO()
    pq.write_table(
        table,
        buf,
        compression="zstd",
        compression_level=3,
        use_dictionary=[f.name for f in table.schema if pa.types.is_dictionary(f.type)],
        column_encoding=dict.fromkeys(delta_columns, "DELTA_BINARY_PACKED") or None,
        write_statistics=False,
    )
    return buf.getvalue()
