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

import functools
import json
import os
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc  # noqa: F401 - pa.ipc
import pyarrow.parquet as pq

from changelake.engine.columnar import increasing, merge_records
from changelake.errors import ChangelakeError
from changelake.lru import BoundedLRU
from changelake.runtime.pyworker import lazy_zip_invalidation
from changelake.spec import TableSpec

COUNTERS = ("records", "inserted", "updated", "deleted", "ignored", "dropped_update_before")
SOURCE_COUNTERS = ("redelivered", "deduplicated")
# Source metadata columns a decoded record may carry (absent when the format has none).
KAFKA_COLUMNS = ("_kafka_topic", "_kafka_partition", "_kafka_offset")
# ``_seq >> MESSAGE_SHIFT`` identifies a record's source message (an update's two images share one).
MESSAGE_SHIFT = 2
ORDER_COLUMNS = ("_order_number", "_order_text")  # the ``ordering`` field's value (number or text)
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
    id_ranges: dict[tuple, list[tuple[int, int]]] | None = None  # auto-increment ids per partition
    ordering: str = "arrival"  # "arrival", "kafka-offset" or a field path (records carry ORDER_COLUMNS)
    dedup_offsets: bool = False  # drop Kafka redeliveries (``dedup: kafka-offsets``)
    applied_offsets: dict[str, int] = field(default_factory=dict)  # "topic:partition" -> last applied
    compression: str = (
        "zstd"  # the Parquet codec of data and changelog files (write.parquet.compression-codec)
    )
    compression_level: int | None = None
    # Use more than one thread: set when the bucket tasks run in the applying process (a small batch), not in
    # Spark tasks, which already keep every core busy. pyarrow reads the bucket's file on its thread pool and
    # the changelog file is written while the data file is.
    threads: bool = False
    # Keep the rows this process writes for the next merge of the bucket (:data:`STORED_ROWS`): set with
    # ``threads``, when the bucket tasks run in the applying process.
    keep_rows: bool = False


class StoredRows:
    """The rows of the buckets this process wrote, by their data files, so that its next merge of a bucket
    skips reading them back: a process applying batch after batch (the apply service, a loop over landed
    batches) reads a bucket's files once. A data file is never rewritten (every apply writes new files under
    a fresh directory), so its path names its rows for good; a bucket whose files another process wrote is
    not found and is read. Least recently used first out, at most ``max_bytes`` of Arrow buffers."""

    def __init__(self, max_bytes: int):
        self._rows: BoundedLRU[pa.Table] = BoundedLRU(max_bytes, size=lambda rows: rows.nbytes)

    @staticmethod
    def _key(files, schema: pa.Schema) -> tuple:
        return tuple(sorted(files)), schema  # the schema too: a column added since reads as nulls

    @property
    def kept_bytes(self) -> int:
        return self._rows.total

    def get(self, files, schema: pa.Schema) -> pa.Table | None:
        return self._rows.get(self._key(files, schema))

    def put(self, files, schema: pa.Schema, rows: pa.Table, replaces=()) -> None:
        """Keep ``rows`` for ``files``; forget the rows of the files they replace (``replaces``: no plan will
        name those files again once the commit lands, and a retried apply reads them from the files)."""
        if replaces:
            self._rows.pop(self._key(replaces, schema))
        self._rows.put(self._key(files, schema), rows)

    def clear(self) -> None:
        self._rows.clear()


#: This process's :class:`StoredRows` (256 MiB: the benchmark's 156,000-row bucket takes 9 MB).
STORED_ROWS = StoredRows(256 << 20)


