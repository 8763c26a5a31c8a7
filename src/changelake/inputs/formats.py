"""Envelopes of the JSON-lines input formats: one landed line (a source message) -> row changes.

Each decoder takes the parsed line and returns a :class:`Message` (or ``None`` when the line carries no row
change: a Debezium tombstone, a DDL event, a filtered database/table), raising :class:`FieldError` naming the
offending field. Values stay raw JSON here; :mod:`changelake.inputs.readers` converts them to the table's types,
using ``coerce`` for formats that encode values their own way (Canal's strings, Debezium's epochs).

Row kinds follow Flink's formats of the same names: an update yields ``-U`` (before image) and ``+U``
(after image); upsert-kafka yields ``+U`` per value and ``-D`` per tombstone, never ``-U``.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from changelake.errors import short_repr
from changelake.inputs.sources import SourceOptions
from changelake.spec import TableSpec
from changelake.types import (
    DECIMAL_CONTEXT,
    MICROS_PER_DAY,
    SPECIAL_FLOATS,
    DataType,
    format_timestamp_nanos,
    parse_number_text,
    time_from_micros,
)


class FieldError(Exception):
    """A problem with one field of a message (the reader adds file and line)."""

    def __init__(self, field: str | None, reason: str):
        super().__init__(reason)
        self.field, self.reason = field, reason


@dataclass
class Message:
    """The row changes of one landed line, plus what the format knows about its origin."""

    changes: list[tuple[str, dict[str, Any]]]
    kafka: tuple[str, int, int] | None = None  # (topic, partition, offset)
    order_root: Any = None  # the object the ``ordering`` path is resolved in
    schemas: dict[str, dict] = field(default_factory=dict)  # Debezium connect schema per column


Coerce = Callable[[DataType, Any, dict | None], Any]
Decoder = Callable[[Any, TableSpec, SourceOptions], Message | None]
_EPOCH = dt.datetime(1970, 1, 1)
_UNIT = {"ms": 1_000, "us": 1, "ns": 0.001}


# --- one JSON line ----------------------------------------------------------------------------------------
#: Deepest nesting of arrays and objects in a line: the envelopes need about 6 levels (Debezium's connect
#: schema); a limit keeps every later step (comparisons, error messages) far from Python's recursion limit.
MAX_DEPTH = 64
_DEPTH_TOKENS = re.compile(r'\\.|["\[\]{}]', re.DOTALL)
# The key of a number too long for int() (Python refuses more than 4300 digits), to name it in the error.
_LONG_NUMBER_KEY = re.compile(r'"((?:[^"\\]|\\.){0,200})"\s*:\s*-?[0-9]{4000}')


def parse_line(text: str) -> Any:
    """Parse one JSON line as the input formats read it, raising FieldError for anything else.

    Stricter than ``json.loads`` where a lenient parse would change the data: a key twice in one object is
    refused (not last-wins), ``NaN``/``Infinity`` literals are not JSON (write them as strings), nesting is
    limited to MAX_DEPTH. Fractions and exponents become exact Decimals.
    """
    if text.count("[") + text.count("{") > MAX_DEPTH and _too_deep(text):
        raise FieldError(None, f"JSON nested deeper than {MAX_DEPTH} levels")
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError as e:
        raise FieldError(None, f"malformed JSON at column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise FieldError(None, f"JSON nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:
        # int() refuses over 4300 digits: no integer type holds even 40.
        m = _LONG_NUMBER_KEY.search(text)
        raise FieldError(m.group(1) if m else None, "a number with more than 4000 digits") from None


def _too_deep(text: str) -> bool:
    """Whether brackets outside strings nest deeper than MAX_DEPTH (one linear pass over the tokens)."""
    depth, in_string = 0, False
    for m in _DEPTH_TOKENS.finditer(text):
        token = m.group()
        if token == '"':
            in_string = not in_string
        elif in_string or len(token) == 2:
            continue
        elif token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        else:
            depth -= 1
    return False


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise FieldError(key, "the key appears twice in one JSON object")
            seen.add(key)
    return obj


def _no_constant(name: str) -> Any:
    raise FieldError(None, f'{name} is not valid JSON; write "{name}" (a string) for a FLOAT or DOUBLE value')


_DECODER = json.JSONDecoder(
    parse_float=decimal.Decimal, parse_constant=_no_constant, object_pairs_hook=_unique_keys
)


def _object(value: Any, name: str | None) -> dict:
    if not isinstance(value, dict):
        raise FieldError(name, f"expected a JSON object, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float | decimal.Decimal):
        return "number"
    return {dict: "object", list: "array", str: "string"}.get(type(value), type(value).__name__)


def _text(obj: dict, name: str) -> str | None:
    """An optional string field of an envelope."""
    value = obj.get(name)
    if value is not None and not isinstance(value, str):
        raise FieldError(name, f"expected a string, got {_kind(value)}")
    return value


def _only(obj: dict, allowed: set[str]) -> None:
    extra = sorted(set(obj) - allowed)
    if extra:
        raise FieldError(extra[0], f"unknown top-level field; expected some of {sorted(allowed)}")


def _included(opts: SourceOptions, database: Any, table: Any) -> bool:
    if opts.database_include and not (
        isinstance(database, str) and opts.database_include.fullmatch(database)
    ):
        return False
    if opts.table_include and not (isinstance(table, str) and opts.table_include.fullmatch(table)):
        return False
    return True


# --- changelog-json ---------------------------------------------------------------------------------------
OPS = ("+I", "-U", "+U", "-D")


def decode_changelog(obj: Any, spec: TableSpec, opts: SourceOptions) -> Message:
    """``{"op": "+I", "data": {...}}`` or the positional ``{"rowkind": "+I", "fields": [...]}``."""
    obj = _object(obj, None)
    names = spec.column_names
    if "rowkind" in obj or "fields" in obj:
        _only(obj, {"rowkind", "fields"})
        op, raw, op_field = obj.get("rowkind"), obj.get("fields"), "rowkind"
        if not isinstance(raw, list):
            raise FieldError("fields", "expected a JSON array in column order")
        if len(raw) != len(names):
            raise FieldError("fields", f"expected {len(names)} values {list(names)}, got {len(raw)}")
        data = dict(zip(names, raw, strict=True))
    else:
        _only(obj, {"op", "data"})
        op, data, op_field = obj.get("op"), obj.get("data"), "op"
        if not isinstance(data, dict):
            raise FieldError("data", "expected a JSON object with the row's columns")
    if op not in OPS:
        raise FieldError(op_field, f"unknown op {short_repr(op)}; expected one of {list(OPS)}")
    return Message([(op, data)], order_root=obj)


# --- upsert-kafka -----------------------------------------------------------------------------------------
def decode_upsert_kafka(obj: Any, spec: TableSpec, opts: SourceOptions) -> Message:
    """``{"key": {...}, "value": {...} | null, "topic", "partition", "offset", "timestamp"}``.

    A null value is a tombstone (``-D`` of the key); any other value an upsert (``+U``): the table decides
    whether that is an insert or an update. Key fields carry ``key.fields-prefix``; with
    ``value.fields-include: EXCEPT_KEY`` the value holds no key fields.
    """
    obj = _object(obj, None)
    _only(obj, {"key", "value", "topic", "partition", "offset", "timestamp", "headers"})
    if "key" not in obj or "value" not in obj:
        raise FieldError(
            "key" if "key" not in obj else "value", "missing; upsert-kafka records need key and value"
        )
    key = _object(obj["key"], "key")
    prefix = opts.key_fields_prefix
    row: dict[str, Any] = {}
    for name, value in key.items():
        if not name.startswith(prefix):
            raise FieldError(f"key.{name}", f"key field lacks the key.fields-prefix {prefix!r}")
        column = name[len(prefix) :]
        if column not in spec.primary_key:
            raise FieldError(f"key.{name}", f"not a primary-key column; the key is {list(spec.primary_key)}")
        row[column] = value
    for column in spec.primary_key:
        if column not in row:
            raise FieldError(f"key.{prefix}{column}", "primary-key field missing from the record key")
    kafka = _kafka_metadata(obj, opts)
    value = obj["value"]
    if value is None:
        return Message([("-D", row)], kafka=kafka, order_root=obj)
    value = _object(value, "value")
    for name, v in value.items():
        if name in spec.primary_key:
            if opts.value_fields_include == "EXCEPT_KEY":
                raise FieldError(
                    f"value.{name}", "key field in the value, but value.fields-include is EXCEPT_KEY"
                )
            if v != row[name]:
                raise FieldError(
                    f"value.{name}",
                    f"differs from the record key ({short_repr(v)} != {short_repr(row[name])})",
                )
            continue
        row[name] = v
    return Message([("+U", row)], kafka=kafka, order_root=obj)


#: Kafka's ranges: a partition is a non-negative int32, an offset a non-negative int64; a topic name is 1-249
#: of ``[A-Za-z0-9._-]`` (so ``topic:partition`` keys are unambiguous).
KAFKA_LIMITS = {"partition": 2**31 - 1, "offset": 2**63 - 1}
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


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
        raise FieldError("topic", f"expected a string, got {_kind(topic)}")
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


# --- debezium-json ----------------------------------------------------------------------------------------
_DEBEZIUM_OPS = {"c", "u", "d", "r"}


def decode_debezium(obj: Any, spec: TableSpec, opts: SourceOptions) -> Message | None:
    """Debezium change events, with or without the ``schema``/``payload`` envelope.

    ``c``/``r`` (snapshot read) -> ``+I after``; ``u`` -> ``-U before`` (when captured) and ``+U after``;
    ``d`` -> ``-D before``. A null payload (the tombstone Debezium writes after a delete) carries nothing.
    """
    if obj is None:
        return None
    obj = _object(obj, None)
    schemas: dict[str, dict] = {}
    if "payload" in obj:
        _only(obj, {"schema", "payload"})
        schemas = _connect_schemas(obj.get("schema"))
        obj = obj["payload"]
        if obj is None:
            return None
        obj = _object(obj, "payload")
    _only(obj, {"before", "after", "op", "source", "ts_ms", "ts_us", "ts_ns", "transaction"})
    op = obj.get("op")
    if not isinstance(op, str) or op not in _DEBEZIUM_OPS:
        raise FieldError(
            "op", f"unknown Debezium op {short_repr(op)}; expected one of {sorted(_DEBEZIUM_OPS)}"
        )
    source = obj.get("source")
    if source is not None and not isinstance(source, dict):
        raise FieldError("source", f"expected a JSON object, got {_kind(source)}")
    source = source or {}
    if not _included(opts, source.get("db"), source.get("table")):
        return None
    before, after = obj.get("before"), obj.get("after")
    if op in ("c", "r", "u"):
        after = _object(after, "after")
    if op == "d":
        before = _object(before, "before")
        return Message([("-D", before)], order_root=obj, schemas=schemas)
    if op == "u":
        changes = [] if before is None else [("-U", _object(before, "before"))]
        return Message([*changes, ("+U", after)], order_root=obj, schemas=schemas)
    return Message([("+I", after)], order_root=obj, schemas=schemas)


def _connect_schemas(schema: Any) -> dict[str, dict]:
    """Column -> Kafka Connect field schema (``name``, ``parameters``) of the ``after``/``before`` struct."""
    if schema is None:
        return {}
    schema = _object(schema, "schema")
    parts = schema.get("fields")
    if parts is None:
        return {}
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        raise FieldError("schema.fields", f"expected a JSON array of field schemas, got {_kind(parts)}")
    for part in parts:
        if part.get("field") not in ("after", "before"):
            continue
        where = f"schema.fields.{part['field']}.fields"
        fields = part.get("fields")
        if fields is None:
            return {}
        if not isinstance(fields, list):
            raise FieldError(where, f"expected a JSON array of field schemas, got {_kind(fields)}")
        out = {}
        for f in fields:
            if not isinstance(f, dict) or not isinstance(f.get("field"), str):
                raise FieldError(where, "expected objects with a string 'field'")
            if not isinstance(f.get("name", ""), str | None):
                raise FieldError(f"{where}.{f['field']}.name", f"expected a string, got {_kind(f['name'])}")
            if not isinstance(f.get("parameters", {}), dict | None):
                raise FieldError(f"{where}.{f['field']}.parameters", "expected a JSON object")
            out[f["field"]] = f
        return out
    return {}


def coerce_debezium(unit: str) -> Coerce:
    """Debezium's encodings: epoch integers for temporal types, base64 unscaled bytes for decimals."""

    def coerce(t: DataType, value: Any, schema: dict | None) -> Any:
        name = (schema or {}).get("name") or ""
        if isinstance(value, int) and not isinstance(value, bool):
            try:
                return _epoch(t, value, name, unit)
            except OverflowError:
                raise ValueError(f"{short_repr(value)} is out of range for {t}") from None
        if t.name == "DECIMAL" and isinstance(value, str):
            if name == "org.apache.kafka.connect.data.Decimal":
                return _unscaled(value, _scale((schema.get("parameters") or {}).get("scale", t.scale)))
            if parse_number_text(value) is None:
                return _unscaled(value, t.scale)  # decimal.handling.mode=precise without a schema
        return value

    return coerce


