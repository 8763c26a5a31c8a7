"""Apply changelog batches to a PK table exactly once.

Protocol for batch N of table T (every step is safe to crash in):

1. Roll forward: if T's current snapshot committed a batch whose changelog is not yet in ``T__changelog``,
   commit it from the manifest that snapshot names (files written before the PK commit).
2. Idempotency, per writer: every writer of T (the landing directory, SQL statements, API calls, lookup
   inserts) numbers its batches on its own (:class:`~changelake.storage.summary.WriterPosition`). Number N of a
   writer already committed with the same input checksum -> no-op; different checksum -> refused. N != the
   writer's last + 1 -> refused (no skipping ahead, no going back). The batch becomes T's next batch id
   (T's commits are numbered 1, 2, 3, ... whatever their writer; the changelog's ``_batch_id``).
3. Decode: Spark tasks decode byte ranges of the landed files (:mod:`changelake.inputs.decode`) and stage the
   records as Parquet; the driver gets counts, dead letters and the first error, never the records.
4. Plan: from T's current snapshot (:class:`changelake.storage.summary.BatchSummary`), one task per touched
   bucket with its current files and log end, its auto-increment ids, and fresh per-attempt output paths.
5. Merge: one Spark task per touched bucket (:mod:`changelake.engine.buckets`) reads the bucket once, merges its
   records column-wise and writes the bucket's new data file and its changelog file, numbered per bucket
   from the log end the previous batch committed. Files go to fresh per-attempt directories (never read
   unless committed).
6. Write: the dead letters and the changelog manifest (files, and every bucket's log end), at paths only the
   commit names.
7. Commit point: one overwrite snapshot on T replacing the touched buckets' files, its summary
   (:class:`~changelake.storage.summary.BatchSummary`) holding the batch id, checksum, counts and the
   changelog manifest. A concurrent applier makes this commit fail (Iceberg's optimistic check on the parent
   snapshot): go back to 1.
8. Commit the changelog snapshot (roll-forward of step 1 for this batch).

:meth:`Applier.apply_files` reads as these steps; small batches run steps 3 and 5 in this process
(``CHANGELAKE_LOCAL_APPLY_RECORDS``), the same functions on the same files.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
from pyiceberg.exceptions import ValidationException

from changelake.config import tuned
from changelake.engine import buckets, merge
from changelake.engine.buckets import COUNTERS, BucketContext, BucketTask
from changelake.engine.buckets import SOURCE_COUNTERS as TASK_SOURCE_COUNTERS
from changelake.errors import BatchRefusedError, CommitConflict, PlannedOnOldState
from changelake.faults import fault, losing_commits
from changelake.inputs import decode, kafka
from changelake.inputs.landed import LandedPath
from changelake.inputs.landing import (
    Fingerprint,
    LandedFileChanging,
    changed_error,
    changed_inputs,
    fingerprints,
    input_record,
    read_batch_manifest,
    scan_landing,
    write_private,
)
from changelake.inputs.records import partition_key
from changelake.spec import TableSpec
from changelake.storage import sparkread
from changelake.storage.files import Layout, TableFile, side_location
from changelake.storage.iceberg import CommitFailedException, Storage, TableState
from changelake.storage.maintenance import drop_files
from changelake.storage.rollforward import MAX_COMMIT_ATTEMPTS, roll_forward_changelog, roll_forward_tables
from changelake.storage.summary import (
    LANDING,
    SOURCE_COUNTERS,
    AutoIncrementState,
    BatchSummary,
    WriterPosition,
)

# A batch of at most this many messages is decoded in this process, and merged here too if its buckets' files
# hold at most LOCAL_STORED_BYTES: no Spark job (nor a JVM) for what takes less time than starting one. The
# same functions run as in the Spark tasks, on the same files. 0 sends every batch to Spark.
# ... and merged on read here when the files it must read, beyond those this process keeps (buckets.STORED_ROWS),
# hold at most this much: the first batch reads a bucket's files once, the next ones take the kept rows.
Progress = Callable[[str], None]


def stderr_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class BatchResult:
    table: str
    batch_id: int  # the table's batch id (0: a batch older than the history keeps, found applied)
    status: str  # "applied" | "already-applied"
    counts: dict[str, int] = field(default_factory=dict)
    snapshot_id: int | None = None
    changelog_records: int = 0
    log_start_offset: int = 0
    log_end_offset: int = 0
    seconds: float = 0.0
    source: dict[str, int] = field(default_factory=dict)  # messages, skipped, quarantined, redelivered, ...
    dead_letter: str | None = None  # where this batch's quarantined records are
    writer: str = LANDING  # the writer the batch came from, and its number in that writer's sequence
    writer_seq: int = 0

    @classmethod
    def of(cls, table: str, status: str, summary: BatchSummary, snapshot_id: int | None) -> BatchResult:
        """The result of a batch its snapshot summary describes."""
        return cls(
            table=table,
            batch_id=summary.batch_id,
            status=status,
            counts=dict(summary.counts),
            snapshot_id=snapshot_id,
            changelog_records=summary.changelog_records,
            log_start_offset=summary.log_start_offset,
            log_end_offset=summary.log_end_offset,
            source=dict(summary.source),
            dead_letter=summary.dead_letter,
            writer=summary.position.writer,
            writer_seq=summary.position.seq,
        )

    @property
    def position(self) -> WriterPosition:
        return WriterPosition(self.writer, self.writer_seq)


@dataclass(frozen=True)
class BatchInput:
    """One batch to apply: its table, its writer's number for it, its files and how to read them, cut into
    decode ranges."""

    spec: TableSpec
    position: WriterPosition
    paths: list[LandedPath]
    fmt: str | None
    target_columns: list[str] | None  # a partial update's columns (docs/semantics.md §6)
    ranges: decode.BatchPlan  # the files' decode ranges, and their checksum (hashed while they decode)
    read_as: tuple[Fingerprint, ...] = ()  # the files before they were read: the commit needs them unchanged
    topic: tuple[kafka.PartitionRange, ...] = ()  # a topic batch's offset ranges (then no files)
    kafka_config: dict[str, str] | None = None  # the client settings its decode tasks read them with
    merge_mode: str | None = None  # None: through the merge engine; "overwrite": Fluss's MergeMode.OVERWRITE


@dataclass(frozen=True)
class ApplyPlan:
    """One attempt at committing a decoded batch, fixed before any bucket task runs (the plan step): the
    bucket tasks and where they run, and what the write and commit steps record besides the tasks' results."""

    batch: BatchInput
    batch_id: int  # the table's batch id this attempt commits as: the one after the parent snapshot's
    writers: dict[str, int]  # every writer's last number after this batch
    table: Any  # the PK table as this attempt read it: its current snapshot is the commit's parent
    decoded: decode.DecodeSummary
    checksum: str
    how_read: dict[str, Any]  # landing.input_record: lets the ``__input`` view read the batch as applied
    previous: BatchSummary | None  # the table's last batch: Kafka offsets and ids continue from its state
    log_ends: dict[str, int]  # every bucket's log end after the previous batch (from its manifest)
    commit_ts: dt.datetime
    files: list[TableFile]  # the table's current data and delete files
    manifest_path: str  # where the write step puts the changelog manifest
    tasks: list[BucketTask]  # one per touched bucket, in partition-key order
    context: BucketContext | None  # what every task needs; None when the batch touches no bucket
    id_counter: int | None  # the auto-increment counter after the tasks' ids (None: no ids allocated)
    local: bool  # merge in this process: a small batch into small buckets

    @property
    def spec(self) -> TableSpec:
        return self.batch.spec

    @property
    def what(self) -> str:
        """The batch as progress lines name it: its writer's number, and the table's batch id."""
        return f"{self.batch.position} (table batch {self.batch_id})"


