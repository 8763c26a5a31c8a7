"""Kafka topics as a source: a table whose ``source:`` names a topic takes its batches from the topic.

An apply fixes, at its start, an offset range per topic-partition: from the offset after the last one the
table applied (kept in the batch's snapshot state beside the rows and the changelog, ``changelake.kafka-offsets``)
up to the partition's high watermark read then (:func:`plan`). The ranges are one batch of the table's
``kafka`` writer. Decode tasks read their ranges with librdkafka (``confluent-kafka``), in the applying process
for a small batch and in Spark tasks otherwise, so the driver lists partitions and offsets but never holds the
records. The commit names the ranges' ends, so a crash anywhere re-reads the same offsets and converges, and no
consumer group is the source of truth (with ``properties.group.id`` the offsets are also committed to the group,
for monitoring).

A range becomes the JSON lines the landed-file decoders read (:func:`range_lines`), line *n* holding offset
``start + n``: the record's value (upsert-kafka: its key, value, topic, partition, offset and timestamp, as an
upsert-kafka line), and an empty line for an offset the topic no longer holds (compaction, transaction markers).
Errors and dead letters therefore name ``kafka:<topic>/<partition>:<offset>``.

Client settings are Kafka's own names: the spec's ``properties.*``, over the file ``$CHANGELAKE_KAFKA_CONFIG``
(else ``$CHANGELAKE_HOME/kafka/client.properties``, written by ``make kafka``), which is where credentials go.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from changelake.errors import BadInput, ChangelakeError, ConfigError

if TYPE_CHECKING:
    from changelake.config import Settings
    from changelake.source_options import KafkaOptions
    from changelake.spec import TableSpec

#: The writer of a table's topic batches (docs/operations.md#writers-one-sequence-each).
KAFKA_WRITER = "kafka"
#: How a topic range names itself where a landed range names its file: ``kafka:<topic>/<partition>``.
PREFIX = "kafka:"
CONFIG_ENV = "CHANGELAKE_KAFKA_CONFIG"
#: How long a metadata request or a range's read may wait for the broker before the apply gives up.
TIMEOUT_S = 30.0
#: Settings changelake's reads always use (a range is read once, by offset, and never committed by the reader).
_READER = {"enable.auto.commit": "false", "enable.partition.eof": "true", "auto.offset.reset": "error"}
#: librdkafka's own log lines (a connection closed as a reader closes, a retry) go here, not to stderr: what
#: matters reaches the apply as an error of the request or the message.
_LOG = logging.getLogger("changelake.kafka.client")
_LOG.addHandler(logging.NullHandler())
_LOG.propagate = False


@dataclass(frozen=True)
class PartitionRange:
    """Offsets ``[start, end)`` of one topic-partition: one batch's share of it (``end``: the high watermark
    the apply read at its start)."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def key(self) -> str:
        """The partition as the Kafka offsets state keys it: ``topic:partition``."""
        return f"{self.topic}:{self.partition}"

    @property
    def label(self) -> str:
        return f"{PREFIX}{self.topic}/{self.partition}"

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def is_topic_range(path: str) -> bool:
    """Whether a decode range's path names a topic-partition (:attr:`PartitionRange.label`)."""
    return path.startswith(PREFIX)


def parse_label(path: str) -> tuple[str, int]:
    topic, partition = path[len(PREFIX) :].rsplit("/", 1)
    return topic, int(partition)


# --- settings -------------------------------------------------------------------------------------------------
def client_config(spec: TableSpec, settings: Settings) -> dict[str, str]:
    """The client settings of a table's topic source: the client properties file's, then the spec's
    ``properties.*`` over them. ``bootstrap.servers`` is required."""
    kafka = _options(spec)
    config = dict(read_properties(properties_file(settings)))
    config.update(dict(kafka.properties))
    if not config.get("bootstrap.servers"):
        raise ConfigError(
            f"{spec.full_name}: the Kafka source has no bootstrap.servers: set 'properties.bootstrap.servers' in its "
            f"spec, or in {properties_file(settings)} (make kafka writes it), or point {CONFIG_ENV} at a client "
            "properties file"
        )
    return config


