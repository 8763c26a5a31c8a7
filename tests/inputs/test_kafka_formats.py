"""Issue 37 (formats): upsert-kafka's key.format / value.format. Records written by independent writers
(fastavro, Confluent wire bytes built here by hand, Python's csv and struct) decode to exactly what the same
data as JSON decodes to; each format's bad input is a bad record naming file, line and field; writer-schema
evolution follows Avro's resolution rules; the registry is asked over HTTP. No Spark here."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import http.server
import io
import json
import struct
import threading
import uuid
from pathlib import Path

import fastavro
import pytest

from changelake.errors import BadRecordError, ChangelakeError, SpecError
from changelake.inputs.formats import FORMATS, SourceEvent
from changelake.inputs.readers import read_batch
from changelake.spec import TableSpec

D = decimal.Decimal
COLUMNS = [
    {"name": "id", "type": "BIGINT"},
    {"name": "name", "type": "STRING"},
    {"name": "amount", "type": "DECIMAL(12,2)"},
    {"name": "qty", "type": "INT"},
    {"name": "score", "type": "DOUBLE"},
    {"name": "at", "type": "TIMESTAMP(6)"},
    {"name": "at_ms", "type": "TIMESTAMP_LTZ(3)"},
    {"name": "day", "type": "DATE"},
    {"name": "ref", "type": "STRING"},
]
ROWS = [
    {"id": 1, "name": "ann", "amount": D("12.50"), "qty": 3, "score": 0.25,
     "at": dt.datetime(2026, 1, 2, 3, 4, 5, 678901), "at_ms": dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC),
     "day": dt.date(2026, 1, 2), "ref": str(uuid.UUID(int=7))},
    {"id": 2, "name": None, "amount": D("-0.01"), "qty": -4, "score": 1e300,
     "at": dt.datetime(1969, 12, 31, 23, 59, 59, 1), "at_ms": dt.datetime(2000, 2, 29, tzinfo=dt.UTC),
     "day": dt.date(1900, 3, 1), "ref": None},
]  # fmt: skip
DELETED = 3  # a tombstone for this key follows the two rows


def spec(source: dict, columns=COLUMNS, pk=("id",)) -> TableSpec:
    return TableSpec.from_dict(
        {
            "name": "t.k",
            "columns": columns,
            "primary_key": list(pk),
            "source": {"format": "upsert-kafka", **source},
        }
    )


def land(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def kafka(key, value, offset: int) -> dict:
    return {"key": key, "value": value, "topic": "orders", "partition": 0, "offset": offset}


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def json_batch(tmp_path: Path) -> list[dict]:
    """The rows as today's JSON key/value envelopes: what every other format must decode to."""

    def plain(v):
        if isinstance(v, dt.datetime):
            return v.astimezone(dt.UTC).isoformat() if v.tzinfo else v.isoformat()
        return str(v) if isinstance(v, D | dt.date) else v

    records = [kafka({"id": r["id"]}, {k: plain(v) for k, v in r.items()}, i) for i, r in enumerate(ROWS)]
    records.append(kafka({"id": DELETED}, None, len(ROWS)))
    return read_batch([land(tmp_path / "json.jsonl", records)], spec({})).records.to_pylist()


# An independent writer's schemas: its own record names, a UUID and logical types, TIMESTAMP(6) as micros.
VALUE_SCHEMA = {
    "type": "record", "name": "Order", "namespace": "shop.events",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": ["null", "string"], "default": None},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
        {"name": "qty", "type": "int"},
        {"name": "score", "type": "double"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "at_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ref", "type": ["null", {"type": "string", "logicalType": "uuid"}], "default": None},
    ],
}  # fmt: skip
KEY_SCHEMA = {"type": "record", "name": "OrderKey", "fields": [{"name": "id", "type": "long"}]}


def avro_row(row: dict) -> dict:
    out = dict(row)
    if out["ref"] is not None:
        out["ref"] = uuid.UUID(out["ref"])
    return out


