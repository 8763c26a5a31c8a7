"""The bucket task: one per touched (partition, bucket), run inside Spark by ``mapInArrow``.

The decode tasks stage each bucket's records as a record batch of their staged Arrow files (:mod:`changelake.inputs.decode`,
bucketed by :func:`bucket_ids`, Spark's ``pmod(xxhash64(bucket key), bucket.num)`` in numpy). A bucket task
reads those record batches and the bucket's current files directly with pyarrow (no record goes through a Spark
shuffle or a Spark row), orders and de-duplicates the records as the table's source settings say, merges them
with :func:`changelake.engine.columnar.merge_records`, and writes each output once: the bucket's new data file
(sorted by key) and its changelog file, already numbered. Fluss keeps one log per bucket, and so does
changelake: ``_log_offset`` is gapless per (partition, bucket), continuing from the end the previous batch
committed, so the task numbers its own rows and no other task or job is involved. It returns one small marker
row (files, counts, the bucket's new log end); the driver commits.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc  # noqa: F401 - pa.ipc
import pyarrow.parquet as pq

from changelake import privacy
from changelake.arrow_keys import group_ids, increasing, key_numbers
from changelake.config import tuned
from changelake.engine.columnar import merge_records
from changelake.errors import ChangelakeError
from changelake.inputs.records import KAFKA_COLUMNS, MESSAGE_SHIFT, ORDER_COLUMNS
from changelake.lru import BoundedLRU
from changelake.pyworker import lazy_zip_invalidation
from changelake.spec import TableSpec
from changelake.storage.files import (
    POSITION_DELETE_SCHEMA,
    delete_stats,
    read_position_deletes,
    write_position_deletes,
)
from changelake.storage.taskio import TaskIO

COUNTERS = ("records", "inserted", "updated", "deleted", "ignored", "dropped_update_before")
SOURCE_COUNTERS = ("redelivered", "deduplicated")
# A bucket merged in the applying process (``BucketContext.threads``) with at least this many rows is written
# as two files, one per core (readers take any number of files per bucket).
SPLIT_ROWS = 100_000


@dataclass(frozen=True)
class BucketContext:
    """Everything a task needs, shipped with the function (small: file paths and log ends per bucket)."""

    spec: TableSpec
    partition_columns: tuple[str, ...]  # partition keys then _bucket
    files_by_partition: dict[tuple, list[str]]
    io_properties: dict[str, str]
    out_dir: str  # the attempt's directory for new data files
    log_dir: str  # the attempt's directory for changelog files
    batch_id: int
    commit_micros: int  # the batch's _commit_timestamp, microseconds since the epoch (UTC)
    log_ends: dict[str, int] = field(default_factory=dict)  # partition key -> committed log end
    target_columns: tuple[str, ...] | None = None  # a partial update's target columns
    merge_mode: str | None = None  # None (merge through the engine) or "overwrite" (merge.OverwriteMerger)
    id_ranges: dict[tuple, list[tuple[int, int]]] | None = None  # auto-increment ids per partition
    ordering: str = "arrival"  # "arrival", "kafka-offset" or a field path (records carry ORDER_COLUMNS)
    dedup_offsets: bool = False  # drop Kafka redeliveries (``dedup: kafka-offsets``)
    applied_offsets: dict[str, int] = field(default_factory=dict)  # "topic:partition" -> last applied
    compression: str = (
        "zstd"  # the Parquet codec of data and changelog files (write.parquet.compression-codec)
    )
    compression_level: int | None = None
    delta_compression: str = "lz4"  # the codec of the group writer's new-row and delete files
    # Use more than one thread: set when the bucket tasks run in the applying process (a small batch), not in
    # Spark tasks, which already keep every core busy. pyarrow reads the bucket's file on its thread pool and
    # the changelog file is written while the data file is.
    threads: bool = False
    # Keep the rows this process writes for the next merge of the bucket (:data:`STORED_ROWS`): set with
    # ``threads``, when the bucket tasks run in the applying process.
    keep_rows: bool = False
    # The Iceberg field id of every column, by name, of the PK table and of its changelog table: written into
    # each file (:func:`write_file`), so that readers without name mapping read the files as Iceberg's own.
    field_ids: dict[str, int] = field(default_factory=dict)
    log_field_ids: dict[str, int] = field(default_factory=dict)


class StoredRows:
    """Rows of data files and positions of delete files this process wrote or read, by path, so that its next
    merge of a bucket skips reading them again: a process applying batch after batch (the apply service, a
    loop over landed batches) reads a file once. A file is never rewritten (every apply writes new files
    under a fresh directory), so its path names its contents for good. Least recently used first out, at
    most ``max_bytes`` of Arrow and numpy buffers (None: ``CHANGELAKE_KEPT_ROWS_MB`` when first used)."""

    def __init__(self, max_bytes: int | None = None):
        self._max_bytes = max_bytes
        self._lru: BoundedLRU[Any] | None = None

    @property
    def _rows(self) -> BoundedLRU[Any]:
        if self._lru is None:
            limit = self._max_bytes if self._max_bytes is not None else tuned("kept_rows_mb") << 20
            self._lru = BoundedLRU(limit, size=_nbytes)
        return self._lru

    @property
    def kept_bytes(self) -> int:
        return self._rows.total

    @property
    def capacity(self) -> int:
        """The most it keeps, in bytes."""
        return self._rows.limit

    def get(self, path: str, schema: pa.Schema) -> pa.Table | None:
        """A data file's rows (the schema too: a column added since reads as nulls)."""
        return self._rows.get(("rows", path, schema))

    def put(self, path: str, schema: pa.Schema, rows: pa.Table) -> None:
        self._rows.put(("rows", path, schema), rows)

    def forget(self, paths, schema: pa.Schema) -> None:
        """Drop the rows of files a commit replaces: no plan names them again (a retried apply reads them)."""
        for path in paths:
            self._rows.pop(("rows", path, schema))

    def get_deletes(self, path: str) -> dict[str, np.ndarray] | None:
        return self._rows.get(("deletes", path))

    def put_deletes(self, path: str, positions: dict[str, np.ndarray]) -> None:
        self._rows.put(("deletes", path), positions)

    def holds(self, path: str, schema: pa.Schema) -> bool:
        return self._rows.get(("rows", path, schema)) is not None

    def clear(self) -> None:
        self._rows.clear()


