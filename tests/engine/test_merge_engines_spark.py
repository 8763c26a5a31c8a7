"""Merge engines through the Spark apply: values of every kind survive the per-bucket merge."""

import datetime as dt
import decimal

import pytest
from pyroaring import BitMap

from tests.helpers import changelog_of, rows_of

pytestmark = pytest.mark.integration


def b64(bitmap) -> str:
    import base64

    return base64.b64encode(bitmap.serialize()).decode()


def test_aggregation_table_across_types_and_batches(lake):
    lake.create_table(
        {
            "name": "shop.stats",
            "columns": [
                {"name": "shop_id", "type": "BIGINT"},
                {"name": "total", "type": "DECIMAL(12,2)"},
                {"name": "orders", "type": "INT"},
                {"name": "last_at", "type": "TIMESTAMP(3)"},
                {"name": "items", "type": "STRING"},
                {"name": "vip", "type": "BOOLEAN"},
                {"name": "users", "type": "BYTES"},
                {"name": "ratio", "type": "DOUBLE"},
            ],
            "primary_key": ["shop_id"],
            "options": {
                "bucket.num": 2,
                "table.merge-engine": "aggregation",
                "fields.total.agg": "sum",
                "fields.orders.agg": "sum",
                "fields.last_at.agg": "max",
                "fields.items.agg": "listagg",
                "fields.items.listagg.delimiter": ";",
                "fields.vip.agg": "bool_or",
                "fields.users.agg": "rbm32",
                "fields.ratio.agg": "product",
            },
        }
    )

    def order(shop, total, at, item, vip, user, ratio):
        return {
            "op": "+I",
            "data": {
                "shop_id": shop,
                "total": total,
                "orders": 1,
                "last_at": at,
                "items": item,
                "vip": vip,
                "users": b64(BitMap([user])),
                "ratio": ratio,
            },
        }

    lake.apply(
        "shop.stats",
        [
            order(1, "10.50", "2026-01-01T10:00:00", "a", False, 7, 0.9),
            order(2, "1.00", "2026-01-01T09:00:00", "x", None, 1, 2.0),
        ],
        batch_id=1,
    )
    lake.apply(
        "shop.stats",
        [
            order(1, "0.25", "2026-01-01T08:00:00", "b", True, 9, 0.8),
            order(1, "1.00", "2026-01-02T00:00:00", None, None, 7, 1.0),
        ],
        batch_id=2,
    )
    rows = {r["shop_id"]: r for r in lake.rows("shop.stats").collect()}
    one = rows[1]
    assert one["total"] == decimal.Decimal("11.75") and one["orders"] == 3
    assert one["last_at"] == dt.datetime(2026, 1, 2) and one["items"] == "a;b" and one["vip"] is True
    assert BitMap.deserialize(bytes(one["users"])) == BitMap([7, 9]) and one["ratio"] == 0.7200000000000001
    assert rows[2]["total"] == decimal.Decimal("1.00")
    assert [c[1] for c in changelog_of(lake, "shop.stats")] == ["+I", "+I", "-U", "+U", "-U", "+U"]


def test_versioned_and_first_row_through_spark(lake):
    base = {
        "columns": [
            {"name": "user_id", "type": "STRING"},
            {"name": "region", "type": "STRING"},
            {"name": "updated_at", "type": "TIMESTAMP_LTZ(3)"},
        ],
        "primary_key": ["user_id"],
    }
    lake.create_table(
        {
            **base,
            "name": "web.profiles",
            "options": {
                "table.merge-engine": "versioned",
                "table.merge-engine.versioned.ver-column": "updated_at",
            },
        }
    )
    lake.create_table({**base, "name": "web.first", "options": {"table.merge-engine": "first_row"}})
    batch = [
        {"op": "+I", "data": {"user_id": "u1", "region": "eu", "updated_at": "2026-01-02T00:00:00Z"}},
        {"op": "+U", "data": {"user_id": "u1", "region": "us", "updated_at": "2026-01-01T00:00:00Z"}},
        {"op": "+U", "data": {"user_id": "u1", "region": "apac", "updated_at": "2026-01-03T00:00:00+01:00"}},
        {"op": "-D", "data": {"user_id": "u1"}},
    ]
    result = lake.apply("web.profiles", batch, batch_id=1)
    assert rows_of(lake.rows("web.profiles").select("user_id", "region")) == [("u1", "apac")]
    assert result.counts["ignored"] == 2  # the older version and the delete (ignore is the default)
    lake.apply("web.first", batch, batch_id=1)
    assert rows_of(lake.rows("web.first").select("user_id", "region")) == [("u1", "eu")]
    assert [c[1] for c in changelog_of(lake, "web.first")] == ["+I"]
