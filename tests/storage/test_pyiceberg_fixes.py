"""changelake.storage.pyiceberg_fixes: the metadata cache and the dropped manifests of deleted files, on a real
SQL catalog (SQLite), without Spark."""

from __future__ import annotations

import copy

import pyarrow as pa
import pyarrow.parquet as pq
import pyiceberg
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from changelake.lru import BoundedLRU
from changelake.storage import pyiceberg_fixes


@pytest.fixture
def table(tmp_path):
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("ns")
    schema = Schema(NestedField(1, "k", LongType(), required=False))
    # The files carry no field ids: reads map columns by name, as changelake's tables do.
    mapping = {"schema.name-mapping.default": schema.name_mapping.model_dump_json()}
    return catalog.create_table(("ns", "t"), schema, properties=mapping)


def data_file(table, path, values):
    pq.write_table(pa.table({"k": pa.array(values, pa.int64())}), path)
    return parquet_file_to_data_file(table.io, table.metadata, str(path))


def overwrite(table, removed, added):
    tx = table.transaction()
    with tx.update_snapshot().overwrite() as op:
        for f in removed:
            op.delete_data_file(f)
        for f in added:
            op.append_data_file(f)
    return tx.commit_transaction()


def test_installed_on_the_pyiceberg_this_project_locks():
    # A new pyiceberg fails here on purpose: check whether it has the fixes, then update CHECKED_VERSIONS.
    assert pyiceberg.__version__ in pyiceberg_fixes.CHECKED_VERSIONS
    assert pyiceberg_fixes.INSTALLED
    assert pyiceberg_fixes.install()  # idempotent


def test_transaction_metadata_is_computed_once_per_state(table, monkeypatch):
    calls = []
    original = pyiceberg_fixes.update_table_metadata

    def counting(base, updates):
        calls.append(len(updates))
        return original(base, updates)

    monkeypatch.setattr(pyiceberg_fixes, "update_table_metadata", counting)
    tx = table.transaction()
    first = tx.table_metadata
    assert all(tx.table_metadata is first for _ in range(5))
    assert calls == [0]
    tx.set_properties(owner="a")  # staging an update is a new state: computed again, and current
    assert tx.table_metadata.properties["owner"] == "a"
    assert tx.table_metadata.properties["owner"] == "a"
    assert calls == [0, 1]
    committed = tx.commit_transaction()
    assert committed.properties["owner"] == "a"
    again = committed.transaction()  # a new table metadata object: not the old transaction's result
    assert again.table_metadata.properties["owner"] == "a"
    assert again.table_metadata is not first


def test_overwrites_do_not_keep_manifests_of_deleted_files(table, tmp_path):
    table = overwrite(table, [], [data_file(table, tmp_path / "0.parquet", [0])])
    snapshots = [table.current_snapshot().snapshot_id]
    for i in range(1, 8):
        new = data_file(table, tmp_path / f"{i}.parquet", [i])
        live = [task.file for task in table.scan().plan_files()]  # as the applier gets the files it replaces
        table = overwrite(table, live, [new])
        snapshots.append(table.current_snapshot().snapshot_id)
    manifests = table.current_snapshot().manifests(table.io)
    # The added file's manifest and this commit's manifest of its deleted file; none of the earlier ones.
    assert len(manifests) == 2, [
        (m.added_files_count, m.existing_files_count, m.deleted_files_count) for m in manifests
    ]
    assert table.scan().to_arrow().column("k").to_pylist() == [7]
    # Time travel reads each snapshot's own manifest list, as before.
    for i, snapshot_id in enumerate(snapshots):
        assert table.scan(snapshot_id=snapshot_id).to_arrow().column("k").to_pylist() == [i]


def test_only_deleted_is_judged_by_the_manifest_list_counts():
    from types import SimpleNamespace as M

    assert pyiceberg_fixes.only_deleted(M(added_files_count=0, existing_files_count=0, deleted_files_count=3))
    assert not pyiceberg_fixes.only_deleted(
        M(added_files_count=1, existing_files_count=0, deleted_files_count=3)
    )
    assert not pyiceberg_fixes.only_deleted(
        M(added_files_count=0, existing_files_count=2, deleted_files_count=3)
    )
    assert not pyiceberg_fixes.only_deleted(
        M(added_files_count=0, existing_files_count=0, deleted_files_count=0)
    )
    assert not pyiceberg_fixes.only_deleted(
        M(added_files_count=None, existing_files_count=None, deleted_files_count=None)
    )


