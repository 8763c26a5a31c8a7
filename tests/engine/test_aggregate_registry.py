"""The aggregate-function registry (``changelake.engine.aggregates``) is the one place the functions live: spec
validation accepts and refuses what it says, with Fluss's messages; each entry's columnar merge equals its
one-record merge on every column type it accepts; the columnar differential tests exercise exactly those
types; the merge engines and integer ranges have one source too (docs/semantics.md §4.2).

Pure Python (no Spark), a few seconds: the unit layer's check of a changed function. ``tests/engine/test_columnar.py``
then tests both merges on random tables and batches (slow).
"""

from __future__ import annotations

import datetime as dt
import decimal

import numpy as np
import pytest
from pyroaring import BitMap, BitMap64

from changelake.aggregate_signatures import DEFAULT_FUNCTION
from changelake.engine import merge
from changelake.engine.aggregates import AGGREGATE_FUNCTIONS, of_column, scalar_fold
from changelake.errors import SpecError, WriteRefusedError
from changelake.spec import MERGE_ENGINES, Column, TableSpec, fluss_type_text
from changelake.types import INT_RANGES, parse_type
from tests.engine.columnar_strategies import AGG_ALL, Case
from tests.engine.test_columnar import check

#: Fluss's aggregate functions (docs/semantics.md §4.2).
FLUSS_FUNCTIONS = (
    "sum",
    "product",
    "max",
    "min",
    "last_value",
    "last_value_ignore_nulls",
    "first_value",
    "first_value_ignore_nulls",
    "listagg",
    "string_agg",
    "bool_and",
    "bool_or",
    "rbm32",
    "rbm64",
)
#: One column type of every kind a spec can declare.
EVERY_TYPE = (
    "BOOLEAN",
    "TINYINT",
    "SMALLINT",
    "INT",
    "BIGINT",
    "FLOAT",
    "DOUBLE",
    "DECIMAL(5,2)",
    "DECIMAL(38,10)",
    "CHAR(3)",
    "STRING",
    "BINARY(4)",
    "BYTES",
    "DATE",
    "TIME",
    "TIMESTAMP(3)",
    "TIMESTAMP(9)",
    "TIMESTAMP_LTZ(6)",
)
#: The type names the columnar differential tests (``tests/engine/columnar_strategies.py``) draw for each function.
EXERCISED = {fn: {parse_type(t).name for t in types} for fn, types in AGG_ALL if fn is not None}


def aggregation_spec(column_type: str, options: dict[str, str]) -> TableSpec:
    return TableSpec.from_dict(
        {
            "name": "t.agg",
            "columns": [{"name": "k", "type": "INT"}, {"name": "c", "type": column_type}],
            "primary_key": ["k"],
            "options": {"table.merge-engine": "aggregation", **options},
        }
    )


def test_the_registry_holds_flusss_fourteen_functions():
    assert sorted(AGGREGATE_FUNCTIONS) == sorted(FLUSS_FUNCTIONS)
    assert all(name == function.name for name, function in AGGREGATE_FUNCTIONS.items())
    assert DEFAULT_FUNCTION == "last_value_ignore_nulls" and DEFAULT_FUNCTION in AGGREGATE_FUNCTIONS


def test_the_differential_tests_exercise_every_function_on_exactly_the_types_it_accepts():
    """A function added to the registry, or a type it starts to accept, must reach the columnar tests."""
    assert set(EXERCISED) == set(AGGREGATE_FUNCTIONS)
    every = {parse_type(t).name for t in EVERY_TYPE}
    for name, function in AGGREGATE_FUNCTIONS.items():
        accepted = {t for t in every if function.accepts(parse_type(t))}
        assert EXERCISED[name] == accepted, name


