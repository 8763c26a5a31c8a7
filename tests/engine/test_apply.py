"""Applying batches through the Python API on local Spark: semantics, atomicity, exactly-once, reads."""

import json

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from changelake.errors import BadRecordError, BatchRefusedError, ChangelakeError, WriteRefusedError
from changelake.storage.summary import BatchSummary
from tests.helpers import changelog_of, local, rows_of

pytestmark = pytest.mark.integration

KV = {
    "name": "t.kv",
    "columns": [
        {"name": "k", "type": "INT"},
        {"name": "v", "type": "DOUBLE"},
        {"name": "s", "type": "STRING"},
    ],
    "primary_key": ["k"],
    "options": {"bucket.num": 4},
}


def ins(k, v, s, op="+I"):
    return {"op": op, "data": {"k": k, "v": v, "s": s}}


def dele(k):
    return {"op": "-D", "data": {"k": k}}


def test_canonical_walkthrough_and_offsets(lake):
    lake.create_table(KV)
    lake.apply("t.kv", [ins(1, 2.0, "apple")], batch_id=1)
    lake.apply("t.kv", [ins(1, 4.0, "banana")], batch_id=2)
    result = lake.apply("t.kv", [dele(1)], batch_id=3)
    assert changelog_of(lake, "t.kv") == [
        (0, "+I", 1, 2.0, "apple"),
        (1, "-U", 1, 2.0, "apple"),
        (2, "+U", 1, 4.0, "banana"),
        (3, "-D", 1, 4.0, "banana"),
    ]
    assert [r["_batch_id"] for r in lake.changelog("t.kv").collect()] == [1, 2, 2, 3]
    assert rows_of(lake.rows("t.kv")) == []
    assert (result.counts["deleted"], result.log_start_offset, result.log_end_offset) == (1, 3, 4)
    assert rows_of(lake.rows("t.kv", at_batch=2)) == [(1, 4.0, "banana")]


def test_one_batch_equals_records_applied_one_by_one(lake):
    lake.create_table({**KV, "options": {"bucket.num": 1}})  # one bucket: one log holds the whole order
    lake.apply("t.kv", [ins(1, 1.0, "a"), ins(2, 2.0, "b")], batch_id=1)
    batch = [
        ins(1, 10.0, "a2", "+U"),
        dele(2),
        ins(2, 20.0, "b2"),
        {"op": "-U", "data": {"k": 1, "v": 10.0, "s": "a2"}},
        ins(1, 11.0, "a3", "+U"),
        dele(9),
        ins(3, 3.0, "c"),
        dele(3),
    ]
    result = lake.apply("t.kv", batch, batch_id=2)
    assert rows_of(lake.rows("t.kv")) == [(1, 11.0, "a3"), (2, 20.0, "b2")]
    assert changelog_of(lake, "t.kv")[2:] == [
        (2, "-U", 1, 1.0, "a"),
        (3, "+U", 1, 10.0, "a2"),
        (4, "-D", 2, 2.0, "b"),
        (5, "+I", 2, 20.0, "b2"),
        (6, "-U", 1, 10.0, "a2"),
        (7, "+U", 1, 11.0, "a3"),
        (8, "+I", 3, 3.0, "c"),
        (9, "-D", 3, 3.0, "c"),
    ]
    assert result.counts == {
        "records": 8,
        "inserted": 2,
        "updated": 2,
        "deleted": 2,
        "ignored": 1,
        "dropped_update_before": 1,
    }


def test_replay_is_a_noop_and_changed_input_is_refused(lake):
    lake.create_table(KV)
    first = lake.apply("t.kv", [ins(1, 1.0, "a")], batch_id=1)
    snapshots = len(lake.storage.pk_table(lake.spec("t.kv")).snapshots())
    again = lake.apply("t.kv", [ins(1, 1.0, "a")], batch_id=1)
    assert again.status == "already-applied" and again.snapshot_id == first.snapshot_id
    assert len(lake.storage.pk_table(lake.spec("t.kv")).snapshots()) == snapshots
    with pytest.raises(BatchRefusedError, match="already applied from a different input"):
        lake.apply("t.kv", [ins(1, 9.0, "z")], batch_id=1)
    with pytest.raises(
        BatchRefusedError, match="skips ahead; the last applied api batch is 1, so the next must be 2"
    ):
        lake.apply("t.kv", [ins(2, 1.0, "b")], batch_id=5)
    assert len(changelog_of(lake, "t.kv")) == 1