def _nbytes(value: Any) -> int:
    if isinstance(value, dict):
        return 64 + sum(len(k) + v.nbytes for k, v in value.items())
    return value.nbytes


#: This process's :class:`StoredRows`: 1 GiB by default (``CHANGELAKE_KEPT_ROWS_MB``), enough for the rows of the
#: benchmark's 5M-row table (~300 MB as Arrow) and its delete positions.
STORED_ROWS = StoredRows()


def row_schema(spec: TableSpec) -> pa.Schema:
    """A stored row in Arrow: the table's columns in storage types, then ``_bucket``."""
    return pa.schema(
        [pa.field(c.name, c.type.arrow_type()) for c in spec.columns] + [pa.field("_bucket", pa.int32())]
    )


def changelog_schema(spec: TableSpec) -> pa.Schema:
    """A changelog row as stored: the columns, then change type, batch, bucket, offset, commit time."""
    return pa.schema(
        [pa.field(c.name, c.type.arrow_type()) for c in spec.columns]
        + [
            pa.field("_change_type", pa.string()),
            pa.field("_batch_id", pa.int64()),
            pa.field("_bucket", pa.int32()),
            pa.field("_log_offset", pa.int64()),
            pa.field("_commit_timestamp", pa.timestamp("us", tz="UTC")),
        ]
    )


def _integer_stored(t: pa.DataType) -> bool:
    """Whether Parquet stores a column of this type as INT32/INT64 (integers, dates, times, timestamps)."""
    return pa.types.is_integer(t) or pa.types.is_date32(t) or pa.types.is_time(t) or pa.types.is_timestamp(t)


def delta_columns(schema: pa.Schema, dictionary: list[str]) -> dict[str, str]:
    """The columns a data or changelog file delta-encodes (``DELTA_BINARY_PACKED``): every column stored as
    integers that has no dictionary. For the benchmark's bucket of 156,000 rows this wrote the file in 21 ms
    instead of 27 ms, 13% smaller, and read it back in 5.4 ms instead of 7.7 ms: the sorted key becomes
    small deltas, and a column of random integers is bit-packed to its width before zstd, which had spent
    longer finding less. The log offsets count up by one: a few bytes."""
    return {
        f.name: "DELTA_BINARY_PACKED" for f in schema if f.name not in dictionary and _integer_stored(f.type)
    }


def write_file(
    io,
    path: str,
    table: pa.Table,
    dictionary: list[str],
    ctx: BucketContext,
    row_group_size: int | None = None,
    changelog: bool = False,
) -> None:
    """Write one Parquet file of the PK table (or, ``changelog``, of its changelog table), with dictionary
    pages only for the columns named: a dictionary of distinct values (most columns of a table) costs more to
    build than it saves. Integer columns are delta-encoded (:func:`delta_columns`). Statistics for every
    column: pyiceberg derives a file's partition and column metrics from them, and a bucket task reading a
    file of several buckets reads only the row groups whose ``_bucket`` range holds its bucket. Every column
    carries its table's Iceberg field id (:func:`with_field_ids`)."""
    dictionary = [c for c in dictionary if c in table.column_names]
    table = with_field_ids(table, ctx.log_field_ids if changelog else ctx.field_ids)
    sizes = {} if row_group_size is None else {"row_group_size": row_group_size}
    footer: list[pq.FileMetaData] = []
    with io.open_output(path) as sink:
        pq.write_table(
            table,
            sink,
            compression=ctx.compression,
            compression_level=ctx.compression_level,
            use_dictionary=dictionary or False,
            column_encoding=delta_columns(table.schema, dictionary) or None,
            metadata_collector=footer,
            **sizes,
        )
        size = sink.tell()
    io.wrote(path, size, footer[0])


def with_field_ids(table: pa.Table, field_ids: dict[str, int]) -> pa.Table:
    """``table`` with each column's Iceberg field id in its Arrow field (``PARQUET:field_id``, which Parquet
    writes as the column's field id), without copying data. The Iceberg spec has a writer give every column
    its id; a file without them is read only through the table's name mapping, which some readers lack (Daft
    refuses such a file). A column without an id is a ChangelakeError: a file must not carry some ids and not
    others. No ids at all (a context built without a table) writes none."""
    if not field_ids:
        return table
    missing = [name for name in table.column_names if name not in field_ids]
    if missing:
        raise ChangelakeError(f"no Iceberg field id for column(s) {missing} (known: {sorted(field_ids)})")
    schema = pa.schema(
        [f.with_metadata({b"PARQUET:field_id": str(field_ids[f.name]).encode()}) for f in table.schema],
        metadata=table.schema.metadata,
    )
    return pa.Table.from_arrays(table.columns, schema=schema)


#: Row groups of a file holding several buckets (a merge-on-read batch's new rows): a bucket task that does not
#: keep rows reads only the groups holding its bucket, not the whole file once per bucket.
SHARED_ROW_GROUP_ROWS = 65_536


def compression_of(properties: dict[str, str]) -> tuple[str, int | None]:
    """The table's Parquet codec and level (Iceberg's ``write.parquet.compression-*`` properties; zstd)."""
    codec = properties.get("write.parquet.compression-codec", "zstd").lower()
    level = properties.get("write.parquet.compression-level")
    return ("none" if codec == "uncompressed" else codec), (int(level) if level else None)


def delete_compression_of(properties: dict[str, str]) -> str:
    """The codec of merge-on-read batches' small files, their delete files and new rows (Iceberg's
    ``write.delete.parquet.compression-codec``; lz4). zstd's setup per column chunk is most of the cost of
    reading a file of a few hundred rows: a batch's 800-row data file read in 0.73 ms as zstd, 0.40 ms as
    lz4 (30% larger), its delete file in 0.40 and 0.28 ms. Compaction writes what it merges in the table's
    codec."""
    codec = properties.get("write.delete.parquet.compression-codec", "lz4").lower()
    return "none" if codec == "uncompressed" else codec


@dataclass(frozen=True)
class SourceFile:
    """A data file that may hold rows of a task's bucket."""

    path: str
    rows: int
    single: bool  # it holds this bucket only (else rows of several buckets, sorted by bucket then key)
    size: int = 0  # bytes, as the manifest gives them (0: not known)