@pytest.mark.parametrize("name", FLUSS_FUNCTIONS)
@pytest.mark.parametrize("column_type", EVERY_TYPE)
def test_spec_validation_accepts_exactly_the_registrys_types(name, column_type):
    function = AGGREGATE_FUNCTIONS[name]
    declared = name.upper().replace("_", "-")  # names are read case- and dash-insensitively
    if function.accepts(parse_type(column_type)):
        spec = aggregation_spec(column_type, {"fields.c.agg": declared})
        assert spec.agg_function("c") == name
        assert callable(scalar_fold(spec, "c"))
    else:
        roots = {
            "INT": "INTEGER",
            "TIME": "TIME_WITHOUT_TIME_ZONE",
            "TIMESTAMP": "TIMESTAMP_WITHOUT_TIME_ZONE",
        }
        roots["TIMESTAMP_LTZ"] = "TIMESTAMP_WITH_LOCAL_TIME_ZONE"  # Fluss's DataTypeRoot names, Java's list
        shown = fluss_type_text(Column("c", parse_type(column_type)), ())
        message = (
            f"Invalid aggregation function for column 'c': Data type for {name} column must be part of "
            f"[{', '.join(roots.get(t, t) for t in function.types)}] but was '{shown}'."
        )
        with pytest.raises(SpecError) as err:
            aggregation_spec(column_type, {"fields.c.agg": declared})
        assert message in str(err.value)


def test_an_unknown_function_lists_the_registry():
    with pytest.raises(SpecError) as err:
        aggregation_spec("INT", {"fields.c.agg": "median"})
    assert f"supported: {sorted(FLUSS_FUNCTIONS)}" in str(err.value)


@pytest.mark.parametrize("name", FLUSS_FUNCTIONS)
def test_parameters_are_the_registrys(name):
    """A declared parameter reaches the merge; one the function has not is refused with Fluss's message."""
    function = AGGREGATE_FUNCTIONS[name]
    column_type = next(t for t in EVERY_TYPE if function.accepts(parse_type(t)))
    options = {"fields.c.agg": name, f"fields.c.{name}.delimiter": "|"}
    if "delimiter" in function.parameters:
        spec = aggregation_spec(column_type, options)
        assert of_column(spec, "c") == (function, {"delimiter": "|"})
        assert of_column(aggregation_spec(column_type, {"fields.c.agg": name}), "c")[1] == {"delimiter": ","}
    else:
        with pytest.raises(SpecError) as err:
            aggregation_spec(column_type, options)
        message = f"Parameter 'delimiter' is not supported for aggregation function '{name}'. Supported parameters: none"
        assert message in str(err.value)


def test_every_merge_engine_has_its_merger():
    assert set(merge.MERGERS) == {None, *MERGE_ENGINES}
    assert all(issubclass(cls, merge.RowMerger) for cls in merge.MERGERS.values())
    refuse_partial = {engine for engine, cls in merge.MERGERS.items() if not cls.partial_update}
    assert refuse_partial == {"first_row", "versioned"}  # docs/semantics.md §6


@pytest.mark.parametrize("name", list(INT_RANGES))
def test_integer_ranges_are_javas_and_sums_refuse_to_leave_them(name):
    """One range per integer type: Java's (numpy's fixed-width integers), checked on input and kept by the
    aggregate functions, which refuse a result beyond it (Paimon's exact arithmetic) instead of wrapping."""
    lo, hi = INT_RANGES[name]
    java = np.iinfo({"TINYINT": np.int8, "SMALLINT": np.int16, "INT": np.int32, "BIGINT": np.int64}[name])
    assert (lo, hi) == (int(java.min), int(java.max))
    column_type = parse_type(name)
    assert column_type.check_integer(hi) == hi
    with pytest.raises(ValueError, match="out of range"):
        column_type.check_integer(hi + 1)
    total = scalar_fold(aggregation_spec(name, {"fields.c.agg": "sum"}), "c")
    product = scalar_fold(aggregation_spec(name, {"fields.c.agg": "product"}), "c")
    assert total(hi - 1, 1) == hi and total(lo + 1, -1) == lo and product(lo, 1) == lo
    for fold, a, b in ((total, hi, 1), (total, lo, -1), (product, lo, -1)):
        with pytest.raises(WriteRefusedError, match="overflow"):
            fold(a, b)


