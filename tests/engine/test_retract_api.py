"""Retraction tables through the Python API (docs/semantics.md §4.7): changelog records and Debezium updates
whose before images retract, committed and read back, with the changelog each batch logged. No JVM: small
batches are applied in the applying process."""

from __future__ import annotations

import decimal
import json

import pytest

from tests.helpers import sparkless_lake

D = decimal.Decimal

REVENUE = {
    "name": "shop.revenue",
    "columns": [
        {"name": "shop_id", "type": "INT"},
        {"name": "revenue", "type": "DECIMAL(12,2)"},
        {"name": "orders", "type": "BIGINT"},
        {"name": "best", "type": "DECIMAL(12,2)"},
        {"name": "last_status", "type": "STRING"},
    ],
    "primary_key": ["shop_id"],
    "options": {
        "table.merge-engine": "aggregation",
        "table.agg.retract": "true",
        "fields.revenue.agg": "sum",
        "fields.orders.agg": "sum",
        "fields.best.agg": "max",
        "fields.best.ignore-retract": "true",
        "fields.last_status.agg": "last_value_ignore_nulls",
    },
}


def _row(shop, revenue, orders, best, status):
    return {"shop_id": shop, "revenue": revenue, "orders": orders, "best": best, "last_status": status}


@pytest.fixture
def lake(tmp_path):
    lake = sparkless_lake(tmp_path)
    lake.create_table(REVENUE)
    return lake


def test_refunds_and_cancellations_retract(lake):
    lake.apply(
        "shop.revenue",
        [
            {"op": "+I", "data": _row(1, "10.00", 1, "10.00", "paid")},
            {"op": "+I", "data": _row(1, "25.50", 1, "25.50", "paid")},
            {"op": "+I", "data": _row(2, "7.25", 1, "7.25", "paid")},
        ],
    )
    result = lake.apply(
        "shop.revenue",
        [
            {"op": "-D", "data": _row(1, "10.00", 1, "10.00", None)},  # a cancelled order
            {"op": "-U", "data": _row(2, "7.25", 1, "7.25", None)},  # a corrected order: before image
            {"op": "+U", "data": _row(2, "5.25", 1, "5.25", "corrected")},
            # A refund of an order not seen yet: its shop has no row, so the retraction changes nothing.
            {"op": "-D", "data": _row(3, "4.00", 1, "4.00", None)},
        ],
    )
    rows = sorted(lake.rows_arrow("shop.revenue").to_pylist(), key=lambda r: r["shop_id"])
    assert rows == [
        _row(1, D("25.50"), 1, D("25.50"), "paid"),
        _row(2, D("5.25"), 1, D("7.25"), "corrected"),
    ]
    assert result.counts["dropped_update_before"] == 0 and result.counts["ignored"] == 1
    log = [
        (r["_change_type"], r["shop_id"], r["revenue"])
        for r in lake.changelog_arrow("shop.revenue", from_batch=2).to_pylist()
    ]
    assert sorted(log, key=lambda c: c[1]) == [
        ("-U", 1, D("35.50")),
        ("+U", 1, D("25.50")),
        ("-U", 2, D("7.25")),
        ("+U", 2, D("0.00")),
        ("-U", 2, D("0.00")),
        ("+U", 2, D("5.25")),
    ]


def test_debezium_updates_and_deletes_retract_their_before_images(lake, tmp_path):
    def event(op, before, after, lsn):
        return {"before": before, "after": after, "op": op, "source": {"lsn": lsn}}

    a = {"shop_id": 1, "revenue": 30.0, "orders": 1, "best": 30.0, "last_status": "paid"}
    b = {**a, "revenue": 12.5, "best": 12.5, "last_status": "partially refunded"}
    other = {**a, "shop_id": 2, "revenue": 8.0, "best": 8.0}
    events = [
        event("c", None, a, 1),
        event("c", None, other, 2),
        event("u", a, b, 3),  # the before image takes the 30.00 back, the after image adds 12.50
        event("d", other, None, 4),  # a cancelled order: its whole contribution goes
    ]
    path = tmp_path / "orders.debezium.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    lake.apply("shop.revenue", file=path, fmt="debezium-json")
    rows = sorted(lake.rows_arrow("shop.revenue").to_pylist(), key=lambda r: r["shop_id"])
    assert rows == [
        _row(1, D("12.50"), 1, D("30.00"), "partially refunded"),
        # kept with zeros (no contribution left, as Paimon); the retracted status clears (last_value rule)
        _row(2, D("0.00"), 0, D("8.00"), None),
    ]


