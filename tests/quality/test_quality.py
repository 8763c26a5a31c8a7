"""Great Expectations suites: each passes on clean data and fails on a crafted bad one, naming the offending
keys; the quality app fails its run on a table corrupted by hand and reports the keys."""

from __future__ import annotations

import json
import os

import pytest

from changelake.quality import suites
from changelake.quality.runner import _context, _validate, run_quality
from changelake.spec import TableSpec
from tests.helpers import REPO

pytestmark = pytest.mark.integration

SPEC = TableSpec.from_dict(
    {
        "name": "q.kv",
        "columns": [{"name": "k", "type": "BIGINT"}, {"name": "v", "type": "STRING"}],
        "primary_key": ["k"],
        "options": {"table.delete.behavior": "allow"},
    }
)
LOG = "k long, v string, _change_type string, _bucket int, _log_offset long"
CLEAN_LOG = [
    (1, "a", "+I", 0, 0),
    (2, "b", "+I", 0, 1),
    (1, "a", "-U", 0, 2),
    (1, "a2", "+U", 0, 3),
    (2, "b", "-D", 0, 4),
]


@pytest.fixture(params=["pandas", "spark"], autouse=True)
def engine(request, monkeypatch) -> str:
    """Every test runs on both GX engines the runner picks between: small frames are validated by pandas
    (one Arrow fetch), the rest by Spark (CHANGELAKE_QUALITY_LOCAL_ROWS=0 forces Spark)."""
    monkeypatch.setenv("CHANGELAKE_QUALITY_LOCAL_ROWS", "100000" if request.param == "pandas" else "0")
    return request.param


def validate(lake, check) -> dict:
    result = _validate(_context(lake.settings), check)
    expected = "spark" if os.environ["CHANGELAKE_QUALITY_LOCAL_ROWS"] == "0" else "pandas"
    assert result["engine"] == expected
    return result


def test_frames_above_the_local_limit_stay_in_spark(lake, spark, monkeypatch):
    monkeypatch.setenv("CHANGELAKE_QUALITY_LOCAL_ROWS", "2")
    three = spark.createDataFrame([(1, "a"), (2, "b"), (2, "c")], "k long, v string")
    result = _validate(_context(lake.settings), suites.pk_uniqueness("q.kv", three, ["k"]))
    assert result["engine"] == "spark" and not result["success"]
    two = spark.createDataFrame([(1, "a"), (1, "b")], "k long, v string")
    result = _validate(_context(lake.settings), suites.pk_uniqueness("q.kv", two, ["k"]))
    assert result["engine"] == "pandas" and not result["success"]


def failures(result) -> list[dict]:
    return [e for e in result["expectations"] if not e["success"]]


def test_pk_uniqueness_passes_clean_and_names_duplicated_keys(lake, spark):
    clean = spark.createDataFrame([(1, "a"), (2, "b")], "k long, v string")
    assert validate(lake, suites.pk_uniqueness("q.kv", clean, ["k"]))["success"]
    bad = spark.createDataFrame([(1, "a"), (2, "b"), (2, "c"), (None, "d")], "k long, v string")
    result = validate(lake, suites.pk_uniqueness("q.kv", bad, ["k"]))
    failed = failures(result)
    assert {e["type"] for e in failed} == {
        "expect_column_values_to_be_unique",
        "expect_column_values_to_not_be_null",
    }
    unique = next(e for e in failed if e["type"] == "expect_column_values_to_be_unique")
    assert sorted(k["k"] for k in unique["offending_keys"]) == [2, 2] and unique["unexpected_count"] == 2
    compound = spark.createDataFrame([(1, 1), (1, 2), (1, 2)], "shop_id long, user_id long")
    result = validate(lake, suites.pk_uniqueness("m", compound, ["shop_id", "user_id"]))
    assert {(k["shop_id"], k["user_id"]) for k in failures(result)[0]["offending_keys"]} == {(1, 2)}


def test_tombstone_suite_passes_clean_and_names_a_resurrected_key_and_an_orphan_update(lake, spark):
    rows = spark.createDataFrame([(1, "a2")], "k long, v string")
    log = spark.createDataFrame(CLEAN_LOG, LOG)
    assert all(validate(lake, c)["success"] for c in suites.tombstone_handling(SPEC, rows, log))
    # Two buckets, two logs: each -U is followed by its +U in its own bucket's log, while the offsets of the
    # two logs interleave (ordered by offset alone, a -U would be followed by the other bucket's -U).
    two_logs = [
        (1, "a", "+I", 0, 0),
        (2, "b", "+I", 1, 0),
        (1, "a", "-U", 0, 1),
        (2, "b", "-U", 1, 1),
        (1, "a2", "+U", 0, 2),
        (2, "b2", "+U", 1, 2),
    ]
    both = spark.createDataFrame([(1, "a2"), (2, "b2")], "k long, v string")
    two = spark.createDataFrame(two_logs, LOG)
    assert all(validate(lake, c)["success"] for c in suites.tombstone_handling(SPEC, both, two))

    resurrected = spark.createDataFrame([(1, "a2"), (2, "b")], "k long, v string")  # 2's latest change is -D
    orphan = spark.createDataFrame(
        [*CLEAN_LOG, (3, "c", "+I", 0, 5), (3, "c", "-U", 0, 6), (1, "x", "+U", 0, 7)], LOG
    )
    state = validate(lake, suites.tombstone_handling(SPEC, resurrected, log)[0])
    assert [k["k"] for k in failures(state)[0]["offending_keys"]] == [2]
    by_asset = {c.asset: validate(lake, c) for c in suites.tombstone_handling(SPEC, rows, orphan)[1:]}
    pairs = failures(by_asset["q.kv update pairs"])
    assert [(k["k"], k["_log_offset"]) for k in pairs[0]["offending_keys"]] == [(3, 6)]
    assert by_asset["q.kv changelog"]["success"]

    bad_types = spark.createDataFrame([*CLEAN_LOG, (4, "d", "+X", 0, 5)], LOG)
    log_check = suites.tombstone_handling(SPEC, rows, bad_types)[2]
    assert [k["k"] for k in failures(validate(lake, log_check))[0]["offending_keys"]] == [4]


