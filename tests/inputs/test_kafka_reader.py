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