@dataclass(frozen=True)
class BucketTask:
    """One touched (partition, bucket) of a batch: where its records and its current rows are, and how its
    result is written."""

    key: str  # partition_key of (partition values..., bucket): how the batch's bookkeeping names it
    bucket: int
    parts: tuple[tuple[str, int], ...] = ()  # staged records: (file, record batch)
    part_sizes: tuple[
        int, ...
    ] = ()  # the staged files' sizes, as their decode tasks wrote them (0: not known)
    files: tuple[SourceFile, ...] = ()  # the data files that may hold the bucket's rows
    deletes: tuple[str, ...] = ()  # the position-delete files of the bucket's Iceberg partition
    delete_sizes: tuple[int, ...] = ()  # their sizes, as the manifest gives them (empty: not known)
    output: str = ""  # the Iceberg partition (JSON) the bucket's new data and delete files belong to
    # Write the bucket whole (copy-on-write): its rows in new files that replace its own files. Otherwise
    # (merge-on-read) only its new and changed rows are written, and a delete file names the rows they replace.
    rewrite: bool = True
    log_start: int = 0  # the bucket's committed log end
    id_ranges: tuple[tuple[int, int], ...] | None = None  # auto-increment ids it may hand out
    records: int = 0  # records staged for it (for planning)
    stored_bytes: int = 0  # size of its current files (for planning)


def stored_schema(spec: TableSpec) -> pa.Schema:
    """A bucket's rows as the merge takes them: the table's columns in storage types."""
    return pa.schema([pa.field(c.name, c.type.arrow_type()) for c in spec.columns])


def file_rows(spec: TableSpec, io, path: str, threads: bool = False, keep_rows: bool = False) -> pa.Table:
    """A data file's rows: the table's columns in storage types, then ``_bucket`` (:func:`row_schema`). With
    ``keep_rows`` taken from, or kept in, :data:`STORED_ROWS`. A file written before a column was added
    lacks it: null, as Iceberg's name mapping reads it."""
    schema = row_schema(spec)
    if keep_rows and (kept := STORED_ROWS.get(path, schema)) is not None:
        return kept
    names = schema.names
    with io.open_input(path) as stream:
        parquet = pq.ParquetFile(stream)
        present = set(parquet.schema_arrow.names)
        unknown = present - set(names)
        if unknown:  # rewriting the bucket without them would drop their values
            raise ChangelakeError(
                f"{spec.full_name}: stored file {path} has columns {sorted(unknown)} that the spec in use "
                "lacks; the table was altered after this apply began. Apply again to use its new spec"
            )
        part = parquet.read(columns=[v for v in names if v in present], use_threads=threads)
    rows = pa.table(
        {v: part.column(v) if v in present else pa.nulls(part.num_rows, schema.field(v).type) for v in names}
    ).cast(schema)
    if keep_rows:
        STORED_ROWS.put(path, schema, rows)
    return rows


def deleted_positions(io, delete_paths, keep_rows: bool = False, only=None) -> dict[str, np.ndarray]:
    """Every data file's deleted positions (sorted) that the position-delete files name; with ``only``, of
    those data files alone (a bucket's: a partition's delete files name the rows of all its buckets)."""
    parts: dict[str, list] = {}
    wanted = None if only is None else set(only)
    cache = STORED_ROWS if keep_rows else getattr(io, "kept", None)
    for path in delete_paths:
        positions = cache.get_deletes(path) if cache is not None else None
        if positions is None:
            with io.open_input(path) as stream:
                positions = read_position_deletes(stream)
            if cache is not None:
                cache.put_deletes(path, positions)
        for data_path in positions if wanted is None else wanted.intersection(positions):
            parts.setdefault(data_path, []).append(positions[data_path])
    return {p: merge_positions(v) for p, v in parts.items()}


def merge_positions(parts: list) -> np.ndarray:
    """One sorted int64 array of the distinct positions in several (Arrow or numpy arrays; a file's deletes
    from several delete files), a new array.

    A delete file lists each data file's positions sorted (the Iceberg spec's order), so the parts are sorted
    runs: a stable sort (timsort, for int64) merges them in about linear time and finds one run at once, where
    a quicksort or ``np.unique`` sorts from scratch (13,000 sorted positions: ~6 us against ~330 us; five parts
    of 4,000: ~70 us against ~2.2 ms). A batch into a bucket merges the positions of every data file its
    partition's delete files name, hundreds of arrays. Parts that are not sorted come out right all the same."""
    arrays = [np.asarray(p, np.int64) if isinstance(p, np.ndarray) else p.to_numpy() for p in parts]
    if not arrays:
        return np.zeros(0, np.int64)
    merged = np.concatenate(arrays) if len(arrays) > 1 else arrays[0].astype(np.int64, copy=True)
    merged.sort(kind="stable")
    if len(arrays) == 1 or len(merged) < 2:
        return merged  # one delete file names a position once
    keep = np.empty(len(merged), bool)
    keep[0] = True
    np.not_equal(merged[1:], merged[:-1], out=keep[1:])
    return merged[keep]


def live_mask(num_rows: int, deleted: np.ndarray | None) -> np.ndarray | None:
    """A boolean mask of a data file's rows that no delete names (None: all of them live)."""
    if deleted is None or not len(deleted):
        return None
    mask = np.ones(num_rows, bool)
    mask[deleted[deleted < num_rows]] = False
    return mask


def position_deletes(paths: list[str], positions: list[np.ndarray]) -> pa.Table:
    """The rows of a position-delete file: each data file path with its positions, sorted by path and position
    (the order the Iceberg spec requires)."""
    order = sorted(range(len(paths)), key=paths.__getitem__)
    index, pos = [], []
    for i in order:
        p = np.unique(np.asarray(positions[i], np.int64))  # sorted, each once
        index.append(np.full(len(p), i, np.int64))
        pos.append(p)
    at = np.concatenate(index) if index else np.zeros(0, np.int64)
    return pa.Table.from_arrays(
        [
            pa.array(paths, pa.string()).take(pa.array(at)),
            pa.array(np.concatenate(pos) if pos else np.zeros(0, np.int64), pa.int64()),
        ],
        schema=POSITION_DELETE_SCHEMA,
    )


