"""The staged files are the shuffle: decode tasks bucket the records (numpy xxhash64) and a bucket task reads
its row groups directly. Cutting the input into many decode tasks (Parquet by rows, JSON by bytes) must change
nothing: same rows, same per-bucket changelog, same bad-record lines and dead letters as one task; every row
lands in the bucket Spark's ``pmod(xxhash64(bucket key), n)`` names, in its partition."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from changelake.errors import BadRecordError
from changelake.inputs import decode
from changelake.inputs.readers import read_batch
from changelake.storage import sparkread
from tests.helpers import changelog_of, local, rows_of

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def through_spark(monkeypatch):
    """These batches are small: without this they would be applied in the test's process."""

    monkeypatch.setenv("CHANGELAKE_LOCAL_APPLY_RECORDS", "0")


NAMES = ["a", "é", "日本語", "", "x" * 40, "naïve ✓", "b"]


def _spec(name: str, quarantine: bool = False) -> dict:
    return {
        "name": name,
        "columns": [
            {"name": "name", "type": "STRING"},
            {"name": "amount", "type": "DECIMAL(20,3)"},
            {"name": "day", "type": "DATE"},
            {"name": "at", "type": "TIMESTAMP(6)"},
            {"name": "v", "type": "TINYINT"},
            {"name": "note", "type": "STRING"},
        ],
        "primary_key": ["name", "amount", "day", "at"],
        "partition_keys": ["day"],
        "options": {"bucket.num": 5},
        "source": {"on-bad-record": "quarantine"} if quarantine else {},
    }


def _record(i: int, op: str) -> dict:
    """Keys repeat (every 17th record reuses a key) so a batch updates and deletes its own inserts."""
    k = i % 17
    return {
        "op": op,
        "name": NAMES[k % len(NAMES)],
        "amount": decimal.Decimal(k * 1000 + 7).scaleb(-3) * (-1 if k % 3 else 1),
        "day": dt.date(2024, 1, 1 + k % 3),
        "at": dt.datetime(2024, 5, 6, 7, 8, 9, k),
        "v": i % 100,
        "note": f"n{i}",
    }


OPS = ["+I", "+U", "+U", "-D", "+I", "+U"]


def _parquet(path, records: list[dict], row_group: int = 10) -> None:
    schema = pa.schema(
        [
            ("op", pa.string()),
            ("name", pa.string()),
            ("amount", pa.decimal128(20, 3)),
            ("day", pa.date32()),
            ("at", pa.timestamp("us")),
            ("v", pa.int32()),
            ("note", pa.string()),
        ]
    )
    pq.write_table(pa.Table.from_pylist(records, schema=schema), path, row_group_size=row_group)


def _jsonl(path, records: list[dict]) -> None:
    with open(path, "w") as fh:
        for r in records:
            data = {k: v for k, v in r.items() if k != "op"}
            data.update(amount=str(data["amount"]), day=data["day"].isoformat(), at=data["at"].isoformat())
            fh.write(json.dumps({"op": r["op"], "data": data}, ensure_ascii=False) + "\n")


