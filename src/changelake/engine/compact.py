"""Compaction: fold a table's delete files and its batches' small data files back into few sorted files.

A merge-on-read batch adds, per Iceberg partition, a data file of its new rows and a position-delete file
(:mod:`changelake.storage.files`). Readers merge them as they read, at a cost that grows with their number and
size. Per partition (Paimon's vocabulary, documented defaults in docs/configuration.md):

* **minor** -- when ``num-sorted-run.compaction-trigger`` (5) delta files, or delete files, of one size tier
  are in the partition (:func:`due_tier`): those delta files' live rows become one delta file (sorted by
  bucket, then key), those delete files one delete file naming only rows of the files that stay. Cost: the
  files merged, not the table; tiers keep a row from being rewritten at every merge.
* **full** -- when the rows readers skip or merge (delta rows plus deleted positions) reach
  ``compaction.max-size-amplification-percent`` of the rows in the bucket files (50%), or when asked: every
  bucket of the partition is rewritten as one file sorted by key, and no delta or delete file is left.

The rows a compaction rewrites leave it at their columns' declared precision (:func:`at_declared_precision`:
values stored before changelake enforced it are cut), keys excepted: ``changelake repair`` (engine/repair.py)
rewrites those.

**Where the rows are merged.** A compaction whose partitions hold more than ``CHANGELAKE_SPARK_COMPACT_BYTES``
of files (config.TUNING) runs as Spark tasks when the caller has a Spark session (``spark``): one task per
bucket of a full compaction, one per partition of a minor merge, each reading its files and writing its file
through :class:`~changelake.storage.taskio.TaskIO` from the table's FileIO properties (an executor shares no
disk with the driver) and returning only the paths and row counts. The driver plans and commits; it never
holds a partition's rows, so a partition larger than its memory compacts. Smaller compactions run the same
functions in this process on two threads (a Spark job costs more than their work).

A compaction is one optimistic Iceberg commit (``replace``) on the snapshot it read, carrying the table's
state (the last batch's summary) so that state stays in the latest snapshot. A batch committed meanwhile makes
it fail: its files are removed and the next run tries again (a batch's commit, conversely, re-checks the files
it relies on: :meth:`changelake.engine.apply.Applier._commit_after_race`). Every file it writes is under one
directory of its own (``compact-<id>``): a failed Spark job's files, whichever tasks wrote them, are removed by
listing it. A kill at any point leaves at most unreferenced files (the orphan sweep removes them).

The changelog table is compacted too: its small files (one or a few per batch) are merged into one file sorted
by (batch, partition, bucket, offset), and files whose every record is older than ``table.log.ttl`` are removed.
A changelog table partitioned by batch (created before this) only has its old files removed.
"""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation

from changelake import privacy
from changelake.config import tuned
from changelake.engine import buckets
from changelake.engine.buckets import BucketContext, BucketTask, SourceFile
from changelake.faults import fault, fault_in_task, task_fault
from changelake.pyworker import lazy_zip_invalidation
from changelake.spec import TableSpec
from changelake.storage import lineage, summary
from changelake.storage.files import TableFile, int_bound
from changelake.storage.iceberg import Storage
from changelake.storage.maintenance import delete_files, list_files
from changelake.storage.taskio import TaskIO

#: A full compaction run after a commit (not by ``changelake compact``) leaves partitions whose bucket files
#: hold more than this to the maintenance job: it rewrites the whole partition.
INLINE_FULL_BYTES = 256 << 20
#: Changelog files smaller than this are merged, once there are CHANGELOG_MERGE_AT of them.
CHANGELOG_SMALL_BYTES = 32 << 20
CHANGELOG_MERGE_AT = 10
#: Merged changelog files become one file per this many bytes of them, at most (what one merge holds in memory).
CHANGELOG_GROUP_BYTES = 256 << 20


