"""Per-table source settings: how a table's landed batches are read.

They live in the table spec under ``source:`` (validated when the spec loads)::

    source:
      format: upsert-kafka          # an input format's name (default: by file suffix)
      ordering: kafka-offset        # arrival (file then line, default) | kafka-offset | <dotted field path>
      dedup: kafka-offsets          # none (default) | kafka-offsets: drop redelivered Kafka records
      on-bad-record: quarantine     # fail (default) | quarantine: dead-letter bad records, commit the rest
      key.fields-prefix: "k_"       # upsert-kafka: prefix of the key's field names
      value.fields-include: EXCEPT_KEY  # upsert-kafka: ALL (default) | EXCEPT_KEY
      key.format: avro-confluent    # upsert-kafka: json (default) | csv | raw | avro | avro-confluent
      key.avro-confluent.url: http://registry:8081   # ... and each format's options, prefixed key./value.
      value.format: avro            # upsert-kafka: the value's format, as key.format
      database.include: "shop"      # canal/maxwell/debezium: regex on the record's database (full match)
      table.include: "orders"       # ... and on its table
      timestamp-epoch-unit: ms      # debezium without a schema envelope: ms (default) | us | ns
      ignore-unknown-fields: false  # refuse (default) or drop fields that are not table columns

A section that names a Kafka topic reads the table's batches from the topic instead of the landing directory,
with the option names of Flink's Kafka connector (docs/inputs.md#kafka-topics)::

      topic: orders                 # one topic, or several separated by ';' (or topic-pattern: a regex)
      properties.bootstrap.servers: 127.0.0.1:9092   # properties.*: Kafka client settings, Kafka's names
      scan.startup.mode: earliest-offset   # earliest-offset (default) | latest-offset | group-offsets |
                                           # timestamp (scan.startup.timestamp-millis) | specific-offsets
                                           # (scan.startup.specific-offsets: partition:0,offset:42;...)
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

from changelake.errors import SpecError, short_repr

# --- the input formats as the spec sees them (their decoders are changelake.inputs.formats) -----------------
#: The key/value formats, in the order messages list them.
KV_FORMATS = ("json", "csv", "raw", "avro", "avro-confluent")
#: The options of each format, as Flink names them (without the ``key.``/``value.`` part prefix). The
#: ``avro.encoding`` values other than ``binary``, ``avro.schema-file``, ``avro.schema-dir`` and
#: ``avro-confluent.schema-dir`` are changelake's own.
FORMAT_OPTIONS = {
    "json": (),
    "csv": ("csv.field-delimiter", "csv.quote-character", "csv.null-literal"),
    "raw": ("raw.charset", "raw.endianness"),
    "avro": ("avro.encoding", "avro.schema-file", "avro.schema-dir"),
    "avro-confluent": ("avro-confluent.url", "avro-confluent.schema-dir"),
}
#: Every source option these formats add, for :mod:`changelake.source_options`.
SOURCE_KEYS = tuple(
    f"{part}.{name}"
    for part in ("key", "value")
    for name in ("format", *(o for opts in FORMAT_OPTIONS.values() for o in opts))
)
AVRO_ENCODINGS = ("binary", "single-object", "container")

#: The source options only some formats take, and whether a format's records carry Kafka metadata (topic,
#: partition, offset), by format name in the order messages list them: what a spec's ``source:`` section is
#: checked against. Each format's class says the same (``InputFormat.options``, ``kafka_metadata``);
#: tests/inputs/test_format_registry.py keeps the two equal.
CDC_FILTERS = frozenset({"database.include", "table.include"})
FORMAT_DECLARATIONS: dict[str, tuple[frozenset[str], bool]] = {
    "changelog-json": (frozenset(), False),
    "changelog-parquet": (frozenset(), False),
    "upsert-kafka": (frozenset({"key.fields-prefix", "value.fields-include", *SOURCE_KEYS}), True),
    "debezium-json": (CDC_FILTERS, False),
    "canal-json": (CDC_FILTERS, False),
    "maxwell-json": (CDC_FILTERS, False),
}


@dataclass(frozen=True)
class PartOptions:
    """A key's or value's format and its options (without the part prefix), as the spec gives them."""

    format: str = "json"
    options: tuple[tuple[str, str], ...] = ()

    def get(self, name: str, default: str | None = None) -> str | None:
        return dict(self.options).get(name, default)


#: The options of a Kafka topic source (Flink's Kafka connector names), besides ``properties.*``.
KAFKA_KEYS = (
    "topic",
    "topic-pattern",
    "scan.startup.mode",
    "scan.startup.specific-offsets",
    "scan.startup.timestamp-millis",
)
KAFKA_PROPERTIES = "properties."
STARTUP_MODES = ("earliest-offset", "latest-offset", "group-offsets", "timestamp", "specific-offsets")
#: The formats a topic's records may be in: each Kafka record's value is one JSON message (upsert-kafka: the
#: key and value of the record).
TOPIC_FORMATS = ("upsert-kafka", "debezium-json", "canal-json", "maxwell-json", "changelog-json")
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


@dataclass(frozen=True)
class KafkaOptions:
    """A source that is a Kafka topic (or several, or a pattern) rather than the landing directory."""

    topics: tuple[str, ...] = ()
    pattern: re.Pattern | None = None
    properties: tuple[
        tuple[str, str], ...
    ] = ()  # client settings under Kafka's names (without "properties.")
    startup_mode: str = "earliest-offset"
    specific_offsets: tuple[tuple[int, int], ...] = ()  # (partition, offset) for specific-offsets
    timestamp_millis: int | None = None

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is one of the source's topics."""
        return topic in self.topics if self.pattern is None else bool(self.pattern.fullmatch(topic))


