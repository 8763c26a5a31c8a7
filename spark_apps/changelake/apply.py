"""Apply changelog batches to a PK table exactly once.

Protocol for batch N of table T (every step is safe to crash in):

1. Roll forward: if T's current snapshot committed a batch whose changelog is not yet in ``T__changelog``,
   commit it from the manifest that snapshot names (files written before the PK commit).
2. Idempotency: batch N already committed with the same input checksum -> no-op; different checksum ->
   refused. N != last + 1 -> refused (no skipping ahead, no going back).
3. Decode the landed files on the driver (clear errors, nothing written yet), stage them as Parquet.
4. Spark computes the touched buckets' new files and the batch's changelog, writing both into fresh
   per-attempt directories (never read unless committed).
5. Commit point: one overwrite snapshot on T replacing the touched buckets' files, its summary holding the
   batch id, checksum, counts, changelog offsets and the changelog manifest. A concurrent applier makes
   this commit fail (Iceberg's optimistic check on the parent snapshot): go back to 1.
6. Commit the changelog snapshot (roll-forward of step 1 for this batch).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from changelake import merge, tables
from changelake.buckets import (
    COUNTERS,
    KIND_COUNT,
    KIND_FILE,
    BucketContext,
    changelog_schema,
    merge_bucket,
    output_schema,
    row_schema,
)
from changelake.errors import BatchRefusedError, ChangelakeError
from changelake.readers import DecodedBatch, read_batch
from changelake.spec import TableSpec
from changelake.storage import CommitFailedException, Storage

BATCH_FILE = re.compile(r"^(\d+)\.(jsonl|json|parquet)$")
MAX_COMMIT_ATTEMPTS = 5
Progress = Callable[[str], None]


def stderr_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class BatchResult:
    table: str
    batch_id: int
    status: str  # "applied" | "already-applied"
    counts: dict[str, int] = field(default_factory=dict)
    snapshot_id: int | None = None
    changelog_records: int = 0
    log_start_offset: int = 0
    log_end_offset: int = 0
    seconds: float = 0.0
    source: dict[str, int] = field(default_factory=dict)  # messages, skipped, quarantined, redelivered, ...
    dead_letter: str | None = None  # where this batch's quarantined records are


SOURCE_COUNTERS = ("messages", "skipped", "quarantined", "redelivered", "deduplicated")


def _fault(point: str) -> None:
    """Crash injection for the exactly-once tests: ``CHANGELAKE_FAULT=<point>`` kills the process (-9)."""
    if os.environ.get("CHANGELAKE_FAULT") == point:
        os.kill(os.getpid(), signal.SIGKILL)


def checksum_files(paths: list[Path], fmt: str | None = None, target_columns: list[str] | None = None) -> str:
    """Identity of a batch's input: file contents, format and target columns (not the file names)."""
    h = hashlib.sha256(json.dumps([fmt, target_columns]).encode())
    for path in paths:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\x00")
    return h.hexdigest()


def read_manifest(path: Path) -> list[str] | None:
    """Target columns of a landed batch, from ``<batch_id>.manifest.json`` beside it (partial updates)."""
    manifest = path.with_name(f"{path.name.split('.')[0]}.manifest.json")
    if not manifest.exists():
        return None
    try:
        data = json.loads(manifest.read_text())
    except json.JSONDecodeError as e:
        raise ChangelakeError(f"{manifest}: not valid JSON: {e}") from None
    columns = data.get("target_columns") if isinstance(data, dict) else None
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
        raise ChangelakeError(f'{manifest}: expected {{"target_columns": ["col", ...]}}')
    return columns


def landed_batches(landing_dir: Path, spec: TableSpec) -> dict[int, Path]:
    """Batch files under ``<landing>/<namespace>.<table>/<batch_id>.<ext>``, keyed by batch id."""
    directory = landing_dir / spec.full_name
    found: dict[int, Path] = {}
    if not directory.is_dir():
        return found
    for path in sorted(directory.iterdir()):
        m = BATCH_FILE.match(path.name)
        if not m:
            continue
        batch_id = int(m.group(1))
        if batch_id <= 0:
            raise ChangelakeError(f"{path}: batch ids are positive integers")
        if batch_id in found:
            raise ChangelakeError(f"{path}: batch {batch_id} is landed twice ({found[batch_id].name})")
        found[batch_id] = path
    return dict(sorted(found.items()))


