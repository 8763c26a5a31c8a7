"""One Iceberg snapshot that adds data files and position-delete files and removes files: what a merge-on-read
batch, a copy-on-write batch and a compaction each commit.

pyiceberg 0.12 reads position deletes but has no public way to write them: its snapshot producers write data
manifests only. :class:`RowDelta` is a snapshot producer on pyiceberg's own ``_SnapshotProducer`` (its
manifest and manifest-list writers, its summary totals, its commit requirements): the added data files go in
a new data manifest, the added delete files in a new *delete* manifest (``content = deletes``), and a parent
manifest that lists a removed file is rewritten without it. Manifests are kept few so that planning stays
cheap as batches go by: when a snapshot would hold more than :data:`MAX_MANIFESTS` manifests of one content,
they are merged into one (their live entries keep their sequence numbers).

The commit requires the branch head to be the parent this producer planned on (pyiceberg's
``AssertRefSnapshotId``), and changelake tables disable pyiceberg's commit retries: a writer that lost a race
re-reads the table and decides (exactly-once, compaction conflicts). It also moves the tag
:data:`~changelake.storage.lineage.STATE_TAG` to the new snapshot, which holds the table's state: another
writer's commits and expiries leave it findable (:mod:`changelake.storage.lineage`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyiceberg.exceptions import ValidationException
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriter,
    ManifestWriterV2,
)
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Operation, SnapshotSummaryCollector, Summary, update_snapshot_summaries
from pyiceberg.table.update import SetSnapshotRefUpdate
from pyiceberg.table.update.snapshot import _SnapshotProducer
from pyiceberg.typedef import EMPTY_DICT

from changelake.storage.lineage import STATE_TAG

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table import Transaction

#: Manifests of one content (data, deletes) a snapshot keeps before they are merged into one.
MAX_MANIFESTS = 8


class DeleteManifestWriterV2(ManifestWriterV2):
    """pyiceberg's v2 manifest writer for delete files (it only writes data manifests)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class RowDelta(_SnapshotProducer["RowDelta"]):
    """Add data and delete files, remove files by path, in one snapshot (see the module docstring)."""

    def __init__(
        self,
        transaction: Transaction,
        io: FileIO,
        added_data: list[DataFile],
        added_deletes: list[DataFile],
        removed: set[str],
        operation: Operation | None = None,
        snapshot_properties: dict[str, str] = EMPTY_DICT,
    ) -> None:
        if operation is None:
            operation = Operation.OVERWRITE if (removed or added_deletes) else Operation.APPEND
        super().__init__(operation, transaction, io, snapshot_properties=snapshot_properties)
        self._added_data_files = list(added_data)
        self._added_delete_files = list(added_deletes)
        self._removed_paths = set(removed)
        self._removed_files: list[DataFile] = []

    # pyiceberg's abstract hooks: this producer writes its manifests itself (_manifests below).
    def _deleted_entries(self) -> list[ManifestEntry]:
        return []

    def _existing_manifests(self) -> list[ManifestFile]:
        return []

    def _validate_concurrency(self) -> None:
        """No validation window: the commit requires the parent to be the branch head."""

    def _writer(self, content: ManifestContent, spec_id: int) -> ManifestWriter:
        args = (
            self.spec(spec_id),
            self.schema(),
            self.new_manifest_output(),
            self._snapshot_id,
            self._compression,
        )
        return (
            DeleteManifestWriterV2(*args) if content == ManifestContent.DELETES else ManifestWriterV2(*args)
        )

    def _write(
        self, content: ManifestContent, spec_id: int, entries: list[ManifestEntry], added: list[DataFile]
    ) -> ManifestFile:
        with self._writer(content, spec_id) as writer:
            for entry in entries:
                writer.existing(entry)
            for data_file in added:
                writer.add(
                    ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED,
                        snapshot_id=self._snapshot_id,
                        sequence_number=None,
                        file_sequence_number=None,
                        data_file=data_file,
                    )
                )
        return writer.to_manifest_file()

    def _manifests(self) -> list[ManifestFile]:
        parent = (
            self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id)
            if self._parent_snapshot_id is not None
            else None
        )
        kept: dict[ManifestContent, list[ManifestFile]] = {
            ManifestContent.DATA: [],
            ManifestContent.DELETES: [],
        }
        found: set[str] = set()
        for manifest in parent.manifests(io=self._io) if parent is not None else []:
            if manifest.added_files_count == 0 and manifest.existing_files_count == 0:
                continue  # only entries deleted in an earlier snapshot: nothing live
            if not self._removed_paths:
                kept[manifest.content].append(manifest)
                continue
            entries = self.fetch_manifest_entry(manifest, discard_deleted=True)
            gone = [e for e in entries if e.data_file.file_path in self._removed_paths]
            if not gone:
                kept[manifest.content].append(manifest)
                continue
            found.update(e.data_file.file_path for e in gone)
            self._removed_files += [e.data_file for e in gone]
            live = [e for e in entries if e.data_file.file_path not in self._removed_paths]
            if live:
                kept[manifest.content].append(
                    self._write(manifest.content, manifest.partition_spec_id, live, [])
                )
        missing = self._removed_paths - found
        if missing:
            # A file this commit replaces is gone from the parent: another writer changed the table.
            raise ValidationException(f"Missing required files to delete: {', '.join(sorted(missing))}")
        out = []
        default_spec = self._transaction.table_metadata.default_spec_id
        for content, added in (
            (ManifestContent.DATA, self._added_data_files),
            (ManifestContent.DELETES, self._added_delete_files),
        ):
            manifests = kept[content]
            if len(manifests) + (1 if added else 0) > MAX_MANIFESTS:
                # Merge: the live entries of this content into one manifest per partition spec (the added files
                # with the default spec's).
                by_spec: dict[int, list[ManifestEntry]] = {default_spec: []}
                for m in manifests:
                    by_spec.setdefault(m.partition_spec_id, []).extend(
                        self.fetch_manifest_entry(m, discard_deleted=True)
                    )
                for spec_id, entries in by_spec.items():
                    new = added if spec_id == default_spec else []
                    if entries or new:
                        out.append(self._write(content, spec_id, entries, new))
            else:
                if added:
                    out.append(self._write(content, default_spec, [], added))
                out += manifests
        return out

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        metadata = self._transaction.table_metadata
        schema, spec = metadata.schema(), metadata.spec()
        collector = SnapshotSummaryCollector()
        for data_file in self._added_data_files + self._added_delete_files:
            collector.add_file(data_file, schema=schema, partition_spec=spec)
        specs = metadata.specs()
        for data_file in self._removed_files:
            collector.remove_file(data_file, schema=schema, partition_spec=specs[data_file.spec_id])
        parent = (
            metadata.snapshot_by_id(self._parent_snapshot_id)
            if self._parent_snapshot_id is not None
            else None
        )
        # pyiceberg's totals know append/overwrite/delete; a compaction's "replace" has the same arithmetic.
        totals = update_snapshot_summaries(
            Summary(operation=Operation.OVERWRITE, **collector.build(), **snapshot_properties),
            previous_summary=parent.summary if parent is not None else None,
        )
        props = {k: v for k, v in totals.additional_properties.items()}
        return Summary(operation=self._operation, **props)


