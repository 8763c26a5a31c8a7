"""Pluggable batch readers: turn a batch's landed files into typed changelog records.

:func:`read_batch` yields a :class:`DecodedBatch`: an Arrow table with ``_seq`` (the record's position in the
batch), ``_op`` (``+I``, ``-U``, ``+U``, ``-D``) and the table's columns in storage types, plus what the
source settings (:mod:`changelake.inputs.sources`) did: records quarantined, messages skipped, Kafka redeliveries
found and dropped, and the Kafka offsets applied so far.

Formats: ``changelog-json``, ``upsert-kafka``, ``debezium-json``, ``canal-json``, ``maxwell-json`` (JSON
lines; envelopes in :mod:`changelake.inputs.formats`) and ``changelog-parquet`` (an ``op`` column plus the row
columns). A bad record raises :class:`BadRecordError` naming file, line and field before anything is
written, or, under ``on-bad-record: quarantine``, becomes a dead letter with its raw text and reason.
"""

from __future__ import annotations

import decimal
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from changelake.errors import BadRecordError, ChangelakeError, short_repr
from changelake.inputs import formats
from changelake.inputs.sources import SourceOptions
from changelake.spec import TableSpec
from changelake.types import ColumnTypeError

OPS = formats.OPS
JSON_FORMATS = tuple(formats.DECODERS)
PARQUET_MAGIC = b"PAR1"
#: The reason a record gets when decoding it raised something no rule anticipated: the record is still a
#: bad record (quarantined or refusing its batch), never a crash; the fuzz tests look for this text.
UNEXPECTED = "could not decode the record"


@dataclass
class DecodedBatch:
    """Typed records of one batch, in batch order, and what reading them found."""

    records: pa.Table  # _seq, _op, <columns>
    dead_letters: list[dict] = field(
        default_factory=list
    )  # quarantined records: file, line, field, reason, raw
    messages: int = 0  # source messages (lines, Parquet rows) read
    skipped: int = 0  # messages that carry no row change: envelope tombstones, DDL, filtered tables
    redelivered: int = 0  # Kafka records whose offset was already applied or repeats in the batch
    deduplicated: int = 0  # of those, dropped (``dedup: kafka-offsets``)
    kafka_offsets: dict[str, int] | None = None  # "topic:partition" -> last offset, after this batch

    @property
    def num_records(self) -> int:
        return self.records.num_rows

    @property
    def quarantined(self) -> int:
        return len(self.dead_letters)

    def op_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(OPS, 0)
        for row in pc.value_counts(self.records.column("_op")).to_pylist():
            counts[row["values"]] = row["counts"]
        return counts

    def reject(self, error: BadRecordError, raw: str, opts: SourceOptions) -> None:
        """Fail on a bad record, or keep it as a dead letter under ``on-bad-record: quarantine``."""
        if not opts.quarantine:
            raise error
        self.dead_letters.append(
            {
                "file": error.file,
                "line": error.line,
                "field": error.field,
                "reason": error.reason,
                "raw": raw.rstrip("\n"),
            }
        )


def batch_arrow_schema(spec: TableSpec) -> pa.Schema:
    return pa.schema(
        [pa.field("_seq", pa.int64(), False), pa.field("_op", pa.string(), False)]
        + [pa.field(c.name, c.type.arrow_type()) for c in spec.columns]
    )


def reader_names() -> list[str]:
    return sorted([*JSON_FORMATS, "changelog-parquet"])


def format_for(path: Path, spec: TableSpec) -> str:
    """The input format of a landed file: the table's ``source.format``, else by file extension."""
    configured = spec.source.get("format")
    if configured:
        return str(configured)
    if path.suffix == ".parquet":
        return "changelog-parquet"
    return "changelog-json"


