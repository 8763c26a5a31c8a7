"""The Python API: everything a notebook, a test or an app does with changelake, in one SparkSession.

>>> from changelake import ChangeLake
>>> lake = ChangeLake()                                   # settings from env / config file
>>> lake.create_table({"name": "demo.t", "columns": [{"name": "k", "type": "INT"},
...                    {"name": "v", "type": "STRING"}], "primary_key": ["k"]})
>>> lake.apply("demo.t", [{"op": "+I", "data": {"k": 1, "v": "a"}}], batch_id=1)
>>> lake.rows("demo.t").show(); lake.changelog("demo.t").show()
>>> lake.lookup("demo.t", {"k": 1})                       # no Spark: [{'k': 1, 'v': 'a'}]
>>> lake.rows_arrow("demo.t"); lake.changelog_arrow("demo.t")   # no Spark: pyarrow Tables
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from changelake import evolution, objectstore
from changelake.config import Settings, load_settings
from changelake.engine.apply import Applier, BatchResult, Progress, stderr_progress
from changelake.errors import (
    BatchRefusedError,
    ChangelakeError,
    CommitConflict,
    PlannedOnOldState,
    unknown_table,
)
from changelake.identifiers import quote, split_table_name
from changelake.inputs import kafka
from changelake.inputs.landed import LandedPath, as_landed, landed_exists
from changelake.inputs.landing import landing_status, read_manifest, scan_landing
from changelake.objectstore import ObjectPath
from changelake.privacy import private_files, writes_private
from changelake.spec import SpecDirectory, TableSpec, check_new_table, load_specs
from changelake.storage import sparkread
from changelake.storage.fastread import FastReader, changelog_order, expired_before, json_default
from changelake.storage.iceberg import CHANGELOG_SUFFIX, Storage
from changelake.storage.summary import API, LOOKUP, SQL, BatchSummary, WriterPosition, check_writer_name

if TYPE_CHECKING:
    import pyarrow as pa

    from changelake.sqlwrite import SqlResult

__all__ = ["ChangeLake", "json_default"]

#: Rounds of "look up, insert what is missing" before lookup_keys gives up (each lost round means another
#: writer committed a batch in between, so the keys still missing shrink or the table moved on).
MAX_INSERT_ATTEMPTS = 5


class ChangeLake:
    """Entry point of the Python API. Creates the SparkSession lazily through :func:`changelake.runtime.session.get_spark`."""

    def __init__(
        self,
        settings: Settings | None = None,
        spark=None,
        progress: Progress | None = stderr_progress,
        background_maintenance: Progress | None = None,
        **overrides: Any,
    ):
        self.settings = settings or load_settings(**overrides)
        self.storage = Storage(self.settings)
        self._spark = spark
        self.progress: Progress = progress or (lambda _msg: None)
        #: None: the maintenance due after a batch runs before apply() returns; a progress function: it runs
        #: in the background, reporting there, and the table's next write waits for it (Applier.maintain_after)
        self.background_maintenance = background_maintenance
        self.reader = FastReader(self.settings, self.progress, storage=self.storage)

    @property
    def spark(self):
        if self._spark is None:
            from changelake.runtime.session import get_spark

            with private_files():  # the JVM, and the Python workers it starts, inherit the umask
                self._spark = get_spark(self.settings)
        return self._spark

    @property
    def applier(self) -> Applier:
        return Applier(lambda: self.spark, self.storage, self.progress, self.background_maintenance)

    # --- specs and tables ------------------------------------------------------------------------------
    def specs(self) -> SpecDirectory:
        """Table specs found in ``$CHANGELAKE_TABLES``; a file that does not load is in ``.problems`` and
        looking its table up raises its error (:class:`changelake.spec.SpecDirectory`)."""
        return load_specs(self.settings.tables_dir)

    def spec(self, table: str) -> TableSpec:
        """The spec reads and writes of ``table`` use (:func:`changelake.evolution.resolve`): the layout
        stored with the table plus the spec file's source/datagen/comment sections; the spec file alone for
        a table not created yet. A spec file that differs in layout is noted on the progress log."""
        namespace, name = split_table_name(table)
        file_spec = self.specs().get(table)
        stored = self.storage.stored_spec(namespace, name)
        if file_spec is None and stored is None:
            raise unknown_table(
                table, f"not in the catalog and no spec in {self.settings.tables_dir}", list(self.specs())
            )
        note = evolution.difference_note(table, file_spec, stored)
        if note:
            self.progress(note)
        return evolution.resolve(table, file_spec, stored)

    @writes_private
    def create_table(self, spec: TableSpec | dict | str | Path) -> TableSpec:
        """Create a PK table and its changelog table from a spec (TableSpec, dict, or YAML path), or apply
        the spec's supported changes to the existing table (:func:`changelake.evolution.plan`; anything else
        is refused). Idempotent. Returns the spec the table now has."""
        if isinstance(spec, dict):
            spec = TableSpec.from_dict(spec)
        elif isinstance(spec, str | Path):
            spec = TableSpec.from_yaml(spec)
        return self._create(spec)

    def _create(self, spec: TableSpec) -> TableSpec:
        """:meth:`Storage.create`, after the naming rule for a table that does not exist yet: the same rule
        the spec directory obeys (:func:`changelake.spec.check_new_table`), against every table in the
        catalog and every spec file, so a table created from a spec object cannot take another table's
        view or changelog name either."""
        return self.storage.create(
            spec,
            self.progress,
            before_new=lambda: check_new_table(
                spec, [*self._catalog_tables(), *self.specs()], f"table {spec.full_name}"
            ),
        )

    def _catalog_tables(self) -> list[str]:
        """Full names of the PK tables in the catalog (their changelog tables are derived names)."""
        catalog = self.storage.catalog
        return [
            ".".join(ident)
            for (namespace, *_) in catalog.list_namespaces()
            for ident in catalog.list_tables(namespace)
            if len(ident) == 2 and not ident[1].endswith(CHANGELOG_SUFFIX)
        ]

    @writes_private
    def create_all(self) -> list[TableSpec]:
        """Create every table with a spec; then raise the problems of spec files that did not load."""
        specs = self.specs()
        created = [self.create_table(s) for s in specs.values()]
        specs.check()
        return created

    @writes_private
    def drop_table(self, table: str) -> None:
        self.storage.drop(self.spec(table))

    def _ensure(self, table: str) -> TableSpec:
        """The table's spec for a write: creates whatever part of the table is missing and applies the spec
        file's supported changes, refusing any other difference (idempotent, safe against racing creators)."""
        file_spec = self.specs().get(table)
        return self._create(file_spec if file_spec is not None else self.spec(table))

    # --- writes ----------------------------------------------------------------------------------------
    @writes_private
    def apply(
        self,
        table: str,
        records: list[dict] | Any = None,
        batch_id: int | None = None,
        file: str | Path | ObjectPath | None = None,
        fmt: str | None = None,
        target_columns: list[str] | None = None,
        writer: str = API,
        merge_mode: str | None = None,
    ) -> BatchResult:
        """Apply one batch exactly once: a list of changelog records, a DataFrame, or a ``file``.

        Records use the changelog-json shapes: ``{"op": "+I", "data": {...}}`` or
        ``{"rowkind": "+I", "fields": [...]}``. A DataFrame has an ``op`` column and the row columns; its
        row order (as collected) is the batch order. Records given here are applied in the order given, after
        everything the table took before: the table's ``source:`` settings (its format, ordering field,
        dedup, quarantine) are for its landed input, and a bad record fails the call. A ``file`` is read with
        the table's ``source:`` settings (``fmt`` overrides its format); it may be an object (``s3://…``).

        ``writer`` names the sequence the batch belongs to (``api`` unless you name yours: two jobs writing one
        table each name theirs), and ``batch_id`` is the batch's number in it: 1, 2, 3, ... with no gaps, and
        a number applied before is a no-op with the same input (refused with other input). Without
        ``batch_id`` the writer's next number is used, so a retried call applies again: pass ``batch_id``
        for exactly once. Other writers of the table (landed batches, SQL statements, lookup inserts) keep
        their own numbers. The result's ``batch_id`` is the table's batch id of the commit (the changelog's
        ``_batch_id``), ``writer_seq`` the number. ``writer="landing"`` applies a file as that landed batch (one
        from an archive, say), as landing it as ``N.<ext>`` would.

        ``target_columns`` makes the batch a partial update: only those columns (which must include the
        primary key) are written. ``merge_mode="overwrite"`` (Fluss's ``MergeMode.OVERWRITE``) bypasses the
        table's merge engine: rows are replaced as given and deletes applied (docs/semantics.md §4.5), the way
        to correct an aggregation, first_row or versioned table.
        """
        spec = self._ensure(table)
        return self._apply_as(
            spec,
            check_writer_name(writer),
            batch_id,
            records,
            file,
            fmt,
            target_columns,
            merge_mode=merge_mode,
        )

    def _landed_path(self, file: str | Path | ObjectPath) -> LandedPath:
        """A file to apply: an object (``s3://…``, in the settings' object store) or a local path."""
        if isinstance(file, str) and objectstore.is_object_location(file):
            return objectstore.Store(self.settings.storage_options).path(file)
        return as_landed(file)

    def writer_positions(self, table: str) -> dict[str, int]:
        """Every writer's last applied number for ``table`` (``landing``, ``sql``, ``api``, ``lookup``, and the
        writers API callers named); empty for a table not created yet."""
        spec = self.spec(table)
        if not self.storage.exists(spec):
            return {}
        return Storage.writer_positions(self.storage.pk_table(spec))

    def _apply_as(
        self,
        spec: TableSpec,
        writer: str,
        seq: int | None,
        records: list[dict] | Any = None,
        file: str | Path | ObjectPath | None = None,
        fmt: str | None = None,
        target_columns: list[str] | None = None,
        name: str | None = None,
        based_on: int | None = None,
        merge_mode: str | None = None,
    ) -> BatchResult:
        """:meth:`apply` as number ``seq`` (None: the next) of ``writer``; ``name`` names the staged records'
        file (SQL statements: their idempotency key); ``based_on`` the table batch the records were planned on
        (:meth:`changelake.engine.apply.Applier.apply_files`); ``merge_mode`` the batch's merge mode."""
        if seq is None:
            seq = Storage.writer_positions(self.storage.pk_table(spec)).get(writer, 0) + 1
        position = WriterPosition(writer, seq)
        if file is not None:
            path = self._landed_path(file)
            return self.applier.apply_files(
                spec, position, [path], fmt, target_columns, based_on, merge_mode=merge_mode
            )
        if records is None:
            raise ChangelakeError("apply() needs records, a DataFrame or file=")
        with self._staged_records(spec, records, name) as staged:
            fmt = "changelog-parquet" if staged.suffix == ".parquet" else "changelog-json"
            return self.applier.apply_files(
                _own_records(spec, fmt),
                position,
                [staged],
                fmt,
                target_columns,
                based_on,
                merge_mode=merge_mode,
            )

    def wait_for_maintenance(self, table: str) -> float:
        """Wait until the maintenance running in the background after ``table``'s last batch in this process
        (``background_maintenance``) is done; the seconds waited (0 when none runs). The table's next write
        waits for it anyway; this is for a caller that wants the table maintained now (a benchmark, a test)."""
        from changelake.engine.maintain import wait_for

        return wait_for((self.settings.catalog_uri, self.spec(table).full_name))

    @writes_private
    def apply_pending(
        self, table: str | None = None, up_to: int | None = None, from_batch: int | None = None
    ) -> list[BatchResult]:
        """Apply every landed batch newer than each table's last one (all tables with specs if ``table`` is None);
        a table whose source is a Kafka topic takes what the topic holds after its applied offsets, as one batch.

        ``from_batch``/``up_to`` bound a replay or backfill range of landed batches; replayed batches are no-ops.
        """
        specs = self.specs()
        names = [table] if table else sorted(specs)
        results: list[BatchResult] = []
        for name in names:
            spec = self._ensure(name)
            if spec.source_options.kafka is not None:  # the table's batches come from its Kafka topics
                if up_to is not None or from_batch is not None:
                    raise ChangelakeError(
                        f"{name} reads a Kafka topic: --up-to and --from-batch choose landed batches; its next "
                        "batch is what the topic holds after the offsets the table applied"
                    )
                results += self.applier.apply_topic(spec)
                continue
            results += self.applier.apply_pending(spec, self.settings.landing_dir, up_to, from_batch)
        if not table:
            specs.check()  # every other table is applied; a broken spec's batches are not silently left
        return results

    @writes_private
    def sql(
        self,
        statements: str,
        idempotency_key: str | None = None,
        batch_id: int | None = None,
        merge_mode: str | None = None,
    ) -> list[SqlResult]:
        """Run Flink-style write statements (docs/sql-writes.md): ``INSERT INTO t [(cols)] VALUES …`` or
        ``… SELECT … FROM s [WHERE …]``, ``UPDATE t SET … WHERE <pk> = …``, ``DELETE FROM t WHERE <pk> = …``.

        Each statement is one exactly-once batch of its table, applied through :meth:`apply`'s path (so
        every merge engine's rules and changelog hold); statements run in order, and a refused one stops the
        rest (those before it stay applied). ``idempotency_key`` makes a retried statement a no-op: the
        batch that applied it under that key is found in the table's batch history and reported as
        ``already-applied`` (with several statements, statement *i* uses ``<key>#<i>``). ``batch_id`` (one
        statement only) applies it as that batch, exactly once like any batch id. ``merge_mode="overwrite"``
        writes every statement in Fluss's overwrite merge mode, as the statement option
        ``/*+ OPTIONS('merge-mode'='overwrite') */`` after a statement's table name does for that statement
        (docs/sql-writes.md). Refusals raise :class:`~changelake.errors.WriteRefusedError` with Fluss's words;
        nothing is written then.
        """
        from changelake import sqlwrite

        trees = sqlwrite.parse(statements)
        if batch_id is not None and len(trees) != 1:
            raise ChangelakeError(f"a batch id applies to one statement; got {len(trees)} statements")
        if idempotency_key is not None and (not isinstance(idempotency_key, str) or not idempotency_key):
            raise ChangelakeError("an idempotency key is a non-empty string")
        results = []
        for number, tree in enumerate(trees, start=1):
            key = idempotency_key
            if key is not None and len(trees) > 1:
                key = f"{key}#{number}"
            results.append(self._sql_statement(tree, key, batch_id, merge_mode))
        return results

    def _sql_statement(
        self, tree: Any, key: str | None, batch_id: int | None, merge_mode: str | None = None
    ) -> SqlResult:
        """One statement as one batch of the table's ``sql`` writer: find it applied under ``key``, else plan it
        on the table's current state and apply it as the writer's next batch (planned again if another
        statement took that number first). Its records are applied after everything the table took before,
        in the statement's order: no ordering field or quarantine of the table's landed input applies.
        ``merge_mode`` is the call's mode; the statement's own option wins."""
        from changelake import sqlwrite

        text = sqlwrite.statement_text(tree)
        table = sqlwrite.target_table(tree, self._known_tables)
        spec = self._ensure(table)
        kind = type(tree).__name__.lower()
        merge_mode = sqlwrite.statement_merge_mode(tree, merge_mode)
        # The merge mode is part of what a statement writes: a retry in another mode is another statement.
        written = text if merge_mode is None else f"{text}\n-- merge mode: {merge_mode}"
        digest = hashlib.sha256(written.encode()).hexdigest()[:20]
        key_prefix = None if key is None else f"sql-{hashlib.sha256(key.encode()).hexdigest()[:20]}-"
        for _attempt in range(MAX_INSERT_ATTEMPTS):
            pk = self.storage.pk_table(spec)
            if key is not None and key_prefix is not None:
                done = self._sql_applied(spec, pk, key_prefix, digest, key)
                if done is not None:
                    return sqlwrite.SqlResult(
                        text, kind, spec.full_name, "already-applied", idempotency_key=key, **done
                    )
            state = Storage.state(pk)
            last = Storage.writer_positions(pk, state).get(SQL, 0)
            plan = sqlwrite.plan(
                tree,
                spec,
                lookup=lambda s, k: next(iter(self.reader.lookup(s.full_name, k)), None),
                read_rows=lambda s: self.reader.rows_arrow(s.full_name),
                known=self._known_tables,
                spec_of=self.spec,
                merge_mode=merge_mode,
            )
            if not plan.records:
                return sqlwrite.SqlResult(
                    text, kind, spec.full_name, "nothing to write", note=plan.note, idempotency_key=key
                )
            name = f"{key_prefix}{digest}.jsonl" if key_prefix is not None else None
            try:
                result = self._apply_as(
                    spec,
                    SQL,
                    batch_id or last + 1,
                    plan.records,
                    target_columns=plan.target_columns,
                    name=name,
                    based_on=state.last_batch if plan.reads_target else None,
                    merge_mode=plan.merge_mode,
                )
            except PlannedOnOldState:
                self.progress(
                    f"[{spec.full_name}] sql: another batch was committed while the statement was planned; "
                    "planning again"
                )
                continue
            except BatchRefusedError:
                now = Storage.writer_positions(self.storage.pk_table(spec)).get(SQL, 0)
                if batch_id is not None or now == last:
                    raise  # refused for another reason than a race
                self.progress(
                    f"[{spec.full_name}] sql: another statement was committed as sql batch {last + 1} first; "
                    "planning again"
                )
                continue
            return sqlwrite.SqlResult(
                text,
                kind,
                spec.full_name,
                result.status,
                batch_id=result.batch_id,
                writer_seq=result.writer_seq,
                idempotency_key=key,
                changelog_records=result.changelog_records,
                counts=_row_counts(result.counts),
            )
        raise CommitConflict(
            f"{spec.full_name}: {MAX_INSERT_ATTEMPTS} other statements were committed while this statement was "
            "planned; retry it"
        )

    def _sql_applied(
        self, spec: TableSpec, pk: Any, key_prefix: str, digest: str, key: str
    ) -> dict[str, Any] | None:
        """The batch an idempotency key applied (its id and counts), newest first in the table's batch
        history; a batch of the same key but another statement is a refusal."""
        for _snapshot_id, summary in reversed(Storage.batch_history(pk)):
            files = (summary.input or {}).get("files") or []
            for name in files:
                if not name.startswith(key_prefix):
                    continue
                if name != f"{key_prefix}{digest}.jsonl":
                    raise BatchRefusedError(
                        f"{spec.full_name}: idempotency key {key!r} was used by another statement, applied as "
                        f"batch {summary.batch_id}; refusing"
                    )
                self.progress(
                    f"[{spec.full_name}] sql: idempotency key {key!r} already applied as batch "
                    f"{summary.batch_id}: nothing to do"
                )
                return {
                    "batch_id": summary.batch_id,
                    "writer_seq": summary.position.seq,
                    "changelog_records": summary.changelog_records,
                    "counts": _row_counts(summary.counts),
                }
        return None

    def _known_tables(self) -> list[str]:
        """Tables a statement may name: those with a spec file and those in the catalog."""
        return sorted({*self.specs(), *self._catalog_tables()})

    @contextlib.contextmanager
    def _staged_records(self, spec: TableSpec, records, name: str | None = None) -> Iterator[Path]:
        """API records as the file the apply reads: JSON lines (a list) or one Parquet file (a DataFrame, in its
        order), in a directory of this call's own under ``staging/`` (0700, files 0600: they hold the records)
        that is removed when the apply returns, committed or not. Its checksum is its content's, so the same
        records again are a replay. ``name`` names the file (a statement's idempotency key: the batch history
        finds the key by it)."""
        directory = self.settings.staging_dir / spec.full_name / f"call-{uuid.uuid4().hex}"
        os.makedirs(directory, mode=0o700)
        try:
            if isinstance(records, list):
                payload = "".join(
                    json.dumps(_finite(r), default=json_default, sort_keys=True, allow_nan=False) + "\n"
                    for r in records
                ).encode()
                path = directory / (name or f"api-{hashlib.sha256(payload).hexdigest()[:20]}.jsonl")
                # 0600, exclusive, never through a link; not fsynced: removed once the apply returns.
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                with open(fd, "wb") as out:
                    out.write(payload)
            else:
                # A DataFrame: one Parquet file in the DataFrame's order (executors write it: a local path).
                records.coalesce(1).write.parquet(str(directory / "df"))
                part = next((directory / "df").glob("*.parquet"))
                path = directory / f"df-{hashlib.sha256(part.read_bytes()).hexdigest()[:20]}.parquet"
                part.replace(path)
            yield path
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    # --- reads -----------------------------------------------------------------------------------------
    def rows(self, table: str, at_batch: int | None = None):
        """Current rows as a DataFrame (declared types, no hidden bucket), or as of batch ``at_batch``: the PK
        table read by Iceberg's Spark runtime as ``changelake.<ns>.<table>`` (:meth:`iceberg_table`; deletes
        applied by Iceberg, ``VERSION AS OF`` the batch's snapshot)."""
        spec = self.spec(table)
        version = ""
        if at_batch is not None:
            pk = self.storage.pk_table(spec)
            snap = self.storage.snapshot_for_batch(pk, at_batch)
            if snap is None:
                raise self.storage.expired_batch_error(pk, at_batch)
            version = f" VERSION AS OF {int(snap.snapshot_id)}"
        df = self.spark.sql(f"SELECT * FROM {self.iceberg_table(table)}{version}")  # noqa: S608 - quoted names, an int
        return sparkread.to_view_types(spec, df)

    def iceberg_table(self, table: str, changelog: bool = False) -> str:
        """The Spark SQL name of a table (or of its changelog table) in the Spark catalog that reads this lake's
        Iceberg catalog: ``changelake.<ns>.<table>`` (:func:`changelake.runtime.jvm.spark_catalog`), quoted."""
        from changelake.runtime import jvm

        spec = self.spec(table)
        name = spec.table + (CHANGELOG_SUFFIX if changelog else "")
        return ".".join(
            quote(p) for p in (jvm.spark_catalog(self.spark, self.settings), spec.namespace, name)
        )

    def rows_arrow(self, table: str, at_batch: int | None = None) -> pa.Table:
        """:meth:`rows` without Spark: a pyarrow Table with the same rows and types (TIMESTAMP_LTZ values
        timezone-aware in UTC), read by :class:`changelake.storage.fastread.FastReader`."""
        return self.reader.rows_arrow(table, at_batch=at_batch)

    def changelog(self, table: str, from_batch: int | None = None, to_batch: int | None = None):
        """The changelog (``_change_type``, ``_batch_id``, ``_log_offset``, ``_commit_timestamp``) in its total
        order: (``_batch_id``, partition columns, ``_bucket``, ``_log_offset``) when ``_log_offset`` counts per
        bucket, else ``_log_offset`` (:func:`changelake.storage.fastread.changelog_order`).

        If a crashed apply left a committed batch's changelog uncommitted, it is rolled forward first (the
        same deterministic commit the next apply would make), so readers never miss a committed batch.
        """
        from pyspark.sql import functions as F

        spec = self.spec(table)
        pk = self.applier.roll_forward_changelog(spec)
        expired_before(
            spec.full_name,
            self.storage.changelog_table(spec).properties,
            from_batch,
            to_batch,
            Storage.state(pk).last_batch,
        )
        df = self.spark.table(self.iceberg_table(table, changelog=True))
        if from_batch is not None:
            df = df.filter(F.col("_batch_id") >= from_batch)
        if to_batch is not None:
            df = df.filter(F.col("_batch_id") <= to_batch)
        return sparkread.to_view_types(spec, df.orderBy(*changelog_order(df.columns, spec)))

    def changelog_arrow(
        self, table: str, from_batch: int | None = None, to_batch: int | None = None
    ) -> pa.Table:
        """:meth:`changelog` without Spark: a pyarrow Table with the same records in the same order."""
        return self.reader.changelog_arrow(table, from_batch, to_batch)

    def lookup(
        self, table: str, key: dict[str, Any], prefix: bool = False, insert_if_not_exists: bool = False
    ) -> list[dict[str, Any]]:
        """Primary-key lookup (all PK columns) or, with ``prefix=True``, prefix lookup by bucket key (docs/semantics.md §9).

        No Spark: reads only the files of the key's (partition, bucket), see :meth:`FastReader.lookup`.
        ``insert_if_not_exists`` (Fluss's ``Lookup.enableInsertIfNotExists``): a key that is not there is
        inserted first, see :meth:`lookup_keys`.
        """
        if insert_if_not_exists:
            if prefix:
                raise ChangelakeError(
                    "insertIfNotExists cannot be enabled for prefix key lookup, as currently we only support "
                    "insertIfNotExists for primary key lookup."
                )
            # with insertIfNotExists every key has a row once the call returns
            return [
                row for row in self.lookup_keys(table, [key], insert_if_not_exists=True) if row is not None
            ]
        return self.reader.lookup(table, key, prefix)

    @writes_private
    def lookup_keys(
        self, table: str, keys: list[dict[str, Any]], insert_if_not_exists: bool = False
    ) -> list[dict[str, Any] | None]:
        """Primary-key lookups of several keys: each key's row, in the order of ``keys`` (None if absent).

        With ``insert_if_not_exists`` (Fluss's ``Lookuper`` with ``insertIfNotExists``, e.g. a dictionary table
        that gives every user id a stable auto-increment id) the keys not found are inserted -- a row with the
        key, nulls elsewhere and the auto-increment column's new id -- and every key's stored row is returned.
        The insert is one batch through the exactly-once apply (after the table's last batch, a partial write
        of the primary key columns, as Fluss writes it), with its changelog. Keys already there are not
        written, so a second call returns the same rows without writing. Concurrent callers get one row per
        key: a caller whose number another caller took looks the keys up again and inserts only those still
        missing; two callers inserting the same keys under one number stage the same batch (the same
        checksum), so the second finds it applied. Either way each caller returns the stored row.

        Fluss's rules: primary-key lookups only, and refused for a table with a NOT NULL column outside the
        primary key and the auto-increment column (nothing could fill it); the insert is refused for the
        first_row and versioned merge engines, which take no partial writes ("Partial update is not supported
        for the ... merge engine."). The inserts are batches of the table's ``lookup`` writer, numbered on their
        own: they never take a number of the landed batches or of any other writer.
        """
        from changelake.storage.fastread import check_lookup_columns, decode_lookup_value

        spec = self._ensure(table) if insert_if_not_exists else self.spec(table)
        if insert_if_not_exists:
            _check_insert_if_not_exists(spec)
        identities = []
        for key in keys:
            check_lookup_columns(spec, list(key), prefix=False)
            identities.append(tuple(repr(decode_lookup_value(spec, k, key[k])) for k in spec.primary_key))
        # The table batch the lookups read (or a later one: then a batch committed meanwhile, and the insert
        # plans again): the insert is planned on it.
        based_on = Storage.state(self.storage.pk_table(spec)).last_batch if insert_if_not_exists else 0
        found = [self._single_row(table, key) for key in keys]
        if not insert_if_not_exists:
            return found
        for _attempt in range(MAX_INSERT_ATTEMPTS):
            missing: dict[tuple, dict[str, Any]] = {}
            for key, identity, row in zip(keys, identities, found, strict=True):
                if row is None:
                    missing.setdefault(identity, key)
            if not missing:
                return found
            self._insert_keys(spec, list(missing.values()), based_on)
            based_on = Storage.state(self.storage.pk_table(spec)).last_batch
            found = [
                row if row is not None else self._single_row(table, key)
                for key, row in zip(keys, found, strict=True)
            ]
        raise CommitConflict(
            f"{spec.full_name}: could not insert the missing keys in {MAX_INSERT_ATTEMPTS} attempts "
            "(other callers kept inserting first); retry"
        )

    def _single_row(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        rows = self.reader.lookup(table, key)
        return rows[0] if rows else None

    def _insert_keys(self, spec: TableSpec, keys: list[dict[str, Any]], based_on: int) -> None:
        """Apply the missing ``keys`` as the table's next batch: ``+I`` records of the primary key columns
        only. A batch id another writer took first is not an error: the caller looks the keys up again."""
        from changelake.engine import merge

        target = list(spec.primary_key)
        merge.check_target_columns(spec, target)  # first_row/versioned: Fluss's message, before any write
        records = [
            {"op": "+I", "data": {k: _staged_key_value(spec, k, key[k]) for k in target}} for key in keys
        ]
        last = Storage.writer_positions(self.storage.pk_table(spec)).get(LOOKUP, 0)
        self.progress(
            f"[{spec.full_name}] lookup: {len(keys)} key(s) not found; inserting them as lookup batch {last + 1}"
        )
        try:
            self._apply_as(spec, LOOKUP, last + 1, records, target_columns=target, based_on=based_on)
        except PlannedOnOldState:
            self.progress(
                f"[{spec.full_name}] lookup: another batch was committed meanwhile; looking up again"
            )
        except BatchRefusedError:
            if Storage.writer_positions(self.storage.pk_table(spec)).get(LOOKUP, 0) == last:
                raise  # refused for another reason than a race
            self.progress(
                f"[{spec.full_name}] lookup: another caller inserted lookup batch {last + 1} first; looking up "
                "again"
            )

    def status(self) -> list[dict[str, Any]]:
        """Per table: last batch, rows, batch snapshots, changelog records, pending landed batches; a spec file
        that did not load is a row with its ``problem``."""
        rows = landing_status(self.reader, self.reader.status())  # incomplete and changed landed files too
        rows = kafka.topic_status(self.reader, rows)  # how far behind their topics Kafka-sourced tables are
        broken = self.specs().status_rows(rows[0] if rows else None)
        return sorted(rows + broken, key=lambda r: r["table"]) if broken else rows

    @writes_private
    def maintain(
        self,
        table: str | None = None,
        *,
        full: bool = False,
        compaction: bool = True,
        expiry: bool = True,
        orphans_older_than_s: float | None = None,
    ) -> list:
        """Maintain a table (or every table that exists): the compactions due (``full``: every partition with
        delta or delete files rewritten), expiry of the snapshots its retention lets go, and with
        ``orphans_older_than_s`` the orphan sweep. Spark only for a compaction larger than
        ``CHANGELAKE_SPARK_COMPACT_BYTES`` (its buckets merged in Spark tasks; the session started then). See
        :mod:`changelake.engine.maintain`; a :class:`~changelake.engine.maintain.Report` per table."""
        from changelake.engine.maintain import maintain

        names = (
            [table]
            if table is not None
            else [n for n, s in sorted(self.specs().items()) if self.storage.exists(s)]
        )
        reports = []
        for name in names:
            spec = self.spec(name)
            self.applier.wait_for_maintenance(spec)
            self.progress(
                f"[{spec.full_name}] maintenance: "
                + ", ".join(
                    w
                    for w, on in (
                        ("compaction", compaction),
                        ("expiry", expiry),
                        ("orphan sweep", orphans_older_than_s is not None),
                    )
                    if on
                )
            )
            reports.append(
                maintain(
                    self.storage,
                    spec,
                    self.applier.roll_forward_changelog,
                    full=full,
                    compaction=compaction,
                    expiry=expiry,
                    orphans_older_than_s=orphans_older_than_s,
                    spark=lambda: self.spark,
                    progress=self.progress,
                )
            )
        return reports

    def repair(self, table: str | None = None, on_collision: str = "refuse") -> list:
        """Bring a table's (or every existing table's) stored rows to their columns' declared precision, keys
        included, in one commit per table (docs/semantics.md §15): rows written before changelake enforced it.
        Keys that become equal are refused unless ``on_collision`` is ``"first"`` or ``"last"`` (the row that
        stays, by the stored key before the cut). No Spark. A
        :class:`~changelake.engine.repair.Repair` per table."""
        from changelake.engine.repair import repair_table

        names = (
            [table]
            if table is not None
            else [n for n, s in sorted(self.specs().items()) if self.storage.exists(s)]
        )
        return [repair_table(self.storage, self.spec(n), on_collision, self.progress) for n in names]

    def dead_letters(self, table: str, batch_id: int | None = None) -> list[dict[str, Any]]:
        """Quarantined records of a table (``on-bad-record: quarantine``): batch, file, line, field, reason,
        raw text — read from the dead-letter files the committed batches name."""
        return self.reader.dead_letters(table, batch_id)

    @writes_private
    def register_views(self, names: list[str] | None = None) -> list[str]:
        """Register each table's committed landed input as the global temp view ``global_temp.<ns>__<t>__input``
        (dbt's sources of the aggregation tables read it). The rows and the changelog need no view: Spark reads
        them as Iceberg tables, ``changelake.<ns>.<t>`` and ``changelake.<ns>.<t>__changelog``
        (:meth:`iceberg_table`). A table whose input cannot be given as committed gets a view that raises the
        reason when read (:meth:`input_view`); the other tables' views are registered as usual."""
        registered = []
        for name in names or sorted(self.specs()):
            spec = self.spec(name)
            if not self.storage.exists(spec):
                continue
            self.applier.roll_forward_changelog(spec)  # a crashed apply's changelog, before readers look
            view = f"{spec.namespace}__{spec.table}__input"
            self.input_view(name).createOrReplaceGlobalTempView(view)
            registered.append(f"global_temp.{view}")
        return registered

    def input_records(self, table: str):
        """Every record the table's committed landed batches applied, as delivered (redeliveries included):
        :meth:`input_arrow` as a DataFrame with the declared types. dbt recomputes aggregation tables exactly
        from this (the ``__input`` view)."""
        spec = self.spec(table)
        return sparkread.to_view_types(spec, self.spark.createDataFrame(self._committed_input(spec)))

    def input_arrow(self, table: str) -> pa.Table:
        """The records :meth:`input_records` holds, without Spark: a pyarrow Table.

        Columns: the table's columns, ``_op``, ``_batch_id``, ``_line`` (line, or Parquet row) and the Kafka
        ``_topic``, ``_partition``, ``_offset`` (null for formats without them), in batch and line order.
        Each committed batch is read from its landed files **as it was applied**: with the columns and the
        ``source:`` settings recorded in its snapshot (a spec file edited later changes nothing here), after
        checking the files against the checksum its commit recorded. A landed file changed or missing since
        its batch committed is a ChangelakeError naming the file and the batch: the exact recomputation must
        not run on input the table never saw. Quarantined records are not part of the input. A batch read
        from a Kafka topic is read again from the offset ranges its snapshot names, decoded the same way
        (``_line`` is the offset); offsets retention or compaction took since are a ChangelakeError naming
        them. Batches that did not come from landed files or topics (API records, lookup inserts, ``apply
        --file`` from elsewhere) have no input here. A batch committed before the apply recorded how it read it (no ``changelake.input`` in
        its snapshot) is read from the landed file of its id with today's source settings, still checked
        against its checksum; that such a file went missing cannot be told from a batch never landed."""
        return self._committed_input(self.spec(table))

    def input_view(self, table: str):
        """The ``__input`` view's DataFrame: :meth:`input_records`, or, if the table's committed input cannot
        be given (a landed file changed or missing since its commit), a DataFrame with the same columns that
        raises that error when it is read -- the dbt models reading this table's input fail with the message,
        and every other view and model is unaffected. The error also goes to the progress log."""
        spec = self.spec(table)
        try:
            return self.input_records(table)
        except ChangelakeError as e:
            self.progress(f"[{spec.full_name}] __input view: {e}")
            return self._failing_input(spec, str(e))

    def _failing_input(self, spec: TableSpec, message: str):
        from pyspark.sql import functions as F

        empty = sparkread.to_view_types(spec, self.spark.createDataFrame(_input_schema(spec).empty_table()))
        # A filter, not a projection: a query that reads no column (count(*)) still evaluates it.
        row = self.spark.range(1).select(*[F.lit(None).cast(f.dataType).alias(f.name) for f in empty.schema])
        return empty.unionByName(row.where(F.raise_error(F.lit(message)).isNull()))

    def _committed_input(self, spec: TableSpec) -> pa.Table:
        """Read every committed landed or topic batch of ``spec``'s table as it was applied (see
        :meth:`input_arrow`)."""
        import pyarrow as pa

        parts = []
        landing = scan_landing(self.settings.landing_dir, spec)
        directory = self.settings.landing_dir / spec.full_name
        for _snapshot_id, summary in Storage.batch_history(self.storage.pk_table(spec)):
            batch_id = summary.batch_id
            if summary.input is not None:
                how = summary.input
                if how.get("kafka"):
                    parts.append(
                        _project(_topic_batch_input(spec, batch_id, how, summary, self.settings), spec)
                    )
                    continue
                if not how.get("landed"):
                    continue  # API records or a file from elsewhere: no landed input
                paths = [directory / name for name in how["files"]]
                batch_spec = _as_applied(spec, how, batch_id)
                fmt, target_columns = how.get("format"), how.get("target_columns")
                merge_mode = how.get("merge_mode")
            else:
                # Committed before batches recorded how they were read: the landed file, today's source.
                path = landing.batches.get(batch_id)
                if path is None:
                    continue
                paths, batch_spec, fmt, target_columns = [path], spec, None, read_manifest(path)
                merge_mode = None
            _verify(spec, batch_id, paths, batch_spec, fmt, target_columns, summary.checksum, merge_mode)
            parts.append(_project(_batch_input(batch_id, paths, batch_spec, fmt), spec))
        return pa.concat_tables(parts) if parts else _input_schema(spec).empty_table()


def _topic_batch_input(
    spec: TableSpec, batch_id: int, how: dict, summary: BatchSummary, settings: Settings
) -> pa.Table:
    """A topic batch's records as delivered, read again from the offset ranges its snapshot recorded (Kafka's
    records at given offsets never change; retention and compaction can only take some away, which is an
    error here: the drift checks must not recompute from less than the batch applied)."""
    from changelake.inputs.readers import delivered_topic_records

    batch_spec = _as_applied(spec, how, batch_id)
    config_spec = spec if spec.source_options.kafka is not None else batch_spec
    ranges = [kafka.PartitionRange(str(t), int(p), int(a), int(b)) for t, p, a, b in how["kafka"]]
    what = f"batch {batch_id}'s input"
    lines = kafka.reread(kafka.client_config(config_spec, settings), ranges, batch_spec, what)
    records, messages = delivered_topic_records(batch_id, lines, batch_spec)
    committed = int(summary.source.get("messages", 0))
    if messages != committed:
        raise ChangelakeError(
            f"{spec.full_name}: {what} was {committed} message(s) at offsets {_describe_ranges(ranges)}; the topic "
            f"now holds {messages} there (compaction or deletion since): that input cannot be shown again"
        )
    return records


def _describe_ranges(ranges: list[kafka.PartitionRange]) -> str:
    return ", ".join(f"{r.topic}/{r.partition}:{r.start}..{r.end - 1}" for r in ranges if r.size)


def _own_records(spec: TableSpec, fmt: str) -> TableSpec:
    """The spec records given to the API (and SQL statements, lookup inserts) are decoded with: the table's
    columns, read in the format changelake staged them in, in the order given -- not with the ``source:``
    settings of the table's landed input (its envelope's ordering field, dedup by Kafka offsets, quarantine),
    which such records do not carry: a bad record fails the write, and nothing is quarantined."""
    return dataclasses.replace(spec, source={"format": fmt})


def _row_counts(counts: dict[str, int]) -> dict[str, int]:
    """The row counts a statement reports, from a batch's counts."""
    return {k: int(counts.get(k, 0)) for k in ("inserted", "updated", "deleted", "ignored")}


def _finite(value: Any) -> Any:
    """NaN and infinities as the strings the JSON readers accept ("NaN", "Infinity", "-Infinity"): the bare
    literals json.dumps would write are not JSON, and the readers refuse them."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _input_schema(spec: TableSpec) -> pa.Schema:
    import pyarrow as pa

    from changelake.inputs.readers import INPUT_META

    return pa.schema(
        [pa.field(c.name, c.type.arrow_type()) for c in spec.columns]
        + [pa.field(n, t) for n, t in INPUT_META]
    )


def _as_applied(spec: TableSpec, how: dict, batch_id: int) -> TableSpec:
    """The spec batch ``batch_id`` was decoded with: the columns it had then (columns are only ever added,
    never retyped) and the ``source:`` section recorded with its commit."""
    columns = tuple(c for c in spec.columns if c.name in set(how["columns"]))
    if len(columns) != len(how["columns"]):
        gone = sorted(set(how["columns"]) - set(spec.column_names))
        raise ChangelakeError(
            f"{spec.full_name}: batch {batch_id} was applied with columns {gone} the table no longer has"
        )
    return dataclasses.replace(spec, columns=columns, source=dict(how.get("source") or {}))


def _verify(
    spec: TableSpec,
    batch_id: int,
    paths: list[LandedPath],
    batch_spec: TableSpec,
    fmt: str | None,
    target_columns: list[str] | None,
    checksum: str | None,
    merge_mode: str | None = None,
) -> None:
    """Refuse landed files that are not the ones batch ``batch_id`` committed (the checksum the apply
    computed: contents, format, target columns and merge mode)."""
    from changelake.inputs.decode import plan_batch

    names = ", ".join(str(p) for p in paths)
    missing = [p for p in paths if not landed_exists(p)]
    if missing:
        raise ChangelakeError(
            f"{spec.full_name}: landed file {missing[0]} of batch {batch_id} is missing; the batch was "
            "committed from it, and its input cannot be shown without it (restore the file)"
        )
    if plan_batch(paths, batch_spec, fmt, target_columns, merge_mode).checksum != checksum:
        raise ChangelakeError(
            f"{spec.full_name}: landed file {names} of batch {batch_id} changed since the batch was committed "
            f"(its checksum is not the committed {str(checksum)[:12]}…); the input view shows what each batch "
            "applied, so restore the file as it was"
        )


def _batch_input(batch_id: int, paths: list[LandedPath], spec: TableSpec, fmt: str | None) -> pa.Table:
    """One batch's records as delivered, decoded with ``spec`` (the batch's own); quarantined ones left out."""
    import pyarrow as pa

    from changelake.inputs.readers import JSON_FORMATS, delivered_records, format_for, read_batch

    if fmt is not None:
        spec = dataclasses.replace(spec, source={**spec.source, "format": fmt})
    if all(format_for(p, spec) in JSON_FORMATS for p in paths):
        return pa.concat_tables(delivered_records({batch_id: p}, spec) for p in paths)
    decoded = read_batch(paths, spec)  # Parquet: one file, in arrival order
    bad = {d["line"] for d in decoded.dead_letters}
    lines = [row for row in range(1, decoded.messages + 1) if row not in bad]
    records = decoded.records
    n = records.num_rows
    columns = {c.name: records.column(c.name) for c in spec.columns}
    meta = {
        "_op": records.column("_op"),
        "_batch_id": pa.array([batch_id] * n, pa.int64()),
        "_line": pa.array(lines[:n], pa.int64()),
    }
    schema = _input_schema(spec)
    return pa.table(
        [columns.get(f.name, meta.get(f.name, pa.nulls(n, f.type))) for f in schema], schema=schema
    )


def _project(batch: pa.Table, spec: TableSpec) -> pa.Table:
    """A batch's input in the table's current columns (columns added after the batch are null)."""
    import pyarrow as pa

    schema = _input_schema(spec)
    n = batch.num_rows
    have = set(batch.column_names)
    return pa.table(
        [batch.column(f.name) if f.name in have else pa.nulls(n, f.type) for f in schema], schema=schema
    )


def _check_insert_if_not_exists(spec: TableSpec) -> None:
    """Fluss's rule for a lookuper with insertIfNotExists (``TableLookup.createLookuper``), with its message."""
    not_null = [
        c.name
        for c in spec.columns
        if not c.nullable and c.name not in spec.primary_key and c.name != spec.auto_increment_column
    ]
    if not_null:
        raise ChangelakeError(
            f"Lookup with insertIfNotExists enabled cannot be created for table '{spec.full_name}', because it "
            "contains non-nullable columns that are not primary key columns or auto increment columns: "
            f"[{', '.join(not_null)}]. "
        )


def _staged_key_value(spec: TableSpec, name: str, value: Any) -> Any:
    """A lookup key value as the changelog-json reader takes it, decoding to the value the lookup used: the
    value as given if the reader takes it (text of textual columns), else CLI text parsed as JSON (numbers,
    booleans), else the JSON form of a Python value (dates, decimals, bytes) or of the stored value."""
    from changelake.storage.fastread import decode_lookup_value

    stored = decode_lookup_value(spec, name, value)
    decode = spec.column(name).type.decode_json
    candidates = [value, stored]
    if isinstance(value, str):
        candidates.insert(1, lambda: json.loads(value))
    for candidate in candidates:
        try:
            staged = candidate() if callable(candidate) else candidate
            if not isinstance(staged, bool | int | float | str):
                staged = json_default(staged)
            if decode(staged) == stored:
                return staged
        except (ValueError, TypeError, ArithmeticError, RecursionError):
            continue
    raise ChangelakeError(f"lookup value for column '{name}': {value!r} cannot be written as it is read")
