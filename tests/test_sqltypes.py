"""``changelake sql``'s values typed as Flink types them (changelake.sqltypes, docs/sql-writes.md): literal types,
explicit CASTs with Flink's rounding and truncation, the implicit cast to the column and Flink's refusals, over
the column type matrix. Expected values are computed here from the rules' definitions (Java arithmetic,
BigDecimal HALF_UP, Flink's LogicalTypeCasts table transcribed below), not by changelake's functions."""

from __future__ import annotations

import datetime as dt
import decimal
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changelake import sqltypes, sqlwrite
from changelake.errors import WriteRefusedError
from changelake.spec import TableSpec

D = decimal.Decimal


def value_of(text: str) -> sqltypes.Value:
    (tree,) = sqlwrite.parse(f"INSERT INTO s.t VALUES ({text})")
    return sqltypes.literal(tree.expression.expressions[0].expressions[0])


def written(column_type: str, text: str):
    """What ``INSERT INTO s.t VALUES (1, <text>)`` writes into a column of that type (the JSON value)."""
    spec = TableSpec.from_dict(
        {
            "name": "s.t",
            "columns": [{"name": "k", "type": "INT"}, {"name": "c", "type": column_type}],
            "primary_key": ["k"],
        }
    )
    (tree,) = sqlwrite.parse(f"INSERT INTO s.t VALUES (1, {text})")
    plan = sqlwrite.plan(tree, spec, lambda s, k: None, lambda s: None, lambda: ["s.t"], lambda n: spec)
    return plan.records[0]["data"]["c"]


def stored(column_type: str, text: str):
    from changelake.types import parse_type

    value = written(column_type, text)
    return None if value is None else parse_type(column_type).decode_json(value)


# --- literal types ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "type_text"),
    [
        ("7", "INT NOT NULL"),
        ("-7", "INT NOT NULL"),
        ("2147483648", "BIGINT NOT NULL"),
        ("9223372036854775808", "DECIMAL(19, 0) NOT NULL"),
        ("12.345", "DECIMAL(5, 3) NOT NULL"),
        ("0.05", "DECIMAL(2, 2) NOT NULL"),
        ("1e3", "DOUBLE NOT NULL"),
        ("'abc'", "CHAR(3) NOT NULL"),
        ("X'0a0b'", "BINARY(2) NOT NULL"),
        ("TRUE", "BOOLEAN NOT NULL"),
        ("NULL", "NULL"),
        ("DATE '2024-02-29'", "DATE NOT NULL"),
        ("TIME '12:00:00.5'", "TIME(1) NOT NULL"),
        ("TIMESTAMP '2024-01-01 00:00:05.123456'", "TIMESTAMP(6) NOT NULL"),
        ("TIMESTAMP '2024-01-01 00:00:05'", "TIMESTAMP(0) NOT NULL"),
        ("TIMESTAMP_LTZ '2024-01-01 00:00:05.12'", "TIMESTAMP_LTZ(2) NOT NULL"),
        ("CAST('1' AS DECIMAL)", "DECIMAL(10, 0) NOT NULL"),
        ("CAST('1' AS STRING)", "STRING NOT NULL"),
        ("CAST('1' AS VARCHAR)", "VARCHAR(1) NOT NULL"),
        ("CAST('1' AS BYTES)", "BYTES NOT NULL"),
        ("CAST('2024-01-01' AS TIMESTAMP)", "TIMESTAMP(6) NOT NULL"),
        ("CAST('1:2:3' AS TIME)", "TIME(0) NOT NULL"),
        ("CAST(NULL AS INT)", "INT"),
    ],
)
def test_literals_get_flinks_types(text, type_text):
    assert str(value_of(text).type) == type_text


def test_the_issues_examples():
    assert written("DECIMAL(10,2)", "CAST('12.345' AS DECIMAL(10,1))") == "12.30"
    assert written("TIMESTAMP(6)", "CAST('2024-01-01 00:00:05.123456' AS TIMESTAMP(3))").endswith(
        "05.123000000"
    )
    assert written("BIGINT", "CAST('7' AS BIGINT)") == 7
    with pytest.raises(WriteRefusedError, match=r"For input string: 'abc'\. Invalid character found\."):
        written("STRING", "CAST('abc' AS INT)")
    with pytest.raises(WriteRefusedError, match=r"Incompatible types for sink column 'c' at position 1"):
        written("TIMESTAMP(3)", "'2024-01-01 00:00:00'")
    with pytest.raises(WriteRefusedError, match=r"Incompatible types for sink column 'c' at position 1"):
        written("STRING", "CAST(7 AS INT)")  # INT does not cast implicitly to STRING


