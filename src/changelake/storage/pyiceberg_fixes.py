"""Eleven fixes to pyiceberg 0.12 that changelake's commits need, until a pyiceberg release has them. Without
them an apply's commit cost grew with the number of batches the table had taken: a 20-record batch into a
4-bucket table took 0.13 s as batch 1 and 3.3 s as batch 366 (measured, one process applying batch after
batch, in-process merge).

**1. Metadata deep-copied on every read.**

``Transaction.table_metadata`` replays the staged updates over the table's metadata and deep-copies the whole
result on every read (``update_table_metadata`` ends in ``model_copy(deep=True)``), snapshot list included.
One apply's two commits read it 33 times, so a commit's cost grew with the table's history: on a table with
400 batches the deep copies alone took 2.4 s of a 3-s apply (measured, cProfile). Upstream has the fix
(apache/iceberg-python pull requests #3302 and #3784: cache the result keyed on the identity of the table's
metadata and of the immutable updates tuple); this module installs the same cache.

The cache is keyed on object identity of two immutable inputs, so it invalidates itself: staging an update
rebinds ``_updates`` to a new tuple, and a commit or refresh gives the table a new metadata object. The only
difference callers can see is pyiceberg's own: ``last_updated_ms`` of the returned metadata stays the same
across reads of one state instead of being re-stamped (the commit stamps its own time).

**2. Manifests of deleted files kept forever.** An overwrite commit writes a manifest of the files it
deletes (entries with status DELETED); pyiceberg's next overwrite keeps every such manifest in the new
snapshot, because it finds no live entry to remove from it. A PK table's batch is an overwrite, so a table
with N batches had N manifests in its current snapshot (401 after 400 batches, for 4 live data files), and
planning a scan or the next commit read all of them. Java Iceberg drops a manifest with no live entry when
it writes the next snapshot; :func:`_live_existing_manifests` does the same, judged by the manifest list's
own counts (no added or existing file, some deleted). Older snapshots keep their manifest lists, so time
travel reads what it read before.

**3. The history deep-copied with every metadata copy.** Fix 1 leaves one deep copy per state an apply
goes through (about nine: each transaction's states and the catalog's own ``update_table_metadata`` in each
commit), and each copies every snapshot, snapshot-log and metadata-log entry the table has. Those entries are
frozen models that pyiceberg never changes after building them (an update makes new entries and new lists),
so a deep copy now shares them (``__deepcopy__`` returns the entry) and copies only the lists and dicts that
hold them: the copy stays as independent as before where anything can change. Measured, one process applying
1-record batches into a 4-bucket table (with the metadata cache of ``storage/iceberg.py``): an apply at 300
batches took 137 ms before, 66 ms after (51–57 ms for the first ten batches either way).

**4. Every manifest read again on every plan and commit.** ``ManifestFile.fetch_manifest_entry`` reads and
decodes the manifest's Avro (in Python) each time it is asked, and one apply asks for the PK table's live
manifests three times: its plan (``plan_files``), and its overwrite commit twice (the entries of the files
it replaces, and the manifests it keeps). A manifest never changes once a snapshot lists it, so its entries
are kept per (path, sequence number, snapshot, spec, ``discard_deleted``) in an LRU bounded by the entries
it holds (:data:`MAX_CACHED_ENTRIES`, ~4 kB each: a one-bucket overwrite rewrites the manifest listing the
other buckets' files, so a table of many files leaves a large dead copy per batch); a manifest of a commit
in flight (sequence number not assigned yet) is read as before. Entries are only read after
:func:`_inherit_from_manifest` filled them in, never changed (a writer makes new entries from them), so
callers share them; each gets its own list. Measured, one-bucket batches into the benchmark's 5M-row table
(in process, runs with and without the fix): planning 5.8–8.4 ms to ~4 ms, the overwrite commit 15–20 ms to
11–12 ms.

**5. Every written file's schema converted and checked again.** ``parquet_file_to_data_file`` (how a commit
describes the files a batch wrote) spends more than half its ~1 ms per file converting the file's Arrow schema
to an Iceberg schema and comparing it with the table's, and a batch's files all have one Arrow schema.
:func:`describe_parquet` is the same description with that check made once per (table, schema id, format
version, Arrow schema) -- a table's schema id always names the same schema -- and the spec id set as a planned
file has it. Measured on the benchmark's table: 0.98 ms a file before, 0.53 ms after; the full batch describes
65 files.

**6. Every manifest list read again on every use.** ``Snapshot.manifests`` reads and decodes the snapshot's
manifest list (Avro, schema conversion included: 1-2 ms) each time it is asked; a merge-on-read batch asks
for its parent's list in both commits and maintenance asks for every retained snapshot's. A manifest list
never changes once written, so the manifests it lists are kept per path (at most :data:`MAX_MANIFEST_LISTS`).

**7. Every object written in three requests.** pyiceberg's FileIO makes its own pyarrow S3 file system, which
starts a multipart upload for every file it writes: a manifest, a manifest list or a metadata file took three
requests (create, part, complete) where one PUT does (36 of a 1,000-record batch's 110 requests to the local S3
endpoint, measured). A FileIO whose S3 settings are all ones :mod:`changelake.objectstore` takes (endpoint,
region, keys) uses that module's file system instead, and writes as :meth:`changelake.objectstore.Store.open_output`
does: an object in one PUT, and one connection pool with the tasks' reads and writes. Any other S3 setting (a proxy, a role, no region: real
AWS, whose bucket region pyiceberg looks up) keeps pyiceberg's own.

**8. A HEAD request before every read.** pyiceberg's FileIO opens a metadata file, a manifest list or a
manifest with pyarrow's ``open_input_file``, which asks the store for the object's size (a HEAD) before its
GET. On a file system fix 7 made, an object is opened by :meth:`changelake.objectstore.Store.open_input`
instead, which reads it by GETs alone where it can (one GET for an object of at most 64 KiB, a manifest).

**9. Every manifest's Avro writer built again.** A manifest writer converts its entry schema (the table's
partition type inside Iceberg's data-file struct) to an Avro writer and to the header's Avro schema JSON each
time it opens: ~1.1 ms a manifest, and a merge-on-read batch writes three to four manifests and two manifest
lists across its two commits, out of ~50 ms for a one-bucket batch. Both depend only on what the manifest's
header states (the table's schema and partition spec, their ids, format version, codec, content), so they
are built once per header (:data:`_AVRO_WRITERS`); each file still gets its own sync marker and stream.

**10. A HEAD after every manifest written, a HEAD and a LIST before every metadata file.** pyiceberg takes a
manifest's length for the manifest list by asking the store (``len(output_file)``, a HEAD) right after writing
it, and creates a metadata file with ``overwrite=False``, which first asks whether one is there (pyarrow's
file info: a HEAD, then a LIST, as a "directory" of that name might be). On a file system fix 7 made, a file
pyiceberg writes remembers the bytes written, which its length then answers, and a create does not ask
first: every file pyiceberg creates without overwriting is a metadata file named by a fresh UUID (the
catalog's ``new_table_metadata_file_location``), and the catalog's commit, not the file, decides which
metadata is current. Three HEADs and two LISTs of every batch's two commits (measured on the S3 endpoint).

**11. What this process wrote, read back.** The next batch's commit reads the manifests and the manifest list
the batch before it wrote (fixes 4 and 6 keep them only once read): a one-bucket batch decoded about four
manifests (~0.8 ms each) and two manifest lists (~0.7 ms each) that its own process had just written, ~5 ms of
a ~45-ms batch. A manifest writer now keeps the entries it writes, and a manifest list writer, which assigns
the sequence number its new manifests inherit, leaves in fix 4's and fix 6's caches what a read would give:
each new manifest's entries after pyiceberg's own inheritance (``_inherit_from_manifest``), and the list's
manifests as numbered. Nothing is kept before the list is written whole, and a list whose commit then fails
is never asked for: its path is a fresh UUID no snapshot names. Only format version 2's writers, the ones
changelake's tables use.

Installed only on the pyiceberg versions it was checked against (:data:`CHECKED_VERSIONS`): any other version
keeps its own property, and ``tests/storage/test_pyiceberg_fixes.py`` fails so the fix is re-checked.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pyiceberg
from pyiceberg.avro.codecs import AVRO_CODEC_KEY, CODEC_MAPPING_ICEBERG_TO_AVRO
from pyiceberg.avro.file import _SCHEMA_KEY, MAGIC, META_SCHEMA, SYNC_SIZE, AvroFileHeader, AvroOutputFile
from pyiceberg.avro.resolver import construct_writer, resolve_writer
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import PyArrowFile, PyArrowFileIO, parquet_file_to_data_file
from pyiceberg.manifest import (
    DEFAULT_READ_VERSION,
    MANIFEST_LIST_FILE_SCHEMAS,
    UNASSIGNED_SEQ,
    DataFile,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestListWriter,
    ManifestListWriterV2,
    ManifestWriter,
    _inherit_from_manifest,
)
from pyiceberg.table import TableProperties, Transaction, snapshots
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import MetadataLogEntry, Snapshot, SnapshotLogEntry
from pyiceberg.table.update import update_table_metadata
from pyiceberg.table.update.snapshot import _OverwriteFiles
from pyiceberg.utils.schema_conversion import AvroSchemaConversion

from changelake import objectstore
from changelake.lru import BoundedLRU

CHECKED_VERSIONS = ("0.12.0",)
_ORIGINAL = Transaction.__dict__["table_metadata"]
_ORIGINAL_EXISTING = _OverwriteFiles.__dict__["_existing_manifests"]
_ORIGINAL_FETCH = ManifestFile.__dict__["fetch_manifest_entry"]


def _cached_table_metadata(self: Transaction):
    """``Transaction.table_metadata``, computed once per (table metadata, staged updates)."""
    base, updates = self._table.metadata, self._updates
    cached = self.__dict__.get("_changelake_metadata")
    if cached is not None and cached[0] is base and cached[1] is updates:
        return cached[2]
    metadata = update_table_metadata(base, updates)
    self.__dict__["_changelake_metadata"] = (base, updates, metadata)
    return metadata


def only_deleted(manifest: ManifestFile) -> bool:
    """Whether a manifest lists only deleted files (by the manifest list's counts; unknown counts: no)."""
    return (
        manifest.added_files_count == 0
        and manifest.existing_files_count == 0
        and (manifest.deleted_files_count or 0) > 0
    )


def _live_existing_manifests(self: _OverwriteFiles) -> list[ManifestFile]:
    """``_OverwriteFiles._existing_manifests`` without the manifests that list only deleted files."""
    return [m for m in _ORIGINAL_EXISTING(self) if not only_deleted(m)]


#: Frozen history entries a deep copy of the table metadata shares instead of copying (fix 3).
SHARED_ON_DEEPCOPY = (Snapshot, SnapshotLogEntry, MetadataLogEntry)


def _share(self, memo=None):
    """``__deepcopy__`` of a frozen history entry: the entry itself."""
    return self


#: Manifest entries kept in all (fix 4): ~80 MB, the manifests of ~600 snapshots of the benchmark's 32-file
#: table, or of 20 of a 1,000-file one. Shared by pyiceberg's thread pool.
MAX_CACHED_ENTRIES = 20_000
_ENTRIES: BoundedLRU[list[ManifestEntry]] = BoundedLRU(MAX_CACHED_ENTRIES, size=len)


def _cached_fetch_manifest_entry(self: ManifestFile, io, discard_deleted: bool = True) -> list[ManifestEntry]:
    """``ManifestFile.fetch_manifest_entry``, read once per committed manifest (fix 4)."""
    if self.sequence_number is None or self.sequence_number == UNASSIGNED_SEQ:
        return _ORIGINAL_FETCH(self, io, discard_deleted)  # not committed yet: its entries inherit -1
    key = (
        self.manifest_path,
        self.sequence_number,
        self.added_snapshot_id,
        self.partition_spec_id,
        discard_deleted,
    )
    entries = _ENTRIES.get(key)
    if entries is None:
        entries = _ORIGINAL_FETCH(self, io, discard_deleted)
        _ENTRIES.put(key, entries)
    return list(entries)


#: Manifest lists kept (fix 6): ~40 retained snapshots of a few tables.
MAX_MANIFEST_LISTS = 512
_LISTS: BoundedLRU[tuple[ManifestFile, ...]] = BoundedLRU(MAX_MANIFEST_LISTS)
_ORIGINAL_MANIFESTS = snapshots._manifests


def _cached_manifests(io: FileIO, manifest_list: str) -> tuple[ManifestFile, ...]:
    """``pyiceberg.manifest._manifests``, read once per manifest list (fix 6)."""
    manifests = _LISTS.get(manifest_list)
    if manifests is None:
        manifests = _ORIGINAL_MANIFESTS(io, manifest_list)
        _LISTS.put(manifest_list, manifests)
    return manifests


_ORIGINAL_S3_FS = PyArrowFileIO.__dict__["_initialize_s3_fs"]


def _store_s3_fs(self: PyArrowFileIO, netloc: str | None):
    """pyiceberg's S3 file system, made by :mod:`changelake.objectstore` when it takes every S3 setting the
    FileIO has (fix 7)."""
    options = objectstore.options_of_fileio(self.properties)
    others = [
        k
        for k in self.properties
        if k.startswith(("s3.", "client.")) and k not in objectstore.fileio_properties(options)
    ]
    if others or "AWS_REGION" not in options:
        return _ORIGINAL_S3_FS(self, netloc)
    return objectstore.Store(options).filesystem


_ORIGINAL_OPEN = PyArrowFile.__dict__["open"]
#: An object pyiceberg reads (metadata, manifest list, manifest) of at most this many bytes comes whole.
WHOLE_READ_BYTES = 1 << 20


def _store_open(self: PyArrowFile, seekable: bool = True):
    """``PyArrowFile.open`` through the object store whose file system the file has, by GETs alone (fix 8)."""
    store = objectstore.store_of_filesystem(self._filesystem)
    if store is None or store.direct is None or not objectstore.is_object_location(self.location):
        return _ORIGINAL_OPEN(self, seekable)
    return store.open_input(self.location, None, WHOLE_READ_BYTES)


_ORIGINAL_NEW_WRITER = ManifestWriter.__dict__["new_writer"]
_ORIGINAL_LIST_ENTER = ManifestListWriter.__dict__["__enter__"]
#: (Avro writer, header's Avro schema JSON) by what an Avro file's header states (fix 9).
_AVRO_WRITERS: BoundedLRU[tuple[Any, str]] = BoundedLRU(64)


class _PreparedAvroOutputFile(AvroOutputFile):
    """pyiceberg's ``AvroOutputFile`` with its record writer and header schema built beforehand (fix 9)."""

    def __init__(self, output_file, schema_name: str, writer, schema_json: str, metadata: dict[str, str]):
        self.output_file = output_file
        self.schema_name = schema_name
        self.sync_bytes = os.urandom(SYNC_SIZE)
        self.writer = writer
        self.schema_json = schema_json
        self.metadata = metadata

    def _write_header(self) -> None:
        codec = self.metadata.get(AVRO_CODEC_KEY, TableProperties.WRITE_AVRO_COMPRESSION_DEFAULT)
        codec = CODEC_MAPPING_ICEBERG_TO_AVRO.get(codec, codec)
        meta = {**self.metadata, _SCHEMA_KEY: self.schema_json, AVRO_CODEC_KEY: codec}
        construct_writer(META_SCHEMA).write(self.encoder, AvroFileHeader(MAGIC, meta, self.sync_bytes))


def _prepared(key: tuple, schema_name: str, file_schema, record_schema) -> tuple[Any, str]:
    prepared = _AVRO_WRITERS.get(key)
    if prepared is None:
        file_schema, record_schema = file_schema(), record_schema()
        avro = AvroSchemaConversion().iceberg_to_avro(file_schema, schema_name=schema_name)
        prepared = (resolve_writer(record_schema=record_schema, file_schema=file_schema), json.dumps(avro))
        _AVRO_WRITERS.put(key, prepared)
    return prepared


def _prepared_manifest_writer(self: ManifestWriter) -> AvroOutputFile:
    """``ManifestWriter.new_writer`` with the writer and header schema of the manifest's header (fix 9): the
    header's metadata names the table schema, partition spec and format version the entry schema is made of."""
    meta = self._meta
    key = ("manifest_entry", type(self), tuple(sorted(meta.items())))
    writer, schema_json = _prepared(
        key,
        "manifest_entry",
        lambda: self._with_partition(self.version),
        lambda: self._with_partition(DEFAULT_READ_VERSION),
    )
    return _PreparedAvroOutputFile(self._output_file, "manifest_entry", writer, schema_json, meta)


def _prepared_list_enter(self: ManifestListWriter) -> ManifestListWriter:
    """``ManifestListWriter.__enter__`` with the writer and header schema of its format version (fix 9)."""
    version = self._format_version
    writer, schema_json = _prepared(
        ("manifest_file", version),
        "manifest_file",
        lambda: MANIFEST_LIST_FILE_SCHEMAS[version],
        lambda: MANIFEST_LIST_FILE_SCHEMAS[DEFAULT_READ_VERSION],
    )
    self._writer = _PreparedAvroOutputFile(
        self._output_file, "manifest_file", writer, schema_json, self._meta
    )
    self._writer.__enter__()
    return self


_ORIGINAL_CREATE = PyArrowFile.__dict__["create"]
_ORIGINAL_LEN = PyArrowFile.__dict__["__len__"]


class _CountedOutput:
    """An output stream that leaves the bytes written on its file when closed (fix 10)."""

    def __init__(self, stream, file: PyArrowFile):
        self._stream, self._file = stream, file

    def write(self, data) -> int:
        return self._stream.write(data)

    def tell(self) -> int:
        return self._stream.tell()

    def flush(self) -> None:
        self._stream.flush()

    @property
    def closed(self) -> bool:
        return self._stream.closed

    def close(self) -> None:
        if not self._stream.closed:
            written = self._stream.tell()
            self._stream.close()  # the object exists, whole, from here on
            self._file.__dict__["_changelake_length"] = written

    def __enter__(self):
        return self

    def __exit__(self, kind, *exc) -> None:
        if kind is not None and hasattr(self._stream, "discard"):
            self._stream.discard()  # a file left by an exception is not written (objectstore._ObjectWriter)
            return
        self.close()


def _store_create(self: PyArrowFile, overwrite: bool = False):
    """``PyArrowFile.create`` on a file system fix 7 made: no existence check, the length kept (fix 10), and
    written as :meth:`changelake.objectstore.Store.open_output` writes (one PUT where the store is reached
    directly)."""
    store = objectstore.store_of_filesystem(self._filesystem)
    if store is None or not objectstore.is_object_location(self.location):
        return _ORIGINAL_CREATE(self, overwrite)
    return _CountedOutput(store.open_output(self.location), self)


def _written_len(self: PyArrowFile) -> int:
    """``len(PyArrowFile)``: the bytes this process wrote to it (fix 10), else the store's answer."""
    written = self.__dict__.get("_changelake_length")
    return written if written is not None else _ORIGINAL_LEN(self)


_ORIGINAL_ADD_ENTRY = ManifestWriter.__dict__["add_entry"]
_ORIGINAL_TO_MANIFEST = ManifestWriter.__dict__["to_manifest_file"]
_ORIGINAL_ADD_MANIFESTS = ManifestListWriter.__dict__["add_manifests"]
_ORIGINAL_LIST_EXIT = ManifestListWriter.__dict__["__exit__"]
#: Entries of the manifests this process wrote that no manifest list numbered yet, by path (fix 11). A
#: manifest whose commit failed before its list was written stays until evicted.
_UNLISTED: BoundedLRU[list[ManifestEntry]] = BoundedLRU(MAX_CACHED_ENTRIES, size=len)


def _kept_add_entry(self: ManifestWriter, entry: ManifestEntry) -> ManifestWriter:
    """``ManifestWriter.add_entry``, keeping the entry as written (fix 11)."""
    _ORIGINAL_ADD_ENTRY(self, entry)
    self.__dict__.setdefault("_changelake_entries", []).append(entry)
    return self


def _kept_to_manifest_file(self: ManifestWriter) -> ManifestFile:
    """``ManifestWriter.to_manifest_file``, its entries left for the list that numbers it (fix 11)."""
    manifest = _ORIGINAL_TO_MANIFEST(self)
    if self.version == 2:
        _UNLISTED.put(manifest.manifest_path, self.__dict__.setdefault("_changelake_entries", []))
    return manifest


def _as_read(
    manifest: ManifestFile, written: list[ManifestEntry], discard_deleted: bool
) -> list[ManifestEntry]:
    """The entries ``fetch_manifest_entry`` gives for a numbered manifest that was written with ``written``."""
    return [
        _inherit_from_manifest(
            ManifestEntry.from_args(
                status=e.status,
                snapshot_id=e.snapshot_id,
                sequence_number=e.sequence_number,
                file_sequence_number=e.file_sequence_number,
                data_file=e.data_file,
            ),
            manifest,
        )
        for e in written
        if not discard_deleted or e.status != ManifestEntryStatus.DELETED
    ]


def _kept_add_manifests(self: ManifestListWriter, manifest_files: list[ManifestFile]) -> ManifestListWriter:
    """``ManifestListWriter.add_manifests``, keeping the manifests as numbered and, for the manifests this
    commit wrote, their entries as a read would give them (fix 11)."""
    prepared = [self.prepare_manifest(m) for m in manifest_files]
    self._writer.write_block(prepared)
    listed = self.__dict__.setdefault("_changelake_listed", [])
    listed += prepared
    if type(self) is ManifestListWriterV2:
        for manifest in prepared:
            written = _UNLISTED.pop(manifest.manifest_path)
            if written is None or manifest.added_snapshot_id != self._commit_snapshot_id:
                continue
            if any(
                getattr(e.data_file, "_spec_id", manifest.partition_spec_id) != manifest.partition_spec_id
                for e in written
            ):
                continue  # inheriting would renumber a shared file's spec: leave it to a read
            for discard_deleted in (True, False):
                key = (
                    manifest.manifest_path,
                    manifest.sequence_number,
                    manifest.added_snapshot_id,
                    manifest.partition_spec_id,
                    discard_deleted,
                )
                _ENTRIES.put(key, _as_read(manifest, written, discard_deleted))
    return self


def _kept_list_exit(self: ManifestListWriter, exc_type, exc_value, traceback) -> None:
    """``ManifestListWriter.__exit__``: a list written whole is kept as its manifests were numbered (fix 11)."""
    _ORIGINAL_LIST_EXIT(self, exc_type, exc_value, traceback)
    if exc_type is None and type(self) is ManifestListWriterV2:
        _LISTS.put(self._output_file.location, tuple(self.__dict__.get("_changelake_listed", ())))


def install() -> bool:
    """Install the fixes if this pyiceberg is one they were checked against; return whether they are."""
    if pyiceberg.__version__ not in CHECKED_VERSIONS:
        return False
    for cls in SHARED_ON_DEEPCOPY:
        if cls.__dict__.get("__deepcopy__") is not _share:
            setattr(cls, "__deepcopy__", _share)  # noqa: B010
    if Transaction.__dict__["table_metadata"] is _ORIGINAL:
        cached = property(_cached_table_metadata, doc=_ORIGINAL.__doc__)
        setattr(Transaction, "table_metadata", cached)  # noqa: B010 (mypy refuses to assign a property)
    if snapshots._manifests is _ORIGINAL_MANIFESTS:
        snapshots._manifests = _cached_manifests
    for owner, name, original, fixed in (
        (_OverwriteFiles, "_existing_manifests", _ORIGINAL_EXISTING, _live_existing_manifests),
        (ManifestFile, "fetch_manifest_entry", _ORIGINAL_FETCH, _cached_fetch_manifest_entry),
        (PyArrowFileIO, "_initialize_s3_fs", _ORIGINAL_S3_FS, _store_s3_fs),
        (PyArrowFile, "open", _ORIGINAL_OPEN, _store_open),
        (ManifestWriter, "new_writer", _ORIGINAL_NEW_WRITER, _prepared_manifest_writer),
        (ManifestListWriter, "__enter__", _ORIGINAL_LIST_ENTER, _prepared_list_enter),
        (PyArrowFile, "create", _ORIGINAL_CREATE, _store_create),
        (PyArrowFile, "__len__", _ORIGINAL_LEN, _written_len),
        (ManifestWriter, "add_entry", _ORIGINAL_ADD_ENTRY, _kept_add_entry),
        (ManifestWriter, "to_manifest_file", _ORIGINAL_TO_MANIFEST, _kept_to_manifest_file),
        (ManifestListWriter, "add_manifests", _ORIGINAL_ADD_MANIFESTS, _kept_add_manifests),
        (ManifestListWriter, "__exit__", _ORIGINAL_LIST_EXIT, _kept_list_exit),
    ):
        if owner.__dict__[name] is original:  # once: a second install() leaves the fix in place
            setattr(owner, name, fixed)
    return True


#: (table uuid, schema id, format version, Arrow schema) of files found compatible with the table (fix 5).
_COMPATIBLE: BoundedLRU[bool] = BoundedLRU(256)


def describe_parquet(
    io: FileIO,
    metadata: TableMetadata,
    path: str,
    sort_order_id: int | None = None,
    written: tuple[int, bytes] | None = None,
) -> DataFile:
    """``parquet_file_to_data_file(io, metadata, path)`` with its spec id and the sort order its writer
    declares set, checking the file's schema against the table's once per distinct Arrow schema (fix 5;
    pyiceberg's own function on other versions, which declares no order). ``written``: the file's size and
    serialized footer as its writer had them, so nothing is read (on an object store: no GET, no HEAD)."""
    if not INSTALLED:
        data_file = parquet_file_to_data_file(io, metadata, path)
    else:
        import pyarrow.parquet as pq
        from pyiceberg.io.pyarrow import (
            _check_pyarrow_schema_compatible,
            compute_statistics_plan,
            data_file_statistics_from_parquet_metadata,
            parquet_path_to_id_mapping,
        )
        from pyiceberg.manifest import DataFileContent, FileFormat

        if written is not None:
            import pyarrow as pa

            size, footer = written[0], pq.read_metadata(pa.BufferReader(written[1]))
        else:
            input_file = io.new_input(path)
            with input_file.open() as stream:
                footer = pq.read_metadata(stream)
            size = len(input_file)
        arrow_schema = footer.schema.to_arrow_schema()
        schema = metadata.schema()
        key = (str(metadata.table_uuid), schema.schema_id, metadata.format_version, arrow_schema)
        if _COMPATIBLE.get(key) is None:
            _check_pyarrow_schema_compatible(schema, arrow_schema, format_version=metadata.format_version)
            _COMPATIBLE.put(key, True)
        statistics = data_file_statistics_from_parquet_metadata(
            parquet_metadata=footer,
            stats_columns=compute_statistics_plan(schema, metadata.properties),
            parquet_column_mapping=parquet_path_to_id_mapping(schema),
        )
        data_file = DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=path,
            file_format=FileFormat.PARQUET,
            partition=statistics.partition(metadata.spec(), schema),
            file_size_in_bytes=size,
            sort_order_id=sort_order_id,
            equality_ids=None,
            key_metadata=None,
            **statistics.to_serialized_dict(),
        )
    # As a planned file has it (DataFile.from_args drops it): a later commit may be given this description
    # of the file to replace (changelake.storage.iceberg.SNAPSHOT_FILES).
    data_file.spec_id = metadata.default_spec_id
    return data_file


INSTALLED = install()