def commit_row_delta(
    table,
    added_data: list[DataFile],
    added_deletes: list[DataFile],
    removed: set[str],
    properties: dict[str, str],
    operation: Operation | None = None,
    table_properties: dict[str, str] | None = None,
):
    """Commit one :class:`RowDelta` snapshot on ``table``'s main branch (and ``table_properties`` with it);
    the table as committed. Raises CommitFailedException when another writer committed first,
    ValidationException when a removed file is not in the parent (both: nothing committed, the new manifests
    removed)."""
    tx = table.transaction()
    if table_properties:
        tx.set_properties(table_properties)
    producer = RowDelta(tx, table.io, added_data, added_deletes, removed, operation, properties)
    try:
        producer.commit()  # writes the manifests and the manifest list
    except Exception:
        producer._clean_all_uncommitted()  # nothing refers to what it wrote
        raise
    # pydantic takes the fields' names too (populate_by_name); mypy sees only their aliases ("ref-name").
    tag = SetSnapshotRefUpdate(
        ref_name=STATE_TAG,  # type: ignore[call-arg]
        type=SnapshotRefType.TAG,
        snapshot_id=producer._snapshot_id,
    )
    tx._apply((tag,), ())
    return tx.commit_transaction()


def is_delete_file(data_file: DataFile) -> bool:
    return data_file.content == DataFileContent.POSITION_DELETES
