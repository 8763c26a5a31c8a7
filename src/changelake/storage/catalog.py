"""A table's Iceberg metadata, read two ways: :class:`DirectSource` reads the SQLite catalog and a local or
object-store (``s3://``) warehouse with sqlite3, json, pyarrow and :func:`changelake.storage.avro.read_avro`,
without importing pyiceberg (a read command starts in a fraction of a second); :class:`IcebergSource` goes through pyiceberg (any catalog,
any FileIO) and is the fallback when the direct way meets anything it does not read (:class:`Unsupported`).
"""

from __future__ import annotations

import gzip
import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlparse

from changelake import objectstore
from changelake.config import Settings
from changelake.storage import lineage, summary
from changelake.storage.avro import Unsupported, read_avro
from changelake.storage.files import BUCKET_COLUMN, POSITION_DELETES, Layout, TableFile, int_bound, int_bounds

# What the direct way reads of a manifest entry: the rest (column statistics) is skipped.
_ENTRY_FIELDS = {
    "status": None,
    "sequence_number": None,
    "data_file": {
        "content": None,
        "file_path": None,
        "file_format": None,
        "partition": None,
        "record_count": None,
        "file_size_in_bytes": None,
        "lower_bounds": None,
        "upper_bounds": None,
    },
}


@dataclass
class TableSource:
    """One Iceberg table, read only: snapshots with their summaries, the data files of a snapshot, file access."""

    name: str
    properties: dict[str, str]
    columns: list[str]  # the table schema's column names
    partition_columns: list[str]  # the source columns of the identity partition fields, in spec order
    column_types: dict[str, str] = field(default_factory=dict)  # column -> Iceberg type, e.g. "long"
    field_ids: dict[str, int] = field(default_factory=dict)  # column -> Iceberg field id

    def current(self) -> tuple[int | None, dict[str, str]]:
        raise NotImplementedError

    def ancestry(self) -> list[tuple[int, dict[str, str]]]:
        """(snapshot id, summary) of the current snapshot and its ancestors, newest first."""
        raise NotImplementedError

    def files(self, snapshot_id: int | None) -> list[TableFile]:
        raise NotImplementedError

    def open(self, path: str, size: int | None = None) -> BinaryIO | str:
        """A file of the table for reading (a local path, or an open file); ``size``, when known, saves an
        object store's HEAD request."""
        raise NotImplementedError

    def snapshot_columns(self, snapshot_id: int) -> list[str] | None:
        """The column names of the schema ``snapshot_id`` was written with (what Iceberg's time travel reads a
        past snapshot in, as Spark's ``VERSION AS OF`` does); None when the snapshot names no schema."""
        raise NotImplementedError

    def tagged(self) -> tuple[int, dict[str, str]] | None:
        """(snapshot id, summary) of the snapshot the :data:`~changelake.storage.lineage.STATE_TAG` tag names."""
        raise NotImplementedError

    def last_commit(self) -> dict[str, Any]:
        """Who committed the current snapshot (:func:`changelake.storage.lineage.committer`)."""
        raise NotImplementedError

    def batch_snapshots(self) -> list[tuple[int, dict[str, str]]]:
        """Snapshots of the main branch that committed a batch, oldest first (as ``Storage.batch_snapshots``)."""
        return [s for s in reversed(self.ancestry()) if summary.batch_of(s[1]) is not None]

    def state(self) -> dict[str, str]:
        """The summary of the snapshot holding the table's state: the current one's, or after other writers'
        commits an ancestor's or the tagged one's (as ``Storage.state_snapshot``); {} before any batch."""
        current = self.current()[1]
        if lineage.carries_state(current):
            return current
        found = lineage.state_snapshot(self.ancestry(), self.tagged())
        return dict(found[1]) if found is not None else {}

    def last_batch(self) -> int:
        return summary.last_batch_of(self.state())


def local_path(location: str) -> str | None:
    """The local path of a ``file:`` URI or a plain path (as pyiceberg's PyArrowFileIO parses it), else None."""
    uri = urlparse(location)
    if not uri.scheme:
        return location
    if uri.scheme == "file":
        return f"{uri.netloc}{uri.path}"
    return None


#: An object of at most this many bytes (its size known from the manifest) is read whole by one GET: a delete
#: file, a batch's new rows. A larger one is read by ranges (objectstore.Store.open_input): its footer and the
#: row groups a read needs.
WHOLE_OBJECT_BYTES = 1 << 20