@dataclass(frozen=True)
class Merged:
    """What the merge step's tasks did: one marker per touched bucket (``partition_key`` added: the bucket's
    key), and one per group of tasks naming the files the group wrote."""

    buckets: list[dict]
    groups: list[dict]


@dataclass(frozen=True)
class WrittenBatch:
    """What the write step leaves for the commit: the files to add and remove, and the summary that commits
    them."""

    added: list
    added_deletes: list
    removed: set[str]
    summary: BatchSummary
    referenced: set[str] = field(default_factory=set)  # the data files the added delete files name


class Applier:
    """Applies batches for one SparkSession and catalog."""

    def __init__(
        self,
        spark,
        storage: Storage,
        progress: Progress = stderr_progress,
        background_maintenance: Progress | None = None,
    ):
        """``spark`` is a SparkSession or a callable returning one (started only when a batch needs it,
        so a bad input file is reported without waiting for a JVM). ``background_maintenance``: None runs the
        maintenance due after a batch before the apply returns; a progress function runs it in the background
        instead, reporting there (:meth:`maintain_after`)."""
        self._spark = spark
        self.storage = storage
        self.progress = progress
        self.background_maintenance = background_maintenance

    @property
    def spark(self):
        if callable(self._spark):
            self._spark = self._spark()
        return self._spark

    # --- public ----------------------------------------------------------------------------------------
    def apply_pending(
        self,
        spec: TableSpec,
        landing_dir: LandedPath,
        up_to: int | None = None,
        from_batch: int | None = None,
    ) -> list[BatchResult]:
        """Apply every landed batch newer than the landing writer's last one, in batch order.

        Landed batch N is number N of the table's ``landing`` writer, whatever other writers (SQL statements,
        API calls, lookup inserts) committed in between. ``from_batch`` also checks the landed batches from that
        number on that were applied already: each is verified against its checksum and changes nothing (a
        backfill of a range is safe to repeat).
        """
        self.wait_for_maintenance(spec)
        table = self.roll_forward_changelog(spec)
        last = Storage.writer_positions(table).get(LANDING, 0)
        # A bad landed file blocks this table from its batch on; the batches below it still apply. An
        # incomplete one is waited for: it and the batches after it are applied once it is complete.
        landing = scan_landing(landing_dir, spec, after=last)
        # An applied file that changed since was never applied whole: say so rather than skip it as applied.
        changed = changed_inputs(
            landing_dir,
            spec,
            landing,
            last,
            [BatchSummary.of_batch(s) for s in Storage.batch_snapshots(table)],
            lambda seqs: [
                b
                for _, b in Storage.batch_history(table)
                if b.position.writer == LANDING and b.position.seq in seqs
            ],
        )
        if changed:
            raise changed_error(spec.full_name, changed)
        lowest = last + 1 if from_batch is None else from_batch
        chosen = {b: p for b, p in landing.batches.items() if b >= lowest and (up_to is None or b <= up_to)}
        blocked = landing.blocked_from
        error = landing.error() if blocked is not None and (up_to is None or blocked <= up_to) else None
        waiting = landing.waiting_for
        if waiting is not None and up_to is not None and waiting.batch_id > up_to:
            waiting = None
        if not chosen:
            if error is not None:
                raise error
            if waiting is not None:
                self.progress(f"[{spec.full_name}] waiting for landed batch {waiting.batch_id}: {waiting}")
            else:
                self.progress(f"[{spec.full_name}] up to date (last landed batch {last}, nothing pending)")
            return []
        pending = [b for b in chosen if b > last]
        applied = [b for b in chosen if b <= last]
        self.progress(
            f"[{spec.full_name}] "
            + "; ".join(
                part
                for part in (
                    f"{len(pending)} pending landed batch(es): {_ranges(pending)}" if pending else "",
                    f"{len(applied)} applied landed batch(es) to check again: {_ranges(applied)}"
                    if applied
                    else "",
                )
                if part
            )
        )
        results = []
        for i, (seq, path) in enumerate(chosen.items(), start=1):
            self.progress(f"[{spec.full_name}] {i}/{len(chosen)}: landed batch {seq} from {path}")
            try:
                target_columns, merge_mode = read_batch_manifest(path)
                results.append(
                    self.apply_files(
                        spec,
                        WriterPosition(LANDING, seq),
                        [path],
                        target_columns=target_columns,
                        merge_mode=merge_mode,
                    )
                )
            except LandedFileChanging as e:
                # Its producer is still writing it: not an error, the next apply takes it.
                self.progress(f"[{spec.full_name}] waiting for landed batch {seq}: {e}")
                return results
        if error is not None:
            raise error
        if waiting is not None:
            self.progress(f"[{spec.full_name}] waiting for landed batch {waiting.batch_id}: {waiting}")
        return results

    def apply_files(
        self,
        spec: TableSpec,
        position: WriterPosition,
        paths: list[LandedPath],
        fmt: str | None = None,
        target_columns: list[str] | None = None,
        based_on: int | None = None,
        merge_mode: str | None = None,
    ) -> BatchResult:
        """Apply the files of one batch (in order) as number ``position.seq`` of writer ``position.writer``,
        exactly once: the protocol's steps (module docstring), the commit retried from the state check when
        another writer committed first (the batch then takes the table's next batch id).

        ``target_columns`` makes it a partial update (docs/semantics.md §6): only those columns are written.
        ``based_on`` is the table batch a write was planned on (an UPDATE's stored row, a lookup's missing
        keys): once another batch has been committed since, :class:`PlannedOnOldState` is raised and nothing is
        applied, so the write is planned again instead of undoing what that batch wrote.
        ``merge_mode="overwrite"`` bypasses the merge engine (docs/semantics.md §4.5).
        """
        if position.seq <= 0:
            raise BatchRefusedError(f"batch numbers are positive integers, got {position.seq}")
        merge_mode = merge.merge_mode_of(merge_mode)
        merge.check_target_columns(spec, target_columns, merge_mode)  # refuse before reading anything
        merge.check_retraction_format(spec, fmt, merge_mode)
        started = time.monotonic()
        # Before any read (the plan checks them again after its checksum); a landed file that became a link
        # since the scan is refused.
        read_as = fingerprints(paths, self.storage.settings.landing_dir / spec.full_name)
        ranges = decode.plan_batch(paths, spec, fmt, target_columns, merge_mode)
        batch = BatchInput(spec, position, paths, fmt, target_columns, ranges, read_as, merge_mode=merge_mode)
        return self._apply(batch, started, based_on)

    def apply_topic(self, spec: TableSpec) -> list[BatchResult]:
        """Apply what the table's Kafka topics hold after its last applied offsets, as one batch of its
        ``kafka`` writer (:mod:`changelake.inputs.kafka`): the ranges are fixed now, up to each partition's high
        watermark, and committed with the rows. Another applier that committed the next batch first makes this
        one plan again from the offsets it left; nothing to read is an empty list."""
        config = kafka.client_config(spec, self.storage.settings)
        merge.check_retraction_format(spec, spec.source.get("format"))
        self.wait_for_maintenance(spec)
        for _attempt in range(MAX_COMMIT_ATTEMPTS):
            started = time.monotonic()
            table = self.roll_forward_changelog(spec)
            state = Storage.state(table)
            committed = dict(state.batch.kafka_offsets) if state.batch else {}
            ranges = kafka.plan(spec, config, committed, self.progress)
            if not any(r.size for r in ranges) and all(r.key in committed for r in ranges):
                self.progress(f"[{spec.full_name}] up to date (nothing new on the topic)")
                return []
            last = Storage.writer_positions(table, state).get(kafka.KAFKA_WRITER, 0)
            position = WriterPosition(kafka.KAFKA_WRITER, last + 1)
            batch = BatchInput(
                spec,
                position,
                [],
                spec.source.get("format"),
                None,
                decode.plan_topic(ranges, spec),
                topic=tuple(ranges),
                kafka_config=config,
            )
            try:
                result = self._apply(batch, started)
            except BatchRefusedError:
                now = Storage.writer_positions(self.storage.pk_table(spec)).get(kafka.KAFKA_WRITER, 0)
                if now == last:
                    raise  # refused for another reason than a race
                self.progress(
                    f"[{spec.full_name}] another applier committed {position} first; planning again"
                )
                continue
            try:
                kafka.commit_group_offsets(config, ranges)
            except Exception as e:  # noqa: BLE001 - monitoring only; the table's state is the truth
                self.progress(
                    f"[{spec.full_name}] kafka: the consumer group's offsets were not committed: {e}"
                )
            return [result]
        raise CommitConflict(f"{spec.full_name}: other appliers kept committing the topic's batches first")

    def _apply(self, batch: BatchInput, started: float, based_on: int | None = None) -> BatchResult:
        """The protocol's steps for one planned batch (module docstring), the commit retried from the state
        check when another writer committed first (the batch then takes the table's next batch id)."""
        spec, position = batch.spec, batch.position
        self.wait_for_maintenance(spec)
        decoded: decode.DecodeSummary | None = None
        for _attempt in range(MAX_COMMIT_ATTEMPTS):
            table, log_table, state, writers, done = self._check_state(batch)
            if done is not None:
                return done
            if based_on is not None and state.last_batch != based_on:
                raise PlannedOnOldState(
                    f"{spec.full_name}: {position} was planned on table batch {based_on}, and batch "
                    f"{state.last_batch} has been committed since; nothing was applied"
                )
            if decoded is None:
                # What a batch decodes to does not depend on the table: decode once, retry commits.
                decoded = self._decode(batch, table, state.last_batch + 1)
            plan = self._plan(batch, table, state, writers, decoded, log_table)
            merged = self._merge(plan)
            fault("after-data-files")
            written = self._write(plan, merged)
            try:
                committed = self._commit(plan, written)
            except (CommitFailedException, ValidationException):
                recommitted = self._commit_after_race(plan, written)
                if recommitted is None:
                    self.progress(
                        f"[{spec.full_name}] {position}: another writer committed first; re-checking"
                    )
                    continue
                committed = recommitted
            return self._finish(plan, *committed, started, log_table)
        raise CommitConflict(
            f"{spec.full_name}: {position} lost {MAX_COMMIT_ATTEMPTS} commit races; retry later"
        )

    # --- exactly-once bookkeeping ---------------------------------------------------------------------
    def _check_state(
        self, batch: BatchInput
    ) -> tuple[Any, Any, TableState, dict[str, int], BatchResult | None]:
        """Steps 1 and 2: roll the changelog forward, then read the table's state and its writers' positions;
        with them, the no-op result of a batch already committed with this input (None for the next batch).
        Also returns the changelog table as the roll-forward left it, for the batch's changelog commit."""
        # The PK table as the roll-forward read it (that step commits to the changelog table only): a batch
        # committed by another writer since is caught by this attempt's commit, as one committed a moment
        # after a fresh read would be. These two loads are the batch's only reads of the catalog before its
        # commit: every later step takes the tables in hand.
        table, log_table = roll_forward_tables(self.storage, batch.spec, MAX_COMMIT_ATTEMPTS)
        state = Storage.state(table)
        writers = Storage.writer_positions(table, state)
        return table, log_table, state, writers, self._already_committed(batch, table, writers)

    def _already_committed(self, batch: BatchInput, table, writers: dict[str, int]) -> BatchResult | None:
        """A no-op result for a batch its writer committed with this input, None for the writer's next batch;
        refuses the rest. Only a batch at or below the writer's last one waits for the input's checksum here."""
        spec, position = batch.spec, batch.position
        last = writers.get(position.writer, 0)
        if position.seq > last:
            if position.seq != last + 1:
                raise BatchRefusedError(
                    f"{spec.full_name}: {position} skips ahead; the last applied {position.writer} batch is "
                    f"{last}, so the next must be {last + 1}"
                )
            return None
        found = Storage.writer_batch(table, position)
        if found is None:
            # A writer's numbers go 1, 2, 3...: every number up to its last was applied, this one before the
            # history's window (batch-history.num-retained). It is not applied again; its input can no longer
            # be checked.
            self.progress(
                f"[{spec.full_name}] {position} was applied before the oldest batch the table's history keeps "
                "(batch-history.num-retained): nothing to do, and its input cannot be checked against what was "
                "applied"
            )
            return BatchResult(
                spec.full_name, 0, "already-applied", writer=position.writer, writer_seq=position.seq
            )
        snapshot_id, committed = found
        checksum = batch.ranges.checksum
        if committed.checksum != checksum:
            raise BatchRefusedError(
                f"{spec.full_name}: {position} was already applied from a different input (as table batch "
                f"{committed.batch_id}; checksum {committed.checksum[:12]}…, this input {checksum[:12]}…); refusing"
            )
        self.progress(
            f"[{spec.full_name}] {position} already applied as table batch {committed.batch_id} (same "
            "checksum): nothing to do"
        )
        return BatchResult.of(spec.full_name, "already-applied", committed, snapshot_id)

    def roll_forward_changelog(self, spec: TableSpec) -> Any:
        """Commit changelog snapshots for batches the PK table committed but the changelog lacks; the PK table
        as this read it (:func:`changelake.storage.rollforward.roll_forward_changelog`)."""
        return roll_forward_changelog(self.storage, spec, MAX_COMMIT_ATTEMPTS)

    # --- the batch itself: decode -> plan -> merge -> write -> commit ----------------------------------
    def _decode(self, batch: BatchInput, table, batch_id: int) -> decode.DecodeSummary:
        """Step 3: decode the landed files in Spark tasks (a few per core, each decoding consecutive ranges of
        the files), or in this process for a small batch; the driver gets only their stats. ``batch_id`` (the
        table batch the first attempt commits as) only names the staging directory: what a batch decodes to
        does not depend on it."""
        spec, files = batch.spec, batch.ranges
        started = time.monotonic()
        staging = f"{self.storage.new_data_dir(table, batch_id)}-staging"
        local = files.messages <= tuned("local_apply_records")
        cores = 1 if local else _parallelism(self.spark)
        ranges, groups = decode.plan_tasks(files.ranges, cores)
        where = "in this process" if local else f"{len(groups)} task(s)"
        what = (
            f"{files.messages:,} offset(s) of {len(batch.topic)} partition(s)"
            if batch.topic
            else f"{files.bytes:,} bytes"
        )
        self.progress(
            f"[{spec.full_name}] {batch.position}: decoding {what} in {len(ranges)} range(s), {where}"
        )
        task = decode.decode_task(
            spec, staging, dict(table.io.properties), ranges, groups, batch.kafka_config
        )
        # A Spark range needs at least one partition, even for no groups.
        stats = self._run(
            task, len(groups) if local else max(1, len(groups)), decode.stats_schema(), spec, local
        )
        decoded = decode.summarize(stats)  # raises the first bad record, as the task found it
        ops = decoded.op_counts
        self.progress(
            f"[{spec.full_name}] {batch.position}: {decoded.records:,} records "
            f"(+I {ops['+I']:,}, -U {ops['-U']:,}, +U {ops['+U']:,}, -D {ops['-D']:,}) "
            f"from {decoded.messages:,} messages decoded in {time.monotonic() - started:.1f}s"
            + _source_note(decoded)
        )
        return decoded

    def _plan(
        self,
        batch: BatchInput,
        table,
        state: TableState,
        writers: dict[str, int],
        decoded: decode.DecodeSummary,
        log_table: Any,
    ) -> ApplyPlan:
        """Step 4: this attempt's bucket tasks from the table's current snapshot, and what the commit will record
        besides their results. A batch the table's delete behaviour refuses stops here, before any task."""
        spec = batch.spec
        checksum = batch.ranges.checksum  # waits for the hashing thread: raises what reading the files raised
        # After the checksum: a file changed since the plan first read it raises LandedFileChanging.
        how_read = (
            kafka.input_record(spec, list(batch.topic))
            if batch.topic
            else input_record(
                spec,
                batch.paths,
                batch.fmt,
                batch.target_columns,
                self.storage.settings.landing_dir,
                batch.read_as,
                batch.merge_mode,
            )
        )
        # Refuses deletes on a 'disable' table up front.
        merge.check_batch_ops(spec, decoded.op_counts, batch.merge_mode)
        commit_ts = dt.datetime.now(dt.UTC)
        log_ends = self._previous_manifest(table, state).get("log_ends", {})
        files = self.storage.table_files(table)
        batch_id = state.last_batch + 1  # the table's next commit, whichever writer it comes from
        tasks, context, id_counter = [], None, None
        if decoded.groups:
            id_ranges, id_counter = _allocate_ids(spec, state.batch, decoded)
            tasks = _bucket_tasks(spec, Storage.layout(table), decoded, files, log_ends, id_ranges)
            context = self._bucket_context(batch, batch_id, table, log_table, state.batch, commit_ts)
        local = decoded.records <= tuned("local_apply_records") and _local_work(spec, tasks, files)
        if local and context is not None:
            context = replace(context, threads=True, keep_rows=True)  # this process has the cores to itself
        return ApplyPlan(
            batch=batch,
            batch_id=batch_id,
            writers={**writers, batch.position.writer: batch.position.seq},
            table=table,
            decoded=decoded,
            checksum=checksum,
            how_read=json.loads(how_read),
            previous=state.batch,
            log_ends=log_ends,
            commit_ts=commit_ts,
            files=files,
            manifest_path=_manifest_path(table, batch_id),
            tasks=tasks,
            context=context,
            id_counter=id_counter,
            local=local,
        )

    def _merge(self, plan: ApplyPlan) -> Merged:
        """Step 5: run one bucket task (:func:`changelake.engine.buckets.run_task`) per touched bucket; each merges
        its bucket and returns a marker saying what it did; each group of tasks (a Spark task, or this process)
        writes the new rows, delete files and changelog of its buckets together (``GroupWriter``).

        The decode tasks staged every bucket's records as record batches; a task reads its own and its bucket's
        current files with pyarrow, so the job has no shuffle and no record becomes a Spark row."""
        if not plan.tasks or plan.context is None:
            return Merged([], [])
        spec, tasks, local = plan.spec, plan.tasks, plan.local
        started = time.monotonic()
        if local:
            buckets.prefetch(plan.context, tasks)
        # One Spark task per core, the buckets balanced by size (largest first): a Spark task costs a Python
        # worker a round trip or more, a bucket task tens of milliseconds.
        groups = buckets.assign(tasks, 1 if local else _parallelism(self.spark))
        function = buckets.tasks_function(tasks, groups, plan.context, decode.staged_schema(spec))
        rows = self._run(function, len(groups), buckets.task_marker_schema(), spec, local)
        merged = Merged([m for m in rows if m["_task"] >= 0], [m for m in rows if m["_task"] < 0])
        for m in merged.buckets:
            m["partition_key"] = tasks[m["_task"]].key
        rewritten = sum(1 for t in tasks if t.rewrite)
        how = (
            f"{rewritten} rewritten, {len(tasks) - rewritten} merged on read"
            if 0 < rewritten < len(tasks)
            else ("rewritten" if rewritten else "merged on read")
        )
        self.progress(
            f"[{spec.full_name}] {plan.what}: merged {len(tasks)} of {spec.bucket_num} bucket(s) per "
            f"partition ({how}; {sum(m['_count'] for m in merged.buckets):,} rows now in them, "
            f"{sum(m['_log_end'] - m['_log_start'] for m in merged.buckets):,} changelog records) "
            f"in {time.monotonic() - started:.1f}s" + (" in this process" if local else "")
        )
        return merged

    def _write(self, plan: ApplyPlan, merged: Merged) -> WrittenBatch:
        """Step 6: the dead letters and the changelog manifest, at the paths the summary names (nothing reads
        them before the commit), and the Iceberg descriptions of the files the commit adds."""
        dead_letter = self._write_dead_letters(plan.spec, plan.table, plan.batch_id, plan.decoded)
        summary = _batch_summary(plan, merged.buckets, dead_letter)
        manifest = _changelog_manifest(plan, merged, summary)
        self.storage.write_json(plan.table, summary.changelog_manifest, manifest)
        markers = merged.buckets + merged.groups
        # The files' sizes and footers as the tasks wrote them: describing them (here, and the changelog's in
        # the roll-forward) reads nothing.
        self.storage.know_written(buckets.written_of(merged.groups))
        added = self.storage.to_data_files(plan.table, sorted(p for m in markers for p in m["_paths"]))
        by_path = {f.path: f for f in plan.files}

        def partition_of(d: dict):
            """The partition of the live data files a delete file names. (A folded delete file may also name
            files a compaction has since removed: Iceberg readers ignore positions of files not in the table.)"""
            return next(by_path[p] for p in d["files"] if p in by_path).data_file.partition

        deletes = [
            self.storage.to_delete_file(plan.table, d["path"], d["stats"], d["size"], partition_of(d))
            for m in merged.groups
            for d in json.loads(m["_deletes"] or "[]")
        ]
        removed = {p for m in markers for p in m["_removed"]}  # rewritten buckets' files, folded delete files
        referenced = {p for m in merged.groups for d in json.loads(m["_deletes"] or "[]") for p in d["files"]}
        return WrittenBatch(added, deletes, removed, summary, referenced)

    def _commit(self, plan: ApplyPlan, written: WrittenBatch) -> tuple[BatchResult, Any]:
        """Step 7, the commit point: one snapshot swapping the touched buckets' files, its summary the batch's;
        the result and the PK table as committed. Raises CommitFailedException when another writer committed
        first."""
        if losing_commits():
            raise CommitFailedException("injected: another writer committed first (CHANGELAKE_FAULT)")
        committed = self.storage.commit_batch(
            plan.table, written.added, written.added_deletes, written.removed, written.summary
        )
        fault("after-pk-commit")
        snap = committed.current_snapshot()
        result = BatchResult.of(
            plan.spec.full_name, "applied", written.summary, snap.snapshot_id if snap else None
        )
        return result, committed

    def _commit_after_race(self, plan: ApplyPlan, written: WrittenBatch) -> tuple[BatchResult, Any] | None:
        """After a lost commit race: when the winner committed no batch (a compaction, an expiry) and left every
        file this batch replaces or deletes rows of, the batch's files are still right -- commit them on the
        new snapshot without merging again. None when the batch must go back to the state check."""
        spec = plan.spec
        for _attempt in range(MAX_COMMIT_ATTEMPTS):
            table = self.storage.pk_table(spec)
            if Storage.state(table).last_batch != (plan.previous.batch_id if plan.previous else 0):
                return None  # another batch: exactly-once decides (already applied, or merge again)
            live = {f.path for f in self.storage.table_files(table)}
            if not (written.removed | written.referenced) <= live:
                return None  # a compaction replaced files this batch names: merge again
            try:
                result = self._commit(replace(plan, table=table), written)
            except (CommitFailedException, ValidationException):
                continue
            self.progress(
                f"[{spec.full_name}] {plan.what}: committed after another writer's maintenance commit, "
                "without merging again"
            )
            return result
        return None

    def _finish(
        self,
        plan: ApplyPlan,
        result: BatchResult,
        committed: Any,
        started: float,
        log_table: Any,
    ) -> BatchResult:
        """Step 8 (the changelog commit), then the staged records dropped, the batch reported, and the table's
        maintenance that is due (:func:`changelake.engine.maintain.maintain`, unless ``write-only``).

        The changelog commit starts from the tables in hand, not the catalog: the PK table as this batch
        committed it and the changelog table as its state check read it (``log_table``). Another writer's
        changelog commit since makes that commit fail its optimistic check, and the roll-forward then loads
        both (:func:`changelake.storage.rollforward.roll_forward_tables`). The batch's changelog manifest is
        not read back: :meth:`Storage.read_json` keeps what this process wrote."""
        table, log_table = roll_forward_tables(
            self.storage,
            plan.spec,
            MAX_COMMIT_ATTEMPTS,
            in_hand=(committed, log_table),
        )
        self._drop_staging(plan.table, plan.decoded)
        result.seconds = time.monotonic() - started
        c = result.counts
        self.progress(
            f"[{plan.spec.full_name}] {plan.what} committed (snapshot {result.snapshot_id}) in "
            f"{result.seconds:.1f}s: inserted {c['inserted']:,}, updated {c['updated']:,}, deleted "
            f"{c['deleted']:,}, ignored {c['ignored']:,}, dropped -U {c['dropped_update_before']:,}; "
            f"{result.changelog_records:,} changelog records"
        )
        if not plan.spec.storage.write_only:
            self.maintain_after(plan.spec, table, log_table)
        return result

    def maintain_after(self, spec: TableSpec, table, log_table) -> None:
        """The maintenance due after a committed and reported batch: here (:meth:`maintain_inline`), or, with
        ``background_maintenance``, in a thread while the apply returns (a long-lived process applying
        through the API). Either way a failure is reported and leaves the
        batch committed; in the background, the next write to the table in this process waits for it, and a
        process that ends waits for it (engine/maintain.py, :func:`~changelake.engine.maintain.in_background`)."""
        background = self.background_maintenance
        if background is None:
            self.maintain_inline(spec, table, log_table)
            return
        from changelake.engine.maintain import in_background

        def run() -> None:
            started = time.monotonic()
            Applier(self._spark, self.storage, background).maintain_inline(spec, table, log_table)
            background(f"[{spec.full_name}] maintenance after the batch: {time.monotonic() - started:.2f}s")

        in_background(self._maintenance_key(spec), run)

    def wait_for_maintenance(self, spec: TableSpec) -> None:
        """Wait for the table's maintenance running in the background in this process, if any."""
        from changelake.engine.maintain import wait_for

        waited = wait_for(self._maintenance_key(spec))
        if waited >= 0.05:
            self.progress(f"[{spec.full_name}] waited {waited:.2f}s for the maintenance after the last batch")

    def _maintenance_key(self, spec: TableSpec) -> tuple[str, str]:
        return (self.storage.settings.catalog_uri, spec.full_name)

    def maintain_inline(self, spec: TableSpec, table, log_table=None) -> None:
        """The maintenance due after a batch (``table``: the PK table as the batch's changelog commit read it;
        ``log_table``: the changelog table as that commit left it, None to load it): compactions and expiry
        (bounded; see engine/maintain.py). The batch is committed whatever happens here: a failure is reported,
        and the next batch tries again."""
        from changelake.engine.maintain import maintain

        fault("before-maintenance")
        try:
            maintain(
                self.storage,
                spec,
                lambda _spec: table,
                inline=True,
                spark=lambda: self.spark,
                progress=self.progress,
                changelog_table=log_table,
            )
        except Exception as e:  # noqa: BLE001 - the batch is committed; maintenance is retried next time
            self.progress(f"[{spec.full_name}] maintenance after the batch failed, to be tried again: {e}")

    # --- helpers of the steps -------------------------------------------------------------------------
    def _run(self, function, n: int, schema: pa.Schema, spec: TableSpec, local: bool) -> list[dict]:
        """A ``mapInArrow`` function run over ids ``0..n-1``, here or as ``n`` Spark tasks: its rows as dicts.
        The Spark input is a range of ids: no shuffle, and no sparkContext (works over Spark Connect)."""
        if local:
            return _run_here(function, n)
        frame = self.spark.range(0, n, 1, n)
        return [r.asDict() for r in frame.mapInArrow(function, _spark_schema(schema, spec)).collect()]

    def _previous_manifest(self, table, state: TableState) -> dict:
        """The changelog manifest of the table's last batch: it holds every bucket's log end."""
        return self.storage.read_json(table, state.changelog_manifest) if state.changelog_manifest else {}

    def _bucket_context(
        self,
        batch: BatchInput,
        batch_id: int,
        table,
        log_table,
        previous: BatchSummary | None,
        commit_ts: dt.datetime,
    ) -> BucketContext:
        """What every bucket task of this attempt needs: the spec, fresh output directories (the changelog's
        under ``log_table``'s location), the batch's commit timestamp, and the Kafka offsets applied before it."""
        spec = batch.spec
        opts = spec.source_options
        codec, level = buckets.compression_of(dict(table.properties))
        return BucketContext(
            spec=spec,
            partition_columns=(*spec.partition_keys, "_bucket"),
            files_by_partition={},
            io_properties=dict(table.io.properties),
            out_dir=self.storage.new_data_dir(table, batch_id),
            log_dir=self.storage.new_data_dir(log_table, batch_id),
            batch_id=batch_id,
            commit_micros=int((commit_ts - _EPOCH) / dt.timedelta(microseconds=1)),
            target_columns=None if batch.target_columns is None else tuple(batch.target_columns),
            merge_mode=batch.merge_mode,
            ordering=opts.ordering,
            dedup_offsets=opts.dedup_offsets,
            applied_offsets=dict(previous.kafka_offsets) if previous else {},
            compression=codec,
            compression_level=level,
            delta_compression=buckets.delete_compression_of(dict(table.properties)),
            field_ids=Storage.field_ids(table),
            log_field_ids=Storage.field_ids(log_table),
        )

    def _write_dead_letters(self, spec, table, batch_id, decoded: decode.DecodeSummary) -> str | None:
        """Quarantined records, before the commit, at a path of this attempt's own that the commit's summary
        names: readers read only the file the committed snapshot names, so racing appliers of one batch id
        with different inputs cannot pair one's rows with the other's dead letters (a losing attempt's file
        is an orphan, removed by the orphan sweep). Local files are 0600 in a 0700 directory: they hold raw
        input."""
        if not decoded.dead_letters:
            return None
        path = f"{side_location(table.location())}/dead-letter/batch-{batch_id:012d}-{uuid.uuid4().hex[:12]}.jsonl"
        lines = (
            (json.dumps({"batch_id": batch_id, **record}) + "\n").encode() for record in decoded.dead_letters
        )
        if not write_private(path, lines):
            with table.io.new_output(path).create(overwrite=False) as out:
                for line in lines:
                    out.write(line)
        self.progress(
            f"[{spec.full_name}] batch {batch_id}: {len(decoded.dead_letters)} bad record(s) quarantined to {path}"
        )
        return path

    @staticmethod
    def _drop_staging(table, decoded: decode.DecodeSummary) -> None:
        """Staged records are never read after the commit; remove them and their directory (best effort)."""
        try:
            drop_files(table.io, decoded.staged)
        except OSError:
            pass


