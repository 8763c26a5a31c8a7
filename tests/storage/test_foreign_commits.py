"""Other writers' commits on changelake's tables (pyiceberg standing in for them here; Iceberg's own Spark
procedures: tests/storage/test_iceberg_interop.py): the state is found behind them, every batch still applies
exactly once, status says who committed last, and every file changelake writes carries the schema's field ids."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.table.update.snapshot import ExpireSnapshots

from changelake.engine import compact
from changelake.errors import ChangelakeError
from changelake.storage import lineage
from changelake.storage.iceberg import Storage
from tests.helpers import local, sparkless_lake

SPEC = {
    "name": "ns.t",
    "primary_key": ["k"],
    "options": {"bucket.num": 2},
    "columns": [{"name": "k", "type": "INT"}, {"name": "v", "type": "STRING"}],
}


def _records(keys, value):
    return [{"op": "+I", "data": {"k": k, "v": f"{value}{k}"}} for k in keys]


@pytest.fixture
def lake(tmp_path):
    lake = sparkless_lake(tmp_path)
    lake.messages = []
    lake.progress = lake.messages.append
    (tmp_path / "tables" / "ns.t.yaml").write_text(json.dumps(SPEC))  # status lists the tables of spec files
    lake.create_table(SPEC)
    lake.apply("ns.t", _records(range(10), "a"), batch_id=1)
    lake.apply("ns.t", _records(range(0, 10, 3), "b"), batch_id=2)
    return lake


def _foreign_append(table):
    """A commit of another writer: an append of no rows (pyiceberg, no changelake properties)."""
    table.append(pa.table({"k": pa.array([], pa.int32()), "v": pa.array([], pa.string()),
                           "_bucket": pa.array([], pa.int32())}))  # fmt: skip


def _pk(lake):
    return lake.storage.pk_table(lake.spec("ns.t"))


def test_files_carry_the_schema_field_ids_also_after_a_column_is_added(lake):
    spec = dict(SPEC, columns=[*SPEC["columns"], {"name": "w", "type": "BIGINT"}])
    (lake.settings.tables_dir / "ns.t.yaml").write_text(json.dumps(spec))
    lake.create_table(spec)  # ADD COLUMN: w gets a new id, before _bucket
    lake.apply("ns.t", [{"op": "+U", "data": {"k": 1, "v": "c", "w": 7}}], batch_id=3)
    for name in ("t", "t__changelog"):
        table = lake.storage.catalog.load_table(("ns", name))
        ids = Storage.field_ids(table)
        written = [f for f in Storage.data_files(table) if "batch-000000000003" in f.path]
        assert written, name
        for f in written:
            fields = pq.read_schema(local(f.path))
            got = {x.name: int(x.metadata[b"PARQUET:field_id"]) for x in fields}
            assert got == {n: ids[n] for n in fields.names}, (name, f.path)
        if name == "t":
            assert ids["w"] == 4 and ids["_bucket"] == 3  # the added column's id is not its position


def test_a_foreign_commit_keeps_the_state_and_exactly_once(lake):
    _foreign_append(_pk(lake))
    pk = _pk(lake)
    assert lineage.carries_state(pk.current_snapshot().summary.additional_properties) is False
    assert Storage.state(pk).last_batch == 2
    assert lake.status()[0]["last_commit"] == "another writer: append"
    # The replay of batch 2 is a no-op; changed input for it is refused; batch 3 applies once.
    assert lake.apply("ns.t", _records(range(0, 10, 3), "b"), batch_id=2).status == "already-applied"
    with pytest.raises(ChangelakeError, match="checksum|different input|changed"):
        lake.apply("ns.t", _records(range(0, 10, 3), "X"), batch_id=2)
    assert lake.apply("ns.t", _records([42], "c"), batch_id=3).status == "applied"
    assert lake.status()[0]["last_batch"] == 3
    assert lake.status()[0]["last_commit"] == "changelake: batch"
    rows = {r["k"]: r["v"] for r in lake.rows_arrow("ns.t").to_pylist()}
    assert len(rows) == 11 and rows[3] == "b3" and rows[42] == "c42"
    log = [r for r in lake.changelog_arrow("ns.t").to_pylist() if r["_batch_id"] == 3]
    assert [(r["_change_type"], r["k"]) for r in log] == [("+I", 42)]  # once, not rolled forward again


def test_the_state_survives_an_expiry_that_leaves_only_a_foreign_snapshot(lake):
    for name in ("t", "t__changelog"):
        table = lake.storage.catalog.load_table(("ns", name))
        _foreign_append(table)
        table = lake.storage.catalog.load_table(("ns", name))
        tagged = table.metadata.refs[lineage.STATE_TAG].snapshot_id
        current = table.current_snapshot().snapshot_id
        # Iceberg's expiry keeps what a tag names: expiring the state snapshot is refused ...
        with pytest.raises(ValueError, match="protected|referenced"):
            ExpireSnapshots(table.transaction()).by_ids([tagged]).commit()
        # ... and everything else goes: the current (foreign) snapshot's ancestry no longer reaches it.
        others = [s.snapshot_id for s in table.metadata.snapshots if s.snapshot_id not in (tagged, current)]
        with table.transaction() as tx:
            ExpireSnapshots(tx).by_ids(others).commit()
    pk = _pk(lake)
    assert [s.snapshot_id for s in pk.snapshots()] == sorted(
        [pk.current_snapshot().snapshot_id, pk.metadata.refs[lineage.STATE_TAG].snapshot_id],
        key=[s.snapshot_id for s in pk.snapshots()].index,
    )
    assert Storage.state(pk).last_batch == 2
    assert lake.status()[0]["last_batch"] == 2
    assert lake.apply("ns.t", _records([7], "d"), batch_id=3).status == "applied"
    with pytest.raises(ChangelakeError, match="skips ahead"):
        lake.apply("ns.t", _records([8], "e"), batch_id=5)
    log = [r for r in lake.changelog_arrow("ns.t").to_pylist() if r["_batch_id"] == 3]
    assert [(r["_change_type"], r["v"]) for r in log] == [("-U", "a7"), ("+U", "d7")]  # once, not twice
    # changelake's own maintenance keeps the tagged snapshot and can expire the rest.
    lake.maintain("ns.t", full=True)
    assert Storage.state(_pk(lake)).last_batch == 3


def test_a_file_another_writer_left_unsorted_is_merged_right_and_compaction_restores_the_order(lake):
    """A foreign rewrite of the table into one file in no order (neither by bucket nor by key, no declared
    sort order): a batch still finds every row it replaces (no key twice), compaction names the file and
    rewrites its partition, and every file is then in changelake's declared order."""
    pk = _pk(lake)
    assert compact.out_of_order(pk, Storage.table_files(pk)) == set()  # changelake's own files
    rows = pk.scan().to_arrow()
    shuffled = rows.take(pa.array(list(range(1, rows.num_rows, 2)) + list(range(0, rows.num_rows, 2))))
    buckets = shuffled.column("_bucket").to_pylist()
    assert buckets != sorted(buckets)  # the file is not sorted by bucket
    pk.overwrite(shuffled)  # pyiceberg: its own file, no changelake properties, no sort order declared
    pk = _pk(lake)
    assert Storage.last_commit(pk)["by"] == "another writer"
    assert compact.out_of_order(pk, Storage.table_files(pk)) == {f.path for f in Storage.data_files(pk)}
    before = {r["k"]: r["v"] for r in pk.scan().to_arrow().to_pylist()}
    updated = {k: (f"u{k}" if k in (1, 4, 7) else v) for k, v in before.items()}
    lake.messages.clear()
    lake.apply("ns.t", [{"op": "+U", "data": {"k": k, "v": f"u{k}"}} for k in (1, 4, 7)], batch_id=3)
    after = lake.rows_arrow("ns.t").to_pylist()
    assert sorted(r["k"] for r in after) == sorted(
        before
    )  # every key once: no stale row left beside its update
    assert {r["k"]: r["v"] for r in after} == updated
    assert _pk(lake).scan().to_arrow().num_rows == len(before)  # an independent reader agrees
    assert lake.lookup("ns.t", {"k": 4}) == [{"k": 4, "v": "u4"}]
    lake.maintain("ns.t", full=True)
    pk = _pk(lake)
    order = pk.sort_order().order_id
    for f in Storage.data_files(pk):
        assert f.sort_order_id == order, f.path
        table = pq.read_table(local(f.path), columns=["_bucket", "k"]).to_pylist()
        assert table == sorted(table, key=lambda r: (r["_bucket"], r["k"])), f.path
    assert compact.out_of_order(pk, Storage.table_files(pk)) == set()
    assert {r["k"]: r["v"] for r in lake.rows_arrow("ns.t").to_pylist()} == updated