def sqlite_table_names(settings: Settings) -> list[str]:
    """``namespace.table`` of every table in the SQLite catalog (changelog tables too), read with sqlite3."""
    db = Path(settings.catalog_uri[len("sqlite:///") :])
    if not db.exists():
        return []
    try:
        with sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True) as conn:
            rows = conn.execute(
                "SELECT table_namespace, table_name FROM iceberg_tables WHERE catalog_name = ?",
                (settings.catalog_name,),
            ).fetchall()
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            return []  # a catalog without tables yet
        raise
    return [f"{namespace}.{name}" for namespace, name in rows]


@dataclass
class DirectSource(TableSource):
    """A table of the SQLite catalog in a local or object-store warehouse, read with sqlite3, json and
    :func:`read_avro` (objects with pyarrow's S3 file system)."""

    metadata: dict[str, Any] = field(default_factory=dict)
    store: objectstore.Store | None = None  # the object store of s3:// files (the settings' storage options)

    @classmethod
    def load(cls, settings: Settings, namespace: str, name: str) -> DirectSource | None:
        if settings.catalog_type == "rest":
            loaded = _rest_table(settings, namespace, name)
            if loaded is None:
                return None
            return cls._of(settings, namespace, name, loaded)
        db = Path(settings.catalog_uri[len("sqlite:///") :])
        if not db.exists():
            return None
        try:
            with sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True) as conn:
                row = conn.execute(
                    "SELECT metadata_location FROM iceberg_tables "
                    "WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?",
                    (settings.catalog_name, namespace, name),
                ).fetchone()
        except sqlite3.OperationalError as e:
            if "no such table" in str(e):
                return None  # a catalog without tables yet
            raise
        if row is None or row[0] is None:
            return None
        store = objectstore.Store(settings.storage_options)
        raw = _read_location(row[0], store)
        metadata = json.loads(gzip.decompress(raw) if row[0].endswith(".gz.metadata.json") else raw)
        return cls._of(settings, namespace, name, metadata)

    @classmethod
    def _of(cls, settings: Settings, namespace: str, name: str, metadata: dict[str, Any]) -> DirectSource:
        store = objectstore.Store(settings.storage_options)
        if metadata.get("format-version", 1) > 2:
            raise Unsupported(f"format version {metadata['format-version']}")
        schema = next(s for s in metadata["schemas"] if s["schema-id"] == metadata["current-schema-id"])
        spec = next(s for s in metadata["partition-specs"] if s["spec-id"] == metadata["default-spec-id"])
        if any(f["transform"] != "identity" for f in spec["fields"]):
            raise Unsupported("a partition transform other than identity")
        by_id = {f["id"]: f["name"] for f in schema["fields"]}
        return cls(
            name=f"{namespace}.{name}",
            properties=metadata.get("properties", {}),
            columns=[f["name"] for f in schema["fields"]],
            partition_columns=[by_id[f["source-id"]] for f in spec["fields"]],
            column_types={f["name"]: str(f["type"]) for f in schema["fields"]},
            field_ids={f["name"]: f["id"] for f in schema["fields"]},
            metadata=metadata,
            store=store,
        )

    def _snapshots(self) -> dict[int, dict[str, Any]]:
        return {s["snapshot-id"]: s for s in self.metadata.get("snapshots", [])}

    def snapshot_columns(self, snapshot_id: int) -> list[str] | None:
        schema_id = self._snapshots().get(snapshot_id, {}).get("schema-id")
        schema = next((s for s in self.metadata["schemas"] if s["schema-id"] == schema_id), None)
        return None if schema is None else [f["name"] for f in schema["fields"]]

    def _current_id(self) -> int | None:
        main = self.metadata.get("refs", {}).get("main")
        current = main["snapshot-id"] if main else self.metadata.get("current-snapshot-id")
        return None if current in (None, -1) else current

    def current(self) -> tuple[int | None, dict[str, str]]:
        current = self._current_id()
        return current, (self._snapshots()[current].get("summary", {}) if current is not None else {})

    def tagged(self) -> tuple[int, dict[str, str]] | None:
        ref = self.metadata.get("refs", {}).get(lineage.STATE_TAG)
        snap = self._snapshots().get(ref["snapshot-id"]) if ref else None
        return (snap["snapshot-id"], snap.get("summary", {})) if snap is not None else None

    def last_commit(self) -> dict[str, Any]:
        current = self._current_id()
        snap = self._snapshots().get(current) if current is not None else None
        if snap is None:
            return lineage.committer(None, {}, None)
        return lineage.committer(current, snap.get("summary", {}), snap.get("timestamp-ms"))

    def ancestry(self) -> list[tuple[int, dict[str, str]]]:
        snapshots, out = self._snapshots(), []
        current = self._current_id()
        snap = snapshots.get(current) if current is not None else None
        while snap is not None:
            out.append((snap["snapshot-id"], snap.get("summary", {})))
            parent = snap.get("parent-snapshot-id")
            snap = snapshots.get(parent) if parent is not None else None
        return out

    def files(self, snapshot_id: int | None) -> list[TableFile]:
        snapshot_id = self._current_id() if snapshot_id is None else snapshot_id
        if snapshot_id is None:
            return []
        snap = self._snapshots()[snapshot_id]
        if "manifest-list" not in snap:
            raise Unsupported("a v1 snapshot with inline manifests")
        layout = Layout(tuple(self.partition_columns))
        bucket_id, batch_id = self.field_ids.get(BUCKET_COLUMN), self.field_ids.get("_batch_id")
        out = []
        for manifest in read_avro(self._read(snap["manifest-list"])):
            if manifest.get("added_files_count") == 0 and manifest.get("existing_files_count") == 0:
                continue  # only entries deleted in an earlier snapshot (v2 manifest lists count them)
            for entry in read_avro(self._read(manifest["manifest_path"]), _ENTRY_FIELDS):
                if entry["status"] == 2:  # DELETED in this snapshot
                    continue
                data_file = entry["data_file"]
                content = data_file.get("content", 0)
                if content not in (0, POSITION_DELETES) or data_file["file_format"].upper() != "PARQUET":
                    raise Unsupported(f"file {data_file['file_path']} (content {content})")
                part = data_file["partition"]
                partition = tuple(part[c] for c in self.partition_columns)
                lower = {kv["key"]: kv["value"] for kv in data_file.get("lower_bounds") or []}
                upper = {kv["key"]: kv["value"] for kv in data_file.get("upper_bounds") or []}
                batches = None if batch_id is None else int_bounds(lower, upper, batch_id)
                sequence = entry.get("sequence_number")
                out.append(
                    TableFile(
                        path=data_file["file_path"],
                        content=content,
                        partition=partition,
                        record_count=data_file["record_count"],
                        size=data_file.get("file_size_in_bytes") or 0,
                        buckets=None
                        if content
                        else layout.buckets_of(
                            partition, int_bound(lower.get(bucket_id)), int_bound(upper.get(bucket_id))
                        ),
                        # An entry added by its manifest's snapshot inherits the manifest's sequence number.
                        sequence_number=manifest.get("sequence_number") if sequence is None else sequence,
                        batches=batches,
                        lower_bounds=lower,
                    )
                )
        return out

    def _read(self, location: str) -> bytes:
        return _read_location(location, self.store)

    def open(self, path: str, size: int | None = None) -> BinaryIO | str:
        local = local_path(path)
        if local is not None:
            return local
        if self.store is not None and objectstore.is_object_location(path):
            return self.store.open_input(path, size, WHOLE_OBJECT_BYTES)
        raise Unsupported(f"file at {path}")


