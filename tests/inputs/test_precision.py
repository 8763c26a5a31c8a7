"""Declared precision on every input path (docs/semantics.md §15): a value enters a TIMESTAMP(p),
TIMESTAMP_LTZ(p) or TIME(p) column as Flink's cast to that type leaves it, and a DECIMAL(p,s) one rounded HALF_UP
to its scale -- whatever format carried it (changelog JSON, Canal/Maxwell text, Debezium epochs, Parquet
timestamps of every unit or text, Avro through the column-wise Kafka path).

The expected values come from ``flink_truncate`` below, a line-by-line transcription of Flink's
``DateTimeUtils.truncate(TimestampData, int)`` over a ``TimestampData`` (epoch milliseconds plus a
nano-of-millisecond), not from changelake's own functions.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changelake.inputs.readers import read_batch
from changelake.spec import TableSpec
from changelake.types import parse_type, truncate_nanos, truncate_ticks, truncate_time_micros

EPOCH = dt.datetime(1970, 1, 1)
NANOS_MIN, NANOS_MAX = -(2**63), 2**63 - 1
# 0001-01-01 and 9999-12-31 23:59:59.999999999 in nanoseconds since the epoch (Python ints, any size).
YEAR_1 = -62_135_596_800 * 10**9
YEAR_9999 = 253_402_300_800 * 10**9 - 1


def java_div(a: int, b: int) -> int:
    """Java's integer division: truncates toward zero."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def flink_truncate(nanos: int, precision: int) -> int:
    """Flink's ``DateTimeUtils.truncate(TimestampData ts, int precision)``, transcribed::

    String fraction = Integer.toString(ts.toLocalDateTime().getNano());
    if (fraction.length() <= precision) return ts;
    if (precision <= 3) return TimestampData.fromEpochMillis(zeroLastDigits(ts.getMillisecond(), 3 - precision));
    return TimestampData.fromEpochMillis(ts.getMillisecond(),
                                         (int) zeroLastDigits(ts.getNanoOfMillisecond(), 9 - precision));
    // zeroLastDigits(l, n) = (l / 10^n) * 10^n, Java's division
    """
    millisecond, nano_of_millisecond = divmod(nanos, 1_000_000)  # TimestampData: floor millis, 0..999999
    nano = (millisecond % 1000) * 1_000_000 + nano_of_millisecond  # LocalDateTime's nano-of-second
    if len(str(nano)) <= precision:
        return nanos
    if precision <= 3:
        n = 10 ** (3 - precision)
        return java_div(millisecond, n) * n * 1_000_000
    n = 10 ** (9 - precision)
    return millisecond * 1_000_000 + java_div(nano_of_millisecond, n) * n


