"""Apply changelog batches to a PK table exactly once.

Protocol for batch N of table T (every step is safe to crash in):

1. Roll forward: if T's current snapshot committed a batch whose changelog is not yet in ``T__changelog``,
   commit it from the manifest that snapshot names (files written before the PK commit).
2. Idempotency: batch N already committed with the same input checksum -> no-op; different checksum ->
   refused. N != last + 1 -> refused (no skipping ahead, no going back).
3. Decode: Spark tasks decode byte ranges of the landed files (:mod:`changelake.inputs.decode`) and stage the
   records as Parquet; the driver gets counts, dead letters and the first error, never the records.
4. Merge: one Spark task per touched bucket (:mod:`changelake.engine.buckets`) reads the bucket once, merges its
   records column-wise and writes the bucket's new data file and its changelog file, numbered per bucket
   from the log end the previous batch committed. Files go to fresh per-attempt directories (never read
   unless committed).
5. Commit point: one overwrite snapshot on T replacing the touched buckets' files, its summary holding the
   batch id, checksum, counts and the changelog manifest (files, and every bucket's log end). A concurrent
   applier makes this commit fail (Iceberg's optimistic check on the parent snapshot): go back to 1.
6. Commit the changelog snapshot (roll-forward of step 1 for this batch).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from changelake.engine import buckets, merge
from changelake.engine.buckets import COUNTERS, BucketContext
from changelake.engine.buckets import SOURCE_COUNTERS as TASK_SOURCE_COUNTERS
from changelake.errors import BatchRefusedError, ChangelakeError
from changelake.inputs import decode
from changelake.inputs.landing import INPUT_PROPERTY, input_record, read_manifest, scan_landing
from changelake.spec import TableSpec
from changelake.storage import sparkread
from changelake.storage.iceberg import CommitFailedException, Storage

MAX_COMMIT_ATTEMPTS = 5
# A batch of at most this many messages is decoded in this process, and merged here too if its buckets' files
# hold at most LOCAL_STORED_BYTES: no Spark job (nor a JVM) for what takes less time than starting one. The
# same functions run as in the Spark tasks, on the same files. 0 sends every batch to Spark.
LOCAL_RECORDS = int(os.environ.get("CHANGELAKE_LOCAL_APPLY_RECORDS", 10_000))
LOCAL_STORED_BYTES = int(os.environ.get("CHANGELAKE_LOCAL_APPLY_BYTES", 64 << 20))
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
        # A bad landed file blocks this table from its batch on; the batches below it still apply.
        landing = scan_landing(landing_dir, spec)
        pending = {b: p for b, p in landing.batches.items() if b >= lowest and (up_to is None or b <= up_to)}
        blocked = landing.blocked_from
        error = landing.error() if blocked is not None and (up_to is None or blocked <= up_to) else None
        if not pending:
            if error is not None:
                raise error
            self.progress(f"[{spec.full_name}] up to date (last batch {last}, nothing pending)")
            return []
        self.progress(f"[{spec.full_name}] {len(pending)} pending batch(es): {_ranges(list(pending))}")
        results = []
        for i, (batch_id, path) in enumerate(pending.items(), start=1):
            self.progress(f"[{spec.full_name}] batch {i}/{len(pending)}: id {batch_id} from {path}")
            results.append(self.apply_files(spec, batch_id, [path], target_columns=read_manifest(path)))
        if error is not None:
            raise error
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

        ``target_columns`` makes it a partial update (docs/semantics.md §6): only those columns are written.
        """
        if batch_id <= 0:
            raise BatchRefusedError(f"batch ids are positive integers, got {batch_id}")
        merge.check_target_columns(spec, target_columns)  # refuse before reading anything
        started = time.monotonic()
        plan = decode.plan_batch(paths, spec, fmt, target_columns)
        decoded: decode.DecodeSummary | None = None
        for _attempt in range(MAX_COMMIT_ATTEMPTS):
            self.roll_forward_changelog(spec)
            table = self.storage.pk_table(spec)
            state = Storage.state(table)
            done = self._already_committed(spec, table, batch_id, plan, state.last_batch)
            if done is not None:
                return done
            if decoded is None:
                # Batch N always follows N-1, so what it decodes to is fixed: decode once, retry commits.
                decoded = self._decode(spec, table, batch_id, plan)
            try:
                how_read = input_record(spec, paths, fmt, target_columns, self.storage.settings.landing_dir)
                result = self._apply_decoded(
                    spec, table, state, batch_id, decoded, plan.checksum, target_columns, how_read
                )
            except CommitFailedException:
                self.progress(
                    f"[{spec.full_name}] batch {batch_id}: another writer committed first; re-checking"
                )
                continue
            self.roll_forward_changelog(spec)
            self._drop_staging(table, decoded)
            result.seconds = time.monotonic() - started
            c = result.counts
            self.progress(
                f"[{spec.full_name}] batch {batch_id} committed (snapshot {result.snapshot_id}) in "
                f"{result.seconds:.1f}s: inserted {c['inserted']:,}, updated {c['updated']:,}, deleted "
                f"{c['deleted']:,}, ignored {c['ignored']:,}, dropped -U {c['dropped_update_before']:,}; "
                f"{result.changelog_records:,} changelog records"
            )
            return result
        raise ChangelakeError(
            f"{spec.full_name}: batch {batch_id} lost {MAX_COMMIT_ATTEMPTS} commit races; retry later"
        )

    # --- exactly-once bookkeeping ---------------------------------------------------------------------
    def _already_committed(
        self, spec, table, batch_id: int, plan: decode.BatchPlan, last_batch: int
    ) -> BatchResult | None:
        """A no-op result for a batch committed with this input, None for the next batch; refuses the rest.
        Only a batch at or below the last one waits for the input's checksum here."""
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
        checksum = plan.checksum
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
            changelog_records=int(summary.get("changelake.changelog-records", 0)),
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

    # --- the batch itself: decode -> merge -> write -> commit -------------------------------------------
    def _decode(self, spec: TableSpec, table, batch_id: int, plan: decode.BatchPlan) -> decode.DecodeSummary:
        """Decode the landed files in Spark tasks (a few per core, each decoding consecutive ranges of the
        files), or in this process for a small batch; the driver gets only their stats."""
        started = time.monotonic()
        staging = f"{self.storage.new_data_dir(table, batch_id)}-staging"
        local = plan.messages <= LOCAL_RECORDS
        cores = 1 if local else _parallelism(self.spark)
        ranges = decode.split_ranges(plan.ranges, cores)
        groups = decode.group_ranges(ranges, cores * 2)
        where = "in this process" if local else f"{len(groups)} task(s)"
        self.progress(
            f"[{spec.full_name}] batch {batch_id}: decoding {plan.bytes:,} bytes in {len(ranges)} range(s), {where}"
        )
        task = decode.decode_task(spec, staging, dict(table.io.properties), ranges, groups)
        if local:
            stats = _run_here(task, len(groups))
        else:
            # The input is a range of group ids: no shuffle, and no sparkContext (works over Spark Connect).
            n = max(1, len(groups))
            frame = self.spark.range(0, n, 1, n)
            schema = _spark_schema(decode.stats_schema(), spec)
            stats = [r.asDict() for r in frame.mapInArrow(task, schema).collect()]
        decoded = decode.summarize(stats)  # raises the first bad record, as the task found it
        ops = decoded.op_counts
        note = _source_note(decoded)
        self.progress(
            f"[{spec.full_name}] batch {batch_id}: {decoded.records:,} records "
            f"(+I {ops['+I']:,}, -U {ops['-U']:,}, +U {ops['+U']:,}, -D {ops['-D']:,}) "
            f"from {decoded.messages:,} messages decoded in {time.monotonic() - started:.1f}s" + note
        )
        return decoded

    def _apply_decoded(
        self,
        spec,
        table,
        state,
        batch_id: int,
        decoded: decode.DecodeSummary,
        checksum: str,
        target_columns,
        how_read: str,
    ) -> BatchResult:
        """Merge, write and commit a decoded batch; ``how_read`` (landing.input_record) goes into the
        snapshot summary so the ``__input`` view reads the batch as it was applied."""
        merge.check_batch_ops(spec, decoded.op_counts)  # refuses deletes on a 'disable' table up front
        commit_ts = dt.datetime.now(dt.UTC)
        previous = self._previous_manifest(table, state)
        data_files = self.storage.data_files(table)
        markers, id_counter = self._merge(
            spec, table, batch_id, decoded, target_columns, previous, commit_ts, data_files
        )
        _fault("after-data-files")
        counts = merge.BatchCounts(**buckets.bucket_counts(markers, COUNTERS))
        source = self._source_counts(decoded, markers)
        dead_letter = self._write_dead_letters(spec, table, batch_id, decoded)
        extra = self._kafka_state(table, decoded, markers)
        extra.update(self._id_state(spec, table, markers, id_counter))
        log_ends = dict(previous.get("log_ends", {}))
        log_ends.update({m["partition_key"]: m["_log_end"] for m in markers if m["_log_end"]})
        log_records = sum(m["_log_end"] - m["_log_start"] for m in markers)
        log_start, log_end = state.log_end_offset, state.log_end_offset + log_records
        manifest_path = (
            f"{table.location()}/metadata/changelake/changelog-{batch_id:012d}-{uuid.uuid4().hex[:12]}.json"
        )
        self.storage.write_json(
            table,
            manifest_path,
            {
                "batch_id": batch_id,
                "files": sorted(m["_log_path"] for m in markers if m["_log_path"]),
                "records": log_records,
                "log_start_offset": log_start,
                "log_end_offset": log_end,
                "log_ends": log_ends,
                "commit_timestamp": commit_ts.isoformat(),
            },
        )
        touched = {m["partition_key"] for m in markers}
        removed = [f for f in data_files if buckets.partition_key(sparkread.partition_tuple(f)) in touched]
        added = self.storage.to_data_files(table, sorted(m["_path"] for m in markers if m["_path"]))
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
                INPUT_PROPERTY: how_read,
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

    def _previous_manifest(self, table, state) -> dict:
        """The changelog manifest of the table's last batch: it holds every bucket's log end."""
        return self.storage.read_json(table, state.changelog_manifest) if state.changelog_manifest else {}

    def _merge(
        self, spec, table, batch_id, decoded, target_columns, previous, commit_ts, data_files
    ) -> tuple[list[dict], int | None]:
        """Run one bucket task (:func:`changelake.engine.buckets.run_task`) per touched bucket: their markers, and
        the auto-increment counter after allocating the batch's ids (None without an auto-increment column).

        The decode tasks staged every bucket's records as record batches; a task reads its own and its bucket's
        current file with pyarrow, so the job has no shuffle and no record becomes a Spark row."""
        if not decoded.groups:
            return [], None
        started = time.monotonic()
        files_by_key: dict[str, list] = {}
        for f in data_files:
            files_by_key.setdefault(buckets.partition_key(sparkread.partition_tuple(f)), []).append(f)
        id_ranges, id_counter = self._allocate_ids(spec, table, decoded)
        log_ends = previous.get("log_ends", {})
        tasks = [
            buckets.BucketTask(
                key=key,
                bucket=group.bucket,
                parts=tuple(group.parts),
                files=tuple(f.file_path for f in files_by_key.get(key, [])),
                log_start=log_ends.get(key, 0),
                id_ranges=None if id_ranges is None else tuple(id_ranges[key]),
                records=group.records,
                stored_bytes=sum(f.file_size_in_bytes for f in files_by_key.get(key, [])),
            )
            for key, group in sorted(decoded.groups.items())
        ]
        opts = spec.source_options
        codec, level = buckets.compression_of(dict(table.properties))
        ctx = BucketContext(
            spec=spec,
            partition_columns=(*spec.partition_keys, "_bucket"),
            files_by_partition={},
            io_properties=dict(table.io.properties),
            out_dir=self.storage.new_data_dir(table, batch_id),
            log_dir=self.storage.new_data_dir(self.storage.changelog_table(spec), batch_id),
            batch_id=batch_id,
            commit_micros=int((commit_ts - _EPOCH) / dt.timedelta(microseconds=1)),
            target_columns=None if target_columns is None else tuple(target_columns),
            ordering=opts.ordering,
            dedup_offsets=opts.dedup_offsets,
            applied_offsets=_kafka_offsets(table),
            compression=codec,
            compression_level=level,
        )
        # A small batch into small buckets merges here: a Spark job costs more than its buckets' work.
        local = decoded.records <= LOCAL_RECORDS and sum(t.stored_bytes for t in tasks) <= LOCAL_STORED_BYTES
        # One Spark task per core, the buckets balanced by size (largest first): a Spark task costs a Python
        # worker a round trip or more, a bucket task tens of milliseconds.
        groups = buckets.assign(tasks, 1 if local else _parallelism(self.spark))
        function = buckets.tasks_function(tasks, groups, ctx, decode.staged_schema(spec))
        if local:
            markers = _run_here(function, len(groups))
        else:
            schema = _spark_schema(buckets.task_marker_schema(), spec)
            n = len(groups)
            markers = [
                r.asDict() for r in self.spark.range(0, n, 1, n).mapInArrow(function, schema).collect()
            ]
        for m in markers:
            m["partition_key"] = tasks[m["_task"]].key
        self.progress(
            f"[{spec.full_name}] batch {batch_id}: merged {len(markers)} of {spec.bucket_num} bucket(s) per "
            f"partition ({sum(m['_count'] for m in markers):,} rows now in them, "
            f"{sum(m['_log_end'] - m['_log_start'] for m in markers):,} changelog records) "
            f"in {time.monotonic() - started:.1f}s" + (" in this process" if local else "")
        )
        return markers, id_counter

    def _allocate_ids(self, spec, table, decoded: decode.DecodeSummary) -> tuple[dict | None, int | None]:
        """Auto-increment id ranges per touched bucket (docs/semantics.md §8), enough for every record to be a new key.

        Each bucket continues its cached range; when that is short it takes whole segments of
        ``table.auto-increment.cache-size`` ids from the table-wide counter. The state is committed with
        the batch (snapshot summary), so ids stay unique across batches, crashes and restarts. The records
        per bucket come from the decode tasks' counts.
        """
        if spec.auto_increment_column is None:
            return None, None
        state = _id_state(table)
        counter, cached = state.get("counter", 0), state.get("buckets", {})
        size = spec.auto_increment_cache_size
        ranges: dict[str, list[tuple[int, int]]] = {}
        for key, group in sorted(decoded.groups.items()):
            current = cached.get(key)
            supply = [tuple(current)] if current else []
            available = current[1] - current[0] + 1 if current else 0
            while available < group.records:
                supply.append((counter + 1, counter + size))
                counter += size
                available += size
            ranges[key] = supply
        return ranges, counter

    @staticmethod
    def _id_state(spec, table, markers, counter: int | None) -> dict[str, str]:
        """The auto-increment state after this batch: the counter and each bucket's unused range."""
        if spec.auto_increment_column is None:
            return {}
        state = _id_state(table)
        cached = dict(state.get("buckets", {}))
        for m in markers:
            if m["_ai_next"] is None:
                cached.pop(m["partition_key"], None)
            else:
                cached[m["partition_key"]] = [m["_ai_next"], m["_ai_end"]]
        counter = state.get("counter", 0) if counter is None else counter
        return {"auto-increment": json.dumps({"counter": counter, "buckets": cached})}

    @staticmethod
    def _source_counts(decoded: decode.DecodeSummary, markers: list[dict]) -> dict[str, int]:
        task = buckets.bucket_counts(markers, TASK_SOURCE_COUNTERS)
        return {
            "messages": decoded.messages,
            "skipped": decoded.skipped,
            "quarantined": len(decoded.dead_letters),
            **task,
        }

    @staticmethod
    def _kafka_state(table, decoded: decode.DecodeSummary, markers: list[dict]) -> dict[str, str]:
        """The last applied offset per topic-partition after this batch (committed with it)."""
        offsets = dict(_kafka_offsets(table))
        for m in markers:
            for tp, offset in json.loads(m["_kafka_offsets"] or "{}").items():
                offsets[tp] = max(offsets.get(tp, -1), offset)
        return {"kafka-offsets": json.dumps(offsets, sort_keys=True)} if offsets else {}

    def _write_dead_letters(self, spec, table, batch_id, decoded: decode.DecodeSummary) -> str | None:
        """Quarantined records, at a deterministic path with deterministic content, before the commit."""
        if not decoded.dead_letters:
            return None
        path = f"{table.location()}/dead-letter/batch-{batch_id:012d}.jsonl"
        with table.io.new_output(path).create(overwrite=True) as out:
            for record in decoded.dead_letters:
                out.write((json.dumps({"batch_id": batch_id, **record}) + "\n").encode())
        self.progress(
            f"[{spec.full_name}] batch {batch_id}: {len(decoded.dead_letters)} bad record(s) quarantined to {path}"
        )
        return path

    @staticmethod
    def _drop_staging(table, decoded: decode.DecodeSummary) -> None:
        """Staged records are never read after the commit; remove them (best effort)."""
        for path in decoded.staged:
            try:
                table.io.delete(path)
            except OSError:
                pass


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _run_here(function, groups: int) -> list[dict]:
    """A ``mapInArrow`` function run in this process over ids ``0..groups-1``: its rows as dicts."""
    ids = pa.RecordBatch.from_pydict({"id": pa.array(range(groups), pa.int64())})
    return [row for batch in function(iter([ids])) for row in batch.to_pylist()]


