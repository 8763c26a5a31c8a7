"""A small batch is decoded and merged in the applying process (no Spark job, no JVM): the same functions on
the same files, so the tables, changelogs, counts, Kafka offsets, dead letters and ids equal the Spark path's
for every input format, and a batch too large for it still goes to Spark."""

from __future__ import annotations

import dataclasses
import shutil

import pytest
import yaml

from changelake.engine import buckets
from changelake.engine.apply import Applier
from changelake.inputs.datagen import generate
from changelake.spec import TableSpec
from changelake.storage.summary import WriterPosition
from tests.helpers import REPO, changelog_of, rows_of

pytestmark = pytest.mark.integration

ORDERS = yaml.safe_load((REPO / "examples" / "tables" / "shop.orders.yaml").read_text())
CASES = {
    "changelog_json": {"format": "changelog-json", "on-bad-record": "quarantine"},
    "changelog_parquet": {"format": "changelog-parquet"},
    "upsert_kafka": {"format": "upsert-kafka", "dedup": "kafka-offsets"},
    "debezium": {"format": "debezium-json", "ordering": "source.lsn"},
}


def _spec(lake, name: str, source: dict, options: dict | None = None) -> TableSpec:
    data = {**ORDERS, "name": name, "source": source}
    data["options"] = {**ORDERS.get("options", {}), **(options or {})}
    data["datagen"] = {**ORDERS["datagen"], "records": 60, "keys": 40}
    (lake.settings.tables_dir / f"{name}.yaml").write_text(yaml.safe_dump(data))
    return TableSpec.from_dict(data)


@pytest.mark.parametrize("case", list(CASES))
def test_in_process_batches_equal_spark_batches(lake, monkeypatch, case):
    monkeypatch.setenv(
        "CHANGELAKE_LOCAL_APPLY_RECORDS", "10000"
    )  # the default, whatever the environment says
    # In process, a bucket of SPLIT_ROWS rows or more is written as two files: make every bucket one, so the
    # readers below (Spark, pyarrow, lookups) read split buckets against the Spark path's one-file buckets.
    monkeypatch.setattr(buckets, "SPLIT_ROWS", 4)
    here = _spec(lake, f"loc.{case}_here", CASES[case])
    spark = _spec(lake, f"loc.{case}_spark", CASES[case])
    generate(here, lake.settings.landing_dir, batches=3, seed=11, stream="orders")
    landed = lake.settings.landing_dir / here.full_name
    if case == "changelog_json":  # a bad line for the dead letters
        first = sorted(landed.iterdir())[0]
        first.write_text(first.read_text() + '{"op": "+I", "data": {"order_id": "x"}}\n')
    shutil.copytree(landed, lake.settings.landing_dir / spark.full_name)

    lake.messages.clear()
    got_here = lake.apply_pending(here.full_name)
    assert any("in this process" in m for m in lake.messages if "decoding" in m)
    assert any("in this process" in m for m in lake.messages if "merged" in m)
    monkeypatch.setenv("CHANGELAKE_LOCAL_APPLY_RECORDS", "0")
    lake.messages.clear()
    got_spark = lake.apply_pending(spark.full_name)
    assert not any("in this process" in m for m in lake.messages)

    def comparable(result):
        out = dataclasses.asdict(result)
        out["dead_letter"] = out["dead_letter"] is not None  # a path under each table's own location
        return {k: v for k, v in out.items() if k not in ("table", "seconds", "snapshot_id")}

    assert [comparable(r) for r in got_here] == [comparable(r) for r in got_spark]
    assert len(got_here) == 3 and sum(r.counts["inserted"] for r in got_here) > 10
    assert rows_of(lake.rows(here.full_name)) == rows_of(lake.rows(spark.full_name))
    assert changelog_of(lake, here.full_name) == changelog_of(lake, spark.full_name)
    fast = lake.rows_arrow(here.full_name)
    assert fast.equals(lake.rows_arrow(spark.full_name))
    for key in fast.select(list(here.primary_key)).to_pylist()[:: max(1, fast.num_rows // 5)]:
        assert lake.lookup(here.full_name, key) == lake.lookup(spark.full_name, key)
        assert len(lake.lookup(here.full_name, key)) == 1
    files_here = [t.file for t in lake.storage.pk_table(here).scan().plan_files()]
    files_spark = [t.file for t in lake.storage.pk_table(spark).scan().plan_files()]
    assert len(files_here) > len(files_spark)  # the split really happened
    letters = [
        {k: v for k, v in d.items() if k != "file"} for d in lake.dead_letters(here.full_name)
    ]  # the landed files' paths differ
    assert letters == [
        {k: v for k, v in d.items() if k != "file"} for d in lake.dead_letters(spark.full_name)
    ]
    assert len(letters) == (1 if case == "changelog_json" else 0)


def test_a_small_batch_needs_no_spark_and_a_large_one_uses_it(lake, home, monkeypatch):
    monkeypatch.setenv("CHANGELAKE_LOCAL_APPLY_RECORDS", "10000")

    def no_spark():
        raise AssertionError("a small batch started Spark")

    spec = lake.create_table(
        {
            "name": "loc.ids",
            "columns": [
                {"name": "k", "type": "BIGINT"},
                {"name": "uid", "type": "BIGINT"},
                {"name": "v", "type": "STRING"},
            ],
            "primary_key": ["k"],
            "options": {"bucket.num": 4, "auto-increment.fields": "uid"},
        }
    )
    path = home / "1.jsonl"
    path.write_text("".join(f'{{"op": "+I", "data": {{"k": {i}, "v": "é{i}"}}}}\n' for i in range(50)))
    result = Applier(no_spark, lake.storage, lake.messages.append).apply_files(
        spec, WriterPosition("api", 1), [path], target_columns=["k", "v"]
    )
    assert result.counts["inserted"] == 50
    ids = sorted(r["uid"] for r in lake.rows_arrow("loc.ids").to_pylist())
    assert len(set(ids)) == 50

    monkeypatch.setenv("CHANGELAKE_LOCAL_APPLY_RECORDS", "10")  # now 50 records are a large batch
    path2 = home / "2.jsonl"
    path2.write_text("".join(f'{{"op": "+U", "data": {{"k": {i}, "v": "w{i}"}}}}\n' for i in range(50)))
    with pytest.raises(AssertionError, match="started Spark"):
        Applier(no_spark, lake.storage, lake.messages.append).apply_files(
            spec, WriterPosition("api", 2), [path2], target_columns=["k", "v"]
        )
    result = lake.apply("loc.ids", file=path2, batch_id=2, target_columns=["k", "v"])
    assert result.counts["updated"] == 50
    assert sorted(r["uid"] for r in lake.rows_arrow("loc.ids").to_pylist()) == ids  # ids kept on update