class TaskIO:
    """File access inside a task: local files through pyarrow directly, any other scheme through pyiceberg's
    PyArrowFileIO with the table's properties. Importing pyiceberg costs a fresh Python worker about a
    second, as much as a small bucket's whole task."""

    def __init__(self, properties: dict[str, str]):
        self.properties = properties
        self._fileio: Any = None  # a pyiceberg PyArrowFileIO, made on first use (importing it is slow)

    @staticmethod
    def local_path(location: str) -> str | None:
        """The local path of a ``file:`` URI or a plain path (as PyArrowFileIO parses it), else None."""
        uri = urlparse(location)
        if not uri.scheme:
            return os.path.abspath(location)
        if uri.scheme == "file":
            return f"{uri.netloc}{uri.path}"
        return None

    def _iceberg(self):
        if self._fileio is None:
            from pyiceberg.io.pyarrow import PyArrowFileIO

            self._fileio = PyArrowFileIO(self.properties)
        return self._fileio

    def open_input(self, location: str):
        local = self.local_path(location)
        if local is not None:
            return pa.OSFile(local, "rb")
        return self._iceberg().new_input(location).open()

    def open_output(self, location: str):
        """A new file (never overwrites: every path a task writes is fresh)."""
        local = self.local_path(location)
        if local is None:
            return self._iceberg().new_output(location).create(overwrite=False)
        if os.path.exists(local):
            raise FileExistsError(f"Cannot create file, already exists: {location}")
        os.makedirs(os.path.dirname(local), exist_ok=True)
        return pa.OSFile(local, "wb")


def partition_key(partition: tuple) -> str:
    """The JSON key of a (partition values..., bucket) tuple in the batch's bookkeeping."""
    return json.dumps(list(partition), default=str)


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


def _write(io, path: str, table: pa.Table, dictionary: list[str], ctx: BucketContext) -> None:
    """Write one Parquet file, with dictionary pages only for the columns named: a dictionary of distinct
    values (most columns of a table) costs more to build than it saves. Integer columns are delta-encoded
    (:func:`delta_columns`). Statistics for every column: pyiceberg derives a file's partition and column
    metrics from them."""
    dictionary = [c for c in dictionary if c in table.column_names]
    with io.open_output(path) as sink:
        pq.write_table(
            table,
            sink,
            compression=ctx.compression,
            compression_level=ctx.compression_level,
            use_dictionary=dictionary or False,
            column_encoding=delta_columns(table.schema, dictionary) or None,
        )


def compression_of(properties: dict[str, str]) -> tuple[str, int | None]:
    """The table's Parquet codec and level (Iceberg's ``write.parquet.compression-*`` properties; zstd)."""
    codec = properties.get("write.parquet.compression-codec", "zstd").lower()
    level = properties.get("write.parquet.compression-level")
    return ("none" if codec == "uncompressed" else codec), (int(level) if level else None)


@dataclass(frozen=True)
class BucketTask:
    """One touched (partition, bucket) of a batch: where its records and its current rows are."""

    key: str  # partition_key of (partition values..., bucket): how the batch's bookkeeping names it
    bucket: int
    parts: tuple[tuple[str, int], ...] = ()  # staged records: (file, record batch)
    files: tuple[str, ...] = ()  # the bucket's current data files
    log_start: int = 0  # the bucket's committed log end
    id_ranges: tuple[tuple[int, int], ...] | None = None  # auto-increment ids it may hand out
    records: int = 0  # records staged for it (for planning)
    stored_bytes: int = 0  # size of its current files (for planning)


def stored_schema(spec: TableSpec) -> pa.Schema:
    """A bucket's rows as :func:`read_stored` returns them: the table's columns in storage types."""
    return pa.schema([pa.field(c.name, c.type.arrow_type()) for c in spec.columns])