def stored(type_text: str, nanos: int):
    """The storage value of an instant already cut: nanoseconds (p 7..9) or a datetime of its microseconds."""
    t = parse_type(type_text)
    if t.is_nanos:
        return nanos
    stamp = EPOCH + dt.timedelta(microseconds=nanos // 1000)
    return stamp.replace(tzinfo=dt.UTC) if t.name == "TIMESTAMP_LTZ" else stamp


def iso(nanos: int, zone: str = "") -> str:
    seconds, fraction = divmod(nanos, 10**9)
    return f"{(EPOCH + dt.timedelta(seconds=seconds)).isoformat()}.{fraction:09d}{zone}"


# Instants: around the epoch (Java's division differs from a floor there), at every digit position, at the ends.
EDGE_NANOS = [
    0, 1, -1, 999_999_999, -999_999_999, 123_456_789, -123_456_789, 500_000_000, -500_000_000,
    1_000, 12_345, 99_999, 1_767_268_805_123_456_789, -1_500_000_000, -1_000_000, 86_399_999_999_999,
    NANOS_MIN, NANOS_MAX, YEAR_1, YEAR_1 + 999_999_999, YEAR_9999,
]  # fmt: skip
instants = st.one_of(
    st.sampled_from(EDGE_NANOS), st.integers(YEAR_1, YEAR_9999), st.integers(-(10**10), 10**10)
)
precisions = st.integers(0, 9)


# --- the rule itself ---------------------------------------------------------------------------------------
@settings(max_examples=500, deadline=None)
@given(nanos=instants, precision=precisions)
def test_truncation_is_flinks(nanos, precision):
    assert truncate_nanos(nanos, precision) == flink_truncate(nanos, precision)


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(
        st.integers(NANOS_MIN, NANOS_MAX) | st.sampled_from(EDGE_NANOS[:-4]), min_size=1, max_size=20
    ),
    unit=st.sampled_from(["s", "ms", "us", "ns"]),
    precision=precisions,
)
def test_the_columnar_cut_equals_the_one_value_cut(values, unit, precision):
    """Arrow paths cut whole arrays in the array's unit: the same instant as the value-by-value rule, and a value
    that would leave int64 is flagged, never wrapped."""
    per = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}[unit]
    ticks = np.array([v // per for v in values], np.int64)
    digits = {"s": 0, "ms": 3, "us": 6, "ns": 9}[unit]
    cut, underflow = truncate_ticks(ticks, digits, precision)
    for tick, out, flagged in zip(ticks.tolist(), cut.tolist(), underflow.tolist(), strict=True):
        expected = flink_truncate(tick * per, precision)
        if expected < NANOS_MIN * (1 if unit == "ns" else per):
            assert flagged
        else:
            assert not flagged and out * per == expected


def test_named_cases():
    """Examples to read: truncation, not rounding; p <= 3 goes toward 1970 before it (Java's division of the
    epoch milliseconds); a nano-of-second below 10^p is kept whole (Flink's shortcut)."""
    cases = [
        ("2024-01-01T00:00:00.900", 0, "2024-01-01T00:00:00"),
        ("2024-01-01T00:00:05.123456", 3, "2024-01-01T00:00:05.123"),
        ("2024-01-01T00:00:05.123999", 3, "2024-01-01T00:00:05.123"),
        ("1969-12-31T23:59:59.500", 0, "1970-01-01T00:00:00"),
        ("1969-12-31T23:59:58.999", 1, "1969-12-31T23:59:59"),
        ("1969-12-31T23:59:59.999999999", 7, "1969-12-31T23:59:59.9999999"),
        ("2024-01-01T00:00:00.000012345", 5, "2024-01-01T00:00:00.000012345"),  # shortcut: 12345 < 10^5
    ]
    for text, precision, expected in cases:
        nanos = int(np.datetime64(text, "ns").astype(np.int64))
        assert truncate_nanos(nanos, precision) == int(np.datetime64(expected, "ns").astype(np.int64)), text


def test_time_keeps_at_most_milliseconds_and_cuts_to_its_precision():
    micros = (10 * 3600 + 1 * 60 + 2) * 1_000_000 + 987_654
    assert [truncate_time_micros(micros, p) for p in (0, 1, 2, 3, 6, 9)] == [
        micros - 987_654, micros - 87_654, micros - 7_654, micros - 654, micros - 654, micros - 654,
    ]  # fmt: skip
    assert parse_type("TIME").decode_json("10:01:02.987654") == "10:01:02.000000"  # TIME is TIME(0)
    assert parse_type("TIME(2)").decode_json("10:01:02.987654") == "10:01:02.980000"
    assert parse_type("TIME(9)").decode_json("10:01:02.987654321") == "10:01:02.987000"
    assert str(parse_type("TIME")) == "TIME(0)" and str(parse_type("time(3)")) == "TIME(3)"


def test_decimal_rounds_half_up_to_the_scale():
    t = parse_type("DECIMAL(10,2)")
    assert [t.decode_json(v) for v in ("12.345", "-12.345", "12.344", 12.345, "1e-3")] == [
        decimal.Decimal("12.35"), decimal.Decimal("-12.35"), decimal.Decimal("12.34"),
        decimal.Decimal("12.35"), decimal.Decimal("0.00"),
    ]  # fmt: skip


# --- every input path --------------------------------------------------------------------------------------
TYPES = ["TIMESTAMP(0)", "TIMESTAMP(1)", "TIMESTAMP(3)", "TIMESTAMP(5)", "TIMESTAMP(6)", "TIMESTAMP(7)",
         "TIMESTAMP(9)", "TIMESTAMP_LTZ(0)", "TIMESTAMP_LTZ(3)", "TIMESTAMP_LTZ(4)", "TIMESTAMP_LTZ(8)"]  # fmt: skip
# Instants every path can carry (microsecond paths get them at their resolution, see ``carried``).
PATH_NANOS = [
    1_767_268_805_123_456_789,
    1_767_268_805_000_012_345,
    -1_500_000_000,
    -123_456_789,
    -1,
    0,
    946_684_799_999_999_999,
    86_400_900_000_000,
]


def spec(type_text: str, source: dict | None = None) -> TableSpec:
    return TableSpec.from_dict(
        {
            "name": "t.precision",
            "columns": [{"name": "id", "type": "BIGINT"}, {"name": "at", "type": type_text}],
            "primary_key": ["id"],
            "source": source or {},
        }
    )


def values(batch) -> list:
    return [r["at"] for r in batch.records.to_pylist()]


def lines(tmp_path, items) -> list:
    path = tmp_path / "1.jsonl"
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return [path]


def carried(nanos: int, unit: str) -> int:
    """The instant a path of that resolution carries (floored to it, as its writer would have)."""
    per = {"ms": 10**6, "us": 10**3, "ns": 1}[unit]
    return nanos // per * per


def expected(type_text: str, unit: str = "ns") -> list:
    p = parse_type(type_text).precision
    return [stored(type_text, flink_truncate(carried(n, unit), p)) for n in PATH_NANOS]


@pytest.mark.parametrize("type_text", TYPES)
def test_changelog_json_and_cdc_text(tmp_path, type_text):
    ltz = "Z" if "LTZ" in type_text else ""
    rows = [{"id": i, "at": iso(n, ltz)} for i, n in enumerate(PATH_NANOS)]
    messages = {
        "changelog-json": [{"op": "+I", "data": r} for r in rows],
        "canal-json": [{"type": "INSERT", "database": "d", "table": "t", "data": [r]} for r in rows],
        "maxwell-json": [{"type": "insert", "database": "d", "table": "t", "data": r} for r in rows],
    }
    for fmt, items in messages.items():
        source = {} if fmt == "changelog-json" else {"format": fmt}
        assert values(read_batch(lines(tmp_path, items), spec(type_text, source))) == expected(type_text), fmt


@pytest.mark.parametrize("type_text", TYPES)
@pytest.mark.parametrize("unit", ["ms", "us", "ns"])
def test_debezium_epochs(tmp_path, type_text, unit):
    per = {"ms": 10**6, "us": 10**3, "ns": 1}[unit]
    items = [{"op": "c", "after": {"id": i, "at": n // per}} for i, n in enumerate(PATH_NANOS)]
    source = {"format": "debezium-json", "timestamp-epoch-unit": unit}
    assert values(read_batch(lines(tmp_path, items), spec(type_text, source))) == expected(type_text, unit)


@pytest.mark.parametrize("type_text", TYPES)
@pytest.mark.parametrize("unit", ["ms", "us", "ns", "text"])
def test_parquet(tmp_path, type_text, unit):
    ltz = "LTZ" in type_text
    if unit == "text":
        column = pa.array([iso(n, "Z" if ltz else "") for n in PATH_NANOS], pa.string())
    else:
        per = {"ms": 10**6, "us": 10**3, "ns": 1}[unit]
        column = pa.array([n // per for n in PATH_NANOS], pa.int64()).cast(
            pa.timestamp(unit, tz="UTC" if ltz else None)
        )
    path = tmp_path / "1.parquet"
    pq.write_table(
        pa.table({"op": ["+I"] * len(PATH_NANOS), "id": range(len(PATH_NANOS)), "at": column}), path
    )
    assert values(read_batch([path], spec(type_text))) == expected(
        type_text, "ns" if unit == "text" else unit
    )


@pytest.mark.parametrize("type_text", ["TIME", "TIME(1)", "TIME(3)", "TIME(6)"])
def test_time_on_every_path(tmp_path, type_text):
    p = parse_type(type_text).precision
    micros = [0, 1, 987_654, 86_399_999_999, 45_296_123_456]
    want = [
        (dt.datetime.min + dt.timedelta(microseconds=truncate_time_micros(m, p)))
        .time()
        .isoformat("microseconds")
        for m in micros
    ]
    texts = [
        (dt.datetime.min + dt.timedelta(microseconds=m)).time().isoformat("microseconds") for m in micros
    ]
    json_rows = [{"op": "+I", "data": {"id": i, "at": t}} for i, t in enumerate(texts)]
    assert values(read_batch(lines(tmp_path, json_rows), spec(type_text))) == want
    path = tmp_path / "1.parquet"
    for column in (pa.array(micros, pa.time64("us")), pa.array([m * 1000 for m in micros], pa.time64("ns"))):
        pq.write_table(pa.table({"op": ["+I"] * len(micros), "id": range(len(micros)), "at": column}), path)
        assert values(read_batch([path], spec(type_text))) == want


# --- the column-wise decoders (the apply's decode tasks) ----------------------------------------------------
def decode_range(tmp_path, data: bytes, table_spec: TableSpec, fast: bool) -> list:
    """A landed range decoded by the apply's decode (``decode._decode_lines``), column-wise or line by line;
    with ``fast`` the column-wise path must take it."""
    from changelake.inputs import decode
    from changelake.inputs.records import DecodedBatch, batch_arrow_schema

    path = tmp_path / "r.jsonl"
    path.write_bytes(data)
    fmt = table_spec.source_options.format or "changelog-json"
    r = decode.Range(0, str(path), fmt, 0, len(data), 1)
    if fast:
        assert decode._json_columns(data, r, table_spec) is not None, (
            "the column-wise path declined the range"
        )
    out = DecodedBatch(batch_arrow_schema(table_spec).empty_table())
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CHANGELAKE_FAST_JSON", "1" if fast else "0")
        table = decode._decode_lines(r, table_spec, out)
    return table.column("at").to_pylist()


@pytest.mark.parametrize(
    "type_text", [t for t in TYPES if parse_type(t).precision <= 6] + ["TIME", "TIME(2)"]
)
def test_column_wise_json_cuts_as_the_per_message_path(tmp_path, type_text):
    """The column-wise changelog JSON decoder takes ISO text of up to six digits; it cuts as decode_json."""
    time = type_text.startswith("TIME(") or type_text == "TIME"
    zone = "Z" if "LTZ" in type_text else ""
    texts = (
        ["10:01:02.987654", "00:00:00.000001", "23:59:59.999999"]
        if time
        else [iso(n)[:-3] + zone for n in PATH_NANOS if n >= 0] + ["1969-12-31T23:59:59.500000" + zone]
    )
    data = "".join(json.dumps({"op": "+I", "data": {"id": i, "at": t}}) + "\n" for i, t in enumerate(texts))
    table_spec = spec(type_text)
    fast = decode_range(tmp_path, data.encode(), table_spec, True)
    assert fast == decode_range(tmp_path, data.encode(), table_spec, False)
    assert fast == [parse_type(type_text).decode_json(t) for t in texts]


def confluent_items(tmp_path, logical: str) -> tuple[list[dict], dict]:
    """upsert-kafka messages whose key and value are Confluent Avro (the ``at`` value a long of ``logical``
    type) of the PATH_NANOS instants, and the source options that read them."""
    per = 10**6 if logical == "timestamp-millis" else 10**3
    key = {"type": "record", "name": "K", "fields": [{"name": "id", "type": "long"}]}
    value = {
        "type": "record",
        "name": "V",
        "fields": [{"name": "at", "type": {"type": "long", "logicalType": logical}}],
    }
    directory = tmp_path / "schemas"
    directory.mkdir(exist_ok=True)
    for schema_id, schema in ((1, value), (2, key)):
        (directory / f"{schema_id}.avsc").write_text(json.dumps(schema))

    def wire(schema_id: int, schema: dict, record: dict) -> str:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
        return base64.b64encode(b"\x00" + schema_id.to_bytes(4, "big") + buf.getvalue()).decode()

    items = [
        {"key": wire(2, key, {"id": i}), "value": wire(1, value, {"at": n // per}), "topic": "t", "partition": 0,
         "offset": i}
        for i, n in enumerate(PATH_NANOS)
    ]  # fmt: skip
    source = {"format": "upsert-kafka", "key.format": "avro-confluent", "value.format": "avro-confluent",
              "key.avro-confluent.schema-dir": str(directory), "value.avro-confluent.schema-dir": str(directory),
              "value.fields-include": "EXCEPT_KEY"}  # fmt: skip
    return items, source


@pytest.mark.parametrize("type_text", [t for t in TYPES if parse_type(t).precision <= 6])
@pytest.mark.parametrize("logical", ["timestamp-millis", "timestamp-micros"])
def test_avro_message_by_message_and_column_wise(tmp_path, type_text, logical):
    """Avro longs of a timestamp logical type, decoded message by message (read_batch) and column by column (the
    apply's decode of Avro key and value), cut alike."""
    items, source = confluent_items(tmp_path, logical)
    table_spec = spec(type_text, source)
    want = expected(type_text, "ms" if logical == "timestamp-millis" else "us")
    assert values(read_batch(lines(tmp_path, items), table_spec)) == want
    data = "".join(json.dumps(i) + "\n" for i in items).encode()
    assert (
        decode_range(tmp_path, data, table_spec, True)
        == decode_range(tmp_path, data, table_spec, False)
        == want
    )


# --- what the cut values mean for keys, versions, aggregates, lookups and the changelog ----------------------------
def test_the_issues_cases_through_the_api(tmp_path):
    """A TIMESTAMP(0) key written as .1 and .9 is one key; a TIMESTAMP(3) version .123900 ties with a later
    .123100 (the later row wins); max compares cut values; a lookup's key is cut too; the changelog carries
    the cut values."""
    from tests.helpers import sparkless_lake

    lake = sparkless_lake(tmp_path)
    keyed = {
        "name": "p.keyed",
        "columns": [{"name": "k", "type": "TIMESTAMP(0)"}, {"name": "v", "type": "STRING"}],
        "primary_key": ["k"],
    }
    versioned = {
        "name": "p.versioned",
        "columns": [
            {"name": "k", "type": "INT"},
            {"name": "ver", "type": "TIMESTAMP(3)"},
            {"name": "v", "type": "STRING"},
        ],
        "primary_key": ["k"],
        "options": {"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "ver"},
    }
    latest = {
        "name": "p.latest",
        "columns": [{"name": "k", "type": "INT"}, {"name": "at", "type": "TIMESTAMP_LTZ(1)"}],
        "primary_key": ["k"],
        "options": {"table.merge-engine": "aggregation", "fields.at.agg": "max"},
    }
    for table in (keyed, versioned, latest):
        lake.create_table(table)
    lake.apply("p.keyed", [{"op": "+I", "data": {"k": "2024-01-01T00:00:00.1", "v": "a"}},
                           {"op": "+I", "data": {"k": "2024-01-01T00:00:00.9", "v": "b"}}])  # fmt: skip
    assert lake.rows_arrow("p.keyed").to_pylist() == [{"k": dt.datetime(2024, 1, 1), "v": "b"}]
    assert [r["_change_type"] for r in lake.changelog_arrow("p.keyed").to_pylist()] == ["+I", "-U", "+U"]
    assert lake.lookup("p.keyed", {"k": "2024-01-01T00:00:00.5"}) == [
        {"k": dt.datetime(2024, 1, 1), "v": "b"}
    ]
    lake.apply("p.versioned", [{"op": "+I", "data": {"k": 1, "ver": "2024-01-01T00:00:00.123900", "v": "first"}},
                               {"op": "+I", "data": {"k": 1, "ver": "2024-01-01T00:00:00.123100", "v": "later"}}])  # fmt: skip
    assert lake.rows_arrow("p.versioned").to_pylist() == [
        {"k": 1, "ver": dt.datetime(2024, 1, 1, 0, 0, 0, 123000), "v": "later"}
    ]
    lake.apply("p.latest", [{"op": "+I", "data": {"k": 1, "at": "2024-01-01T00:00:00.19Z"}},
                            {"op": "+I", "data": {"k": 1, "at": "2024-01-01T00:00:00.11Z"}}])  # fmt: skip
    changelog = lake.changelog_arrow("p.latest").to_pylist()
    assert [r["at"] for r in changelog] == [dt.datetime(2024, 1, 1, 0, 0, 0, 100000, tzinfo=dt.UTC)] * 3