@dataclass
class Compaction:
    """What a compaction did to one table."""

    table: str
    full: int = 0  # partitions rewritten whole
    minor: int = 0  # partitions whose deltas and deletes were merged
    files_added: int = 0
    files_removed: int = 0
    rows_written: int = 0
    notes: list[str] = field(default_factory=list)
    committed: Table | None = None  # the table as the compaction committed it (None: nothing committed)

    @property
    def changed(self) -> bool:
        return bool(self.files_added or self.files_removed)


def is_delta(f: TableFile) -> bool:
    """A merge-on-read batch's (or a minor compaction's) data file, as opposed to a bucket's own file."""
    return os.path.basename(f.path).startswith("delta-")


def out_of_order(table, files: list[TableFile]) -> set[str]:
    """The data files another writer may have left out of the table's sort order ((_bucket, primary key), in
    which changelake writes and merges on read): those declaring another order, and those added by a retained
    snapshot that is not changelake's without declaring the table's (Iceberg's ``rewrite_data_files`` with the
    table's sort order declares it; a bin-pack rewrite or another engine's append may not). Reads and merges
    stay right for them (engine/buckets.py checks the order it relies on); compaction rewrites their
    partitions to restore it."""
    order = table.sort_order()
    if not order.fields:
        return set()
    out = set()
    for f in files:
        if f.is_delete or f.sort_order_id == order.order_id:
            continue
        added = table.snapshot_by_id(f.added_by) if f.added_by is not None else None
        foreign = added is not None and not lineage.is_changelake(summary.properties(added))
        if f.sort_order_id is not None or foreign:
            out.add(f.path)
    return out


def amplification(data: list[TableFile], deletes: list[TableFile]) -> float:
    """Rows readers merge or skip (delta rows, deleted positions) per row of the bucket files, in percent."""
    base = sum(f.record_count for f in data if not is_delta(f))
    extra = sum(f.record_count for f in data if is_delta(f)) + sum(f.record_count for f in deletes)
    return 100.0 * extra / base if base else (100.0 if extra else 0.0)


@dataclass(frozen=True)
class BucketRewrite:
    """Work of a full compaction: one bucket of a partition rewritten as one file of its live rows, by key."""

    files: tuple[SourceFile, ...]  # the partition's data files that may hold the bucket's rows
    deletes: tuple[str, ...]  # every delete file of the partition
    bucket: int


@dataclass(frozen=True)
class DeltaMerge:
    """Work of a minor compaction: some delta files of a partition merged into one, some delete files into one."""

    merged: tuple[str, ...]  # the delta files merged
    deletes: tuple[str, ...]  # every delete file of the partition (the merged rows' deletes)
    merged_deletes: tuple[str, ...]  # the delete files merged
    staying: tuple[str, ...]  # the partition's data files that stay (the merged delete file names only these)


#: What each piece of work returns (a row of the Spark job; the in-process run returns the same dicts).
_MARKER_FIELDS = (
    ("_task", pa.int64()),
    ("_path", pa.string()),  # the data file written (None: no live row)
    ("_rows", pa.int64()),
    ("_delete_path", pa.string()),  # a minor merge's delete file (None: none)
    ("_delete_stats", pa.string()),  # its stats (JSON)
    ("_delete_names", pa.string()),  # a data file it names (the delete file's partition is that file's)
)


