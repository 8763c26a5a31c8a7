"""canal-json: Alibaba Canal's binlog events as JSON lines.

``type`` INSERT/UPDATE/DELETE over the rows of ``data``; ``old`` holds an update's changed fields before the
change. DDL events (``"isDdl": true``, or a CREATE) carry no row change and are skipped; any other type is
refused, as Flink's canal-json refuses it. Canal writes every value as a string (numbers, booleans as 0/1,
datetimes with a space), which :func:`coerce_text` reads back.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING, Any

from changelake.errors import printable, short_repr
from changelake.inputs.formats.base import (
    Coerce,
    FieldError,
    JsonLinesFormat,
    Message,
    SourceEvent,
    included,
    json_object,
    json_value,
    only_fields,
)
from changelake.types import SPECIAL_FLOATS, DataType, parse_number_text

if TYPE_CHECKING:
    from changelake.source_options import SourceOptions
    from changelake.spec import TableSpec

_KEYS = {
    "data", "old", "type", "database", "table", "pkNames", "isDdl", "es", "ts", "id", "sql", "sqlType",
    "mysqlType", "gtid",
}  # fmt: skip
_KINDS = {"insert": "INSERT", "update": "UPDATE", "delete": "DELETE"}
_ROW_TYPES = frozenset(_KINDS.values())


class CanalJson(JsonLinesFormat):
    name = "canal-json"

    def decode(self, obj: Any, spec: TableSpec, opts: SourceOptions) -> Message | None:
        obj = json_object(obj, None)
        only_fields(obj, _KEYS)
        kind = obj.get("type")
        if not isinstance(kind, str):
            raise FieldError("type", f"expected a Canal event type string, got {short_repr(kind)}")
        is_ddl = obj.get("isDdl")
        if is_ddl is not None and not isinstance(is_ddl, bool):
            raise FieldError("isDdl", f"expected true or false, got {short_repr(is_ddl)}")
        if not included(opts, obj.get("database"), obj.get("table")):
            return None  # Flink filters by database and table before it reads the type
        if kind not in _ROW_TYPES:
            # Flink's CanalJsonDeserializationSchema decodes INSERT, UPDATE and DELETE whatever "isDdl" says,
            # skips CREATE (FLINK-19873) and fails on any other type with 'Unknown "type" value "<type>"': so a
            # lower-case "insert" or a made-up type is a bad record, never a silent skip. Unlike Flink, the other
            # DDL events Canal marks "isDdl": true (ALTER, ERASE, TRUNCATE, QUERY, ...) are skipped too: they
            # say themselves that they carry no row.
            if kind == "CREATE" or is_ddl:
                return None
            raise FieldError(
                "type",
                f'Unknown "type" value "{printable(kind, 60)}". Canal\'s row types are INSERT, UPDATE and '
                'DELETE (upper case); a DDL event has "isDdl": true',
            )
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
        records = []
        for after, changed in zip(rows, old, strict=True):
            records += [("-U", {**after, **changed}), ("+U", after)]
        return Message(records, order_root=obj)

    def coercer(self, opts: SourceOptions) -> Coerce:
        return coerce_text

    def render(self, spec: TableSpec, events: list[SourceEvent], envelope: bool = False) -> list[str]:
        """One event per row change, values as text; an update's ``old`` holds the fields it changed."""
        lines = []
        for event in events:
            data = text_row(event.after if event.kind != "delete" else event.before) or {}
            message: dict[str, Any] = {
                "data": [data], "database": spec.namespace, "table": spec.table, "type": _KINDS[event.kind],
                "isDdl": False, "pkNames": list(spec.primary_key), "es": event.ts_ms, "ts": event.ts_ms,
                "id": event.lsn,
            }  # fmt: skip
            if event.kind == "update":
                message["old"] = [changed_fields(data, event.before)]
            lines.append(json.dumps(message))
        return lines


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


def text_row(row: dict | None) -> dict | None:
    """A row image as Canal writes it: every value a string, datetimes with a space, booleans 1/0."""
    if row is None:
        return None
    out: dict[str, Any] = {}
    for k, v in row.items():
        if v is None:
            out[k] = None
        elif isinstance(v, dt.datetime):
            out[k] = v.isoformat(sep=" ")
        elif isinstance(v, bool):
            out[k] = "1" if v else "0"
        else:
            out[k] = str(json_value(v))
    return out


def changed_fields(data: dict, before: dict | None) -> dict:
    """An update's ``old``: the before image's text of the fields the update changed."""
    old = text_row(before) or {}
    return {k: v for k, v in old.items() if k in data and data[k] != v}