def avro_bytes(schema: dict, record: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


def confluent(schema_id: int, schema: dict, record: dict) -> str:
    """Confluent's wire format built by hand: magic byte 0, the id as 4 big-endian bytes, Avro binary."""
    return b64(b"\x00" + struct.pack(">I", schema_id) + avro_bytes(schema, record))


def schema_dir(tmp_path: Path, schemas: dict[int, dict]) -> str:
    directory = tmp_path / "schemas"
    directory.mkdir(exist_ok=True)
    for schema_id, schema in schemas.items():
        (directory / f"{schema_id}.avsc").write_text(json.dumps(schema))
    return str(directory)


def test_confluent_wire_bytes_decode_as_the_same_data_as_json(tmp_path):
    records = [
        kafka(confluent(3, KEY_SCHEMA, {"id": r["id"]}), confluent(11, VALUE_SCHEMA, avro_row(r)), i)
        for i, r in enumerate(ROWS)
    ]
    records.append(kafka(confluent(3, KEY_SCHEMA, {"id": DELETED}), None, len(ROWS)))
    directory = schema_dir(tmp_path, {3: KEY_SCHEMA, 11: VALUE_SCHEMA})
    source = {
        "key.format": "avro-confluent", "key.avro-confluent.schema-dir": directory,
        "value.format": "avro-confluent", "value.avro-confluent.schema-dir": directory,
    }  # fmt: skip
    got = read_batch([land(tmp_path / "1.jsonl", records)], spec(source)).records.to_pylist()
    assert got == json_batch(tmp_path)
    assert [r["_op"] for r in got] == ["+U", "+U", "-D"]


@pytest.mark.parametrize("encoding", ["binary", "single-object", "container"])
def test_avro_encodings_decode_as_the_same_data_as_json(tmp_path, encoding):
    """Plain binary is written with the table's own schema (Flink's avro format); single-object and container
    values with the independent writer's schema, found by fingerprint / carried in the container."""
    table_value = {
        "type": "record", "name": "value_record",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": ["null", "string"], "default": None},
            {"name": "amount", "type": ["null", VALUE_SCHEMA["fields"][2]["type"]], "default": None},
            {"name": "qty", "type": ["null", "int"], "default": None},
            {"name": "score", "type": ["null", "double"], "default": None},
            {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}], "default": None},
            {"name": "at_ms", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}], "default": None},
            {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}], "default": None},
            {"name": "ref", "type": ["null", "string"], "default": None},
        ],
    }  # fmt: skip
    source = {"value.format": "avro", "value.avro.encoding": encoding}

    def value(row: dict) -> str:
        if encoding == "binary":
            return b64(avro_bytes(table_value, row))
        if encoding == "single-object":
            canonical = fastavro.schema.to_parsing_canonical_form(fastavro.parse_schema(VALUE_SCHEMA))
            fp = bytes.fromhex(fastavro.schema.fingerprint(canonical, "CRC-64-AVRO"))
            return b64(b"\xc3\x01" + fp + avro_bytes(VALUE_SCHEMA, avro_row(row)))
        buf = io.BytesIO()
        fastavro.writer(buf, fastavro.parse_schema(VALUE_SCHEMA), [avro_row(row)])
        return b64(buf.getvalue())

    if encoding == "single-object":
        source["value.avro.schema-dir"] = schema_dir(tmp_path, {1: VALUE_SCHEMA})
    records = [kafka({"id": r["id"]}, value(r), i) for i, r in enumerate(ROWS)]
    records.append(kafka({"id": DELETED}, None, len(ROWS)))
    got = read_batch([land(tmp_path / "1.jsonl", records)], spec(source)).records.to_pylist()
    assert got == json_batch(tmp_path)


def test_csv_and_raw_decode_as_the_same_data_as_json(tmp_path):
    def csv_value(r: dict) -> str:
        at_ms = r["at_ms"].astimezone(dt.UTC).isoformat()
        return (
            f'{r["id"]},"{r["name"] or ""}",{r["amount"]},{r["qty"]},{r["score"]!r},'
            f"{r['at'].isoformat(sep=' ')},{at_ms},{r['day']},{r['ref'] or ''}"
        )

    records = [kafka(b64(struct.pack(">q", r["id"])), csv_value(r), i) for i, r in enumerate(ROWS)]
    records.append(kafka(b64(struct.pack(">q", DELETED)), None, len(ROWS)))
    source = {"key.format": "raw", "value.format": "csv"}
    got = read_batch([land(tmp_path / "1.jsonl", records)], spec(source)).records.to_pylist()
    want = json_batch(tmp_path)
    # CSV has no null string apart from csv.null-literal: the empty strings are "" there.
    want[1]["name"] = want[1]["ref"] = ""
    assert got == want