#: Every source option; the format-specific ones (an InputFormat's ``options``) are checked in this order.
_KEYS = (
    "format",
    "ordering",
    "dedup",
    "on-bad-record",
    "database.include",
    "table.include",
    "key.fields-prefix",
    "value.fields-include",
    "timestamp-epoch-unit",
    "ignore-unknown-fields",
    *SOURCE_KEYS,
    *KAFKA_KEYS,
)
_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}(?:\.[A-Za-z_][A-Za-z0-9_]{0,127}){0,15}")  # fullmatch


@dataclass(frozen=True)
class SourceOptions:
    """Validated ``source:`` settings of a table spec."""

    format: str | None = None
    ordering: str = "arrival"
    dedup: str = "none"
    on_bad_record: str = "fail"
    key_fields_prefix: str = ""
    value_fields_include: str = "ALL"
    database_include: re.Pattern | None = None
    table_include: re.Pattern | None = None
    timestamp_epoch_unit: str = "ms"
    ignore_unknown_fields: bool = False
    key_format: PartOptions = PartOptions()
    value_format: PartOptions = PartOptions()
    kafka: KafkaOptions | None = None  # the table's batches come from a Kafka topic (None: landed files)

    @property
    def quarantine(self) -> bool:
        return self.on_bad_record == "quarantine"

    @property
    def dedup_offsets(self) -> bool:
        return self.dedup == "kafka-offsets"

    @property
    def order_path(self) -> tuple[str, ...] | None:
        """The dotted field the records are ordered by, or None for arrival / Kafka-offset order."""
        if self.ordering in ("arrival", "kafka-offset"):
            return None
        return tuple(self.ordering.split("."))


def _choice(source: dict, key: str, allowed: tuple[str, ...], default: str, fold=str.lower) -> str:
    value = source.get(key, default)
    if not isinstance(value, str) or fold(value) not in allowed:
        raise SpecError(f"source option '{key}' must be one of {list(allowed)}, got {short_repr(value)}")
    return fold(value)


def _regex(source: dict, key: str) -> re.Pattern | None:
    value = source.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise SpecError(
            f"source option '{key}' must be a regular expression (a string), got {short_repr(value)}"
        )
    try:
        return re.compile(value)
    except (re.error, OverflowError, RecursionError) as e:
        raise SpecError(
            f"source option '{key}': invalid regular expression {short_repr(value)}: {e}"
        ) from None


