"""Table spec validation follows Fluss (docs/semantics.md §1, §3, §5, §13) with errors that name the problem."""

import pytest

from changelake.errors import SpecError
from changelake.spec import TableSpec, load_specs

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
            "Bucket key [dt] shouldn't include any column in partition keys [dt].",
        ),
        (
            {"partition_keys": ["dt"]},
            "Partitioned Primary Key Table requires partition key [dt] is a subset of the primary key",
        ),
        (
            {"primary_key": ["dt"], "partition_keys": ["dt"]},
            "Primary Key constraint [dt] should not be same with partition fields [dt].",
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
            "Invalid value for config 'table.delete.behavior'. Reason: Could not parse value 'sometimes' for key 'table.delete.behavior'.",
        ),
        (
            {"options": {"table.changelog.image": "half"}},
            "Invalid value for config 'table.changelog.image'. Reason: Could not parse value 'half' for key 'table.changelog.image'.",
        ),
        ({"options": {"bucket.num": 0}}, "'bucket.num' must be between 1 and 1024"),
        ({"options": {"no.such.option": 1}}, "'no.such.option' is not a Fluss table property."),
        (
            {"options": {"table.merge-engine": "last_row"}},
            "Invalid value for config 'table.merge-engine'. Reason: Could not parse value 'last_row' for key 'table.merge-engine'.",
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

    specs = load_specs(Path(__file__).resolve().parents[1] / "examples" / "tables")
    assert "shop.orders" in specs


# --- issue 12: names and spec files -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "shop.orders__input"}, "the suffix '__input' is reserved"),
        ({"name": "shop.orders__CHANGELOG"}, "the suffix '__changelog' is reserved"),
        ({"name": "shop\n.orders"}, "Invalid namespace"),
        ({"name": "shop.orders\n"}, "Invalid table name"),
        ({"name": "shop.٣orders"}, "Invalid table name"),
        ({"options": {"bucket.num": "٣"}}, "'bucket.num' must be a positive integer"),
        ({"options": {"bucket.num": "4\n"}}, "'bucket.num' must be a positive integer"),
        ({"options": {"table.auto-increment.cache-size": "²"}}, "must be a positive integer"),
        ({"options": ["bucket.num"]}, "'options' must be a mapping"),
        ({"options": {"bucket.num": [4]}}, "expected a name with a single value"),
        ({"source": {"ordering": "source.lsn\n"}}, "source option 'ordering' must be"),
        ({"source": {"format": "canal-json", "database.include": ["shop"]}}, "must be a regular expression"),
        ({"source": {"format": ["canal-json"]}}, "source option 'format' must be one of"),
        ({1: "x"}, "unknown keys ['1']"),
        ({"columns": [{"name": "k", "type": "INT", 5: 1}], "primary_key": ["k"]}, "unknown keys ['5']"),
    ],
)
def test_names_options_and_keys_are_validated_whole(changes, message):
    with pytest.raises(SpecError) as err:
        TableSpec.from_dict({**BASE, **changes})
    assert message in str(err.value)


def test_a_key_given_twice_in_a_spec_file_is_refused(tmp_path):
    path = tmp_path / "shop.stats.yaml"
    path.write_text(
        "name: shop.stats\ncolumns: [{name: k, type: INT}]\nprimary_key: [k]\n"
        "options:\n  table.delete.behavior: allow\n  table.delete.behavior: disable\n"
    )
    with pytest.raises(SpecError, match=r"found the key 'table.delete.behavior' twice") as err:
        TableSpec.from_yaml(path)
    assert str(path) in str(err.value)
    path.write_text("name: shop.a\nname: shop.b\ncolumns: [{name: k, type: INT}]\nprimary_key: [k]\n")
    with pytest.raises(SpecError, match="found the key 'name' twice"):
        TableSpec.from_yaml(path)
    # YAML merge keys are not repeats: explicit keys override merged ones, as YAML defines.
    path.write_text("name: shop.a\ncolumns: [&c {name: k, type: INT}, {<<: *c, name: v}]\nprimary_key: [k]\n")
    assert TableSpec.from_yaml(path).column_names == ("k", "v")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"name: shop.t\xff\n", "not UTF-8 text"),
        (b"[" * 20_000, "not valid YAML"),
        (b"name: [unclosed\n", "not valid YAML"),
        (b"- 1\n- 2\n", "expected a mapping"),
        (b"", "expected a mapping"),
    ],
)
def test_unreadable_spec_files_are_spec_errors(tmp_path, content, message):
    path = tmp_path / "t.yaml"
    path.write_bytes(content)
    with pytest.raises(SpecError, match=message):
        TableSpec.from_yaml(path)


def write_spec(directory, file_name: str, table: str) -> None:
    (directory / file_name).write_text(
        f"name: {table}\ncolumns: [{{name: k, type: INT}}]\nprimary_key: [k]\n"
    )


@pytest.mark.parametrize(
    ("first", "second", "derived"),
    [
        ("a__b.c", "a.b__c", "a__b__c"),
        ("shop.orders", "SHOP.Orders", "shop__orders"),
        ("shop.orders", "shop__orders.input", "shop__orders__input"),
        ("x_.y", "x._y", "x___y"),
    ],
)
def test_spec_sets_whose_derived_names_collide_are_refused(tmp_path, first, second, derived):
    write_spec(tmp_path, "1.yaml", first)
    write_spec(tmp_path, "2.yml", second)
    with pytest.raises(SpecError) as err:
        load_specs(tmp_path)
    if derived:
        assert f"derive the name '{derived}'" in str(err.value) and first in str(err.value)


def test_a_spec_with_a_reserved_suffix_is_a_problem_of_its_own_table(tmp_path):
    """Refused for its suffix before any collision; the other table still loads (one bad spec does not stop
    the others)."""
    write_spec(tmp_path, "1.yaml", "a.b__c")
    write_spec(tmp_path, "2.yml", "a__b.c__input")
    specs = load_specs(tmp_path)
    assert "a__b.c__input" in specs.problems and "a.b__c" in specs


def test_yml_and_yaml_specs_load_alike(tmp_path):
    write_spec(tmp_path, "shop.a.yml", "shop.a")
    write_spec(tmp_path, "shop.b.yaml", "shop.b")
    write_spec(tmp_path, "notes.txt", "shop.c")
    assert sorted(load_specs(tmp_path)) == ["shop.a", "shop.b"]