def bearer_token(settings: Settings) -> str | None:
    """The REST catalog's bearer token: ``token`` in the catalog properties, else pyiceberg's variable
    ``PYICEBERG_CATALOG__<NAME>__TOKEN`` (which Iceberg's Java client does not read: Spark gets it from here)."""
    import os

    return settings.catalog_properties.get("token") or os.environ.get(
        f"PYICEBERG_CATALOG__{settings.catalog_name.upper()}__TOKEN"
    )


def _rest_table(settings: Settings, namespace: str, name: str) -> dict[str, Any] | None:
    """A table's current metadata from a REST catalog (the Iceberg REST protocol's loadTable: two small GETs,
    where importing pyiceberg costs seconds), or None when there is no such table. Only a catalog reached with
    a bearer token (``token``, in the catalog properties or pyiceberg's ``PYICEBERG_CATALOG__<NAME>__TOKEN``) is
    read this way; any other authentication goes through pyiceberg (:class:`Unsupported`)."""
    import urllib.error
    import urllib.parse
    import urllib.request

    properties = {k: v for k, v in settings.catalog_properties.items() if k != "token"}
    if any(k in properties for k in ("credential", "oauth2-server-uri", "rest.sigv4-enabled", "auth.type")):
        raise Unsupported("a REST catalog with an authentication other than a bearer token")
    token = bearer_token(settings)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    base = settings.catalog_uri.rstrip("/")

    def get(path: str) -> dict[str, Any]:
        request = urllib.request.Request(f"{base}/v1/{path}", headers=headers)
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - the configured catalog URI
            return json.loads(answer.read())

    query = urllib.parse.urlencode({"warehouse": settings.warehouse}) if settings.warehouse else ""
    config = get(f"config?{query}" if query else "config")
    prefix = {**config.get("defaults", {}), **config.get("overrides", {})}.get("prefix")
    where = "/".join(urllib.parse.quote(p, safe="") for p in ([prefix] if prefix else []) + ["namespaces"])
    try:
        loaded = get(
            f"{where}/{urllib.parse.quote(namespace, safe='')}/tables/{urllib.parse.quote(name, safe='')}"
        )
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise
    return loaded["metadata"]