def test_the_demo_refunds_table_equals_its_recomputation_from_the_input(tmp_path):
    """examples/tables/shop.shop_revenue.yaml with datagen's refunds mode (Debezium order inserts, corrections
    and refunds): after each batch the table equals what its input added less what it took back, per shop --
    what the shop_revenue_drift mart computes in SQL and the quality app's drift check reads."""
    import collections
    import shutil

    from changelake.inputs.datagen import generate
    from tests.helpers import REPO

    lake = sparkless_lake(tmp_path)
    shutil.copy(REPO / "examples" / "tables" / "shop.shop_revenue.yaml", lake.settings.tables_dir)
    spec = lake.specs()["shop.shop_revenue"]
    generated = generate(spec, lake.settings.landing_dir, batches=3, seed=7)
    assert (
        sum(g.changes["delete"] for g in generated) > 20 and sum(g.changes["update"] for g in generated) > 10
    )
    results = lake.apply_pending("shop.shop_revenue")
    assert [r.status for r in results] == ["applied"] * 3
    assert sum(r.counts["deleted"] + r.counts["dropped_update_before"] for r in results) == 0

    exact: dict[int, list] = collections.defaultdict(lambda: [D(0), 0])
    for record in lake.input_arrow("shop.shop_revenue").to_pylist():
        sign = -1 if record["_op"] in ("-U", "-D") else 1
        exact[record["shop_id"]][0] += sign * record["revenue"]
        exact[record["shop_id"]][1] += sign * record["orders"]
    rows = {
        r["shop_id"]: [r["revenue"], r["orders"]] for r in lake.rows_arrow("shop.shop_revenue").to_pylist()
    }
    assert rows == dict(exact) and len(rows) == 5


def test_an_upsert_kafka_batch_into_a_table_whose_deletes_retract_is_refused(lake, tmp_path):
    from changelake.errors import WriteRefusedError

    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps({"key": {"shop_id": 1}, "value": None}) + "\n")
    with pytest.raises(WriteRefusedError, match="upsert-kafka format has no before image"):
        lake.apply("shop.revenue", file=path, fmt="upsert-kafka")
    assert lake.rows_arrow("shop.revenue").num_rows == 0


@pytest.mark.parametrize("fmt", ["debezium-json", "canal-json", "maxwell-json", "changelog-json"])
def test_every_cdc_format_gives_its_before_images_as_retractions(tmp_path, fmt):
    """The demo's refund stream in each CDC format: Debezium's ``before``, Canal's and Maxwell's ``old`` (the
    changed fields over the new row) and changelog JSON's -U/-D all retract, so the table holds the live
    orders' sums per shop, the same in every format."""
    import collections

    import yaml

    from changelake.inputs.datagen import generate
    from tests.helpers import REPO

    data = yaml.safe_load((REPO / "examples" / "tables" / "shop.shop_revenue.yaml").read_text())
    data["source"] = {"format": fmt}
    lake = sparkless_lake(tmp_path)
    spec = lake.create_table(data)
    generated = generate(spec, lake.settings.landing_dir, batches=2, records=60, seed=3, stream="refunds")
    assert sum(g.changes["update"] + g.changes["delete"] for g in generated) > 10
    assert [r.status for r in lake.apply_pending("shop.shop_revenue")] == ["applied"] * 2
    # The truth: the source's live orders after the two batches, summed per shop.
    from changelake.inputs.datagen import Profile, _Source

    source = _Source(spec, Profile.of(spec, records=60), 3, "refunds")
    for batch_id in (1, 2):
        source.batch(batch_id)
    live: dict[int, list] = collections.defaultdict(lambda: [D(0), 0])
    for order in source.orders.values():
        live[order["shop_id"]][0] += order["revenue"]
        live[order["shop_id"]][1] += order["orders"]
    rows = {
        r["shop_id"]: [r["revenue"], r["orders"]] for r in lake.rows_arrow("shop.shop_revenue").to_pylist()
    }
    assert {k: v for k, v in rows.items() if v != [D(0), 0]} == dict(live)
