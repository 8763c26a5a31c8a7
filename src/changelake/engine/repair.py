"""``changelake repair``: a table's stored rows brought to their columns' declared precision, keys included.

Rows written before changelake enforced declared precision (docs/semantics.md §15) may hold, say, a TIMESTAMP(0)
key with a fraction of a second. A compaction cuts such values in the other columns as it rewrites them
(:func:`changelake.engine.compact.at_declared_precision`); a key's value names its row, its bucket and maybe
its partition, so only this explicit command changes it. It reads every live row, cuts every column, puts each
row in the bucket (and partition) of its new key, and replaces all the table's files in one commit (a
compaction's snapshot: it carries the table's state, commits no batch, and a batch committed meanwhile makes it
fail, to be run again). Keys that become equal -- ``…:00.1`` and ``…:00.9`` in a TIMESTAMP(0) column -- are
refused, naming them, unless ``on_collision`` says which row stays: ``first`` or ``last`` in the order of the
stored keys before the cut. The changelog is not rewritten: it keeps what each batch logged.

The whole table passes through this process: it is a one-off for a table that had such rows, not a
maintenance job.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.table.snapshots import Operation

from changelake.bucketing.columns import bucket_ids
from changelake.engine import buckets
from changelake.engine.buckets import BucketTask, SourceFile
from changelake.engine.compact import (
    at_declared_precision,
    maintained_property,
    rewrite_context,
)
from changelake.errors import ChangelakeError
from changelake.spec import TableSpec
from changelake.storage import summary
from changelake.storage.iceberg import Storage
from changelake.storage.maintenance import delete_files
from changelake.storage.taskio import TaskIO

#: Which row stays when keys become equal: refuse (the default), or the first / last by the stored key.
ON_COLLISION = ("refuse", "first", "last")
#: Colliding keys a refusal names.
SHOWN_COLLISIONS = 10


@dataclass
class Repair:
    """What a repair did to one table."""

    table: str
    rows: int = 0  # live rows read
    rows_changed: int = 0  # rows with a value cut
    keys_changed: int = 0  # rows whose key changed
    rows_dropped: int = 0  # rows that lost a key collision (on_collision first/last)
    files_removed: int = 0
    files_added: int = 0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def repair_table(
    storage: Storage,
    spec: TableSpec,
    on_collision: str = "refuse",
    progress: Callable[[str], None] = lambda _m: None,
) -> Repair:
    """Bring every stored row of ``spec``'s table to its columns' declared precision in one commit (the module
    docstring); nothing is committed when no value needs it."""
    if on_collision not in ON_COLLISION:
        raise ChangelakeError(f"on_collision must be one of {list(ON_COLLISION)}, got {on_collision!r}")
    started = time.monotonic()
    out = Repair(spec.full_name)
    table = storage.pk_table(spec)
    snapshot = table.current_snapshot()
    files = storage.table_files(table) if snapshot is not None else []
    if not files:
        out.notes.append("no rows: nothing to repair")
        return out
    ctx = rewrite_context(storage, spec, table)
    io = TaskIO(ctx.io_properties)
    stored = _live_rows(spec, files, ctx, io)
    out.rows = stored.num_rows
    cut = at_declared_precision(spec, stored, keys=True)
    names = list(spec.column_names)
    changed = np.zeros(stored.num_rows, bool)
    keys_changed = np.zeros(stored.num_rows, bool)
    for name in names:
        differs = _differs(stored.column(name), cut.column(name))
        changed |= differs
        if name in spec.primary_key:
            keys_changed |= differs
    out.rows_changed, out.keys_changed = int(changed.sum()), int(keys_changed.sum())
    if not out.rows_changed:
        out.notes.append("every value is at its column's declared precision: nothing to repair")
        return out
    rows = cut.set_column(
        cut.schema.get_field_index("_bucket"), "_bucket", pa.array(bucket_ids(spec, cut), pa.int32())
    )
    rows, dropped = _resolve_collisions(spec, stored, rows, on_collision)
    out.rows_dropped = dropped
    written: list[str] = []
    try:
        written = _write(spec, rows, ctx, io)
        added = storage.to_data_files(table, written)
        removed = {f.path for f in files}
        props = {
            **Storage.state_properties(table),
            summary.OPERATION: "compact",
        }  # carries the state, commits no batch
        what = {"repaired_rows": out.rows_changed, "repaired_keys": out.keys_changed, "dropped": dropped}
        storage.commit_files(table, added, [], removed, props, Operation.OVERWRITE, maintained_property(what))
    except (CommitFailedException, ValidationException):
        delete_files(table.io, written)
        raise ChangelakeError(
            f"{spec.full_name}: another writer committed while the table was repaired; nothing was changed, "
            "run the repair again"
        ) from None
    except BaseException:
        delete_files(table.io, written)
        raise
    out.files_removed, out.files_added = len(files), len(written)
    progress(
        f"[{spec.full_name}] repaired: {out.rows_changed:,} of {out.rows:,} rows cut to their declared "
        f"precision ({out.keys_changed:,} keys), {dropped:,} dropped by key collisions; {out.files_removed} "
        f"file(s) replaced by {out.files_added} in {time.monotonic() - started:.1f}s"
    )
    return out


def _live_rows(spec: TableSpec, files, ctx, io) -> pa.Table:
    """Every live row of the table (with ``_bucket``), partition by partition, bucket by bucket."""
    partitions: dict[tuple, tuple[list, list]] = {}
    for f in files:
        data, deletes = partitions.setdefault(f.partition, ([], []))
        (deletes if f.is_delete else data).append(f)
    parts = []
    for data, deletes in partitions.values():
        present: set[int] = set()
        for f in data:
            lo, hi = f.buckets if f.buckets is not None else (0, spec.bucket_num - 1)
            present.update(range(lo, hi + 1))
        for bucket in sorted(present):
            task = BucketTask(
                key="",
                bucket=bucket,
                files=tuple(
                    SourceFile(f.path, f.record_count, f.single_bucket, f.size)
                    for f in data
                    if f.holds(bucket)
                ),
                deletes=tuple(f.path for f in deletes),
            )
            parts += [p.live_rows() for p in buckets.bucket_pieces(task, ctx, io)]
    schema = buckets.row_schema(spec)
    return (
        pa.concat_tables([p.select(schema.names).cast(schema) for p in parts])
        if parts
        else schema.empty_table()
    )


def _differs(before: pa.ChunkedArray, after: pa.ChunkedArray) -> np.ndarray:
    same = pc.fill_null(pc.equal(before, after), True)  # nulls stay nulls
    return ~same.to_numpy(zero_copy_only=False)


def _resolve_collisions(
    spec: TableSpec, stored: pa.Table, rows: pa.Table, on_collision: str
) -> tuple[pa.Table, int]:
    """``rows`` with one row per key: refused (naming the keys) or decided by ``on_collision`` where cut keys
    became equal; and how many rows were dropped."""
    keys = list(spec.primary_key)
    counts = rows.select(keys).group_by(keys).aggregate([([], "count_all")])
    colliding = counts.filter(pc.greater(counts.column("count_all"), 1))
    if not colliding.num_rows:
        return rows, 0
    if on_collision == "refuse":
        shown = []
        for key in colliding.select(keys).slice(0, SHOWN_COLLISIONS).to_pylist():
            mask = np.ones(rows.num_rows, bool)
            for name, value in key.items():
                mask &= pc.fill_null(
                    pc.equal(rows.column(name), pa.scalar(value, rows.schema.field(name).type)), False
                ).to_numpy(zero_copy_only=False)
            originals = stored.filter(pa.array(mask)).select(keys).to_pylist()
            shown.append(f"{json.dumps(key, default=str)} <- {json.dumps(originals, default=str)}")
        raise ChangelakeError(
            f"{spec.full_name}: {colliding.num_rows} key(s) become equal once cut to their declared precision, "
            f"so the repair would have to drop rows; say which stays with --on-collision first|last (by the stored "
            f"key before the cut): " + "; ".join(shown)
        )
    # Order by the cut key, then by the stored key; keep the first or the last of each cut key.
    order_columns = {f"__cut_{k}": rows.column(k) for k in keys} | {
        f"__stored_{k}": stored.column(k) for k in keys
    }
    helper = pa.table(order_columns)
    order = pc.sort_indices(helper, sort_keys=[(name, "ascending") for name in order_columns]).to_numpy()
    cut_keys = helper.select([f"__cut_{k}" for k in keys]).take(pa.array(order))
    same_as_next = np.ones(len(order) - 1, bool) if len(order) > 1 else np.zeros(0, bool)
    for column in cut_keys.columns:
        values = column.combine_chunks()
        same_as_next &= pc.fill_null(
            pc.equal(values.slice(0, len(values) - 1), values.slice(1)), False
        ).to_numpy(zero_copy_only=False)
    if on_collision == "first":
        keep = np.r_[True, ~same_as_next]
    else:
        keep = np.r_[~same_as_next, True]
    kept = order[keep]
    return rows.take(pa.array(np.sort(kept))), int(len(order) - len(kept))


def _write(spec: TableSpec, rows: pa.Table, ctx, io) -> list[str]:
    """One file per (partition, bucket), sorted by key: a full compaction's layout."""
    group_columns = [*spec.partition_keys, "_bucket"]
    groups = rows.select(group_columns).group_by(group_columns).aggregate([])
    paths = []
    for group in groups.to_pylist():
        mask = np.ones(rows.num_rows, bool)
        for name, value in group.items():
            equal = pc.equal(rows.column(name), pa.scalar(value, rows.schema.field(name).type))
            mask &= pc.fill_null(equal, False).to_numpy(zero_copy_only=False)
        part = rows.filter(pa.array(mask))
        part = part.take(pc.sort_indices(part, sort_keys=[(k, "ascending") for k in spec.primary_key]))
        path = f"{ctx.out_dir}/data/bucket-{group['_bucket']:04d}-{uuid.uuid4().hex}-000.parquet"
        buckets.write_file(io, path, part, buckets.data_dictionary(spec), ctx)
        paths.append(path)
    return paths