def read_batch(
    paths: list[Path], spec: TableSpec, fmt: str | None = None, applied_offsets: dict[str, int] | None = None
) -> DecodedBatch:
    """Decode the files of one batch (in the given order) into one DecodedBatch.

    ``applied_offsets`` are the Kafka offsets committed with the previous batch (for redelivery detection).
    """
    opts = spec.source_options
    schema = batch_arrow_schema(spec)
    out = DecodedBatch(schema.empty_table())
    entries: list[_Entry] = []
    parquet: list[pa.Table] = []
    for path in paths:
        name = fmt or format_for(path, spec)
        if name in JSON_FORMATS:
            entries += _JsonReader(spec, name, opts, out).read(path)
        elif name == "changelog-parquet":
            if opts.ordering != "arrival" or entries:
                raise ChangelakeError(f"{path}: Parquet batches are read in arrival order, alone")
            parquet.append(_read_parquet(path, spec, opts, out))
        else:
            raise ChangelakeError(f"{path}: unknown input format '{name}'; known: {reader_names()}")
    if parquet:
        tables, seq = [], 0
        for t in parquet:
            tables.append(t.set_column(0, "_seq", pa.array(range(seq, seq + t.num_rows), pa.int64())))
            seq += t.num_rows
        out.records = pa.concat_tables([t.cast(schema) for t in tables])
        out.kafka_offsets = dict(applied_offsets or {}) or None
        return out
    entries = _order_and_dedup(entries, opts, out, applied_offsets or {})
    out.records = _entries_table(entries, spec, 0)
    return out


class ColumnRules:
    """The rules a table adds to its column types, for both input paths: a FLOAT/DOUBLE primary-key value
    must be a number (NaN never equals itself, so it cannot identify a row; infinities are refused with it),
    and an rbm32/rbm64 aggregation column holds serialized roaring bitmaps (checked here rather than at the
    key's next merge, inside an executor)."""

    def __init__(self, spec: TableSpec):
        self.spec = spec
        self.checks: dict[str, Callable[[Any], None]] = {}
        for col in spec.columns:
            if col.name in spec.primary_key and col.type.name in ("FLOAT", "DOUBLE"):
                self.checks[col.name] = _finite_key
            elif spec.merge_engine == "aggregation" and spec.agg_function(col.name) in ("rbm32", "rbm64"):
                self.checks[col.name] = _bitmap_check(32 if spec.agg_function(col.name) == "rbm32" else 64)

    def check(self, values: list) -> tuple[str, str] | None:
        """(column, reason) of the first typed value of a row that breaks a rule, else None."""
        for i, col in enumerate(self.spec.columns):
            check = self.checks.get(col.name)
            if check is not None and values[i] is not None:
                try:
                    check(values[i])
                except ValueError as e:
                    return col.name, str(e)
        return None

    def validate_arrow(self, name: str, array: pa.Array) -> list[tuple[int, str]]:
        """Every row (0-based, in order) of a storage-typed column that breaks a rule, and the reason."""
        check = self.checks.get(name)
        if check is None:
            return []
        if check is _finite_key:
            rows = pc.indices_nonzero(pc.fill_null(pc.invert(pc.is_finite(array)), False)).to_pylist()
        else:
            rows = range(len(array))  # bitmaps: each value is deserialized
        out = []
        for row in rows:
            value = array[row].as_py()
            if value is None:
                continue
            try:
                check(value)
            except ValueError as e:
                out.append((row, str(e)))
        return out


def _finite_key(value: float) -> None:
    if not math.isfinite(value):
        raise ValueError(f"{value} is not allowed in a primary-key column (NaN and infinities are refused)")


def _bitmap_check(bits: int) -> Callable[[bytes], None]:
    from pyroaring import BitMap, BitMap64

    cls = BitMap if bits == 32 else BitMap64

    def check(value: bytes) -> None:
        try:
            cls.deserialize(bytes(value))
        except Exception:
            raise ValueError(
                f"{len(value)} bytes are not a serialized {bits}-bit roaring bitmap (rbm{bits})"
            ) from None

    return check


def _missing_required(op: str, values: list, spec: TableSpec) -> tuple[str, str] | None:
    """Primary-key values must be present; NOT NULL columns too, except on deletes (only the key matters)."""
    for col, value in zip(spec.columns, values, strict=True):
        if value is None and (col.name in spec.primary_key or (not col.nullable and op != "-D")):
            what = "primary key" if col.name in spec.primary_key else "NOT NULL"
            return col.name, f"{what} column is missing or null"
    return None


@dataclass
class _Entry:
    """One decoded source message: where it came from and its typed row changes."""

    file: str
    line: int
    kafka: tuple[str, int, int] | None
    order: tuple | None
    changes: list[tuple[str, list]]