def test_csv_null_literal_delimiter_and_raw_string_value(tmp_path):
    columns = [{"name": "id", "type": "INT"}, {"name": "note", "type": "STRING"}]
    source = {
        "key.format": "csv", "key.csv.field-delimiter": ";",
        "value.format": "raw", "value.fields-include": "EXCEPT_KEY", "value.raw.charset": "UTF-16-LE",
    }  # fmt: skip
    records = [
        kafka("5", b64("grüße".encode("utf-16-le")), 0),
        kafka("6", b64(b""), 1),
    ]
    got = read_batch([land(tmp_path / "1.jsonl", records)], spec(source, columns)).records.to_pylist()
    assert [(r["id"], r["note"]) for r in got] == [(5, "grüße"), (6, "")]
    source = {"value.format": "csv", "value.csv.null-literal": "\\N"}
    path = land(tmp_path / "2.jsonl", [kafka({"id": 1}, "1,\\N", 0), kafka({"id": 2}, "2,", 1)])
    got = read_batch([path], spec(source, columns)).records.to_pylist()
    assert [(r["id"], r["note"]) for r in got] == [(1, None), (2, "")]


# --- schema evolution: Avro's resolution rules ---------------------------------------------------------------
def evolved(fields_removed=(), added=None) -> dict:
    fields = [f for f in VALUE_SCHEMA["fields"] if f["name"] not in fields_removed]
    return {**VALUE_SCHEMA, "fields": fields + ([added] if added else [])}


def test_writer_schema_evolution_follows_avro_resolution(tmp_path):
    """Three writer versions in one batch: v1 (the table's fields), v2 adding a field the table does not have
    (skipped), v3 dropping the nullable ``name`` (the reader's default, null)."""
    v2 = evolved(added={"name": "channel", "type": "string", "default": "web"})
    v3 = evolved(fields_removed=("name",))
    row3 = {k: v for k, v in avro_row(ROWS[0]).items() if k != "name"}
    directory = schema_dir(tmp_path, {1: VALUE_SCHEMA, 2: v2, 3: v3})
    records = [
        kafka({"id": 1}, confluent(1, VALUE_SCHEMA, avro_row(ROWS[0])), 0),
        kafka({"id": 2}, confluent(2, v2, {**avro_row(ROWS[1]), "channel": "app"}), 1),
        kafka({"id": 1}, confluent(3, v3, row3), 2),
    ]
    source = {"value.format": "avro-confluent", "value.avro-confluent.schema-dir": directory}
    got = read_batch([land(tmp_path / "1.jsonl", records)], spec(source)).records.to_pylist()
    want = json_batch(tmp_path)[:2]
    assert got[:2] == want
    assert got[2] == {**want[0], "_seq": 2, "name": None}


def test_a_dropped_field_without_a_default_is_a_bad_record(tmp_path):
    """``qty`` is nullable in the table but the reader schema file declares it required with no default:
    a writer without it cannot be resolved (Avro's rule), a bad record; quarantine keeps the others."""
    reader = {**VALUE_SCHEMA, "fields": [f for f in VALUE_SCHEMA["fields"] if f["name"] != "ref"]}
    reader_file = tmp_path / "reader.avsc"
    reader_file.write_text(json.dumps(reader))
    v2 = evolved(fields_removed=("qty", "ref"))
    directory = schema_dir(tmp_path, {1: reader, 2: v2})
    row = {k: v for k, v in avro_row(ROWS[0]).items() if k != "ref"}
    source = {
        "value.format": "avro-confluent", "value.avro-confluent.schema-dir": directory,
        "on-bad-record": "quarantine",
    }  # fmt: skip
    records = [
        kafka({"id": 1}, confluent(1, reader, row), 0),
        kafka({"id": 2}, confluent(2, v2, {k: v for k, v in row.items() if k != "qty"} | {"id": 2}), 1),
    ]
    batch = read_batch([land(tmp_path / "1.jsonl", records)], spec(source))
    # The derived reader has qty nullable (default null): the second record resolves, qty null.
    assert [r["qty"] for r in batch.records.to_pylist()] == [3, None]
    source_file = {"value.format": "avro", "value.avro.schema-file": str(reader_file), "value.avro.encoding":
                   "single-object", "value.avro.schema-dir": directory, "on-bad-record": "quarantine"}  # fmt: skip

    def single(schema, rec):
        canonical = fastavro.schema.to_parsing_canonical_form(fastavro.parse_schema(schema))
        return b64(b"\xc3\x01" + bytes.fromhex(fastavro.schema.fingerprint(canonical, "CRC-64-AVRO"))
                   + avro_bytes(schema, rec))  # fmt: skip

    records = [
        kafka({"id": 1}, single(reader, row), 0),
        kafka({"id": 2}, single(v2, {k: v for k, v in row.items() if k != "qty"} | {"id": 2}), 1),
    ]
    batch = read_batch([land(tmp_path / "2.jsonl", records)], spec(source_file))
    assert [r["id"] for r in batch.records.to_pylist()] == [1]
    assert [(d["line"], d["field"]) for d in batch.dead_letters] == [(2, "value")]
    assert "does not resolve" in batch.dead_letters[0]["reason"]