# --- both merges of every entry, over every column type it accepts ------------------------------------------
#: Column types of every kind, and three non-null values of each (integer limits, so sums and products wrap).
TYPE_SAMPLES: dict[str, tuple] = {
    "BOOLEAN": (True, False, True),
    "TINYINT": (127, 1, -128),
    "SMALLINT": (32767, 2, -32768),
    "INT": (2**31 - 1, 1, -(2**31)),
    "BIGINT": (2**63 - 1, 3, -(2**63)),
    "FLOAT": (0.1, 0.2, -0.0),
    "DOUBLE": (0.9, 0.8, float("nan")),
    "DECIMAL(5,2)": (decimal.Decimal("999.00"), decimal.Decimal("1.25"), decimal.Decimal("-0.05")),
    "DECIMAL(18,4)": (
        decimal.Decimal("99999999999999.9999"),
        decimal.Decimal("0.0001"),
        decimal.Decimal("-1.5"),
    ),
    "DECIMAL(38,10)": (
        decimal.Decimal("9" * 28 + ".0"),
        decimal.Decimal("1.0000000005"),
        decimal.Decimal("-2"),
    ),
    "CHAR(3)": ("é", "z", ""),
    "STRING": ("é", "z", ""),
    "BINARY(4)": (b"\x00", b"\xff\xff", b""),
    "BYTES": (BitMap([1, 2]).serialize(), BitMap([2**31]).serialize(), BitMap().serialize()),
    "DATE": (dt.date(2024, 2, 29), dt.date(1, 1, 1), dt.date(1970, 1, 1)),
    "TIME": ("23:59:59.999999", "00:00:00.000000", "12:00:00.000001"),
    "TIMESTAMP(3)": (dt.datetime(2024, 1, 1, 0, 0, 0, 1000), dt.datetime(1, 1, 1), dt.datetime(1970, 1, 1)),
    "TIMESTAMP(9)": (2**63 - 1, -(2**63), 1),  # stored as nanoseconds since 1970 in a long
    "TIMESTAMP_LTZ(6)": (
        dt.datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=dt.UTC),
        dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
        dt.datetime(9999, 12, 31, tzinfo=dt.UTC),
    ),
}
ACCEPTED = [
    (name, type_text)
    for name, function in AGGREGATE_FUNCTIONS.items()
    for type_text in TYPE_SAMPLES
    if function.accepts(parse_type(type_text))
]


def registry_case(name: str, type_text: str) -> Case:
    """Three keys folded up to four times each (one stored row, nulls between values), through column ``c``."""
    a, b, c = TYPE_SAMPLES[type_text]
    if name == "rbm64":
        a, b, c = (BitMap64(v).serialize() for v in ([1, 2**40], [2**40 + 1], []))
    options = {"table.merge-engine": "aggregation", "table.delete.behavior": "allow", "fields.c.agg": name}
    if name == "listagg":
        options["fields.c.listagg.delimiter"] = "; "  # a declared parameter; string_agg keeps the default
    spec = {
        "name": "t.registry",
        "columns": [{"name": "k", "type": "INT"}, {"name": "c", "type": type_text}],
        "primary_key": ["k"],
        "options": options,
    }
    keys = [(0, b), (1, a), (1, None), (1, b), (0, None), (1, c), (2, None), (2, c), (0, c), (1, a)]
    return Case(spec, stored=[(0, a)], records=[(seq, "+I", row) for seq, row in enumerate(keys, 1)])


@pytest.mark.parametrize("name, type_text", ACCEPTED)
def test_every_registered_function_over_every_type_it_accepts(name, type_text):
    """Each entry of the aggregate registry: its columnar merge (array, pick or scalar per value) equals its
    one-record merge on every column type it accepts, with the function's parameters."""
    check(registry_case(name, type_text))