@dataclass
class Piece:
    """A bucket's rows in one data file: a slice of the file (from row ``offset``), and which of them live."""

    path: str
    single: bool
    offset: int
    rows: pa.Table  # row_schema
    live: np.ndarray | None  # a mask of the live rows (None: all)
    # The file position of each row, when they are not one slice from ``offset`` (a file another writer left
    # unsorted by bucket: :func:`bucket_pieces`).
    positions: np.ndarray | None = None

    @property
    def live_count(self) -> int:
        return self.rows.num_rows if self.live is None else int(self.live.sum())

    def file_positions(self, local: np.ndarray) -> np.ndarray:
        """The file positions of the rows at ``local`` (indexes into :attr:`rows`)."""
        return local + self.offset if self.positions is None else self.positions[local]

    def live_positions(self) -> np.ndarray:
        """The file positions of the live rows of this piece."""
        local = np.arange(self.rows.num_rows) if self.live is None else np.flatnonzero(self.live)
        return self.file_positions(local)

    def live_rows(self) -> pa.Table:
        return self.rows if self.live is None else self.rows.filter(pa.array(self.live))


def bucket_pieces(task: BucketTask, ctx: BucketContext, io) -> list[Piece]:
    """The bucket's rows in each of its files, the deleted ones marked."""
    # Sizes the manifests gave: an object store's file then opens without a request of its own.
    io.know({f.path: f.size for f in task.files} | dict(zip(task.deletes, task.delete_sizes, strict=False)))
    deleted = (
        deleted_positions(io, task.deletes, ctx.keep_rows, only=[f.path for f in task.files])
        if task.deletes
        else {}
    )
    pieces = []
    for f in sorted(task.files, key=lambda f: f.path):  # in name order: one apply's files are in key order
        offset = 0
        if f.single or ctx.keep_rows:
            rows = file_rows(ctx.spec, io, f.path, ctx.threads, ctx.keep_rows)
        elif io.kept is not None:  # a file shared by buckets, read once per Spark task
            rows = io.kept.get(f.path, row_schema(ctx.spec))
            if rows is None:
                rows = file_rows(ctx.spec, io, f.path, ctx.threads)
                io.kept.put(f.path, row_schema(ctx.spec), rows)
        else:  # read for one bucket: the row groups that hold it
            offset, rows = _groups_of_bucket(ctx.spec, io, f.path, task.bucket)
        positions = None
        if not f.single:
            buckets = rows.column("_bucket").to_numpy()
            if len(buckets) < 2 or bool(np.all(buckets[1:] >= buckets[:-1])):
                start, end = np.searchsorted(buckets, [task.bucket, task.bucket + 1])
                offset, rows = offset + int(start), rows.slice(int(start), int(end - start))
            else:  # another writer left the file unsorted by bucket: the bucket's rows wherever they are
                at = np.flatnonzero(buckets == task.bucket)
                positions, rows = at + offset, rows.take(pa.array(at))
        gone = deleted.get(f.path)
        live = None
        if gone is not None and len(gone):
            if positions is None:
                local = gone[(gone >= offset) & (gone < offset + rows.num_rows)] - offset
            else:
                local = np.flatnonzero(np.isin(positions, gone))
            if len(local):
                live = np.ones(rows.num_rows, bool)
                live[local] = False
        if rows.num_rows:
            pieces.append(Piece(f.path, f.single, offset, rows, live, positions))
    return pieces


def _groups_of_bucket(spec: TableSpec, io, path: str, bucket: int) -> tuple[int, pa.Table]:
    """The consecutive row groups of a file sorted by bucket whose ``_bucket`` statistics admit ``bucket``, as
    :func:`file_rows` gives rows, and the file position of their first row."""
    with io.open_input(path) as stream:
        parquet = pq.ParquetFile(stream)
        meta = parquet.metadata
        column = parquet.schema_arrow.get_field_index("_bucket")
        starts, at, wanted = [], 0, []
        for g in range(meta.num_row_groups):
            starts.append(at)
            at += meta.row_group(g).num_rows
            stats = meta.row_group(g).column(column).statistics if column >= 0 else None
            if stats is None or not stats.has_min_max or stats.min <= bucket <= stats.max:
                wanted.append(g)
        if not wanted:
            return 0, row_schema(spec).empty_table()
        wanted = list(range(wanted[0], wanted[-1] + 1))  # consecutive: positions stay one range
        schema = row_schema(spec)
        present = set(parquet.schema_arrow.names)
        part = parquet.read_row_groups(
            wanted, columns=[n for n in schema.names if n in present], use_threads=False
        )
    rows = pa.table(
        {
            n: part.column(n) if n in present else pa.nulls(part.num_rows, schema.field(n).type)
            for n in schema.names
        }
    ).cast(schema)
    return starts[wanted[0]], rows


def prefetch(ctx: BucketContext, tasks: list[BucketTask]) -> None:
    """Read the files a batch merged in this process needs and this process does not keep, on a few threads
    (pyarrow decodes without the GIL) into :data:`STORED_ROWS`, so the tasks find them kept."""
    if not ctx.keep_rows:
        return
    schema = row_schema(ctx.spec)
    data = sorted({f.path for t in tasks for f in t.files if not STORED_ROWS.holds(f.path, schema)})
    deletes = sorted({p for t in tasks for p in t.deletes if STORED_ROWS.get_deletes(p) is None})
    if len(data) + len(deletes) < 2:
        return
    io = TaskIO(ctx.io_properties)
    with ThreadPoolExecutor(
        max_workers=min(4, os.cpu_count() or 2), thread_name_prefix="changelake-read"
    ) as pool:
        jobs = [pool.submit(file_rows, ctx.spec, io, p, False, True) for p in data]
        jobs += [pool.submit(deleted_positions, io, [p], True) for p in deletes]
        for job in jobs:
            job.result()


#: What :func:`keep_files` fills :data:`STORED_ROWS` up to, of its capacity: the rest is left for the batches.
KEEP_FILES_SHARE = 0.8


def keep_files(spec: TableSpec, io_properties: dict[str, str], data: list[str], deletes: list[str]) -> int:
    """Read a table's data files (rows) and position-delete files (positions) into :data:`STORED_ROWS`, as
    far as they fit in KEEP_FILES_SHARE of it beside what it keeps already; return the files read. The warm
    endpoint runs it at its start, so that the first batch it applies finds its buckets' files kept, as the
    batches after it do, instead of reading them (the benchmark's 5M-row table: ~1 s of a 100-record batch)."""
    schema = row_schema(spec)
    io = TaskIO(io_properties)
    read = 0
    for path in deletes:
        if STORED_ROWS.kept_bytes > KEEP_FILES_SHARE * STORED_ROWS.capacity:
            return read
        if STORED_ROWS.get_deletes(path) is None:
            deleted_positions(io, [path], keep_rows=True)
            read += 1
    for path in data:
        if STORED_ROWS.kept_bytes > KEEP_FILES_SHARE * STORED_ROWS.capacity:
            break
        if not STORED_ROWS.holds(path, schema):
            file_rows(spec, io, path, threads=True, keep_rows=True)
            read += 1
    return read