# --- the schema registry over HTTP -----------------------------------------------------------------------------
class _Registry(http.server.BaseHTTPRequestHandler):
    schemas: dict[int, dict] = {}
    asked: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server's name
        type(self).asked.append(self.path)
        if self.path == "/schemas/ids/500":
            self.send_error(500, "boom")
            return
        schema_id = int(self.path.rsplit("/", 1)[-1])
        if schema_id not in self.schemas:
            self.send_response(404)
            self.end_headers()
            self.wfile.write(b'{"error_code": 40403, "message": "Schema not found"}')
            return
        body = json.dumps({"schema": json.dumps(self.schemas[schema_id])}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def registry():
    _Registry.schemas, _Registry.asked = {21: VALUE_SCHEMA}, []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_registry_lookup_by_id_cached_and_unknown_ids_are_bad_records(tmp_path, registry):
    source = {"value.format": "avro-confluent", "value.avro-confluent.url": registry + "/"}
    records = [
        kafka({"id": r["id"]}, confluent(21, VALUE_SCHEMA, avro_row(r)), i) for i, r in enumerate(ROWS)
    ]
    records.append(kafka({"id": DELETED}, None, len(ROWS)))
    got = read_batch([land(tmp_path / "1.jsonl", records)], spec(source)).records.to_pylist()
    assert got == json_batch(tmp_path)
    assert _Registry.asked == ["/schemas/ids/21"]  # asked once for the two records
    bad = land(
        tmp_path / "2.jsonl",
        [records[0], kafka({"id": 1}, confluent(99, VALUE_SCHEMA, avro_row(ROWS[0])), 5)],
    )
    with pytest.raises(BadRecordError) as e:
        read_batch([bad], spec(source))
    assert (e.value.line, e.value.field) == (2, "value")
    assert "schema id 99 is not in the schema registry" in e.value.reason
    # Registered since: the same process finds it (an unknown id is not remembered).
    _Registry.schemas[99] = VALUE_SCHEMA
    assert read_batch([bad], spec(source)).records.num_rows == 2


def test_a_registry_that_fails_stops_the_batch_even_under_quarantine(tmp_path, registry):
    source = {
        "value.format": "avro-confluent", "value.avro-confluent.url": registry, "on-bad-record": "quarantine",
    }  # fmt: skip
    path = land(tmp_path / "1.jsonl", [kafka({"id": 1}, confluent(500, VALUE_SCHEMA, avro_row(ROWS[0])), 0)])
    with pytest.raises(ChangelakeError, match="HTTP 500") as e:
        read_batch([path], spec(source))
    assert not isinstance(e.value, BadRecordError)


# --- bad input, per format ---------------------------------------------------------------------------------
def _good_and_bad(
    fmt_source: dict, good: list, bad, field: str, reason: str, tmp_path: Path, columns=COLUMNS
):
    path = land(tmp_path / "1.jsonl", [good[0], bad, good[1]])
    with pytest.raises(BadRecordError) as e:
        read_batch([path], spec(fmt_source, columns))
    assert (e.value.file, e.value.line, e.value.field) == (str(path), 2, field), str(e.value)
    assert reason in e.value.reason, e.value.reason
    batch = read_batch([path], spec({**fmt_source, "on-bad-record": "quarantine"}, columns))
    assert [(d["line"], d["field"]) for d in batch.dead_letters] == [(2, field)]
    assert batch.dead_letters[0]["raw"].startswith("{")  # the landed line, for a replay
    assert batch.records.column("id").to_pylist() == [1, 3]


TWO = [{"name": "id", "type": "BIGINT"}, {"name": "n", "type": "INT"}]
KEY2 = {"type": "record", "name": "K", "fields": [{"name": "id", "type": "long"}]}
VAL2 = {
    "type": "record",
    "name": "V",
    "fields": [{"name": "id", "type": "long"}, {"name": "n", "type": "int"}],
}
# The table's own value schema (Flink's avro format writes plain binary with it): ``n`` is nullable.
VAL2T = {
    "type": "record",
    "name": "value_record",
    "fields": [{"name": "id", "type": "long"}, {"name": "n", "type": ["null", "int"], "default": None}],
}


@pytest.mark.parametrize(
    ("source", "good", "bad", "field", "reason"),
    [
        ({"value.format": "csv"}, ["1,2", "3,4"], "5,6,7", "value", "expected 2 CSV fields"),
        ({"value.format": "csv"}, ["1,2", "3,4"], "5,x", "value.n", "is not a number"),
        ({"value.format": "csv"}, ["1,2", "3,4"], '5,"2', "value", "malformed CSV"),
        ({"value.format": "csv"}, ["1,2", "3,4"], "2,99999999999", "n", "out of range for INT"),
        ({"value.format": "avro"}, [VAL2, VAL2], "not base64!", "value", "not valid base64"),
        ({"value.format": "avro"}, [VAL2, VAL2], b64(b"\x02"), "value", "the bytes end inside the record"),
        ({"value.format": "avro"}, [VAL2, VAL2], b64(avro_bytes(VAL2T, {"id": 2, "n": 1}) + b"\x00"), "value",
         "1 bytes after the Avro record"),
        ({"value.format": "avro", "value.avro.encoding": "single-object"}, ["so", "so"], b64(b"\xc3\x01" + bytes(8)),
         "value", "no known Avro schema has the fingerprint"),
        ({"value.format": "avro", "value.avro.encoding": "container"}, ["ocf", "ocf"], b64(b"Obj\x01junk"),
         "value", "cannot read the Avro object container"),
        ({"value.format": "avro-confluent"}, ["cf", "cf"], b64(b"\x01\x00\x00\x00\x02"), "value",
         "not Confluent's wire format"),
        ({"value.format": "avro-confluent"}, ["cf", "cf"], 17, "value", "base64"),
        ({"key.format": "raw"}, ["raw", "raw"], b64(b"\x00\x01"), "key.id", "expected 8 bytes for raw BIGINT"),
        ({"key.format": "avro-confluent"}, ["kcf", "kcf"], b64(b"\x00\x00\x00\x00\x01\x04\x00"), "key",
         "bytes after the Avro record"),
    ],
)  # fmt: skip
def test_bad_input_of_each_format_names_file_line_and_field(tmp_path, source, good, bad, field, reason):
    directory = schema_dir(tmp_path, {1: KEY2, 2: VAL2})
    source = dict(source)
    if "avro-confluent" in source.values():
        part = "key" if source.get("key.format") else "value"
        source[f"{part}.avro-confluent.schema-dir"] = directory

    def single(i: int) -> str:
        return b64(b"\xc3\x01" + _fp(VAL2) + avro_bytes(VAL2, {"id": i, "n": 1}))

    def record(i: int, kind) -> dict:
        key = {"id": i}
        if kind == "raw":
            key = b64(struct.pack(">q", i))
        elif kind == "kcf":
            key = b64(b"\x00" + struct.pack(">I", 1) + avro_bytes(KEY2, {"id": i}))
        value = (
            {
                "so": lambda: single(i),
                "cf": lambda: b64(b"\x00" + struct.pack(">I", 2) + avro_bytes(VAL2, {"id": i, "n": 1})),
                "ocf": lambda: _ocf(VAL2, {"id": i, "n": 1}),
            }.get(kind)
            if isinstance(kind, str)
            else None
        )
        if isinstance(kind, str) and "," in kind:
            return kafka(key, f"{i},{kind.split(',')[1]}", i)
        if kind is VAL2:
            return kafka(key, b64(avro_bytes(VAL2T, {"id": i, "n": 1})), i)
        return kafka(key, value() if value else {"n": 1}, i)

    if source.get("value.format") == "avro" and source.get("value.avro.encoding") == "single-object":
        (Path(directory) / "2.avsc").write_text(json.dumps(VAL2))
        source["value.avro.schema-dir"] = directory
    goods = [record(1, good[0]), record(3, good[1])]
    if source.get("key.format") in ("raw", "avro-confluent"):
        bad_record = kafka(bad, {"n": 1}, 2)
    else:
        bad_record = kafka({"id": 2}, bad, 2)
    _good_and_bad(source, goods, bad_record, field, reason, tmp_path, TWO)


def _fp(schema: dict) -> bytes:
    canonical = fastavro.schema.to_parsing_canonical_form(fastavro.parse_schema(schema))
    return bytes.fromhex(fastavro.schema.fingerprint(canonical, "CRC-64-AVRO"))


def _ocf(schema: dict, record: dict) -> str:
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), [record])
    return b64(buf.getvalue())


