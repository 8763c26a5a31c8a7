"""Keeping a table's history bounded: snapshot expiry with file cleanup, and orphan-file removal.

**Expiry** follows Paimon's retention rule over the main branch's snapshots, newest first: the newest
``snapshot.num-retained.min`` are always kept, at most ``snapshot.num-retained.max`` are kept, and between the
two a snapshot is kept while it is younger than ``snapshot.time-retained``. Before a PK table's batch snapshots
go, their summaries go to the table's batch history (:mod:`changelake.storage.history`); one metadata commit
removes the snapshots and points the table at the new history, and requires the branch head not to have moved
(a racing writer makes it fail: nothing is removed). Only then are files deleted: those the expired snapshots
reached (manifest lists, manifests, data and delete files, changelake's changelog manifests) that no retained
snapshot reaches. A crash in between leaves unreachable files for the orphan sweep; it never deletes a file a
retained snapshot reads. Iceberg's own ``write.metadata.delete-after-commit.enabled`` keeps the metadata files
few (:data:`changelake.storage.iceberg.METADATA_RETENTION`).

**Orphan files** are files under the table's location that no snapshot, metadata file, history chunk or dead
letter reaches: what a crashed or killed apply, compaction or expiry left. Only those older than a safety age
(a day by default) are removed, so a file a running apply has written but not yet committed is never touched.
Symbolic links are neither followed nor removed.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of
from pyiceberg.table.update import AssertRefSnapshotId
from pyiceberg.table.update.snapshot import ExpireSnapshots

from changelake import objectstore
from changelake.faults import fault
from changelake.spec import StorageOptions
from changelake.storage import history, summary
from changelake.storage.files import side_location

MAINTENANCE = (
    summary.PREFIX + "maintenance"
)  # table property: when maintenance last changed the table, and what
#: Expiry waits until this many snapshots are due (one metadata commit per ten batches, not one per batch),
#: unless it is asked to expire everything due (``changelake maintain``).
EXPIRE_AT_LEAST = 10


@dataclass
class Outcome:
    """What a maintenance step did to one table."""

    table: str
    expired_snapshots: int = 0
    retained_snapshots: int = 0
    files_deleted: int = 0
    bytes_deleted: int = 0
    history_batches: int = 0  # batches the history holds after the step
    notes: list[str] = field(default_factory=list)

    def add(self, other: Outcome) -> None:
        self.expired_snapshots += other.expired_snapshots
        self.files_deleted += other.files_deleted
        self.bytes_deleted += other.bytes_deleted
        self.notes += other.notes


def retained_snapshots(
    table: Table, options: StorageOptions, now_ms: int, keep_after_batch: int | None = None
):
    """(retained, expired) snapshots of the table under its retention options. ``keep_after_batch`` keeps
    every batch snapshot above that batch (their changelog is not committed yet)."""
    current = table.current_snapshot()
    if current is None:
        return [], []
    ancestry = list(ancestors_of(current, table.metadata))  # newest first
    cutoff = now_ms - options.time_retained_s * 1000
    young = sum(1 for s in ancestry if s.timestamp_ms >= cutoff)
    keep = min(len(ancestry), options.snapshots_max, max(options.snapshots_min, young))
    if keep_after_batch is not None:
        for i, snap in enumerate(ancestry):
            batch = summary.batch_of(summary.properties(snap))
            if batch is not None and batch > keep_after_batch:
                keep = max(keep, i + 1)
    retained = ancestry[:keep]
    ids = {s.snapshot_id for s in retained}
    # A snapshot a tag or branch names stays (Iceberg's rule), among them changelake's state snapshot
    # (lineage.STATE_TAG) when other writers committed after it.
    for ref in table.metadata.refs.values():
        named = table.snapshot_by_id(ref.snapshot_id) if ref.snapshot_id not in ids else None
        if named is not None:
            retained.append(named)
            ids.add(named.snapshot_id)
    return retained, [s for s in table.metadata.snapshots if s.snapshot_id not in ids]


def reachable(table: Table, snapshots: Iterable[Snapshot], live_only: bool = True) -> set[str]:
    """Every file the snapshots reach: their manifest lists, manifests, data and delete files, and the
    changelog manifests their summaries name. ``live_only=False`` also counts the files an expired snapshot's
    manifests list as deleted."""
    out: set[str] = set()
    seen: set[str] = set()
    for snap in snapshots:
        out.add(snap.manifest_list)
        manifest = summary.properties(snap).get(summary.CHANGELOG_MANIFEST)
        if manifest:
            out.add(manifest)
        for m in snap.manifests(table.io):
            out.add(m.manifest_path)
            if m.manifest_path in seen:
                continue
            seen.add(m.manifest_path)
            for entry in m.fetch_manifest_entry(table.io, discard_deleted=live_only):
                out.add(entry.data_file.file_path)
    return out


def expire(
    table: Table,
    options: StorageOptions,
    *,
    keep_after_batch: int | None = None,
    at_least: int = EXPIRE_AT_LEAST,
    now_ms: int | None = None,
    with_history: bool = True,
) -> tuple[Table, Outcome]:
    """Expire the snapshots the retention options let go, when at least ``at_least`` are due; keep their
    batches in the history (a PK table: ``with_history``); delete the files only they reached. Raises
    CommitFailedException when another writer committed first (nothing removed)."""
    from changelake.storage.iceberg import METADATA_RETENTION

    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    name = ".".join(table.name())
    retained, expired = retained_snapshots(table, options, now_ms, keep_after_batch)
    outcome = Outcome(name, retained_snapshots=len(retained))
    if not expired or len(expired) < at_least:
        return table, outcome
    props: dict[str, str] = {}
    dropped: list[str] = []  # files the history no longer names once this commits
    if with_history:
        props[history.HISTORY], dropped, outcome.history_batches = _history_after(table, expired, options)
    props[MAINTENANCE] = json.dumps(
        {"at_ms": now_ms, "expired": len(expired), "retained": len(retained)}, sort_keys=True
    )
    props.update({k: v for k, v in METADATA_RETENTION.items() if table.properties.get(k) != v})
    current = table.current_snapshot()
    tx = table.transaction()
    ExpireSnapshots(tx).by_ids([s.snapshot_id for s in expired]).commit()
    tx.set_properties(props)
    # The field's alias is "snapshot-id"; pydantic takes its name too (populate_by_name), which mypy cannot see.
    assert_main = AssertRefSnapshotId(snapshot_id=current.snapshot_id if current else None, ref="main")  # type: ignore[call-arg]
    tx._apply((), (assert_main,))
    committed = tx.commit_transaction()
    fault("after-expiry-commit")
    gone = reachable(table, expired, live_only=False) - reachable(committed, retained) | set(dropped)
    outcome.expired_snapshots = len(expired)
    outcome.files_deleted, outcome.bytes_deleted = delete_files(committed.io, gone)
    return committed, outcome


def _history_after(
    table: Table, expired: list[Snapshot], options: StorageOptions
) -> tuple[str, list[str], int]:
    """The history property once the expired batch snapshots are in it, the files it then no longer names
    (merged chunks, dead letters of batches beyond its window), and how many batches it holds."""
    batches = sorted(
        ((s.snapshot_id, summary.properties(s)) for s in expired if summary.batch_of(summary.properties(s))),
        key=lambda e: summary.batch_of(e[1]) or 0,
    )
    chunks = history.chunks(table.properties)
    dropped: list[str] = []
    if batches:
        chunks.append(_write_chunk(table, batches))
    if len(chunks) > history.MAX_CHUNKS:
        entries = [e for c in chunks for e in history.decode(_read(table, c.path))]
        latest = max(e.batch.batch_id for e in entries)
        kept = [e for e in entries if e.batch.batch_id > latest - options.history_retained]
        dropped = [c.path for c in chunks] + [
            e.batch.dead_letter for e in entries if e not in kept and e.batch.dead_letter
        ]
        chunks = (
            [_write_chunk(table, [(e.snapshot_id, e.batch.to_properties()) for e in kept])] if kept else []
        )
    return history.chunks_property(chunks), dropped, sum(c.count for c in chunks)


def _write_chunk(table: Table, entries: list[tuple[int, dict[str, str]]]) -> history.Chunk:
    first, last = summary.batch_of(entries[0][1]) or 0, summary.batch_of(entries[-1][1]) or 0
    # Not ".gz": pyarrow's output stream would compress the compressed bytes again.
    name = f"history-{first:012d}-{last:012d}-{uuid.uuid4().hex[:12]}.jsonl.gzip"
    path = f"{side_location(table.location())}/history/{name}"
    with table.io.new_output(path).create(overwrite=False) as out:
        out.write(history.encode(entries))
    return history.Chunk(path, first, last, len(entries))


def _read(table: Table, path: str) -> bytes:
    with table.io.new_input(path).open() as stream:
        return stream.read()


def delete_files(io: Any, paths: Iterable[str]) -> tuple[int, int]:
    """Delete files (a missing one is fine: a crashed run may have deleted it); (count, bytes) deleted. The
    apply-attempt directories this empties go too (:func:`_prune_attempt_dirs`)."""
    count = size = 0
    emptied: set[str] = set()
    store = None
    for i, path in enumerate(sorted(paths)):
        if i == 1:
            fault("deleting-files")  # one file deleted, the rest not
        local = _local_path(path)
        try:
            if local is None and objectstore.is_object_location(path):
                store = store or objectstore.Store(objectstore.options_of_fileio(dict(io.properties)))
                info = store.info(path)
                if info is None or not store.delete(path):
                    continue
                size += info.size
                emptied.add(path.rsplit("/", 1)[0])
            elif local is not None:
                if os.path.islink(local):
                    continue
                size += os.path.getsize(local)
                os.remove(local)
                emptied.add(os.path.dirname(local))
            else:
                size += len(io.new_input(path))
                io.delete(path)
            count += 1
        except FileNotFoundError:
            continue
    if store is not None:
        _prune_attempt_prefixes(store, emptied)
    else:
        _prune_attempt_dirs(emptied)
    return count, size


def drop_files(io: Any, paths: Iterable[str]) -> None:
    """Delete files nothing names and nothing reads again (a batch's staged records), without counting them:
    objects in a store reached directly (:attr:`objectstore.Store.direct`) in one request per 1,000
    (:meth:`objectstore.Store.delete_many`: no HEAD per object, and no directory marker left behind to prune);
    anything else as :func:`delete_files` does."""
    paths = list(paths)
    objects = {p for p in paths if _local_path(p) is None and objectstore.is_object_location(p)}
    if objects:
        store = objectstore.Store(objectstore.options_of_fileio(dict(io.properties)))
        if store.direct is not None:
            store.delete_many(sorted(objects))
            paths = [p for p in paths if p not in objects]
    if paths:
        delete_files(io, paths)


#: The directories an apply attempt (or a compaction) makes for its own files: ``data/batch-<id>-<attempt>``
#: (and its ``-staging`` twin), never written again once the attempt is over.
_ATTEMPT_DIR = "batch-"


def _prune_attempt_dirs(directories: Iterable[str]) -> None:
    """Remove the apply-attempt directories (and their partition directories) that deleting files emptied,
    whatever their age: the orphan sweep's age rule (:func:`remove_empty_dirs`) would keep a directory emptied
    a moment ago, so every sweep left the ones its own expiry had just emptied. Shared directories
    (``data/``, ``metadata/``, ``dead-letter/``) are never removed here: a writer may be about to create a
    file in them."""
    for directory in sorted(directories, key=len, reverse=True):
        # The attempt directory is the file's directory or its parent (a partition directory inside it).
        chain = [directory, os.path.dirname(directory)]
        top = next((i for i, d in enumerate(chain) if os.path.basename(d).startswith(_ATTEMPT_DIR)), None)
        if top is None:
            continue
        for d in chain[: top + 1]:
            try:
                os.rmdir(d)  # only when empty
            except OSError:
                break


def _prune_attempt_prefixes(store: objectstore.Store, prefixes: Iterable[str]) -> None:
    """:func:`_prune_attempt_dirs` in an object store, where a directory is only a name: pyarrow's S3 file system
    leaves an empty marker object (``…/batch-…/``) where it deleted a prefix's last object, to keep the
    "directory"; an apply attempt's prefix that no longer holds an object loses its marker here (a LIST and a
    DELETE), so expiry and the orphan sweep leave no marker per expired attempt behind."""
    tops = set()
    for prefix in prefixes:
        chain = [prefix, prefix.rsplit("/", 1)[0]]
        top = next((d for d in chain if d.rsplit("/", 1)[-1].startswith(_ATTEMPT_DIR)), None)
        if top is not None:
            tops.add(top)
    for top in sorted(tops):
        try:
            if not store.list(top, recursive=True):
                store.filesystem.delete_dir(store.path(top).key_path)
        except OSError:
            continue  # best effort: a marker left is a zero-byte name, not data


def remove_orphans(table: Table, older_than_s: float, now: float | None = None) -> Outcome:
    """Delete the files under the table's location (and its side location: storage.files.side_location) that
    nothing of the table reaches, older than
    ``older_than_s`` seconds (and then the empty directories). Local warehouses only; other file systems are
    listed with pyarrow's."""
    now = time.time() if now is None else now
    outcome = Outcome(".".join(table.name()))
    keep = reachable(table, table.metadata.snapshots) | referenced_outside_snapshots(table)
    keep = {_canonical(p) for p in keep}
    roots = (table.location(), side_location(table.location()))
    orphans = [
        path
        for root in roots
        for path, mtime in list_files(root, dict(table.io.properties))
        if _canonical(path) not in keep and mtime < now - older_than_s
    ]
    fault("before-orphan-sweep")
    outcome.files_deleted, outcome.bytes_deleted = delete_files(table.io, orphans)
    for root in roots:
        remove_empty_dirs(root, older_than_s, now)
    return outcome