def compact_table(
    storage: Storage,
    spec: TableSpec,
    *,
    full: bool = False,
    inline: bool = False,
    table=None,
    spark: Callable[[], Any] | None = None,
    progress: Callable[[str], None] = lambda _m: None,
) -> Compaction:
    """Compact the PK table's partitions that are due (every partition with deltas or deletes, with ``full``)
    in one commit. ``inline`` (after a batch's commit) leaves large full compactions to the maintenance job.
    ``table``: the PK table as the caller just loaded it. ``spark``: returns a SparkSession, called only when
    the work is larger than ``CHANGELAKE_SPARK_COMPACT_BYTES`` (then it runs in Spark tasks); None: the work
    runs in this process whatever its size."""
    table = table if table is not None else storage.pk_table(spec)
    out = Compaction(spec.full_name)
    snapshot = table.current_snapshot()
    if snapshot is None:
        return out
    files = storage.table_files(table)
    options = spec.storage
    partitions: dict[tuple, tuple[list[TableFile], list[TableFile]]] = {}
    for f in files:
        data, deletes = partitions.setdefault(f.partition, ([], []))
        (deletes if f.is_delete else data).append(f)
    plans = []
    unordered = out_of_order(table, files)
    for partition, (data, deletes) in sorted(partitions.items(), key=lambda p: json.dumps(p[0], default=str)):
        deltas = [f for f in data if is_delta(f)]
        foreign = [f for f in data if f.path in unordered]
        if foreign:
            note = (
                f"partition {list(partition)}: {len(foreign)} data file(s) another writer committed without "
                "changelake's order (_bucket, primary key): reads stay right; the partition is rewritten whole"
            )
            out.notes.append(note)
            progress(f"[{spec.full_name}] {note}")
        elif not deltas and not deletes:
            continue
        if foreign or full or amplification(data, deletes) >= options.max_amplification_percent:
            base_bytes = sum(f.size for f in data if not is_delta(f))
            if inline and base_bytes > INLINE_FULL_BYTES:
                out.notes.append(
                    f"partition {list(partition)} is due for a full compaction ({base_bytes:,} bytes): left to "
                    "`changelake maintain`"
                )
            else:
                plans.append(("full", partition, data, deletes, data, deletes))
                continue
        merge_deltas = due_tier(deltas, options.compaction_trigger)
        merge_deletes = due_tier(deletes, options.compaction_trigger)
        if merge_deltas or merge_deletes:
            plans.append(("minor", partition, data, deletes, merge_deltas, merge_deletes))
    if not plans:
        return out
    started = time.monotonic()
    work, removed = _work_of(spec, plans)
    work_bytes = sum(
        f.size
        for _k, _p, _d, deletes, merged, merged_deletes in plans
        for f in {*merged, *merged_deletes, *deletes}
    )
    in_spark = spark is not None and work_bytes > tuned("spark_compact_bytes")
    for kind, partition, data, deletes, merged, _merged_deletes in plans:
        what = (
            f"{len(_buckets_of(spec, data))} bucket(s) rewritten whole"
            if kind == "full"
            else f"{len(merged)} delta file(s) merged"
        )
        progress(
            f"[{spec.full_name}] compacting partition {list(partition)}: {what}, "
            f"{sum(f.record_count for f in merged):,} rows in {sum(f.size for f in merged):,} bytes of data files, "
            f"{len(deletes)} delete file(s)"
        )
    progress(
        f"[{spec.full_name}] compaction: {len(work)} task(s) over {work_bytes:,} bytes of files "
        + ("in Spark tasks" if in_spark else "in this process")
    )
    ctx = rewrite_context(storage, spec, table, in_process=not in_spark)
    io = TaskIO(ctx.io_properties)
    written: list[str] = []
    added_deletes: list[tuple[str, dict, TableFile]] = []
    try:
        function = work_function(work, ctx, task_fault())
        if in_spark and spark is not None:
            markers = _run_spark(spark, function, len(work))
        else:
            markers = _run_here(function, len(work))
        by_path = {f.path: f for _k, _p, data, _d, _m, _md in plans for f in data}
        for m in sorted(markers, key=lambda m: m["_task"]):
            if m["_path"] is not None:
                written.append(m["_path"])
            out.rows_written += m["_rows"]
            if m["_delete_path"] is not None:
                added_deletes.append(
                    (m["_delete_path"], json.loads(m["_delete_stats"]), by_path[m["_delete_names"]])
                )
        out.full = sum(1 for p in plans if p[0] == "full")
        out.minor = len(plans) - out.full
        if in_spark:  # a retried or speculative task attempt's file: written, never returned
            mine = set(written) | {p for p, _, _ in added_deletes}
            delete_files(
                table.io, [p for p, _ in list_files(ctx.out_dir, ctx.io_properties) if p not in mine]
            )
        added = storage.to_data_files(table, sorted(written))
        described = [
            storage.to_delete_file(table, path, stats, io.size(path), ref.data_file.partition)
            for path, stats, ref in added_deletes
        ]
        props = {**Storage.state_properties(table), summary.OPERATION: "compact"}
        table_props = maintained_property({"compacted_full": out.full, "compacted_minor": out.minor})
        fault("before-compaction-commit")
        out.committed = storage.commit_files(
            table, added, described, removed, props, Operation.REPLACE, table_props
        )
        fault("after-compaction-commit")
    except (CommitFailedException, ValidationException):
        _remove_written(table, ctx, written + [p for p, _, _ in added_deletes], in_spark)
        out.notes.append("another writer committed first: nothing compacted (the next run tries again)")
        out.full = out.minor = out.files_added = out.files_removed = out.rows_written = 0
        return out
    except BaseException:
        _remove_written(table, ctx, written + [p for p, _, _ in added_deletes], in_spark)
        raise
    out.files_added, out.files_removed = len(written) + len(added_deletes), len(removed)
    progress(
        f"[{spec.full_name}] compacted {out.full} partition(s) whole and {out.minor} by merging their deltas: "
        f"{out.files_removed} file(s) replaced by {out.files_added}, {out.rows_written:,} rows written in "
        f"{time.monotonic() - started:.1f}s" + (f" in {len(work)} Spark task(s)" if in_spark else "")
    )
    return out