def test_a_key_field_in_the_value_must_equal_the_key_across_formats(tmp_path):
    source = {"key.format": "raw", "value.format": "csv"}
    records = [kafka(b64(struct.pack(">q", 1)), "1,5", 0), kafka(b64(struct.pack(">q", 2)), "7,5", 1)]
    with pytest.raises(BadRecordError) as e:
        read_batch([land(tmp_path / "1.jsonl", records)], spec(source, TWO))
    assert (e.value.line, e.value.field) == (2, "value.id")
    assert "differs from the record key" in e.value.reason


# --- options ------------------------------------------------------------------------------------------------
def test_options_are_validated_when_the_spec_loads():
    with pytest.raises(SpecError, match="'key.format' must be one of"):
        spec({"key.format": "protobuf"})
    with pytest.raises(SpecError, match="doesn't support 'debezium-json' as value format"):
        spec({"value.format": "debezium-json"})
    with pytest.raises(SpecError, match="applies to value.format 'avro'"):
        spec({"value.format": "csv", "value.avro.encoding": "binary"})
    with pytest.raises(SpecError, match="needs 'value.avro-confluent.url'"):
        spec({"value.format": "avro-confluent"})
    with pytest.raises(SpecError, match="must be an http"):
        spec({"value.format": "avro-confluent", "value.avro-confluent.url": "file:///etc/passwd"})
    with pytest.raises(SpecError, match="applies to upsert-kafka only"):
        TableSpec.from_dict(
            {"name": "t.k", "columns": TWO, "primary_key": ["id"], "source": {"key.format": "csv"}}
        )


