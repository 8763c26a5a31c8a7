"""What every input format shares: the interface a format implements, the records it decodes to, the events
datagen renders, and the strict JSON parse of one landed line.

A format is an :class:`InputFormat`: one of two kinds.

- :class:`JsonLinesFormat`: a landed line is one source message. ``decode`` takes the parsed line and returns a
  :class:`Message` (or ``None`` when the line carries no row change: a Debezium tombstone, a DDL event, a
  filtered database/table), raising :class:`FieldError` naming the offending field. Values stay raw JSON
  there; :mod:`changelake.inputs.readers` converts them to the table's types, through ``coercer`` for formats
  that encode values their own way (Canal's strings, Debezium's epochs).
- :class:`RowsFormat`: a landed file is a table of rows, decoded column-wise (Parquet).

Both render :class:`SourceEvent` s (what :mod:`changelake.inputs.datagen` simulates) as one batch file.

Row kinds follow Flink's changelog: an update yields ``-U`` (before image) and ``+U`` (after image);
upsert-kafka yields ``+U`` per value and ``-D`` per tombstone, never ``-U``.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, ClassVar

from changelake.source_options import FORMAT_DECLARATIONS
from changelake.types import DataType

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from changelake.inputs.records import DecodedBatch
    from changelake.source_options import SourceOptions
    from changelake.spec import TableSpec

#: The row kinds of a changelog record: insert, update before image, update after image, delete.
OPS = ("+I", "-U", "+U", "-D")

#: One changelog record as a format decodes it (and datagen's events become): a row kind of :data:`OPS` and
#: the row image, column name -> raw value. Not :class:`SourceEvent`, which is one change of the source
#: (an update carries both images and becomes two records).
ChangelogRecord = tuple[str, dict[str, Any]]

#: A format's own value encodings -> the plain JSON forms the column types decode (type, value, the column's
#: schema in the message if the format has one).
Coerce = Callable[[DataType, Any, dict | None], Any]


class FieldError(Exception):
    """A problem with one field of a message (the reader adds file and line)."""

    def __init__(self, field: str | None, reason: str):
        super().__init__(reason)
        self.field, self.reason = field, reason


@dataclass
class Message:
    """The changelog records of one landed line, plus what the format knows about its origin."""

    records: list[ChangelogRecord]
    kafka: tuple[str, int, int] | None = None  # (topic, partition, offset)
    order_root: Any = None  # the object the ``ordering`` path is resolved in
    schemas: dict[str, dict] = field(default_factory=dict)  # Debezium connect schema per column


@dataclass
class SourceEvent:
    """One change of a (simulated) source, as datagen produces it and every format renders it: an insert,
    an update (with its before image when the source has one) or a delete."""

    kind: str  # insert | update | delete
    before: dict | None
    after: dict | None
    lsn: int = 0
    ts_ms: int = 0
    kafka: tuple[str, int, int] | None = None  # (topic, partition, offset), for upsert-kafka

    def records(self) -> list[ChangelogRecord]:
        """The event as changelog records: an update is -U before, +U after (just +U without a before image)."""
        if self.kind == "insert":
            return [("+I", self.after or {})]
        if self.kind == "delete":
            return [("-D", self.before or {})]
        after = self.after or {}
        return [("-U", self.before), ("+U", after)] if self.before else [("+U", after)]


# --- the interface ----------------------------------------------------------------------------------------
class InputFormat(ABC):
    """One input format: how its landed files decode into changelog records, and how datagen writes them."""

    #: The name a table spec's ``source.format`` (and ``--format``) uses.
    name: ClassVar[str]
    #: The file extension of the batches datagen writes.
    extension: ClassVar[str] = "jsonl"
    #: Landed-file suffixes read in this format when the table names no format.
    suffixes: ClassVar[tuple[str, ...]] = ()

    @property
    def options(self) -> frozenset[str]:
        """The source options only some formats accept: the format's declaration below the spec
        (:data:`changelake.source_options.FORMAT_DECLARATIONS`, which refuses them for other formats)."""
        return FORMAT_DECLARATIONS[self.name][0]

    @property
    def kafka_metadata(self) -> bool:
        """Whether the records carry Kafka topic/partition/offset (for ``dedup``/``ordering`` by offsets)."""
        return FORMAT_DECLARATIONS[self.name][1]

    @abstractmethod
    def write(self, spec: TableSpec, events: list[SourceEvent], path: Path, envelope: bool = False) -> int:
        """Write ``events`` as one batch file at ``path``; return the source messages written.

        ``envelope``: Debezium's schema/payload envelope (the other formats have none)."""