def read_stored(
    spec: TableSpec, io, files: tuple[str, ...] | list[str], threads: bool = False, keep_rows: bool = False
) -> pa.Table:
    """A bucket's current rows (the table's columns in storage types), read from its files once (its columns
    decoded on pyarrow's thread pool with ``threads``), or with ``keep_rows`` taken from :data:`STORED_ROWS`
    when this process wrote those files. The files are read in name order: the files one apply writes for a
    bucket are named in key order, so their rows come out in key order, as the merge expects."""
    values = [c.name for c in spec.columns]
    schema = stored_schema(spec)
    if keep_rows and files and (kept := STORED_ROWS.get(files, schema)) is not None:
        return kept
    parts = []
    for path in sorted(files):
        with io.open_input(path) as stream:
            parquet = pq.ParquetFile(stream)
            present = set(parquet.schema_arrow.names)
            unknown = present - set(values) - {"_bucket"}
            if unknown:  # rewriting the bucket without them would drop their values
                raise ChangelakeError(
                    f"{spec.full_name}: stored file {path} has columns {sorted(unknown)} that the spec in use "
                    "lacks; the table was altered after this apply began. Apply again to use its new spec"
                )
            stored_part = parquet.read(columns=[v for v in values if v in present], use_threads=threads)
        # Files written before a column was added lack it: null, as Iceberg's name mapping reads them.
        parts.append(
            pa.table(
                {
                    v: stored_part.column(v)
                    if v in present
                    else pa.nulls(stored_part.num_rows, schema.field(v).type)
                    for v in values
                }
            )
        )
    return pa.concat_tables([p.cast(schema) for p in parts]) if parts else schema.empty_table()


def read_staged(parts: tuple[tuple[str, int], ...], schema: pa.Schema, io) -> pa.Table:
    """A bucket's staged records: its record batch of each staged file that has one (memory-mapped when
    local: no copy), in ``schema``; a column the file left out (null in all its records) as nulls."""
    batches = []
    for path, index in sorted(parts):
        local = TaskIO.local_path(path)
        if local is not None:
            batch = pa.ipc.open_file(pa.memory_map(local)).get_batch(index)
        else:
            with io.open_input(path) as stream:
                batch = pa.ipc.open_file(pa.BufferReader(stream.read())).get_batch(index)
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


