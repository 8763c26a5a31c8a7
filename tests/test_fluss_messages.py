"""Fluss's refusals, word for word where Fluss's own tests compare them: column lists printed as Java prints
them (``[a, b]``), the checks in Fluss's order, both of Fluss's auto-increment messages (client, server), and
the options Fluss accepts. No Spark: spec checks and the write/lookup checks run before any work."""

from __future__ import annotations

import pytest

from changelake.engine.merge import check_target_columns
from changelake.errors import ChangelakeError, SpecError, WriteRefusedError, java_list
from changelake.spec import TableSpec
from changelake.storage.fastread import check_lookup_columns

pytestmark = pytest.mark.unit


def spec(**changes) -> TableSpec:
    data = {
        "name": "test_db_1.t",
        "columns": [
            {"name": "a", "type": "INT"},
            {"name": "b", "type": "BIGINT"},
            {"name": "c", "type": "STRING"},
            {"name": "d", "type": "STRING"},
        ],
        "primary_key": ["a", "b", "c"],
        "options": {"bucket.num": 3},
    }
    data["options"] = {**data["options"], **changes.pop("options", {})}
    return TableSpec.from_dict({**data, **changes})


def refused(fn, *args) -> str:
    with pytest.raises(ChangelakeError) as err:
        fn(*args)
    return str(err.value)


def test_java_list():
    assert java_list(["a", "b"]) == "[a, b]" and java_list(()) == "[]"


def test_prefix_lookup_messages_in_fluss_order():
    # FlussTableITCase#testInvalidPrefixLookup: bucket key (a, c) is not a prefix of the PK
    t = spec(options={"bucket.key": "a,c"})
    assert refused(check_lookup_columns, t, ["a", "c"], True) == (
        "Can not perform prefix lookup on table 'test_db_1.t', because the bucket keys [a, c] is not a prefix "
        "subset of the physical primary keys [a, b, c] (excluded partition fields if present)."
    )
    # the whole primary key, in any order, is refused first: whatever the bucket key (Fluss's words, but for
    # the advice its Java API gives: "Lookuper without lookupBy" means nothing to a user of the CLI)
    for bucket_key in ("a,c", "a,b"):
        t = spec(options={"bucket.key": bucket_key})
        assert refused(check_lookup_columns, t, ["c", "a", "b"], True) == (
            "Can not perform prefix lookup on table 'test_db_1.t', because the lookup columns [c, a, b] equals the "
            "physical primary keys [a, b, c]. Please use primary key lookup (a lookup without --prefix; "
            "prefix=False in the Python API) instead."
        )
    t = spec(options={"bucket.key": "a,b"})
    assert refused(check_lookup_columns, t, ["b", "a"], True) == (
        "Can not perform prefix lookup on table 'test_db_1.t', because the lookup columns [b, a] must contain "
        "all bucket keys [a, b] in order."
    )
    check_lookup_columns(t, ["a", "b"], True)  # the bucket key itself is a prefix lookup