def test_a_format_the_columns_cannot_take_stops_the_batch_not_the_record(tmp_path):
    path = land(tmp_path / "1.jsonl", [kafka({"id": 1}, b64(b"\x00"), 0)])
    with pytest.raises(SpecError, match="raw format holds exactly one field"):
        read_batch([path], spec({"value.format": "raw", "on-bad-record": "quarantine"}, TWO))


# --- datagen: every format written, read back as the events ------------------------------------------------
@pytest.mark.parametrize(
    "source",
    [
        {},
        {"key.format": "csv", "value.format": "csv"},
        {"key.format": "raw", "value.format": "raw", "value.fields-include": "EXCEPT_KEY"},
        {"key.format": "avro", "value.format": "avro"},
        {"value.format": "avro", "value.avro.encoding": "single-object"},
        {"value.format": "avro", "value.avro.encoding": "container", "key.fields-prefix": "k_"},
        {"key.format": "avro-confluent", "value.format": "avro-confluent"},
    ],
)
def test_datagen_writes_each_format_and_it_reads_back(tmp_path, source):
    source = dict(source)
    for part in ("key", "value"):
        if source.get(f"{part}.format") == "avro-confluent":
            source[f"{part}.avro-confluent.schema-dir"] = str(tmp_path / "schemas")
    columns = TWO if source.get("value.format") == "raw" else COLUMNS
    s = spec(source, columns)
    rows = [{"id": 1, "n": 7}, {"id": 2, "n": -1}] if columns is TWO else [dict(r) for r in ROWS]
    events = [SourceEvent("insert", None, r, kafka=("orders", 0, i)) for i, r in enumerate(rows)]
    events.append(SourceEvent("delete", {**rows[0], "id": DELETED}, None, kafka=("orders", 0, 2)))
    path = tmp_path / "1.jsonl"
    FORMATS["upsert-kafka"].write(s, events, path)
    got = read_batch([path], s).records.to_pylist()
    assert [r["_op"] for r in got] == ["+U", "+U", "-D"]
    want = [{k: v for k, v in r.items() if k not in ("_seq", "_op")} for r in got[:2]]
    if columns is COLUMNS and source.get("value.format") == "csv":
        rows[1]["name"] = rows[1]["ref"] = ""  # CSV has no null string (no csv.null-literal set)
    assert want == rows
    assert got[2]["id"] == DELETED


# --- the decode tasks' column-wise path equals the per-message path ------------------------------------------
def _decode(path: Path, s: TableSpec, fast: bool, monkeypatch):
    from changelake.inputs import decode
    from changelake.inputs.records import DecodedBatch, batch_arrow_schema

    monkeypatch.setenv("CHANGELAKE_FAST_JSON", "1" if fast else "0")
    r = decode.Range(0, str(path), "upsert-kafka", 0, path.stat().st_size, 1)
    out = DecodedBatch(batch_arrow_schema(s).empty_table())
    return decode._decode_lines(r, s, out), out


def _column_wise(path: Path, s: TableSpec):
    return FORMATS["upsert-kafka"].columns(path.read_bytes(), 1, s)


