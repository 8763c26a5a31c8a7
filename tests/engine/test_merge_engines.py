"""Merge engines (docs/semantics.md §3, §4): first_row, versioned and aggregation with the 14 functions, and their rules."""

import datetime as dt
import decimal
import math
import re

import pytest
from pyroaring import BitMap, BitMap64

from changelake.engine.merge import apply_sequential
from changelake.errors import SpecError, WriteRefusedError
from changelake.spec import TableSpec

D = decimal.Decimal


def table(columns, options, pk=("k",)):
    return TableSpec.from_dict(
        {
            "name": "t.e",
            "columns": [{"name": "k", "type": "INT"}] + [{"name": n, "type": t} for n, t in columns],
            "primary_key": list(pk),
            "options": options,
        }
    )


def run(spec, records, rows=None):
    rows = {} if rows is None else rows
    log, counts = apply_sequential(spec, rows, records)
    return log, rows, counts


# --- first_row -----------------------------------------------------------------------------------------
def test_first_row_keeps_the_first_and_emits_insert_only():
    spec = table([("v", "STRING")], {"table.merge-engine": "first_row"})
    log, rows, counts = run(spec, [("+I", (1, "a")), ("+U", (1, "b")), ("+I", (2, "c")), ("-D", (1, None))])
    assert log == [("+I", (1, "a")), ("+I", (2, "c"))]
    assert rows == {(1,): (1, "a"), (2,): (2, "c")}
    assert counts.ignored == 2  # the repeat of key 1 and the delete (default: ignore)
    assert spec.delete_behavior == "ignore"


def test_first_row_with_wal_still_emits_insert():
    spec = table([("v", "STRING")], {"table.merge-engine": "FIRST_ROW", "table.changelog.image": "wal"})
    assert run(spec, [("+I", (1, "a")), ("+I", (1, "b"))])[0] == [("+I", (1, "a"))]


@pytest.mark.parametrize("engine", ["first_row", "versioned"])
def test_allow_deletes_are_refused_at_create(engine):
    options = {"table.merge-engine": engine, "table.delete.behavior": "allow"}
    if engine == "versioned":
        options["table.merge-engine.versioned.ver-column"] = "v"
    with pytest.raises(
        SpecError, match=f"Table with '{engine.upper()}' merge engine does not support delete"
    ):
        table([("v", "INT")], options)


def test_disable_refuses_a_batch_with_deletes():
    spec = table([("v", "INT")], {"table.merge-engine": "first_row", "table.delete.behavior": "disable"})
    with pytest.raises(WriteRefusedError, match="disabled"):
        run(spec, [("+I", (1, 1)), ("-D", (1, None))])


# --- versioned -----------------------------------------------------------------------------------------
def versioned(version_type="BIGINT", **extra):
    return table(
        [("ver", version_type), ("v", "STRING")],
        {"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "ver", **extra},
    )


def test_versioned_keeps_newest_tie_replaces_older_is_silent():
    log, rows, counts = run(
        versioned(),
        [("+I", (1, 5, "a")), ("+U", (1, 3, "old")), ("+U", (1, 5, "tie")), ("+U", (1, 9, "new"))],
    )
    assert log == [
        ("+I", (1, 5, "a")),
        ("-U", (1, 5, "a")),
        ("+U", (1, 5, "tie")),
        ("-U", (1, 5, "tie")),
        ("+U", (1, 9, "new")),
    ]
    assert rows == {(1,): (1, 9, "new")} and counts.ignored == 1


@pytest.mark.parametrize(
    "version_type, stored, incoming, replaced",
    [
        ("BIGINT", 5, None, False),
        ("BIGINT", None, 5, True),
        ("BIGINT", None, None, True),
        # Fluss's VersionedRowMerger reads a null INT/BIGINT version as the type's MIN_VALUE: a tie either way
        ("BIGINT", None, -(2**63), True),
        ("BIGINT", -(2**63), None, True),
        ("BIGINT", -(2**63) + 1, None, False),
        ("INT", -(2**31), None, True),
        ("INT", -(2**31) + 1, None, False),
        ("INT", None, -(2**31), True),
        # A null timestamp version is below every timestamp (Fluss's null is Long.MIN_VALUE milliseconds)
        ("TIMESTAMP(6)", dt.datetime(1, 1, 1), None, False),
        ("TIMESTAMP(6)", None, dt.datetime(1, 1, 1), True),
    ],
)
def test_versioned_null_version_is_the_smallest(version_type, stored, incoming, replaced):
    _, rows, _ = run(versioned(version_type), [("+I", (1, stored, "first")), ("+U", (1, incoming, "second"))])
    assert rows[(1,)][2] == ("second" if replaced else "first")


def test_versioned_wal_emits_only_update_after():
    log, _, _ = run(versioned(**{"table.changelog.image": "wal"}), [("+I", (1, 1, "a")), ("+U", (1, 2, "b"))])
    assert log == [("+I", (1, 1, "a")), ("+U", (1, 2, "b"))]


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "'table.merge-engine.versioned.ver-column' must be set for versioned merge engine."),
        (
            {"table.merge-engine.versioned.ver-column": "nope"},
            "The version column 'nope' for versioned merge engine doesn't exist in schema.",
        ),
        (
            {"table.merge-engine.versioned.ver-column": "v"},
            "The version column 'v' for versioned merge engine must be one type of [INT, BIGINT, TIMESTAMP, "
            "TIMESTAMP_LTZ], but got STRING.",
        ),
    ],
)
def test_versioned_option_errors(options, message):
    with pytest.raises(SpecError) as err:
        table([("v", "STRING")], {"table.merge-engine": "versioned", **options})
    assert message in str(err.value)


