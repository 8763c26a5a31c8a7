"""Iceberg storage of PK tables and their changelog tables, through pyiceberg only.

Layout per spec ``ns.t``:

* ``ns.t`` — the rows, identity-partitioned by the partition keys and a hidden ``_bucket`` column.
* ``ns.t__changelog`` — Fluss's ``$changelog``: the row columns plus ``_change_type``, ``_batch_id``,
  ``_bucket``, ``_log_offset`` (gapless per bucket: each (partition, bucket) is its own log, as in Fluss) and
  ``_commit_timestamp``; partitioned by ``_batch_id``.

The state of a table is its current snapshot's summary (:mod:`changelake.storage.summary`): the last batch
id, its input checksum, the changelog's end offset and the manifest of changelog files for that batch. The PK
table's snapshot is the commit point of a batch; the changelog commit is a deterministic roll-forward.
"""

from __future__ import annotations

import functools
import json
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot, ancestors_of
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortField, SortOrder
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import IntegerType, LongType, NestedField, StringType, TimestamptzType

from changelake import evolution, objectstore
from changelake.config import Settings
from changelake.errors import ChangelakeError, missing_table
from changelake.lru import BoundedLRU
from changelake.spec import TableSpec
from changelake.storage import (
    files,
    history,
    lineage,
    pyiceberg_fixes,  # its fixes are installed on import
    summary,
)
from changelake.storage.files import FILE_PATH_ID, POS_ID, Layout, TableFile, int_bound, int_bounds
from changelake.storage.rowdelta import commit_row_delta
from changelake.storage.summary import BatchSummary, ChangelogSummary, WriterPosition

CHANGELOG_SUFFIX = "__changelog"
#: Iceberg's own properties that keep a table's metadata files few: each commit writes a new metadata file and
#: deletes those older than the last ten (readers hold a location for milliseconds, not ten commits).
METADATA_RETENTION = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "10",
}

__all__ = ["Storage", "TableState", "CommitFailedException"]


@dataclass(frozen=True)
class TableState:
    """What the PK table's current snapshot says about applied batches."""

    snapshot_id: int | None
    last_batch: int
    checksum: str | None
    log_end_offset: int
    changelog_manifest: str | None
    batch: BatchSummary | None = None  # all the current snapshot recorded of its batch (None: no batch yet)


def _open_catalog(name: str, props: dict[str, str]) -> Catalog:
    """Open the catalog; a SQL catalog creates its own tables on first use, and two processes opening a new
    one at once race on that (the loser gets "table ... already exists", or on PostgreSQL a duplicate key), so
    the loser simply opens again."""
    from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

    for attempt in range(3):
        try:
            return load_catalog(name, **props)
        except (OperationalError, ProgrammingError, IntegrityError) as e:
            # SQLite says "already exists"; PostgreSQL "already exists" or a duplicate key in pg_type.
            if not any(s in str(e) for s in ("already exists", "duplicate key value")) or attempt == 2:
                raise
    raise AssertionError("unreachable")


def _server_deletes_old_metadata(catalog: Catalog) -> None:
    """Leave the metadata files that fall out of a table's metadata log to the REST server that wrote them.
    The server writes each commit's metadata file and, with ``write.metadata.delete-after-commit.enabled``
    (changelake's tables set it), deletes the ones the commit dropped from the log, as Java Iceberg's
    metastore commit does; pyiceberg's client then deleted the same files again, found them gone (pyarrow asks
    before it deletes) and logged "Failed to delete metadata file" for each: 3,089 warnings in a run of 1,200
    batches, and a request per file for nothing."""
    setattr(catalog, "_delete_old_metadata", lambda io, base, metadata: None)  # noqa: B010


def _write_ahead_log(catalog: Catalog) -> None:
    """Put a SQLite catalog's file in write-ahead-log mode (the mode stays with the file). A commit then syncs
    the log once, as durably (``synchronous`` stays FULL), instead of syncing a rollback journal and the
    database file: 23 ms a commit on this project's VMs, 5 ms in WAL mode, and a batch commits its PK table
    and its changelog table. Readers, the fast reader's read-only connections included, see every commit; a
    reader no longer blocks a writer. A file another connection holds in a transaction keeps its mode until a
    later open."""
    from sqlalchemy.exc import OperationalError

    try:
        with catalog.engine.connect() as conn:  # type: ignore[attr-defined]
            conn.exec_driver_sql("PRAGMA journal_mode=WAL")
    except OperationalError:
        pass  # locked by another connection: the next open tries again


METADATA_CACHE_ENTRIES = 64

#: The live files of a snapshot, per (table uuid, snapshot id): a snapshot never changes. Bounded by the
#: files held in all (a data file's description is ~4 kB with its column statistics).
MAX_SNAPSHOT_FILES = 20_000
SNAPSHOT_FILES: BoundedLRU[tuple[TableFile, ...]] = BoundedLRU(MAX_SNAPSHOT_FILES, size=len)