def referenced_outside_snapshots(table: Table) -> set[str]:
    """Files of a table that no manifest names: its metadata files, the history's chunks, the dead letters
    the history and the snapshots name."""
    out = {table.metadata_location} | {e.metadata_file for e in table.metadata.metadata_log}
    for chunk in history.chunks(table.properties):
        out.add(chunk.path)
        for entry in history.decode(_read(table, chunk.path)):
            if entry.batch.dead_letter:
                out.add(entry.batch.dead_letter)
    for snap in table.metadata.snapshots:
        dead_letter = summary.properties(snap).get(summary.DEAD_LETTER)
        if dead_letter:
            out.add(dead_letter)
    return out


def list_files(location: str, properties: dict[str, str] | None = None) -> list[tuple[str, float]]:
    """(location, modification time) of every regular file under ``location``; symbolic links are not
    followed (nor listed). An object store is listed (one LIST per 1,000 objects) as the table's FileIO
    ``properties`` reach it."""
    local = _local_path(location)
    if local is None and objectstore.is_object_location(location):
        store = objectstore.Store(objectstore.options_of_fileio(properties or {}))
        return [(str(i.path), i.mtime_ns / 1e9) for i in store.list(location, recursive=True)]
    if local is None:
        from pyarrow import fs

        filesystem, root = fs.FileSystem.from_uri(location)
        prefix = location[: len(location) - len(root)] if location.endswith(root) else ""
        infos = filesystem.get_file_info(fs.FileSelector(root, recursive=True, allow_not_found=True))
        return [
            (prefix + i.path, i.mtime.timestamp() if i.mtime else 0.0)
            for i in infos
            if i.type == fs.FileType.File
        ]
    out = []
    base = location.rstrip("/")
    for directory, dirs, files in os.walk(local, followlinks=False):
        rel = os.path.relpath(directory, local)
        for name in files:
            full = os.path.join(directory, name)
            st = os.lstat(full)
            if not os.path.islink(full):
                out.append((base + ("" if rel == "." else "/" + rel) + "/" + name, st.st_mtime))
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(directory, d))]
    return out


def remove_empty_dirs(location: str, older_than_s: float = 0.0, now: float | None = None) -> None:
    """Remove the empty directories under ``location`` (not itself), deepest first, left unchanged for
    ``older_than_s`` (an apply attempt's fresh directory may not hold its files yet)."""
    local = _local_path(location)
    if local is None:
        return
    now = time.time() if now is None else now
    for directory, dirs, files in os.walk(local, topdown=False, followlinks=False):
        if (
            directory == local
            or files
            or dirs
            and any(os.path.exists(os.path.join(directory, d)) for d in dirs)
        ):
            continue
        try:
            if os.lstat(directory).st_mtime < now - older_than_s:
                os.rmdir(directory)
        except OSError:
            continue


def _canonical(location: str) -> str:
    local = _local_path(location)
    return os.path.normpath(local) if local is not None else location


def _local_path(location: str) -> str | None:
    uri = urlparse(location)
    if not uri.scheme:
        return location
    return f"{uri.netloc}{uri.path}" if uri.scheme == "file" else None