def test_flinks_refusal_names_both_schemas():
    with pytest.raises(WriteRefusedError) as e:
        written("TINYINT", "1")
    assert str(e.value) == (
        "Column types of query result and sink for 's.t' do not match.\n"
        "Cause: Incompatible types for sink column 'c' at position 1.\n\n"
        "Query schema: [EXPR$0: INT NOT NULL, EXPR$1: INT NOT NULL]\n"
        "Sink schema:  [k: INT, c: TINYINT]"
    )
    assert written("TINYINT", "CAST(1 AS TINYINT)") == 1


# --- implicit casts: Flink's LogicalTypeCasts, transcribed ----------------------------------------------------
# castTo(target).implicitFrom(...): the roots each column type takes without a CAST (and NULL, and itself).
FLINK_IMPLICIT = {
    "CHAR": "CHAR",
    "VARCHAR": "CHAR VARCHAR",
    "BOOLEAN": "BOOLEAN",
    "BINARY": "BINARY",
    "VARBINARY": "BINARY VARBINARY",
    "DECIMAL": "TINYINT SMALLINT INTEGER BIGINT FLOAT DOUBLE DECIMAL",
    "TINYINT": "TINYINT",
    "SMALLINT": "TINYINT SMALLINT",
    "INTEGER": "TINYINT SMALLINT INTEGER",
    "BIGINT": "TINYINT SMALLINT INTEGER BIGINT",
    "FLOAT": "TINYINT SMALLINT INTEGER BIGINT FLOAT DECIMAL",
    "DOUBLE": "TINYINT SMALLINT INTEGER BIGINT FLOAT DOUBLE DECIMAL",
    "DATE": "DATE TIMESTAMP",
    "TIME": "TIME TIMESTAMP",
    "TIMESTAMP": "TIMESTAMP TIMESTAMP_LTZ",
    "TIMESTAMP_LTZ": "TIMESTAMP_LTZ TIMESTAMP",
}
# One literal of each root (as CAST where Flink has no literal of that type).
LITERALS = {
    "CHAR": "'x'",
    "VARCHAR": "CAST('x' AS STRING)",
    "BOOLEAN": "TRUE",
    "BINARY": "X'01'",
    "VARBINARY": "CAST(X'01' AS BYTES)",
    "DECIMAL": "1.5",
    "TINYINT": "CAST(1 AS TINYINT)",
    "SMALLINT": "CAST(1 AS SMALLINT)",
    "INTEGER": "1",
    "BIGINT": "2147483648",
    "FLOAT": "CAST(1 AS FLOAT)",
    "DOUBLE": "1e0",
    "DATE": "DATE '2024-01-01'",
    "TIME": "TIME '01:02:03'",
    "TIMESTAMP": "TIMESTAMP '2024-01-01 01:02:03.123456789'",
    "TIMESTAMP_LTZ": "TIMESTAMP_LTZ '2024-01-01 01:02:03.1'",
}
COLUMN_TYPES = {
    "CHAR": "CHAR(5)", "VARCHAR": "STRING", "BOOLEAN": "BOOLEAN", "BINARY": "BINARY(4)", "VARBINARY": "BYTES",
    "DECIMAL": "DECIMAL(20,4)", "TINYINT": "TINYINT", "SMALLINT": "SMALLINT", "INTEGER": "INT", "BIGINT": "BIGINT",
    "FLOAT": "FLOAT", "DOUBLE": "DOUBLE", "DATE": "DATE", "TIME": "TIME(3)", "TIMESTAMP": "TIMESTAMP(3)",
    "TIMESTAMP_LTZ": "TIMESTAMP_LTZ(6)",
}  # fmt: skip


@pytest.mark.parametrize("column", list(COLUMN_TYPES))
@pytest.mark.parametrize("source", list(LITERALS))
def test_implicit_casts_over_the_type_matrix(column, source):
    """Every literal root into every column type: written where Flink casts implicitly, refused in Flink's
    words elsewhere; a NULL into any column."""
    allowed = source in FLINK_IMPLICIT[column].split()
    if allowed:
        value = stored(COLUMN_TYPES[column], LITERALS[source])
        assert value is not None
    else:
        with pytest.raises(WriteRefusedError, match="Incompatible types for sink column 'c'"):
            written(COLUMN_TYPES[column], LITERALS[source])
    assert written(COLUMN_TYPES[column], "NULL") is None