class Applier:
    """Applies batches for one SparkSession and catalog."""

    def __init__(self, spark, storage: Storage, progress: Progress = stderr_progress):
        """``spark`` is a SparkSession or a callable returning one (started only when a batch needs it,
        so a bad input file is reported without waiting for a JVM)."""
        self._spark = spark
        self.storage = storage
        self.progress = progress

    @property
    def spark(self):
        if callable(self._spark):
            self._spark = self._spark()
        return self._spark

    # --- public ----------------------------------------------------------------------------------------
    def apply_pending(
        self, spec: TableSpec, landing_dir: Path, up_to: int | None = None, from_batch: int | None = None
    ) -> list[BatchResult]:
        """Apply every landed batch newer than the last committed one, in id order.

        ``from_batch`` replays landed batches from that id on as well: already-applied ones are verified
        against their checksum and change nothing (a backfill of a range is safe to repeat).
        """
        self.roll_forward_changelog(spec)
        last = Storage.state(self.storage.pk_table(spec)).last_batch
        lowest = last + 1 if from_batch is None else from_batch
        pending = {
            b: p
            for b, p in landed_batches(landing_dir, spec).items()
            if b >= lowest and (up_to is None or b <= up_to)
        }
        if not pending:
            self.progress(f"[{spec.full_name}] up to date (last batch {last}, nothing pending)")
            return []
        self.progress(f"[{spec.full_name}] {len(pending)} pending batch(es): {_ranges(list(pending))}")
        results = []
        for i, (batch_id, path) in enumerate(pending.items(), start=1):
            self.progress(f"[{spec.full_name}] batch {i}/{len(pending)}: id {batch_id} from {path}")
            results.append(self.apply_files(spec, batch_id, [path], target_columns=read_manifest(path)))
        return results

    def apply_files(
        self,
        spec: TableSpec,
        batch_id: int,
        paths: list[Path],
        fmt: str | None = None,
        target_columns: list[str] | None = None,
    ) -> BatchResult:
        """Apply the files of one batch (in order) as batch ``batch_id``, exactly once.

        ``target_columns`` makes it a partial update (spec §6): only those columns are written.
        """
        if batch_id <= 0:
            raise BatchRefusedError(f"batch ids are positive integers, got {batch_id}")
        merge.check_target_columns(spec, target_columns)  # refuse before reading anything
        started = time.monotonic()
        checksum = checksum_files(paths, fmt, target_columns)
        decoded: DecodedBatch | None = None
        for _attempt in range(MAX_COMMIT_ATTEMPTS):
            self.roll_forward_changelog(spec)
            table = self.storage.pk_table(spec)
            state = Storage.state(table)
            done = self._already_committed(spec, table, batch_id, checksum, state.last_batch)
            if done is not None:
                return done
            if decoded is None:
                # Batch N always follows N-1, so the offsets it dedups against are fixed: decode once.
                decoded = read_batch(paths, spec, fmt, applied_offsets=_kafka_offsets(table))
                ops = decoded.op_counts()
                self.progress(
                    f"[{spec.full_name}] batch {batch_id}: {decoded.num_records:,} records "
                    f"(+I {ops['+I']:,}, -U {ops['-U']:,}, +U {ops['+U']:,}, -D {ops['-D']:,}) "
                    f"from {decoded.messages:,} messages decoded in {time.monotonic() - started:.1f}s"
                    + _source_note(decoded)
                )
            try:
                result = self._apply_decoded(spec, table, state, batch_id, decoded, checksum, target_columns)
            except CommitFailedException:
                self.progress(
                    f"[{spec.full_name}] batch {batch_id}: another writer committed first; re-checking"
                )
                continue
            self.roll_forward_changelog(spec)
            result.seconds = time.monotonic() - started
            c = result.counts
            self.progress(
                f"[{spec.full_name}] batch {batch_id} committed (snapshot {result.snapshot_id}) in "
                f"{result.seconds:.1f}s: inserted {c['inserted']:,}, updated {c['updated']:,}, deleted "
                f"{c['deleted']:,}, ignored {c['ignored']:,}, dropped -U {c['dropped_update_before']:,}; "
                + (
                    f"changelog offsets {result.log_start_offset}..{result.log_end_offset - 1}"
                    if result.log_end_offset > result.log_start_offset
                    else "no changelog records"
                )
            )
            return result
        raise ChangelakeError(
            f"{spec.full_name}: batch {batch_id} lost {MAX_COMMIT_ATTEMPTS} commit races; retry later"
        )

    # --- exactly-once bookkeeping ---------------------------------------------------------------------
    def _already_committed(
        self, spec, table, batch_id: int, checksum: str, last_batch: int
    ) -> BatchResult | None:
        if batch_id > last_batch:
            if batch_id != last_batch + 1:
                raise BatchRefusedError(
                    f"{spec.full_name}: batch {batch_id} skips ahead; the last applied batch is {last_batch}, "
                    f"so the next must be {last_batch + 1}"
                )
            return None
        snap = self.storage.snapshot_for_batch(table, batch_id)
        if snap is None:
            raise BatchRefusedError(f"{spec.full_name}: batch {batch_id} is not in the table's history")
        summary = Storage.snapshot_summary(snap)
        if summary.get("changelake.checksum") != checksum:
            raise BatchRefusedError(
                f"{spec.full_name}: batch {batch_id} was already applied from a different input "
                f"(checksum {summary.get('changelake.checksum', '?')[:12]}…, this input {checksum[:12]}…); refusing"
            )
        self.progress(f"[{spec.full_name}] batch {batch_id} already applied (same checksum): nothing to do")
        return BatchResult(
            table=spec.full_name,
            batch_id=batch_id,
            status="already-applied",
            counts={k: int(summary.get(f"changelake.{k}", 0)) for k in merge.BatchCounts().as_dict()},
            snapshot_id=snap.snapshot_id,
            log_start_offset=int(summary.get("changelake.log-start-offset", 0)),
            log_end_offset=int(summary.get("changelake.log-end-offset", 0)),
            source={k: int(summary.get(f"changelake.source.{k}", 0)) for k in SOURCE_COUNTERS},
            dead_letter=summary.get("changelake.dead-letter") or None,
        )

    def roll_forward_changelog(self, spec: TableSpec) -> None:
        """Commit changelog snapshots for batches the PK table committed but the changelog lacks."""
        for _attempt in range(MAX_COMMIT_ATTEMPTS):
            pk = self.storage.pk_table(spec)
            log_table = self.storage.changelog_table(spec)
            log_last = Storage.state(log_table).last_batch
            lagging = [
                s
                for s in self.storage.batch_snapshots(pk)
                if int(Storage.snapshot_summary(s)["changelake.batch-id"]) > log_last
            ]
            if not lagging:
                return
            try:
                for snap in lagging:
                    summary = Storage.snapshot_summary(snap)
                    manifest = self.storage.read_json(pk, summary["changelake.changelog-manifest"])
                    _fault("before-changelog-commit")
                    self.storage.append_batch(
                        log_table,
                        self.storage.to_data_files(log_table, manifest["files"]),
                        {
                            "batch-id": manifest["batch_id"],
                            "log-start-offset": manifest["log_start_offset"],
                            "log-end-offset": manifest["log_end_offset"],
                            "pk-snapshot-id": snap.snapshot_id,
                        },
                    )
                    log_table = self.storage.changelog_table(spec)
                return
            except CommitFailedException:
                continue  # a concurrent applier rolled forward; re-read and check
        raise ChangelakeError(
            f"{spec.full_name}: could not commit the changelog after {MAX_COMMIT_ATTEMPTS} attempts"
        )

    # --- the batch itself -----------------------------------------------------------------------------
    def _apply_decoded(
        self, spec, table, state, batch_id: int, decoded: DecodedBatch, checksum: str, target_columns
    ) -> BatchResult:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        spark = self.spark
        started = time.monotonic()
        counts = merge.check_batch_ops(spec, decoded.op_counts())
        keep = ["+I", "+U"] if merge.deletes_dropped_before_table(spec) else ["+I", "+U", "-D"]
        to_apply = decoded.records.filter(pc.is_in(decoded.records.column("_op"), value_set=pa.array(keep)))
        commit_ts = dt.datetime.now(dt.UTC)
        attempt_dir = self.storage.new_data_dir(table, batch_id)
        log_table = self.storage.changelog_table(spec)
        log_dir = self.storage.new_data_dir(log_table, batch_id)

        removed, added_paths, log_paths, log_records, touched = [], [], [], 0, set()
        extra: dict[str, str] = {}  # further snapshot-summary properties (auto-increment state)
        if to_apply.num_rows:
            staging = f"{attempt_dir}-staging/records.parquet"
            with table.io.new_output(staging).create(overwrite=True) as out:
                pq.write_table(to_apply, out)
            records = (
                spark.read.schema(_records_struct(spec))
                .parquet(staging)
                .withColumn("_bucket", tables.bucket_expr(spec))
            )
            part_cols = [*spec.partition_keys, "_bucket"]
            all_files = self.storage.data_files(table)
            ids = self._allocate_ids(spec, table, records, part_cols)
            merged = self._merge_buckets(
                spec, table, records, all_files, part_cols, attempt_dir, target_columns, ids
            )
            merged.persist(StorageLevel.MEMORY_AND_DISK)
            try:
                markers = [
                    r.asDict()
                    for r in merged.filter(F.col("_kind") == KIND_FILE)
                    .select(
                        *part_cols,
                        "_log_count",
                        "_path",
                        "_log_path",
                        "_count",
                        "_ai_next",
                        "_ai_end",
                        *[f"_{c}" for c in COUNTERS],
                    )
                    .collect()
                ]
                for m in markers:
                    m["partition"] = tuple(tables.iceberg_partition_value(m[c]) for c in part_cols)
                if ids is not None:
                    for m in markers:
                        key = _partition_key(m["partition"])
                        if m["_ai_next"] is None:
                            ids["buckets"].pop(key, None)
                        else:
                            ids["buckets"][key] = [m["_ai_next"], m["_ai_end"]]
                    extra["auto-increment"] = json.dumps(
                        {"counter": ids["counter"], "buckets": ids["buckets"]}
                    )
                touched = {m["partition"] for m in markers}
                removed = [f for f in all_files if tables.partition_tuple(f) in touched]
                added_paths = [m["_path"] for m in markers if m["_path"]]
                for c in COUNTERS:
                    setattr(counts, c, getattr(counts, c) + sum(m[f"_{c}"] for m in markers))
                self.progress(
                    f"[{spec.full_name}] batch {batch_id}: merged {len(touched)} of {spec.bucket_num} bucket(s) "
                    f"(replacing {len(removed)} file(s), {sum(m['_count'] for m in markers):,} rows now in them) "
                    f"in {time.monotonic() - started:.1f}s"
                )
                log_records = sum(m["_log_count"] for m in markers)
                log_paths = self._write_changelog(
                    merged,
                    [m["_log_path"] for m in markers if m["_log_path"]],
                    spec,
                    batch_id,
                    state.log_end_offset,
                    commit_ts,
                    log_dir,
                )
                self.progress(
                    f"[{spec.full_name}] batch {batch_id}: {log_records:,} changelog records written "
                    f"at {time.monotonic() - started:.1f}s"
                )
            finally:
                merged.unpersist()
        _fault("after-data-files")

        source = {k: getattr(decoded, k) for k in SOURCE_COUNTERS}
        dead_letter = None
        if decoded.dead_letters:
            # Deterministic path and content (same input, same file), written before the commit that names it.
            dead_letter = f"{table.location()}/dead-letter/batch-{batch_id:012d}.jsonl"
            with table.io.new_output(dead_letter).create(overwrite=True) as out:
                for record in decoded.dead_letters:
                    out.write((json.dumps({"batch_id": batch_id, **record}) + "\n").encode())
            self.progress(
                f"[{spec.full_name}] batch {batch_id}: {len(decoded.dead_letters)} bad record(s) quarantined "
                f"to {dead_letter}"
            )
        if decoded.kafka_offsets:
            extra["kafka-offsets"] = json.dumps(decoded.kafka_offsets, sort_keys=True)

        manifest_path = (
            f"{table.location()}/metadata/changelake/changelog-{batch_id:012d}-{uuid.uuid4().hex[:12]}.json"
        )
        log_start, log_end = state.log_end_offset, state.log_end_offset + log_records
        self.storage.write_json(
            table,
            manifest_path,
            {
                "batch_id": batch_id,
                "files": log_paths,
                "records": log_records,
                "log_start_offset": log_start,
                "log_end_offset": log_end,
                "commit_timestamp": commit_ts.isoformat(),
            },
        )
        added = self.storage.to_data_files(table, added_paths)
        self.storage.commit_batch(
            table,
            removed,
            added,
            {
                "batch-id": batch_id,
                "checksum": checksum,
                "log-start-offset": log_start,
                "log-end-offset": log_end,
                "changelog-manifest": manifest_path,
                "changelog-records": log_records,
                "target-columns": ",".join(target_columns) if target_columns else "",
                **extra,
                "touched-buckets": len(touched),
                "dead-letter": dead_letter or "",
                **{f"source.{k}": v for k, v in source.items()},
                **counts.as_dict(),
            },
        )
        _fault("after-pk-commit")
        snap = self.storage.pk_table(spec).current_snapshot()
        return BatchResult(
            table=spec.full_name,
            batch_id=batch_id,
            status="applied",
            counts=counts.as_dict(),
            snapshot_id=snap.snapshot_id if snap else None,
            changelog_records=log_records,
            log_start_offset=log_start,
            log_end_offset=log_end,
            source=source,
            dead_letter=dead_letter,
        )

    def _allocate_ids(self, spec, table, records, part_cols) -> dict | None:
        """Auto-increment id ranges per touched bucket (spec §8), enough for every record to be a new key.

        Each bucket continues its cached range; when that is short it takes whole segments of
        ``table.auto-increment.cache-size`` ids from the table-wide counter. The state is committed with
        the batch (snapshot summary), so ids stay unique across batches, crashes and restarts.
        """
        if spec.auto_increment_column is None:
            return None
        snap = table.current_snapshot()
        state = json.loads(
            Storage.snapshot_summary(snap).get("changelake.auto-increment", "{}") if snap else "{}"
        )
        counter, cached = state.get("counter", 0), state.get("buckets", {})
        size = spec.auto_increment_cache_size
        ranges: dict[tuple, list[tuple[int, int]]] = {}
        for row in records.groupBy(*part_cols).count().collect():
            partition = tuple(tables.iceberg_partition_value(row[c]) for c in part_cols)
            current = cached.get(_partition_key(partition))
            supply = [tuple(current)] if current else []
            available = current[1] - current[0] + 1 if current else 0
            while available < row["count"]:
                supply.append((counter + 1, counter + size))
                counter += size
                available += size
            ranges[partition] = supply
        return {"ranges": ranges, "counter": counter, "buckets": cached}

    def _merge_buckets(self, spec, table, records, all_files, part_cols, out_dir, target_columns, ids=None):
        """Run :func:`changelake.buckets.merge_bucket` once per touched (partition, bucket)."""
        files_by_partition: dict[tuple, list[str]] = {}
        for f in all_files:
            files_by_partition.setdefault(tables.partition_tuple(f), []).append(f.file_path)
        ctx = BucketContext(
            spec=spec,
            partition_columns=tuple(part_cols),
            files_by_partition=files_by_partition,
            io_properties=dict(table.io.properties),
            out_dir=out_dir,
            target_columns=None if target_columns is None else tuple(target_columns),
            id_ranges=ids and ids["ranges"],
        )

        def merge_one(key, bucket_records):
            return merge_bucket(key, bucket_records, ctx)

        # An explicit partition count: adaptive execution would otherwise coalesce the (small) record shuffle
        # into one task and merge every bucket on one core.
        n = max(1, min(spec.bucket_num * 4, self.spark.sparkContext.defaultParallelism * 4))
        schema = _spark_schema(output_schema(ctx.row_schema, ctx.partition_columns), spec)
        return records.repartition(n, *part_cols).groupBy(*part_cols).applyInArrow(merge_one, schema)

    def _write_changelog(
        self, merged, unnumbered: list[str], spec, batch_id, base_offset, commit_ts, directory
    ):
        """Number the batch's changelog gaplessly in (record, sub) order and write it; the rows are not sorted.

        A record's first offset is ``base + (rows emitted by all earlier records)``: a running sum over the
        per-record counts the bucket tasks returned (two longs per record), joined back to the tasks'
        unnumbered changelog files by record position.
        """
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        if not unnumbered:
            return []
        earlier = Window.orderBy("_seq").rowsBetween(Window.unboundedPreceding, -1)
        starts = merged.filter(F.col("_kind") == KIND_COUNT).select(
            "_seq", (F.lit(base_offset) + F.coalesce(F.sum("_count").over(earlier), F.lit(0))).alias("_first")
        )
        unnumbered_schema = _spark_schema(changelog_schema(row_schema(spec)), spec)
        log = self.spark.read.schema(unnumbered_schema).parquet(*unnumbered)
        log.join(F.broadcast(starts), "_seq").select(
            *spec.column_names,
            "_change_type",
            F.lit(batch_id).cast("long").alias("_batch_id"),
            (F.col("_first") + F.col("_sub")).alias("_log_offset"),
            F.lit(commit_ts).cast("timestamp").alias("_commit_timestamp"),
        ).write.mode("errorifexists").parquet(directory)
        return _written_files(self.spark, directory)


