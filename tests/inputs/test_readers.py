"""Decoding landed files: every type, both JSON shapes, Parquet, and bad input named by file/line/field."""

import base64
import datetime as dt
import decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from changelake.errors import BadRecordError, ChangelakeError
from changelake.inputs.readers import read_batch
from changelake.spec import TableSpec

ALL_TYPES = TableSpec.from_dict(
    {
        "name": "t.all",
        "columns": [
            {"name": "k", "type": "BIGINT"},
            {"name": "b", "type": "BOOLEAN"},
            {"name": "ti", "type": "TINYINT"},
            {"name": "si", "type": "SMALLINT"},
            {"name": "i", "type": "INT"},
            {"name": "f", "type": "FLOAT"},
            {"name": "d", "type": "DOUBLE"},
            {"name": "dec", "type": "DECIMAL(6,2)"},
            {"name": "c", "type": "CHAR(3)"},
            {"name": "s", "type": "STRING"},
            {"name": "bin", "type": "BINARY"},
            {"name": "by", "type": "BYTES"},
            {"name": "dt", "type": "DATE"},
            {"name": "tm", "type": "TIME"},
            {"name": "ts", "type": "TIMESTAMP(3)"},
            {"name": "tz", "type": "TIMESTAMP_LTZ(6)"},
            {"name": "req", "type": "STRING", "nullable": False},
        ],
        "primary_key": ["k"],
    }
)