def _work_of(spec: TableSpec, plans: list) -> tuple[list[BucketRewrite | DeltaMerge], set[str]]:
    """The pieces of work of the planned partitions (a bucket of a full compaction, a partition's minor merge)
    and the files the commit removes."""
    work: list[BucketRewrite | DeltaMerge] = []
    removed: set[str] = set()
    for kind, _partition, data, deletes, merged, merged_deletes in plans:
        delete_paths = tuple(f.path for f in deletes)
        if kind == "full":
            for bucket in _buckets_of(spec, data):
                holding = tuple(
                    SourceFile(f.path, f.record_count, f.single_bucket, f.size)
                    for f in data
                    if f.holds(bucket)
                )
                work.append(BucketRewrite(holding, delete_paths, bucket))
        else:
            work.append(
                DeltaMerge(
                    merged=tuple(f.path for f in merged),
                    deletes=delete_paths,
                    merged_deletes=tuple(f.path for f in merged_deletes),
                    staying=tuple(f.path for f in data if f not in merged),
                )
            )
        removed |= {f.path for f in merged} | {f.path for f in merged_deletes}
    return work, removed


def _buckets_of(spec: TableSpec, data: list[TableFile]) -> list[int]:
    """The buckets whose rows the data files may hold."""
    present: set[int] = set()
    for f in data:
        lo, hi = f.buckets if f.buckets is not None else (0, spec.bucket_num - 1)
        present.update(range(lo, hi + 1))
    return sorted(present)