def _epoch(t: DataType, value: int, name: str, unit: str) -> Any:
    """Debezium's epoch integers as ISO-8601 text for the temporal types (others pass through).

    TIMESTAMP(7..9)/TIMESTAMP_LTZ(7..9) get all nine fraction digits, computed in integers (exact for
    ``io.debezium.time.NanoTimestamp``); the type then refuses a value beyond its 64-bit nanosecond range."""
    if t.name in ("TIMESTAMP", "TIMESTAMP_LTZ"):
        u = {"io.debezium.time.Timestamp": "ms", "io.debezium.time.MicroTimestamp": "us"}.get(
            name, "ns" if name == "io.debezium.time.NanoTimestamp" else unit
        )
        if t.is_nanos:
            nanos = value * {"ms": 1_000_000, "us": 1_000, "ns": 1}[u]
            return format_timestamp_nanos(nanos, ltz=t.name == "TIMESTAMP_LTZ")
        micros = value * _UNIT[u] if u != "ns" else value // 1000
        stamp = _EPOCH + dt.timedelta(microseconds=micros)
        return stamp.isoformat() + ("Z" if t.name == "TIMESTAMP_LTZ" else "")
    if t.name == "DATE":
        return (_EPOCH.date() + dt.timedelta(days=value)).isoformat()
    if t.name == "TIME":
        u = {"io.debezium.time.Time": "ms", "io.debezium.time.NanoTime": "ns"}.get(name, "us")
        micros = value * _UNIT[u] if u != "ns" else value // 1000
        # A TIME is a time of day; MySQL's TIME (up to 838 h, or negative) has no Flink equivalent.
        if not 0 <= micros < MICROS_PER_DAY:
            raise ValueError(f"{short_repr(value)} ({u}) is not a time of day (0 to 24 h) for TIME")
        return time_from_micros(micros).isoformat()
    return value