@pytest.mark.parametrize(
    "source",
    [
        {"key.format": "avro-confluent", "value.format": "avro-confluent"},
        {"key.format": "avro", "value.format": "avro", "key.fields-prefix": "k_"},
        {"key.format": "avro", "value.format": "avro", "value.avro.encoding": "single-object",
         "value.fields-include": "EXCEPT_KEY", "dedup": "kafka-offsets"},
        {"key.format": "raw", "value.format": "avro-confluent", "key.raw.endianness": "little-endian"},
    ],
)  # fmt: skip
def test_column_wise_decode_equals_the_per_message_path(tmp_path, monkeypatch, source):
    source = dict(source)
    for part in ("key", "value"):
        if source.get(f"{part}.format") == "avro-confluent":
            source[f"{part}.avro-confluent.schema-dir"] = str(tmp_path / "schemas")
    s = spec(source)
    rows = [dict(r) for r in ROWS] + [{**ROWS[0], "id": 10 + i, "amount": D(f"-{i}.05")} for i in range(40)]
    events = [SourceEvent("insert", None, r, kafka=("orders", i % 3, i)) for i, r in enumerate(rows)]
    events.insert(5, SourceEvent("delete", rows[0], None, kafka=("orders", 2, 99)))
    events.append(events[7])  # a redelivery: the same record at its offset again
    path = tmp_path / "1.jsonl"
    FORMATS["upsert-kafka"].write(s, events, path)
    assert _column_wise(path, s) is not None
    fast, fast_out = _decode(path, s, True, monkeypatch)
    slow, slow_out = _decode(path, s, False, monkeypatch)
    assert fast.num_rows == len(events)
    assert fast.to_pylist() == slow.to_pylist()
    assert fast_out.messages == slow_out.messages


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        (lambda r: {**r, "value": "***"}, "value", "not valid base64"),
        (lambda r: {**r, "value": confluent(77, VALUE_SCHEMA, avro_row(ROWS[0]))}, "value", "schema id 77"),
        (lambda r: {**r, "key": confluent(3, KEY_SCHEMA, {"id": 8})}, "value.id", "differs from the record key"),
        (lambda r: {k: v for k, v in r.items() if k != "value"}, "value", "missing"),
        (lambda r: {**r, "partition": None}, "partition", "got None"),
        (lambda r: {**r, "topic": "a b"}, "topic", "is not a Kafka topic name"),
        (lambda r: {**r, "value": confluent(11, VALUE_SCHEMA, {**avro_row(ROWS[0]), "qty": 2**31 - 1})}, None, None),
        (lambda r: {**r, "value": confluent(11, VALUE_SCHEMA, {**avro_row(ROWS[0]), "amount": D("1e10")})},
         "amount", "does not fit DECIMAL(12,2)"),
        (lambda r: {**r, "value": confluent(11, VALUE_SCHEMA, {**avro_row(ROWS[0]), "at": dt.datetime(9999, 12, 31)})},
         None, None),
        (lambda r: json.dumps(r).replace('"key"', '"\\u006bey"'), None, None),
    ],
)  # fmt: skip
def test_what_the_column_wise_path_declines_is_decided_by_the_per_message_path(
    tmp_path, monkeypatch, change, field, reason
):
    """A bad or unusual record anywhere in a range: the range goes message by message, so the error, or the
    data, is that path's own."""
    directory = schema_dir(tmp_path, {3: KEY_SCHEMA, 11: VALUE_SCHEMA})
    source = {
        "key.format": "avro-confluent", "key.avro-confluent.schema-dir": directory,
        "value.format": "avro-confluent", "value.avro-confluent.schema-dir": directory,
    }  # fmt: skip
    s = spec(source)
    good = [
        kafka(confluent(3, KEY_SCHEMA, {"id": r["id"]}), confluent(11, VALUE_SCHEMA, avro_row(r)), i)
        for i, r in enumerate(ROWS)
    ]
    odd = change(good[0])
    path = tmp_path / "1.jsonl"
    path.write_text(json.dumps(good[1]) + "\n" + (odd if isinstance(odd, str) else json.dumps(odd)) + "\n")
    if field is None:  # valid data the column-wise path leaves to the other
        fast, _ = _decode(path, s, True, monkeypatch)
        slow, _ = _decode(path, s, False, monkeypatch)
        assert fast.to_pylist() == slow.to_pylist() and fast.num_rows == 2
    else:
        with pytest.raises(BadRecordError) as e:
            _decode(path, s, True, monkeypatch)
        assert (e.value.line, e.value.field) == (2, field), str(e.value)
        assert reason in e.value.reason
    assert _column_wise(path, s) is None