def read_stored(
    spec: TableSpec, io, files: tuple[str, ...] | list[str], threads: bool = False, keep_rows: bool = False
) -> pa.Table:
    """The rows of data files (the table's columns in storage types), in file-name order: the files one apply
    writes for a bucket are named in key order, so their rows come out in key order."""
    schema = stored_schema(spec)
    parts = [file_rows(spec, io, p, threads, keep_rows).select(schema.names) for p in sorted(files)]
    return pa.concat_tables(parts) if parts else schema.empty_table()


#: A staged object of at most this many bytes is read whole by the first bucket task of a Spark task that
#: needs it and kept for the others (one GET, where each bucket's record batch was a GET of the footer and one
#: of the batch); a larger one is read by ranges, a bucket's record batch at a time.
STAGED_WHOLE_BYTES = 32 << 20


def read_staged(
    parts: tuple[tuple[str, int], ...], schema: pa.Schema, io, sizes: tuple[int, ...] = ()
) -> pa.Table:
    """A bucket's staged records: its record batch of each staged file that has one (memory-mapped when
    local: no copy), in ``schema``; a column the file left out (null in all its records) as nulls. ``sizes``:
    the staged files' sizes, in the order of ``parts`` (an object then opens without a request of its own)."""
    io.know({path: size for (path, _), size in zip(parts, sizes, strict=False)})
    batches = []
    for path, index in sorted(parts):
        local = TaskIO.local_path(path)
        if local is not None:
            batch = pa.ipc.open_file(pa.memory_map(local)).get_batch(index)
        else:
            with io.open_input(path, STAGED_WHOLE_BYTES) as stream:
                batch = pa.ipc.open_file(stream).get_batch(index)
        if not batch.schema.equals(schema):
            present = set(batch.schema.names)
            batch = pa.RecordBatch.from_arrays(
                [
                    batch.column(f.name) if f.name in present else pa.nulls(batch.num_rows, f.type)
                    for f in schema
                ],
                schema=schema,
            )
        batches.append(batch)
    return pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()


@dataclass
class BucketOutput:
    """What a bucket task leaves to its group's writer: new rows for the group's data file (merge-on-read),
    rows to delete by position, and the bucket's numbered changelog."""

    delta: pa.Table | None = None  # row_schema, sorted by key
    deletes: dict[str, np.ndarray] = field(default_factory=dict)  # data file path -> positions
    changelog: pa.Table | None = None