def test_a_metadata_deep_copy_shares_history_entries_and_copies_their_containers(table, tmp_path):
    for i in range(3):
        table = overwrite(
            table,
            [task.file for task in table.scan().plan_files()],
            [data_file(table, tmp_path / f"{i}.parquet", [i])],
        )
    base = table.metadata
    copied = base.model_copy(deep=True)  # what update_table_metadata returns
    assert copied == base
    assert len(base.snapshots) == 3 and len(base.snapshot_log) == 3 and base.metadata_log
    for entries in ("snapshots", "snapshot_log", "metadata_log"):
        mine, theirs = getattr(copied, entries), getattr(base, entries)
        assert mine is not theirs  # the list is copied: changing it leaves the base alone
        assert all(a is b for a, b in zip(mine, theirs, strict=True))  # the frozen entries are shared
    assert copied.properties is not base.properties and copied.refs is not base.refs
    copied.snapshots.append(copied.snapshots[0])
    assert len(base.snapshots) == 3
    # The table goes on committing and time-travelling as before.
    table = overwrite(
        table,
        [task.file for task in table.scan().plan_files()],
        [data_file(table, tmp_path / "3.parquet", [3])],
    )
    assert [
        table.scan(snapshot_id=s.snapshot_id).to_arrow()["k"].to_pylist() for s in table.metadata.snapshots
    ] == [[0], [1], [2], [3]]


def test_committed_manifests_are_read_once_and_give_what_a_fresh_read_gives(table, tmp_path, monkeypatch):
    """Fix 4: a committed manifest's entries are decoded once for every plan and commit that asks; a
    manifest of a commit in flight (no sequence number yet) is read each time; the cache is bounded."""
    reads = []
    original = pyiceberg_fixes._ORIGINAL_FETCH

    def counting(manifest, io, discard_deleted=True):
        reads.append(manifest.manifest_path)
        return original(manifest, io, discard_deleted)

    monkeypatch.setattr(pyiceberg_fixes, "_ORIGINAL_FETCH", counting)
    a = data_file(table, tmp_path / "a.parquet", [1, 2])
    b = data_file(table, tmp_path / "b.parquet", [3])
    table = overwrite(table, [], [a, b])
    c = data_file(table, tmp_path / "c.parquet", [4])
    (planned_a,) = [t.file for t in table.scan().plan_files() if t.file.file_path == a.file_path]
    table = overwrite(table, [planned_a], [c])  # reads the first snapshot's manifest (deleted, kept entries)
    # As in a process that did not write them (fix 11 keeps what this one wrote): nothing kept yet.
    entries = BoundedLRU(pyiceberg_fixes.MAX_CACHED_ENTRIES, size=len)
    monkeypatch.setattr(pyiceberg_fixes, "_ENTRIES", entries)

    def plan():
        return sorted(t.file.file_path for t in table.scan().plan_files())

    reads.clear()
    assert plan() == sorted([b.file_path, c.file_path])
    first = list(reads)
    assert first  # the first plan reads the snapshot's manifests
    assert plan() == sorted([b.file_path, c.file_path]) and reads == first  # the second reads none

    manifest = table.current_snapshot().manifests(table.io)[0]
    cached = manifest.fetch_manifest_entry(table.io)
    fresh = original(manifest, table.io)
    assert [(e.status, e.sequence_number, e.snapshot_id, e.data_file.file_path) for e in cached] == [
        (e.status, e.sequence_number, e.snapshot_id, e.data_file.file_path) for e in fresh
    ]
    assert cached is not manifest.fetch_manifest_entry(table.io)  # each caller gets its own list

    in_flight = copy.copy(manifest)
    in_flight.sequence_number = -1  # as a manifest list writer has not numbered it yet
    reads.clear()
    in_flight.fetch_manifest_entry(table.io)
    in_flight.fetch_manifest_entry(table.io)
    assert reads == [manifest.manifest_path] * 2  # never kept: its entries would keep the unassigned number

    renumbered = copy.copy(manifest)
    renumbered.sequence_number = manifest.sequence_number + 7  # the same path under another number: read
    reads.clear()
    renumbered.fetch_manifest_entry(table.io)
    assert reads == [manifest.manifest_path]

    # Bounded by the entries kept: a manifest read with new keys evicts the oldest until the rest fit.
    assert entries.total == sum(map(len, entries.values())) > 2
    entries.limit = 2
    for m in table.current_snapshot().manifests(table.io):
        m.fetch_manifest_entry(table.io, discard_deleted=False)
    assert 0 < entries.total == sum(map(len, entries.values())) <= 2