#: changelake's state objects (changelog manifests) this process wrote or read, by path: the next batch reads
#: its predecessor's log ends, and the roll-forward the manifest the apply just wrote, without a request. A
#: path is written once (each apply attempt names its own), so an entry never goes stale.
STATE_OBJECTS: BoundedLRU[bytes] = BoundedLRU(16 << 20, size=len)

#: Sizes and serialized footers of Parquet files written for this process (:meth:`Storage.know_written`), by
#: path: describing one for a commit then reads nothing (on an object store, a GET of its footer and a HEAD
#: for its size). Every written path is fresh, so an entry never goes stale. Bounded by the footers' bytes.
WRITTEN_FOOTERS: BoundedLRU[tuple[int, bytes]] = BoundedLRU(32 << 20, size=lambda entry: len(entry[1]))


def _cache_metadata(catalog: Catalog) -> Catalog:
    """Keep a SQL catalog from reading and parsing a table's metadata file again while its location is the
    same: a metadata file is never rewritten (each commit writes a new one), so its parsed form can be shared
    (pyiceberg's metadata objects are frozen). An apply loads its two tables about ten times (state checks,
    the changelog roll-forward, pyiceberg's own load inside each commit), and the file grows with the table's
    history: after 300 batches it is 540 kB and a load took 12.6 ms, all but ~1 ms of it reading and parsing.
    The catalog's row is still read on every load, so a commit by another process is seen at once; committed
    metadata goes into the cache as it is written. Other catalog types return the metadata with the table
    (REST) and are left as they are.

    A commit does not load the table either: pyiceberg's SQL catalog loads it inside ``commit_table`` to check
    the commit's requirements against it and to swap the row only from that metadata location. Here the
    table being committed is that base: its requirements hold on it (it is what the commit was planned on),
    and the row is swapped only if it still names the table's metadata location (``UPDATE ... WHERE
    metadata_location = ...``), so a commit on a table another writer has committed since still fails with
    CommitFailedException, as before, and nothing is changed. (The failing commit leaves its metadata file
    unreferenced, for the orphan sweep; a fresh load would have failed before writing it.)"""
    from pyiceberg.catalog.sql import SqlCatalog

    if not isinstance(catalog, SqlCatalog):
        return catalog
    cache: BoundedLRU[TableMetadata] = BoundedLRU(METADATA_CACHE_ENTRIES)
    convert, commit, load = catalog._convert_orm_to_iceberg, catalog.commit_table, catalog.load_table
    committing = threading.local()  # the table this thread's commit_table is committing, as its base

    def cached_convert(orm_table):
        location = orm_table.metadata_location
        metadata = cache.get(location) if location else None
        if metadata is None or not orm_table.table_namespace or not orm_table.table_name:
            table = convert(orm_table)  # reads the file; raises as pyiceberg does for an incomplete row
            cache.put(table.metadata_location, table.metadata)
            return table
        return Table(
            identifier=Catalog.identifier_to_tuple(orm_table.table_namespace) + (orm_table.table_name,),
            metadata=metadata,
            metadata_location=location,
            io=catalog._load_file_io(metadata.properties, location),
            catalog=catalog,
        )

    def base_or_load(identifier):
        base = getattr(committing, "table", None)
        if base is not None and base.name() == Catalog.identifier_to_tuple(identifier):
            return base
        return load(identifier)

    def cached_commit(table, requirements, updates):
        committing.table = table if table.metadata_location else None
        try:
            response = commit(table, requirements, updates)
        finally:
            committing.table = None
        cache.put(response.metadata_location, response.metadata)
        return response

    setattr(catalog, "_convert_orm_to_iceberg", cached_convert)  # noqa: B010 (mypy: method-assign)
    setattr(catalog, "commit_table", cached_commit)  # noqa: B010
    setattr(catalog, "load_table", base_or_load)  # noqa: B010
    return catalog


