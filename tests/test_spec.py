"""Table spec validation follows Fluss (spec §1, §3, §5, §13) with errors that name the problem."""

import pytest
from changelake.errors import SpecError
from changelake.spec import TableSpec

BASE = {
    "name": "shop.stats",
    "columns": [
        {"name": "shop_id", "type": "BIGINT"},
        {"name": "user_id", "type": "BIGINT"},
        {"name": "num_orders", "type": "INT"},
        {"name": "total_amount", "type": "DECIMAL(12,2)"},
        {"name": "dt", "type": "STRING"},
    ],
    "primary_key": ["shop_id", "user_id"],
}


def spec(**changes):
    return TableSpec.from_dict({**BASE, **changes})


def test_defaults_bucket_key_is_pk_minus_partition_keys():
    s = spec(partition_keys=[], options={"bucket.num": 4})
    assert s.bucket_key == ("shop_id", "user_id")
    assert s.bucket_num == 4
    assert s.delete_behavior == "allow"
    assert s.changelog_image == "full"
    assert s.column("shop_id").nullable is False  # PK columns are forced NOT NULL


def test_partitioned_bucket_key_excludes_partition_keys():
    s = spec(primary_key=["shop_id", "user_id", "dt"], partition_keys=["dt"])
    assert s.bucket_key == ("shop_id", "user_id")


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"bucket_key": ["num_orders"]},
            "Bucket keys must be a subset of primary keys excluding partition keys",
        ),
        (
            {"primary_key": ["shop_id", "dt"], "partition_keys": ["dt"], "bucket_key": ["dt"]},
            "Bucket key ['dt'] shouldn't include any column in partition keys ['dt'].",
        ),
        (
            {"partition_keys": ["dt"]},
            "Partitioned Primary Key Table requires partition key ['dt'] is a subset of the primary key",
        ),
        (
            {"primary_key": ["dt"], "partition_keys": ["dt"]},
            "Primary Key constraint ['dt'] should not be same with partition fields ['dt'].",
        ),
        ({"primary_key": ["nope"]}, "Primary key column 'nope' does not exist"),
        ({"primary_key": []}, "needs a primary_key"),
        ({"name": "shop"}, "expected '<namespace>.<table>'"),
        ({"name": "shop.or-ders"}, "Invalid table name 'or-ders'"),
        ({"name": "sh op.orders"}, "Invalid namespace 'sh op'"),
        ({"columns": [{"name": "a;drop", "type": "INT"}], "primary_key": ["a;drop"]}, "Invalid column name"),
        ({"columns": [{"name": "_bucket", "type": "INT"}], "primary_key": ["_bucket"]}, "reserved"),
        ({"columns": [{"name": "a", "type": "ARRAY<INT>"}], "primary_key": ["a"]}, "cannot parse type"),
        (
            {"columns": [{"name": "a", "type": "DECIMAL(40,2)"}], "primary_key": ["a"]},
            "precision must be 1..38",
        ),
        (
            {"columns": [{"name": "a", "type": "INT"}, {"name": "a", "type": "INT"}], "primary_key": ["a"]},
            "Duplicate column name 'a'",
        ),
        (
            {"options": {"table.delete.behavior": "sometimes"}},
            "Invalid value 'sometimes' for 'table.delete.behavior'",
        ),
        ({"options": {"table.changelog.image": "half"}}, "Invalid value 'half' for 'table.changelog.image'"),
        ({"options": {"bucket.num": 0}}, "'bucket.num' must be between 1 and 1024"),
        ({"options": {"no.such.option": 1}}, "Unsupported table option 'no.such.option'"),
        (
            {"options": {"table.merge-engine": "last_row"}},
            "Invalid value 'last_row' for 'table.merge-engine'",
        ),
        ({"extra_key": 1}, "unknown keys ['extra_key']"),
    ],
)
def test_invalid_specs_are_refused_with_a_clear_message(changes, message):
    with pytest.raises(SpecError) as err:
        spec(**changes)
    assert message in str(err.value)


def test_seed_alias_remove_record_on_delete_maps_to_delete_behavior():
    assert spec(options={"table.agg.remove-record-on-delete": "true"}).delete_behavior == "allow"
    assert spec(options={"table.agg.remove-record-on-delete": "false"}).delete_behavior == "disable"


def test_alias_conflicting_with_released_name_names_both():
    with pytest.raises(SpecError) as err:
        spec(options={"table.agg.remove-record-on-delete": "true", "table.delete.behavior": "ignore"})
    assert "table.agg.remove-record-on-delete" in str(err.value) and "table.delete.behavior" in str(err.value)


def test_yaml_error_names_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: shop.t\ncolumns: [{name: k, type: INT}]\nprimary_key: [x]\n")
    with pytest.raises(SpecError) as err:
        TableSpec.from_yaml(path)
    assert str(path) in str(err.value) and "'x'" in str(err.value)


def test_round_trip_through_dict():
    s = spec(options={"bucket.num": 3, "table.delete.behavior": "IGNORE"})
    assert s.delete_behavior == "ignore"
    assert TableSpec.from_dict(s.to_dict()) == s


def test_repository_demo_specs_are_valid():
    from pathlib import Path

    from changelake.spec import load_specs

    specs = load_specs(Path(__file__).resolve().parents[1] / "tables")
    assert "shop.orders" in specs
