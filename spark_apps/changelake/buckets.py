"""The bucket task: one call per touched (partition, bucket), run inside Spark by ``applyInArrow``.

A task reads its bucket's current files once, orders and de-duplicates the bucket's records as the table's
source settings say, merges them with :func:`changelake.columnar.merge_records`, and writes each output once:
the bucket's new data file (sorted by key) and its changelog file, already numbered. Fluss keeps one log per
bucket, and so does changelake: ``_log_offset`` is gapless per (partition, bucket), continuing from the end
the previous batch committed, so the task numbers its own rows and no other task or job is involved. It
returns one small marker row (files, counts, the bucket's new log end); the driver commits. Only the batch's
records are shuffled; the table is never shuffled.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from changelake.columnar import merge_records
from changelake.errors import ChangelakeError
from changelake.spec import TableSpec

COUNTERS = ("records", "inserted", "updated", "deleted", "ignored", "dropped_update_before")
SOURCE_COUNTERS = ("redelivered", "deduplicated")
# Source metadata columns a decoded record may carry (absent when the format has none).
KAFKA_COLUMNS = ("_kafka_topic", "_kafka_partition", "_kafka_offset")
# ``_seq >> MESSAGE_SHIFT`` identifies a record's source message (an update's two images share one).
MESSAGE_SHIFT = 2
ORDER_COLUMNS = ("_order_number", "_order_text")  # the ``ordering`` field's value (number or text)


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


def marker_schema(spec: TableSpec, partition_columns: tuple[str, ...]) -> pa.Schema:
    """What a task returns: one row per touched bucket."""
    rows = row_schema(spec)
    return pa.schema(
        [pa.field(c, rows.field(c).type) for c in partition_columns]
        + [pa.field("_path", pa.string()), pa.field("_log_path", pa.string())]
        + [pa.field(n, pa.int64()) for n in ("_count", "_log_start", "_log_end", "_ai_next", "_ai_end")]
        + [pa.field(f"_{c}", pa.int64()) for c in (*COUNTERS, *SOURCE_COUNTERS)]
        + [pa.field("_kafka_offsets", pa.string())]
    )


def _write(io, path: str, table: pa.Table) -> None:
    with io.new_output(path).create(overwrite=False) as sink:
        pq.write_table(table, sink, compression="zstd")


def merge_bucket(key: tuple, records: pa.Table, ctx: BucketContext) -> pa.Table:
    """Merge one bucket's records (any order) into its stored rows; write its data and changelog files."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    from changelake.tables import iceberg_partition_value

    spec = ctx.spec
    io = PyArrowFileIO(ctx.io_properties)
    partition = tuple(iceberg_partition_value(k.as_py()) for k in key)
    bucket = key[-1].as_py()
    values = [c.name for c in spec.columns]

    schema = pa.schema([pa.field(c.name, c.type.arrow_type()) for c in spec.columns])
    parts = []
    for path in ctx.files_by_partition.get(partition, []):
        with io.new_input(path).open() as stream:
            parquet = pq.ParquetFile(stream)
            present = set(parquet.schema_arrow.names)
            unknown = present - set(values) - {"_bucket"}
            if unknown:  # rewriting the bucket without them would drop their values
                raise ChangelakeError(
                    f"{spec.full_name}: stored file {path} has columns {sorted(unknown)} that the spec in use "
                    "lacks; the table was altered after this apply began. Apply again to use its new spec"
                )
            stored_part = parquet.read(columns=[v for v in values if v in present])
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
    stored = pa.concat_tables([p.cast(schema) for p in parts]) if parts else schema.empty_table()

    records, source = order_and_dedup(records, ctx)
    result = merge_records(
        spec,
        stored,
        records,
        None if ctx.target_columns is None else list(ctx.target_columns),
        (ctx.id_ranges or {}).get(partition, []) if spec.auto_increment_column else None,
    )

    rows = result.rows
    path = log_path = None
    if rows.num_rows:
        rows = rows.append_column("_bucket", pa.array(np.full(rows.num_rows, bucket, np.int32)))
        path = f"{ctx.out_dir}/data/bucket-{bucket:04d}-{uuid.uuid4().hex}.parquet"
        _write(io, path, rows)
    log_start = ctx.log_ends.get(partition_key(partition), 0)
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
        _write(io, log_path, numbered.cast(changelog_schema(spec)))

    counts = result.counts
    remaining = result.ids_remaining
    marker = {column: [value.as_py()] for column, value in zip(ctx.partition_columns, key, strict=True)}
    marker.update(
        _path=[path],
        _log_path=[log_path],
        _count=[rows.num_rows],
        _log_start=[log_start],
        _log_end=[log_start + log.num_rows],
        _ai_next=[remaining and remaining[0]],
        _ai_end=[remaining and remaining[1]],
        _kafka_offsets=[json.dumps(source.pop("offsets"), sort_keys=True)],
    )
    marker.update({f"_{c}": [getattr(counts, c)] for c in COUNTERS})
    marker.update({f"_{c}": [source[c]] for c in SOURCE_COUNTERS})
    return pa.Table.from_pydict(marker, schema=marker_schema(spec, ctx.partition_columns))


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
    elif records.num_rows:
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
    "COUNTERS",
    "SOURCE_COUNTERS",
    "bucket_counts",
    "changelog_schema",
    "marker_schema",
    "merge_bucket",
    "order_and_dedup",
    "partition_key",
    "row_schema",
]
