"""dbt on changelake (in the test's SparkSession, as the dbt app runs it): `dbt build` passes on demo data,
the marts equal Spark computations done here independently, a replayed batch changes no mart, the
incremental mart equals a full rebuild after a new batch, and a duplicated key makes `dbt test` fail."""

from __future__ import annotations

import decimal
import json

import pytest
from pyspark.sql import functions as F

from changelake.inputs.datagen import generate
from changelake.runtime.dbt_runner import dbt_dirs, run_dbt, summarize
from tests.helpers import DEMO_TABLES, REPO, land_and_apply_demo

pytestmark = pytest.mark.integration
DEMO = DEMO_TABLES  # the sources name every demo table


def mart(spark, name: str, order_by: list[str]) -> list[tuple]:
    return [tuple(r) for r in spark.table(f"analytics.{name}").orderBy(*order_by).collect()]


def build(lake, *args: str) -> dict:
    status = run_dbt(["build", *args], lake.settings, progress=lambda m: None)
    summary = summarize(dbt_dirs(lake.settings)["target"] / "run_results.json")
    failed = [n for n in summary["nodes"] if n["status"] in ("fail", "error")]
    assert status == 0 and not failed, failed
    return summary


# First in the file: it builds into the same schema, analytics, and drops it at its end, before `built` builds.
def test_without_dedup_the_drift_check_fails_and_says_by_how_much(lake, spark):
    """The same redelivering source into an aggregation table without `dedup: kafka-offsets`: dbt's exact
    recomputation exposes the drift and the quality app fails on it, naming the drifted keys."""
    from changelake.quality.runner import run_quality

    for path in sorted((REPO / "examples" / "tables").glob("*.yaml")):
        text = path.read_text()
        if path.stem == "shop.shop_user_stats":
            text = text.replace("dedup: kafka-offsets", "dedup: none")
        (lake.settings.tables_dir / path.name).write_text(text)
    for spec in lake.specs().values():
        generate(spec, lake.settings.landing_dir, batches=2, records=30)
    results = lake.apply_pending("shop.shop_user_stats")
    redelivered = sum(r.source["redelivered"] for r in results)
    assert redelivered > 0 and all(r.source["deduplicated"] == 0 for r in results)
    lake.apply_pending()
    try:
        build(lake)
        drift = spark.table("analytics.shop_user_stats_drift").filter("drift > 0")
        drifted = {(r["shop_id"], r["user_id"]) for r in drift.collect()}
        total = float(drift.agg(F.sum("drift")).first()[0])
        assert drifted and total > 0
        messages: list[str] = []
        status = run_quality(
            lake.settings, spark=spark, progress=messages.append, tables=["shop.shop_user_stats"]
        )
        assert status == 1
        failed = [m for m in messages if "FAILED (critical) duplicate_drift" in m]
        per_key = next(m for m in failed if "expect_column_values_to_be_between" in m)
        named = sum(1 for s, u in drifted if f"'shop_id': {s}, 'user_id': {u}" in per_key)
        assert named == min(len(drifted), 20)  # the report names the drifted keys (up to 20)
        summary = (lake.settings.home / "quality" / "quality_summary.json").read_text()
        assert f'"shop.shop_user_stats": {total}' in summary
    finally:
        spark.sql("drop database if exists analytics cascade")


@pytest.fixture(scope="module")
def built(spark, tmp_path_factory):
    """The demo landed and applied, and one ``dbt build`` of it (passing), for the module's three tests that
    start from a built project: each build took 20-50 s of the module's 141 s (62-85 s shared).

    They share it in file order: the first only reads it, the second applies a new batch and builds again (it
    needs the marts of a build, not of this build), the third duplicates a file of web.pageviews (last: the
    table is corrupt after it). A test run alone, or on another pytest-xdist worker, gets a build of its own."""
    from changelake import ChangeLake

    home = tmp_path_factory.mktemp("dbt-demo")
    (home / "tables").mkdir()
    lake = land_and_apply_demo(ChangeLake(home=home, tables_dir=home / "tables", spark=spark, progress=None))
    summary = build(lake)
    yield lake, summary
    spark.sql("drop database if exists analytics cascade")


