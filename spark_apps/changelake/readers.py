"""Pluggable batch readers: turn a batch's landed files into typed changelog records.

:func:`read_batch` yields a :class:`DecodedBatch`: an Arrow table with ``_seq`` (the record's position in the
batch), ``_op`` (``+I``, ``-U``, ``+U``, ``-D``) and the table's columns in storage types, plus what the
source settings (:mod:`changelake.sources`) did: records quarantined, messages skipped, Kafka redeliveries
found and dropped, and the Kafka offsets applied so far.

Formats: ``changelog-json``, ``upsert-kafka``, ``debezium-json``, ``canal-json``, ``maxwell-json`` (JSON
lines; envelopes in :mod:`changelake.formats`) and ``changelog-parquet`` (an ``op`` column plus the row
columns). A bad record raises :class:`BadRecordError` naming file, line and field before anything is
written, or, under ``on-bad-record: quarantine``, becomes a dead letter with its raw text and reason.
"""

from __future__ import annotations

import decimal
import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from changelake import formats
from changelake.errors import BadRecordError, ChangelakeError
from changelake.sources import SourceOptions
from changelake.spec import TableSpec

OPS = formats.OPS
_INT_BOUNDS = {"TINYINT": (-128, 127), "SMALLINT": (-32768, 32767), "INT": (-(2**31), 2**31 - 1)}
JSON_FORMATS = tuple(formats.DECODERS)


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
    """Reads the JSON-lines formats through their envelope decoder (:mod:`changelake.formats`)."""

    def __init__(self, spec: TableSpec, fmt: str, opts: SourceOptions, out: DecodedBatch):
        self.spec, self.opts, self.out = spec, opts, out
        self.decode = formats.DECODERS[fmt]
        self.coerce = formats.coercer(fmt, opts)
        self.index = {n: i for i, n in enumerate(spec.column_names)}
        self.types = [c.type for c in spec.columns]
        self.decoders = [c.type.decode_json for c in spec.columns]

    def read(self, path: Path) -> list[_Entry]:
        entries = []
        with open(path, encoding="utf-8") as fh:
            for line_no, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                self.out.messages += 1
                try:
                    entry = self._entry(str(path), line_no, line)
                except formats.FieldError as e:
                    self.out.reject(BadRecordError(str(path), line_no, e.field, e.reason), line, self.opts)
                    continue
                if entry is None:
                    self.out.skipped += 1
                else:
                    entries.append(entry)
        return entries

    def _entry(self, file: str, line_no: int, line: str) -> _Entry | None:
        try:
            obj = json.loads(line, parse_float=decimal.Decimal)
        except json.JSONDecodeError as e:
            raise formats.FieldError(None, f"malformed JSON: {e.msg} at column {e.colno}") from None
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
        missing = _missing_required(op, values, self.spec)
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
        if value is None or isinstance(value, bool | dict | list):
            raise formats.FieldError(
                self.opts.ordering, f"ordering field missing or not a number/string: {value!r}"
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


def _read_parquet(path: Path, spec: TableSpec, opts: SourceOptions, out: DecodedBatch) -> pa.Table:
    """Validate column-wise; under quarantine, set each bad row aside and validate the rest again."""
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise BadRecordError(str(path), 0, None, f"not a readable Parquet file: {e}") from None
    names = set(spec.column_names)
    for name in table.column_names:
        if name != "op" and name not in names and not opts.ignore_unknown_fields:
            raise BadRecordError(
                str(path), 1, name, f"unknown column; table columns are {list(spec.column_names)}"
            )
    if "op" not in table.column_names:
        raise BadRecordError(str(path), 1, "op", "missing the 'op' column")
    table = table.select([c for c in table.column_names if c == "op" or c in names])
    out.messages += table.num_rows
    rows = pa.array(range(1, table.num_rows + 1), pa.int64())  # original row numbers (1-based)
    while True:
        try:
            return _decode_parquet(table, path, spec, rows)
        except BadRecordError as e:
            position = pc.index(rows, e.line).as_py()
            raw = json.dumps(table.slice(position, 1).to_pylist()[0], default=str)
            out.reject(e, raw, opts)
            keep = pc.not_equal(pa.array(range(table.num_rows)), position)
            table, rows = table.filter(keep), rows.filter(keep)


def _decode_parquet(table: pa.Table, path: Path, spec: TableSpec, rows: pa.Array) -> pa.Table:
    """Decode a validated-schema Parquet table; errors name the original row number."""
    n = table.num_rows
    ops = table.column("op").cast(pa.string())
    bad = pc.invert(pc.fill_null(pc.is_in(ops, pa.array(OPS)), False))
    if pc.any(bad).as_py():
        row = pc.index(bad, True).as_py()
        raise BadRecordError(
            str(path),
            rows[row].as_py(),
            "op",
            f"unknown op {ops[row].as_py()!r}; expected one of {list(OPS)}",
        )
    arrays = [pa.array(range(n), pa.int64()), ops]
    for col in spec.columns:
        target = col.type.arrow_type()
        if col.name not in table.column_names:
            arrays.append(pa.nulls(n, target))
            continue
        source = table.column(col.name)
        try:
            cast = source.cast(target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            row = _first_bad_row(source, target)
            raise BadRecordError(
                str(path), rows[row].as_py(), col.name, f"does not fit {col.type}: {e}"
            ) from None
        if col.type.name in _INT_BOUNDS and n:
            out_of_range = pc.or_(
                pc.less(cast, _INT_BOUNDS[col.type.name][0]), pc.greater(cast, _INT_BOUNDS[col.type.name][1])
            )
            if pc.any(pc.fill_null(out_of_range, False)).as_py():
                row = pc.index(pc.fill_null(out_of_range, False), True).as_py()
                try:
                    col.type.check_integer(cast[row].as_py())
                except ValueError as e:
                    raise BadRecordError(str(path), rows[row].as_py(), col.name, str(e)) from None
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
        if pc.any(missing).as_py():
            row = pc.index(missing, True).as_py()
            what = "primary key" if col.name in spec.primary_key else "NOT NULL"
            raise BadRecordError(str(path), rows[row].as_py(), col.name, f"{what} column is missing or null")
    return result


def _first_bad_row(source: pa.ChunkedArray, target: pa.DataType) -> int:
    for i, value in enumerate(source.combine_chunks()):
        try:
            pa.array([value.as_py()], source.type).cast(target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return i
    return 0
