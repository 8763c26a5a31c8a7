"""The per-bucket merge that runs inside Spark tasks: one call per touched (partition, bucket).

:func:`merge_bucket` reads the bucket's current files once with pyarrow, applies the bucket's records in
batch order with the table's merger (:func:`changelake.merge.merger_for`) to the stored rows of the touched keys, writes one new
file for the bucket (untouched rows + merged rows) and returns the changelog rows it emitted plus, per
record, how many changelog rows it emitted (the driver turns those into gapless offsets). The table is
read once and never shuffled; only the batch's records are. Executors write files; the driver commits.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from changelake.merge import IdAllocator, merger_for
from changelake.spec import TableSpec

KIND_COUNT, KIND_FILE = "count", "file"
COUNTERS = ("inserted", "updated", "deleted", "ignored")


@dataclass(frozen=True)
class BucketContext:
    """Everything a task needs, shipped with the function (small: file paths per touched partition)."""

    spec: TableSpec
    partition_columns: tuple[str, ...]  # partition keys then _bucket
    files_by_partition: dict[tuple, list[str]]
    io_properties: dict[str, str]
    out_dir: str
    target_columns: tuple[str, ...] | None = None  # a partial update's target columns
    id_ranges: dict[tuple, list[tuple[int, int]]] | None = None  # auto-increment ids per partition

    @property
    def row_schema(self) -> pa.Schema:
        return row_schema(self.spec)


def row_schema(spec: TableSpec) -> pa.Schema:
    """A stored row in Arrow: the table's columns in storage types, then ``_bucket``."""
    return pa.schema(
        [pa.field(c.name, c.type.arrow_type()) for c in spec.columns] + [pa.field("_bucket", pa.int32())]
    )


def output_schema(row_schema: pa.Schema, partition_columns: tuple[str, ...]) -> pa.Schema:
    """What a task returns: per-record changelog counts and one file marker, told apart by ``_kind``."""
    return pa.schema(
        [pa.field("_kind", pa.string()), pa.field("_seq", pa.int64()), pa.field("_count", pa.int64())]
        + [pa.field(c, row_schema.field(c).type) for c in partition_columns]
        + [pa.field("_path", pa.string()), pa.field("_log_path", pa.string())]
        + [
            pa.field("_log_count", pa.int64()),
            pa.field("_ai_next", pa.int64()),
            pa.field("_ai_end", pa.int64()),
        ]
        + [pa.field(f"_{c}", pa.int64()) for c in COUNTERS]
    )


def changelog_schema(row_schema: pa.Schema) -> pa.Schema:
    """Changelog rows a task writes, before numbering: record position, sub-position, change type, row."""
    return pa.schema(
        [pa.field("_seq", pa.int64()), pa.field("_sub", pa.int32()), pa.field("_change_type", pa.string())]
        + [f for f in row_schema if f.name != "_bucket"]
    )


def _keys(table: pa.Table, names: list[str]) -> list[tuple]:
    return list(zip(*(table.column(n).to_pylist() for n in names), strict=True)) if table.num_rows else []