# --- Avro container batches of Kafka records -----------------------------------------------------------------
KAFKA_RECORD = {
    "type": "record", "name": "KafkaRecord",
    "fields": [
        {"name": "key", "type": ["null", "bytes"]},
        {"name": "value", "type": ["null", "bytes"]},
        {"name": "topic", "type": "string"},
        {"name": "partition", "type": "int"},
        {"name": "offset", "type": "long"},
        {"name": "timestamp", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
    ],
}  # fmt: skip


def _container_batch(tmp_path: Path, records: list[dict], name: str = "1.avro") -> Path:
    path = tmp_path / name
    with path.open("wb") as fh:
        fastavro.writer(fh, fastavro.parse_schema(KAFKA_RECORD), records)
    return path


def _wire(schema_id: int, schema: dict, record: dict) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + avro_bytes(schema, record)


def _kafka_records() -> list[dict]:
    at = dt.datetime(2026, 5, 1, tzinfo=dt.UTC)
    records = [
        {"key": _wire(3, KEY_SCHEMA, {"id": r["id"]}), "value": _wire(11, VALUE_SCHEMA, avro_row(r)),
         "topic": "orders", "partition": 0, "offset": i, "timestamp": at}
        for i, r in enumerate(ROWS)
    ]  # fmt: skip
    records.append(
        {"key": _wire(3, KEY_SCHEMA, {"id": DELETED}), "value": None, "topic": "orders", "partition": 0,
         "offset": len(ROWS), "timestamp": None}
    )  # fmt: skip
    return records


@pytest.mark.parametrize("fast", [True, False])
def test_an_avro_container_of_kafka_records_is_the_same_data_as_json(tmp_path, monkeypatch, fast):
    directory = schema_dir(tmp_path, {3: KEY_SCHEMA, 11: VALUE_SCHEMA})
    source = {
        "key.format": "avro-confluent", "key.avro-confluent.schema-dir": directory,
        "value.format": "avro-confluent", "value.avro-confluent.schema-dir": directory,
    }  # fmt: skip
    s = spec(source)
    path = _container_batch(tmp_path, _kafka_records())
    want = json_batch(tmp_path)
    assert read_batch([path], s).records.to_pylist() == want
    table, out = _decode(path, s, fast, monkeypatch)  # the decode tasks' path
    got = table.select(["_op", *s.column_names]).to_pylist()
    assert got == [{k: v for k, v in r.items() if k != "_seq"} for r in want]
    assert table.column("_kafka_offset").to_pylist() == [0, 1, 2]


def test_bad_records_of_an_avro_container_are_named_by_their_position(tmp_path):
    directory = schema_dir(tmp_path, {3: KEY_SCHEMA, 11: VALUE_SCHEMA})
    source = {
        "key.format": "avro-confluent", "key.avro-confluent.schema-dir": directory,
        "value.format": "avro-confluent", "value.avro-confluent.schema-dir": directory,
    }  # fmt: skip
    records = _kafka_records()
    records[1]["value"] = records[1]["value"][:-3]  # cut short
    path = _container_batch(tmp_path, records)
    with pytest.raises(BadRecordError) as e:
        read_batch([path], spec(source))
    assert (e.value.file, e.value.line, e.value.field) == (str(path), 2, "value")
    batch = read_batch([path], spec({**source, "on-bad-record": "quarantine"}))
    assert [(d["line"], d["field"]) for d in batch.dead_letters] == [(2, "value")]
    assert batch.records.column("id").to_pylist() == [1, DELETED]
    # Not a container of Kafka records, not a container at all, or read as another format: refused whole.
    rows = tmp_path / "2.avro"
    with rows.open("wb") as fh:
        fastavro.writer(fh, fastavro.parse_schema(VALUE_SCHEMA), [avro_row(ROWS[0])])
    with pytest.raises(BadRecordError, match="holds Kafka records"):
        read_batch([rows], spec(source))
    junk = tmp_path / "3.avro"
    junk.write_bytes(b'{"key": 1}\n')
    with pytest.raises(BadRecordError, match="not an Avro object container"):
        read_batch([junk], spec(source))
    with pytest.raises(ChangelakeError, match="read as upsert-kafka"):
        read_batch(
            [path],
            TableSpec.from_dict({"name": "t.k", "columns": COLUMNS, "primary_key": ["id"]}),
            "changelog-json",
        )


def test_an_avro_container_batch_is_complete_when_it_ends_with_its_sync_marker(tmp_path):
    from changelake.inputs.landing import scan_landing

    s = spec({})
    directory = tmp_path / "landing" / s.full_name
    directory.mkdir(parents=True)
    whole = _container_batch(tmp_path, _kafka_records()).read_bytes()
    for cut, waiting in ((len(whole), False), (len(whole) - 5, True), (20, True), (3, True)):
        (directory / "1.avro").write_bytes(whole[:cut])
        landing = scan_landing(tmp_path / "landing", s, after=0)
        assert (landing.waiting_for is not None) == waiting, cut
        assert list(landing.batches) == ([] if waiting else [1])