def parse_source(source: dict[str, Any] | None, table: str = "?") -> SourceOptions:
    """Validate a spec's ``source:`` mapping; errors name the option and the table."""
    source = source or {}
    if not isinstance(source, dict):
        raise SpecError(f"{table}: 'source' must be a mapping")
    unknown = sorted(map(str, {k for k in source if not str(k).startswith(KAFKA_PROPERTIES)} - set(_KEYS)))
    if unknown:
        raise SpecError(f"{table}: unknown source option '{unknown[0]}'; supported: {sorted(_KEYS)}")
    fmt = source.get("format")
    if fmt is not None and (not isinstance(fmt, str) or fmt not in FORMAT_DECLARATIONS):
        raise SpecError(
            f"{table}: source option 'format' must be one of {list(FORMAT_DECLARATIONS)}, got {short_repr(fmt)}"
        )
    ordering = source.get("ordering", "arrival")
    if not isinstance(ordering, str) or not (
        ordering in ("arrival", "kafka-offset") or _PATH.fullmatch(ordering)
    ):
        raise SpecError(
            f"{table}: source option 'ordering' must be 'arrival', 'kafka-offset' or a dotted field path "
            f"such as 'source.lsn', got {short_repr(ordering)}"
        )
    dedup = _choice(source, "dedup", ("none", "kafka-offsets"), "none")
    kafka = [name for name, (_, metadata) in FORMAT_DECLARATIONS.items() if metadata]
    if (dedup == "kafka-offsets" or ordering == "kafka-offset") and fmt not in kafka:
        raise SpecError(
            f"{table}: dedup/ordering by Kafka offsets needs the records' Kafka metadata "
            f"(format {' or '.join(map(repr, kafka))}), but the format is {fmt!r}"
        )
    for key in _KEYS:
        accepting = [name for name, (options, _) in FORMAT_DECLARATIONS.items() if key in options]
        if accepting and key in source and fmt not in accepting:
            where = accepting[0] if len(accepting) == 1 else accepting
            raise SpecError(f"{table}: source option '{key}' applies to {where} only")
    prefix = source.get("key.fields-prefix", "")
    if not isinstance(prefix, str):
        raise SpecError(f"{table}: source option 'key.fields-prefix' must be a string")
    ignore_unknown = source.get("ignore-unknown-fields", False)
    if not isinstance(ignore_unknown, bool):
        raise SpecError(f"{table}: source option 'ignore-unknown-fields' must be true or false")
    return SourceOptions(
        format=fmt,
        ordering=ordering,
        dedup=dedup,
        on_bad_record=_choice(source, "on-bad-record", ("fail", "quarantine"), "fail"),
        key_fields_prefix=prefix,
        value_fields_include=_choice(
            source, "value.fields-include", ("ALL", "EXCEPT_KEY"), "ALL", fold=str.upper
        ),
        database_include=_regex(source, "database.include"),
        table_include=_regex(source, "table.include"),
        timestamp_epoch_unit=_choice(source, "timestamp-epoch-unit", ("ms", "us", "ns"), "ms"),
        ignore_unknown_fields=ignore_unknown,
        key_format=parse_part(source, "key", table),
        value_format=parse_part(source, "value", table),
        kafka=parse_kafka(source, fmt, table),
    )


def parse_kafka(source: dict, fmt: str | None, table: str) -> KafkaOptions | None:
    """Validate the Kafka connector options of a ``source:`` section (None when it names no topic)."""
    given = [k for k in source if k in KAFKA_KEYS or str(k).startswith(KAFKA_PROPERTIES)]
    if not given:
        return None
    if ("topic" in source) == ("topic-pattern" in source):
        raise SpecError(
            f"{table}: a Kafka source names its topics with exactly one of 'topic' and 'topic-pattern' "
            f"(given: {sorted(map(str, given))})"
        )
    if fmt not in TOPIC_FORMATS:
        raise SpecError(
            f"{table}: a Kafka topic source reads format {' | '.join(TOPIC_FORMATS)}; 'format' is {fmt!r}"
        )
    topics: tuple[str, ...] = ()
    pattern = None
    if "topic" in source:
        value = source["topic"]
        names = value.split(";") if isinstance(value, str) else value if isinstance(value, list) else None
        if not names or not all(isinstance(n, str) and _TOPIC_NAME.fullmatch(n.strip()) for n in names):
            raise SpecError(
                f"{table}: source option 'topic' must be a topic name (1-249 of [A-Za-z0-9._-]) or several "
                f"separated by ';', got {short_repr(value)}"
            )
        topics = tuple(n.strip() for n in names)
    else:
        pattern = _regex(source, "topic-pattern")
    properties = []
    for key in sorted(k for k in source if str(k).startswith(KAFKA_PROPERTIES)):
        value = source[key]
        if isinstance(value, bool):
            value = str(value).lower()
        if not isinstance(value, str | int | float) or not str(key)[len(KAFKA_PROPERTIES) :]:
            raise SpecError(f"{table}: source option '{key}' must be a Kafka client setting and its value")
        properties.append((str(key)[len(KAFKA_PROPERTIES) :], str(value)))
    mode = _choice(source, "scan.startup.mode", STARTUP_MODES, "earliest-offset")
    specific: list[tuple[int, int]] = []
    if mode == "specific-offsets":
        text = source.get("scan.startup.specific-offsets")
        try:
            for part in str(text).split(";"):
                fields = dict(item.split(":", 1) for item in part.split(","))
                specific.append((int(fields["partition"]), int(fields["offset"])))
        except (ValueError, KeyError):
            raise SpecError(
                f"{table}: 'scan.startup.specific-offsets' must read 'partition:0,offset:42;partition:1,offset:300' "
                f"when 'scan.startup.mode' is 'specific-offsets', got {short_repr(text)}"
            ) from None
    elif "scan.startup.specific-offsets" in source:
        raise SpecError(
            f"{table}: 'scan.startup.specific-offsets' needs 'scan.startup.mode: specific-offsets'"
        )
    timestamp = source.get("scan.startup.timestamp-millis")
    if mode == "timestamp":
        if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
            raise SpecError(
                f"{table}: 'scan.startup.mode: timestamp' needs 'scan.startup.timestamp-millis' (epoch milliseconds), "
                f"got {short_repr(timestamp)}"
            )
    elif timestamp is not None:
        raise SpecError(f"{table}: 'scan.startup.timestamp-millis' needs 'scan.startup.mode: timestamp'")
    if mode == "group-offsets" and "properties.group.id" not in source:
        raise SpecError(f"{table}: 'scan.startup.mode: group-offsets' needs 'properties.group.id'")
    return KafkaOptions(topics, pattern, tuple(properties), mode, tuple(specific), timestamp)