#: Largest unscaled decimal accepted (bytes): DECIMAL(38) needs 16; the limit keeps int() and Decimal cheap.
_MAX_UNSCALED_BYTES = 64
_SCALE = re.compile(r"-?[0-9]{1,4}")


def _scale(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and -9999 <= value <= 9999:
        return value
    if isinstance(value, str) and _SCALE.fullmatch(value):
        return int(value)
    raise ValueError(
        f"the connect schema's decimal scale must be an integer in ±9999, got {short_repr(value)}"
    )


def _unscaled(text: str, scale: int) -> decimal.Decimal:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(
            f"{short_repr(text)} is neither a decimal number nor base64 unscaled bytes"
        ) from None
    if len(raw) > _MAX_UNSCALED_BYTES:
        raise ValueError(f"an unscaled decimal of {len(raw)} bytes exceeds {_MAX_UNSCALED_BYTES} bytes")
    # scaleb in the wide context: the default one would round a DECIMAL(38) to 28 digits.
    return decimal.Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale, DECIMAL_CONTEXT)


# --- canal-json / maxwell-json ----------------------------------------------------------------------------
_CANAL_KEYS = {
    "data", "old", "type", "database", "table", "pkNames", "isDdl", "es", "ts", "id", "sql", "sqlType",
    "mysqlType", "gtid",
}  # fmt: skip