def test_bad_input_leaves_table_untouched_then_fixed_file_applies(lake, home):
    lake.create_table(KV)
    lake.apply("t.kv", [ins(1, 1.0, "a")], batch_id=1)
    before = lake.storage.pk_table(lake.spec("t.kv")).current_snapshot().snapshot_id
    bad = home / "2.jsonl"
    bad.write_text(json.dumps(ins(2, 2.0, "b")) + "\n" + '{"op": "+I", "data": {"k": 3, "v": "high"}}\n')
    with pytest.raises(BadRecordError, match=r"2.jsonl:2 field 'v': expected a number for DOUBLE"):
        lake.apply("t.kv", file=bad, batch_id=2)
    assert lake.storage.pk_table(lake.spec("t.kv")).current_snapshot().snapshot_id == before
    assert rows_of(lake.rows("t.kv")) == [(1, 1.0, "a")] and len(changelog_of(lake, "t.kv")) == 1
    bad.write_text(json.dumps(ins(2, 2.0, "b")) + "\n" + json.dumps(ins(3, 3.0, "high")) + "\n")
    lake.apply("t.kv", file=bad, batch_id=2)
    assert rows_of(lake.rows("t.kv")) == [(1, 1.0, "a"), (2, 2.0, "b"), (3, 3.0, "high")]


def test_delete_behaviors(lake):
    for behavior, expected_rows in (("ignore", [(1, 1.0, "a")]), ("allow", [])):
        name = f"t.kv_{behavior}"
        lake.create_table({**KV, "name": name, "options": {"table.delete.behavior": behavior}})
        lake.apply(name, [ins(1, 1.0, "a")], batch_id=1)
        result = lake.apply(name, [dele(1)], batch_id=2)
        assert rows_of(lake.rows(name)) == expected_rows
        assert result.counts["ignored"] == (1 if behavior == "ignore" else 0)
    lake.create_table({**KV, "name": "t.kv_disable", "options": {"table.delete.behavior": "disable"}})
    lake.apply("t.kv_disable", [ins(1, 1.0, "a")], batch_id=1)
    with pytest.raises(WriteRefusedError, match="The table.delete.behavior is set to 'disable'"):
        lake.apply("t.kv_disable", [ins(2, 1.0, "b"), dele(1)], batch_id=2)
    assert rows_of(lake.rows("t.kv_disable")) == [(1, 1.0, "a")]
    lake.create_table(
        {
            **KV,
            "name": "t.kv_sink",
            "options": {"table.delete.behavior": "disable", "sink.ignore-delete": True},
        }
    )
    lake.apply("t.kv_sink", [ins(1, 1.0, "a"), dele(1)], batch_id=1)
    assert rows_of(lake.rows("t.kv_sink")) == [(1, 1.0, "a")]


def test_wal_image(lake):
    lake.create_table({**KV, "options": {"table.changelog.image": "wal"}})
    lake.apply("t.kv", [ins(1, 1.0, "a"), ins(1, 2.0, "b", "+U"), dele(1), ins(2, 1.0, "c")], batch_id=1)
    assert [c[1] for c in changelog_of(lake, "t.kv")] == ["+U", "+U", "-D", "+U"]


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_only_touched_buckets_are_written(lake, mode):
    """Copy-on-write replaces the touched bucket's file alone; merge-on-read replaces none, adds one data file
    with the new row and one delete file naming the old row."""
    lake.create_table({**KV, "options": {"bucket.num": 8, "write.merge.mode": mode}})
    lake.apply("t.kv", [ins(k, float(k), "x") for k in range(200)], batch_id=1)
    table = lake.storage.pk_table(lake.spec("t.kv"))
    before = {f.path: f.buckets for f in lake.storage.table_files(table)}
    assert {b for b in before.values()} == {(b, b) for b in range(8)}  # a file per bucket
    lake.apply("t.kv", [ins(5, 50.0, "y", "+U")], batch_id=2)
    table = lake.storage.pk_table(lake.spec("t.kv"))
    files = lake.storage.table_files(table)
    after = {f.path: f.buckets for f in files if not f.is_delete}
    gone, new = set(before) - set(after), set(after) - set(before)
    if mode == "copy-on-write":
        assert len(gone) == len(new) == 1 and before[gone.pop()] == after[new.pop()]
        assert not any(f.is_delete for f in files)
    else:
        assert not gone and len(new) == 1
        (delta,) = [f for f in files if not f.is_delete and f.path not in before]
        (deletes,) = [f for f in files if f.is_delete]
        assert delta.record_count == deletes.record_count == 1
        (old,) = pq.read_table(local(deletes.path)).to_pylist()
        assert before[old["file_path"]] == delta.buckets  # the replaced row is in the bucket's own file
        assert pq.read_table(local(old["file_path"])).slice(old["pos"], 1).column("k").to_pylist() == [5]
    assert BatchSummary.from_snapshot(table.current_snapshot()).touched_buckets == 1
    assert rows_of(lake.rows("t.kv").filter("k = 5")) == [(5, 50.0, "y")]
    assert lake.rows("t.kv").count() == 200