def work_function(work: list, ctx: BucketContext, carried_fault: str | None):
    """The ``mapInArrow`` function of a compaction: its input rows are indexes into ``work``; it does each
    piece (:func:`_rewrite_bucket`, :func:`_merge_deltas`) and yields its marker row (paths and counts only:
    the rows stay in the task). ``carried_fault``: the driver's ``CHANGELAKE_FAULT`` (changelake.faults)."""

    def run(batches):
        in_spark = not ctx.threads
        if in_spark:
            lazy_zip_invalidation()  # for this worker's next tasks
            privacy.restrict_worker()  # a Spark worker has its JVM's umask, whoever started that
        io = TaskIO(ctx.io_properties)
        schema = pa.schema(list(_MARKER_FIELDS))
        for batch in batches:
            for i in batch.column(0).to_pylist():
                item = work[i]
                marker: dict[str, Any] = {
                    "_task": i,
                    "_delete_path": None,
                    "_delete_stats": None,
                    "_delete_names": None,
                }
                if isinstance(item, BucketRewrite):
                    marker["_path"], marker["_rows"] = _rewrite_bucket(item, ctx, io)
                else:
                    paths, rows, delete_file = _merge_deltas(ctx, io, item)
                    marker["_path"], marker["_rows"] = (paths[0] if paths else None), rows
                    if delete_file is not None:
                        path, stats, named = delete_file
                        marker.update(_delete_path=path, _delete_stats=json.dumps(stats), _delete_names=named)
                fault_in_task("compaction-task", carried_fault)  # its file written, not returned
                yield pa.RecordBatch.from_pylist([marker], schema=schema)

    return run


def _run_here(function, n: int) -> list[dict]:
    """The work function over ``0..n-1`` in this process, two pieces at a time (pyarrow reads, sorts and
    writes without the GIL)."""

    def one(i: int) -> list[dict]:
        ids = pa.RecordBatch.from_pydict({"id": pa.array([i], pa.int64())})
        return [row for batch in function(iter([ids])) for row in batch.to_pylist()]

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="changelake-compact") as pool:
        return [m for rows in pool.map(one, range(n)) for m in rows]


def _run_spark(spark: Callable[[], Any], function, n: int) -> list[dict]:
    """The work function as ``n`` Spark tasks, one piece each (their input: a range of ids, no shuffle, no
    sparkContext: works over Spark Connect); only the marker rows come back."""
    session = spark()
    schema = ", ".join(f"{name} {'bigint' if t == pa.int64() else 'string'}" for name, t in _MARKER_FIELDS)
    frame = session.range(0, n, 1, n)
    try:
        context = session.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect has no sparkContext
        context = None
    group = f"changelake-compact-{uuid.uuid4().hex[:12]}"
    if context is not None:
        context.setJobGroup(group, "changelake compaction", interruptOnCancel=True)
    try:
        return [r.asDict() for r in frame.mapInArrow(function, schema).collect()]
    except BaseException:
        if context is not None:
            _wait_for_tasks(context, group)
        raise
    finally:
        if context is not None:
            context.setLocalProperty("spark.jobGroup.id", None)


def _wait_for_tasks(context, group: str, timeout_s: float = 60.0) -> None:
    """Wait (at most ``timeout_s``) until no task of the job group runs: a failed job's other tasks are killed
    asynchronously and may still write their file, which the driver's cleanup must see. A task's Python
    worker may outlive its task by Spark's ``spark.python.task.killTimeout``: what it writes then is the
    orphan sweep's."""
    tracker = context.statusTracker()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(group)]
        stages = [tracker.getStageInfo(s) for job in jobs if job is not None for s in job.stageIds]
        if all(stage is None or stage.numActiveTasks == 0 for stage in stages):
            return
        time.sleep(0.1)


def _remove_written(table, ctx: BucketContext, written: list[str], in_spark: bool) -> None:
    """Remove what a compaction that does not commit wrote: the files it knows of, and in Spark every file
    under its directory (a failed job's tasks' files never reach the driver)."""
    if in_spark:
        written = sorted({*written, *(p for p, _ in list_files(ctx.out_dir, ctx.io_properties))})
    delete_files(table.io, written)


def maintained_property(what: dict) -> dict[str, str]:
    """The table property saying when maintenance last changed the table, and what it did (a compaction's, a
    repair's)."""
    return {summary.MAINTENANCE: json.dumps({"at_ms": int(time.time() * 1000), **what}, sort_keys=True)}