def _read_location(location: str, store: objectstore.Store | None) -> bytes:
    """A whole metadata file: a local one, or an object (one GET)."""
    path = local_path(location)
    if path is not None:
        return Path(path).read_bytes()
    if store is not None and objectstore.is_object_location(location):
        return store.read(location)
    raise Unsupported(f"file at {location}")


@dataclass
class IcebergSource(TableSource):
    """A table through pyiceberg (any catalog, any FileIO)."""

    table: Any = None

    @classmethod
    def load(cls, storage: Any, namespace: str, name: str) -> IcebergSource | None:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            table = storage.catalog.load_table((namespace, name))
        except NoSuchTableError:
            return None
        schema = table.schema()
        return cls(
            name=f"{namespace}.{name}",
            properties=dict(table.properties),
            columns=[f.name for f in schema.fields],
            partition_columns=[schema.find_column_name(f.source_id) for f in table.spec().fields],
            column_types={f.name: str(f.field_type) for f in schema.fields},
            field_ids={f.name: f.field_id for f in schema.fields},
            table=table,
        )

    def current(self) -> tuple[int | None, dict[str, str]]:
        from changelake.storage.iceberg import Storage

        snap = self.table.current_snapshot()
        return (snap.snapshot_id, Storage.snapshot_summary(snap)) if snap else (None, {})

    def tagged(self) -> tuple[int, dict[str, str]] | None:
        from changelake.storage.iceberg import Storage

        ref = self.table.metadata.refs.get(lineage.STATE_TAG)
        snap = self.table.snapshot_by_id(ref.snapshot_id) if ref is not None else None
        return (snap.snapshot_id, Storage.snapshot_summary(snap)) if snap is not None else None

    def last_commit(self) -> dict[str, Any]:
        from changelake.storage.iceberg import Storage

        return Storage.last_commit(self.table)

    def ancestry(self) -> list[tuple[int, dict[str, str]]]:
        from pyiceberg.table.snapshots import ancestors_of

        from changelake.storage.iceberg import Storage

        current = self.table.current_snapshot()
        if current is None:
            return []
        return [
            (s.snapshot_id, Storage.snapshot_summary(s)) for s in ancestors_of(current, self.table.metadata)
        ]

    def files(self, snapshot_id: int | None) -> list[TableFile]:
        from changelake.storage.iceberg import Storage

        return Storage.table_files(self.table, snapshot_id)

    def open(self, path: str, size: int | None = None) -> BinaryIO | str:
        return self.table.io.new_input(path).open()

    def snapshot_columns(self, snapshot_id: int) -> list[str] | None:
        snap = self.table.snapshot_by_id(snapshot_id)
        if snap is None or snap.schema_id is None:
            return None
        schema = self.table.schemas().get(snap.schema_id)
        return None if schema is None else [f.name for f in schema.fields]


def read_bytes(source: TableSource, location: str) -> bytes:
    opened = source.open(location)
    if isinstance(opened, str):
        return Path(opened).read_bytes()
    with opened as stream:
        return stream.read()


def snapshot_total(source: TableSource, key: str) -> int:
    """An Iceberg total of a table's current snapshot summary (0 when it has none)."""
    value = source.current()[1].get(key)
    return int(value) if value is not None else 0