def test_build_passes_and_marts_equal_independent_spark_results(built, spark):
    demo, summary = built
    assert summary["counts"].get("pass", 0) > 30 and "unit_test.changelake.user_clicks_hourly" in " ".join(
        n["unique_id"] for n in summary["nodes"]
    )
    orders = demo.rows("shop.orders")
    expected_orders = (
        orders.groupBy("shop_id").agg(F.count("*"), F.sum("amount")).orderBy("shop_id").collect()
    )
    assert mart(spark, "orders_per_shop", ["shop_id"]) == [tuple(r) for r in expected_orders]

    views = demo.rows("web.pageviews")
    expected = (
        views.groupBy("user_region").agg(F.count("*"), F.countDistinct("user_id")).orderBy("user_region")
    )
    assert mart(spark, "pageviews_per_region", ["region"]) == [tuple(r) for r in expected.collect()]

    hourly = (
        views.groupBy("user_id", F.window("viewtime", "1 hour").alias("w"))
        .agg(F.count("*").alias("clicks"))
        .select(
            "user_id", F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"), "clicks"
        )
    )
    got = spark.table("analytics.user_clicks_hourly").select(
        "user_id", "window_start", "window_end", "clicks"
    )
    assert sorted(map(tuple, got.collect())) == sorted(map(tuple, hourly.collect()))

    # With dedup: kafka-offsets the aggregation table is exact: zero drift on every key.
    drift = spark.table("analytics.shop_user_stats_drift")
    assert drift.count() == demo.rows("shop.shop_user_stats").count() > 5
    assert drift.agg(F.max("drift")).first()[0] == decimal.Decimal("0.00")
    stats = {s["table"]: s for s in demo.status()}["shop.shop_user_stats"]
    assert stats["deduplicated"] > 0  # ... although redeliveries did arrive

    # Refunds and corrections retract (table.agg.retract): revenue per shop equals its recomputation.
    revenue = spark.table("analytics.shop_revenue_drift")
    assert revenue.count() == demo.rows("shop.shop_revenue").count() > 1
    assert revenue.agg(F.max("drift")).first()[0] == decimal.Decimal("0.00")
    assert revenue.filter("engine_revenue != exact_revenue or engine_orders != exact_orders").count() == 0
    refunds = demo.input_records("shop.shop_revenue").filter("_op = '-D'").count()
    assert refunds > 0  # ... and refunds did arrive
    # The quality app's drift check (GX) on the retraction table: it passes, with zero drift in its summary.
    from changelake.quality.runner import run_quality

    messages: list[str] = []
    status = run_quality(demo.settings, spark=spark, progress=messages.append, tables=["shop.shop_revenue"])
    summary = json.loads((demo.settings.home / "quality" / "quality_summary.json").read_text())
    assert status == 0 and summary["drift_total"] == {"shop.shop_revenue": 0.0}, messages
    assert not [m for m in messages if "FAILED" in m]
    # Each GX run is named by what it checked (GX's default run name is __none__).
    stored = demo.settings.home / "quality" / "gx" / "uncommitted" / "validations"
    runs = {p.parents[1].name for p in stored.glob("**/*.json")}  # .../<run name>/<run time>/<batch>.json
    last = {s["table"]: s for s in demo.status()}["shop.shop_revenue"]["last_batch"]
    assert f"shop.shop_revenue at batch {last}" in runs and "__none__" not in runs, runs

    # dbt's docs show the marts' row counts: the catalog has them (Spark's statistics, computed first).
    assert run_dbt(["docs", "generate"], demo.settings, progress=lambda m: None) == 0
    catalog = json.loads((dbt_dirs(demo.settings)["target"] / "catalog.json").read_text())
    stats = next(n["stats"] for n in catalog["nodes"].values() if n["metadata"]["name"] == "orders_per_shop")
    assert stats["rows"]["value"] == len(expected_orders) > 1, stats


def test_replay_changes_nothing_and_incremental_equals_full_rebuild(built, spark):
    demo, _ = built  # built: the marts before the replay
    marts = ["orders_per_shop", "pageviews_per_region", "user_clicks_hourly", "shop_user_stats_drift"]
    keys = {"orders_per_shop": ["shop_id"], "pageviews_per_region": ["region"],
            "user_clicks_hourly": ["user_id", "window_start"], "shop_user_stats_drift": ["shop_id", "user_id"]}  # fmt: skip
    before = {m: mart(spark, m, keys[m]) for m in marts}
    assert demo.apply_pending(from_batch=1) and all(
        r.status == "already-applied" for r in demo.apply_pending(from_batch=1)
    )
    build(demo)
    assert {m: mart(spark, m, keys[m]) for m in marts} == before

    spec = demo.spec("web.pageviews")
    generate(spec, demo.settings.landing_dir, batches=1, records=40)
    assert [r.status for r in demo.apply_pending("web.pageviews")] == ["applied"]
    build(demo, "--select", "+user_clicks_hourly", "stg_pageviews")
    incremental = mart(spark, "user_clicks_hourly", keys["user_clicks_hourly"])
    assert incremental != before["user_clicks_hourly"]
    build(demo, "--select", "+user_clicks_hourly", "stg_pageviews", "--full-refresh")
    rebuilt = mart(spark, "user_clicks_hourly", keys["user_clicks_hourly"])
    assert set(rebuilt) ^ set(incremental) == set() and len(rebuilt) == len(incremental)


def test_a_duplicated_key_fails_dbt_test(built, spark):
    """Corrupt web.pageviews by hand: commit one of its data files a second time (every row twice)."""
    demo, _ = built  # built, its dbt tests passing
    table = demo.storage.pk_table(demo.spec("web.pageviews"))
    first = demo.storage.data_files(table)[0].data_file
    with table.transaction() as tx:
        with tx.update_snapshot().fast_append() as append:
            append.append_data_file(first)
    status = run_dbt(
        ["test", "--select", "stg_pageviews", "source:web.pageviews"],
        demo.settings,
        lambda m: None,
    )
    summary = summarize(dbt_dirs(demo.settings)["target"] / "run_results.json")
    failed = {n["unique_id"].split(".")[2] for n in summary["nodes"] if n["status"] == "fail"}
    assert status == 1
    assert "source_unique_web_pageviews_event_id" in failed