def decode_canal(obj: Any, spec: TableSpec, opts: SourceOptions) -> Message | None:
    """Canal: ``type`` INSERT/UPDATE/DELETE over the rows of ``data``; ``old`` holds an update's changed
    fields before the change. DDL and other event types carry no row change."""
    obj = _object(obj, None)
    _only(obj, _CANAL_KEYS)
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise FieldError("type", f"expected a Canal event type string, got {short_repr(kind)}")
    is_ddl = obj.get("isDdl")
    if is_ddl is not None and not isinstance(is_ddl, bool):
        raise FieldError("isDdl", f"expected true or false, got {short_repr(is_ddl)}")
    if is_ddl or kind not in ("INSERT", "UPDATE", "DELETE"):
        return None
    if not _included(opts, obj.get("database"), obj.get("table")):
        return None
    rows = obj.get("data")
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise FieldError("data", "expected a JSON array of row objects")
    if kind == "INSERT":
        return Message([("+I", r) for r in rows], order_root=obj)
    if kind == "DELETE":
        return Message([("-D", r) for r in rows], order_root=obj)
    old = obj.get("old")
    if not isinstance(old, list) or len(old) != len(rows) or not all(isinstance(r, dict) for r in old):
        raise FieldError("old", f"expected a JSON array of {len(rows)} object(s) for an UPDATE")
    changes = []
    for after, changed in zip(rows, old, strict=True):
        changes += [("-U", {**after, **changed}), ("+U", after)]
    return Message(changes, order_root=obj)