def _parallelism(spark) -> int:
    """Cores Spark can use at once (the classic API knows; over Spark Connect, the configured default)."""
    try:
        return spark.sparkContext.defaultParallelism
    except Exception:  # Spark Connect has no sparkContext
        return int(spark.conf.get("spark.default.parallelism", None) or os.cpu_count() or 2)


def _kafka_offsets(table) -> dict[str, int]:
    """Last applied Kafka offset per ``topic:partition``, committed with the table's latest batch."""
    snap = table.current_snapshot()
    return json.loads(Storage.snapshot_summary(snap).get("changelake.kafka-offsets", "{}") if snap else "{}")


def _id_state(table) -> dict:
    snap = table.current_snapshot()
    return json.loads(Storage.snapshot_summary(snap).get("changelake.auto-increment", "{}") if snap else "{}")


def _source_note(decoded: decode.DecodeSummary) -> str:
    parts = [
        f"{name} {value:,}"
        for name, value in (("quarantined", len(decoded.dead_letters)), ("skipped", decoded.skipped))
        if value
    ]
    return f"; {', '.join(parts)}" if parts else ""


def _spark_schema(arrow_schema: pa.Schema, spec: TableSpec):
    """Spark type of each Arrow column: table columns keep their storage types, the rest map simply."""
    from pyspark.sql import types as T

    by_name = {f.name: f for f in sparkread.storage_struct(spec).fields}
    simple = {
        pa.string(): T.StringType(),
        pa.int64(): T.LongType(),
        pa.int32(): T.IntegerType(),
        pa.decimal128(38, 9): T.DecimalType(38, 9),
    }
    return T.StructType(
        [by_name.get(f.name) or T.StructField(f.name, simple[f.type], True) for f in arrow_schema]
    )


def _ranges(ids: list[int]) -> str:
    return f"{ids[0]}..{ids[-1]}" if len(ids) > 1 else str(ids[0])