def test_pyiceberg_alone_reads_the_same_rows(lake):
    lake.create_table(KV)
    lake.apply("t.kv", [ins(k, k / 2, f"s{k}") for k in range(50)] + [dele(3)], batch_id=1)
    table = lake.storage.pk_table(lake.spec("t.kv"))
    arrow = table.scan().to_arrow()
    from_pyiceberg = sorted(zip(*(arrow.column(c).to_pylist() for c in ("k", "v", "s")), strict=True))
    assert from_pyiceberg == rows_of(lake.rows("t.kv"))
    assert set(arrow.column_names) == {"k", "v", "s", "_bucket"}
    assert pc.max(arrow.column("_bucket")).as_py() < 4
    summary = BatchSummary.from_snapshot(table.current_snapshot())
    assert summary.batch_id == 1 and summary.counts["inserted"] == 50


ALL_TYPES = {
    "name": "t.types",
    "columns": [
        {"name": "id", "type": "STRING"},
        {"name": "day", "type": "DATE"},
        {"name": "b", "type": "BOOLEAN"},
        {"name": "ti", "type": "TINYINT"},
        {"name": "f", "type": "FLOAT"},
        {"name": "dec", "type": "DECIMAL(20,4)"},
        {"name": "bin", "type": "BYTES"},
        {"name": "tm", "type": "TIME"},
        {"name": "ts", "type": "TIMESTAMP(6)"},
        {"name": "tz", "type": "TIMESTAMP_LTZ(3)"},
    ],
    "primary_key": ["id", "day"],
    "partition_keys": ["day"],
    "options": {"bucket.num": 2},
}


def test_partitioned_table_with_every_type_and_lookups(lake):
    lake.create_table(ALL_TYPES)
    rec = {
        "id": "a",
        "day": "2024-01-01",
        "b": True,
        "ti": -5,
        "f": 0.5,
        "dec": "12345678.1234",
        "bin": "AAE=",
        "tm": "23:59:59",
        "ts": "2024-01-01T01:02:03.456789",
        "tz": "2024-01-01T00:00:00Z",
    }
    lake.apply(
        "t.types",
        [
            {"op": "+I", "data": rec},
            {"op": "+I", "data": {**rec, "day": "2024-01-02"}},
            {"op": "+I", "data": {**rec, "id": "b", "ti": 7}},
        ],
        batch_id=1,
    )
    rows = lake.rows("t.types").orderBy("id", "day").collect()
    assert len(rows) == 3
    assert (
        rows[0]["ti"] == -5
        and str(rows[0]["dec"]) == "12345678.1234"
        and rows[0]["bin"] == bytearray(b"\x00\x01")
    )
    assert dict(lake.rows("t.types").dtypes)["ti"] == "tinyint"
    found = lake.lookup("t.types", {"id": "b", "day": "2024-01-01"})
    assert [r["ti"] for r in found] == [7]
    assert lake.lookup("t.types", {"id": "zz", "day": "2024-01-01"}) == []
    with pytest.raises(ChangelakeError, match="must bind exactly the primary key"):
        lake.lookup("t.types", {"id": "b"})