def properties_file(settings: Settings) -> Path:
    """Where the client properties are read from: ``$CHANGELAKE_KAFKA_CONFIG``, else the home's ``kafka/``."""
    given = os.environ.get(CONFIG_ENV)
    return Path(given) if given else settings.home / "kafka" / "client.properties"


def read_properties(path: Path) -> dict[str, str]:
    """A Java properties file's ``key=value`` (or ``key: value``) lines; ``#``/``!`` comments. Missing: empty."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the Kafka client properties: {e.strerror or e}") from None
    out = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if cut < 0:
            raise ConfigError(f"{path}:{number}: expected key=value")
        out[line[:cut].strip()] = line[cut + 1 :].strip()
    return out


def _options(spec: TableSpec) -> KafkaOptions:
    kafka = spec.source_options.kafka
    if kafka is None:
        raise ChangelakeError(f"{spec.full_name}: its source names no Kafka topic")
    return kafka


def _consumer(config: dict[str, str], defaults: dict[str, str] | None = None):
    """A consumer with the client settings over ``defaults`` (a reader's fetch sizes), and changelake's reading
    settings over both."""
    from confluent_kafka import Consumer

    settings = {"group.id": config.get("group.id") or "changelake", **(defaults or {}), **config, **_READER}
    try:
        return Consumer(settings, logger=_LOG)
    except Exception as e:  # a bad setting: librdkafka's words, with the setting
        raise ConfigError(f"Kafka client settings refused: {e}") from None


# --- planning (the driver) ------------------------------------------------------------------------------------
def plan(
    spec: TableSpec,
    config: dict[str, str],
    committed: dict[str, int],
    progress: Callable[[str], None] = lambda _m: None,
    timeout: float = TIMEOUT_S,
) -> list[PartitionRange]:
    """Every partition of the source's topics with the range this apply reads: after the table's last applied
    offset (``committed``: ``topic:partition`` -> offset) up to the high watermark now.

    A partition the table never read starts where ``scan.startup.mode`` says on the table's first read, and at
    its beginning once the table reads the topic already (a partition added later, as Flink's source reads a
    discovered partition). Offsets that retention or compaction deleted before they were applied are an error
    (BadInput), never skipped in silence."""
    from confluent_kafka import TopicPartition

    kafka = _options(spec)
    consumer = _consumer(config)
    try:
        partitions = _partitions(consumer, kafka, spec, timeout)
        reading = any(_topic_of(key) in {t for t, _ in partitions} for key in committed)
        out: list[PartitionRange] = []
        for topic, partition in partitions:
            tp = TopicPartition(topic, partition)
            low, high = _watermarks(consumer, tp, spec, timeout)
            key = f"{topic}:{partition}"
            if key in committed:
                start = committed[key] + 1
            elif reading:
                start = low
            else:
                start = _startup_offset(consumer, kafka, tp, low, high, spec)
            if start < low:
                raise BadInput(
                    f"{spec.full_name}: offsets {start}..{low - 1} of {topic} partition {partition} were deleted "
                    f"(retention or compaction of the topic) before the table applied them: they are lost to it. "
                    f"Nothing was applied; see docs/inputs.md#kafka-topics to go on from offset {low}"
                )
            if start > high:
                raise BadInput(
                    f"{spec.full_name}: the table applied {topic} partition {partition} up to offset {start - 1}, "
                    f"but the partition ends at {high}: was the topic deleted and created again?"
                )
            out.append(PartitionRange(topic, partition, start, high))
    finally:
        consumer.close()
    pending = sum(r.size for r in out)
    progress(
        f"[{spec.full_name}] kafka: {len(out)} partition(s) of {_describe(kafka)}, {pending:,} offset(s) to read"
    )
    return out


def _partitions(consumer, kafka: KafkaOptions, spec: TableSpec, timeout: float) -> list[tuple[str, int]]:
    try:
        metadata = consumer.list_topics(timeout=timeout)
    except Exception as e:
        raise ConfigError(f"{spec.full_name}: cannot reach the Kafka brokers: {e}") from None
    found = []
    for name, topic in sorted(metadata.topics.items()):
        if not kafka.matches(name) or name.startswith("__"):
            continue
        if topic.error is not None:
            raise ConfigError(f"{spec.full_name}: Kafka topic {name}: {topic.error}")
        found += [(name, p) for p in sorted(topic.partitions)]
    missing = [t for t in kafka.topics if t not in metadata.topics]
    if missing:
        raise ConfigError(f"{spec.full_name}: Kafka topic(s) {missing} do not exist")
    return found


def _watermarks(consumer, tp, spec: TableSpec, timeout: float) -> tuple[int, int]:
    try:
        return consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
    except Exception as e:
        raise ConfigError(
            f"{spec.full_name}: cannot read the offsets of {tp.topic} partition {tp.partition}: {e}"
        ) from None


def _startup_offset(consumer, kafka: KafkaOptions, tp, low: int, high: int, spec: TableSpec) -> int:
    """Where the table's first read of a partition starts (``scan.startup.mode``)."""
    mode = kafka.startup_mode
    if mode == "earliest-offset":
        return low
    if mode == "latest-offset":
        return high
    if mode == "specific-offsets":
        return dict(kafka.specific_offsets).get(tp.partition, low)
    if mode == "timestamp":
        from confluent_kafka import TopicPartition

        (found,) = consumer.offsets_for_times(
            [TopicPartition(tp.topic, tp.partition, kafka.timestamp_millis or 0)], timeout=TIMEOUT_S
        )
        return high if found.offset < 0 else found.offset  # no record at or after the time: from the end
    (committed,) = consumer.committed([tp], timeout=TIMEOUT_S)  # group-offsets
    if committed.offset >= 0:
        return committed.offset
    reset = dict(kafka.properties).get("auto.offset.reset", "none")
    if reset in ("earliest", "smallest"):
        return low
    if reset in ("latest", "largest"):
        return high
    raise BadInput(
        f"{spec.full_name}: 'scan.startup.mode: group-offsets', but group {dict(kafka.properties)['group.id']!r} has "
        f"no committed offset for {tp.topic} partition {tp.partition} (set properties.auto.offset.reset to "
        "earliest or latest, as for Flink's Kafka source)"
    )


def _topic_of(key: str) -> str:
    return key.rsplit(":", 1)[0]


def _describe(kafka: KafkaOptions) -> str:
    return ", ".join(kafka.topics) if kafka.pattern is None else f"topics matching {kafka.pattern.pattern!r}"


def checksum(ranges: list[PartitionRange], fmt: str | None) -> str:
    """A topic batch's input checksum: its ranges (a topic's records at given offsets never change) and format."""
    text = json.dumps([fmt, [[r.topic, r.partition, r.start, r.end] for r in ranges]])
    return hashlib.sha256(text.encode()).hexdigest()


def input_record(spec: TableSpec, ranges: list[PartitionRange]) -> str:
    """How a topic batch was read, for its snapshot summary (``changelake.input``; landed files' counterpart is
    :func:`changelake.inputs.landing.input_record`)."""
    return json.dumps(
        {
            "columns": list(spec.column_names),
            "source": spec.source,
            "format": spec.source.get("format"),
            "target_columns": None,
            "files": [],
            "landed": False,
            "kafka": [[r.topic, r.partition, r.start, r.end] for r in ranges],
        },
        sort_keys=True,
        default=str,
    )


def commit_group_offsets(config: dict[str, str], ranges: list[PartitionRange]) -> None:
    """Commit the applied ranges' ends to ``group.id`` (monitoring only: the table's state is the truth)."""
    from confluent_kafka import TopicPartition

    if not config.get("group.id"):
        return
    consumer = _consumer(config)
    try:
        consumer.commit(
            offsets=[TopicPartition(r.topic, r.partition, r.end) for r in ranges if r.size],
            asynchronous=False,
        )
    finally:
        consumer.close()


#: How long ``status`` waits for the brokers (it must answer at once; a broker away is a problem it shows).
STATUS_TIMEOUT_S = 3.0


def topic_status(reader: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``status`` rows with ``kafka_lag``: for a table whose source is a Kafka topic, the offsets its
    partitions hold after the table's last applied ones (None for the other tables). A broker that does not
    answer within a few seconds, or offsets lost to retention, are the row's ``problem``."""
    from changelake.identifiers import split_table_name
    from changelake.storage.summary import BatchSummary

    specs = dict(reader.specs())
    for row in rows:
        row["kafka_lag"] = None
        spec = specs.get(row["table"])
        if spec is None or spec.source_options.kafka is None:
            continue
        source = reader._source(*split_table_name(spec.full_name)) if row.get("exists") else None
        committed: dict[str, int] = {}
        if source is not None:
            _, current = source.current()
            head = BatchSummary.from_properties(current) if current.get("changelake.batch-id") else None
            committed = dict(head.kafka_offsets) if head else {}
        try:
            ranges = plan(spec, client_config(spec, reader.settings), committed, timeout=STATUS_TIMEOUT_S)
            row["kafka_lag"] = sum(r.size for r in ranges)
        except ChangelakeError as e:
            row["problem"] = str(e) if not row.get("problem") else f"{row['problem']}; {e}"
    return rows


# --- reading a range (a decode task) ----------------------------------------------------------------------
#: A range is read in ``consume()`` calls of up to this many records: the client's own list of them is what the
#: decode takes (:class:`RangeRecords`), so the Python work per call, not per record, is what a bigger one saves.
CONSUME_RECORDS = 100_000
#: The fetches of a range's reader, unless the client settings say otherwise: a partition's 16 MiB a request
#: (librdkafka's default is 1 MiB: a round trip per ~12k records of the bench's Avro) and its queue kept full
#: up to 64 MiB or a million records ahead of the decode (the default, 100k records, is one consume() list).
FETCH = {
    "fetch.max.bytes": "52428800",
    "max.partition.fetch.bytes": "16777216",
    "queued.min.messages": "1000000",
    "queued.max.messages.kbytes": "65536",
}


def read_range(config: dict[str, str], r: PartitionRange) -> Iterator[list[Any]]:
    """The records at offsets ``[r.start, r.end)`` of one partition, in offset order, as lists of
    confluent-kafka ``Message`` objects as ``consume()`` returns them (without the client's end-of-partition
    events). Offsets the partition no longer holds are simply absent; offsets deleted before the read reached
    them raise BadInput."""
    from confluent_kafka import Message, TopicPartition

    if not r.size:
        return
    consumer = _consumer(config, FETCH)
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
        position = r.start
        idle_since = time.monotonic()
        while position < r.end:
            # consume() waits for as many messages as asked: never more than the range still holds (a
            # partition's end comes as an end-of-partition event, so a range short of records ends early too).
            messages = consumer.consume(num_messages=min(CONSUME_RECORDS, r.end - position), timeout=1.0)
            progressed = False
            if any(map(Message.error, messages)):  # rare: end-of-partition events, or an error to raise
                messages = _without_eof(messages, r, position)
            if messages:
                last = messages[-1].offset()
                if last >= r.end:  # past a gap (compaction), the records after the range's end
                    messages = messages[: bisect.bisect_left(_offsets(messages), r.end)]
                    position = r.end
                else:
                    position = last + 1
                progressed = True
                if messages:
                    yield messages
            if position < r.end:
                # Compaction and transaction markers leave offsets without records: the consumer's position says
                # how far the partition has been read.
                (at,) = consumer.position([TopicPartition(r.topic, r.partition)])
                if at.offset > position:
                    position, progressed = at.offset, True
            if progressed:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > TIMEOUT_S:
                raise ChangelakeError(
                    f"{r.label}: no records from offset {position} for {TIMEOUT_S:.0f} s, before the range's end "
                    f"{r.end}; is the broker reachable?"
                )
    finally:
        consumer.close()


def _without_eof(messages: list[Any], r: PartitionRange, position: int) -> list[Any]:
    """A ``consume()`` batch without its end-of-partition events; any other error is raised (offsets deleted
    before the read reached them: BadInput)."""
    from confluent_kafka import KafkaError

    kept = []
    for m in messages:
        error = m.error()
        if error is None:
            kept.append(m)
            position = m.offset() + 1
        elif error.code() == KafkaError.OFFSET_OUT_OF_RANGE:
            raise BadInput(
                f"{r.label}: offsets from {position} were deleted (retention or compaction) before this apply "
                "read them; nothing was applied"
            )
        elif error.code() != KafkaError._PARTITION_EOF:
            raise ChangelakeError(f"{r.label}: reading offsets {position}..{r.end - 1}: {error}")
    return kept


class RangeRecords:
    """The records of one range as read (:func:`range_records`), in offset order: the client's ``Message``
    objects, and each one's offset, key, value and timestamp (None: the record has none) taken from them as
    lists, one pass over all of them per field, when a decoder first asks for the field."""

    def __init__(self, r: PartitionRange, messages: list[Any]):
        self.range = r
        self.messages = messages

    @functools.cached_property
    def offsets(self) -> list[int]:
        return _offsets(self.messages)

    @functools.cached_property
    def keys(self) -> list[bytes | None]:
        from confluent_kafka import Message

        return list(map(Message.key, self.messages))

    @functools.cached_property
    def values(self) -> list[bytes | None]:
        from confluent_kafka import Message

        return list(map(Message.value, self.messages))

    @functools.cached_property
    def timestamps(self) -> list[int | None]:
        from confluent_kafka import Message

        return [timestamp if kind else None for kind, timestamp in map(Message.timestamp, self.messages)]


def _offsets(messages: list[Any]) -> list[int]:
    """The offsets of records (never None: a ``Message`` without one is an event, and events are left out)."""
    from confluent_kafka import Message

    return cast("list[int]", list(map(Message.offset, messages)))


def range_records(config: dict[str, str], r: PartitionRange) -> RangeRecords:
    """The records at offsets ``[r.start, r.end)`` of one partition (:class:`RangeRecords`): the client's
    ``consume()`` lists joined, no Python object per record beyond the client's own."""
    messages: list[Any] = []
    for batch in read_range(config, r):
        messages += batch
    return RangeRecords(r, messages)


def range_lines(config: dict[str, str], r: PartitionRange, spec: TableSpec) -> bytes:
    """A range's records as the JSON lines its format's decoder reads (:func:`render_lines`)."""
    return render_lines(range_records(config, r), spec)


def render_lines(records: RangeRecords, spec: TableSpec) -> bytes:
    """A range's records as the JSON lines its format's decoder reads, line ``n`` (0-based) holding offset
    ``r.start + n`` and an empty line for an offset without a record. upsert-kafka lines are what a landed
    upsert-kafka line holds (:func:`changelake.inputs.formats.kafka_container.kafka_line`); the CDC and
    changelog formats' line is the record's value (a null value, such as Debezium's tombstone after a delete,
    is no message)."""
    from changelake.inputs.formats import kafka_container

    r = records.range
    fmt = spec.source.get("format")
    offsets, values = records.offsets, records.values
    rendered: list[bytes]
    if fmt == "upsert-kafka":
        rendered = kafka_container.record_lines(
            spec, r.topic, r.partition, offsets, records.keys, values, records.timestamps
        )
    else:
        rendered = [b"" if v is None else v.replace(b"\r", b" ").replace(b"\n", b" ") for v in values]
    if not rendered:
        return b"\n" * r.size
    if len(rendered) == r.size:  # no offset without a record (the common case): one line per record as it is
        lines = rendered
    else:
        lines = [b""] * r.size
        for offset, line in zip(offsets, rendered, strict=True):
            lines[offset - r.start] = line
    return b"\n".join(lines) + b"\n"


def reread(
    config: dict[str, str], ranges: list[PartitionRange], spec: TableSpec, what: str
) -> list[tuple[str, bytes, int]]:
    """A committed batch's ranges read again, as ``(label, lines, first offset)`` (:func:`range_lines`): what
    the ``__input`` view shows of a topic batch. Offsets that retention deleted since the batch applied them
    are a ChangelakeError naming them (``what`` says whose input they were), never a shorter input."""
    from confluent_kafka import TopicPartition

    wanted = [r for r in ranges if r.size]
    consumer = _consumer(config)
    try:
        for r in wanted:
            low, _high = _watermarks(consumer, TopicPartition(r.topic, r.partition), spec, TIMEOUT_S)
            if low > r.start:
                raise ChangelakeError(
                    f"{spec.full_name}: {what} was read from offsets {r.start}..{r.end - 1} of {r.topic} partition "
                    f"{r.partition}, and the topic no longer holds offsets {r.start}..{min(low, r.end) - 1} "
                    "(retention deleted them): that input cannot be shown again"
                )
    finally:
        consumer.close()
    out = []
    for r in wanted:
        try:
            out.append((r.label, range_lines(config, r, spec), r.start))
        except BadInput as e:  # deleted between the check and the read
            raise ChangelakeError(f"{spec.full_name}: {what} cannot be read again: {e}") from None
    return out


# --- producing (datagen's simulated sources, the Kafka demo) --------------------------------------------
def ensure_topic(config: dict[str, str], topic: str, partitions: int) -> None:
    """Create ``topic`` with ``partitions`` partitions unless it exists (a demo's topics; no replication)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({**config}, logger=_LOG)
    if topic in admin.list_topics(timeout=TIMEOUT_S).topics:
        return
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        try:
            future.result(timeout=TIMEOUT_S)
        except Exception as e:
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise ConfigError(f"cannot create Kafka topic {topic}: {e}") from None


def produce_lines(config: dict[str, str], topic: str, spec: TableSpec, lines: list[str]) -> int:
    """Produce rendered source messages (datagen's lines for the table's format) as Kafka records: an
    upsert-kafka line's key and value (in their formats' bytes) to its partition, any other format's line as
    a record's value to partition 0 (one partition keeps a CDC stream's order). Returns the records produced."""
    from confluent_kafka import Producer

    fmt = spec.source.get("format")
    opts = spec.source_options
    producer = Producer({**config, "enable.idempotence": "true", "linger.ms": "20"}, logger=_LOG)
    partitions = len(producer.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions)
    for line in lines:
        if fmt == "upsert-kafka":
            record = json.loads(line)
            key = _part_bytes(record.get("key"), opts.key_format.format)
            value = _part_bytes(record.get("value"), opts.value_format.format)
            partition = int(record.get("partition", 0)) % partitions
            _produce(producer, topic, key=key, value=value, partition=partition)
        else:
            _produce(producer, topic, value=line.encode(), partition=0)
        producer.poll(0)
    left = producer.flush(TIMEOUT_S)
    if left:
        raise ChangelakeError(f"{left} record(s) to Kafka topic {topic} were not acknowledged")
    return len(lines)


def _produce(producer, topic: str, **record) -> None:
    """``producer.produce`` that waits while librdkafka's local queue is full (BufferError: more records
    waiting than ``queue.buffering.max.messages``) instead of failing: serving delivery reports makes room."""
    while True:
        try:
            producer.produce(topic, **record)
            return
        except BufferError:
            producer.poll(0.5)


def _part_bytes(value: Any, fmt: str) -> bytes | None:
    """A rendered upsert-kafka key or value as the record's bytes: a JSON object as JSON text, csv as its text,
    the binary formats (raw, avro, avro-confluent) from their base64."""
    import base64

    if value is None:
        return None
    if fmt == "json":
        return json.dumps(value).encode()
    if fmt == "csv":
        return str(value).encode()
    return base64.b64decode(value)