_MAXWELL_KEYS = {
    "database", "table", "type", "ts", "xid", "xoffset", "commit", "data", "old", "position", "server_id",
    "thread_id", "primary_key", "primary_key_columns", "gtid", "query",
}  # fmt: skip
_MAXWELL_SKIP = {"bootstrap-start", "bootstrap-complete", "table-create", "table-alter", "table-drop"}


def decode_maxwell(obj: Any, spec: TableSpec, opts: SourceOptions) -> Message | None:
    """Maxwell: ``type`` insert/update/delete (and bootstrap-insert) with ``data`` and an update's ``old``."""
    obj = _object(obj, None)
    _only(obj, _MAXWELL_KEYS)
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise FieldError("type", f"expected a Maxwell event type string, got {short_repr(kind)}")
    if kind in _MAXWELL_SKIP or kind.startswith("database-"):
        return None
    if kind not in ("insert", "update", "delete", "bootstrap-insert"):
        raise FieldError("type", f"unknown Maxwell type {short_repr(kind)}")
    if not _included(opts, obj.get("database"), obj.get("table")):
        return None
    data = _object(obj.get("data"), "data")
    if kind in ("insert", "bootstrap-insert"):
        return Message([("+I", data)], order_root=obj)
    if kind == "delete":
        return Message([("-D", data)], order_root=obj)
    old = obj.get("old") or {}
    old = _object(old, "old")
    return Message([("-U", {**data, **old}), ("+U", data)], order_root=obj)


def coerce_text(t: DataType, value: Any, schema: dict | None) -> Any:
    """Canal (and often Maxwell) write numbers and booleans as strings, bits as 0/1."""
    if isinstance(value, str):
        if t.is_integer or t.name in ("FLOAT", "DOUBLE"):
            if t.name in ("FLOAT", "DOUBLE") and value in SPECIAL_FLOATS:
                return value  # decoded by the type, as "NaN" in any JSON input
            number = parse_number_text(value)  # ASCII digits only, bounded length (no 1e20000000 ints)
            if number is None:
                raise ValueError(f"{short_repr(value)} is not a number for {t}")
            return number
        if t.name == "BOOLEAN":
            lowered = value.lower()
            if lowered in ("1", "true"):
                return True
            if lowered in ("0", "false"):
                return False
    if t.name == "BOOLEAN" and value in (0, 1) and not isinstance(value, bool):
        return bool(value)
    return value


DECODERS: dict[str, Decoder] = {
    "changelog-json": decode_changelog,
    "upsert-kafka": decode_upsert_kafka,
    "debezium-json": decode_debezium,
    "canal-json": decode_canal,
    "maxwell-json": decode_maxwell,
}


def coercer(fmt: str, opts: SourceOptions) -> Coerce | None:
    if fmt == "debezium-json":
        return coerce_debezium(opts.timestamp_epoch_unit)
    if fmt in ("canal-json", "maxwell-json"):
        return coerce_text
    return None