def rewrite_context(
    storage: Storage, spec: TableSpec, table, changelog: bool = False, in_process: bool = True
) -> BucketContext:
    """What reading and writing a table's bucket files outside a batch needs (a compaction, a repair): of
    ``table``, the PK table, or with ``changelog`` the changelog table. ``in_process``: the work runs in this
    process (threads, and the rows kept for the next batch), not in Spark tasks."""
    codec, level = buckets.compression_of(dict(table.properties))
    ids = Storage.field_ids(table)
    return BucketContext(
        spec=spec,
        partition_columns=(*spec.partition_keys,),
        files_by_partition={},
        io_properties=dict(table.io.properties),
        out_dir=f"{table.location()}/data/compact-{uuid.uuid4().hex[:12]}",
        log_dir="",
        batch_id=0,
        commit_micros=0,
        compression=codec,
        compression_level=level,
        delta_compression=buckets.delete_compression_of(dict(table.properties)),
        threads=in_process,
        keep_rows=in_process,
        field_ids={} if changelog else ids,
        log_field_ids=ids if changelog else {},
    )


def _rewrite_bucket(item: BucketRewrite, ctx: BucketContext, io: TaskIO) -> tuple[str | None, int]:
    """A bucket of a partition as one file of its live rows sorted by key: its path (None: no live row) and
    its rows."""
    spec = ctx.spec
    task = BucketTask(key="", bucket=item.bucket, files=item.files, deletes=item.deletes)
    pieces = buckets.bucket_pieces(task, ctx, io)
    parts = [p.live_rows() for p in pieces]
    del pieces
    rows = pa.concat_tables(parts) if parts else None
    del parts
    if rows is None or not rows.num_rows:
        return None, 0
    rows = at_declared_precision(spec, rows, keys=False)
    rows = rows.take(pc.sort_indices(rows, sort_keys=[(k, "ascending") for k in spec.primary_key]))
    path = f"{ctx.out_dir}/data/bucket-{item.bucket:04d}-{uuid.uuid4().hex}-000.parquet"
    buckets.write_file(io, path, rows, buckets.data_dictionary(spec), ctx)
    if ctx.keep_rows:
        buckets.STORED_ROWS.put(path, buckets.row_schema(spec), rows)
    return path, rows.num_rows


def _merge_deltas(
    ctx: BucketContext, io: TaskIO, item: DeltaMerge
) -> tuple[list[str], int, tuple[str, dict, str] | None]:
    """Merge some delta files of a partition into one (their live rows under every delete file of the
    partition, sorted by bucket and key), and some delete files into one (their positions in the partition's
    data files that stay). The new data file's path, its rows, and the delete file (path, stats, a data file
    it names) if it names any row."""
    spec = ctx.spec
    keep = ctx.keep_rows
    positions = buckets.deleted_positions(io, list(item.deletes), keep_rows=keep, only=list(item.merged))
    paths: list[str] = []
    written = 0
    parts = []
    for path in item.merged:
        rows = buckets.file_rows(spec, io, path, ctx.threads, keep_rows=keep)
        mask = buckets.live_mask(rows.num_rows, positions.get(path))
        parts.append(rows if mask is None else rows.filter(pa.array(mask)))
    rows = pa.concat_tables(parts) if parts else None
    del parts
    if rows is not None and rows.num_rows:
        rows = at_declared_precision(spec, rows, keys=False)
        order = [("_bucket", "ascending")] + [(k, "ascending") for k in spec.primary_key]
        rows = rows.take(pc.sort_indices(rows, sort_keys=order))
        path = f"{ctx.out_dir}/data/delta-{uuid.uuid4().hex}.parquet"
        buckets.write_file(io, path, rows, buckets.data_dictionary(spec), ctx, buckets.SHARED_ROW_GROUP_ROWS)
        if keep:
            buckets.STORED_ROWS.put(path, buckets.row_schema(spec), rows)
        paths.append(path)
        written = rows.num_rows
    if not item.merged_deletes:
        return paths, written, None
    staying = set(item.staying)
    named_by = buckets.deleted_positions(io, list(item.merged_deletes), keep_rows=keep)
    named = sorted(p for p in named_by if p in staying and len(named_by[p]))
    if not named:
        return paths, written, None
    table = buckets.position_deletes(named, [named_by[p] for p in named])
    path = f"{ctx.out_dir}/data/deletes-{uuid.uuid4().hex}.parquet"
    with io.open_output(path) as sink:
        buckets.write_position_deletes(sink, table, ctx.delta_compression)
    return paths, written, (path, buckets.delete_stats(table), named[0])