def _allocate_ids(
    spec: TableSpec, previous: BatchSummary | None, decoded: decode.DecodeSummary
) -> tuple[dict | None, int | None]:
    """Auto-increment id ranges per touched bucket (docs/semantics.md §8), enough for every record to be a new
    key, and the counter after them.

    Each bucket continues its cached range; when that is short it takes whole segments of
    ``table.auto-increment.cache-size`` ids from the table-wide counter. The state is committed with
    the batch (snapshot summary), so ids stay unique across batches, crashes and restarts. The records
    per bucket come from the decode tasks' counts.
    """
    if spec.auto_increment_column is None:
        return None, None
    state = _previous_ids(previous)
    counter, cached = state.counter, state.buckets
    size = spec.auto_increment_cache_size
    ranges: dict[str, list[tuple[int, int]]] = {}
    for key, group in sorted(decoded.groups.items()):
        current = cached.get(key)
        supply = [(current[0], current[1])] if current else []
        available = current[1] - current[0] + 1 if current else 0
        while available < group.records:
            if supply and supply[-1][1] == counter:
                # The segment continues the bucket's range (no other bucket took one in between): one range,
                # so the part this batch leaves unused is kept whole, as Fluss's bucket goes on counting.
                supply[-1] = (supply[-1][0], counter + size)
            else:
                supply.append((counter + 1, counter + size))
            counter += size
            available += size
        ranges[key] = supply
    return ranges, counter