class _JsonReader:
    """Reads the JSON-lines formats through their envelope decoder (:mod:`changelake.inputs.formats`)."""

    def __init__(self, spec: TableSpec, fmt: str, opts: SourceOptions, out: DecodedBatch):
        self.spec, self.opts, self.out = spec, opts, out
        self.decode = formats.DECODERS[fmt]
        self.coerce = formats.coercer(fmt, opts)
        self.fmt = fmt
        self.index = {n: i for i, n in enumerate(spec.column_names)}
        self.types = [c.type for c in spec.columns]
        self.decoders = [c.type.decode_json for c in spec.columns]
        self.rules = ColumnRules(spec)

    def read(self, path: Path) -> list[_Entry]:
        """Every line of a landed file, as bytes: each line is decoded (UTF-8 included) on its own."""
        entries = []
        try:
            with open(path, "rb") as fh:
                for line_no, line in enumerate(fh, start=1):
                    if not line.strip():
                        continue
                    self.out.messages += 1
                    try:
                        entry = self._entry(str(path), line_no, line)
                    except formats.FieldError as e:
                        error = BadRecordError(str(path), line_no, e.field, e.reason)
                        self.out.reject(error, raw_text(line), self.opts)
                        continue
                    if entry is None:
                        self.out.skipped += 1
                    else:
                        entries.append(entry)
        except OSError as e:
            raise ChangelakeError(f"{path}: cannot read the landed file: {e.strerror or e}") from None
        return entries

    def _entry(self, file: str, line_no: int, line: str | bytes) -> _Entry | None:
        """Decode one line (bytes or text). A problem with the record raises FieldError (the caller adds
        file and line, and quarantines or refuses); a file that is not JSON lines at all raises
        BadRecordError, which refuses the batch even under quarantine."""
        # Pass bytes: the UTF-8 check and the Parquet check below then happen here, for every caller.
        if line_no == 1 and line[:4] in (PARQUET_MAGIC, PARQUET_MAGIC.decode()):
            raise BadRecordError(
                file, 1, None, f"this is a Parquet file, but the table reads {self.fmt} (JSON lines)"
            )
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as e:
                raise formats.FieldError(None, f"invalid UTF-8 at byte {e.start + 1} of the line") from None
        if line_no == 1:
            line = line.removeprefix("\ufeff")  # a UTF-8 byte order mark
        try:
            return self._decode_line(file, line_no, line)
        except formats.FieldError:
            raise
        except Exception as e:  # a rule nobody wrote yet: still a bad record, never a crash
            raise formats.FieldError(
                None, f"{UNEXPECTED}: {type(e).__name__}: {short_repr(str(e), 200)}"
            ) from None

    def _decode_line(self, file: str, line_no: int, line: str) -> _Entry | None:
        obj = formats.parse_line(line)
        message = self.decode(obj, self.spec, self.opts)
        if message is None:
            return None
        changes = [(op, self._typed(op, data, message.schemas)) for op, data in message.changes]
        return _Entry(file, line_no, message.kafka, self._order_key(message), changes)

    def _typed(self, op: str, data: dict, schemas: dict) -> list:
        values: list = [None] * len(self.index)
        for name, value in data.items():
            i = self.index.get(name)
            if i is None:
                if self.opts.ignore_unknown_fields:
                    continue
                raise formats.FieldError(name, f"unknown column; table columns are {list(self.index)}")
            try:
                if self.coerce is not None and value is not None:
                    value = self.coerce(self.types[i], value, schemas.get(name))
                values[i] = self.decoders[i](value)
            except ValueError as e:
                raise formats.FieldError(name, str(e)) from None
        missing = _missing_required(op, values, self.spec) or self.rules.check(values)
        if missing:
            raise formats.FieldError(*missing)
        return values

    def _order_key(self, message: formats.Message) -> tuple | None:
        if self.opts.ordering == "kafka-offset":
            if message.kafka is None:
                raise formats.FieldError("offset", "ordering by Kafka offset needs partition and offset")
            return message.kafka
        path = self.opts.order_path
        if path is None:
            return None
        value = message.order_root
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        if value is None or isinstance(value, bool) or not isinstance(value, int | decimal.Decimal | str):
            raise formats.FieldError(
                self.opts.ordering, f"ordering field missing or not a number/string: {short_repr(value)}"
            )
        return (0, value, "") if isinstance(value, int | decimal.Decimal) else (1, 0, str(value))