def test_prefix_lookup_spec_9_example(lake):
    lake.create_table(
        {
            "name": "t.prefix",
            "columns": [
                {"name": "a", "type": "INT"},
                {"name": "b", "type": "STRING"},
                {"name": "c", "type": "INT"},
                {"name": "d", "type": "STRING"},
            ],
            "primary_key": ["a", "b", "c"],
            "bucket_key": ["a", "b"],
            "options": {"bucket.num": 3},
        }
    )
    records = [{"op": "+I", "data": {"a": 1, "b": "aaaaaaaaa", "c": c, "d": f"v{c}"}} for c in (1, 2, 3)]
    records.append({"op": "+I", "data": {"a": 2, "b": "aaaaaaaaa", "c": 4, "d": "v4"}})
    lake.apply("t.prefix", records, batch_id=1)
    assert [r["c"] for r in lake.lookup("t.prefix", {"a": 1, "b": "aaaaaaaaa"}, prefix=True)] == [1, 2, 3]
    assert [r["c"] for r in lake.lookup("t.prefix", {"a": "2", "b": "aaaaaaaaa"}, prefix=True)] == [4]
    assert lake.lookup("t.prefix", {"a": 3, "b": "a"}, prefix=True) == []
    with pytest.raises(ChangelakeError, match="must contain all bucket keys"):
        lake.lookup("t.prefix", {"b": "x", "a": 1}, prefix=True)
    with pytest.raises(ChangelakeError, match="Please use primary key lookup"):
        lake.create_table({**KV, "name": "t.plain"})
        lake.lookup("t.plain", {"k": 1}, prefix=True)


def test_status_views_and_dataframe_batches(lake, spark):
    lake.create_table(KV)
    df = spark.createDataFrame(
        [("+I", 1, 1.0, "a"), ("+I", 2, 2.0, "b")], "op string, k int, v double, s string"
    )
    lake.apply("t.kv", df, batch_id=1)
    again = lake.apply("t.kv", df, batch_id=1)
    assert again.status == "already-applied"
    views = lake.register_views(["t.kv"])
    assert views == ["global_temp.t__kv__input"]
    # The rows and the changelog are Iceberg tables in the lake's Spark catalog; the input view holds landed
    # batches only, and this batch came through the API.
    assert spark.sql(f"select count(*) from {lake.iceberg_table('t.kv')}").first()[0] == 2
    assert spark.sql("select count(*) from global_temp.t__kv__input").first()[0] == 0
    changelog = lake.iceberg_table("t.kv", changelog=True)
    assert spark.sql(f"select count(*) from {changelog} where _change_type = '+I'").first()[0] == 2
    (lake.settings.tables_dir / "t.kv.yaml").write_text(json.dumps(KV))
    (status,) = lake.status()
    assert status == {
        "table": "t.kv",
        "exists": True,
        "last_batch": 1,
        "rows": 2,
        "snapshots": 1,
        "history_batches": 0,
        "files": 3,  # the two buckets' data files and the batch's changelog file
        "bytes": status["bytes"],
        "last_maintenance": None,
        "last_commit": "changelake: batch",
        "changelog_records": 2,
        "pending_batches": 0,
        "incomplete": None,  # no landed file waiting for its producer to finish
        "problem": None,
        "quarantined": 0,
        "redelivered": 0,
        "deduplicated": 0,
        "writers": {"api": 1},  # the DataFrame came through the API: its writer's batch 1
        "kafka_lag": None,  # the table's source is no Kafka topic
    }
    assert 1000 < status["bytes"] < 20_000


def test_create_refuses_a_changed_spec(lake):
    lake.create_table(KV)
    lake.create_table(KV)  # idempotent
    with pytest.raises(ChangelakeError, match="already exists with a different spec"):
        lake.create_table({**KV, "options": {"bucket.num": 5}})


def test_changelog_is_one_gapless_log_per_bucket_in_record_order(lake):
    lake.create_table({**KV, "options": {"bucket.num": 8}})
    lake.apply("t.kv", [ins(k, 1.0, "a") for k in range(40)], batch_id=1)
    lake.apply(
        "t.kv",
        [ins(k, 2.0, "b", "+U") for k in range(0, 40, 2)] + [dele(k) for k in range(1, 40, 4)],
        batch_id=2,
    )
    logs: dict[int, list] = {}
    for r in lake.changelog("t.kv").collect():
        logs.setdefault(r["_bucket"], []).append(r)
    assert len(logs) > 1  # the keys really spread over buckets
    for bucket, log in logs.items():
        log.sort(key=lambda r: r["_log_offset"])
        assert [r["_log_offset"] for r in log] == list(range(len(log))), bucket  # gapless across batches
        assert [r["_batch_id"] for r in log] == sorted(r["_batch_id"] for r in log)
        second = [(r["_change_type"], r["k"]) for r in log if r["_batch_id"] == 2]
        updates = [k for t, k in second if t != "-D"]
        # Record order inside the bucket: every update (-U/+U pairs, keys ascending) before every delete.
        assert second == [(t, k) for k in sorted(set(updates)) for t in ("-U", "+U")] + [
            ("-D", k) for k in range(1, 40, 4) if ("-D", k) in second
        ]
    assert sum(len(log) for log in logs.values()) == 40 + 40 + 10