def test_implicit_conversions_cut_as_flink_casts():
    assert stored("TIMESTAMP(3)", "TIMESTAMP '2024-01-01 01:02:03.123956789'") == dt.datetime(
        2024, 1, 1, 1, 2, 3, 123000
    )
    assert stored("TIMESTAMP(0)", "TIMESTAMP '1969-12-31 23:59:59.5'") == dt.datetime(
        1970, 1, 1
    )  # toward 1970
    assert stored("DATE", "TIMESTAMP '2024-01-01 23:59:59.9'") == dt.date(2024, 1, 1)
    assert stored("TIME(1)", "TIMESTAMP '2024-01-01 01:02:03.987'") == "01:02:03.900000"
    assert stored("DECIMAL(4,1)", "1.25") == D("1.3")  # HALF_UP
    assert stored("DECIMAL(4,1)", "-1.25") == D("-1.3")
    assert stored("DECIMAL(3,1)", "123.4") is None  # Flink's cast overflows to NULL
    assert stored("DECIMAL(5,2)", "1e0") == D("1.00")
    assert stored("FLOAT", "16777217") == 16777216.0  # an INT in float32
    assert stored("TIMESTAMP_LTZ(3)", "TIMESTAMP '2024-01-01 01:02:03.45678'") == dt.datetime(
        2024, 1, 1, 1, 2, 3, 456000, tzinfo=dt.UTC
    )


# --- explicit CASTs ------------------------------------------------------------------------------------------------
def java_narrow(x: int, bits: int) -> int:
    return (x + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))


@settings(max_examples=200, deadline=None)
@given(x=st.integers(-(2**63), 2**63 - 1))
def test_integer_casts_narrow_as_java_does(x):
    for target, bits in (("TINYINT", 8), ("SMALLINT", 16), ("INT", 32), ("BIGINT", 64)):
        assert value_of(f"CAST(CAST({x} AS BIGINT) AS {target})").value == java_narrow(x, bits)


def half_up(text: str, scale: int) -> D:
    return D(text).quantize(
        D(1).scaleb(-scale), rounding=decimal.ROUND_HALF_UP, context=decimal.Context(prec=100)
    )


@settings(max_examples=300, deadline=None)
@given(
    unscaled=st.integers(-(10**20), 10**20),
    exponent=st.integers(-8, 4),
    precision=st.integers(1, 20),
    scale=st.integers(0, 8),
)
def test_string_to_decimal_rounds_half_up_or_refuses_overflow(unscaled, exponent, precision, scale):
    scale = min(scale, precision)
    text = str(D(unscaled).scaleb(exponent))
    expected = half_up(text, scale)
    target = f"DECIMAL({precision},{scale})"
    if len(expected.as_tuple().digits) > precision and expected != 0:
        with pytest.raises(WriteRefusedError, match="Overflow"):
            value_of(f"CAST('{text}' AS {target})")
    else:
        assert value_of(f"CAST('{text}' AS {target})").value == expected
        assert (
            value_of(f"CAST({text if 'E' not in text else repr(float(text))} AS {target})").type.precision
            == precision
        )


NANOS_PER_DAY = 86_400 * 10**9


@settings(max_examples=300, deadline=None)
@given(
    when=st.datetimes(dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31)),
    nanos=st.integers(0, 999),
    digits=st.integers(0, 9),
    precision=st.integers(0, 9),
    ltz=st.booleans(),
)
def test_string_to_timestamp_floors_the_fraction_to_the_precision(when, nanos, digits, precision, ltz):
    """DateTimeUtils.parseTimestampData(str, p): the written fraction floored to p digits (on the local time)."""
    fraction = f"{when.microsecond:06d}{nanos:03d}"[:digits]
    text = when.strftime("%Y-%m-%d %H:%M:%S").rjust(19, "0") + (f".{fraction}" if digits else "")
    target = f"TIMESTAMP_LTZ({precision})" if ltz else f"TIMESTAMP({precision})"
    kept = fraction.ljust(9, "0")[:precision].ljust(9, "0")
    epoch = when.replace(microsecond=0) - dt.datetime(1970, 1, 1)
    expected = (epoch.days * 86_400 + epoch.seconds) * 10**9 + int(kept)
    got = value_of(f"CAST('{text}' AS {target})")
    assert got.value == expected and str(got.type) == f"{target.split('(')[0]}({precision}) NOT NULL"