def _kafka_offsets(table) -> dict[str, int]:
    """Last applied Kafka offset per ``topic:partition``, committed with the table's latest batch."""
    snap = table.current_snapshot()
    return json.loads(Storage.snapshot_summary(snap).get("changelake.kafka-offsets", "{}") if snap else "{}")


def _source_note(decoded: DecodedBatch) -> str:
    parts = [
        f"{name} {value:,}"
        for name, value in (
            ("quarantined", decoded.quarantined),
            ("redelivered", decoded.redelivered),
            ("deduplicated", decoded.deduplicated),
            ("skipped", decoded.skipped),
        )
        if value
    ]
    return f"; {', '.join(parts)}" if parts else ""


def _partition_key(partition: tuple) -> str:
    return json.dumps(list(partition), default=str)


def _spark_schema(arrow_schema: pa.Schema, spec: TableSpec):
    """Spark type of each task output column: table columns keep their storage types."""
    from pyspark.sql import types as T

    by_name = {f.name: f for f in tables.storage_struct(spec).fields}
    simple = {pa.string(): T.StringType(), pa.int64(): T.LongType(), pa.int32(): T.IntegerType()}
    return T.StructType(
        [by_name.get(f.name) or T.StructField(f.name, simple[f.type], True) for f in arrow_schema]
    )


def _records_struct(spec: TableSpec):
    from pyspark.sql import types as T

    return T.StructType(
        [T.StructField("_seq", T.LongType(), False), T.StructField("_op", T.StringType(), False)]
        + tables.storage_struct(spec, with_bucket=False).fields
    )


def _written_files(spark, directory: str) -> list[str]:
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(directory)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    files = []
    iterator = fs.listFiles(path, True)
    while iterator.hasNext():
        name = iterator.next().getPath().toString()
        if name.endswith(".parquet"):
            files.append(
                name.replace("file:/", "file:///", 1)
                if name.startswith("file:/") and not name.startswith("file:///")
                else name
            )
    return sorted(files)


def _ranges(ids: list[int]) -> str:
    return f"{ids[0]}..{ids[-1]}" if len(ids) > 1 else str(ids[0])
