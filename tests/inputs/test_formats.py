"""Input formats from small hand-written fixtures: upsert-kafka, Debezium, Canal, Maxwell; ordering, Kafka
redelivery detection, quarantine and source-option validation. No Spark here."""

import base64
import datetime as dt
import decimal
import json

import pytest

from changelake.errors import BadRecordError, SpecError
from changelake.inputs.readers import read_batch
from changelake.spec import TableSpec

COLUMNS = [
    {"name": "id", "type": "BIGINT"},
    {"name": "amount", "type": "DECIMAL(10,2)"},
    {"name": "ts", "type": "TIMESTAMP(3)"},
    {"name": "flag", "type": "BOOLEAN"},
    {"name": "note", "type": "STRING"},
]


def spec(source: dict, columns=COLUMNS, pk=("id",)) -> TableSpec:
    return TableSpec.from_dict({"name": "t.x", "columns": columns, "primary_key": list(pk), "source": source})


def lines(tmp_path, items, name="1.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(i if isinstance(i, str) else json.dumps(i) for i in items) + "\n")
    return path


def records(batch) -> list[tuple]:
    return [
        (r["_op"], r["id"], r["amount"], r["ts"], r["flag"], r["note"]) for r in batch.records.to_pylist()
    ]


D = decimal.Decimal
T0 = dt.datetime(2024, 1, 2, 3, 4, 5, 678000)


# --- upsert-kafka -----------------------------------------------------------------------------------------
def test_upsert_kafka_values_are_upserts_and_null_values_are_tombstones(tmp_path):
    s = spec({"format": "upsert-kafka"})
    path = lines(
        tmp_path,
        [
            {"key": {"id": 1}, "value": {"id": 1, "amount": "2.5", "note": "a"}, "partition": 0, "offset": 7},
            {"key": {"id": 1}, "value": None, "partition": 0, "offset": 8},
        ],
    )
    batch = read_batch([path], s)
    assert records(batch) == [("+U", 1, D("2.50"), None, None, "a"), ("-D", 1, None, None, None, None)]
    assert batch.kafka_offsets == {":0": 8} and batch.redelivered == 0


def test_upsert_kafka_key_prefix_and_except_key(tmp_path):
    s = spec({"format": "upsert-kafka", "key.fields-prefix": "k_", "value.fields-include": "EXCEPT_KEY"})
    ok = lines(tmp_path, [{"key": {"k_id": 3}, "value": {"note": "n"}}])
    assert records(read_batch([ok], s)) == [("+U", 3, None, None, None, "n")]
    with pytest.raises(BadRecordError, match=r"2 field 'key.id': key field lacks the key.fields-prefix"):
        read_batch(
            [lines(tmp_path, [{"key": {"k_id": 1}, "value": None}, {"key": {"id": 1}, "value": None}])], s
        )
    with pytest.raises(BadRecordError, match=r"field 'value.id': key field in the value"):
        read_batch([lines(tmp_path, [{"key": {"k_id": 1}, "value": {"id": 1}}])], s)


@pytest.mark.parametrize(
    ("record", "field", "message"),
    [
        ({"value": {"id": 1}}, "key", "missing; upsert-kafka records need key and value"),
        ({"key": [1], "value": None}, "key", "expected a JSON object, got array"),
        ({"key": {"id": 1}, "value": "x"}, "value", "expected a JSON object, got str"),
        ({"key": {"note": "x"}, "value": None}, "key.note", "not a primary-key column"),
        ({"key": {}, "value": None}, "key.id", "primary-key field missing from the record key"),
        ({"key": {"id": 1}, "value": {"id": 2}}, "value.id", "differs from the record key"),
        ({"key": {"id": 1}, "value": None, "offset": -1, "partition": 0}, "offset", "non-negative integer"),
        ({"key": {"id": 1}, "value": None, "extra": 1}, "extra", "unknown top-level field"),
        ({"key": {"id": 1}, "value": {"amount": "x"}}, "amount", "is not a decimal number"),
    ],
)
def test_upsert_kafka_malformed_records_name_line_and_field(tmp_path, record, field, message):
    path = lines(tmp_path, [{"key": {"id": 9}, "value": None}, record])
    with pytest.raises(BadRecordError, match=message) as e:
        read_batch([path], spec({"format": "upsert-kafka"}))
    assert (e.value.file, e.value.line, e.value.field) == (str(path), 2, field)


def test_kafka_redeliveries_are_counted_and_dropped_only_with_dedup(tmp_path):
    msgs = [
        {
            "key": {"id": 1},
            "value": {"note": "a"},
            "topic": "t",
            "partition": 0,
            "offset": 5,
        },  # applied before
        {"key": {"id": 2}, "value": {"note": "b"}, "topic": "t", "partition": 0, "offset": 6},
        {"key": {"id": 3}, "value": {"note": "c"}, "topic": "t", "partition": 1, "offset": 0},
        {
            "key": {"id": 2},
            "value": {"note": "b"},
            "topic": "t",
            "partition": 0,
            "offset": 6,
        },  # repeat in batch
    ]
    path = lines(tmp_path, msgs)
    applied = {"t:0": 5}
    plain = read_batch([path], spec({"format": "upsert-kafka"}), applied_offsets=applied)
    assert (plain.redelivered, plain.deduplicated, plain.num_records) == (2, 0, 4)
    dedup = read_batch(
        [path], spec({"format": "upsert-kafka", "dedup": "kafka-offsets"}), applied_offsets=applied
    )
    assert (dedup.redelivered, dedup.deduplicated) == (2, 2)
    assert [r[1] for r in records(dedup)] == [2, 3]
    assert dedup.kafka_offsets == {"t:0": 6, "t:1": 0}


def test_kafka_offset_ordering_sorts_per_partition_stably(tmp_path):
    msgs = [
        {"key": {"id": 1}, "value": {"note": "late"}, "partition": 0, "offset": 9},
        {"key": {"id": 1}, "value": {"note": "early"}, "partition": 0, "offset": 3},
    ]
    s = spec({"format": "upsert-kafka", "ordering": "kafka-offset"})
    assert [r[5] for r in records(read_batch([lines(tmp_path, msgs)], s))] == ["early", "late"]
    with pytest.raises(BadRecordError, match="field 'partition'"):
        read_batch([lines(tmp_path, [{"key": {"id": 1}, "value": None}])], s)


# --- debezium-json ----------------------------------------------------------------------------------------
def test_debezium_ops_with_and_without_envelope(tmp_path):
    ms = int((T0 - dt.datetime(1970, 1, 1)).total_seconds() * 1000)
    events = [
        {"op": "r", "before": None, "after": {"id": 1, "amount": "1.10", "ts": ms, "flag": True}},
        {"op": "c", "before": None, "after": {"id": 2, "amount": 2}},
        {"op": "u", "before": {"id": 1, "amount": "1.10"}, "after": {"id": 1, "amount": "3.30", "note": "u"}},
        {"op": "u", "before": None, "after": {"id": 2, "amount": 4}},  # no before image captured
        {"op": "d", "before": {"id": 2}, "after": None},
        "null",  # the Kafka tombstone Debezium writes after a delete
    ]
    plain = read_batch([lines(tmp_path, events)], spec({"format": "debezium-json"}))
    expected = [
        ("+I", 1, D("1.10"), T0, True, None),
        ("+I", 2, D("2.00"), None, None, None),
        ("-U", 1, D("1.10"), None, None, None),
        ("+U", 1, D("3.30"), None, None, "u"),
        ("+U", 2, D("4.00"), None, None, None),
        ("-D", 2, None, None, None, None),
    ]
    assert records(plain) == expected and plain.skipped == 1
    wrapped = [
        {"schema": {}, "payload": e} if e != "null" else {"schema": None, "payload": None} for e in events
    ]
    enveloped = read_batch([lines(tmp_path, wrapped, "2.jsonl")], spec({"format": "debezium-json"}))
    assert records(enveloped) == expected


def test_debezium_schema_decides_decimal_and_timestamp_encodings(tmp_path):
    unscaled = base64.b64encode((12345).to_bytes(2, "big", signed=True)).decode()  # 123.45 at scale 2
    micros = int((T0 - dt.datetime(1970, 1, 1)).total_seconds() * 1_000_000)
    schema = {
        "fields": [
            {
                "field": "after",
                "fields": [
                    {
                        "field": "amount",
                        "name": "org.apache.kafka.connect.data.Decimal",
                        "parameters": {"scale": "2"},
                    },
                    {"field": "ts", "name": "io.debezium.time.MicroTimestamp"},
                ],
            }
        ]
    }
    event = {"schema": schema, "payload": {"op": "c", "after": {"id": 1, "amount": unscaled, "ts": micros}}}
    assert records(read_batch([lines(tmp_path, [event])], spec({"format": "debezium-json"}))) == [
        ("+I", 1, D("123.45"), T0, None, None)
    ]
    negative = base64.b64encode((-5).to_bytes(1, "big", signed=True)).decode()
    event = {"op": "c", "after": {"id": 2, "amount": negative, "ts": micros // 1000}}
    assert records(read_batch([lines(tmp_path, [event], "2.jsonl")], spec({"format": "debezium-json"}))) == [
        ("+I", 2, D("-0.05"), T0, None, None)
    ]


@pytest.mark.parametrize(
    ("event", "field", "message"),
    [
        ({"op": "x", "after": {"id": 1}}, "op", "unknown Debezium op 'x'"),
        ({"op": "c", "after": None}, "after", "expected a JSON object, got null"),
        ({"op": "d", "before": None}, "before", "expected a JSON object, got null"),
        ({"schema": {}, "payload": [1]}, "payload", "expected a JSON object, got array"),
        ({"schema": {}, "payload": {}, "extra": 1}, "extra", "unknown top-level field"),
        ({"op": "c", "after": {"id": 1, "amount": "%%%"}}, "amount", "neither a decimal number nor base64"),
        ({"op": "c", "after": {"id": 1, "nope": 1}}, "nope", "unknown column"),
        ({"op": "c", "after": {"amount": 1}}, "id", "primary key column is missing or null"),
        ('{"op": "c", "after": {', None, "malformed JSON"),
    ],
)
def test_debezium_malformed_envelopes(tmp_path, event, field, message):
    path = lines(tmp_path, [{"op": "c", "after": {"id": 9}}, event])
    with pytest.raises(BadRecordError, match=message) as e:
        read_batch([path], spec({"format": "debezium-json"}))
    assert (e.value.line, e.value.field) == (2, field)


def test_debezium_filters_and_lsn_ordering(tmp_path):
    s = spec({"format": "debezium-json", "ordering": "source.lsn", "table.include": "orders"})
    events = [
        {"op": "c", "after": {"id": 1, "note": "second"}, "source": {"table": "orders", "lsn": 20}},
        {"op": "c", "after": {"id": 1, "note": "other table"}, "source": {"table": "items", "lsn": 5}},
        {"op": "c", "after": {"id": 1, "note": "first"}, "source": {"table": "orders", "lsn": 10}},
    ]
    batch = read_batch([lines(tmp_path, events)], s)
    assert [r[5] for r in records(batch)] == ["first", "second"] and batch.skipped == 1
    with pytest.raises(BadRecordError, match="field 'source.lsn': ordering field missing"):
        read_batch([lines(tmp_path, [{"op": "c", "after": {"id": 1}, "source": {"table": "orders"}}])], s)


# --- canal-json / maxwell-json ----------------------------------------------------------------------------
def test_canal_rows_types_from_strings_and_update_before_images(tmp_path):
    events = [
        {"type": "INSERT", "database": "db", "table": "t", "data": [
            {"id": "1", "amount": "1.5", "ts": "2024-01-02 03:04:05.678", "flag": "1", "note": "a"},
            {"id": "2", "amount": "2", "ts": None, "flag": "0", "note": "b"}]},
        {"type": "UPDATE", "data": [{"id": "1", "amount": "9.99", "ts": None, "flag": "1", "note": "a"}],
         "old": [{"amount": "1.5"}]},
        {"type": "DELETE", "data": [{"id": "2", "amount": "2", "ts": None, "flag": "0", "note": "b"}]},
        {"type": "ALTER", "isDdl": True, "data": None, "sql": "alter table t add c int"},
    ]  # fmt: skip
    batch = read_batch([lines(tmp_path, events)], spec({"format": "canal-json"}))
    assert records(batch) == [
        ("+I", 1, D("1.50"), T0, True, "a"),
        ("+I", 2, D("2.00"), None, False, "b"),
        ("-U", 1, D("1.50"), None, True, "a"),
        ("+U", 1, D("9.99"), None, True, "a"),
        ("-D", 2, D("2.00"), None, False, "b"),
    ]
    assert batch.skipped == 1


@pytest.mark.parametrize(
    ("event", "field", "message"),
    [
        ({"type": "INSERT", "data": {"id": "1"}}, "data", "expected a JSON array of row objects"),
        ({"type": "UPDATE", "data": [{"id": "1"}], "old": []}, "old", "expected a JSON array of 1 object"),
        ({"type": "INSERT", "data": [{"id": "one"}]}, "id", "'one' is not a number"),
        ({"type": 5, "data": []}, "type", "expected a Canal event type string"),
    ],
)
def test_canal_malformed(tmp_path, event, field, message):
    with pytest.raises(BadRecordError, match=message) as e:
        read_batch([lines(tmp_path, [event])], spec({"format": "canal-json"}))
    assert (e.value.line, e.value.field) == (1, field)


def test_maxwell_types_and_database_filter(tmp_path):
    events = [
        {"database": "shop", "table": "t", "type": "insert", "ts": 1, "data": {"id": 1, "amount": 1.25, "note": "a"}},
        {"database": "shop", "table": "t", "type": "update", "ts": 2, "data": {"id": 1, "amount": 2, "note": "a"},
         "old": {"amount": 1.25}},
        {"database": "other", "table": "t", "type": "delete", "ts": 3, "data": {"id": 1}},
        {"database": "shop", "table": "t", "type": "bootstrap-start", "ts": 4, "data": {}},
        {"database": "shop", "table": "t", "type": "delete", "ts": 5, "data": {"id": 1}},
    ]  # fmt: skip
    batch = read_batch(
        [lines(tmp_path, events)], spec({"format": "maxwell-json", "database.include": "shop"})
    )
    assert records(batch) == [
        ("+I", 1, D("1.25"), None, None, "a"),
        ("-U", 1, D("1.25"), None, None, "a"),
        ("+U", 1, D("2.00"), None, None, "a"),
        ("-D", 1, None, None, None, None),
    ]
    assert batch.skipped == 2
    with pytest.raises(BadRecordError, match="unknown Maxwell type 'upsert'"):
        read_batch([lines(tmp_path, [{"type": "upsert", "data": {}}])], spec({"format": "maxwell-json"}))


# --- quarantine -------------------------------------------------------------------------------------------
def test_quarantine_keeps_good_records_and_names_every_bad_line(tmp_path):
    s = spec({"format": "changelog-json", "on-bad-record": "quarantine"})
    items = [
        {"op": "+I", "data": {"id": 1}},
        "{not json",
        {"op": "+X", "data": {"id": 2}},
        {"op": "+I", "data": {"id": 3, "amount": "abc"}},
        {"op": "+I", "data": {"id": 4}},
    ]
    batch = read_batch([lines(tmp_path, items)], s)
    assert [r[1] for r in records(batch)] == [1, 4]
    assert [(d["line"], d["field"]) for d in batch.dead_letters] == [(2, None), (3, "op"), (4, "amount")]
    assert batch.dead_letters[0]["raw"] == "{not json" and "malformed JSON" in batch.dead_letters[0]["reason"]
    assert batch.messages == 5 and batch.quarantined == 3


def test_quarantine_of_parquet_rows(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "1.parquet"
    pq.write_table(pa.table({"op": ["+I", "??", "+I", "+I"], "id": [1, 2, None, 4]}), path)
    batch = read_batch([path], spec({"format": "changelog-parquet", "on-bad-record": "quarantine"}))
    assert [r[1] for r in records(batch)] == [1, 4] and [r["_seq"] for r in batch.records.to_pylist()] == [
        0,
        1,
    ]
    assert [(d["line"], d["field"]) for d in batch.dead_letters] == [(2, "op"), (3, "id")]
    with pytest.raises(BadRecordError, match=r"1.parquet:2 field 'op'"):
        read_batch([path], spec({"format": "changelog-parquet"}))


# --- source options ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"format": "avro"}, "source option 'format' must be one of"),
        ({"format": "debezium-json", "dedup": "kafka-offsets"}, "needs the records' Kafka metadata"),
        ({"format": "upsert-kafka", "on-bad-record": "skip"}, "'on-bad-record' must be one of"),
        ({"format": "upsert-kafka", "ordering": "1bad"}, "must be 'arrival', 'kafka-offset' or a dotted"),
        ({"format": "canal-json", "key.fields-prefix": "k"}, "applies to upsert-kafka only"),
        ({"format": "upsert-kafka", "table.include": "x"}, "applies to"),
        ({"format": "canal-json", "database.include": "("}, "invalid regular expression"),
        ({"formt": "canal-json"}, "unknown source option 'formt'"),
    ],
)
def test_source_options_are_validated(source, message):
    with pytest.raises(SpecError, match=message):
        spec(source)
