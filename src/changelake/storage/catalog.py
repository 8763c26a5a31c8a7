"""A table's Iceberg metadata, read two ways: :class:`DirectSource` reads the SQLite catalog and a local
warehouse with sqlite3, json and :func:`changelake.storage.avro.read_avro`, without importing pyiceberg (a
read command starts in a fraction of a second); :class:`IcebergSource` goes through pyiceberg (any catalog,
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

from changelake.config import Settings
from changelake.storage import summary
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

    def open(self, path: str) -> BinaryIO | str:
        raise NotImplementedError

    def batch_snapshots(self) -> list[tuple[int, dict[str, str]]]:
        """Snapshots of the main branch that committed a batch, oldest first (as ``Storage.batch_snapshots``)."""
        return [s for s in reversed(self.ancestry()) if summary.batch_of(s[1]) is not None]

    def last_batch(self) -> int:
        return summary.last_batch_of(self.current()[1])


def local_path(location: str) -> str | None:
    """The local path of a ``file:`` URI or a plain path (as pyiceberg's PyArrowFileIO parses it), else None."""
    uri = urlparse(location)
    if not uri.scheme:
        return location
    if uri.scheme == "file":
        return f"{uri.netloc}{uri.path}"
    return None


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
    """A table of the SQLite catalog in a local warehouse, read with sqlite3, json and :func:`read_avro`."""

    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, settings: Settings, namespace: str, name: str) -> DirectSource | None:
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
        path = local_path(row[0])
        if path is None:
            raise Unsupported(f"metadata at {row[0]}")
        raw = Path(path).read_bytes()
        metadata = json.loads(gzip.decompress(raw) if path.endswith(".gz.metadata.json") else raw)
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
        )

    def _snapshots(self) -> dict[int, dict[str, Any]]:
        return {s["snapshot-id"]: s for s in self.metadata.get("snapshots", [])}

    def _current_id(self) -> int | None:
        main = self.metadata.get("refs", {}).get("main")
        current = main["snapshot-id"] if main else self.metadata.get("current-snapshot-id")
        return None if current in (None, -1) else current

    def current(self) -> tuple[int | None, dict[str, str]]:
        current = self._current_id()
        return current, (self._snapshots()[current].get("summary", {}) if current is not None else {})

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
                    )
                )
        return out

    def _read(self, location: str) -> bytes:
        path = local_path(location)
        if path is None:
            raise Unsupported(f"file at {location}")
        return Path(path).read_bytes()

    def open(self, path: str) -> BinaryIO | str:
        local = local_path(path)
        if local is None:
            raise Unsupported(f"file at {path}")
        return local


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

    def open(self, path: str) -> BinaryIO | str:
        return self.table.io.new_input(path).open()


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
