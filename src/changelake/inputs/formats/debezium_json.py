"""debezium-json: Debezium change events as JSON lines, with or without the ``schema``/``payload`` envelope.

``op`` ``c``/``r`` (snapshot read) -> ``+I after``; ``u`` -> ``-U before`` (when captured) and ``+U after``;
``d`` -> ``-D before``. A null payload (the tombstone Debezium writes after a delete) carries nothing. Values
use Debezium's encodings: epoch integers for temporal types (named by the connect schema, else
``timestamp-epoch-unit``), base64 unscaled bytes for decimals.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
import re
from typing import TYPE_CHECKING, Any

from changelake.errors import printable, short_repr
from changelake.inputs.formats.base import (
    Coerce,
    FieldError,
    JsonLinesFormat,
    Message,
    SourceEvent,
    included,
    json_kind,
    json_object,
    json_value,
    only_fields,
)
from changelake.types import (
    DECIMAL_CONTEXT,
    MICROS_PER_DAY,
    DataType,
    format_timestamp_nanos,
    parse_number_text,
    time_from_micros,
)

if TYPE_CHECKING:
    from changelake.source_options import SourceOptions
    from changelake.spec import TableSpec

_OPS = {"c", "u", "d", "r"}
_EPOCH = dt.datetime(1970, 1, 1)
_UNIT = {"ms": 1_000, "us": 1}  # microseconds per unit (nanoseconds are divided instead)


class DebeziumJson(JsonLinesFormat):
    name = "debezium-json"

    def decode(self, obj: Any, spec: TableSpec, opts: SourceOptions) -> Message | None:
        if obj is None:
            return None
        obj = json_object(obj, None)
        schemas: dict[str, dict] = {}
        if "payload" in obj:
            only_fields(obj, {"schema", "payload"})
            schemas = _connect_schemas(obj.get("schema"))
            obj = obj["payload"]
            if obj is None:
                return None
            obj = json_object(obj, "payload")
        only_fields(obj, {"before", "after", "op", "source", "ts_ms", "ts_us", "ts_ns", "transaction"})
        op = obj.get("op")
        if not isinstance(op, str) or op not in _OPS:
            # Flink's debezium-json fails on any other op (a truncate "t", a message "m", a typo) with these
            # words: no unknown op is skipped.
            shown = f'"{printable(op, 60)}"' if isinstance(op, str) else short_repr(op)
            raise FieldError(
                "op",
                f'Unknown "op" value {shown} (unknown Debezium op {short_repr(op)}; expected one of '
                f"{sorted(_OPS)})",
            )
        source = obj.get("source")
        if source is not None and not isinstance(source, dict):
            raise FieldError("source", f"expected a JSON object, got {json_kind(source)}")
        source = source or {}
        if not included(opts, source.get("db"), source.get("table")):
            return None
        before, after = obj.get("before"), obj.get("after")
        if op in ("c", "r", "u"):
            after = json_object(after, "after")
        if op == "d":
            before = json_object(before, "before")
            return Message([("-D", before)], order_root=obj, schemas=schemas)
        if op == "u":
            records = [] if before is None else [("-U", json_object(before, "before"))]
            return Message([*records, ("+U", after)], order_root=obj, schemas=schemas)
        return Message([("+I", after)], order_root=obj, schemas=schemas)

    def coercer(self, opts: SourceOptions) -> Coerce:
        return coerce_debezium(opts.timestamp_epoch_unit)

    def render(self, spec: TableSpec, events: list[SourceEvent], envelope: bool = False) -> list[str]:
        """Debezium's default encodings; with ``envelope``, each payload with its connect schema."""
        schema = _connect_schema(spec) if envelope else None
        lines = []
        for event in events:
            payload = {
                "before": _encoded_row(spec, event.before, envelope) if event.kind != "insert" else None,
                "after": _encoded_row(spec, event.after, envelope) if event.kind != "delete" else None,
                "op": {"insert": "c", "update": "u", "delete": "d"}[event.kind],
                "source": {"db": spec.namespace, "table": spec.table, "lsn": event.lsn, "ts_ms": event.ts_ms},
                "ts_ms": event.ts_ms,
            }
            lines.append(json.dumps({"schema": schema, "payload": payload} if envelope else payload))
        return lines