def _order_and_dedup(
    entries: list[_Entry], opts: SourceOptions, out: DecodedBatch, applied: dict
) -> list[_Entry]:
    """Sort by the ordering field (stable: ties keep arrival order), then find redelivered Kafka records.

    A record is redelivered when its offset is at or below the last applied offset of its topic-partition,
    or repeats one earlier in the batch. It is counted always and dropped under ``dedup: kafka-offsets``.
    """
    if opts.ordering != "arrival":
        entries = sorted(entries, key=lambda e: e.order)
    offsets = dict(applied)
    seen: set[tuple[str, int]] = set()
    kept = []
    for entry in entries:
        if entry.kafka is not None:
            topic, partition, offset = entry.kafka
            tp = f"{topic}:{partition}"
            if offset <= applied.get(tp, -1) or (tp, offset) in seen:
                out.redelivered += 1
                if opts.dedup_offsets:
                    out.deduplicated += 1
                    continue
            else:
                seen.add((tp, offset))
                offsets[tp] = max(offsets.get(tp, -1), offset)
        kept.append(entry)
    out.kafka_offsets = offsets or None
    return kept


def _entries_table(entries: list[_Entry], spec: TableSpec, first_seq: int) -> pa.Table:
    ops: list[str] = []
    columns: list[list] = [[] for _ in spec.columns]
    for entry in entries:
        for op, values in entry.changes:
            ops.append(op)
            for i, v in enumerate(values):
                columns[i].append(v)
    n = len(ops)
    arrays = [pa.array(range(first_seq, first_seq + n), pa.int64()), pa.array(ops, pa.string())]
    arrays += [pa.array(col, c.type.arrow_type()) for col, c in zip(columns, spec.columns, strict=True)]
    return pa.Table.from_arrays(arrays, schema=batch_arrow_schema(spec))


INPUT_META = (
    ("_op", pa.string()),
    ("_batch_id", pa.int64()),
    ("_line", pa.int64()),
    ("_topic", pa.string()),
    ("_partition", pa.int32()),
    ("_offset", pa.int64()),
)


def delivered_records(batches: dict[int, Path], spec: TableSpec) -> pa.Table:
    """Every record of the given JSON-lines batches as delivered (no ordering, no dedup), with its batch,
    line and Kafka topic/partition/offset; quarantined lines are left out. Parquet batches are skipped."""
    opts = spec.source_options
    names = [*spec.column_names, *(n for n, _ in INPUT_META)]
    columns: dict[str, list] = {n: [] for n in names}
    for batch_id, path in batches.items():
        fmt = format_for(path, spec)
        if fmt not in JSON_FORMATS:
            continue
        scratch = DecodedBatch(batch_arrow_schema(spec).empty_table())
        for entry in _JsonReader(spec, fmt, opts, scratch).read(path):
            meta = (batch_id, entry.line, *(entry.kafka or (None, None, None)))
            for op, values in entry.changes:
                for name, value in zip(names, (*values, op, *meta), strict=True):
                    columns[name].append(value)
    schema = pa.schema(
        [pa.field(c.name, c.type.arrow_type()) for c in spec.columns]
        + [pa.field(n, t) for n, t in INPUT_META]
    )
    return pa.Table.from_pydict(columns, schema=schema)


def read_changelog_json(path: Path, spec: TableSpec, first_seq: int = 0) -> pa.Table:
    """Read JSON lines ``{"op": "+I", "data": {...}}`` or ``{"rowkind": "+I", "fields": [...]}``."""
    out = DecodedBatch(batch_arrow_schema(spec).empty_table())
    entries = _JsonReader(spec, "changelog-json", SourceOptions(), out).read(path)
    return _entries_table(entries, spec, first_seq)


def read_changelog_parquet(path: Path, spec: TableSpec, first_seq: int = 0) -> pa.Table:
    """Read a Parquet file with an ``op`` column and the row columns (missing nullable columns are null)."""
    out = DecodedBatch(batch_arrow_schema(spec).empty_table())
    table = _read_parquet(path, spec, SourceOptions(), out)
    return table.set_column(0, "_seq", pa.array(range(first_seq, first_seq + table.num_rows), pa.int64()))