def at_declared_precision(spec: TableSpec, rows: pa.Table, keys: bool) -> pa.Table:
    """``rows`` with their values cut to their columns' declared precision (``DataType.normalize_stored``): rows
    stored before changelake enforced it (docs/semantics.md §15). A compaction rewrites the other columns only
    (``keys`` False): a key column's value names its row, its bucket and partition, and only ``changelake
    repair`` changes it, explicitly."""
    for column in spec.columns:
        if column.type.name not in ("TIME", "TIMESTAMP", "TIMESTAMP_LTZ") or (
            not keys and column.name in spec.primary_key
        ):
            continue
        index = rows.schema.get_field_index(column.name)
        rows = rows.set_column(index, rows.field(index), column.type.normalize_stored(rows.column(index)))
    return rows


def due_tier(files: list[TableFile], trigger: int) -> list[TableFile]:
    """The files of the smallest size tier that holds ``trigger`` files or more (none: nothing due). Tiers
    grow by a factor of four in rows from 4,096, so a merged file moves up a tier and each row is rewritten
    a few times before a full compaction, not once per merge."""
    tiers: dict[int, list[TableFile]] = {}
    for f in files:
        tier = 0 if f.record_count < 4096 else int(math.log(f.record_count / 4096, 4)) + 1
        tiers.setdefault(tier, []).append(f)
    for tier in sorted(tiers):
        if len(tiers[tier]) >= trigger:
            return tiers[tier]
    return []