def _bucket_tasks(
    spec: TableSpec,
    layout: Layout,
    decoded: decode.DecodeSummary,
    files: list[TableFile],
    log_ends: dict[str, int],
    id_ranges: dict | None,
) -> list[BucketTask]:
    """One task per touched bucket: its staged records, the data files that may hold its rows and the delete
    files of its Iceberg partition, its log end and ids, and whether it is rewritten whole (copy-on-write) or
    merged on read (:func:`_rewrites`)."""
    by_values: dict[str, list[TableFile]] = {}
    deletes: dict[str, list[TableFile]] = {}
    for f in files:
        if f.is_delete:
            deletes.setdefault(partition_key(f.partition), []).append(f)
        else:
            by_values.setdefault(partition_key(layout.key_values(f.partition)), []).append(f)
    merge_on_read = spec.write_mode == "merge-on-read"
    tasks = []
    for key, group in sorted(decoded.groups.items()):
        values = tuple(json.loads(key)[:-1])
        candidates = [f for f in by_values.get(partition_key(values), []) if f.holds(group.bucket)]
        output = partition_key(layout.partition_of(values, group.bucket))
        tasks.append(
            BucketTask(
                key=key,
                bucket=group.bucket,
                parts=tuple(group.parts),
                part_sizes=tuple(decoded.staged_bytes.get(path, 0) for path, _ in group.parts),
                files=tuple(
                    buckets.SourceFile(f.path, f.record_count, f.single_bucket, f.size) for f in candidates
                ),
                deletes=tuple(d.path for d in deletes.get(output, ())),
                delete_sizes=tuple(d.size for d in deletes.get(output, ())),
                output=output,
                rewrite=not merge_on_read or _rewrites(group.records, candidates),
                log_start=log_ends.get(key, 0),
                id_ranges=None if id_ranges is None else tuple(id_ranges[key]),
                records=group.records,
                stored_bytes=sum(f.size for f in candidates),
            )
        )
    return tasks


