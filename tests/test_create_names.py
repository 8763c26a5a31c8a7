"""Tables created through the Python API obey the naming rule of the spec directory (issue 12): a table whose
derived names (views ``<ns>__<t>[__changelog|__input]``, the changelog table) another table already has is
refused, whether that table is in the catalog only or has a spec file, and a hand-built TableSpec with a
reserved suffix is refused too. No Spark: creating a table is a catalog operation."""

from __future__ import annotations

import dataclasses
import json

import pytest

from changelake import ChangeLake
from changelake.errors import SpecError


def table(name: str) -> dict:
    return {"name": name, "columns": [{"name": "k", "type": "INT"}], "primary_key": ["k"]}


@pytest.fixture
def lake(tmp_path) -> ChangeLake:
    (tmp_path / "tables").mkdir()
    return ChangeLake(home=tmp_path, tables_dir=tmp_path / "tables", progress=lambda m: None)


def tables_in_catalog(lake: ChangeLake) -> list[str]:
    return sorted(lake._catalog_tables())


@pytest.mark.parametrize(
    ("first", "second", "derived"),
    [
        ("a__b.c", "a.b__c", "a__b__c"),
        ("a.b__c", "a__b.c", "a__b__c"),
        ("shop.orders", "shop__orders.input", "shop__orders__input"),
        ("shop.orders", "shop__orders.changelog", "shop__orders__changelog"),
        ("shop.orders", "SHOP.Orders", "shop__orders"),
        ("x_.y", "x._y", "x___y"),
    ],
)
def test_api_refuses_a_table_whose_names_another_table_has(lake, first, second, derived):
    lake.create_table(table(first))
    with pytest.raises(SpecError) as err:
        lake.create_table(table(second))
    assert f"derive the name '{derived}'" in str(err.value) and first in str(err.value)
    assert tables_in_catalog(lake) == [first]


def test_a_spec_file_counts_before_its_table_exists(lake):
    (lake.settings.tables_dir / "a.b__c.yaml").write_text(json.dumps(table("a.b__c")))  # JSON is YAML
    with pytest.raises(SpecError, match="collides with table a.b__c"):
        lake.create_table(table("a__b.c"))
    assert tables_in_catalog(lake) == []
    lake.create_table(lake.specs()["a.b__c"])  # the spec's own table is not a collision with itself
    assert tables_in_catalog(lake) == ["a.b__c"]


def test_a_hand_built_spec_with_a_reserved_suffix_is_refused(lake):
    spec = lake.create_table(table("shop.orders"))
    for name in ("orders__input", "ORDERS__CHANGELOG", "x__input", "orders__changelog", "x__changelog"):
        with pytest.raises(SpecError, match="is reserved"):
            lake.create_table(dataclasses.replace(spec, table=name))
    assert tables_in_catalog(lake) == ["shop.orders"]


def test_creating_an_existing_table_again_is_idempotent(lake):
    lake.create_table(table("a__b.c"))
    lake.create_table(table("a__b.c"))
    lake.create_table(table("other.t"))
    assert tables_in_catalog(lake) == ["a__b.c", "other.t"]