# --- the changelog table -------------------------------------------------------------------------------------
def compact_changelog(
    storage: Storage,
    spec: TableSpec,
    *,
    force: bool = False,
    now_s: float | None = None,
    table=None,
    progress: Callable[[str], None] = lambda _m: None,
) -> Compaction:
    """Merge the changelog table's small files (once there are CHANGELOG_MERGE_AT of them, or any two with
    ``force``) and remove the files whose records are all older than ``table.log.ttl``, in one commit.
    ``table``: the changelog table as the caller just loaded it."""
    table = table if table is not None else storage.changelog_table(spec)
    out = Compaction(spec.full_name + "__changelog")
    snapshot = table.current_snapshot()
    if snapshot is None:
        return out
    now_s = time.time() if now_s is None else now_s
    files = [f for f in storage.table_files(table) if not f.is_delete]
    schema = table.schema()
    ts_id = schema.find_field("_commit_timestamp").field_id
    cutoff_us = int((now_s - spec.log_ttl_s) * 1_000_000)
    old = [f for f in files if (_upper(f, ts_id) or cutoff_us) < cutoff_us]  # no recorded bound: kept
    gone = {f.path for f in old}
    merge: list[TableFile] = []
    if not Storage.layout(table).partition_columns:  # a table partitioned by batch cannot merge batches
        small = [f for f in files if f.path not in gone and f.size < CHANGELOG_SMALL_BYTES]
        merge = small if force and len(small) >= 2 else due_tier(small, CHANGELOG_MERGE_AT)
    if not old and not merge:
        return out
    started = time.monotonic()
    io = TaskIO(dict(table.io.properties))
    written: list[str] = []
    try:
        if merge:
            codec, level = buckets.compression_of(dict(table.properties))
            ctx = replace(
                rewrite_context(storage, spec, table, changelog=True),
                compression=codec,
                compression_level=level,
            )
            directory = f"{table.location()}/data/compact-{uuid.uuid4().hex[:12]}"
            order = ["_batch_id", *spec.partition_keys, "_bucket", "_log_offset"]
            meta = [*spec.partition_keys, "_change_type", "_batch_id", "_bucket", "_commit_timestamp"]
            for group in _changelog_groups(sorted(merge, key=lambda f: f.batches or (0, 0))):
                rows = pa.concat_tables([_changelog_rows(spec, io, f.path) for f in group])
                rows = _in_order(rows, order)
                path = f"{directory}/changelog-{uuid.uuid4().hex}.parquet"
                buckets.write_file(io, path, rows, meta, ctx, changelog=True)
                written.append(path)
                out.rows_written += rows.num_rows
                del rows
        removed = gone | {f.path for f in merge}
        props = {**Storage.state_properties(table), summary.OPERATION: "compact"}
        kept = [f.batches[0] for f in files if f.path not in gone and f.batches is not None]
        table_props = maintained_property(
            {"changelog_files_removed": len(old), "changelog_files_merged": len(merge)}
        )
        if old:  # readers say which batches' changelog is gone
            table_props[summary.LOG_START_BATCH] = str(
                min(kept) if kept else summary.last_batch_of(props) + 1
            )
        out.committed = storage.commit_files(
            table, storage.to_data_files(table, written), [], removed, props, Operation.REPLACE, table_props
        )
    except (CommitFailedException, ValidationException):
        delete_files(table.io, written)
        out.notes.append("another writer committed first: nothing compacted (the next run tries again)")
        return out
    except BaseException:
        delete_files(table.io, written)
        raise
    out.files_added, out.files_removed = len(written), len(removed)
    out.minor = 1 if merge else 0
    progress(
        f"[{out.table}] {len(merge)} small file(s) merged into {len(written)}, {len(old)} file(s) older than "
        f"table.log.ttl removed in {time.monotonic() - started:.1f}s"
    )
    return out


def _in_order(rows: pa.Table, order: list[str]) -> pa.Table:
    """``rows`` sorted by the ``order`` columns. The files of a changelog merge are concatenated in batch order,
    and a batch's file is written in that order, so the rows mostly arrive sorted: the reordering copy (a
    ``take`` of every column, ~100 ms for the ten 20,000-row files of ten one-bucket batches, half the merge)
    is made only when the sort moves a row."""
    indices = pc.sort_indices(rows, sort_keys=[(c, "ascending") for c in order])
    if np.array_equal(indices.to_numpy(), np.arange(len(indices))):
        return rows
    return rows.take(indices)


def _changelog_groups(files: list[TableFile]) -> list[list[TableFile]]:
    """Consecutive files (in batch order) of at most CHANGELOG_GROUP_BYTES together, each group merged into
    one file: a forced merge of many small files never holds more than that in this process."""
    groups: list[list[TableFile]] = [[]]
    size = 0
    for f in files:
        if groups[-1] and size + f.size > CHANGELOG_GROUP_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(f)
        size += f.size
    return [g for g in groups if g]


def _upper(f: TableFile, field_id: int) -> int | None:
    bounds = (f.data_file.upper_bounds or {}) if f.data_file is not None else {}
    return int_bound(bounds.get(field_id))


def _changelog_rows(spec: TableSpec, io: TaskIO, path: str) -> pa.Table:
    """A changelog file's rows in the changelog schema (columns a file written before a column was added lacks
    read as nulls)."""
    import pyarrow.parquet as pq

    schema = buckets.changelog_schema(spec)
    with io.open_input(path) as stream:
        table = pq.read_table(stream)
    return pa.table(
        {
            f.name: table.column(f.name).cast(f.type)
            if f.name in table.column_names
            else pa.nulls(table.num_rows, f.type)
            for f in schema
        }
    )