def merge_bucket(task: BucketTask, records: pa.Table, ctx: BucketContext, io) -> tuple[dict, BucketOutput]:
    """Merge a bucket's records into its rows; the bucket's marker (files written and replaced, counts, new log
    end, ids left, Kafka offsets) and what its group writes for it.

    Copy-on-write (``task.rewrite``): every live row of the bucket goes into the merge, and the result into new
    files of this bucket alone, which replace the bucket's own files (its rows in files shared with other buckets
    are deleted by position). Merge-on-read: only the live rows whose keys the records name go into the merge;
    the rows it changes or deletes are deleted by position, and the new and changed rows go to the group's
    data file. A row the merge leaves as it was is neither deleted nor written again."""
    spec = ctx.spec
    bucket = task.bucket
    records, source = order_and_dedup(records, ctx)
    pieces = bucket_pieces(task, ctx, io)
    live_before = sum(p.live_count for p in pieces)
    target = None if ctx.target_columns is None else list(ctx.target_columns)
    ids = list(task.id_ranges or []) if spec.auto_increment_column else None
    schema = stored_schema(spec)
    out = BucketOutput()
    paths: list[str] = []
    removed: list[str] = []
    writes: list[Callable[[], None]] = []
    if task.rewrite:
        stored = _live_rows(spec, pieces)
        result = merge_records(spec, stored, records, target, ids, ctx.merge_mode)
        rows = result.rows
        for p in pieces:
            if p.single:
                removed.append(p.path)
            else:
                positions = p.live_positions()
                if len(positions):
                    out.deletes[p.path] = positions
        if rows.num_rows:
            rows = _with_bucket(rows, bucket)
            # In this process, a large bucket is written as two files of consecutive keys, one per core: Parquet
            # encodes a file on one thread (156,000 rows: 29 ms as one file, 16 ms as two halves at once).
            halves = 2 if ctx.threads and rows.num_rows >= SPLIT_ROWS else 1
            step = -(-rows.num_rows // halves)
            name = f"{ctx.out_dir}/data/bucket-{bucket:04d}-{uuid.uuid4().hex}"
            for part_number, start in enumerate(range(0, rows.num_rows, step)):
                paths.append(f"{name}-{part_number:03d}.parquet")  # in key order by name, as pieces are read
                part = rows.slice(start, step)
                writes.append(functools.partial(write_file, io, paths[-1], part, data_dictionary(spec), ctx))
                if ctx.keep_rows:
                    STORED_ROWS.put(paths[-1], row_schema(spec), part)
    else:
        stored, located = _matching_rows(spec, pieces, records)
        result = merge_records(spec, stored, records, target, ids, ctx.merge_mode)
        assert result.stored_unchanged is not None and result.rows_changed is not None
        replaced = ~result.stored_unchanged
        if replaced.any():
            where_path, where_pos = located[0][replaced], located[1][replaced]
            for i in np.unique(where_path).tolist():
                out.deletes[pieces[i].path] = where_pos[where_path == i]
        changed = result.rows.filter(pa.array(result.rows_changed))
        if changed.num_rows:
            out.delta = _with_bucket(changed, bucket)
    if ctx.keep_rows and removed:
        STORED_ROWS.forget(removed, row_schema(spec))
    log = result.changelog
    if log.num_rows:
        out.changelog = _numbered_changelog(log, spec, ctx, bucket, task.log_start, schema)
    _run_writes(writes, ctx)
    counts = result.counts
    remaining = result.ids_remaining
    marker = {
        "_paths": paths,
        "_removed": removed,
        "_log_paths": [],
        "_deletes": None,
        "_count": live_before + counts.inserted - counts.deleted,
        "_log_start": task.log_start,
        "_log_end": task.log_start + log.num_rows,
        "_ai_next": remaining and remaining[0],
        "_ai_end": remaining and remaining[1],
    }
    marker.update({f"_{c}": getattr(counts, c) for c in COUNTERS})
    marker.update({f"_{c}": source[c] for c in SOURCE_COUNTERS})
    marker["_kafka_offsets"] = json.dumps(source.pop("offsets"), sort_keys=True)
    return marker, out


def data_dictionary(spec: TableSpec) -> list[str]:
    """The columns of a data file written with dictionary pages: the partition keys and the bucket."""
    return [*spec.partition_keys, "_bucket"]


def _with_bucket(rows: pa.Table, bucket: int) -> pa.Table:
    return rows.append_column("_bucket", pa.array(np.full(rows.num_rows, bucket, np.int32)))


def _live_rows(spec: TableSpec, pieces: list[Piece]) -> pa.Table:
    """Every live row of a bucket (the table's columns), in key order when its files are read in name order
    and hold consecutive keys (one apply's files); else as read (the merge orders its result by key)."""
    schema = stored_schema(spec)
    parts = [p.live_rows().select(schema.names) for p in pieces]
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _matching_rows(spec: TableSpec, pieces: list[Piece], records: pa.Table) -> tuple[pa.Table, tuple]:
    """The live rows of a bucket whose keys the records name, in key order where the key is one number, and
    where each of them is: (piece index, file position) arrays in the same order."""
    schema = stored_schema(spec)
    keys = list(spec.primary_key)
    found_rows, found_piece, found_pos = [], [], []
    record_keys = records.select(keys)
    numbers = key_numbers(record_keys.column(0)) if len(keys) == 1 else None
    if numbers is not None:
        numbers = np.unique(numbers)  # sorted once for every piece's search (a key updated twice: once)
    for i, p in enumerate(pieces):
        at = _matches(p.rows.select(keys), record_keys, numbers)
        if p.live is not None and len(at):
            at = at[p.live[at]]
        if len(at):
            found_rows.append(p.rows.select(schema.names).take(pa.array(at)))
            found_piece.append(np.full(len(at), i, np.int64))
            found_pos.append(p.file_positions(at))
    if not found_rows:
        return schema.empty_table(), (np.zeros(0, np.int64), np.zeros(0, np.int64))
    stored = pa.concat_tables(found_rows)
    piece, pos = np.concatenate(found_piece), np.concatenate(found_pos)
    if numbers is not None and len(found_rows) > 1:
        stored_numbers = key_numbers(stored.column(keys[0]))
        assert (
            stored_numbers is not None
        )  # the records' key column has numbers: the stored one's type is the same
        order = np.argsort(stored_numbers, kind="stable")
        stored, piece, pos = stored.take(pa.array(order)), piece[order], pos[order]
    return stored, (piece, pos)


def _matches(stored_keys: pa.Table, record_keys: pa.Table, record_numbers: np.ndarray | None) -> np.ndarray:
    """Positions of the stored rows whose key is among the records' keys (ascending). ``record_numbers``:
    the records' keys as numbers, sorted and distinct (so the positions found in an increasing file are too)."""
    n = stored_keys.num_rows
    if not n or not record_keys.num_rows:
        return np.zeros(0, np.int64)
    if record_numbers is not None:
        stored = key_numbers(stored_keys.column(0))
        if stored is not None and increasing(stored):
            at = np.searchsorted(stored, record_numbers)
            ok = at < n
            ok[ok] = stored[at[ok]] == record_numbers[ok]
            return at[ok]
    gid = group_ids(pa.concat_tables([stored_keys, record_keys.cast(stored_keys.schema)]))
    return np.flatnonzero(np.isin(gid[:n], gid[n:]))


def _numbered_changelog(
    log: pa.Table, spec: TableSpec, ctx: BucketContext, bucket: int, log_start: int, schema: pa.Schema
) -> pa.Table:
    """A bucket's changelog as stored: its images with change type, batch, bucket, gapless offsets from the
    bucket's log end, and the batch's commit time."""
    n = log.num_rows
    numbered = log.select(schema.names).cast(schema)
    for name, array in (
        ("_change_type", log.column("_change_type")),
        ("_batch_id", pa.array(np.full(n, ctx.batch_id, np.int64))),
        ("_bucket", pa.array(np.full(n, bucket, np.int32))),
        ("_log_offset", pa.array(np.arange(log_start, log_start + n, dtype=np.int64))),
        (
            "_commit_timestamp",
            pa.array(np.full(n, ctx.commit_micros, np.int64)).cast(pa.timestamp("us", tz="UTC")),
        ),
    ):
        numbered = numbered.append_column(name, array)
    return numbered.cast(changelog_schema(spec))


def _run_writes(writes: list[Callable[[], None]], ctx: BucketContext) -> None:
    """Run file writes, the later ones on threads while the first is written when the task has the cores to
    itself (pyarrow lets go of the GIL): 10,000 updates in a bucket of 156,000 rows wrote in ~35 ms one after
    the other, ~16 ms with the data file in two halves and the changelog alongside."""
    if ctx.threads and len(writes) > 1:
        with ThreadPoolExecutor(max_workers=len(writes) - 1, thread_name_prefix="changelake-write") as pool:
            later = [pool.submit(w) for w in writes[1:]]  # a pool per call: no thread outlives a fork
            writes[0]()
            for done in later:
                done.result()
    else:
        for write in writes:
            write()


class GroupWriter:
    """The files a group of bucket tasks (one Spark task, or the applying process) writes together: per Iceberg
    partition one data file of the buckets' new rows (sorted by bucket, then key) and one position-delete
    file, and one changelog file for the group. Large batches flush as they go (:data:`FLUSH_ROWS`).

    In the applying process (the only group of its batch) the delete file also takes in the positions of the
    partition's small delete files, which the commit then removes -- as an Iceberg v3 deletion vector holds
    every delete of its data file: readers open one delete file per partition, not one per batch, and the
    fold costs at most :data:`FOLD_POSITIONS` positions read (kept in the process) and written again."""

    def __init__(self, ctx: BucketContext, io):
        self.ctx, self.io = ctx, io
        self.deltas: dict[str, list[tuple[int, pa.Table]]] = {}
        self.deletes: dict[str, dict[str, list[np.ndarray]]] = {}
        self.logs: list[pa.Table] = []
        self.rows = 0
        self.paths: list[str] = []
        self.log_paths: list[str] = []
        self.delete_files: list[dict] = []
        self.existing: dict[str, set[str]] = {}  # each partition's delete files before this batch
        self.replaced: set[str] = set()  # data files this batch's rewritten buckets replace
        self.folded: list[str] = []  # delete files folded into this batch's: the commit removes them

    def add(self, task: BucketTask, out: BucketOutput, replaced=()) -> None:
        if task.deletes:
            self.existing.setdefault(task.output, set()).update(task.deletes)
        self.replaced.update(replaced)
        if out.delta is not None:
            self.deltas.setdefault(task.output, []).append((task.bucket, out.delta))
            self.rows += out.delta.num_rows
        for path, positions in out.deletes.items():
            self.deletes.setdefault(task.output, {}).setdefault(path, []).append(positions)
            self.rows += len(positions)
        if out.changelog is not None:
            self.logs.append(out.changelog)
            self.rows += out.changelog.num_rows
        if self.rows >= FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        ctx, spec = self.ctx, self.ctx.spec
        writes: list[Callable[[], None]] = []
        for parts in self.deltas.values():
            rows = pa.concat_tables([t for _, t in sorted(parts, key=lambda p: p[0])])
            path = f"{ctx.out_dir}/data/delta-{uuid.uuid4().hex}.parquet"
            self.paths.append(path)
            small = replace(ctx, compression=ctx.delta_compression, compression_level=None)
            writes.append(
                functools.partial(
                    write_file, self.io, path, rows, data_dictionary(spec), small, SHARED_ROW_GROUP_ROWS
                )
            )
            if ctx.keep_rows:
                STORED_ROWS.put(path, row_schema(spec), rows)
        for output, by_path in self.deletes.items():
            self._fold(output, by_path)
            table = position_deletes(list(by_path), [merge_positions(v) for v in by_path.values()])
            path = f"{ctx.out_dir}/data/deletes-{uuid.uuid4().hex}.parquet"
            writes.append(functools.partial(self._write_deletes, path, table))
            self.delete_files.append(
                {"path": path, "output": output, "stats": delete_stats(table), "files": sorted(by_path)}
            )
        if self.logs:
            log = pa.concat_tables(self.logs)
            path = f"{ctx.log_dir}/changelog-{uuid.uuid4().hex}.parquet"
            self.log_paths.append(path)
            meta = [*spec.partition_keys, "_change_type", "_batch_id", "_bucket", "_commit_timestamp"]
            writes.append(functools.partial(write_file, self.io, path, log, meta, ctx, changelog=True))
        _run_writes(writes, ctx)
        self.deltas, self.deletes, self.logs, self.rows = {}, {}, [], 0

    def _fold(self, output: str, by_path: dict[str, list]) -> None:
        """Take the positions of the partition's existing delete files into ``by_path`` when they are few
        (in the applying process only: a Spark task is one group of several)."""
        existing = sorted(self.existing.pop(output, set()).difference(self.folded))  # a flush folds them once
        if not self.ctx.keep_rows or not existing:
            return
        positions = deleted_positions(self.io, existing, keep_rows=True)
        if sum(len(p) for p in positions.values()) > FOLD_POSITIONS:
            return
        for path, pos in positions.items():
            if path not in self.replaced:  # a rewritten bucket's old files: gone with this commit
                by_path.setdefault(path, []).append(pos)
        self.folded += existing

    def _write_deletes(self, path: str, table: pa.Table) -> None:
        with self.io.open_output(path) as sink:
            write_position_deletes(sink, table, self.ctx.delta_compression)
            written = sink.tell()
        self.io.know({path: written})  # its size for the commit, without asking the store (a HEAD)

    def finish(self) -> dict:
        """Flush, then the group's marker row: the files it wrote."""
        self.flush()
        for d in self.delete_files:
            d["size"] = self.io.size(d["path"])
        marker: dict[str, Any] = {name: None for name in task_marker_schema().names}
        marker.update(
            {
                "_task": -1,
                "_paths": self.paths,
                "_removed": self.folded,
                "_log_paths": self.log_paths,
                "_deletes": json.dumps(self.delete_files),
                "_written": written_json(self.io.take_written()),
            }
        )
        return marker


def written_json(written: dict[str, tuple[int, bytes]]) -> str:
    """Written Parquet files' sizes and footers (:meth:`TaskIO.take_written`) as a marker carries them."""
    return json.dumps({p: [size, base64.b64encode(footer).decode()] for p, (size, footer) in written.items()})


def written_of(markers: list[dict]) -> dict[str, tuple[int, bytes]]:
    """The sizes and footers of the Parquet files the groups of ``markers`` wrote (:func:`written_json`)."""
    out = {}
    for m in markers:
        for path, (size, footer) in json.loads(m.get("_written") or "{}").items():
            out[path] = (size, base64.b64decode(footer))
    return out


#: Positions of a partition's existing delete files a merge-on-read batch in the applying process folds into
#: its own delete file (GroupWriter), at most: ~0.5 MB to write again, against a delete file more per batch.
FOLD_POSITIONS = 65_536

#: What a Spark task keeps of the files its buckets share (TaskIO.kept), at most.
TASK_KEPT_BYTES = 512 << 20

#: Rows (new rows, delete positions, changelog records) a group writer holds before it writes files.
FLUSH_ROWS = 2_000_000


def task_marker_schema() -> pa.Schema:
    """What a bucket task returns per bucket (its index in the plan, then :func:`merge_bucket`'s marker), and
    its group once (index -1: the group's files)."""
    return pa.schema(
        [
            pa.field("_task", pa.int64()),
            pa.field(
                "_paths", pa.list_(pa.string())
            ),  # data files written (a rewritten bucket's; the group's)
            pa.field("_removed", pa.list_(pa.string())),  # data files a rewritten bucket replaces
            pa.field("_log_paths", pa.list_(pa.string())),  # the group's changelog files
            pa.field("_deletes", pa.string()),  # the group's delete files: JSON [{path, output, stats, size}]
            # the Parquet files its tasks wrote: JSON {path: [size, footer (base64)]} (written_json)
            pa.field("_written", pa.string()),
        ]
        + [pa.field(n, pa.int64()) for n in ("_count", "_log_start", "_log_end", "_ai_next", "_ai_end")]
        + [pa.field(f"_{c}", pa.int64()) for c in (*COUNTERS, *SOURCE_COUNTERS)]
        + [pa.field("_kafka_offsets", pa.string())]
    )


def assign(tasks: list[BucketTask], slots: int) -> list[list[int]]:
    """Tasks to ``slots`` groups, largest first onto the least loaded (the work of a bucket task grows with
    its stored bytes and its records)."""
    slots = max(1, min(slots, len(tasks)))
    load = [0.0] * slots
    groups: list[list[int]] = [[] for _ in range(slots)]
    cost = [t.stored_bytes / 50 + t.records + 1000 for t in tasks]  # ~50 stored bytes per record
    for i in sorted(range(len(tasks)), key=lambda i: -cost[i]):
        slot = min(range(slots), key=load.__getitem__)
        groups[slot].append(i)
        load[slot] += cost[i]
    return [sorted(g) for g in groups]


def run_task(
    task: BucketTask, index: int, ctx: BucketContext, staged_schema: pa.Schema, io, writer: GroupWriter
) -> dict:
    """One bucket task: read its staged records and its rows, merge, hand its output to the group's writer;
    its marker row."""
    records = read_staged(task.parts, staged_schema, io, task.part_sizes)
    marker, out = merge_bucket(task, records, ctx, io)
    writer.add(task, out, marker["_removed"])
    return {"_task": index, **marker}


def tasks_function(tasks: list[BucketTask], groups: list[list[int]], ctx: BucketContext, staged: pa.Schema):
    """The ``mapInArrow`` function of the merge job: its input rows are ids of ``groups`` (one per Spark
    partition); it runs their tasks, yielding one marker row per task and one per group (its files)."""

    def run(batches):
        lazy_zip_invalidation()  # for this worker's next tasks
        privacy.restrict_worker()  # a Spark worker has its JVM's umask, whoever started that
        io = TaskIO(ctx.io_properties, kept=StoredRows(TASK_KEPT_BYTES))
        schema = task_marker_schema()
        for batch in batches:
            for slot in batch.column(0).to_pylist():
                writer = GroupWriter(ctx, io)
                for i in groups[slot]:
                    marker = run_task(tasks[i], i, ctx, staged, io, writer)
                    yield pa.RecordBatch.from_pylist([marker], schema=schema)
                yield pa.RecordBatch.from_pylist([writer.finish()], schema=schema)

    return run


def order_and_dedup(records: pa.Table, ctx: BucketContext) -> tuple[pa.Table, dict]:
    """Order a bucket's records as the source settings say; find (and drop) Kafka redeliveries.

    Only the order of a key's records matters to the merge, and all of a key's records are in this bucket,
    so sorting the bucket by the source order (ties keep arrival order, ``_seq``) gives every key the order a
    global sort would. A record is redelivered when its offset is at or below the last applied offset of its
    topic-partition, or when an earlier message (in that order) had the same offset.
    """
    source = {"redelivered": 0, "deduplicated": 0, "offsets": {}}
    if ctx.ordering == "kafka-offset" and records.num_rows:
        records = records.sort_by([(c, "ascending") for c in (*KAFKA_COLUMNS, "_seq")])
    elif ctx.ordering != "arrival" and records.num_rows:
        records = records.sort_by([(c, "ascending") for c in (*ORDER_COLUMNS, "_seq")])
    elif records.num_rows and not increasing(records.column("_seq").to_numpy()):
        # Staged record batches arrive in file order, so arrival order usually holds already: checking costs
        # a pass over one column, sorting a gather of every column.
        records = records.sort_by("_seq")
    if (
        "_kafka_offset" not in records.column_names
        or records.column("_kafka_offset").null_count == records.num_rows
    ):
        return _renumber(records, ctx), source
    offset = records.column("_kafka_offset")
    tp = pc.binary_join_element_wise(
        records.column("_kafka_topic"), pc.cast(records.column("_kafka_partition"), pa.string()), ":"
    )
    has = pc.and_(pc.is_valid(offset), pc.is_valid(tp)).to_numpy(zero_copy_only=False)
    applied_keys = list(ctx.applied_offsets)
    applied = np.array([ctx.applied_offsets[k] for k in applied_keys] + [-1], np.int64)
    slot = pc.fill_null(pc.index_in(tp, value_set=pa.array(applied_keys, pa.string())), len(applied_keys))
    stale = has & (pc.fill_null(offset, -2).to_numpy() <= applied[slot.to_numpy()])
    # The first message (in merge order) with an offset keeps it; a later message with it is a redelivery.
    fresh = np.flatnonzero(has & ~stale)
    message = records.column("_seq").to_numpy() >> MESSAGE_SHIFT
    occurrences = pa.table(
        {"tp": tp.take(pa.array(fresh)), "offset": offset.take(pa.array(fresh)), "row": pa.array(fresh)}
    )
    first = occurrences.join(
        occurrences.group_by(["tp", "offset"], use_threads=False).aggregate([("row", "min")]),
        keys=["tp", "offset"],
    )
    redelivered = stale.copy()
    rows = first.column("row").to_numpy()
    redelivered[rows] = message[first.column("row_min").to_numpy()] != message[rows]
    source["redelivered"] = len(np.unique(message[redelivered]))
    kept = pa.array(has & ~redelivered)
    latest = (
        pa.table({"tp": tp.filter(kept), "offset": offset.filter(kept)})
        .group_by("tp", use_threads=False)
        .aggregate([("offset", "max")])
    )
    source["offsets"] = dict(
        zip(latest.column("tp").to_pylist(), latest.column("offset_max").to_pylist(), strict=True)
    )
    if ctx.dedup_offsets and redelivered.any():
        source["deduplicated"] = source["redelivered"]
        records = records.filter(pa.array(~redelivered))
    return _renumber(records, ctx), source


def _renumber(records: pa.Table, ctx: BucketContext) -> pa.Table:
    """Records in merge order with ``_seq`` = their rank in it (arrival order unless the source orders)."""
    if ctx.ordering == "arrival" or not records.num_rows:
        return records
    return records.set_column(
        records.column_names.index("_seq"), "_seq", pa.array(np.arange(records.num_rows, dtype=np.int64))
    )


def bucket_counts(markers: list[dict], names: tuple[str, ...]) -> dict[str, int]:
    """Sum the named task counters over a batch's markers."""
    return {c: sum(int(m[f"_{c}"] or 0) for m in markers) for c in names}


__all__ = [
    "BucketContext",
    "BucketTask",
    "COUNTERS",
    "SOURCE_COUNTERS",
    "assign",
    "bucket_counts",
    "changelog_schema",
    "merge_bucket",
    "order_and_dedup",
    "row_schema",
    "run_task",
    "task_marker_schema",
    "tasks_function",
]
