"""Issue 12: bad input never crashes and never poisons a table. Each input of the issue's table (and its
neighbours) is fed to the readers: the batch is refused with a BadRecordError naming file, line and field,
or, under ``on-bad-record: quarantine``, the record is set aside and the rest decode. No Spark here."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyroaring import BitMap, BitMap64

from changelake.errors import BadRecordError, ChangelakeError, SpecError
from changelake.identifiers import check_name
from changelake.inputs.landing import landed_batches, landing_problems, read_manifest, scan_landing
from changelake.inputs.readers import read_batch
from changelake.spec import TableSpec
from changelake.types import parse_type

D = decimal.Decimal
COLUMNS = [
    {"name": "id", "type": "BIGINT"},
    {"name": "d", "type": "DECIMAL(38,2)"},
    {"name": "f", "type": "DOUBLE"},
    {"name": "r", "type": "FLOAT"},
    {"name": "s", "type": "STRING"},
    {"name": "ltz", "type": "TIMESTAMP_LTZ(6)"},
    {"name": "ts", "type": "TIMESTAMP(6)"},
    {"name": "dt", "type": "DATE"},
    {"name": "t", "type": "TIME"},
    {"name": "i", "type": "INT"},
]


def spec(source: dict | None = None, columns=COLUMNS, pk=("id",), options=None) -> TableSpec:
    return TableSpec.from_dict(
        {
            "name": "t.x",
            "columns": columns,
            "primary_key": list(pk),
            "source": source or {},
            "options": options or {},
        }
    )


def land(tmp_path: Path, lines: list[str | bytes | dict], name: str = "1.jsonl") -> Path:
    path = tmp_path / name
    raw = [
        item if isinstance(item, bytes) else (item if isinstance(item, str) else json.dumps(item)).encode()
        for item in lines
    ]
    path.write_bytes(b"\n".join(raw) + b"\n")
    return path


def refused_and_quarantined(tmp_path, source: dict, good: list, bad, field: str | None, reason: str, **kw):
    """The bad line (2nd of 3) refuses the batch naming file, line 2 and field; under quarantine it is set
    aside with the same reason and the two good lines decode."""
    path = land(tmp_path, [good[0], bad, good[1]])
    with pytest.raises(BadRecordError) as e:
        read_batch([path], spec(source, **kw))
    assert (e.value.file, e.value.line, e.value.field) == (str(path), 2, field)
    assert reason in e.value.reason, e.value.reason
    assert str(e.value).startswith(f"{path}:2")
    batch = read_batch([path], spec({**source, "on-bad-record": "quarantine"}, **kw))
    assert [(d["line"], d["field"]) for d in batch.dead_letters] == [(2, field)]
    assert reason in batch.dead_letters[0]["reason"]
    assert batch.records.column("id").to_pylist() == [1, 3]
    return batch


def cj(data: dict | str) -> dict | str:
    return {"op": "+I", "data": data} if isinstance(data, dict) else data


CJ_GOOD = [cj({"id": 1}), cj({"id": 3})]


# --- values: changelog-json -------------------------------------------------------------------------------
def test_decimal_38_with_more_than_28_digits_is_valid_data(tmp_path):
    value = "123456789012345678901234567890123456.89"  # 38 digits: beyond Python's default 28-digit context
    path = land(tmp_path, [cj({"id": 1, "d": value}), f'{{"op": "+I", "data": {{"id": 2, "d": {value}}}}}'])
    assert read_batch([path], spec()).records.column("d").to_pylist() == [D(value), D(value)]
    rounded = land(tmp_path, [cj({"id": 1, "d": "12345678901234567890123456789012345.675"})], "2.jsonl")
    assert read_batch([rounded], spec()).records.column("d").to_pylist() == [
        D("12345678901234567890123456789012345.68")
    ]


@pytest.mark.parametrize(
    ("bad", "field", "reason"),
    [
        (b'{"op": "+I", "data": {"id": 2, "s": "\xff\xfe"}}', None, "invalid UTF-8 at byte 38"),
        ('{"op": "+I", "data": {"id": 2, "s": "\\ud800"}}', "s", "lone surrogate '\\ud800'"),
        (
            '{"op": "+I", "data": {"id": 2, "s": ' + "[" * 100_000 + "]" * 100_000 + "}}",
            None,
            "nested deeper",
        ),
        ('{"op": "+I", "data": {"id": ' + "7" * 5000 + "}}", "id", "more than 4000 digits"),
        ('{"op": "+I", "data": {"id": 2, "i": 1e999999999999}}', "i", "out of range for INT"),
        ('{"op": "+I", "data": {"id": 1e999999999999}}', "id", "out of range for BIGINT"),
        ('{"op": "+I", "data": {"id": 1e9991000000000000000}}', "id", "exponent of 19 digits or more"),
        ('{"op": "+I", "data": {"id": 2, "d": 1e999999999999}}', "d", "does not fit DECIMAL(38,2)"),
        ('{"op": "+I", "data": {"id": 2, "f": 1' + "0" * 400 + "}}", "f", "out of range for DOUBLE"),
        ('{"op": "+I", "data": {"id": 2, "f": 1e400}}', "f", "out of range for DOUBLE"),
        ('{"op": "+I", "data": {"id": 2, "r": 1e39}}', "r", "out of range for FLOAT"),
        ('{"op": "+I", "data": {"id": 2, "f": NaN}}', None, 'NaN is not valid JSON; write "NaN"'),
        ('{"op": "+I", "data": {"id": 2, "f": -Infinity}}', None, "-Infinity is not valid JSON"),
        (cj({"id": 2, "ltz": "0001-01-01T00:00:00+01:00"}), "ltz", "out of range for TIMESTAMP_LTZ"),
        (cj({"id": 2, "ltz": "9999-12-31T23:59:59-01:00"}), "ltz", "out of range for TIMESTAMP_LTZ"),
        (cj({"id": 2, "ts": "2024-01-01T00:00:00+01:00"}), "ts", "has a time zone; TIMESTAMP is zone-less"),
        (cj({"id": 2, "t": "12:00:00+01:00"}), "t", "has a time zone; TIME is zone-less"),
        (cj({"id": 2, "d": "١٢"}), "d", "is not a decimal number"),  # Arabic-Indic digits
        (cj({"id": 2, "d": "1" * 2000}), "d", "exceeds the limit of 1000"),
        ('{"op": "+I", "op": "-D", "data": {"id": 2}}', "op", "the key appears twice"),
        ('{"op": "+I", "data": {"id": 2, "s": "a", "s": "b"}}', "s", "the key appears twice"),
        ('{"op": "+I", "data": {"id": 2}} {"op": "-D"}', None, "malformed JSON at column 33: Extra data"),
    ],
)
def test_changelog_json_bad_values(tmp_path, bad, field, reason):
    refused_and_quarantined(tmp_path, {}, CJ_GOOD, bad, field, reason)


def test_huge_exponents_cost_nothing(tmp_path):
    """1e999999999999 into an integer would allocate the number; 1e20000000 into one ran for minutes."""
    lines = [
        f'{{"op": "+I", "data": {{"id": {i}, "i": 1e{e}}}}}'
        for i, e in enumerate((999999999999, 20000000), 1)
    ]
    canal = [{"type": "INSERT", "data": [{"id": "1", "i": f"1e{e}"}]} for e in (999999999999, 20000000)]
    started = time.monotonic()
    quarantine = {"on-bad-record": "quarantine"}
    assert read_batch([land(tmp_path, lines)], spec(quarantine)).quarantined == 2
    batch = read_batch([land(tmp_path, canal, "2.jsonl")], spec({"format": "canal-json", **quarantine}))
    assert batch.quarantined == 2
    assert time.monotonic() - started < 5


def test_nan_and_infinity_values_are_explicit_strings_and_never_keys(tmp_path):
    path = land(tmp_path, [cj({"id": 1, "f": "NaN", "r": "-Infinity"}), cj({"id": 2, "f": "Infinity"})])
    records = read_batch([path], spec()).records
    assert math.isnan(records.column("f")[0].as_py()) and records.column("r")[0].as_py() == -math.inf
    assert records.column("f")[1].as_py() == math.inf
    for key in ("NaN", "Infinity", "-Infinity"):
        refused = land(tmp_path, [cj({"k": 1.5}), cj({"k": key}), cj({"k": 2})], "2.jsonl")
        with pytest.raises(BadRecordError, match="not allowed in a primary-key column") as e:
            read_batch([refused], spec(columns=[{"name": "k", "type": "DOUBLE"}], pk=("k",)))
        assert (e.value.line, e.value.field) == (2, "k")


def test_a_parquet_file_landed_for_a_json_table_refuses_the_batch_even_under_quarantine(tmp_path):
    path = tmp_path / "1.jsonl"
    pq.write_table(pa.table({"op": ["+I"], "id": [1]}), path)
    for source in ({}, {"on-bad-record": "quarantine"}, {"format": "debezium-json"}):
        with pytest.raises(BadRecordError, match=r"this is a Parquet file, but the table reads") as e:
            read_batch([path], spec(source))
        assert e.value.line == 1


def test_byte_order_mark_and_crlf_lines_decode(tmp_path):
    path = land(
        tmp_path, [b'\xef\xbb\xbf{"op": "+I", "data": {"id": 1}}\r', b'{"op": "-D", "data": {"id": 1}}\r']
    )
    assert read_batch([path], spec()).records.column("_op").to_pylist() == ["+I", "-D"]


def test_error_fields_and_reasons_stay_printable_and_bounded(tmp_path):
    key = "x\n\ud800" + "y" * 10_000
    path = land(tmp_path, [json.dumps({"op": "+I", "data": {"id": 1, key: 1}})])
    with pytest.raises(BadRecordError) as e:
        read_batch([path], spec())
    assert str(e.value).isprintable() and len(str(e.value)) < 3000
    assert e.value.field.startswith("x\\n\\ud800y")


# --- envelopes --------------------------------------------------------------------------------------------
DEBEZIUM_GOOD = [{"op": "c", "after": {"id": 1}}, {"op": "c", "after": {"id": 3}}]
MICRO_TS = {
    "fields": [{"field": "after", "fields": [{"field": "ts", "name": "io.debezium.time.MicroTimestamp"}]}]
}


@pytest.mark.parametrize(
    ("bad", "field", "reason"),
    [
        ({"op": ["c"], "after": {"id": 2}}, "op", "unknown Debezium op"),
        ({"op": {"c": 1}, "after": {"id": 2}}, "op", "unknown Debezium op"),
        ({"schema": {"fields": 5}, "payload": {"op": "c", "after": {"id": 2}}}, "schema.fields", "expected a JSON array"),
        ({"schema": 5, "payload": {"op": "c", "after": {"id": 2}}}, "schema", "expected a JSON object"),
        ({"schema": {"fields": [{"field": "after", "fields": [{"field": ["ts"]}]}]}, "payload": {"op": "c", "after": {"id": 2}}},
         "schema.fields.after.fields", "expected objects with a string 'field'"),
        ({"op": "c", "after": {"id": 2, "dt": 99999999999}}, "dt", "out of range for DATE"),
        ({"op": "c", "after": {"id": 2, "ts": -99999999999999999}}, "ts", "out of range for TIMESTAMP(6)"),
        ({"schema": MICRO_TS, "payload": {"op": "c", "after": {"id": 2, "ts": 999999999999999999}}}, "ts",
         "out of range for TIMESTAMP(6)"),
        ({"op": "c", "after": {"id": 2, "t": 90_000_000_000}}, "t", "is not a time of day (0 to 24 h)"),
        ({"op": "c", "after": {"id": 2, "t": -1}}, "t", "is not a time of day"),
        ({"op": "c", "after": {"id": 2, "d": base64.b64encode(b"\x01" * 65).decode()}}, "d", "exceeds 64 bytes"),
    ],
)  # fmt: skip
def test_debezium_envelopes_of_the_wrong_json_types(tmp_path, bad, field, reason):
    refused_and_quarantined(tmp_path, {"format": "debezium-json"}, DEBEZIUM_GOOD, bad, field, reason)


def test_debezium_unscaled_decimal_keeps_38_digits(tmp_path):
    unscaled = 12345678901234567890123456789012345689
    encoded = base64.b64encode(unscaled.to_bytes(16, "big", signed=True)).decode()
    schema = {"fields": [{"field": "after", "fields": [
        {"field": "d", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2"}}]}]}  # fmt: skip
    path = land(tmp_path, [{"schema": schema, "payload": {"op": "c", "after": {"id": 1, "d": encoded}}}])
    batch = read_batch([path], spec({"format": "debezium-json"}))
    assert batch.records.column("d").to_pylist() == [D("123456789012345678901234567890123456.89")]


@pytest.mark.parametrize(
    ("source", "good", "bad", "field", "reason"),
    [
        ("maxwell-json", "maxwell", {"type": ["insert"], "data": {"id": 2}}, "type", "expected a Maxwell event type"),
        ("maxwell-json", "maxwell", {"type": "insert", "data": [1]}, "data", "expected a JSON object"),
        ("canal-json", "canal", {"type": ["INSERT"], "data": [{"id": "2"}]}, "type", "expected a Canal event type"),
        ("canal-json", "canal", {"type": "INSERT", "isDdl": [1], "data": []}, "isDdl", "expected true or false"),
        ("canal-json", "canal", {"type": "INSERT", "data": [{"id": "٣"}]}, "id", "is not a number for BIGINT"),
        ("canal-json", "canal", {"type": "INSERT", "data": [{"id": "2", "f": "nan"}]}, "f", "is not a number"),
        ("canal-json", "canal", {"type": "INSERT", "data": [{"id": "1e999999999999"}]}, "id", "out of range"),
        ("upsert-kafka", "kafka", {"key": {"id": 2}, "value": None, "partition": 2**31, "offset": 0},
         "partition", "up to 2147483647"),
        ("upsert-kafka", "kafka", {"key": {"id": 2}, "value": None, "partition": 0, "offset": 2**63},
         "offset", "up to 9223372036854775807"),
        ("upsert-kafka", "kafka", {"key": {"id": 2}, "value": None, "partition": 0, "offset": 1, "topic": "a:b"},
         "topic", "is not a Kafka topic name"),
        ("upsert-kafka", "kafka", {"key": {"id": 2}, "value": None, "timestamp": "now"}, "timestamp", "int64"),
    ],
)  # fmt: skip
def test_other_envelopes_of_the_wrong_json_types(tmp_path, source, good, bad, field, reason):
    goods = {
        "maxwell": [{"type": "insert", "data": {"id": i}} for i in (1, 3)],
        "canal": [{"type": "INSERT", "data": [{"id": str(i)}]} for i in (1, 3)],
        "kafka": [{"key": {"id": i}, "value": {"s": "v"}} for i in (1, 3)],
    }[good]
    refused_and_quarantined(tmp_path, {"format": source}, goods, bad, field, reason)


def test_kafka_metadata_at_the_limits_is_accepted(tmp_path):
    record = {
        "key": {"id": 1},
        "value": None,
        "topic": "shop.orders-1_x",
        "partition": 2**31 - 1,
        "offset": 2**63 - 1,
    }
    batch = read_batch([land(tmp_path, [record])], spec({"format": "upsert-kafka"}))
    assert batch.kafka_offsets == {f"shop.orders-1_x:{2**31 - 1}": 2**63 - 1}


# --- rbm32 / rbm64 bytes ----------------------------------------------------------------------------------
RBM_COLUMNS = [
    {"name": "id", "type": "BIGINT"},
    {"name": "b32", "type": "BYTES"},
    {"name": "b64", "type": "BYTES"},
]
RBM_OPTIONS = {"table.merge-engine": "aggregation", "fields.b32.agg": "rbm32", "fields.b64.agg": "rbm64"}


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"id": 2, "b32": b64(b"not a bitmap")}, "b32"),
        ({"id": 2, "b32": b64(b"")}, "b32"),
        ({"id": 2, "b32": b64(BitMap64([1]).serialize())}, "b32"),  # a 64-bit bitmap is not a 32-bit one
        ({"id": 2, "b64": b64(BitMap([1]).serialize())}, "b64"),
    ],
)
def test_rbm_bytes_are_validated_when_decoded(tmp_path, bad, field):
    good = [
        cj({"id": 1, "b32": b64(BitMap([1, 2]).serialize())}),
        cj({"id": 3, "b64": b64(BitMap64([7]).serialize())}),
    ]
    refused_and_quarantined(
        tmp_path, {}, good, cj(bad), field, "not a serialized", columns=RBM_COLUMNS, options=RBM_OPTIONS
    )


# --- Parquet: the same rules as JSON ----------------------------------------------------------------------
def parquet(tmp_path: Path, columns: dict, name: str = "1.parquet") -> Path:
    n = len(next(iter(columns.values())))
    path = tmp_path / name
    pq.write_table(pa.table({"op": ["+I"] * n, "id": list(range(1, n + 1)), **columns}), path)
    return path


@pytest.mark.parametrize(
    ("type_", "values", "reason"),
    [
        ("CHAR(3)", ["abc", "abcdef", "x"], "string of length 6 does not fit CHAR(3)"),
        ("BINARY(2)", pa.array([b"ab", b"abcdef", b"x"]), "6 bytes do not fit BINARY(2)"),
        ("TIME", ["12:00", "25:99", "00:00:01"], "'25:99' is not an ISO-8601 time"),
        ("TIME", pa.array([0, 90_000_000_000, 1], pa.time64("us")), "86400000000"),
        ("TIMESTAMP", ["2024-01-01T00:00:00", "2024-01-01T00:00:00+01:00", None], "TIMESTAMP is zone-less"),
        ("TINYINT", [1, 300, 2], "300 is out of range for TINYINT"),
        ("INT", [1, 2**40, 2], "does not fit INT"),
        ("FLOAT", [1.0, 1e39, 2.0], "1e+39 is out of range for FLOAT"),
        ("DECIMAL(5,2)", pa.array([D("1.5"), D("1234.5"), D("2")], pa.decimal128(6, 1)), "does not fit DECIMAL(5,2)"),
        ("DECIMAL(12,2)", pa.array([1, 10**11, 2], pa.int64()), "does not fit DECIMAL(12,2)"),
        ("DATE", pa.array([0, 2**31 - 1, 1], pa.int32()).view(pa.date32()), "out of range for DATE"),
        ("TIMESTAMP", pa.array([0, 2**62, 1], pa.int64()).view(pa.timestamp("us")), "out of range for TIMESTAMP"),
    ],
)  # fmt: skip
def test_parquet_values_are_checked_like_json_values(tmp_path, type_, values, reason):
    s = spec(columns=[{"name": "id", "type": "BIGINT"}, {"name": "v", "type": type_}])
    path = parquet(tmp_path, {"v": values})
    with pytest.raises(BadRecordError) as e:
        read_batch([path], s)
    assert (e.value.line, e.value.field) == (2, "v") and reason in e.value.reason, e.value
    q = spec(
        {"on-bad-record": "quarantine"},
        columns=[{"name": "id", "type": "BIGINT"}, {"name": "v", "type": type_}],
    )
    batch = read_batch([path], q)
    assert [(d["line"], d["field"]) for d in batch.dead_letters] == [(2, "v")]
    assert batch.records.column("id").to_pylist() == [1, 3]


def test_parquet_and_json_refuse_the_same_values_with_the_same_words(tmp_path):
    s = spec(
        columns=[
            {"name": "id", "type": "BIGINT"},
            {"name": "c", "type": "CHAR(2)"},
            {"name": "t", "type": "TIME"},
        ]
    )
    for column, value in (("c", "abc"), ("t", "99:00")):
        jpath = land(tmp_path, [cj({"id": 1, column: value})])
        ppath = tmp_path / "1.parquet"
        pq.write_table(pa.table({"op": ["+I"], "id": [1], column: [value]}), ppath)
        with pytest.raises(BadRecordError) as from_json:
            read_batch([jpath], s)
        with pytest.raises(BadRecordError) as from_parquet:
            read_batch([ppath], s)
        assert from_json.value.reason == from_parquet.value.reason


def test_parquet_rounds_and_normalises_like_json(tmp_path):
    s = spec(columns=[{"name": "id", "type": "BIGINT"}, {"name": "d", "type": "DECIMAL(5,1)"},
                      {"name": "t", "type": "TIME"}, {"name": "ts", "type": "TIMESTAMP(6)"}])  # fmt: skip
    ppath = tmp_path / "1.parquet"
    pq.write_table(
        pa.table({"op": ["+I"], "id": [1], "d": pa.array([D("1.25")], pa.decimal128(5, 2)), "t": ["12:30"],
                  "ts": pa.array([1_500], pa.timestamp("ns"))}),
        ppath,
    )  # fmt: skip
    jpath = land(tmp_path, [cj({"id": 1, "d": 1.25, "t": "12:30", "ts": "1970-01-01T00:00:00.0000015"})])
    assert read_batch([ppath], s).records.equals(read_batch([jpath], s).records)
    assert read_batch([ppath], s).records.column("t").to_pylist() == ["12:30:00.000000"]


def test_parquet_nan_keys_and_rbm_bytes(tmp_path):
    path = tmp_path / "1.parquet"
    pq.write_table(pa.table({"op": ["+I", "+I", "+I"], "k": [1.0, math.nan, 2.0]}), path)
    with pytest.raises(BadRecordError, match="not allowed in a primary-key column") as e:
        read_batch([path], spec(columns=[{"name": "k", "type": "DOUBLE"}], pk=("k",)))
    assert (e.value.line, e.value.field) == (2, "k")
    pq.write_table(
        pa.table({"op": ["+I", "+I"], "id": [1, 2], "b32": [BitMap([1]).serialize(), b"junk"]}), path
    )
    with pytest.raises(BadRecordError, match="not a serialized 32-bit roaring bitmap") as e:
        read_batch([path], spec(columns=RBM_COLUMNS, options=RBM_OPTIONS))
    assert (e.value.line, e.value.field) == (2, "b32")


@pytest.mark.parametrize(
    ("columns", "field", "reason"),
    [
        ({"op": ["+I"], "id": [1], "v": pa.array([1], pa.timestamp("us", tz="UTC"))}, "v", "TIMESTAMP is zone-less"),
        ({"op": ["+I"], "id": [1], "v": [{"a": 1}]}, "v", "cannot hold TIMESTAMP"),
        ({"op": [1], "id": [1]}, "op", "expected a string column"),
    ],
)  # fmt: skip
def test_parquet_schema_problems_refuse_the_file_even_under_quarantine(tmp_path, columns, field, reason):
    path = tmp_path / "1.parquet"
    pq.write_table(pa.table(columns), path)
    s = spec(
        {"on-bad-record": "quarantine"},
        columns=[{"name": "id", "type": "BIGINT"}, {"name": "v", "type": "TIMESTAMP"}],
    )
    with pytest.raises(BadRecordError, match=reason) as e:
        read_batch([path], s)
    assert (e.value.line, e.value.field) == (0, field)


def test_parquet_with_invalid_utf8_names_the_row(tmp_path):
    data = b"okbad\xff"
    offsets = pa.array([0, 2, 6], pa.int32()).buffers()[1]
    strings = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(data)])
    path = tmp_path / "1.parquet"
    pq.write_table(pa.table({"op": ["+I", "+I"], "id": [1, 2], "s": strings}), path)
    with pytest.raises(BadRecordError, match="invalid data") as e:
        read_batch([path], spec())
    assert (e.value.line, e.value.field) == (2, "s")
    batch = read_batch([path], spec({"on-bad-record": "quarantine"}))
    assert batch.records.column("s").to_pylist() == ["ok"] and batch.dead_letters[0]["line"] == 2


def test_parquet_quarantine_of_many_bad_rows_is_not_quadratic(tmp_path):
    n = 20_000
    path = parquet(tmp_path, {"v": ["toolong" if i % 2 else "ok" for i in range(n)]})
    s = spec(
        {"on-bad-record": "quarantine"},
        columns=[{"name": "id", "type": "BIGINT"}, {"name": "v", "type": "CHAR(2)"}],
    )
    started = time.monotonic()
    batch = read_batch([path], s)
    assert batch.quarantined == n // 2 and batch.num_records == n // 2
    assert [d["line"] for d in batch.dead_letters[:3]] == [2, 4, 6]
    assert time.monotonic() - started < 60


# --- names: landing files, identifiers, types, manifests, specs -------------------------------------------
def landing_of(tmp_path: Path, names: list[str], table: str = "t.x") -> Path:
    landing = tmp_path / "landing"
    (landing / table).mkdir(parents=True)
    for name in names:
        (landing / table / name).write_text('{"op": "+I", "data": {"id": 1}}\n')
    return landing


def test_a_bad_batch_file_name_blocks_its_table_from_that_batch_on(tmp_path):
    landing = landing_of(tmp_path, ["01.jsonl", "2.jsonl", "3.jsonl", "03.jsonl", "4.parquet"])
    scan = scan_landing(landing, spec())
    assert scan.batches == {1: landing / "t.x" / "01.jsonl", 2: landing / "t.x" / "2.jsonl"}
    assert scan.blocked_from == 3
    with pytest.raises(
        ChangelakeError,
        match=r"t.x: landed batches from 3 on are blocked: .*3.jsonl: batch 3 is landed twice \(03.jsonl\)",
    ):
        landed_batches(landing, spec())


def test_batch_zero_blocks_every_batch_of_its_table_only(tmp_path):
    landing = landing_of(tmp_path, ["0.jsonl", "1.jsonl"])
    (landing / "t.y").mkdir()
    (landing / "t.y" / "1.jsonl").write_text("")
    other = TableSpec.from_dict({"name": "t.y", "columns": COLUMNS, "primary_key": ["id"]})
    assert scan_landing(landing, spec()).batches == {}
    assert landed_batches(landing, other) == {1: landing / "t.y" / "1.jsonl"}
    problems = landing_problems(landing, {"t.x": spec(), "t.y": other})
    assert list(problems) == ["t.x"] and "batch ids are positive integers" in problems["t.x"]


def test_batch_names_are_ascii_digits_matched_whole(tmp_path):
    landing = landing_of(
        tmp_path, ["٣.jsonl", "2.jsonl\n", "1.jsonl", "2.csv", ".3.jsonl.tmp", "1.manifest.json"]
    )
    assert landed_batches(landing, spec()) == {1: landing / "t.x" / "1.jsonl"}
    huge = landing_of(tmp_path / "h", ["1" * 30 + ".jsonl", "1.jsonl"])
    assert scan_landing(huge, spec()).batches == {1: huge / "t.x" / "1.jsonl"}
    assert "exceeds" in str(scan_landing(huge, spec()).error())


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"target_columns": ["id"], "target_columns": ["s"]}', "appears twice"),
        (b'{"target_columns": ["id"\xff]}', "not UTF-8"),
        (b"[" * 10_000, "nested deeper"),
        (b'{"target_columns": "id"}', "expected"),
    ],
)
def test_bad_manifests_are_changelake_errors(tmp_path, content, message):
    path = tmp_path / "1.jsonl"
    path.write_text("")
    (tmp_path / "1.manifest.json").write_bytes(content)
    with pytest.raises(ChangelakeError, match=message):
        read_manifest(path)


def test_identifiers_are_matched_whole():
    for bad in ("analytics\n", "a\nb", "٣x", "x٣", "a b", ""):
        with pytest.raises(SpecError):
            check_name(bad, "schema")
    assert check_name("analytics_2", "schema") == "analytics_2"
    for bad in ("DECIMAL(1٠,2)", "DECIMAL(10,2)\n", "CHAR(0)", "CHAR(99999999999)", "BINARY(0)"):
        with pytest.raises(SpecError):
            parse_type(bad, "c")


def test_timestamps_from_debezium_stay_exact(tmp_path):
    micros = int((dt.datetime(2024, 1, 2, 3, 4, 5, 678901) - dt.datetime(1970, 1, 1)).total_seconds() * 10**6)
    path = land(tmp_path, [{"schema": MICRO_TS, "payload": {"op": "c", "after": {"id": 1, "ts": micros}}}])
    assert read_batch([path], spec({"format": "debezium-json"})).records.column("ts").to_pylist() == [
        dt.datetime(2024, 1, 2, 3, 4, 5, 678901)
    ]


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        ({"records": "x"}, "'records' must be an integer"),
        ({"redelivery": True}, "'redelivery' must be a number"),
        ({"mix": {"insert": "a"}}, "'mix' must be non-negative shares"),
        ({"mix": {"upsert": 1}}, "'mix' must be a mapping of insert/update/delete"),
        ({"partial": "id"}, "'partial' must be a list of column-name lists"),
        ({"columns": {"s": {"template": "{0.__class__}"}}}, "template contains '{}' once"),
        ({"columns": {"s": {"template": "{:>999999999}"}}}, "template contains '{}' once"),
        ({"columns": {"id": {"min": 1.5}}}, "min and max are integers"),
        ({"columns": {"id": {"min": 5, "max": 1}}}, "min <= max"),
        ({"columns": {"s": {"values": []}}}, "values is a non-empty list"),
        ({"envelope": "yes"}, "'envelope' must be true or false"),
    ],
)
def test_datagen_profiles_of_the_wrong_types_are_changelake_errors(tmp_path, profile, message):
    from changelake.inputs.datagen import generate

    s = TableSpec.from_dict({"name": "t.x", "columns": COLUMNS, "primary_key": ["id"], "datagen": profile})
    with pytest.raises(ChangelakeError, match=message):
        generate(s, tmp_path, 1)
    assert not (tmp_path / "t.x").exists() or not list((tmp_path / "t.x").iterdir())


def test_the_per_line_path_validates_for_every_caller():
    """Executors decode byte ranges through ``_JsonReader._entry``: it takes bytes or text and applies every
    rule itself (UTF-8, the Parquet check, the catch-all), so no caller has to repeat one."""
    from changelake.inputs import formats
    from changelake.inputs.readers import _JsonReader
    from changelake.inputs.records import DecodedBatch, batch_arrow_schema

    s = spec()
    reader = _JsonReader(
        s, "changelog-json", s.source_options, DecodedBatch(batch_arrow_schema(s).empty_table())
    )
    assert reader._entry("f", 1, b'{"op": "+I", "data": {"id": 1}}\n').changes[0][1][0] == 1
    assert reader._entry("f", 2, '{"op": "+I", "data": {"id": 2}}').changes[0][1][0] == 2
    for line in (b"PAR1\x15\x04", "PAR1 text"):
        with pytest.raises(BadRecordError, match="this is a Parquet file"):
            reader._entry("f", 1, line)
    with pytest.raises(formats.FieldError, match="invalid UTF-8 at byte 2"):
        reader._entry("f", 3, b"{\xc3(")
    with pytest.raises(formats.FieldError, match="the key appears twice"):
        reader._entry("f", 4, b'{"op": "+I", "op": "-D", "data": {"id": 1}}')


def test_a_parquet_row_with_several_problems_gets_its_first_one(tmp_path):
    """Checks run in one order (op, the columns in spec order, required columns); a row failing several
    gets the first, whether the batch is refused or the row quarantined, and whatever the other rows hold."""
    columns = [
        {"name": "id", "type": "BIGINT"},
        {"name": "c", "type": "CHAR(1)"},
        {"name": "t", "type": "TINYINT"},
    ]
    path = tmp_path / "1.parquet"
    pq.write_table(
        pa.table({"op": ["+I", "??", "+I", "+I"], "id": [1, None, None, 4], "c": ["a", "bb", "cc", "d"],
                  "t": [1, 500, 500, 600]}),
        path,
    )  # fmt: skip
    expected = [(2, "op"), (3, "c"), (4, "t")]
    with pytest.raises(BadRecordError) as e:
        read_batch([path], spec(columns=columns))
    assert (e.value.line, e.value.field) == expected[0]
    batch = read_batch([path], spec({"on-bad-record": "quarantine"}, columns=columns))
    assert [(d["line"], d["field"]) for d in batch.dead_letters] == expected
    assert batch.records.column("id").to_pylist() == [1]


@pytest.mark.parametrize(
    "local_records", ["10000", pytest.param("0", marks=pytest.mark.spark)], ids=["in-process", "spark"]
)
def test_a_lone_carriage_return_stays_inside_its_line_in_the_apply(tmp_path, monkeypatch, local_records):
    """Found by test_failed_apply's fuzzing: the apply split lines at a lone \\r, so a dead letter named line
    4 where the reader (and an editor counting newlines) says line 3."""
    from changelake import ChangeLake

    monkeypatch.setenv("CHANGELAKE_LOCAL_APPLY_RECORDS", str(int(local_records)))
    lake = ChangeLake(home=tmp_path / "home", tables_dir=tmp_path / "tables", progress=None)
    lake.create_table(
        {
            "name": "t.cr",
            "columns": [{"name": "id", "type": "INT"}, {"name": "s", "type": "STRING"}],
            "primary_key": ["id"],
            "source": {"format": "changelog-json", "on-bad-record": "quarantine"},
        }
    )
    landed = lake.settings.landing_dir / "t.cr" / "1.jsonl"
    landed.parent.mkdir(parents=True)
    landed.write_bytes(
        b'{"op": "+I", "data": {"id": 1, "s": "a\\rb"}}\n{"op": "+I", "data": {"id": 2}}\n\ru\n'
    )
    reference = read_batch([landed], lake.spec("t.cr"))
    assert [(d["line"], d["reason"]) for d in reference.dead_letters] == [
        (3, "malformed JSON at column 2: Expecting value")
    ]
    lake.apply_pending("t.cr")
    assert [(d["line"], d["reason"]) for d in lake.dead_letters("t.cr", 1)] == [
        (d["line"], d["reason"]) for d in reference.dead_letters
    ]