# --- decoding ---------------------------------------------------------------------------------------------
def _connect_schemas(schema: Any) -> dict[str, dict]:
    """Column -> Kafka Connect field schema (``name``, ``parameters``) of the ``after``/``before`` struct."""
    if schema is None:
        return {}
    schema = json_object(schema, "schema")
    parts = schema.get("fields")
    if parts is None:
        return {}
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        raise FieldError("schema.fields", f"expected a JSON array of field schemas, got {json_kind(parts)}")
    for part in parts:
        if part.get("field") not in ("after", "before"):
            continue
        where = f"schema.fields.{part['field']}.fields"
        fields = part.get("fields")
        if fields is None:
            return {}
        if not isinstance(fields, list):
            raise FieldError(where, f"expected a JSON array of field schemas, got {json_kind(fields)}")
        out = {}
        for f in fields:
            if not isinstance(f, dict) or not isinstance(f.get("field"), str):
                raise FieldError(where, "expected objects with a string 'field'")
            if not isinstance(f.get("name", ""), str | None):
                raise FieldError(
                    f"{where}.{f['field']}.name", f"expected a string, got {json_kind(f['name'])}"
                )
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
                parameters = (schema or {}).get("parameters") or {}
                return _unscaled(value, _scale(parameters.get("scale", t.scale or 0)))
            if parse_number_text(value) is None:
                return _unscaled(value, t.scale or 0)  # decimal.handling.mode=precise without a schema
        return value

    return coerce


def _epoch(t: DataType, value: int, name: str, unit: str) -> Any:
    """Debezium's epoch integers as ISO-8601 text for the temporal types (others pass through).

    Timestamps get all nine fraction digits, computed in integers (exact for ``io.debezium.time.NanoTimestamp``),
    so the type cuts the value itself to its declared precision (docs/semantics.md §15) and refuses one beyond
    its range."""
    if t.name in ("TIMESTAMP", "TIMESTAMP_LTZ"):
        u = {"io.debezium.time.Timestamp": "ms", "io.debezium.time.MicroTimestamp": "us"}.get(
            name, "ns" if name == "io.debezium.time.NanoTimestamp" else unit
        )
        nanos = value * {"ms": 1_000_000, "us": 1_000, "ns": 1}[u]
        return format_timestamp_nanos(nanos, ltz=t.name == "TIMESTAMP_LTZ")
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


# --- rendering --------------------------------------------------------------------------------------------
def _encoded_row(spec: TableSpec, row: dict | None, envelope: bool) -> dict | None:
    """Debezium's default encodings: epoch millis for timestamps, epoch days for dates, base64 decimals (with
    the envelope, whose schema gives their scale)."""
    if row is None:
        return None
    out: dict[str, Any] = {}
    for k, v in row.items():
        t = spec.column(k).type
        if isinstance(v, dt.datetime):
            out[k] = int((v - dt.datetime(1970, 1, 1)).total_seconds() * 1000)
        elif isinstance(v, dt.date):
            out[k] = (v - dt.date(1970, 1, 1)).days
        elif isinstance(v, decimal.Decimal) and envelope:
            unscaled = int(v.scaleb(t.scale or 0))
            out[k] = base64.b64encode(
                unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big", signed=True)
            ).decode()
        else:
            out[k] = json_value(v)
    return out


def _connect_schema(spec: TableSpec) -> dict:
    """The envelope's Kafka Connect schema of the table's rows."""
    fields = []
    for c in spec.columns:
        t = c.type
        f: dict[str, Any] = {"field": c.name, "optional": c.nullable}
        if t.name in ("TIMESTAMP", "TIMESTAMP_LTZ"):
            f.update(type="int64", name="io.debezium.time.Timestamp")
        elif t.name == "DATE":
            f.update(type="int32", name="io.debezium.time.Date")
        elif t.name == "DECIMAL":
            f.update(
                type="bytes",
                name="org.apache.kafka.connect.data.Decimal",
                parameters={"scale": str(t.scale), "connect.decimal.precision": str(t.precision)},
            )
        else:
            f["type"] = {"BIGINT": "int64", "INT": "int32", "BOOLEAN": "boolean", "DOUBLE": "double"}.get(
                t.name, "string"
            )
        fields.append(f)
    value = {"type": "struct", "optional": True, "fields": fields}
    return {
        "type": "struct",
        "fields": [
            {**value, "field": "before"},
            {**value, "field": "after"},
            {"type": "string", "field": "op"},
        ],
    }