class Storage:
    """Catalog access for changelake tables. Only the driver uses it; executors only write files."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._catalog: Catalog | None = None

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            s = self.settings
            props = {
                "type": s.catalog_type,
                "uri": s.catalog_uri,
                "warehouse": s.warehouse,
                # the object store of s3:// tables, for pyiceberg's FileIO (and through table.io, the tasks')
                **objectstore.fileio_properties(s.storage_options),
                **s.catalog_properties,
            }
            if s.catalog_type == "sql" and s.catalog_uri.startswith("sqlite:///"):
                from pathlib import Path

                Path(s.catalog_uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
                if s.warehouse.startswith("file://"):
                    Path(s.warehouse[len("file://") :]).mkdir(parents=True, exist_ok=True)
            catalog = _open_catalog(s.catalog_name, props)
            if s.catalog_type == "sql" and s.catalog_uri.startswith("sqlite:"):
                _write_ahead_log(catalog)
            if s.catalog_type == "rest":
                _server_deletes_old_metadata(catalog)
            self._catalog = _cache_metadata(catalog)
        return self._catalog

    # --- schemas ---------------------------------------------------------------------------------------
    @staticmethod
    def pk_schema(spec: TableSpec) -> Schema:
        fields = _column_fields(spec)
        fields.append(NestedField(len(fields) + 1, "_bucket", IntegerType(), required=False))
        return Schema(*fields, identifier_field_ids=[])

    @staticmethod
    def changelog_schema(spec: TableSpec) -> Schema:
        fields = _column_fields(spec)
        n = len(fields)
        fields += [
            NestedField(n + 1, "_change_type", StringType(), required=False),
            NestedField(n + 2, "_batch_id", LongType(), required=False),
            NestedField(n + 3, "_bucket", IntegerType(), required=False),
            NestedField(n + 4, "_log_offset", LongType(), required=False),
            NestedField(n + 5, "_commit_timestamp", TimestamptzType(), required=False),
        ]
        return Schema(*fields)

    @staticmethod
    def field_ids(table: Table) -> dict[str, int]:
        """The Iceberg field id of each of the table's columns, by name: what every Parquet file changelake
        writes carries (``engine.buckets.with_field_ids``)."""
        return {f.name: f.field_id for f in table.schema().fields}

    # --- tables ----------------------------------------------------------------------------------------
    def create(
        self,
        spec: TableSpec,
        progress: Callable[[str], None] | None = None,
        before_new: Callable[[], None] | None = None,
    ) -> TableSpec:
        """Create the PK table and its changelog table, or bring existing ones to ``spec``; idempotent.

        An existing table keeps its stored spec unless ``spec`` differs from it only by changes Fluss's
        ALTER TABLE allows (:func:`changelake.evolution.plan`; anything else is refused, saying what differs):
        those are applied as one Iceberg schema update per table, the changelog table first and then the PK
        table, whose stored spec is the commit point (a crash in between converges on the next call).
        Returns the spec reads and writes use: the stored layout with ``spec``'s source/datagen/comment.
        ``before_new`` runs (and may refuse) before a PK table that does not exist yet is created.
        """
        if CHANGELOG_SUFFIX in spec.table:
            if before_new is not None:
                before_new()  # the naming rule refuses it in its own words
            raise ChangelakeError(
                f"Table name {spec.table!r} may not contain '{CHANGELOG_SUFFIX}' (reserved)"
            )
        spec_json = _spec_json(spec)
        existing = self._load(spec.namespace, spec.table)
        if existing is not None:
            stored_json = existing.properties.get(summary.SPEC)
            stored = evolution.stored_spec(stored_json, spec.full_name, spec) if stored_json else spec
            check_stored_types(existing, stored)
            change = evolution.plan(stored, spec, origin="the given spec")
            if change:
                if progress is not None:
                    progress(f"[{spec.full_name}] altering the table: {change.describe()}")
                for name in (spec.table + CHANGELOG_SUFFIX, spec.table):
                    self.evolve_table(spec, name)
            else:
                spec = evolution.with_sections(stored, spec)
        else:  # the namespace only now: an existing table's has one (no catalog round trips per apply)
            if before_new is not None:
                before_new()
            try:
                self.catalog.create_namespace(spec.namespace)
            except Exception:  # already there, or a racing creator just made it
                if spec.namespace not in {ns[0] for ns in self.catalog.list_namespaces()}:
                    raise
            schema = self.pk_schema(spec)
            # Partitioned by the partition keys only: the bucket is a sorted column, so a merge-on-read batch
            # writes one delete file and one data file per partition however many buckets it touches
            # (storage/files.py). Tables created before kept _bucket as a partition column and still work.
            fields = [schema.find_field(k) for k in spec.partition_keys]
            partition_spec = PartitionSpec(
                *[
                    PartitionField(f.field_id, 1000 + i, IdentityTransform(), f.name)
                    for i, f in enumerate(fields)
                ]
            )
            order = ["_bucket", *spec.primary_key]
            self._create(spec, spec.table, schema, partition_spec, spec_json, _sort_order(schema, order))
        if self._load(spec.namespace, spec.table + CHANGELOG_SUFFIX) is None:
            self._create_changelog(spec)
        return spec

    def _create_changelog(self, spec: TableSpec) -> None:
        # Unpartitioned, sorted by batch: maintenance merges the small files of consecutive batches, and readers
        # prune files by their _batch_id bounds. (Tables created before are partitioned by _batch_id: one file
        # or more per batch, which readers prune the same way.)
        schema = self.changelog_schema(spec)
        order = ["_batch_id", *spec.partition_keys, "_bucket", "_log_offset"]
        self._create(
            spec,
            spec.table + CHANGELOG_SUFFIX,
            schema,
            PartitionSpec(),
            _spec_json(spec),
            _sort_order(schema, order),
        )

    def evolve_table(self, spec: TableSpec, name: str) -> None:
        """Bring table ``name`` (``spec.table`` or its changelog table) to ``spec`` in one commit: add the
        columns it lacks (before the hidden columns, where a new table has them), the name mapping for them,
        and the ``changelake.spec`` property. Idempotent; a missing changelog table is created."""
        spec_json = _spec_json(spec)
        for _attempt in range(3):
            table = self._load(spec.namespace, name)
            if table is None and name != spec.table:
                self._create_changelog(spec)
                return
            if table is None:
                raise ChangelakeError(f"Table {spec.namespace}.{name} disappeared while being altered")
            have = {f.name: f for f in table.schema().fields}
            for c in spec.columns:
                if c.name in have and have[c.name].field_type != c.type.iceberg_type():
                    raise ChangelakeError(
                        f"Table {spec.namespace}.{name} already has a column '{c.name}' of type "
                        f"{have[c.name].field_type}, not {c.type} as the spec says"
                    )
            missing = [c for c in spec.columns if c.name not in have]
            if not missing and table.properties.get(summary.SPEC) == spec_json:
                return
            first_hidden = "_bucket" if name == spec.table else "_change_type"
            try:
                with table.transaction() as tx:
                    if missing:
                        # The name mapping (for files written before they carried field ids) follows the added fields.
                        with tx.update_schema() as update:
                            for c in missing:
                                update.add_column(
                                    c.name, c.type.iceberg_type(), doc=c.type.storage_doc(), required=False
                                )
                            for c in missing:
                                update.move_before(c.name, first_hidden)
                    tx.set_properties({summary.SPEC: spec_json})
                return
            except CommitFailedException:
                continue  # another writer committed first: re-read and redo what is still missing
        raise ChangelakeError(f"Could not alter table {spec.namespace}.{name}: lost 3 commit races; retry")

    def _create(
        self,
        spec: TableSpec,
        name: str,
        schema: Schema,
        partition_spec: PartitionSpec,
        spec_json: str,
        sort_order: SortOrder | None = None,
    ) -> None:
        # No automatic commit retries: after a conflict the applier re-reads state and decides (exactly-once).
        # Files carry the schema's field ids; those written before they did (tables made before) are read
        # through the name mapping. The schemas above number their fields 1..n in order, as create_table
        # assigns them, so the mapping is known before creation and goes in with it (no second commit that a
        # racing applier could observe missing).
        props = {
            "commit.retry.num-retries": "0",
            summary.SPEC: spec_json,
            "format-version": "2",
            "schema.name-mapping.default": schema.name_mapping.model_dump_json(),
            **METADATA_RETENTION,
        }
        try:
            table = self.catalog.create_table(
                (spec.namespace, name),
                schema,
                partition_spec=partition_spec,
                sort_order=sort_order or UNSORTED_SORT_ORDER,
                properties=props,
            )
        except Exception as e:  # a racing creator
            if self._load(spec.namespace, name) is not None:
                return
            raise ChangelakeError(f"Cannot create table {spec.namespace}.{name}: {e}") from e
        if table.schema().name_mapping != schema.name_mapping:  # guard: the catalog renumbered the fields
            raise ChangelakeError(f"Table {spec.namespace}.{name} was created with unexpected field ids")

    def _load(self, namespace: str, name: str) -> Table | None:
        try:
            return self.catalog.load_table((namespace, name))
        except NoSuchTableError:
            return None

    def pk_table(self, spec: TableSpec) -> Table:
        table = self._load(spec.namespace, spec.table)
        if table is None:
            raise missing_table(spec.full_name)
        check_stored_types(table, spec)
        return table

    def changelog_table(self, spec: TableSpec) -> Table:
        table = self._load(spec.namespace, spec.table + CHANGELOG_SUFFIX)
        if table is None:
            raise missing_table(spec.full_name, changelog=True)
        check_stored_types(table, spec)
        return table

    def stored_spec(self, namespace: str, name: str) -> str | None:
        """The spec JSON a table was created from, or None if the table does not exist."""
        table = self._load(namespace, name)
        return table.properties.get(summary.SPEC) if table is not None else None

    def exists(self, spec: TableSpec) -> bool:
        return self._load(spec.namespace, spec.table) is not None

    def drop(self, spec: TableSpec) -> None:
        for name in (spec.table, spec.table + CHANGELOG_SUFFIX):
            if self._load(spec.namespace, name) is not None:
                self.catalog.purge_table((spec.namespace, name))

    # --- state -----------------------------------------------------------------------------------------
    @staticmethod
    def state_snapshot(table: Table) -> Snapshot | None:
        """The snapshot holding the table's state: the current one, or, after other writers committed (Iceberg's
        own maintenance from Spark, another engine), the newest of its ancestors that changelake committed,
        else the one the :data:`~changelake.storage.lineage.STATE_TAG` tag names
        (:func:`changelake.storage.lineage.state_snapshot`). None: no batch yet."""
        current = table.current_snapshot()
        if current is None or lineage.carries_state(summary.properties(current)):
            return current  # the common case: nothing to walk
        ref = table.metadata.refs.get(lineage.STATE_TAG)
        tagged = table.snapshot_by_id(ref.snapshot_id) if ref is not None else None
        found = lineage.state_snapshot(
            ((s.snapshot_id, summary.properties(s)) for s in ancestors_of(current, table.metadata)),
            (tagged.snapshot_id, summary.properties(tagged)) if tagged is not None else None,
        )
        return table.snapshot_by_id(found[0]) if found is not None else None

    @staticmethod
    def state(table: Table) -> TableState:
        """What the PK table's state snapshot (:meth:`state_snapshot`) says; ``snapshot_id`` is the current
        snapshot's, whoever committed it (a changelog table's state: :meth:`changelog_state`)."""
        snap = Storage.state_snapshot(table)
        current = table.current_snapshot()
        batch = BatchSummary.from_snapshot(snap)
        return TableState(
            snapshot_id=current.snapshot_id if current else None,
            last_batch=batch.batch_id if batch else 0,
            checksum=batch.checksum if batch else None,
            log_end_offset=batch.log_end_offset if batch else 0,
            changelog_manifest=batch.changelog_manifest if batch else None,
            batch=batch,
        )

    @staticmethod
    def changelog_state(table: Table) -> ChangelogSummary | None:
        """The last batch a changelog table holds (its state snapshot's summary; None: none yet)."""
        return ChangelogSummary.from_snapshot(Storage.state_snapshot(table))

    @staticmethod
    def state_properties(table: Table) -> dict[str, str]:
        """changelake's properties of the state snapshot: what a compaction's snapshot carries on."""
        props = summary.properties(Storage.state_snapshot(table))
        return {k: v for k, v in props.items() if k.startswith(summary.PREFIX)}

    @staticmethod
    def last_commit(table: Table) -> dict[str, Any]:
        """Who committed the table's current snapshot (:func:`changelake.storage.lineage.committer`)."""
        snap = table.current_snapshot()
        if snap is None:
            return lineage.committer(None, {}, None)
        props = {
            **summary.properties(snap),
            "operation": snap.summary.operation.value if snap.summary else "",
        }
        return lineage.committer(snap.snapshot_id, props, snap.timestamp_ms)

    @staticmethod
    def batch_snapshots(table: Table) -> list[Snapshot]:
        """Snapshots of the main branch that committed a batch, oldest first (batch ids start at 1)."""
        return Storage.batch_snapshots_after(table, 0)

    @staticmethod
    def batch_snapshots_after(table: Table, batch_id: int) -> list[Snapshot]:
        """The main branch's snapshots that committed a batch after ``batch_id``, oldest first: walked back
        from the current snapshot only as far as needed, so a roll-forward's cost does not grow with the
        table's history."""
        current = table.current_snapshot()
        newer: list[Snapshot] = []
        if current is None:
            return newer
        for snap in ancestors_of(current, table.metadata):
            committed = summary.batch_of(summary.properties(snap))
            if committed is None:
                continue
            if committed <= batch_id:
                break
            newer.append(snap)
        return list(reversed(newer))

    def snapshot_for_batch(self, table: Table, batch_id: int) -> Snapshot | None:
        """The retained snapshot that committed batch ``batch_id`` (None: not retained)."""
        for snap in self.batch_snapshots_after(table, batch_id - 1):
            if summary.batch_of(summary.properties(snap)) == batch_id:
                return snap
        return None

    @staticmethod
    def batch_history(table: Table) -> list[tuple[int, BatchSummary]]:
        """Every batch the table took within its history's window, oldest first, as (snapshot id, summary):
        the expired batches from the history (:mod:`changelake.storage.history`), then the retained ones."""
        return history.batches(
            history.read(functools.partial(_read_bytes, table), table.properties),
            [(s.snapshot_id, summary.properties(s)) for s in Storage.batch_snapshots(table)],
        )

    @staticmethod
    def writer_positions(table: Table, state: TableState | None = None) -> dict[str, int]:
        """Every writer's last number (:class:`~changelake.storage.summary.WriterPosition`), as the table's
        latest batch recorded them; for a table whose batches did not record them yet, told once from its batch
        history (:func:`~changelake.storage.summary.writer_positions`; the next batch records them)."""
        batch = (state or Storage.state(table)).batch
        if batch is None:
            return {}
        if batch.writers is not None:
            return dict(batch.writers)
        return summary.writer_positions(b for _, b in Storage.batch_history(table))

    @staticmethod
    def writer_batch(table: Table, position: WriterPosition) -> tuple[int, BatchSummary] | None:
        """The batch a writer committed as number ``position.seq``, as (snapshot id, summary), newest first
        among the retained snapshots, then in the batch history; None when neither holds it (its batch is
        older than the history keeps, or it was never committed)."""
        current = table.current_snapshot()
        if current is not None:
            for snap in ancestors_of(current, table.metadata):
                props = summary.properties(snap)
                if summary.batch_of(props) is None or not summary.may_hold(props, position):
                    continue  # a replay check may walk every retained snapshot: decode only a candidate
                batch = BatchSummary.from_properties(props)
                if batch.position == position:
                    return snap.snapshot_id, batch
        for entry in reversed(history.read(functools.partial(_read_bytes, table), table.properties)):
            if entry.batch.position == position:
                return entry.snapshot_id, entry.batch
        return None

    @staticmethod
    def expired_batch(table: Table, batch_id: int) -> history.Entry | None:
        """Batch ``batch_id`` as the history keeps it, once its snapshot has expired (None: not there)."""
        for chunk in history.chunks(table.properties):
            if chunk.first <= batch_id <= chunk.last:
                for entry in history.decode(_read_bytes(table, chunk.path)):
                    if entry.batch.batch_id == batch_id:
                        return entry
        return None

    def expired_batch_error(self, table: Table, batch_id: int) -> ChangelakeError:
        """What a read of batch ``batch_id``'s snapshot says when it is not retained."""
        name = ".".join(table.name())
        retained = [summary.batch_of(summary.properties(s)) for s in self.batch_snapshots(table)]
        kept = f"batches {retained[0]}..{retained[-1]}" if retained else "no batch"
        if self.expired_batch(table, batch_id) is not None:
            return ChangelakeError(
                f"{name}: batch {batch_id} was applied, but its snapshot has expired (snapshot.num-retained.min/"
                f"max, snapshot.time-retained); snapshots are retained for {kept}"
            )
        return ChangelakeError(f"{name}: batch {batch_id} is not in the table's history (snapshots: {kept})")

    @staticmethod
    def snapshot_summary(snapshot: Snapshot) -> dict[str, str]:
        """A snapshot's raw summary properties (Iceberg's own too); :class:`BatchSummary` decodes a batch's."""
        return summary.properties(snapshot)

    # --- files -----------------------------------------------------------------------------------------
    @staticmethod
    def layout(table: Table) -> Layout:
        """The table's identity partition columns (a PK table's partition keys, and ``_bucket`` for one
        created before merge-on-read)."""
        schema = table.schema()
        return Layout(tuple(schema.find_field(f.source_id).name for f in table.spec().fields))

    @staticmethod
    def table_files(table: Table, snapshot_id: int | None = None) -> list[TableFile]:
        """The live files of the current snapshot (or of ``snapshot_id``), data and position-delete files:
        read from its manifests once per snapshot, or derived by :meth:`commit_files` from the snapshot it
        replaced (:data:`SNAPSHOT_FILES`)."""
        snapshot = table.current_snapshot() if snapshot_id is None else table.snapshot_by_id(snapshot_id)
        if snapshot is None:
            if snapshot_id is not None:
                raise ChangelakeError(f"{'.'.join(table.name())}: no snapshot {snapshot_id}")
            return []
        key = (str(table.metadata.table_uuid), snapshot.snapshot_id)
        files = SNAPSHOT_FILES.get(key)
        if files is None:
            describe = _file_describer(table)
            files = tuple(
                describe(entry)
                for manifest in snapshot.manifests(table.io)
                if manifest.added_files_count or manifest.existing_files_count
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
            )
            SNAPSHOT_FILES.put(key, files)
        return list(files)

    @staticmethod
    def data_files(table: Table, snapshot_id: int | None = None) -> list[TableFile]:
        """The live data files of a snapshot (:meth:`table_files` without the delete files)."""
        return [f for f in Storage.table_files(table, snapshot_id) if not f.is_delete]

    @staticmethod
    def know_written(written: dict[str, tuple[int, bytes]]) -> None:
        """Sizes and serialized footers of Parquet files just written (by a batch's tasks), for
        :meth:`to_data_files` to describe them from (:data:`WRITTEN_FOOTERS`)."""
        for path, entry in written.items():
            WRITTEN_FOOTERS.put(path, entry)

    @staticmethod
    def to_data_files(table: Table, paths: list[str]) -> list[DataFile]:
        """Describe written Parquet files for Iceberg (reads only their footers, or none for the files
        :meth:`know_written` was told of), in the table's sort order (``sort_order_id``). Local footers are read one
        after the other: describing one is Python holding the GIL, and a thread pool only added its switching
        (2 files: 3.0 ms pooled, 2.0 ms in turn); remote ones in parallel, for their round trips."""
        if not paths:
            return []
        # changelake writes every file in the table's declared order ((_bucket, key); a changelog's by batch):
        # said so, as Iceberg's writers do, so that a file without it is known to be another writer's.
        order = table.sort_order()
        describe = functools.partial(
            pyiceberg_fixes.describe_parquet,
            table.io,
            table.metadata,
            sort_order_id=order.order_id if order.fields else None,
        )
        known = {p: entry for p in paths if (entry := WRITTEN_FOOTERS.get(p)) is not None}
        if known:
            unknown = [p for p in paths if p not in known]
            by_path = {p: describe(p, written=known[p]) for p in known}
            by_path.update(zip(unknown, Storage.to_data_files(table, unknown), strict=True))
            return [by_path[p] for p in paths]
        if len(paths) > 1 and any(_local_path(p) is None for p in paths):
            with ThreadPoolExecutor(max_workers=8) as pool:
                described = list(pool.map(describe, paths))
        else:
            described = [describe(p) for p in paths]
        return described

    @staticmethod
    def to_delete_file(table: Table, path: str, stats: dict[str, Any], size: int, partition: Any) -> DataFile:
        """Describe a written position-delete file for Iceberg from what its writer knew (:func:`delete_stats`),
        in the Iceberg ``partition`` (a pyiceberg Record) of the data files it names."""
        from pyiceberg.conversions import to_bytes
        from pyiceberg.manifest import DataFileContent, FileFormat
        from pyiceberg.types import LongType, StringType

        lower = {
            FILE_PATH_ID: to_bytes(StringType(), stats["path_lower"]),
            POS_ID: to_bytes(LongType(), stats["pos_lower"]),
        }
        upper = {
            FILE_PATH_ID: to_bytes(StringType(), stats["path_upper"]),
            POS_ID: to_bytes(LongType(), stats["pos_upper"]),
        }
        data_file = DataFile.from_args(
            content=DataFileContent.POSITION_DELETES,
            file_path=path,
            file_format=FileFormat.PARQUET,
            partition=partition,
            record_count=stats["records"],
            file_size_in_bytes=size,
            value_counts={FILE_PATH_ID: stats["records"], POS_ID: stats["records"]},
            null_value_counts={FILE_PATH_ID: 0, POS_ID: 0},
            lower_bounds=lower,
            upper_bounds=upper,
            sort_order_id=None,
            equality_ids=None,
            key_metadata=None,
        )
        data_file.spec_id = table.metadata.default_spec_id
        return data_file

    def new_data_dir(self, table: Table, batch_id: int) -> str:
        """A fresh directory for one apply attempt's files (never reused, so a failed attempt is never read)."""
        return f"{table.location()}/data/batch-{batch_id:012d}-{uuid.uuid4().hex[:12]}"

    # --- commits ---------------------------------------------------------------------------------------
    @staticmethod
    def commit_files(
        table: Table,
        added: list[DataFile],
        added_deletes: list[DataFile],
        removed: set[str],
        properties: dict[str, str],
        operation: Any = None,
        table_properties: dict[str, str] | None = None,
    ) -> Table:
        """Commit one snapshot adding data and position-delete files and removing files by path
        (:mod:`changelake.storage.rowdelta`), and ``table_properties`` with it; return the table as
        committed. Raises CommitFailedException when another writer committed first, ValidationException when
        a removed file is gone (nothing is committed either way)."""
        base = table.current_snapshot()
        committed = commit_row_delta(
            table, added, added_deletes, removed, properties, operation, table_properties
        )
        # The new snapshot's files, from its parent's (the commit fails unless the parent is still current):
        # the next batch's plan need not read the manifests this commit wrote.
        table_uuid = str(table.metadata.table_uuid)
        base_id = base.snapshot_id if base is not None else None
        parent = () if base_id is None else SNAPSHOT_FILES.get((table_uuid, base_id))
        snapshot = committed.current_snapshot()
        if parent is not None and snapshot is not None and snapshot.parent_snapshot_id == base_id:
            describe = _file_describer(committed)
            new = tuple(describe(_added_entry(f, snapshot.sequence_number)) for f in [*added, *added_deletes])
            files = tuple(f for f in parent if f.path not in removed) + new
            SNAPSHOT_FILES.put((table_uuid, snapshot.snapshot_id), files)
        return committed

    @staticmethod
    def commit_batch(
        table: Table,
        added: list[DataFile],
        added_deletes: list[DataFile],
        removed: set[str],
        batch: BatchSummary,
    ) -> Table:
        """Commit a batch: :meth:`commit_files` with the batch's summary stamped with the commit time."""
        props = replace(batch, committed_at_ms=int(time.time() * 1000)).to_properties()
        return Storage.commit_files(table, added, added_deletes, removed, props)

    @staticmethod
    def append_batch(table: Table, added: list[DataFile], changelog: ChangelogSummary) -> Table:
        """Commit one snapshot appending a batch's changelog files ``added``; return the table as committed
        (its manifests merged as a PK table's are, so planning the changelog does not grow with batches)."""
        return Storage.commit_files(table, added, [], set(), changelog.to_properties())

    def write_json(self, table: Table, path: str, payload: dict) -> None:
        """Write one of changelake's own state objects (a batch's changelog manifest) at a fresh path."""
        text = json.dumps(payload).encode()
        with table.io.new_output(path).create(overwrite=True) as out:
            out.write(text)
        STATE_OBJECTS.put(path, text)

    def read_json(self, table: Table, path: str) -> dict:
        """A state object :meth:`write_json` wrote: as this process wrote or last read it (its path is never
        written twice), else read from the table's store."""
        text = STATE_OBJECTS.get(path)
        if text is None:
            with table.io.new_input(path).open() as stream:
                text = stream.read()
            STATE_OBJECTS.put(path, text)
        return json.loads(text)


def _read_bytes(table: Table, location: str) -> bytes:
    with table.io.new_input(location).open() as stream:
        return stream.read()


def _file_describer(table: Table) -> Callable[[Any], TableFile]:
    """A function from a pyiceberg manifest entry of ``table`` to its :class:`TableFile` (the bucket range of
    a PK table's data file, the batch range of a changelog file)."""
    layout = Storage.layout(table)
    schema = table.schema()
    bucket = schema.find_field("_bucket").field_id
    batch = schema.find_field("_batch_id").field_id if "_batch_id" in schema.column_names else None

    def describe(entry) -> TableFile:
        df = entry.data_file
        part = tuple(df.partition[i] for i in range(len(df.partition)))
        lower, upper = df.lower_bounds or {}, df.upper_bounds or {}
        content = int(df.content)
        buckets = batches = None
        if content == 0:
            buckets = layout.buckets_of(part, int_bound(lower.get(bucket)), int_bound(upper.get(bucket)))
            if batch is not None:
                batches = int_bounds(lower, upper, batch)
        return TableFile(
            path=df.file_path,
            content=content,
            partition=part,
            record_count=df.record_count,
            size=df.file_size_in_bytes,
            buckets=buckets,
            sequence_number=entry.sequence_number,
            batches=batches,
            data_file=df,
            sort_order_id=df.sort_order_id,
            added_by=entry.snapshot_id,
            lower_bounds=dict(lower),
        )

    return describe


def _added_entry(data_file: DataFile, sequence_number: int):
    """The manifest entry a committed snapshot holds for a file it added (its sequence number assigned)."""
    from pyiceberg.manifest import ManifestEntry, ManifestEntryStatus

    return ManifestEntry.from_args(
        status=ManifestEntryStatus.ADDED,
        snapshot_id=None,
        sequence_number=sequence_number,
        data_file=data_file,
    )


def _local_path(location: str) -> str | None:
    """The local path of a ``file:`` URI or a plain path, else None (as pyiceberg's PyArrowFileIO parses it)."""
    from urllib.parse import urlparse

    uri = urlparse(location)
    if not uri.scheme:
        return location
    return f"{uri.netloc}{uri.path}" if uri.scheme == "file" else None


def _column_fields(spec: TableSpec) -> list[NestedField]:
    """The table's columns as Iceberg fields numbered 1..n (a nanosecond timestamp's doc says what its long
    holds)."""
    return [
        NestedField(i + 1, c.name, c.type.iceberg_type(), required=False, doc=c.type.storage_doc())
        for i, c in enumerate(spec.columns)
    ]


def check_stored_types(table: Table, spec: TableSpec) -> None:
    """Refuse a table whose nanosecond timestamp columns are not stored as nanoseconds
    (:func:`changelake.storage.files.check_stored_types`, over the pyiceberg table's schema)."""
    stored = {f.name: str(f.field_type) for f in table.schema().fields}
    files.check_stored_types(".".join(table.name()), spec, stored)


def _sort_order(schema: Schema, columns: list[str]) -> SortOrder:
    """The order changelake writes a table's files in, declared for other engines (Iceberg sort order)."""
    return SortOrder(
        *[SortField(source_id=schema.find_field(c).field_id, transform=IdentityTransform()) for c in columns]
    )


def _spec_json(spec: TableSpec) -> str:
    """The ``changelake.spec`` property: the whole spec (its layout and the sections that may change)."""
    return json.dumps(spec.to_dict(), sort_keys=True)