def raw_text(line: str | bytes) -> str:
    """A landed line as dead-letter text (bytes that are not UTF-8 are kept as ``\\xNN`` escapes)."""
    return line.decode("utf-8", "backslashreplace") if isinstance(line, bytes) else line


def parquet_columns(table: pa.Table, path, spec: TableSpec, opts) -> pa.Table:
    """The columns of a landed Parquet file the batch reads (``op`` and the table's), after the file-level
    checks: a column twice, an unknown column (unless ``ignore-unknown-fields``), no ``op`` column. Shared by
    the whole-file reader and the engine's row-group ranges, so both refuse a file in the same words."""
    names = set(spec.column_names)
    seen: set[str] = set()
    for name in table.column_names:
        if name in seen:
            raise BadRecordError(str(path), 1, name, "the column appears twice in the file")
        seen.add(name)
        if name != "op" and name not in names and not opts.ignore_unknown_fields:
            raise BadRecordError(
                str(path), 1, name, f"unknown column; table columns are {list(spec.column_names)}"
            )
    if "op" not in table.column_names:
        raise BadRecordError(str(path), 1, "op", "missing the 'op' column")
    return table.select([c for c in table.column_names if c == "op" or c in names])


def _read_parquet(path: Path, spec: TableSpec, opts: SourceOptions, out: DecodedBatch) -> pa.Table:
    """Validate column-wise; under quarantine, set each bad row aside and validate the rest again.

    A file that is not Parquet, or whose columns do not fit the table (unknown, repeated, no ``op``), is
    refused whole: those are problems of the file, not of a record."""
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise BadRecordError(str(path), 0, None, f"not a readable Parquet file: {e}") from None
    table = parquet_columns(table, path, spec, opts)
    out.messages += table.num_rows
    rows = pa.array(range(1, table.num_rows + 1), pa.int64())  # original row numbers (1-based)
    result, bad = _decode_rows(table, path, spec, rows)
    for error in bad:  # the first raises under on-bad-record: fail
        out.reject(error, _raw_row(table, error.line - 1), opts)  # rows are 1..n here
    return result


def _raw_row(table: pa.Table, position: int) -> str:
    """A Parquet row as dead-letter text, whatever its values (invalid ones are shown as Arrow prints them)."""
    row = {}
    for name in table.column_names:
        scalar = table.column(name)[position]
        try:
            row[name] = scalar.as_py()
            json.dumps(row[name], default=str)
        except Exception:
            row[name] = f"<{scalar.type}: not representable>"
    return json.dumps(row, default=str)


def _decode_parquet(table: pa.Table, path: Path, spec: TableSpec, rows: pa.Array) -> pa.Table:
    """Decode a Parquet table (or row group) whose columns are the table's; raise BadRecordError for its
    first bad row (``rows`` holds the original 1-based row numbers) or, with line 0, for a schema problem."""
    result, bad = _decode_rows(table, path, spec, rows)
    if bad:
        raise bad[0]
    return result