def merge_and_write(task: BucketTask, stored: pa.Table, records: pa.Table, ctx: BucketContext, io) -> dict:
    """Merge a bucket's records into its stored rows and write its new data file and its numbered
    changelog file; the bucket's marker (files, counts, new log end, ids left, Kafka offsets)."""
    spec = ctx.spec
    bucket = task.bucket
    values = [c.name for c in spec.columns]
    schema = stored_schema(spec)
    records, source = order_and_dedup(records, ctx)
    result = merge_records(
        spec,
        stored,
        records,
        None if ctx.target_columns is None else list(ctx.target_columns),
        list(task.id_ranges or []) if spec.auto_increment_column else None,
    )
    rows = result.rows
    paths: list[str] = []
    log_path = None
    writes: list[Callable[[], None]] = []  # the data file's writes first, then the changelog file's
    if rows.num_rows:
        rows = rows.append_column("_bucket", pa.array(np.full(rows.num_rows, bucket, np.int32)))
        # In this process, a large bucket is written as two files of consecutive keys, one per core: Parquet
        # encodes a file on one thread (156,000 rows: 29 ms as one file, 16 ms as two halves at once).
        halves = 2 if ctx.threads and rows.num_rows >= SPLIT_ROWS else 1
        step = -(-rows.num_rows // halves)
        name = f"{ctx.out_dir}/data/bucket-{bucket:04d}-{uuid.uuid4().hex}"
        for part_number, start in enumerate(range(0, rows.num_rows, step)):
            paths.append(f"{name}-{part_number:03d}.parquet")  # in key order by name, as read_stored reads
            part = rows.slice(start, step)
            writes.append(
                functools.partial(_write, io, paths[-1], part, [*spec.partition_keys, "_bucket"], ctx)
            )
    log_start = task.log_start
    log = result.changelog
    if log.num_rows:
        n = log.num_rows
        numbered = log.select(values).cast(schema)
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
        log_path = f"{ctx.log_dir}/bucket-{bucket:04d}-{uuid.uuid4().hex}.parquet"
        meta = [*spec.partition_keys, "_change_type", "_batch_id", "_bucket", "_commit_timestamp"]
        numbered = numbered.cast(changelog_schema(spec))
        writes.append(functools.partial(_write, io, log_path, numbered, meta, ctx))
    if ctx.threads and len(writes) > 1:  # the other files while the first is written (pyarrow lets go of the
        # GIL): 10,000 updates in a bucket of 156,000 rows wrote in ~35 ms one after the other, ~28 ms with the
        # changelog file alongside the data file, ~16 ms with the data file in two halves too
        with ThreadPoolExecutor(max_workers=len(writes) - 1, thread_name_prefix="changelake-write") as pool:
            later = [pool.submit(w) for w in writes[1:]]  # a pool per call: no thread outlives a fork
            writes[0]()
            for done in later:
                done.result()
    else:
        for write in writes:
            write()

    if ctx.keep_rows and paths:  # what read_stored would read back from these files
        STORED_ROWS.put(paths, schema, result.rows.cast(schema), replaces=task.files)
    counts = result.counts
    remaining = result.ids_remaining
    marker = {
        "_paths": paths,
        "_log_path": log_path,
        "_count": rows.num_rows,
        "_log_start": log_start,
        "_log_end": log_start + log.num_rows,
        "_ai_next": remaining and remaining[0],
        "_ai_end": remaining and remaining[1],
    }
    marker.update({f"_{c}": getattr(counts, c) for c in COUNTERS})
    marker.update({f"_{c}": source[c] for c in SOURCE_COUNTERS})
    marker["_kafka_offsets"] = json.dumps(source.pop("offsets"), sort_keys=True)
    return marker


def task_marker_schema() -> pa.Schema:
    """What a bucket task returns per bucket: its index in the plan, then :func:`merge_and_write`'s marker."""
    return pa.schema(
        [
            pa.field("_task", pa.int64()),
            pa.field("_paths", pa.list_(pa.string())),  # the bucket's new data files (none: bucket now empty)
            pa.field("_log_path", pa.string()),
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


def run_task(task: BucketTask, index: int, ctx: BucketContext, staged_schema: pa.Schema, io) -> dict:
    """One bucket task: read its staged records and its current rows, merge, write; its marker row."""
    records = read_staged(task.parts, staged_schema, io)
    stored = read_stored(ctx.spec, io, task.files, ctx.threads, ctx.keep_rows)
    return {"_task": index, **merge_and_write(task, stored, records, ctx, io)}


def tasks_function(tasks: list[BucketTask], groups: list[list[int]], ctx: BucketContext, staged: pa.Schema):
    """The ``mapInArrow`` function of the merge job: its input rows are ids of ``groups`` (one per Spark
    partition); it runs their tasks and yields one marker row per task."""

    def run(batches):
        lazy_zip_invalidation()  # for this worker's next tasks
        io = TaskIO(ctx.io_properties)
        schema = task_marker_schema()
        for batch in batches:
            for slot in batch.column(0).to_pylist():
                for i in groups[slot]:
                    marker = run_task(tasks[i], i, ctx, staged, io)
                    yield pa.RecordBatch.from_pylist([marker], schema=schema)

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


# --- Spark's xxhash64 over Arrow columns: the bucket of every record, computed where it is decoded -------------
# The same function as :func:`changelake.storage.sparkread.bucket_expr` (Spark's ``pmod(xxhash64(bucket key), n)``) and
# :func:`changelake.storage.fastread.bucket_of` (its one-value reference), over whole columns with numpy uint64
# arithmetic (which wraps around as Java's long does). A column type it does not know is hashed value by value
# with the reference.
_P1, _P2, _P3 = np.uint64(0x9E3779B185EBCA87), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9)
_P4, _P5 = np.uint64(0x85EBCA77C2B2AE63), np.uint64(0x27D4EB2F165667C5)
_SEED = 42


def _rotl(x: np.ndarray, r: int, tmp: np.ndarray | None = None) -> np.ndarray:
    """``x`` rotated left by ``r`` bits; with ``tmp`` (an array of x's shape) in place, into ``x``."""
    if tmp is None:
        return (x << np.uint64(r)) | (x >> np.uint64(64 - r))
    np.right_shift(x, np.uint64(64 - r), out=tmp)
    np.left_shift(x, np.uint64(r), out=x)
    return np.bitwise_or(x, tmp, out=x)


def _fmix(h: np.ndarray, tmp: np.ndarray | None = None) -> np.ndarray:
    """XXH64's avalanche; with ``tmp`` in place, into ``h``."""
    if tmp is None:
        tmp = np.empty_like(h)
        h = h.copy()
    for shift, prime in ((33, _P2), (29, _P3), (32, None)):
        np.right_shift(h, np.uint64(shift), out=tmp)
        np.bitwise_xor(h, tmp, out=h)
        if prime is not None:
            np.multiply(h, prime, out=h)
    return h


# The column hashes below work in place on fresh arrays (a million values: 5 ms instead of 13): every
# temporary of the plain expressions is a pass over memory.
def _hash_int(value: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """XXH64.hashInt of 32-bit values (any integer dtype; the low 32 bits count)."""
    v = value.astype(np.int64).astype(np.uint64)  # a fresh array
    np.bitwise_and(v, np.uint64(0xFFFFFFFF), out=v)
    np.multiply(v, _P1, out=v)
    h = np.add(seed, _P5 + np.uint64(4))
    np.bitwise_xor(h, v, out=h)
    _rotl(h, 23, tmp=v)
    np.multiply(h, _P2, out=h)
    np.add(h, _P3, out=h)
    return _fmix(h, tmp=v)


def _hash_long(value: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """XXH64.hashLong of 64-bit values."""
    v = value.astype(np.int64).view(np.uint64)  # a fresh array (astype copies): the caller's values stay
    tmp = np.empty_like(v)
    np.multiply(v, _P2, out=v)
    _rotl(v, 31, tmp)
    np.multiply(v, _P1, out=v)
    h = np.add(seed, _P5 + np.uint64(8))
    np.bitwise_xor(h, v, out=h)
    _rotl(h, 27, tmp)
    np.multiply(h, _P1, out=h)
    np.add(h, _P4, out=h)
    return _fmix(h, tmp)


class _Bytes:
    """A byte buffer read as little-endian words at any offset: two aligned 64-bit loads and shifts (the
    buffer is padded, so a word never runs past it)."""

    def __init__(self, data: np.ndarray):
        size = (len(data) // 8 + 2) * 8
        padded = np.zeros(size, np.uint8)
        padded[: len(data)] = data
        self.data = padded
        self.words = padded.view("<u8")

    def word64(self, pos: np.ndarray) -> np.ndarray:
        index, shift = pos >> 3, ((pos & 7) * 8).astype(np.uint64)
        low, high = self.words[index], self.words[index + 1]
        # (high << 64 - shift) is undefined for shift 0 in numpy: mask it off instead.
        return (low >> shift) | np.where(shift > 0, high << (np.uint64(64) - shift), np.uint64(0))

    def word32(self, pos: np.ndarray) -> np.ndarray:
        return self.word64(pos) & np.uint64(0xFFFFFFFF)


def _hash_bytes(data: _Bytes, starts: np.ndarray, lengths: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """XXH64.hashUnsafeBytes of each ``data[start:start+length]``: 32-byte stripes, then 8-byte words, a
    4-byte word and single bytes, each step over all the values that still have that much left."""
    n = len(starts)
    h = seed + _P5
    stripes = lengths // 32
    long_rows = np.flatnonzero(stripes > 0)
    if len(long_rows):
        s = seed[long_rows]
        lanes = [s + _P1 + _P2, s + _P2, s.copy(), s - _P1]
        base, count = starts[long_rows], stripes[long_rows]
        for k in range(int(count.max())):
            active = np.flatnonzero(count > k)
            at = base[active] + 32 * k
            for j in range(4):
                lane = lanes[j]
                lane[active] = _rotl(lane[active] + data.word64(at + 8 * j) * _P2, 31) * _P1
        v1, v2, v3, v4 = lanes
        hl = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        for lane in lanes:
            hl = (hl ^ (_rotl(lane * _P2, 31) * _P1)) * _P1 + _P4
        h[long_rows] = hl
    h = h + lengths.astype(np.uint64)
    at = stripes * 32
    while True:  # at most three 8-byte words are left after the stripes
        rows = np.flatnonzero(at + 8 <= lengths)
        if not len(rows):
            break
        x = h[rows] ^ (_rotl(data.word64(starts[rows] + at[rows]) * _P2, 31) * _P1)
        h[rows] = _rotl(x, 27) * _P1 + _P4
        at[rows] += 8
    rows = np.flatnonzero(at + 4 <= lengths)
    if len(rows):
        x = h[rows] ^ (data.word32(starts[rows] + at[rows]) * _P1)
        h[rows] = _rotl(x, 23) * _P2 + _P3
        at[rows] += 4
    for _ in range(3):
        rows = np.flatnonzero(at < lengths)
        if not len(rows):
            break
        x = h[rows] ^ (data.data[starts[rows] + at[rows]].astype(np.uint64) * _P5)
        h[rows] = _rotl(x, 11) * _P1
        at[rows] += 1
    assert len(h) == n
    return _fmix(h)


def _binary_parts(array: pa.Array) -> tuple[_Bytes, np.ndarray, np.ndarray]:
    """The bytes, start offsets and lengths of a string or binary array."""
    array = array.cast(pa.large_binary())
    offsets = np.frombuffer(array.buffers()[1], np.int64)[array.offset : array.offset + len(array) + 1]
    data = array.buffers()[2]
    raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    return _Bytes(raw), offsets[:-1].copy(), np.diff(offsets)


def _decimal_words(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The unscaled 128-bit values of a decimal128 array as (low, high) 64-bit words."""
    words = np.frombuffer(array.buffers()[1], "<u8").reshape(-1, 2)[array.offset : array.offset + len(array)]
    return words[:, 0].copy(), words[:, 1].copy()


def _bit_length(x: np.ndarray) -> np.ndarray:
    """Bits of each uint64 (0 for 0), by binary search."""
    bits = np.zeros(len(x), np.int64)
    for shift in (32, 16, 8, 4, 2, 1):
        big = (x >> np.uint64(shift)) > 0
        bits[big] += shift
        x = np.where(big, x >> np.uint64(shift), x)
    return bits + (x > 0)


def _hash_big_decimal(array: pa.Array, seed: np.ndarray) -> np.ndarray:
    """A DECIMAL of precision > 18: XXH64 of java.math.BigInteger.toByteArray() of the unscaled value (the
    minimal big-endian two's complement)."""
    lo, hi = _decimal_words(array)
    negative = (hi >> np.uint64(63)).astype(bool)
    mlo, mhi = np.where(negative, ~lo, lo), np.where(negative, ~hi, hi)
    bits = np.where(mhi > 0, 64 + _bit_length(mhi), _bit_length(mlo))
    lengths = bits // 8 + 1
    big_endian = np.empty((len(lo), 16), np.uint8)
    big_endian[:, :8] = hi.astype(">u8").view(np.uint8).reshape(-1, 8)
    big_endian[:, 8:] = lo.astype(">u8").view(np.uint8).reshape(-1, 8)
    starts = np.arange(len(lo), dtype=np.int64) * 16 + 16 - lengths
    return _hash_bytes(_Bytes(big_endian.ravel()), starts, lengths, seed)


def _hash_column(array: pa.Array, dtype, seed: np.ndarray) -> np.ndarray:
    """One column's step of Spark's xxhash64 (storage values of ``dtype``); nulls leave the hash as it is."""
    kind, t = dtype.storage_kind, array.type
    valid = array.is_valid().to_numpy(zero_copy_only=False)
    if kind == "boolean" and pa.types.is_boolean(t):
        hashed = _hash_int(array.fill_null(False).to_numpy(zero_copy_only=False).astype(np.int64), seed)
    elif kind in ("int", "date") and (pa.types.is_int32(t) or pa.types.is_date32(t)):
        hashed = _hash_int(array.cast(pa.int32()).fill_null(0).to_numpy(), seed)
    elif kind == "long" and pa.types.is_int64(t):
        hashed = _hash_long(array.fill_null(0).to_numpy(), seed)
    elif kind in ("timestamp", "timestamptz") and pa.types.is_timestamp(t) and t.unit == "us":
        hashed = _hash_long(array.cast(pa.int64()).fill_null(0).to_numpy(), seed)
    elif kind == "float" and pa.types.is_float32(t):
        f = array.fill_null(0.0).to_numpy(zero_copy_only=False)
        bits = np.where(np.isnan(f), np.int32(0x7FC00000), np.where(f == 0, 0, f.view(np.int32)))
        hashed = _hash_int(bits, seed)
    elif kind == "double" and pa.types.is_float64(t):
        f = array.fill_null(0.0).to_numpy(zero_copy_only=False)
        nan = np.int64(0x7FF8000000000000)
        bits = np.where(np.isnan(f), nan, np.where(f == 0, np.int64(0), f.view(np.int64)))
        hashed = _hash_long(bits, seed)
    elif kind == "decimal" and pa.types.is_decimal128(t):
        hashed = (
            _hash_long(_decimal_words(array)[0], seed)
            if t.precision <= 18
            else _hash_big_decimal(array, seed)
        )
    elif kind in ("string", "binary") and (pa.types.is_string(t) or pa.types.is_binary(t)):
        hashed = _hash_bytes(*_binary_parts(array), seed)
    else:
        return _hash_each(array, dtype, seed)
    return np.where(valid, hashed, seed)


def _hash_each(array: pa.Array, dtype, seed: np.ndarray) -> np.ndarray:
    """The reference, value by value: for a storage type the vectorised steps do not cover."""
    from changelake.storage.fastread import _hash_value

    out = [_hash_value(v, dtype, int(s)) for v, s in zip(array.to_pylist(), seed.tolist(), strict=True)]
    return np.array(out, np.uint64)


def xxhash64_columns(columns: list[pa.Array], dtypes: list) -> np.ndarray:
    """Spark's ``xxhash64(c1, c2, ...)`` of every row of storage-typed Arrow columns, as signed int64."""
    n = len(columns[0]) if columns else 0
    h = np.full(n, _SEED, np.uint64)
    for array, dtype in zip(columns, dtypes, strict=True):
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks() if array.num_chunks else pa.array([], array.type)
        h = _hash_column(array, dtype, h)
    return h.view(np.int64)


def bucket_ids(spec: TableSpec, records: pa.Table) -> np.ndarray:
    """The bucket of every record: ``pmod(xxhash64(bucket key columns), bucket.num)`` (int32), as
    :func:`changelake.storage.sparkread.bucket_expr` computes it in Spark."""
    keys = list(spec.bucket_key)
    h = xxhash64_columns([records.column(k) for k in keys], [spec.column(k).type for k in keys])
    n = spec.bucket_num
    if n & (n - 1) == 0:  # a power of two: pmod is the low bits (two's complement), without a division
        return np.bitwise_and(h, np.int64(n - 1)).astype(np.int32)
    return np.mod(h, np.int64(n)).astype(np.int32)  # numpy's mod of a positive n is pmod


def bucket_counts(markers: list[dict], names: tuple[str, ...]) -> dict[str, int]:
    """Sum the named task counters over a batch's markers."""
    return {c: sum(int(m[f"_{c}"] or 0) for m in markers) for c in names}


__all__ = [
    "BucketContext",
    "BucketTask",
    "TaskIO",
    "COUNTERS",
    "SOURCE_COUNTERS",
    "assign",
    "bucket_counts",
    "bucket_ids",
    "changelog_schema",
    "merge_and_write",
    "order_and_dedup",
    "partition_key",
    "row_schema",
    "run_task",
    "task_marker_schema",
    "tasks_function",
    "xxhash64_columns",
]
