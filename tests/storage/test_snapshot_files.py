"""The live files per snapshot (changelake.storage.iceberg.SNAPSHOT_FILES), data and position-delete files: a
batch's commit derives its snapshot's files from its parent's, so the next batch plans without reading
manifests; the derived list is what planning the snapshot finds; a snapshot committed by anyone else is read
from its manifests; the cache is bounded."""

from __future__ import annotations

import pytest

from changelake import ChangeLake
from changelake.storage import iceberg
from changelake.storage.iceberg import SNAPSHOT_FILES, Storage
from tests.helpers import sparkless_lake

SPEC = {
    "name": "shop.orders",
    "columns": [{"name": "id", "type": "BIGINT"}, {"name": "v", "type": "STRING"}],
    "primary_key": ["id"],
    "options": {"bucket.num": 4},
}


@pytest.fixture
def lake(tmp_path) -> ChangeLake:
    lake = sparkless_lake(tmp_path)
    lake.create_table(SPEC)
    return lake


def planned(table) -> list:
    """The snapshot's data and delete files as pyiceberg plans them (no cache)."""
    tasks = list(table.scan().plan_files())
    deletes = {d.file_path: d for t in tasks for d in t.delete_files}
    return [t.file for t in tasks] + list(deletes.values())


def key_of(table) -> tuple[str, int]:
    return (str(table.metadata.table_uuid), table.current_snapshot().snapshot_id)


def upserts(lake, batch_id: int, ids: range) -> None:
    lake.apply(
        "shop.orders", [{"op": "+I", "data": {"id": i, "v": f"{batch_id}"}} for i in ids], batch_id=batch_id
    )


def test_a_commit_derives_its_snapshots_files_and_they_equal_a_plan(lake, monkeypatch):
    spec = lake.spec("shop.orders")
    upserts(lake, 1, range(40))  # every bucket
    upserts(lake, 2, range(0, 40, 7))  # some buckets replaced
    upserts(lake, 3, range(100, 103))
    table = lake.storage.pk_table(spec)
    derived = SNAPSHOT_FILES.get(key_of(table))
    assert derived is not None  # put by the commit, before anything planned this snapshot
    truth = planned(table)
    assert any(f.content == 1 for f in truth)  # merge-on-read: the batches wrote delete files
    assert sorted(f.path for f in derived) == sorted(f.file_path for f in truth)
    by_path = {f.file_path: f for f in truth}
    for f in derived:  # the same description: counts, sizes, partition, statistics, spec id
        assert f.data_file._data == by_path[f.path]._data
        assert f.data_file.spec_id == by_path[f.path].spec_id
        assert f.sequence_number is not None
    monkeypatch.setattr(type(table), "scan", lambda *a, **k: pytest.fail("planned a known snapshot"))
    monkeypatch.setattr(
        type(table.current_snapshot()), "manifests", lambda *a, **k: pytest.fail("read a known snapshot")
    )
    assert sorted(f.path for f in Storage.table_files(table)) == sorted(by_path)
    # ... and the next batch, planned from the derived list, replaces and deletes the right rows.
    monkeypatch.undo()
    upserts(lake, 4, range(0, 40, 3))
    table = lake.storage.pk_table(spec)
    assert sorted(f.path for f in Storage.table_files(table)) == sorted(f.file_path for f in planned(table))
    ids = table.scan().to_arrow()["id"]  # pyiceberg's own read, deletes applied
    assert sorted(ids.to_pylist()) == [*range(40), 100, 101, 102]  # each key once: no row left behind


def test_a_snapshot_committed_elsewhere_is_planned(lake):
    spec = lake.spec("shop.orders")
    upserts(lake, 1, range(20))
    table = lake.storage.pk_table(spec)
    # Another writer's commit (not through commit_batch): drop one data file with plain pyiceberg.
    victim = planned(table)[0]
    tx = table.transaction()
    with tx.update_snapshot().overwrite() as overwrite:
        overwrite.delete_data_file(victim)
    other = tx.commit_transaction()
    assert SNAPSHOT_FILES.get(key_of(other)) is None
    files = Storage.table_files(lake.storage.pk_table(spec))
    assert victim.file_path not in {f.path for f in files}
    assert sorted(f.path for f in files) == sorted(f.file_path for f in planned(other))


def test_the_cache_is_bounded_by_files(lake, monkeypatch):
    monkeypatch.setattr(iceberg, "SNAPSHOT_FILES", type(SNAPSHOT_FILES)(6, size=len))
    for batch_id in range(1, 5):
        upserts(lake, batch_id, range(batch_id * 10, batch_id * 10 + 8))  # 4 buckets: 4 files a snapshot
    cache = iceberg.SNAPSHOT_FILES
    assert cache.total <= 6
    table = lake.storage.pk_table(lake.spec("shop.orders"))
    assert sorted(f.path for f in Storage.table_files(table)) == sorted(f.file_path for f in planned(table))