def test_partial_write_messages_in_the_clients_order():
    t = spec()
    assert refused(check_target_columns, t, ["b", "c"]) == (
        "The target write columns [b, c] must contain the primary key columns [a, b, c]."
    )
    ai = TableSpec.from_dict(
        {
            "name": "web.ids",
            "columns": [{"name": "a", "type": "STRING"}, {"name": "c", "type": "BIGINT"}],
            "primary_key": ["a"],
            "options": {"auto-increment.fields": "c"},
        }
    )
    message = refused(check_target_columns, ai, None)
    assert message.startswith(
        "This table has auto increment column [c]. Explicitly specifying values for an auto increment column is "
        "not allowed. Please specify non-auto-increment columns as target columns using partialUpdate first."
    )
    assert (
        "The table contains an auto-increment column [c], but update target columns are not explicitly"
        in message
    )
    message = refused(check_target_columns, ai, ["a", "c"])
    assert message.startswith("Explicitly specifying values for the auto increment column c is not allowed.")
    assert "Auto-increment column [c] at index 1 must not be included in target columns." in message
    # the client checks the primary key before the auto-increment column
    assert refused(check_target_columns, ai, ["c"]).startswith(
        "The target write columns [c] must contain the primary key columns [a]."
    )
    with pytest.raises(WriteRefusedError):
        check_target_columns(ai, ["c"])


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"options": {"table.merge-engine": "last_row"}},
            "Invalid value for config 'table.merge-engine'. Reason: Could not parse value 'last_row' for key "
            "'table.merge-engine'.",
        ),
        ({"options": {"connector": "fluss"}}, "'connector' is not a Fluss table property."),
        (
            {"options": {"table.merge-engine": "aggregation", "fields.d.agg": ""}},
            "Empty aggregation function name for column 'd'",
        ),
        (
            {"options": {"table.merge-engine": "aggregation", "fields.d.agg": "sum"}},
            "Data type for sum column must be part of [TINYINT, SMALLINT, INTEGER, BIGINT, FLOAT, DOUBLE, DECIMAL] "
            "but was 'STRING'.",
        ),
        (
            {"options": {"auto-increment.fields": "f4"}},
            "Auto increment column f4 does not exist in table columns [a, b, c, d].",
        ),
        (
            {"options": {"bucket.key": "d"}},
            "The primary keys are [a, b, c], the partition keys are [], but the user-defined bucket keys are [d].",
        ),
    ],
)
def test_option_messages(changes, message):
    with pytest.raises(SpecError) as err:
        spec(**changes)
    assert message in str(err.value)


@pytest.mark.parametrize("engine", [None, "first_row", "aggregation"])
def test_a_version_column_is_ignored_by_other_engines(engine):
    """Fluss reads table.merge-engine.versioned.ver-column for the versioned engine only."""
    options = {"table.merge-engine.versioned.ver-column": "b"}
    if engine:
        options["table.merge-engine"] = engine
    if engine == "first_row":
        options["table.delete.behavior"] = "ignore"
    t = spec(options=options)
    assert t.merge_engine == engine  # None: the default last-row engine
    assert t.version_column is None


@pytest.mark.parametrize(
    "column, shown",
    [
        ({"name": "v", "type": "STRING"}, "STRING"),  # Fluss's FlussAdminITCase compares this one
        ({"name": "v", "type": "STRING", "nullable": False}, "STRING NOT NULL"),
        ({"name": "v", "type": "DECIMAL(10,2)"}, "DECIMAL(10, 2)"),
        ({"name": "v", "type": "TIME"}, "TIME(0)"),
        ({"name": "v", "type": "CHAR(3)"}, "CHAR(3)"),
        ({"name": "v", "type": "DOUBLE"}, "DOUBLE"),
        ({"name": "v", "type": "STRING", "primary_key": True}, "STRING NOT NULL"),  # a key column is NOT NULL
    ],
)
def test_a_wrong_version_column_type_is_printed_as_fluss_prints_it(column, shown):
    """Fluss prints the column's ``DataType`` (its ``toString``): a space in DECIMAL, TIME's default precision,
    NOT NULL when the column is."""
    key = ["k", "v"] if column.pop("primary_key", False) else ["k"]
    message = refused(
        TableSpec.from_dict,
        {
            "name": "db.t",
            "columns": [{"name": "k", "type": "INT"}, column],
            "primary_key": key,
            "options": {"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "v"},
        },
    )
    assert message.endswith(
        "The version column 'v' for versioned merge engine must be one type of "
        f"[INT, BIGINT, TIMESTAMP, TIMESTAMP_LTZ], but got {shown}."
    ), message


def test_an_aggregate_functions_wrong_type_is_printed_as_fluss_prints_it():
    message = refused(
        TableSpec.from_dict,
        {
            "name": "db.t",
            "columns": [
                {"name": "k", "type": "INT"},
                {"name": "v", "type": "TIMESTAMP_LTZ", "nullable": False},
            ],
            "primary_key": ["k"],
            "options": {"table.merge-engine": "aggregation", "fields.v.agg": "sum"},
        },
    )
    assert message.endswith("but was 'TIMESTAMP_LTZ(6) NOT NULL'."), message


def test_an_unknown_aggregate_parameter_lists_the_supported_ones_as_java_prints_a_set():
    message = refused(
        TableSpec.from_dict,
        {
            "name": "db.t",
            "columns": [{"name": "k", "type": "INT"}, {"name": "v", "type": "STRING"}],
            "primary_key": ["k"],
            "options": {
                "table.merge-engine": "aggregation",
                "fields.v.agg": "listagg",
                "fields.v.listagg.sep": ",",
            },
        },
    )
    assert message.endswith(
        "Parameter 'sep' is not supported for aggregation function 'listagg'. Supported parameters: [delimiter]"
    ), message


# --- issue 46: Fluss 0.9.1's words for log tables and key functions; Paimon's option family ---------------------
LOG_TABLE = {"name": "test_db_1.log", "columns": [{"name": "a", "type": "INT"}, {"name": "b", "type": "INT"}]}


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"auto-increment.fields": "b"}, "Auto increment column can only be used in primary-key table."),
        ({"table.merge-engine": "first_row"}, "Merge engine is only supported in primary key table."),
        (
            {"table.delete.behavior": "ignore"},
            "The 'table.delete.behavior' configuration is only supported for primary key tables.",
        ),
        (
            {"aggregation.remove-record-on-delete": "true"},
            "The 'table.delete.behavior' configuration is only supported for primary key tables.",
        ),
        ({}, "a changelake table needs a primary_key (log tables are not supported)"),
        (  # Fluss's Schema checks the auto-increment column before the server validates the options
            {"auto-increment.fields": "b", "table.merge-engine": "first_row"},
            "Auto increment column can only be used in primary-key table.",
        ),
    ],
)
def test_log_tables_are_refused_in_fluss_words_for_what_fluss_refuses_them(options, words):
    with pytest.raises(SpecError) as err:
        TableSpec.from_dict({**LOG_TABLE, "options": options})
    assert str(err.value).endswith(words)