#: A merge-on-read batch rewrites a bucket whole when its records number at least this share of the rows in the
#: bucket's own files (or it has none): writing the rows again then costs about what the delete positions and
#: the new rows would, and leaves nothing for readers to merge.
REWRITE_SHARE = 0.25


def _rewrites(records: int, candidates: list[TableFile]) -> bool:
    own = sum(f.record_count for f in candidates if f.single_bucket)
    return not candidates or records >= REWRITE_SHARE * own


def _local_work(spec: TableSpec, tasks: list[BucketTask], files: list[TableFile]) -> bool:
    """Whether the merge of a small batch runs in this process: the buckets it rewrites hold at most
    ``CHANGELAKE_LOCAL_APPLY_BYTES``, and the files it must read that this process does not keep at most
    ``CHANGELAKE_LOCAL_READ_BYTES`` (a Spark job costs more than that work; config.TUNING)."""
    if sum(t.stored_bytes for t in tasks if t.rewrite) > tuned("local_apply_bytes"):
        return False
    sizes = {f.path: f.size for f in files}
    schema = buckets.row_schema(spec)
    unread = {s.path for t in tasks for s in t.files if not buckets.STORED_ROWS.holds(s.path, schema)}
    return sum(sizes.get(p, 0) for p in unread) <= tuned("local_read_bytes")