def test_ignore_delete_tables_must_keep_tombstoned_rows(lake, spark):
    ignoring = TableSpec.from_dict({**SPEC.to_dict(), "options": {"table.delete.behavior": "ignore"}})
    rows = spark.createDataFrame([(1, "a")], "k long, v string")
    log = spark.createDataFrame([(1, "a", "+I", 0, 0)], LOG)
    assert all(validate(lake, c)["success"] for c in suites.tombstone_handling(ignoring, rows, log))
    leaked = spark.createDataFrame([(1, "a", "+I", 0, 0), (1, "a", "-D", 0, 1)], LOG)
    result = validate(
        lake, suites.tombstone_handling(ignoring, spark.createDataFrame([], "k long, v string"), leaked)[2]
    )
    assert [e["type"] for e in failures(result)] == ["expect_column_values_to_not_be_in_set"]


def test_drift_suite_passes_at_zero_and_names_drifting_keys(lake, spark):
    schema = "shop_id long, user_id long, drift long"
    clean = spark.createDataFrame([(1, 1, 0), (1, 2, 0)], schema)
    assert validate(lake, suites.drift("stats drift", clean, ["shop_id", "user_id"], 0))["success"]
    drifted = spark.createDataFrame([(1, 1, 0), (1, 2, 3), (2, 7, 1)], schema)
    failed = failures(validate(lake, suites.drift("stats drift", drifted, ["shop_id", "user_id"], 0)))
    per_key = next(e for e in failed if e["type"] == "expect_column_values_to_be_between")
    assert {(k["shop_id"], k["user_id"]) for k in per_key["offending_keys"]} == {(1, 2), (2, 7)}
    total = next(e for e in failed if e["type"] == "expect_column_sum_to_be_between")
    assert float(total["observed_value"]) == 4.0
    assert validate(lake, suites.drift("stats drift", drifted, ["shop_id", "user_id"], 3))["success"] is False
    assert validate(lake, suites.drift("stats drift", drifted, ["shop_id", "user_id"], 4))["success"]


def test_quality_app_fails_on_a_hand_corrupted_table_and_reports_the_keys(lake, spark, monkeypatch, engine):
    lake.create_table(SPEC.to_dict())
    lake.apply("q.kv", [{"op": "+I", "data": {"k": i, "v": f"v{i}"}} for i in range(1, 6)], batch_id=1)
    lake.apply(
        "q.kv", [{"op": "-D", "data": {"k": 5}}, {"op": "+U", "data": {"k": 1, "v": "new"}}], batch_id=2
    )
    (lake.settings.tables_dir / "q.kv.yaml").write_text(json.dumps(SPEC.to_dict()))
    messages: list[str] = []
    assert run_quality(lake.settings, spark=spark, progress=messages.append) == 0
    summary = json.loads((lake.settings.home / "quality" / "quality_summary.json").read_text())
    assert summary["success"] and summary["suites"]["pk_uniqueness"] == {"validations": 1, "failed": 0}
    assert {v["engine"] for v in summary["validations"]} == {engine}
    docs = summary["data_docs"].removeprefix("file://")
    index = open(docs).read()
    assert "pk_uniqueness__q.kv" in index
    if (REPO / ".venv" / "datadocs-assets" / "node_modules" / "jquery").is_dir():  # make setup fetched them
        assert "https://code.jquery.com" not in index and "static/vendor/jquery/dist/jquery.min.js" in index
    assert (lake.settings.home / "quality" / "drift_redelivery.png").stat().st_size > 1000

    # By hand: commit the first batch's data file again, so every key in it is stored twice.
    table = lake.storage.pk_table(SPEC)
    first = lake.storage.data_files(table)[0].data_file
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        append.append_data_file(first)
    messages.clear()
    assert run_quality(lake.settings, spark=spark, progress=messages.append) == 1
    failed = next(m for m in messages if "FAILED (critical) pk_uniqueness / q.kv" in m)
    stored = sorted(r["k"] for r in lake.rows("q.kv").collect())
    duplicated = sorted({k for k in stored if stored.count(k) > 1})
    assert duplicated and all(f"'k': {k}" in failed for k in duplicated)
    summary = json.loads((lake.settings.home / "quality" / "quality_summary.json").read_text())
    assert not summary["success"] and summary["suites"]["pk_uniqueness"]["failed"] == 1

    # The spark-submit entrypoint's arguments (as the quality DAG passes them): --report-only exits 0.
    from changelake.quality.runner import main

    monkeypatch.setenv("CHANGELAKE_HOME", str(lake.settings.home))
    monkeypatch.setenv("CHANGELAKE_TABLES", str(lake.settings.tables_dir))
    assert main(["--table", "q.kv", "--drift-threshold", "0", "--max-redelivery-share", "0.5"]) == 1
    assert main(["--table", "q.kv", "--report-only"]) == 0