# --- aggregation ---------------------------------------------------------------------------------------
def agg(col_type, fn, *values, **options):
    """Fold ``values`` into one key's column ``c`` with function ``fn``; return the final value."""
    spec = table([("c", col_type)], {"table.merge-engine": "aggregation", "fields.c.agg": fn, **options})
    _, rows, _ = run(spec, [("+I", (1, v)) for v in values])
    return rows[(1,)][1]


@pytest.mark.parametrize(
    "col_type, fn, values, expected",
    [
        ("INT", "sum", [1, 2, None, 3], 6),
        ("TINYINT", "sum", [126, 1], 127),  # up to the type's bounds, exactly (beyond: refused, below)
        ("SMALLINT", "sum", [-32767, -1], -32768),
        ("BIGINT", "sum", [2**63 - 2, 1], 2**63 - 1),
        ("BIGINT", "product", [2**31, -(2**32)], -(2**63)),
        ("DOUBLE", "product", [0.9, 0.8], 0.7200000000000001),  # the docs' example
        (
            "FLOAT",
            "sum",
            [0.1, 0.2],
            float(__import__("numpy").float32(0.1) + __import__("numpy").float32(0.2)),
        ),
        ("DECIMAL(5,2)", "sum", [D("999.00"), D("1.00")], None),  # beyond the precision: null
        ("DECIMAL(10,2)", "product", [D("1.25"), D("1.25")], D("1.56")),  # HALF_UP to the scale
        ("INT", "sum", [None, None], None),
        ("STRING", "max", ["", "test", "b"], "test"),
        ("STRING", "min", ["é", "z"], "z"),  # UTF-8 bytes: 'z' (0x7a) < 'é' (0xc3 0xa9)
        ("DOUBLE", "min", [0.0, -0.0], -0.0),
        (
            "DATE",
            "max",
            [__import__("datetime").date(2024, 1, 2), __import__("datetime").date(2023, 1, 1)],
            __import__("datetime").date(2024, 1, 2),
        ),
        ("INT", "last_value", [1, None], None),
        ("INT", "last_value_ignore_nulls", [1, None, 2, None], 2),
        ("INT", "first_value", [None, 3, 4], 3),  # docs/semantics.md §12 #1: the code replaces a stored null
        ("INT", "first_value_ignore_nulls", [None, None, 5, 6], 5),
        ("STRING", "listagg", ["a", None, "b", "c"], "a,b,c"),
        ("STRING", "string_agg", ["a", "b"], "a,b"),
        ("BOOLEAN", "bool_and", [True, None, False], False),
        ("BOOLEAN", "bool_or", [False, None, True], True),
        ("BOOLEAN", "bool_or", [None, False], False),
    ],
)
def test_aggregate_functions(col_type, fn, values, expected):
    result = agg(col_type, fn, *values)
    if isinstance(expected, float) and math.copysign(1.0, expected) < 0:
        assert math.copysign(1.0, result) < 0
    assert result == expected


@pytest.mark.parametrize(
    "col_type, fn, values, words",
    [
        ("TINYINT", "sum", [127, 1], "byte overflow: 127 + 1 = 128"),
        ("SMALLINT", "sum", [32767, 2], "short overflow: 32767 + 2 = 32769"),
        ("INT", "sum", [2**31 - 1, 1], "int overflow: 2147483647 + 1"),
        ("BIGINT", "sum", [2**63 - 1, 1], "long overflow: 9223372036854775807 + 1"),
        ("BIGINT", "product", [2**62, 4], "long overflow: 4611686018427387904 * 4"),
        ("TINYINT", "product", [-128, -1], "byte overflow: -128 * -1 = 128"),
    ],
)
def test_integer_overflow_refuses_the_batch_in_paimons_words(col_type, fn, values, words):
    """Paimon 2.0's FieldSumAgg/FieldProductAgg (addExact, multiplyExact): an integer result beyond its type is
    an ArithmeticException, never a wrap (docs/semantics.md §4.2)."""
    with pytest.raises(WriteRefusedError, match=re.escape(f"Column 'c' ({fn}): {words}")):
        agg(col_type, fn, *values)


def test_max_treats_nan_as_greatest():
    assert math.isnan(agg("DOUBLE", "max", 1.0, float("nan"), 2.0))