def parse_part(source: dict, part: str, table: str) -> PartOptions:
    """Validate ``<part>.format`` and its options (``part`` is ``key`` or ``value``)."""
    fmt = source.get(f"{part}.format", "json")
    if fmt in ("debezium-json", "canal-json", "maxwell-json"):
        # Flink's upsert-kafka refuses them too: a CDC message is a change, not a row.
        raise SpecError(
            f"{table}: the 'upsert-kafka' source doesn't support '{fmt}' as {part} format, "
            "because it is not in insert-only mode"
        )
    if not isinstance(fmt, str) or fmt not in KV_FORMATS:
        raise SpecError(
            f"{table}: source option '{part}.format' must be one of {list(KV_FORMATS)}, got {short_repr(fmt)}"
        )
    options = []
    for name in sorted({o for opts in FORMAT_OPTIONS.values() for o in opts}):
        key = f"{part}.{name}"
        if key not in source:
            continue
        if name not in FORMAT_OPTIONS[fmt]:
            raise SpecError(f"{table}: source option '{key}' applies to {part}.format {name.split('.')[0]!r}")
        value = source[key]
        if not isinstance(value, str):
            raise SpecError(f"{table}: source option '{key}' must be a string, got {short_repr(value)}")
        options.append((name, value))
    opts = PartOptions(fmt, tuple(options))
    _check_scalar_options(opts, part, table)
    return opts


def _check_scalar_options(opts: PartOptions, part: str, table: str) -> None:
    for name, allowed in (
        ("avro.encoding", AVRO_ENCODINGS),
        ("raw.endianness", ("big-endian", "little-endian")),
    ):
        value = opts.get(name)
        if value is not None and value not in allowed:
            raise SpecError(
                f"{table}: source option '{part}.{name}' must be one of {list(allowed)}, got {short_repr(value)}"
            )
    for name in ("csv.field-delimiter", "csv.quote-character"):
        value = opts.get(name)
        if value is not None and len(value) != 1:
            raise SpecError(f"{table}: source option '{part}.{name}' must be one character, got {value!r}")
    charset = opts.get("raw.charset")
    if charset is not None:
        try:
            "".encode(charset)
        except LookupError:
            raise SpecError(
                f"{table}: source option '{part}.raw.charset': unknown charset {charset!r}"
            ) from None
    url = opts.get("avro-confluent.url")
    if url is not None and urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise SpecError(
            f"{table}: source option '{part}.avro-confluent.url' must be an http(s) URL, got {url!r}"
        )
    if opts.format == "avro-confluent" and url is None and opts.get("avro-confluent.schema-dir") is None:
        raise SpecError(
            f"{table}: {part}.format avro-confluent needs '{part}.avro-confluent.url' (the schema registry) "
            f"or '{part}.avro-confluent.schema-dir' (a directory of <id>.avsc files)"
        )