@settings(max_examples=200, deadline=None)
@given(text=st.from_regex(r" ?[+-]?[0-9]{0,12}(\.[0-9]{0,3})? ?", fullmatch=True))
def test_string_to_integer_truncates_a_fraction_and_refuses_the_rest(text):
    body = text.strip(" ")
    number = body.split(".")[0]
    if body in (
        "",
        "+",
        "-",
    ):  # BinaryStringDataUtil.toInt: "Input is empty." / "only positive or negative symbol"
        with pytest.raises(WriteRefusedError, match="For input string"):
            value_of(f"CAST('{text}' AS INT)")
        return
    value = int(number) if number.lstrip("+-") else 0  # "." and "-.5" are 0, as Flink's parser reads them
    if not -(2**31) <= value < 2**31:
        with pytest.raises(WriteRefusedError, match="Overflow"):
            value_of(f"CAST('{text}' AS INT)")
    else:
        assert value_of(f"CAST('{text}' AS INT)").value == value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("CAST(1.9 AS INT)", 1),
        ("CAST(-1.9 AS INT)", -1),
        ("CAST(1e10 AS INT)", 2**31 - 1),  # Java's (int) of a double saturates
        ("CAST(CAST('NaN' AS DOUBLE) AS BIGINT)", 0),
        ("CAST(300 AS TINYINT)", 44),  # Java's (byte): wraps
        ("CAST(TRUE AS INT)", 1),
        ("CAST(0 AS BOOLEAN)", False),
        ("CAST(' yes ' AS BOOLEAN)", True),
        ("CAST(12.50 AS STRING)", "12.50"),
        ("CAST(1e7 AS STRING)", "1.0E7"),
        ("CAST(0.5e0 AS STRING)", "0.5"),
        ("CAST(TRUE AS STRING)", "TRUE"),
        ("CAST(TIMESTAMP '2024-01-01 00:00:00.100' AS STRING)", "2024-01-01 00:00:00.100"),
        ("CAST(DATE '2024-01-01' AS TIMESTAMP(3))", 1_704_067_200 * 10**9),
        ("CAST('abcdef' AS VARCHAR(3))", "abc"),
        ("CAST('ab' AS CHAR(4))", "ab  "),
        ("CAST('ab' AS BINARY(3))", b"ab\x00"),
        (
            "CAST('12:34:56.7896' AS TIME(3))",
            (12 * 3600 + 34 * 60 + 56) * 10**6 + 790_000,
        ),  # parseTime rounds
        ("TRY_CAST('abc' AS INT)", None),
        ("CAST(1.5 AS DECIMAL(1,0))", D("2")),
        ("CAST(12.5 AS DECIMAL(1,0))", None),  # overflow: NULL
    ],
)
def test_explicit_casts(text, expected):
    got = value_of(text).value
    if isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            "CAST(DATE '2024-01-01' AS INT)",
            "Cast function cannot convert value of type DATE NOT NULL to type INT",
        ),
        ("CAST(X'01' AS BOOLEAN)", "Cast function cannot convert value of type BINARY"),
        ("CAST('2024-01-01T00:00:00' AS TIMESTAMP)", "could not be parsed"),
        ("CAST('x' AS DATE)", "For input string: 'x'"),
        ("CAST('maybe' AS BOOLEAN)", "Cannot parse 'maybe' as BOOLEAN"),
        ("CAST('9.5' AS DECIMAL(1,0))", "Overflow"),  # HALF_UP gives 10: two digits
        ("TIMESTAMP '2024-01-01T00:00:00'", "Illegal TIMESTAMP literal"),
        ("CAST('1' AS ARRAY<INT>)", "casts to the types of table columns"),
    ],
)
def test_casts_flink_refuses(text, words):
    with pytest.raises(WriteRefusedError, match=words):
        value_of(text)


def test_where_compares_in_the_wider_type():
    """A key literal of a comparable type matches a stored key only if the column's type holds it exactly."""
    spec = TableSpec.from_dict(
        {"name": "s.t", "columns": [{"name": "k", "type": "TIMESTAMP(3)"}, {"name": "v", "type": "INT"}],
         "primary_key": ["k"]}
    )  # fmt: skip

    def plan(text):
        (tree,) = sqlwrite.parse(text)
        stored = lambda s, k: {**k, "v": 1}  # noqa: E731 -- every key is stored
        return sqlwrite.plan(tree, spec, stored, lambda s: None, lambda: ["s.t"], lambda n: spec)

    exact = plan("DELETE FROM s.t WHERE k = TIMESTAMP '2024-01-01 00:00:00.123'")
    assert exact.records == [{"op": "-D", "data": {"k": "2024-01-01T00:00:00.123000000"}}]
    finer = plan("DELETE FROM s.t WHERE k = TIMESTAMP '2024-01-01 00:00:00.1234'")
    assert finer.records == [] and "can have the key" in finer.note
    with pytest.raises(
        WriteRefusedError, match=r"Cannot apply '=' to arguments of type '<TIMESTAMP> = <INT NOT NULL>'"
    ):
        plan("DELETE FROM s.t WHERE k = 1")
