"""Issue 37 (formats) end to end (Spark): upsert-kafka batches in each key/value format apply to the same
table and changelog as the same changes in JSON; Confluent wire bytes built by hand apply as the same data
written as JSON; a bad Avro record stops `changelake apply` with exit 2 naming file, line and field, and
leaves the table as it was."""

from __future__ import annotations

import base64
import json
import struct

import fastavro
import pytest
import yaml

from changelake.inputs.datagen import generate
from changelake.spec import TableSpec
from tests.helpers import REPO, changelog_of, rows_of

pytestmark = pytest.mark.integration

ORDERS = yaml.safe_load((REPO / "examples" / "tables" / "shop.orders.yaml").read_text())


def add_spec(lake, data: dict) -> TableSpec:
    (lake.settings.tables_dir / f"{data['name']}.yaml").write_text(yaml.safe_dump(data))
    return TableSpec.from_dict(data)


def test_each_key_value_format_gives_the_same_table_and_changelog_as_json(lake, tmp_path):
    schemas = str(tmp_path / "schemas")
    cases = {
        "json": {},
        "avro_confluent": {
            "key.format": "avro-confluent", "key.avro-confluent.schema-dir": schemas,
            "value.format": "avro-confluent", "value.avro-confluent.schema-dir": schemas,
        },
        "avro": {"key.format": "avro", "value.format": "avro", "value.avro.encoding": "single-object"},
        "csv_raw": {"key.format": "raw", "value.format": "csv", "value.csv.null-literal": "\\N"},
    }  # fmt: skip
    results = {}
    for name, formats in cases.items():
        data = {**ORDERS, "name": f"kf.{name}"}
        data["source"] = {"format": "upsert-kafka", "dedup": "kafka-offsets", **formats}
        data["datagen"] = {**ORDERS["datagen"], "records": 40, "keys": 30, "redelivery": 0.1}
        spec = add_spec(lake, data)
        generate(spec, lake.settings.landing_dir, batches=2, seed=11, stream="orders")
        assert [r.status for r in lake.apply_pending(spec.full_name)] == ["applied"] * 2, name
        results[name] = (rows_of(lake.rows(spec.full_name)), changelog_of(lake, spec.full_name))
    reference = results["json"]
    assert len(reference[0]) > 5 and {c[1] for c in reference[1]} >= {"+I", "+U", "-D"}
    for name, got in results.items():
        assert got == reference, name


VALUE = {
    "type": "record", "name": "Payment", "namespace": "pay",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "paid_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}  # fmt: skip
COLUMNS = [
    {"name": "id", "type": "BIGINT"},
    {"name": "amount", "type": "DECIMAL(10,2)"},
    {"name": "paid_at", "type": "TIMESTAMP(3)"},
    {"name": "note", "type": "STRING"},
]


def wire(schema_id: int, record: dict) -> str:
    import io

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(VALUE), record)
    return base64.b64encode(b"\x00" + struct.pack(">I", schema_id) + buf.getvalue()).decode()


def test_hand_built_confluent_bytes_apply_as_the_same_data_as_json(lake, tmp_path, capfd):
    import datetime as dt
    import decimal

    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "5.avsc").write_text(json.dumps(VALUE))
    base = {"name": "", "columns": COLUMNS, "primary_key": ["id"], "options": {"bucket.num": "2"}}
    avro = {**base, "name": "kf.pay_avro"}
    avro["source"] = {
        "format": "upsert-kafka",
        "value.format": "avro-confluent",
        "value.avro-confluent.schema-dir": str(tmp_path / "schemas"),
    }
    as_json = {**base, "name": "kf.pay_json", "source": {"format": "upsert-kafka"}}
    add_spec(lake, avro)
    add_spec(lake, as_json)
    at = dt.datetime(2026, 3, 1, 12, 0, 0, 125000)
    changes = [(i, decimal.Decimal(f"{i}.25"), at + dt.timedelta(minutes=i), None if i % 3 else f"n{i}")
               for i in range(1, 9)]  # fmt: skip
    avro_lines = [
        {"key": {"id": i}, "value": wire(5, {"id": i, "amount": a, "paid_at": t, "note": n}), "offset": i,
         "partition": 0, "topic": "pay"}
        for i, a, t, n in changes
    ] + [{"key": {"id": 2}, "value": None, "offset": 20, "partition": 0, "topic": "pay"}]  # fmt: skip
    json_lines = [
        {"key": {"id": i}, "value": {"id": i, "amount": str(a), "paid_at": t.isoformat(), "note": n}, "offset": i,
         "partition": 0, "topic": "pay"}
        for i, a, t, n in changes
    ] + [{"key": {"id": 2}, "value": None, "offset": 20, "partition": 0, "topic": "pay"}]  # fmt: skip
    for name, lines in (("kf.pay_avro", avro_lines), ("kf.pay_json", json_lines)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        assert lake.apply(name, file=path, batch_id=1).status == "applied"
    # The same Kafka records landed as an Avro container batch (<batch_id>.avro), picked up by apply_pending.
    add_spec(lake, {**avro, "name": "kf.pay_ocf"})
    landed = lake.settings.landing_dir / "kf.pay_ocf"
    landed.mkdir(parents=True, exist_ok=True)
    container = {
        "type": "record", "name": "KafkaRecord",
        "fields": [{"name": "key", "type": ["null", "bytes"]}, {"name": "value", "type": ["null", "bytes"]},
                   {"name": "topic", "type": "string"}, {"name": "partition", "type": "int"},
                   {"name": "offset", "type": "long"}],
    }  # fmt: skip
    with (landed / "1.avro").open("wb") as fh:
        fastavro.writer(
            fh,
            fastavro.parse_schema(container),
            [{**line, "key": json.dumps(line["key"]).encode(),
              "value": None if line["value"] is None else base64.b64decode(line["value"])}
             for line in avro_lines],
        )  # fmt: skip
    assert [r.status for r in lake.apply_pending("kf.pay_ocf")] == ["applied"]
    assert rows_of(lake.rows("kf.pay_ocf")) == rows_of(lake.rows("kf.pay_json"))
    got = rows_of(lake.rows("kf.pay_avro"))
    assert got == rows_of(lake.rows("kf.pay_json"))
    assert len(got) == 7 and got[0][2] == at + dt.timedelta(minutes=1)
    assert changelog_of(lake, "kf.pay_avro") == changelog_of(lake, "kf.pay_json")

    # A truncated Avro value in the next batch: exit 2 naming file, line and field; the table unchanged.
    from changelake.cli import main

    before = lake.rows("kf.pay_avro").count(), rows_of(lake.rows("kf.pay_avro"))
    bad = tmp_path / "bad.jsonl"
    good_line = {**avro_lines[0], "offset": 30}
    cut = {**avro_lines[1], "offset": 31, "value": wire(5, {"id": 2, "amount": decimal.Decimal(1),
                                                              "paid_at": at, "note": "x"})[:-4]}  # fmt: skip
    bad.write_text(json.dumps(good_line) + "\n" + json.dumps(cut) + "\n")
    capfd.readouterr()
    home = lake.settings.tables_dir.parent
    code = main(["--home", str(home), "--tables", str(lake.settings.tables_dir),
                 "apply", "kf.pay_avro", "--file", str(bad), "--batch-id", "2"])  # fmt: skip
    err = capfd.readouterr().err
    assert code == 2, err[-2000:]
    assert f"{bad}:2 field 'value'" in err
    assert (lake.rows("kf.pay_avro").count(), rows_of(lake.rows("kf.pay_avro"))) == before