def _batch_summary(plan: ApplyPlan, markers: list[dict], dead_letter: str | None) -> BatchSummary:
    """What the commit records of the batch: its identity and input, the merge's counts and log range, and
    the Kafka offsets and auto-increment state after it."""
    log_records = sum(m["_log_end"] - m["_log_start"] for m in markers)
    log_start = plan.previous.log_end_offset if plan.previous else 0
    source = _source_counts(plan.decoded, markers)
    counts = merge.BatchCounts(**buckets.bucket_counts(markers, COUNTERS)).as_dict()
    target_columns = plan.batch.target_columns
    return BatchSummary(
        batch_id=plan.batch_id,
        checksum=plan.checksum,
        changelog_manifest=plan.manifest_path,
        log_start_offset=log_start,
        log_end_offset=log_start + log_records,
        changelog_records=log_records,
        target_columns=None if target_columns is None else tuple(target_columns),
        input=plan.how_read,
        kafka_offsets=_kafka_offsets(plan.previous, markers, plan.batch.topic),
        auto_increment=_id_state(plan, markers),
        touched_buckets=len({m["partition_key"] for m in markers}),
        dead_letter=dead_letter,
        source=source,
        counts=counts,
        rows=_rows_before(plan) + counts["inserted"] - counts["deleted"],
        totals=_totals(plan, source),
        writer=plan.batch.position.writer,
        writer_seq=plan.batch.position.seq,
        writers=plan.writers,
    )