def test_a_function_of_a_table_without_the_aggregation_engine_is_kept_unused_as_fluss_0_9_1():
    t = spec(options={"fields.d.agg": "sum", "fields.d.listagg.delimiter": ";"})  # not even a valid pair
    assert t.merge_engine is None and t.options["fields.d.agg"] == "sum"


def test_paimons_ignore_update_before_drops_update_befores_of_a_retraction_table():
    from changelake.engine.merge import apply_sequential, check_batch_ops

    def retraction_table(**options):
        return TableSpec.from_dict(
            {
                "name": "t.r",
                "columns": [{"name": "k", "type": "INT"}, {"name": "v", "type": "BIGINT"}],
                "primary_key": ["k"],
                "options": {"table.merge-engine": "aggregation", "table.agg.retract": "true",
                            "fields.v.agg": "sum", **options},
            }
        )  # fmt: skip

    records = [("+I", (1, 10)), ("-U", (1, 4)), ("+U", (1, 6)), ("-D", (1, 6))]
    rows: dict = {}
    _, counts = apply_sequential(retraction_table(**{"ignore-update-before": "TRUE"}), rows, records)
    assert rows == {(1,): (1, 10)} and counts.dropped_update_before == 1  # the -D still retracts
    assert (
        check_batch_ops(retraction_table(**{"ignore-update-before": "true"}), {"-U": 3}).dropped_update_before
        == 3
    )
    rows = {}
    apply_sequential(retraction_table(**{"ignore-update-before": "false"}), rows, records)
    assert rows == {(1,): (1, 6)}
    with pytest.raises(SpecError, match="Could not parse value 'maybe' for key 'ignore-update-before'"):
        retraction_table(**{"ignore-update-before": "maybe"})


@pytest.mark.parametrize("name", ["aggregation.remove-record-on-delete", "table.agg.remove-record-on-delete"])
def test_remove_record_on_delete_conflicts_with_ignore_retract_as_paimon_says(name):
    options = {"table.merge-engine": "aggregation", "table.agg.retract": "true", "fields.d.agg": "last_value",
               "fields.d.ignore-retract": "true", name: "true"}  # fmt: skip
    with pytest.raises(SpecError) as err:
        spec(options=options)
    assert str(err.value).endswith(
        f"{name} and fields.d.ignore-retract have conflicting behavior so should not be enabled at the same time."
    )
    spec(options={**options, name: "false"})  # no removal: no conflict
    spec(options={**options, name: "true", "fields.d.ignore-retract": "false"})