class JsonLinesFormat(InputFormat):
    """A format of JSON lines: each line one source message, decoded on its own."""

    @abstractmethod
    def decode(self, obj: Any, spec: TableSpec, opts: SourceOptions) -> Message | None:
        """The records of one parsed line, None if it carries none; FieldError names a bad field."""

    def coercer(self, opts: SourceOptions) -> Coerce | None:
        """The format's own value encodings, if it has any (applied to every non-null value)."""
        return None

    def columns(
        self, data: bytes | memoryview, first_line: int, spec: TableSpec
    ) -> tuple[np.ndarray, pa.Array, list[pa.Array]] | None:
        """A byte range of lines decoded column-wise: (line numbers, ops, storage-typed columns), or None to
        decode it line by line. Only a format with a column-wise path whose results equal the per-line
        path's implements it."""
        return None

    @abstractmethod
    def render(self, spec: TableSpec, events: list[SourceEvent], envelope: bool = False) -> list[str]:
        """One JSON line per source message."""

    def write(self, spec: TableSpec, events: list[SourceEvent], path: Path, envelope: bool = False) -> int:
        lines = self.render(spec, events, envelope)
        path.write_text("\n".join(lines) + ("\n" if lines else ""))
        return len(lines)


class RowsFormat(InputFormat):
    """A format whose landed file is a table of changelog rows, decoded column-wise; its batches are read
    alone and in arrival order (a file's rows carry no ordering field)."""

    #: The format's name in messages ("Parquet batches are read in arrival order, alone").
    title: ClassVar[str]
    #: The bytes every file of the format starts with (so the JSON-lines reader can name the mistake).
    magic: ClassVar[bytes]

    @abstractmethod
    def read(self, path: PurePath, spec: TableSpec, opts: SourceOptions, out: DecodedBatch) -> pa.Table:
        """The file's records (``_seq`` from 0, ``_op``, the columns); bad rows go to ``out.reject``."""

    @abstractmethod
    def row_ranges(self, path: PurePath, rows_per_range: int) -> list[tuple[int, int]] | None:
        """Rows ``[start, end)`` for decode tasks, about ``rows_per_range`` each; None if the file cannot
        be planned (its task then reads it whole and reports why)."""

    @abstractmethod
    def read_rows(
        self, path: PurePath, start: int, end: int, spec: TableSpec, opts: SourceOptions, out: DecodedBatch
    ) -> tuple[pa.Table, int]:
        """The records of rows ``[start, end)`` and the number of rows before the first."""


# --- one JSON line ----------------------------------------------------------------------------------------
#: Deepest nesting of arrays and objects in a line: the envelopes need about 6 levels (Debezium's connect
#: schema); a limit keeps every later step (comparisons, error messages) far from Python's recursion limit.
MAX_DEPTH = 64
_DEPTH_TOKENS = re.compile(r'\\.|["\[\]{}]', re.DOTALL)
# The key of a number too long for int() (Python refuses more than 4300 digits), to name it in the error.
_LONG_NUMBER_KEY = re.compile(r'"((?:[^"\\]|\\.){0,200})"\s*:\s*-?[0-9]{4000}')
# The key of a number whose exponent Decimal refuses, to name it in the error.
_HUGE_EXPONENT_KEY = re.compile(r'"((?:[^"\\]|\\.){0,200})"\s*:\s*-?[0-9.]+[eE][+-]?[0-9]{19}')


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
    except decimal.InvalidOperation:
        # Decimal refuses an exponent of 19 digits or more (its limit is 10**18 - 1): no column type holds it.
        m = _HUGE_EXPONENT_KEY.search(text)
        raise FieldError(
            m.group(1) if m else None, "a number with an exponent of 19 digits or more"
        ) from None
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


# --- envelope fields --------------------------------------------------------------------------------------
def json_object(value: Any, name: str | None) -> dict:
    """``value`` if it is a JSON object, else FieldError naming ``name``."""
    if not isinstance(value, dict):
        raise FieldError(name, f"expected a JSON object, got {json_kind(value)}")
    return value


def json_kind(value: Any) -> str:
    """The JSON kind of a parsed value, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float | decimal.Decimal):
        return "number"
    names: dict[type, str] = {dict: "object", list: "array", str: "string"}
    return names.get(type(value), type(value).__name__)


def only_fields(obj: dict, allowed: set[str]) -> None:
    """Refuse a top-level field the envelope does not have (naming the first, alphabetically)."""
    extra = sorted(set(obj) - allowed)
    if extra:
        raise FieldError(extra[0], f"unknown top-level field; expected some of {sorted(allowed)}")


def included(opts: SourceOptions, database: Any, table: Any) -> bool:
    """Whether a CDC message's database and table pass ``database.include``/``table.include``."""
    if opts.database_include and not (
        isinstance(database, str) and opts.database_include.fullmatch(database)
    ):
        return False
    if opts.table_include and not (isinstance(table, str) and opts.table_include.fullmatch(table)):
        return False
    return True


#: The source options of the CDC formats that filter messages by their database and table.


# --- rendering --------------------------------------------------------------------------------------------
def json_value(value: Any) -> Any:
    """A Python value as its plain JSON form (the form every column type decodes)."""
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime):
        return value.isoformat(sep="T")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


def plain_row(row: dict | None) -> dict | None:
    """A row image in plain JSON forms."""
    return None if row is None else {k: json_value(v) for k, v in row.items()}
