"""How a decode task reads a topic range (changelake.inputs.kafka.read_range), against a stand-in for
confluent-kafka's Consumer that hands out real ``Message`` objects as ``consume()`` does: in lists, with an
end-of-partition event after the last record and gaps where compaction took offsets. No broker here; the
same reads against a real broker are tests/inputs/test_kafka_source.py's."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Message, TopicPartition

from changelake.errors import BadInput
from changelake.inputs import kafka


class Consumer:
    """A partition holding records at ``offsets`` (each keyed ``k<offset>``); ``error``: the event that ends
    the partition (end of partition, or offsets deleted before the read reached them)."""

    def __init__(self, offsets, error: int = KafkaError._PARTITION_EOF):
        self.records = [
            Message(topic="t", partition=0, offset=o, key=b"k%d" % o, value=b"v", timestamp=(1, 1000 + o))
            for o in offsets
        ]
        self.error, self.asked, self.read_to = error, [], 0

    def assign(self, partitions):
        self.records = [m for m in self.records if m.offset() >= partitions[0].offset]

    def consume(self, num_messages, timeout):
        self.asked.append(num_messages)
        out, self.records = self.records[:num_messages], self.records[num_messages:]
        if out:
            self.read_to = out[-1].offset() + 1
        if not self.records:
            out.append(Message(topic="t", partition=0, offset=self.read_to, error=KafkaError(self.error)))
        return out

    def position(self, partitions):
        return [TopicPartition("t", 0, self.read_to)]

    def close(self):
        pass


@pytest.fixture
def reader(monkeypatch):
    """Read ranges from a Consumer stand-in with ``consume()`` lists of 3 records; returns its records."""
    consumers = []

    def read(offsets, start, end, **kw):
        consumer = Consumer(offsets, **kw)
        consumers.append(consumer)
        monkeypatch.setattr(kafka, "_consumer", lambda *_a, **_k: consumer)
        monkeypatch.setattr(kafka, "CONSUME_RECORDS", 3)
        return kafka.range_records({}, kafka.PartitionRange("t", 0, start, end))

    read.consumers = consumers
    return read


def test_a_range_is_its_records_in_offset_order_across_consume_lists(reader):
    records = reader(range(20), 2, 9)
    assert records.offsets == list(range(2, 9))
    assert records.keys == [b"k%d" % o for o in range(2, 9)]
    assert records.timestamps == [1000 + o for o in range(2, 9)]
    # Never more asked of a consume() than the range still holds, so the range's end is not read past.
    assert reader.consumers[-1].asked == [3, 3, 1]


def test_offsets_past_a_gap_beyond_the_range_end_are_left_out(reader):
    # Compaction took 2..4, 7..8, 10..11: a list asked for the range's last 2 offsets brings 9 and 12.
    records = reader([0, 1, 5, 6, 9, 12], 0, 10)
    assert records.offsets == [0, 1, 5, 6, 9]
    assert reader([0, 1, 5, 6, 9, 12], 0, 13).offsets == [0, 1, 5, 6, 9, 12]


def test_offsets_deleted_before_the_read_reached_them_are_an_error_naming_where(reader):
    with pytest.raises(BadInput, match=r"kafka:t/0: offsets from 4 were deleted"):
        reader(range(4), 0, 10, error=KafkaError.OFFSET_OUT_OF_RANGE)


def test_a_spec_property_sets_the_reader_fetch_sizes_but_not_how_it_reads(monkeypatch):
    import confluent_kafka

    seen = {}
    monkeypatch.setattr(confluent_kafka, "Consumer", lambda settings, logger: seen.update(settings))
    given = {"bootstrap.servers": "h:1", "max.partition.fetch.bytes": "1024", "enable.auto.commit": "true"}
    kafka._consumer(given, kafka.FETCH)
    assert seen["max.partition.fetch.bytes"] == "1024"
    assert seen["queued.min.messages"] == kafka.FETCH["queued.min.messages"]
    assert seen["enable.auto.commit"] == "false"  # the reader never commits


def _spec(**source):
    from changelake.spec import TableSpec

    columns = [{"name": "id", "type": "INT"}, {"name": "note", "type": "STRING"}]
    return TableSpec.from_dict(
        {
            "name": "t.k",
            "columns": columns,
            "primary_key": ["id"],
            "source": {"format": "upsert-kafka", **source},
        }
    )


@pytest.mark.parametrize(
    "source",
    [
        {},  # JSON key and value: their bytes as they are, line breaks as spaces
        {"key.format": "csv", "value.format": "raw", "value.fields-include": "EXCEPT_KEY"},  # text and base64
    ],
)
def test_a_topic_range_renders_the_lines_a_landed_file_of_its_records_holds(source):
    # The topic path renders a range's records in one pass (kafka_container.record_lines); each line must be
    # byte for byte the landed container line of the same record (kafka_container.line_renderer), which the
    # decoders, the errors' line numbers and the dead letters' text all rest on. Edge cases: a tombstone, a
    # null key, no timestamp, line breaks inside a value, bytes that are not UTF-8, an offset without a record.
    from changelake.inputs.formats import kafka_container

    spec = _spec(**source)
    given = [
        (10, b'{"id": 1}', b'{"id": 1, "note": "a"}', (1, 1700000000000)),
        (11, b'{"id": 2}', None, (1, 5)),  # a tombstone
        (12, None, b'{"id": 3}', (0, 0)),  # no key; no timestamp (TIMESTAMP_NOT_AVAILABLE)
        (13, b'{"id":\r\n4}', b'{"note": "x\ry\nz", "id": 4}', (2, -1)),
        (15, b"\xff\xfe{", b'{"note": "gr\xc3\xbc\xc3\x9fe \xed\xa0\x80"}', (1, 2**62)),  # 14: compacted away
    ]
    messages = [
        Message(topic="t.k-x", partition=3, offset=o, key=k, value=v, timestamp=ts) for o, k, v, ts in given
    ]
    r = kafka.PartitionRange("t.k-x", 3, 10, 17)  # 16: a transaction marker
    lines = kafka.render_lines(kafka.RangeRecords(r, messages), spec).split(b"\n")
    render = kafka_container.line_renderer(spec)
    for offset, key, value, (kind, ts) in given:
        fields = {"key": key, "value": value, "topic": "t.k-x", "partition": 3, "offset": offset}
        want = render({**fields, "timestamp": ts if kind else None}, r.label, offset)
        assert lines[offset - r.start] + b"\n" == want
    assert lines[14 - r.start] == lines[16 - r.start] == lines[-1] == b"" and len(lines) == r.size + 1
    if not source:  # a JSON part is its bytes: the line breaks are spaces, nothing else changed
        assert b'"key": {"id":  4}, "value": {"note": "x y z", "id": 4}' in lines[3]
        assert lines[5].startswith(
            b'{"key": \xff\xfe{, "value": {"note": "gr\xc3\xbc\xc3\x9fe \xed\xa0\x80"}'
        )


def test_a_topic_range_of_cdc_values_renders_each_value_as_its_line():
    # A CDC format's line is the record's value (line breaks as spaces); a null value (Debezium's tombstone
    # after a delete) and an offset without a record are empty lines, so line n stays offset start + n.
    from changelake.spec import TableSpec

    spec = TableSpec.from_dict(
        {
            "name": "t.c",
            "columns": [{"name": "id", "type": "INT"}],
            "primary_key": ["id"],
            "source": {"format": "debezium-json"},
        }
    )
    given = [(0, b'{"op":\r\n"c"}'), (1, None), (3, b"\xff")]
    messages = [Message(topic="t", partition=0, offset=o, key=b"k", value=v) for o, v in given]
    records = kafka.RangeRecords(kafka.PartitionRange("t", 0, 0, 4), messages)
    assert kafka.render_lines(records, spec) == b'{"op":  "c"}\n\n\n\xff\n'
    assert kafka.render_lines(kafka.RangeRecords(kafka.PartitionRange("t", 0, 4, 6), []), spec) == b"\n\n"
