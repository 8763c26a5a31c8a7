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
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot, ancestors_of
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import IntegerType, LongType, NestedField, StringType, TimestamptzType

from changelake import evolution
from changelake.config import Settings
from changelake.errors import ChangelakeError
from changelake.lru import BoundedLRU
from changelake.spec import TableSpec
from changelake.storage import (
    pyiceberg_fixes,  # its fixes are installed on import
    summary,
)
from changelake.storage.summary import BatchSummary, ChangelogSummary

CHANGELOG_SUFFIX = "__changelog"

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


METADATA_CACHE_ENTRIES = 64

#: The live data files of a snapshot, per (table uuid, snapshot id): a snapshot never changes. Bounded by the
#: files held in all (a data file's description is ~4 kB with its column statistics).
MAX_SNAPSHOT_FILES = 20_000
SNAPSHOT_FILES: BoundedLRU[tuple[DataFile, ...]] = BoundedLRU(MAX_SNAPSHOT_FILES, size=len)


def _cache_metadata(catalog: Catalog) -> Catalog:
    """Keep a SQL catalog from reading and parsing a table's metadata file again while its location is the
    same: a metadata file is never rewritten (each commit writes a new one), so its parsed form can be shared
    (pyiceberg's metadata objects are frozen). An apply loads its two tables about ten times (state checks,
    the changelog roll-forward, pyiceberg's own load inside each commit), and the file grows with the table's
    history: after 300 batches it is 540 kB and a load took 12.6 ms, all but ~1 ms of it reading and parsing.
    The catalog's row is still read on every load, so a commit by another process is seen at once; committed
    metadata goes into the cache as it is written. Other catalog types return the metadata with the table
    (REST) and are left as they are."""
    from pyiceberg.catalog.sql import SqlCatalog

    if not isinstance(catalog, SqlCatalog):
        return catalog
    cache: BoundedLRU[TableMetadata] = BoundedLRU(METADATA_CACHE_ENTRIES)
    convert, commit = catalog._convert_orm_to_iceberg, catalog.commit_table

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

    def cached_commit(table, requirements, updates):
        response = commit(table, requirements, updates)
        cache.put(response.metadata_location, response.metadata)
        return response

    setattr(catalog, "_convert_orm_to_iceberg", cached_convert)  # noqa: B010 (mypy: method-assign)
    setattr(catalog, "commit_table", cached_commit)  # noqa: B010
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
                **s.catalog_properties,
            }
            if s.catalog_type == "sql" and s.catalog_uri.startswith("sqlite:///"):
                from pathlib import Path

                Path(s.catalog_uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
                if s.warehouse.startswith("file://"):
                    Path(s.warehouse[len("file://") :]).mkdir(parents=True, exist_ok=True)
            self._catalog = _cache_metadata(_open_catalog(s.catalog_name, props))
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
            stored = evolution.stored_spec(stored_json, spec.full_name) if stored_json else spec
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
            fields = [schema.find_field(k) for k in spec.partition_keys] + [schema.find_field("_bucket")]
            partition_spec = PartitionSpec(
                *[
                    PartitionField(f.field_id, 1000 + i, IdentityTransform(), f.name)
                    for i, f in enumerate(fields)
                ]
            )
            self._create(spec, spec.table, schema, partition_spec, spec_json)
        if self._load(spec.namespace, spec.table + CHANGELOG_SUFFIX) is None:
            self._create_changelog(spec)
        return spec

    def _create_changelog(self, spec: TableSpec) -> None:
        schema = self.changelog_schema(spec)
        batch_field = schema.find_field("_batch_id")
        partition_spec = PartitionSpec(
            PartitionField(batch_field.field_id, 1000, IdentityTransform(), "_batch_id")
        )
        self._create(spec, spec.table + CHANGELOG_SUFFIX, schema, partition_spec, _spec_json(spec))

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
                        # The name mapping (files carry no field ids) follows the added fields in this update.
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
        self, spec: TableSpec, name: str, schema: Schema, partition_spec: PartitionSpec, spec_json: str
    ) -> None:
        # No automatic commit retries: after a conflict the applier re-reads state and decides (exactly-once).
        # Data files carry no Iceberg field ids: readers resolve columns by name. The schemas above number
        # their fields 1..n in order, as create_table assigns them, so the mapping is known before creation
        # and goes in with it (no second commit that a racing applier could observe missing).
        props = {
            "commit.retry.num-retries": "0",
            summary.SPEC: spec_json,
            "format-version": "2",
            "schema.name-mapping.default": schema.name_mapping.model_dump_json(),
        }
        try:
            table = self.catalog.create_table(
                (spec.namespace, name), schema, partition_spec=partition_spec, properties=props
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
            raise ChangelakeError(
                f"Table {spec.full_name} does not exist; create it first (changelake create)"
            )
        check_stored_types(table, spec)
        return table

    def changelog_table(self, spec: TableSpec) -> Table:
        table = self._load(spec.namespace, spec.table + CHANGELOG_SUFFIX)
        if table is None:
            raise ChangelakeError(
                f"Changelog table of {spec.full_name} does not exist; create the table first"
            )
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
    def state(table: Table) -> TableState:
        """What the PK table's current snapshot says (a changelog table's: :class:`ChangelogSummary`)."""
        snap = table.current_snapshot()
        batch = BatchSummary.from_snapshot(snap)
        return TableState(
            snapshot_id=snap.snapshot_id if snap else None,
            last_batch=batch.batch_id if batch else 0,
            checksum=batch.checksum if batch else None,
            log_end_offset=batch.log_end_offset if batch else 0,
            changelog_manifest=batch.changelog_manifest if batch else None,
            batch=batch,
        )

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
        for snap in self.batch_snapshots(table):
            if summary.batch_of(summary.properties(snap)) == batch_id:
                return snap
        return None

    @staticmethod
    def snapshot_summary(snapshot: Snapshot) -> dict[str, str]:
        """A snapshot's raw summary properties (Iceberg's own too); :class:`BatchSummary` decodes a batch's."""
        return summary.properties(snapshot)

    # --- files -----------------------------------------------------------------------------------------
    @staticmethod
    def data_files(table: Table, snapshot_id: int | None = None) -> list[DataFile]:
        """The live data files of the current snapshot (or of ``snapshot_id``): planned once per snapshot, or
        derived by :meth:`commit_batch` from the snapshot it replaced (:data:`SNAPSHOT_FILES`)."""
        snapshot = table.current_snapshot() if snapshot_id is None else table.snapshot_by_id(snapshot_id)
        if snapshot is None and snapshot_id is None:
            return []
        # An unknown snapshot_id is not kept: pyiceberg's planning says what it says of it.
        key = None if snapshot is None else (str(table.metadata.table_uuid), snapshot.snapshot_id)
        files = SNAPSHOT_FILES.get(key) if key is not None else None
        if files is None:
            files = tuple(task.file for task in table.scan(snapshot_id=snapshot_id).plan_files())
            if key is not None:
                SNAPSHOT_FILES.put(key, files)
        return list(files)

    @staticmethod
    def to_data_files(table: Table, paths: list[str]) -> list[DataFile]:
        """Describe written Parquet files for Iceberg (reads only their footers). Local footers are read one
        after the other: describing one is Python holding the GIL, and a thread pool only added its switching
        (2 files: 3.0 ms pooled, 2.0 ms in turn); remote ones in parallel, for their round trips."""
        if not paths:
            return []
        from changelake.engine.buckets import TaskIO  # (loaded already: files are described after a merge)

        describe = functools.partial(pyiceberg_fixes.describe_parquet, table.io, table.metadata)
        if len(paths) > 1 and any(TaskIO.local_path(p) is None for p in paths):
            with ThreadPoolExecutor(max_workers=8) as pool:
                return list(pool.map(describe, paths))
        return [describe(p) for p in paths]

    def new_data_dir(self, table: Table, batch_id: int) -> str:
        """A fresh directory for one apply attempt's files (never reused, so a failed attempt is never read)."""
        return f"{table.location()}/data/batch-{batch_id:012d}-{uuid.uuid4().hex[:12]}"

    # --- commits ---------------------------------------------------------------------------------------
    @staticmethod
    def commit_batch(
        table: Table, removed: list[DataFile], added: list[DataFile], batch: BatchSummary
    ) -> Table:
        """Commit one snapshot replacing ``removed`` by ``added``, its summary ``batch`` stamped with the commit
        time; return the table as committed. Raises CommitFailedException on a race."""
        base = table.current_snapshot()
        tx = table.transaction()
        props = replace(batch, committed_at_ms=int(time.time() * 1000)).to_properties()
        with tx.update_snapshot(snapshot_properties=props).overwrite() as overwrite:
            for f in removed:
                overwrite.delete_data_file(f)
            for f in added:
                overwrite.append_data_file(f)
        committed = tx.commit_transaction()
        # The new snapshot's files, from its parent's (the commit fails unless the parent is still current):
        # the next batch's plan need not read the manifests this commit wrote.
        table_uuid = str(table.metadata.table_uuid)
        base_id = base.snapshot_id if base is not None else None
        parent = () if base_id is None else SNAPSHOT_FILES.get((table_uuid, base_id))
        snapshot = committed.current_snapshot()
        if parent is not None and snapshot is not None and snapshot.parent_snapshot_id == base_id:
            gone = set(removed)
            files = tuple(f for f in parent if f not in gone) + tuple(added)
            SNAPSHOT_FILES.put((table_uuid, snapshot.snapshot_id), files)
        return committed

    @staticmethod
    def append_batch(table: Table, added: list[DataFile], changelog: ChangelogSummary) -> Table:
        """Commit one snapshot appending a batch's changelog files ``added``; return the table as committed."""
        tx = table.transaction()
        with tx.update_snapshot(snapshot_properties=changelog.to_properties()).fast_append() as append:
            for f in added:
                append.append_data_file(f)
        return tx.commit_transaction()

    def write_json(self, table: Table, path: str, payload: dict) -> None:
        with table.io.new_output(path).create(overwrite=True) as out:
            out.write(json.dumps(payload).encode())

    def read_json(self, table: Table, path: str) -> dict:
        with table.io.new_input(path).open() as stream:
            return json.loads(stream.read())


def _column_fields(spec: TableSpec) -> list[NestedField]:
    """The table's columns as Iceberg fields numbered 1..n (a nanosecond timestamp's doc says what its long
    holds)."""
    return [
        NestedField(i + 1, c.name, c.type.iceberg_type(), required=False, doc=c.type.storage_doc())
        for i, c in enumerate(spec.columns)
    ]


def check_stored_types(table: Table, spec: TableSpec) -> None:
    """Refuse a table whose nanosecond timestamp columns are not stored as nanoseconds.

    Before changelake kept TIMESTAMP(7..9)/TIMESTAMP_LTZ(7..9) exactly, they were Iceberg ``timestamp``
    columns of microseconds, bucketed by the microsecond value: reading them as nanoseconds would be off by a
    factor of 1000 and a lookup would hash to another bucket, so such a table is refused, saying how to go on.
    """
    stored = {f.name: f.field_type for f in table.schema().fields}
    for c in spec.columns:
        if c.type.is_nanos and c.name in stored and stored[c.name] != c.type.iceberg_type():
            raise ChangelakeError(
                f"Table {'.'.join(table.name())}: column '{c.name}' is {c.type} but stored as "
                f"{stored[c.name]} (microseconds): the table was created before changelake kept "
                "TIMESTAMP(7..9)/TIMESTAMP_LTZ(7..9) to the nanosecond, and its rows were bucketed by the "
                "microsecond values. Recreate the table (drop it, create it, apply its batches again) to keep "
                "nanoseconds"
            )


def _spec_json(spec: TableSpec) -> str:
    """The ``changelake.spec`` property: the whole spec (its layout and the sections that may change)."""
    return json.dumps(spec.to_dict(), sort_keys=True)