def _table(rows: list[tuple], schema: pa.Schema) -> pa.Table:
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in schema]
    return pa.Table.from_arrays(
        [pa.array(c, f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
    )


def _write(io, path: str, table: pa.Table) -> None:
    with io.new_output(path).create(overwrite=False) as sink:
        pq.write_table(table, sink, compression="zstd")


def merge_bucket(key: tuple, records: pa.Table, ctx: BucketContext) -> pa.Table:
    """Apply one bucket's records (any order; sorted by ``_seq`` here) to its stored rows."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    from changelake.tables import iceberg_partition_value

    spec = ctx.spec
    cols = list(spec.column_names)
    pk = list(spec.primary_key)
    row_schema = ctx.row_schema
    io = PyArrowFileIO(ctx.io_properties)
    partition = tuple(iceberg_partition_value(k.as_py()) for k in key)
    bucket = key[-1].as_py()

    parts = []
    for path in ctx.files_by_partition.get(partition, []):
        with io.new_input(path).open() as stream:
            parts.append(pq.read_table(stream, columns=row_schema.names).cast(row_schema))
    stored = pa.concat_tables(parts) if parts else row_schema.empty_table()
    records = records.sort_by("_seq")
    touched = records.select(pk).cast(pa.schema([row_schema.field(k) for k in pk])).group_by(pk).aggregate([])
    if stored.num_rows:
        kept = stored.join(touched, keys=pk, join_type="left anti").select(row_schema.names)
        hit = stored.join(touched, keys=pk, join_type="left semi")
    else:
        kept = hit = stored

    ids = None
    if spec.auto_increment_column is not None:
        max_id = 2**31 - 1 if spec.column(spec.auto_increment_column).type.name == "INT" else 2**63 - 1
        ids = IdAllocator((ctx.id_ranges or {}).get(partition, []), max_id)
    merger = merger_for(spec, None if ctx.target_columns is None else list(ctx.target_columns), ids)
    log_seq, log_sub, log_type, log_image, count_seq, count_n = [], [], [], [], [], []

    def run(rows: dict, record_rows) -> None:
        seqs = records.column("_seq").to_pylist()
        ops = records.column("_op").to_pylist()
        for seq, op, row_key, row in zip(seqs, ops, _keys(records, pk), record_rows, strict=True):
            changes = merger.apply_keyed(rows, op, row_key, row)
            if changes:
                count_seq.append(seq)
                count_n.append(len(changes))
                for sub, (change_type, image) in enumerate(changes):
                    log_seq.append(seq)
                    log_sub.append(sub)
                    log_type.append(change_type)
                    log_image.append(image)

    value_schema = pa.schema([row_schema.field(c) for c in cols])
    if merger.needs_values:
        # Engines that compute new values (versioned compares, aggregation folds) work on Python tuples.
        rows = {merger.key_of(r): r for r in _keys(hit, cols)}
        run(rows, _keys(records, cols))
        final = _table(list(rows.values()), value_schema)
        log_table = _table(log_image, value_schema)
    else:
        # Rows are indices into `images` (stored rows of touched keys, then the batch's records): the
        # merger decides which image each key holds and what the changelog shows; Arrow gathers them.
        images = pa.concat_tables(
            [hit.select(cols).cast(value_schema), records.select(cols).cast(value_schema)]
        )
        rows = {k: i for i, k in enumerate(_keys(hit, pk))}
        run(rows, range(hit.num_rows, hit.num_rows + records.num_rows))
        final = images.take(pa.array(list(rows.values()), pa.int64()))
        log_table = images.take(pa.array(log_image, pa.int64()))

    merged = final.append_column("_bucket", pa.array([bucket] * final.num_rows, pa.int32()))
    new_rows = pa.concat_tables([kept, merged.cast(row_schema)])
    path = log_path = None
    if new_rows.num_rows:
        path = f"{ctx.out_dir}/data/bucket-{bucket:04d}-{uuid.uuid4().hex}.parquet"
        _write(io, path, new_rows)
    if log_seq:
        log = pa.Table.from_arrays(
            [
                pa.array(log_seq, pa.int64()),
                pa.array(log_sub, pa.int32()),
                pa.array(log_type, pa.string()),
                *log_table.columns,
            ],
            schema=changelog_schema(row_schema),
        )
        log_path = f"{ctx.out_dir}/changelog-unnumbered/bucket-{bucket:04d}-{uuid.uuid4().hex}.parquet"
        _write(io, log_path, log)

    out = output_schema(row_schema, ctx.partition_columns)
    n = len(count_seq)
    counts = pa.Table.from_arrays(
        [
            pa.array([KIND_COUNT] * n, pa.string()),
            pa.array(count_seq, pa.int64()),
            pa.array(count_n, pa.int64()),
            *[pa.nulls(n, f.type) for f in list(out)[3:]],
        ],
        schema=out,
    )
    # One marker per touched bucket (also when it ends up empty): its files, row count and merge counters.
    marker = {name: [None] for name in out.names}
    marker.update(
        _kind=[KIND_FILE],
        _path=[path],
        _log_path=[log_path],
        _count=[new_rows.num_rows],
        _log_count=[len(log_seq)],
    )
    marker.update({f"_{c}": [getattr(merger.counts, c)] for c in COUNTERS})
    left = ids.remaining() if ids is not None else None
    marker.update(_ai_next=[left and left[0]], _ai_end=[left and left[1]])
    marker.update({column: [value.as_py()] for column, value in zip(ctx.partition_columns, key, strict=True)})
    return pa.concat_tables([counts, pa.Table.from_pydict(marker, schema=out)])
