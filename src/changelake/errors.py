"""Exception types. Every error a user can cause is a ChangelakeError with a message naming what is wrong."""

import decimal
from typing import Any

_FIELD_LIMIT = 200
_REASON_LIMIT = 2000


class ChangelakeError(Exception):
    """Base class: a problem the user can fix (bad spec, bad input, refused write)."""


class SpecError(ChangelakeError):
    """A table spec or option is invalid (raised when the table is created or loaded)."""


class BadRecordError(ChangelakeError):
    """A landed record cannot be decoded. Names file, line and field."""

    def __init__(self, file: str, line: int, field: str | None, reason: str):
        # Field names and reasons come from the input: kept printable and bounded, so the message can be
        # written to any terminal, log or dead-letter file.
        field = None if field is None else printable(field, _FIELD_LIMIT)
        reason = printable(reason, _REASON_LIMIT)
        self.file, self.line, self.field, self.reason = file, line, field, reason
        where = f"{file}:{line}" + (f" field '{field}'" if field else "")
        super().__init__(f"{where}: {reason}")


class BatchRefusedError(ChangelakeError):
    """A batch id or checksum is refused by the exactly-once protocol."""


class WriteRefusedError(ChangelakeError):
    """A write violates the table's semantics (e.g. deletes disabled); the batch is not applied."""


def java_list(items: Any) -> str:
    """Names as Java prints a list, ``[a, b]``: how Fluss's messages show columns (theirs are kept verbatim)."""
    return "[" + ", ".join(str(i) for i in items) + "]"


def printable(text: Any, limit: int = _REASON_LIMIT) -> str:
    """``text`` with control characters and lone surrogates escaped, cut to ``limit`` characters."""
    text = str(text)
    if len(text) > limit:
        text = text[:limit] + f"... ({len(text)} characters)"
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text


def short_repr(value: Any, limit: int = 60) -> str:
    """A bounded description of an input value for an error message (never the repr of a huge value)."""
    if isinstance(value, dict):
        return f"a JSON object with {len(value)} field(s)"
    if isinstance(value, list):
        return f"a JSON array of {len(value)} value(s)"
    if isinstance(value, str | bytes) and len(value) > limit:
        return repr(value[:limit]) + f"... ({len(value)} characters)"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"an integer of about {int(value.bit_length() * 0.30103)} digits"
    text = str(value) if isinstance(value, decimal.Decimal) else repr(value)
    if len(text) > limit:
        return text[:limit] + f"... ({len(text)} characters)"
    return text
