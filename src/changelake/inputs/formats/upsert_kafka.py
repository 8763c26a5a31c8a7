"""upsert-kafka: Kafka records of a compacted topic, key and value, as JSON lines (Flink's upsert-kafka).

``{"key": {...}, "value": {...} | null, "topic", "partition", "offset", "timestamp", "headers"}``. A null value
is a tombstone (``-D`` of the key); any other value an upsert (``+U``): the table decides whether that is an
insert or an update. The only format whose records carry Kafka metadata, for ``dedup: kafka-offsets`` and
``ordering: kafka-offset``.

``key.format`` / ``value.format`` pick how the key and value are encoded (json objects by default; csv text;
raw, avro and avro-confluent bytes in base64): :mod:`changelake.inputs.formats.kafka_codecs`.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from changelake.errors import short_repr
from changelake.inputs.formats import kafka_codecs
from changelake.inputs.formats.base import (
    FieldError,
    JsonLinesFormat,
    Message,
    SourceEvent,
    json_kind,
    json_object,
    only_fields,
)

if TYPE_CHECKING:
    from changelake.source_options import SourceOptions
    from changelake.spec import TableSpec

#: Kafka's ranges: a partition is a non-negative int32, an offset a non-negative int64; a topic name is 1-249
#: of ``[A-Za-z0-9._-]`` (so ``topic:partition`` keys are unambiguous).
KAFKA_LIMITS = {"partition": 2**31 - 1, "offset": 2**63 - 1}
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


class UpsertKafka(JsonLinesFormat):
    name = "upsert-kafka"
    #: An Avro object container of Kafka records (:mod:`changelake.inputs.formats.kafka_container`).
    suffixes = (".avro",)

    def decode(self, obj: Any, spec: TableSpec, opts: SourceOptions) -> Message:
        """Key fields carry ``key.fields-prefix``; with ``value.fields-include: EXCEPT_KEY`` the value holds
        no key fields (with ``ALL`` it may, and they must equal the key's)."""
        obj = json_object(obj, None)
        only_fields(obj, {"key", "value", "topic", "partition", "offset", "timestamp", "headers"})
        if "key" not in obj or "value" not in obj:
            raise FieldError(
                "key" if "key" not in obj else "value", "missing; upsert-kafka records need key and value"
            )
        key_codec, value_codec = self.codecs(spec, opts)
        if obj["key"] is None:
            raise FieldError("key", "null; upsert-kafka records need a key (the primary key)")
        key = key_codec.decode(obj["key"])
        prefix = opts.key_fields_prefix
        row: dict[str, Any] = {}
        for name, value in key.items():
            if not name.startswith(prefix):
                raise FieldError(f"key.{name}", f"key field lacks the key.fields-prefix {prefix!r}")
            column = name[len(prefix) :]
            if column not in spec.primary_key:
                raise FieldError(
                    f"key.{name}", f"not a primary-key column; the key is {list(spec.primary_key)}"
                )
            row[column] = value
        for column in spec.primary_key:
            if column not in row:
                raise FieldError(f"key.{prefix}{column}", "primary-key field missing from the record key")
        kafka = _kafka_metadata(obj, opts)
        value = obj["value"]
        if value is None:
            return Message([("-D", row)], kafka=kafka, order_root=obj)
        value = value_codec.decode(value)
        for name, v in value.items():
            if name in spec.primary_key:
                if opts.value_fields_include == "EXCEPT_KEY":
                    raise FieldError(
                        f"value.{name}", "key field in the value, but value.fields-include is EXCEPT_KEY"
                    )
                if not _same(spec, name, v, row[name]):
                    raise FieldError(
                        f"value.{name}",
                        f"differs from the record key ({short_repr(v)} != {short_repr(row[name])})",
                    )
                continue
            row[name] = v
        return Message([("+U", row)], kafka=kafka, order_root=obj)

    def columns(self, data: bytes | memoryview, first_line: int, spec: TableSpec) -> Any:
        """Lines whose key and value are Avro, column-wise (:mod:`changelake.inputs.formats.kafka_columns`):
        (line numbers, ops, storage-typed columns, [topic, partition, offset]), or None."""
        from changelake.inputs.formats.kafka_columns import decode_columns

        opts = spec.source_options
        key_codec, value_codec = self.codecs(spec, opts)
        return decode_columns(data, first_line, spec, key_codec, value_codec)

    def record_columns(self, records: Any, spec: TableSpec) -> Any:
        """:meth:`columns` of a topic range's records (:class:`changelake.inputs.kafka.RangeRecords`), their
        key and value bytes decoded as read, without a JSON line between; None to decode their lines."""
        import numpy as np

        from changelake.inputs.formats.kafka_columns import decode_records

        key_codec, value_codec = self.codecs(spec, spec.source_options)
        r = records.range
        offsets = np.asarray(records.offsets, np.int64)
        return decode_records(
            records.keys, records.values, r.topic, r.partition, offsets, spec, key_codec, value_codec
        )

    def codecs(self, spec: TableSpec, opts: SourceOptions) -> tuple[kafka_codecs.Codec, kafka_codecs.Codec]:
        """The table's key and value codecs (SpecError if its columns cannot take the chosen formats)."""
        return kafka_codecs.codecs_for(
            spec, opts.key_format, opts.value_format, opts.key_fields_prefix, opts.value_fields_include
        )

    def render(self, spec: TableSpec, events: list[SourceEvent], envelope: bool = False) -> list[str]:
        """One record per event, at the event's Kafka position; a delete is a tombstone. Key and value are
        encoded in the table's ``key.format`` / ``value.format``."""
        key_codec, value_codec = self.codecs(spec, spec.source_options)
        lines = []
        for event in events:
            row = event.after or event.before or {}
            if event.kafka is None:
                raise ValueError("upsert-kafka renders events with their Kafka topic, partition and offset")
            topic, partition, offset = event.kafka
            record = {
                "key": key_codec.encode(row),
                "value": None if event.kind == "delete" else value_codec.encode(event.after or {}),
                "topic": topic,
                "partition": partition,
                "offset": offset,
                "timestamp": event.ts_ms,
            }
            lines.append(json.dumps(record))
        return lines


def _same(spec: TableSpec, column: str, a: Any, b: Any) -> bool:
    """Whether a key field repeated in the value holds the key's value, compared as the column's values (the
    key and value formats may write one value differently: ``"1.50"`` and ``1.5`` for a DECIMAL(4,2))."""
    if a == b:
        return True
    decode = spec.column(column).type.decode_json
    try:
        return bool(decode(a) == decode(b))
    except ValueError:
        return False


def _kafka_metadata(obj: dict, opts: SourceOptions) -> tuple[str, int, int] | None:
    timestamp = obj.get("timestamp")
    if timestamp is not None and (
        isinstance(timestamp, bool) or not isinstance(timestamp, int) or not -(2**63) <= timestamp < 2**63
    ):
        raise FieldError("timestamp", f"expected an epoch-millisecond int64, got {short_repr(timestamp)}")
    needed = opts.dedup_offsets or opts.ordering == "kafka-offset"
    if "partition" not in obj and "offset" not in obj and not needed:
        return None
    topic = obj.get("topic", "")
    if not isinstance(topic, str):
        raise FieldError("topic", f"expected a string, got {json_kind(topic)}")
    if topic and not _TOPIC.fullmatch(topic):
        raise FieldError("topic", f"{short_repr(topic)} is not a Kafka topic name (1-249 of [A-Za-z0-9._-])")
    values = []
    for name, top in KAFKA_LIMITS.items():
        v = obj.get(name)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= top:
            raise FieldError(
                name, f"expected a non-negative integer up to {top} (Kafka {name}), got {short_repr(v)}"
            )
        values.append(v)
    return topic, values[0], values[1]