def test_a_described_file_equals_pyicebergs_description_and_each_schema_is_checked(
    table, tmp_path, monkeypatch
):
    checks = []
    original = pyiceberg.io.pyarrow._check_pyarrow_schema_compatible
    monkeypatch.setattr(
        pyiceberg.io.pyarrow,
        "_check_pyarrow_schema_compatible",
        lambda *a, **k: checks.append(a[1]) or original(*a, **k),
    )
    paths = []
    for i in range(3):
        pq.write_table(pa.table({"k": pa.array([i, 10 * i, None], pa.int64())}), tmp_path / f"{i}.parquet")
        paths.append(str(tmp_path / f"{i}.parquet"))
    described = [pyiceberg_fixes.describe_parquet(table.io, table.metadata, p) for p in paths]
    for p, d in zip(paths, described, strict=True):
        expected = parquet_file_to_data_file(table.io, table.metadata, p)
        assert d._data == expected._data  # path, counts, sizes, bounds, null counts, partition
        assert d.spec_id == table.metadata.default_spec_id
    assert len(checks) == 3 + 1  # pyiceberg's three, and this table's one Arrow schema once
    # A file of another schema is checked (and refused) even after a compatible one was.
    pq.write_table(pa.table({"k": pa.array([1], pa.int64()), "x": pa.array([1])}), tmp_path / "wide.parquet")
    with pytest.raises(ValueError, match="more columns: x"):
        pyiceberg_fixes.describe_parquet(table.io, table.metadata, str(tmp_path / "wide.parquet"))


def test_a_manifest_list_is_read_once_and_gives_what_a_fresh_read_gives(table, tmp_path, monkeypatch):
    """Fix 6: a snapshot's manifest list is decoded once for every use; the manifests are what pyiceberg's
    own read gives."""
    reads = []
    original = pyiceberg_fixes._ORIGINAL_MANIFESTS

    def counting(io, manifest_list):
        reads.append(manifest_list)
        return original(io, manifest_list)

    monkeypatch.setattr(pyiceberg_fixes, "_ORIGINAL_MANIFESTS", counting)
    table = overwrite(table, [], [data_file(table, tmp_path / "a.parquet", [1, 2])])
    # As in a process that did not write it (fix 11 keeps what this one wrote): nothing kept yet.
    monkeypatch.setattr(pyiceberg_fixes, "_LISTS", BoundedLRU(pyiceberg_fixes.MAX_MANIFEST_LISTS))
    monkeypatch.setattr(pyiceberg_fixes, "_ENTRIES", BoundedLRU(pyiceberg_fixes.MAX_CACHED_ENTRIES, size=len))
    snapshot = table.current_snapshot()
    first = snapshot.manifests(table.io)
    assert snapshot.manifests(table.io) == first and reads == [snapshot.manifest_list]  # read once
    assert [m.manifest_path for m in first] == [
        m.manifest_path for m in original(table.io, snapshot.manifest_list)
    ]
    assert sorted(t.file.file_path for t in table.scan().plan_files()) == [str(tmp_path / "a.parquet")]
    assert reads == [snapshot.manifest_list]  # the plan used the kept list too


def test_manifest_writers_are_built_once_per_header_and_write_what_pyicebergs_write(
    table, tmp_path, monkeypatch
):
    """Fix 9: the Avro writer and header schema of a manifest are built once per header; a manifest so written
    has pyiceberg's own header (each file its own sync marker) and entries."""
    from pyiceberg.avro.file import AvroFile
    from pyiceberg.manifest import (
        DEFAULT_READ_VERSION,
        ManifestEntry,
        ManifestEntryStatus,
        ManifestWriter,
        write_manifest,
    )

    monkeypatch.setattr(pyiceberg_fixes, "_AVRO_WRITERS", BoundedLRU(64))
    built = []
    with_partition = ManifestWriter._with_partition
    monkeypatch.setattr(
        ManifestWriter, "_with_partition", lambda self, v: built.append(v) or with_partition(self, v)
    )
    added = data_file(table, tmp_path / "a.parquet", [3, 1, 2])

    def write(name, new_writer):
        monkeypatch.setattr(ManifestWriter, "new_writer", new_writer)
        path = str(tmp_path / name)
        with write_manifest(2, table.spec(), table.schema(), table.io.new_output(path), 7, "zstd") as writer:
            writer.add(
                ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=7, data_file=added)
            )
        with AvroFile(table.io.new_input(path)) as avro:
            header = avro.header
        entries = writer.to_manifest_file().fetch_manifest_entry(table.io)
        return header, [(e.status, e.data_file.file_path, e.data_file.lower_bounds) for e in entries]

    first, second = (write(f"p{i}.avro", pyiceberg_fixes._prepared_manifest_writer) for i in range(2))
    assert built == [2, DEFAULT_READ_VERSION]  # the entry schemas built for the first manifest only
    plain = write("plain.avro", pyiceberg_fixes._ORIGINAL_NEW_WRITER)
    assert first[0].meta == second[0].meta == plain[0].meta
    assert len({first[0].sync, second[0].sync, plain[0].sync}) == 3
    assert (
        first[1]
        == second[1]
        == plain[1]
        == [(ManifestEntryStatus.ADDED, str(tmp_path / "a.parquet"), added.lower_bounds)]
    )