def _changelog_manifest(plan: ApplyPlan, merged: Merged, summary: BatchSummary) -> dict:
    """The changelog manifest the summary names: the batch's changelog files for the roll-forward, and every
    bucket's log end for the next batch."""
    log_ends = dict(plan.log_ends)
    log_ends.update({m["partition_key"]: m["_log_end"] for m in merged.buckets if m["_log_end"]})
    return {
        "batch_id": plan.batch_id,
        "files": sorted(p for m in merged.groups for p in m["_log_paths"]),
        "records": summary.changelog_records,
        "log_start_offset": summary.log_start_offset,
        "log_end_offset": summary.log_end_offset,
        "log_ends": log_ends,
        "commit_timestamp": plan.commit_ts.isoformat(),
    }


def _manifest_path(table, batch_id: int) -> str:
    return f"{side_location(table.location())}/changelog-{batch_id:012d}-{uuid.uuid4().hex[:12]}.json"


def _rows_before(plan: ApplyPlan) -> int:
    """The table's live rows before the batch: as the previous batch recorded them, or (a table whose batches
    did not record them, all written copy-on-write) its data files' records."""
    if plan.previous is not None and plan.previous.rows is not None:
        return plan.previous.rows
    return sum(f.record_count for f in plan.files if not f.is_delete)