def write(tmp_path, lines, name="1.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_decodes_every_type(tmp_path):
    b64 = base64.b64encode(b"\x00\xff").decode()
    line = (
        '{"op": "+I", "data": {"k": 1, "b": true, "ti": -128, "si": 300, "i": 7, "f": 1.5, "d": 0.1, '
        f'"dec": "1234.565", "c": "abc", "s": "x", "bin": "{b64}", "by": "{b64}", "dt": "2024-02-29", '
        '"tm": "10:01:02.5", "ts": "2024-01-01T10:00:00.123", "tz": "2024-01-01T12:00:00+02:00", "req": "r"}}'
    )
    row = read_batch([write(tmp_path, [line])], ALL_TYPES).records.to_pylist()[0]
    assert row["_seq"] == 0 and row["_op"] == "+I"
    assert row["dec"] == decimal.Decimal("1234.57")  # HALF_UP to the scale, like Flink's JSON format
    assert row["bin"] == b"\x00\xff" and row["by"] == b"\x00\xff"
    assert row["dt"] == dt.date(2024, 2, 29)
    assert row["tm"] == "10:01:02.000000"  # TIME is TIME(0): the fraction is cut, as Flink/Fluss hold it
    assert row["ts"] == dt.datetime(2024, 1, 1, 10, 0, 0, 123000)
    assert row["tz"] == dt.datetime(2024, 1, 1, 10, 0, tzinfo=dt.UTC)
    assert row["d"] == 0.1 and row["ti"] == -128


def test_positional_rowkind_fields_form(tmp_path):
    spec = TableSpec.from_dict(
        {
            "name": "t.p",
            "columns": [{"name": "k", "type": "INT"}, {"name": "v", "type": "STRING"}],
            "primary_key": ["k"],
        }
    )
    path = write(
        tmp_path, ['{"rowkind": "+I", "fields": [1, "a"]}', "", '{"rowkind": "-D", "fields": [1, null]}']
    )
    batch = read_batch([path], spec)
    assert batch.records.to_pylist() == [
        {"_seq": 0, "_op": "+I", "k": 1, "v": "a"},
        {"_seq": 1, "_op": "-D", "k": 1, "v": None},
    ]
    assert batch.op_counts() == {"+I": 1, "-U": 0, "+U": 0, "-D": 1}


@pytest.mark.parametrize(
    "line, field, reason",
    [
        ('{"op": "+I", "data": {"k": 1, "req": "r"', None, "malformed JSON"),
        ('{"op": "*X", "data": {"k": 1, "req": "r"}}', "op", "unknown op '*X'"),
        ('{"op": "+I", "data": {"req": "r"}}', "k", "primary key column is missing or null"),
        ('{"op": "+I", "data": {"k": null, "req": "r"}}', "k", "primary key column is missing or null"),
        ('{"op": "+I", "data": {"k": 1}}', "req", "NOT NULL column is missing or null"),
        ('{"op": "+I", "data": {"k": 1, "req": "r", "zzz": 1}}', "zzz", "unknown column"),
        ('{"op": "+I", "data": {"k": "one", "req": "r"}}', "k", "expected an integer for BIGINT"),
        ('{"op": "+I", "data": {"k": 1, "req": "r", "ti": 128}}', "ti", "out of range for TINYINT"),
        ('{"op": "+I", "data": {"k": 1, "req": "r", "dec": 12345.6}}', "dec", "does not fit DECIMAL(6,2)"),
        ('{"op": "+I", "data": {"k": 1, "req": "r", "c": "abcd"}}', "c", "does not fit CHAR(3)"),
        ('{"op": "+I", "data": {"k": 1, "req": "r", "by": "***"}}', "by", "not valid base64"),
        ('{"op": "+I", "data": {"k": 1, "req": "r", "dt": "2024-13-01"}}', "dt", "not an ISO-8601 date"),
        ('{"op": "+I", "data": {"k": 1, "req": "r", "ts": "2024-01-01T00:00:00Z"}}', "ts", "has a time zone"),
        ('{"op": "+I", "data": {"k": 1, "req": "r", "b": "yes"}}', "b", "expected a JSON boolean"),
        ('{"op": "+I", "data": {"k": 1, "req": "r"}, "extra": 1}', "extra", "unknown top-level field"),
        ("[1, 2]", None, "expected a JSON object"),
    ],
)
def test_bad_records_name_file_line_and_field(tmp_path, line, field, reason):
    good = '{"op": "+I", "data": {"k": 9, "req": "r"}}'
    path = write(tmp_path, [good, good, line])
    with pytest.raises(BadRecordError) as err:
        read_batch([path], ALL_TYPES)
    e = err.value
    assert (e.file, e.line, e.field) == (str(path), 3, field)
    assert reason in str(e)
    assert str(e).startswith(f"{path}:3")


def test_deletes_need_only_the_key(tmp_path):
    batch = read_batch([write(tmp_path, ['{"op": "-D", "data": {"k": 5}}'])], ALL_TYPES)
    assert batch.records.column("k").to_pylist() == [5]


def test_parquet_input_matches_json_input(tmp_path):
    spec = TableSpec.from_dict(
        {
            "name": "t.p",
            "columns": [{"name": "k", "type": "INT"}, {"name": "v", "type": "DECIMAL(5,1)"}],
            "primary_key": ["k"],
        }
    )
    jpath = write(tmp_path, ['{"op": "+I", "data": {"k": 1, "v": 1.5}}', '{"op": "-D", "data": {"k": 1}}'])
    ppath = tmp_path / "2.parquet"
    pq.write_table(
        pa.table(
            {
                "op": ["+I", "-D"],
                "k": pa.array([1, 1], pa.int64()),
                "v": pa.array([decimal.Decimal("1.5"), None], pa.decimal128(5, 1)),
            }
        ),
        ppath,
    )
    assert read_batch([jpath], spec).records.equals(read_batch([ppath], spec).records)


@pytest.mark.parametrize(
    "columns, field, row, reason",
    [
        ({"op": ["+I", "+X"], "k": [1, 2]}, "op", 2, "unknown op '+X'"),
        ({"op": ["+I", "+I"], "k": [1, None]}, "k", 2, "primary key column is missing or null"),
        ({"op": ["+I"], "k": [1], "nope": [1]}, "nope", 1, "unknown column"),
        ({"op": ["+I", "+I"], "k": [1, 2**40]}, "k", 2, "does not fit INT"),
        ({"op": ["+I", "+I"], "k": [1, 2], "t": [1, 200]}, "t", 2, "out of range for TINYINT"),
    ],
)
def test_bad_parquet_records_name_row_and_field(tmp_path, columns, field, row, reason):
    spec = TableSpec.from_dict(
        {
            "name": "t.p",
            "columns": [{"name": "k", "type": "INT"}, {"name": "t", "type": "TINYINT"}],
            "primary_key": ["k"],
        }
    )
    path = tmp_path / "1.parquet"
    pq.write_table(pa.table(columns), path)
    with pytest.raises(BadRecordError) as err:
        read_batch([path], spec)
    assert (err.value.line, err.value.field) == (row, field)
    assert reason in str(err.value)


@pytest.mark.parametrize("order", ["parquet first", "json first"])
def test_a_batch_mixing_parquet_and_json_is_refused_like_the_apply_refuses_it(tmp_path, order):
    """Parquet has no ordering field, so it is read alone: the whole-batch reader refuses a mix in either
    order (it used to drop the JSON lines after a Parquet file), in the planner's words."""
    from changelake.inputs import decode

    spec = TableSpec.from_dict(
        {"name": "t.mix", "columns": [{"name": "k", "type": "INT"}], "primary_key": ["k"]}
    )
    parquet, jsonl = tmp_path / "a.parquet", tmp_path / "b.jsonl"
    pq.write_table(pa.table({"op": ["+I"], "k": pa.array([1], pa.int32())}), parquet)
    jsonl.write_text('{"op": "+I", "data": {"k": 2}}\n')
    paths = [parquet, jsonl] if order == "parquet first" else [jsonl, parquet]
    with pytest.raises(ChangelakeError) as whole:
        read_batch(paths, spec)
    with pytest.raises(ChangelakeError) as planned:
        decode.plan_batch(paths, spec, None, None)
    assert (
        str(whole.value)
        == str(planned.value)
        == f"{parquet}: Parquet batches are read in arrival order, alone"
    )
