"""maxwell-json: Maxwell's binlog events as JSON lines.

``type`` insert/update/delete (and bootstrap-insert) with the row in ``data`` and an update's changed fields
before the change in ``old``; bootstrap markers and schema events carry no row change. Values are often
text, read back as Canal's (:func:`~changelake.inputs.formats.canal_json.coerce_text`).
"""

from __future__ import annotations

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
    only_fields,
)
from changelake.inputs.formats.canal_json import changed_fields, coerce_text, text_row

if TYPE_CHECKING:
    from changelake.source_options import SourceOptions
    from changelake.spec import TableSpec

_KEYS = {
    "database", "table", "type", "ts", "xid", "xoffset", "commit", "data", "old", "position", "server_id",
    "thread_id", "primary_key", "primary_key_columns", "gtid", "query",
}  # fmt: skip
_ROW_TYPES = frozenset({"insert", "update", "delete", "bootstrap-insert"})
# Maxwell's bootstrap markers and its schema events (with output_ddl): no row change.
_SKIP = frozenset({
    "bootstrap-start", "bootstrap-complete", "table-create", "table-alter", "table-drop", "database-create",
    "database-alter", "database-drop",
})  # fmt: skip


class MaxwellJson(JsonLinesFormat):
    name = "maxwell-json"

    def decode(self, obj: Any, spec: TableSpec, opts: SourceOptions) -> Message | None:
        obj = json_object(obj, None)
        only_fields(obj, _KEYS)
        kind = obj.get("type")
        if not isinstance(kind, str):
            raise FieldError("type", f"expected a Maxwell event type string, got {short_repr(kind)}")
        if kind in _SKIP:
            return None
        if kind not in _ROW_TYPES:
            # Flink's maxwell-json fails on a type it does not decode with these words; the bootstrap and schema
            # events above are the only ones skipped (they carry no row), so nothing unknown is lost quietly.
            raise FieldError(
                "type",
                f'Unknown "type" value "{printable(kind, 60)}" (unknown Maxwell type {short_repr(kind)}; '
                f"expected one of {sorted(_ROW_TYPES)}, or a bootstrap or schema event)",
            )
        if not included(opts, obj.get("database"), obj.get("table")):
            return None
        data = json_object(obj.get("data"), "data")
        if kind in ("insert", "bootstrap-insert"):
            return Message([("+I", data)], order_root=obj)
        if kind == "delete":
            return Message([("-D", data)], order_root=obj)
        old = obj.get("old") or {}
        old = json_object(old, "old")
        return Message([("-U", {**data, **old}), ("+U", data)], order_root=obj)

    def coercer(self, opts: SourceOptions) -> Coerce:
        return coerce_text

    def render(self, spec: TableSpec, events: list[SourceEvent], envelope: bool = False) -> list[str]:
        """One event per row change, values as text; an update's ``old`` holds the fields it changed."""
        lines = []
        for event in events:
            data = text_row(event.after if event.kind != "delete" else event.before) or {}
            message: dict[str, Any] = {
                "database": spec.namespace,
                "table": spec.table,
                "type": event.kind,
                "ts": event.ts_ms // 1000,
                "xid": event.lsn,
                "data": data,
            }
            if event.kind == "update":
                message["old"] = changed_fields(data, event.before)
            lines.append(json.dumps(message))
        return lines