def _totals(plan: ApplyPlan, source: dict[str, int]) -> dict[str, int]:
    """The source counters over every batch so far: the previous batch's totals plus this batch's (summed
    once from the table's history for a table whose batches did not carry them)."""
    totals = plan.previous.totals if plan.previous is not None else None
    if totals is None:
        totals = dict.fromkeys(SOURCE_COUNTERS, 0)
        if plan.previous is not None:
            for snap in Storage.batch_snapshots(plan.table):
                batch = BatchSummary.of_batch(snap)
                for name in SOURCE_COUNTERS:
                    totals[name] += batch.source.get(name, 0)
    return {name: totals.get(name, 0) + source.get(name, 0) for name in SOURCE_COUNTERS}


def _source_counts(decoded: decode.DecodeSummary, markers: list[dict]) -> dict[str, int]:
    task = buckets.bucket_counts(markers, TASK_SOURCE_COUNTERS)
    return {
        "messages": decoded.messages,
        "skipped": decoded.skipped,
        "quarantined": len(decoded.dead_letters),
        **task,
    }


def _kafka_offsets(
    previous: BatchSummary | None, markers: list[dict], topic: tuple[kafka.PartitionRange, ...] = ()
) -> dict[str, int]:
    """The last applied offset per topic-partition after this batch (committed with it): its records', and a
    topic batch's range ends (an offset without a record, or a partition read for the first time with nothing
    in it yet, is passed too: the next batch starts after it)."""
    offsets = dict(previous.kafka_offsets) if previous else {}
    for m in markers:
        for tp, offset in json.loads(m["_kafka_offsets"] or "{}").items():
            offsets[tp] = max(offsets.get(tp, -1), offset)
    for r in topic:
        offsets[r.key] = max(offsets.get(r.key, -1), r.end - 1)
    return offsets


def _id_state(plan: ApplyPlan, markers: list[dict]) -> AutoIncrementState | None:
    """The auto-increment state after this batch: the counter and each bucket's unused range."""
    if plan.spec.auto_increment_column is None:
        return None
    state = _previous_ids(plan.previous)
    cached = dict(state.buckets)
    for m in markers:
        if m["_ai_next"] is None:
            cached.pop(m["partition_key"], None)
        else:
            cached[m["partition_key"]] = (m["_ai_next"], m["_ai_end"])
    counter = state.counter if plan.id_counter is None else plan.id_counter
    return AutoIncrementState(counter, cached)


def _previous_ids(previous: BatchSummary | None) -> AutoIncrementState:
    """The auto-increment state the table's last batch committed (none yet: counter 0, no cached ranges)."""
    return (previous.auto_increment if previous else None) or AutoIncrementState()


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
        pa.list_(pa.string()): T.ArrayType(T.StringType()),
    }
    return T.StructType(
        [by_name.get(f.name) or T.StructField(f.name, simple[f.type], True) for f in arrow_schema]
    )


def _ranges(ids: list[int]) -> str:
    return f"{ids[0]}..{ids[-1]}" if len(ids) > 1 else str(ids[0])