def test_a_manifest_list_written_by_the_prepared_writer_reads_as_pyicebergs(table, tmp_path, monkeypatch):
    """Fix 9, manifest lists: the header is pyiceberg's own, and the table plans the same files."""
    from pyiceberg.avro.file import AvroFile
    from pyiceberg.manifest import ManifestListWriter

    def commit_and_header(enter, name):
        monkeypatch.setattr(ManifestListWriter, "__enter__", enter)
        committed = overwrite(table, [], [data_file(table, tmp_path / name, [1])])
        with AvroFile(committed.io.new_input(committed.current_snapshot().manifest_list)) as avro:
            return committed, avro.header

    _, plain = commit_and_header(pyiceberg_fixes._ORIGINAL_LIST_ENTER, "a.parquet")
    committed, prepared = commit_and_header(pyiceberg_fixes._prepared_list_enter, "b.parquet")
    differ = ("snapshot-id", "parent-snapshot-id", "sequence-number")  # the commit's own
    assert {k: v for k, v in prepared.meta.items() if k not in differ} == {
        k: v for k, v in plain.meta.items() if k not in differ
    }
    assert prepared.meta["parent-snapshot-id"] == plain.meta["snapshot-id"]
    assert sorted(t.file.file_path for t in committed.scan().plan_files()) == [
        str(tmp_path / "a.parquet"),
        str(tmp_path / "b.parquet"),
    ]


def test_what_a_commit_wrote_is_kept_as_a_fresh_read_gives_it(table, tmp_path, monkeypatch):
    """Fix 11: the manifest list and the manifests a commit wrote are not decoded again by this process, and
    what is kept for them equals pyiceberg's own decoding: the list's numbered manifests, and each manifest's
    entries with and without its deleted ones (pyiceberg's overwrite writes DELETED entries; changelake's
    row delta writes existing, added and delete-file entries)."""
    from changelake.storage.rowdelta import commit_row_delta

    reads = []
    fetch, manifests = pyiceberg_fixes._ORIGINAL_FETCH, pyiceberg_fixes._ORIGINAL_MANIFESTS
    monkeypatch.setattr(
        pyiceberg_fixes,
        "_ORIGINAL_FETCH",
        lambda m, io, d=True: reads.append(m.manifest_path) or fetch(m, io, d),
    )
    monkeypatch.setattr(
        pyiceberg_fixes, "_ORIGINAL_MANIFESTS", lambda io, path: reads.append(path) or manifests(io, path)
    )
    monkeypatch.setattr(pyiceberg_fixes, "_ENTRIES", BoundedLRU(pyiceberg_fixes.MAX_CACHED_ENTRIES, size=len))
    monkeypatch.setattr(pyiceberg_fixes, "_LISTS", BoundedLRU(pyiceberg_fixes.MAX_MANIFEST_LISTS))
    a, b, c, d = (data_file(table, tmp_path / f"{n}.parquet", [i, i + 1]) for i, n in enumerate("abcd"))
    table = overwrite(table, [], [a, b])
    (planned_a,) = [t.file for t in table.scan().plan_files() if t.file.file_path == a.file_path]
    table = overwrite(table, [planned_a], [c])  # a manifest with a DELETED entry, one with an EXISTING one
    table = commit_row_delta(table, [d], [], {c.file_path}, {"changelake.test": "1"})
    assert reads == []  # planning and two commits read nothing this process wrote

    compared = 0
    for snapshot in table.snapshots():
        fresh = manifests(table.io, snapshot.manifest_list)
        assert [m._data for m in snapshot.manifests(table.io)] == [m._data for m in fresh]
        for manifest in fresh:
            for discard_deleted in (True, False):
                kept = manifest.fetch_manifest_entry(table.io, discard_deleted)
                read = fetch(manifest, table.io, discard_deleted)
                assert [(e._data[:4], e.data_file._data, e.data_file.spec_id) for e in kept] == [
                    (e._data[:4], e.data_file._data, e.data_file.spec_id) for e in read
                ]
                compared += len(read)
    assert reads == [] and compared >= 8
    statuses = {
        e.status
        for s in table.snapshots()
        for m in s.manifests(table.io)
        for e in m.fetch_manifest_entry(table.io, discard_deleted=False)
    }
    assert len(statuses) == 3  # ADDED, EXISTING and DELETED entries were all compared