def test_listagg_delimiter_option_and_seed_aliases():
    assert agg("STRING", "listagg", "a", "b", **{"fields.c.listagg.delimiter": ";"}) == "a;b"
    spec = table(
        [("c", "STRING")],
        {
            "table.merge-engine": "aggregation",
            "table.merge-engine.aggregate.c": "LISTAGG",
            "table.merge-engine.aggregate.c.listagg-delimiter": "|",
        },
    )
    assert run(spec, [("+I", (1, "x")), ("+I", (1, "y"))])[1][(1,)][1] == "x|y"


def test_bitmap_unions_rbm32_and_rbm64():
    a, b = BitMap([10, 20]).serialize(), BitMap([20, 30]).serialize()
    assert BitMap.deserialize(agg("BYTES", "rbm32", a, b)) == BitMap([10, 20, 30])
    a64, b64 = BitMap64([10, 2**40]).serialize(), BitMap64([30]).serialize()
    assert BitMap64.deserialize(agg("BYTES", "rbm64", a64, b64)) == BitMap64([10, 30, 2**40])
    with pytest.raises(WriteRefusedError, match="Unable to se/deserialize roaring bitmap."):
        agg("BYTES", "rbm32", a, b"not a bitmap")


def test_every_later_write_emits_an_update_pair_and_default_function_ignores_nulls():
    spec = table(
        [("m", "INT"), ("note", "STRING")], {"table.merge-engine": "aggregation", "fields.m.agg": "max"}
    )
    log, rows, _ = run(spec, [("+I", (1, 5, "a")), ("+I", (1, 3, None))])
    assert log == [("+I", (1, 5, "a")), ("-U", (1, 5, "a")), ("+U", (1, 5, "a"))]  # max with a smaller input
    assert rows == {(1,): (1, 5, "a")}


def test_aggregation_deletes_ignore_by_default_and_remove_whole_row_with_allow():
    base = {"table.merge-engine": "aggregation", "fields.c.agg": "sum"}
    _, rows, counts = run(table([("c", "INT")], base), [("+I", (1, 1)), ("-D", (1, None))])
    assert rows == {(1,): (1, 1)} and counts.ignored == 1
    log, rows, _ = run(
        table([("c", "INT")], {**base, "table.delete.behavior": "allow"}),
        [("+I", (1, 1)), ("+I", (1, 2)), ("-D", (1, None)), ("+I", (1, 5))],
    )
    assert log[-2:] == [("-D", (1, 3)), ("+I", (1, 5))] and rows == {(1,): (1, 5)}  # no retraction


@pytest.mark.parametrize(
    "columns, options, message",
    [
        (
            [("c", "INT")],
            {"table.merge-engine": "aggregation", "fields.k.agg": "sum"},
            "Cannot set aggregation function for primary key column 'k'. Primary key columns automatically use "
            "'primary-key' aggregation.",
        ),
        (  # Fluss's Schema refuses it whatever the engine, before any option of the table is looked at
            [("c", "INT")],
            {"table.merge-engine": "versioned", "fields.k.agg": "sum", "table.kv.format": "nope"},
            "Cannot set aggregation function for primary key column 'k'. Primary key columns automatically use "
            "'primary-key' aggregation.",
        ),
        (
            [("c", "STRING")],
            {"table.merge-engine": "aggregation", "fields.c.agg": "sum"},
            "Invalid aggregation function for column 'c': Data type for sum column must be part of",
        ),
        (
            [("c", "CHAR(3)")],
            {"table.merge-engine": "aggregation", "fields.c.agg": "listagg"},
            "Data type for listagg column must be part of [STRING] but was 'CHAR(3)'.",
        ),
        (
            [("c", "INT")],
            {"table.merge-engine": "aggregation", "fields.c.agg": "median"},
            "Unknown aggregation function 'median'",
        ),
        (
            [("c", "STRING")],
            {
                "table.merge-engine": "aggregation",
                "fields.c.agg": "listagg",
                "fields.c.listagg.delimiter": "",
            },
            "Parameter 'delimiter' for aggregation function 'listagg' must be a non-empty string",
        ),
        (
            [("c", "STRING")],
            {"table.merge-engine": "aggregation", "fields.c.agg": "listagg", "fields.c.listagg.sep": ";"},
            "Parameter 'sep' is not supported for aggregation function 'listagg'.",
        ),
        (
            [("c", "INT")],
            {"table.merge-engine": "aggregation", "table.changelog.image": "WAL"},
            "Table with 'AGGREGATION' merge engine does not support 'WAL' changelog image mode.",
        ),
    ],
)
def test_aggregation_option_errors(columns, options, message):
    with pytest.raises(SpecError) as err:
        table(columns, options)
    assert message in str(err.value)


def test_function_names_are_case_insensitive_and_dashes_work():
    assert agg("INT", "Last-Value-Ignore-Nulls", 1, None) == 1