def _decode_rows(
    table: pa.Table, path: Path, spec: TableSpec, rows: pa.Array
) -> tuple[pa.Table, list[BadRecordError]]:
    """Decode every column at once; return the good rows and an error for every bad row, in row order.

    Each bad row gets the error it would get alone: the first failing check in the order op, the columns
    in spec order (valid data, then the type's rules through
    :meth:`~changelake.types.DataType.convert_arrow` -- the JSON path's rules -- then the table's
    :class:`ColumnRules`), then required columns. One pass, however many rows are bad. A problem of the
    file's schema raises BadRecordError with line 0 (not quarantined)."""
    _check_schema(table, path, spec)
    n = table.num_rows
    flagged: dict[int, tuple[str, str]] = {}

    def flag(problems, field: str) -> None:
        for row, reason in problems:
            flagged.setdefault(row, (field, reason))

    ops, invalid = _valid_array(table.column("op"), path, "op")
    flag(invalid, "op")
    if pa.types.is_dictionary(ops.type):
        ops = ops.dictionary_decode()
    ops = pa.nulls(n, pa.string()) if pa.types.is_null(ops.type) else ops.cast(pa.string())
    unknown = pc.indices_nonzero(pc.invert(pc.fill_null(pc.is_in(ops, pa.array(OPS)), False))).to_pylist()
    flag(
        ((r, f"unknown op {short_repr(ops[r].as_py())}; expected one of {list(OPS)}") for r in unknown), "op"
    )
    rules = ColumnRules(spec)
    arrays = [pa.array(range(n), pa.int64()), ops]
    for col in spec.columns:
        if col.name not in table.column_names:
            arrays.append(pa.nulls(n, col.type.arrow_type()))
            continue
        array, invalid = _valid_array(table.column(col.name), path, col.name)
        flag(invalid, col.name)
        try:
            cast, problems = col.type.convert_arrow(array)
        except ColumnTypeError as e:  # checked with the schema; kept for a type only values reveal
            raise BadRecordError(str(path), 0, col.name, e.reason) from None
        flag(problems, col.name)
        flag(rules.validate_arrow(col.name, cast), col.name)
        arrays.append(cast)
    result = pa.Table.from_arrays(arrays, schema=batch_arrow_schema(spec))
    not_delete = pc.not_equal(result.column("_op"), "-D")
    for col in spec.columns:
        if col.name in spec.primary_key:
            missing = pc.is_null(result.column(col.name))
        elif not col.nullable:
            missing = pc.and_(pc.is_null(result.column(col.name)), not_delete)
        else:
            continue
        what = "primary key" if col.name in spec.primary_key else "NOT NULL"
        rows_missing = pc.indices_nonzero(pc.fill_null(missing, False)).to_pylist()
        flag(((r, f"{what} column is missing or null") for r in rows_missing), col.name)
    if not flagged:
        return result, []
    bad = [BadRecordError(str(path), rows[r].as_py(), *flagged[r]) for r in sorted(flagged)]
    result = result.filter(pa.array([r not in flagged for r in range(n)], pa.bool_()))
    return result.set_column(0, "_seq", pa.array(range(result.num_rows), pa.int64())), bad


def _check_schema(table: pa.Table, path: Path, spec: TableSpec) -> None:
    """Problems of the file's schema (an ``op`` column that is not text, a column type that cannot hold
    the column's type): BadRecordError with line 0, since they are not any row's."""
    op_type = table.schema.field("op").type
    value_type = op_type.value_type if pa.types.is_dictionary(op_type) else op_type
    if not (
        pa.types.is_null(value_type) or pa.types.is_string(value_type) or pa.types.is_large_string(value_type)
    ):
        raise BadRecordError(str(path), 0, "op", f"expected a string column, got {op_type}")
    for col in spec.columns:
        if col.name in table.column_names:
            problem = col.type.arrow_type_problem(table.schema.field(col.name).type)
            if problem is not None:
                raise BadRecordError(str(path), 0, col.name, problem)


def _valid_array(column: pa.ChunkedArray, path: Path, name: str) -> tuple[pa.Array, list[tuple[int, str]]]:
    """The column as one fully validated array (Parquet readers do not check that strings are UTF-8): the
    invalid rows are found by halves, reported, and set to null."""
    try:
        return _valid_values(column.combine_chunks())
    except pa.ArrowInvalid as e:
        raise BadRecordError(str(path), 0, name, f"invalid column data: {e}") from None


def _valid_values(array: pa.Array) -> tuple[pa.Array, list[tuple[int, str]]]:
    try:
        array.validate(full=True)
        return array, []
    except pa.ArrowInvalid as e:
        whole = e

    def invalid(lo: int, hi: int) -> list[int]:
        try:
            array.slice(lo, hi - lo).validate(full=True)
            return []
        except pa.ArrowInvalid:
            if hi - lo == 1:
                return [lo]
        mid = (lo + hi) // 2
        return invalid(lo, mid) + invalid(mid, hi)

    bad = invalid(0, len(array))
    if not bad:
        raise whole  # invalid as a whole, no value to blame: a problem of the file
    reasons = []
    for row in bad:
        try:
            array.slice(row, 1).validate(full=True)
            reasons.append((row, f"invalid {array.type} data"))
        except pa.ArrowInvalid as e:  # the value's own message (a one-value slice: no position in it)
            reasons.append((row, f"invalid data: {e}"))
    flags = [False] * len(array)
    for row in bad:
        flags[row] = True
    nulled = pc.if_else(pa.array(flags, pa.bool_()), pa.scalar(None, array.type), array)
    return nulled, reasons