def test_many_decode_tasks_apply_as_one(lake, spark, home, monkeypatch):
    from pyspark.sql import functions as F

    batch1 = [_record(i, "+I") for i in range(17)] + [_record(i, OPS[i % 6]) for i in range(17, 80)]
    batch2 = [_record(i, OPS[(i + 3) % 6]) for i in range(80, 150)]
    _parquet(home / "1.parquet", batch1)
    _jsonl(home / "2.jsonl", batch2)
    for name in ("s.whole", "s.split"):
        lake.create_table(_spec(name))
    for batch_id, path in ((1, home / "1.parquet"), (2, home / "2.jsonl")):
        lake.apply("s.whole", file=path, batch_id=batch_id)
        with monkeypatch.context() as m:
            m.setenv("CHANGELAKE_DECODE_RANGE_ROWS", "7")
            m.setenv("CHANGELAKE_DECODE_RANGE_BYTES", "600")
            m.setenv("CHANGELAKE_DECODE_MAX_RANGE_BYTES", "600")
            m.setattr(decode, "SPLIT_ROWS", 4)
            lake.messages.clear()
            lake.apply("s.split", file=path, batch_id=batch_id)
        tasks = [m for m in lake.messages if "decoding" in m][0]
        assert "in 1 range(s)" not in tasks and "task(s)" in tasks, tasks  # really cut, in Spark tasks

    assert rows_of(lake.rows("s.split")) == rows_of(lake.rows("s.whole"))
    assert len(rows_of(lake.rows("s.whole"))) > 10
    assert changelog_of(lake, "s.split") == changelog_of(lake, "s.whole")

    spec = lake.spec("s.split")
    stored = sparkread.rows_df(spark, lake.storage, spec)
    expected = F.pmod(F.xxhash64(*spec.bucket_key), F.lit(spec.bucket_num)).cast("int")
    assert stored.filter(stored["_bucket"] != expected).count() == 0
    assert stored.select("_bucket").distinct().count() > 1
    # Each data file holds one partition (its rows' day is the file's partition), its buckets within the
    # file's bucket range, in (bucket, key) order.
    for f in lake.storage.data_files(lake.storage.pk_table(spec)):
        key = list(spec.primary_key)
        got = pq.read_table(local(f.path), columns=["_bucket", *key]).to_pylist()
        (day,) = f.partition
        assert {(r["day"] - dt.date(1970, 1, 1)).days for r in got} == {day}
        assert {r["_bucket"] for r in got} <= set(range(f.buckets[0], f.buckets[1] + 1))
        order = [(r["_bucket"], *(r[k] for k in key)) for r in got]
        assert order == sorted(order)


@pytest.mark.parametrize("row_group", [6, 40], ids=["ranges of row groups", "one row group cut"])
def test_bad_rows_in_later_cuts_name_their_lines_and_quarantine_alike(lake, home, monkeypatch, row_group):
    from changelake.engine import apply

    records = [_record(i, "+I") for i in range(40)]
    for row in (3, 12, 25, 39):
        records[row]["v"] = 1000  # out of range for TINYINT
    records[20]["op"] = "+X"
    path = home / "bad.parquet"
    _parquet(path, records, row_group=row_group)
    monkeypatch.setenv("CHANGELAKE_DECODE_RANGE_ROWS", "7")
    monkeypatch.setattr(decode, "SPLIT_ROWS", 3)
    monkeypatch.setattr(apply, "_parallelism", lambda spark: 8)  # a single group is cut in 8

    lake.messages.clear()
    lake.create_table(_spec("s.fail"))
    with pytest.raises(BadRecordError) as refused:
        lake.apply("s.fail", file=path, batch_id=1)
    with pytest.raises(BadRecordError) as alone:
        read_batch([path], lake.spec("s.fail"))
    assert str(refused.value) == str(alone.value) and refused.value.line == 4
    assert "in 8 range(s)" in " ".join(lake.messages), lake.messages

    lake.create_table(_spec("s.quarantine", quarantine=True))
    result = lake.apply("s.quarantine", file=path, batch_id=1)
    reference = read_batch([path], lake.spec("s.quarantine"))
    letters = lake.dead_letters("s.quarantine")
    assert [(d["line"], d["field"], d["reason"], d["raw"]) for d in letters] == [
        (d["line"], d["field"], d["reason"], d["raw"]) for d in reference.dead_letters
    ]
    assert [d["line"] for d in letters] == [4, 13, 21, 26, 40]
    assert result.source["quarantined"] == 5 and result.source["messages"] == 40
    keys = {tuple(r[k] for k in ("name", "amount", "day", "at")) for r in reference.records.to_pylist()}
    assert lake.rows("s.quarantine").count() == len(keys) > 10
