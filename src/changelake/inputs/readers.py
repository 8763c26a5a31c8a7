"""Pluggable batch readers: turn a batch's landed files into typed changelog records.

:func:`read_batch` yields a :class:`~changelake.inputs.records.DecodedBatch`: an Arrow table with ``_seq`` (the
record's position in the batch), ``_op`` (``+I``, ``-U``, ``+U``, ``-D``) and the table's columns in storage
types, plus what the source settings (:mod:`changelake.source_options`) did: records quarantined, messages
skipped, Kafka redeliveries found and dropped, and the Kafka offsets applied so far.

The formats are :mod:`changelake.inputs.formats`: a JSON-lines format decodes each line through its envelope
and the per-message path here; a rows format (Parquet) decodes a file column-wise itself. A bad record raises
:class:`BadRecordError` naming file, line and field before anything is written, or, under
``on-bad-record: quarantine``, becomes a dead letter with its raw text and reason. A line longer than
CHANGELAKE_MAX_RECORD_BYTES is one (found without reading it whole), and so is a different record at a Kafka
offset the batch already holds.
"""

from __future__ import annotations

import decimal
import io
from dataclasses import dataclass
from pathlib import PurePath

import numpy as np
import pyarrow as pa

from changelake.config import max_record_bytes
from changelake.errors import BadRecordError, ChangelakeError, short_repr
from changelake.inputs import formats
from changelake.inputs.formats import kafka_container
from changelake.inputs.landed import LandedPath, as_landed, open_landed
from changelake.inputs.records import (
    CLAIMS_SCHEMA,
    FILE_SHIFT,
    MESSAGE_SHIFT,
    ColumnRules,
    DecodedBatch,
    OffsetIndex,
    batch_arrow_schema,
    line_of,
    message_digests,
    record_digests,
)
from changelake.source_options import SourceOptions
from changelake.spec import TableSpec

OPS = formats.OPS
#: The JSON-lines formats' names (the readers themselves ask the registry at each call).
JSON_FORMATS = tuple(n for n, f in formats.FORMATS.items() if isinstance(f, formats.JsonLinesFormat))
#: The reason a record gets when decoding it raised something no rule anticipated: the record is still a
#: bad record (quarantined or refusing its batch), never a crash; the fuzz tests look for this text.
UNEXPECTED = "could not decode the record"
#: What a dead letter keeps of a line longer than CHANGELAKE_MAX_RECORD_BYTES: its first bytes.
LONG_LINE_PREFIX = 1 << 10


def line_too_long(limit: int) -> str:
    """The reason a line over the limit is a bad record."""
    return (
        f"the line is longer than {limit:,} bytes, the most one record may take (CHANGELAKE_MAX_RECORD_BYTES); "
        "it was not read"
    )


def reader_names() -> list[str]:
    return sorted(formats.FORMATS)


def format_for(path: PurePath, spec: TableSpec) -> str:
    """The input format of a landed file: the table's ``source.format``, else by file extension."""
    configured = spec.source.get("format")
    if configured:
        return str(configured)
    return formats.default_format(path)


def read_batch(
    paths: list[LandedPath],
    spec: TableSpec,
    fmt: str | None = None,
    applied_offsets: dict[str, int] | None = None,
) -> DecodedBatch:
    """Decode the files of one batch (in the given order) into one DecodedBatch.

    ``applied_offsets`` are the Kafka offsets committed with the previous batch (for redelivery detection).
    """
    opts = spec.source_options
    schema = batch_arrow_schema(spec)
    out = DecodedBatch(schema.empty_table())
    entries: list[_Entry] = []
    tables: list[pa.Table] = []
    names = [fmt or format_for(path, spec) for path in paths]
    # A rows format (Parquet) carries no ordering field: read in arrival order and with no other format, as
    # the apply's planner (changelake.inputs.decode.plan_batch) has it, whichever file comes first.
    rows_alone = all(isinstance(formats.FORMATS.get(n), formats.RowsFormat) for n in names)
    for path, name in zip(paths, names, strict=True):
        f = formats.FORMATS.get(name)
        if f is None:
            raise ChangelakeError(f"{path}: unknown input format '{name}'; known: {reader_names()}")
        if isinstance(f, formats.RowsFormat) and (opts.ordering != "arrival" or not rows_alone):
            raise ChangelakeError(f"{path}: {f.title} batches are read in arrival order, alone")
        kafka_container.check_format(path, name)
    offsets = OffsetIndex({i: str(p) for i, p in enumerate(paths)})
    for index, (path, name) in enumerate(zip(paths, names, strict=True)):
        f = formats.FORMATS.get(name)
        if isinstance(f, formats.JsonLinesFormat):
            reader = _JsonReader(spec, name, opts, out)
            read, stop = reader.read_lines(path)
            # The offsets of the lines before a bad one are claimed first: the batch's first bad record in
            # arrival order is the one reported, whichever kind it is.
            entries += reader.claim_offsets(read, index, offsets)
            if stop is not None:
                raise stop
        elif isinstance(f, formats.RowsFormat):
            tables.append(f.read(path, spec, opts, out))
        else:
            raise ChangelakeError(f"{path}: unknown input format '{name}'; known: {reader_names()}")
    position = {str(p): i for i, p in reversed(list(enumerate(paths)))}
    out.dead_letters.sort(key=lambda d: (position.get(str(d["file"]), 0), d["line"] or 0))
    if tables:
        parts, seq = [], 0
        for t in tables:
            parts.append(t.set_column(0, "_seq", pa.array(np.arange(seq, seq + t.num_rows, dtype=np.int64))))
            seq += t.num_rows
        out.records = pa.concat_tables([t.cast(schema) for t in parts])
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


def _order_key(entry: _Entry) -> tuple:
    """An entry's ordering-field value; every entry has one when the source orders by a field."""
    assert entry.order is not None, "ordering by a field: every decoded message carries its value"
    return entry.order


class _JsonReader:
    """Reads the JSON-lines formats through their envelope decoder (:mod:`changelake.inputs.formats`)."""

    def __init__(self, spec: TableSpec, fmt: str, opts: SourceOptions, out: DecodedBatch):
        self.spec, self.opts, self.out = spec, opts, out
        f = formats.FORMATS[fmt]
        if not isinstance(f, formats.JsonLinesFormat):
            raise ChangelakeError(f"{fmt} is not a JSON-lines format")
        self.decode = f.decode
        self.coerce = f.coercer(opts)
        self.fmt = fmt
        self.index = {n: i for i, n in enumerate(spec.column_names)}
        self.types = [c.type for c in spec.columns]
        self.decoders = [c.type.decode_json for c in spec.columns]
        self.rules = ColumnRules(spec)
        # Formats whose files start with magic bytes: a line 1 that does is that mistake, named as such.
        self.binary = [f for f in formats.FORMATS.values() if isinstance(f, formats.RowsFormat)]

    def read(self, path: PurePath) -> list[_Entry]:
        """Every line of a landed file, as bytes: each line is decoded (UTF-8 included) on its own."""
        entries, stop = self.read_lines(path)
        if stop is not None:
            raise stop
        return entries

    def read_lines(
        self, path: PurePath, data: bytes | None = None, first_line: int = 1
    ) -> tuple[list[_Entry], BadRecordError | None]:
        """The lines of a landed file as :meth:`read` decodes them, and the bad record that stopped it (under
        ``on-bad-record: fail``; quarantined ones are dead letters). No line is read whole past
        CHANGELAKE_MAX_RECORD_BYTES: a longer one is a bad record, its rest skipped in bounded reads.
        ``data``: the lines themselves (a Kafka range's, :func:`changelake.inputs.kafka.range_lines`), which
        ``path`` then only names, numbered from ``first_line`` (a range's first offset) as its decode task
        numbers them."""
        entries: list[_Entry] = []
        limit = max_record_bytes()
        try:
            with io.BytesIO(data) if data is not None else _open_lines(path, self.spec) as fh:
                line_no = first_line - 1
                while line := fh.readline(limit + 1):
                    line_no += 1
                    too_long = len(line) > limit and not line.endswith(b"\n")
                    if not too_long and not line.strip():
                        continue
                    self.out.messages += 1
                    try:
                        if too_long:
                            raise formats.FieldError(None, line_too_long(limit))
                        entry = self._entry(str(path), line_no, line)
                    except formats.FieldError as e:
                        error = BadRecordError(str(path), line_no, e.field, e.reason)
                        if not self.opts.quarantine:
                            return entries, error
                        self.out.reject(
                            error, raw_text(line[:LONG_LINE_PREFIX] if too_long else line), self.opts
                        )
                        if too_long:
                            while (rest := fh.readline(1 << 20)) and not rest.endswith(b"\n"):
                                pass
                        continue
                    if entry is None:
                        self.out.skipped += 1
                    else:
                        entries.append(entry)
        except OSError as e:
            raise ChangelakeError(f"{path}: cannot read the landed file: {e.strerror or e}") from None
        return entries, None

    def claim_offsets(self, entries: list[_Entry], file_index: int, offsets: OffsetIndex) -> list[_Entry]:
        """``entries`` (of the ``file_index``-th file, in line order) less the messages whose Kafka offset an
        earlier message of the batch holds with different content: each a bad record naming both (raised
        under ``on-bad-record: fail``, the first in arrival order; else a dead letter). The rule and its
        digests are the decode tasks' (:class:`~changelake.inputs.records.OffsetIndex`)."""
        kafka = [e for e in entries if e.kafka is not None and e.changes]
        if not kafka:
            return entries
        seq = np.array(
            [
                (file_index << FILE_SHIFT) | (e.line << MESSAGE_SHIFT) | c
                for e in kafka
                for c in range(len(e.changes))
            ],
            np.int64,
        )
        starts, digests = message_digests(seq, record_digests(self.spec, _entries_table(kafka, self.spec, 0)))
        topics, partitions, numbers = zip(*(e.kafka for e in kafka if e.kafka is not None), strict=True)
        messages = pa.table(
            [
                pa.array(topics, pa.string()),
                pa.array(partitions, pa.int32()),
                pa.array(numbers, pa.int64()),
                pa.array(digests, pa.int64()),
                pa.array(seq[starts], pa.int64()),
            ],
            schema=CLAIMS_SCHEMA,
        )
        conflicts = offsets.claim(messages).to_pylist()
        if not conflicts:
            return entries
        path = offsets.paths[file_index]
        losers = {line_of(c["seq"]) for c in conflicts}
        raw = _raw_lines(as_landed(path), losers, self.spec) if self.opts.quarantine else {}
        for conflict in conflicts:
            line = line_of(conflict["seq"])
            error = BadRecordError(str(path), line, "offset", offsets.conflict_reason(conflict))
            self.out.reject(error, raw.get(line, ""), self.opts)
        return [e for e in entries if e.kafka is None or e.line not in losers]

    def _entry(self, file: str, line_no: int, line: str | bytes) -> _Entry | None:
        """Decode one line (bytes or text). A problem with the record raises FieldError (the caller adds
        file and line, and quarantines or refuses); a file that is not JSON lines at all raises
        BadRecordError, which refuses the batch even under quarantine."""
        # Pass bytes: the UTF-8 check and the Parquet check below then happen here, for every caller.
        if line_no == 1:
            for f in self.binary:
                if line[: len(f.magic)] in (f.magic, f.magic.decode()):
                    reason = f"this is a {f.title} file, but the table reads {self.fmt} (JSON lines)"
                    raise BadRecordError(file, 1, None, reason)
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as e:
                raise formats.FieldError(None, f"invalid UTF-8 at byte {e.start + 1} of the line") from None
        if line_no == 1:
            line = line.removeprefix("\ufeff")  # a UTF-8 byte order mark
        try:
            return self._decode_line(file, line_no, line)
        except (formats.FieldError, ChangelakeError):
            # ChangelakeError: not the record's fault (a schema registry that cannot be asked, a key/value
            # format the table's columns cannot take): the batch stops, whatever on-bad-record says.
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
        changes = [(op, self._typed(op, data, message.schemas)) for op, data in message.records]
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
        entries = sorted(entries, key=_order_key)
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
    arrays = [pa.array(np.arange(first_seq, first_seq + n, dtype=np.int64)), pa.array(ops, pa.string())]
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


def delivered_records(batches: dict[int, LandedPath], spec: TableSpec) -> pa.Table:
    """Every record of the given JSON-lines batches as delivered (no ordering, no dedup), with its batch,
    line and Kafka topic/partition/offset; quarantined lines are left out. Parquet batches are skipped."""
    opts = spec.source_options
    columns = _delivered_columns(spec)
    for batch_id, path in batches.items():
        fmt = format_for(path, spec)
        if not isinstance(formats.FORMATS.get(fmt), formats.JsonLinesFormat):
            continue
        scratch = DecodedBatch(batch_arrow_schema(spec).empty_table())
        reader = _JsonReader(spec, fmt, opts, scratch)
        _deliver(columns, batch_id, reader.claim_offsets(reader.read(path), 0, OffsetIndex({0: str(path)})))
    return _delivered_table(columns, spec)


def delivered_topic_records(
    batch_id: int, ranges: list[tuple[str, bytes, int]], spec: TableSpec
) -> tuple[pa.Table, int]:
    """:func:`delivered_records` of one topic batch: its ranges as ``(label, lines, first offset)``, the lines
    :func:`changelake.inputs.kafka.range_lines` makes of them, decoded as the batch's decode tasks decode them
    (``_line`` is the offset, as in the apply's dead letters). Also the messages read, which the caller
    compares with the count the batch committed: a topic may lose records (compaction) that a checksum of its
    offsets cannot show."""
    opts = spec.source_options
    fmt = str(spec.source.get("format"))
    columns = _delivered_columns(spec)
    scratch = DecodedBatch(batch_arrow_schema(spec).empty_table())
    reader = _JsonReader(spec, fmt, opts, scratch)
    offsets = OffsetIndex({index: label for index, (label, _, _) in enumerate(ranges)})
    for index, (label, lines, first) in enumerate(ranges):
        entries, stop = reader.read_lines(PurePath(label), lines, first)
        if stop is not None:
            raise stop
        _deliver(columns, batch_id, reader.claim_offsets(entries, index, offsets))
    return _delivered_table(columns, spec), scratch.messages


def _delivered_columns(spec: TableSpec) -> dict[str, list]:
    return {n: [] for n in (*spec.column_names, *(n for n, _ in INPUT_META))}


def _deliver(columns: dict[str, list], batch_id: int, entries: list[_Entry]) -> None:
    """Append each change of ``entries`` with its batch, line and Kafka topic/partition/offset."""
    names = list(columns)
    for entry in entries:
        meta = (batch_id, entry.line, *(entry.kafka or (None, None, None)))
        for op, values in entry.changes:
            for name, value in zip(names, (*values, op, *meta), strict=True):
                columns[name].append(value)


def _delivered_table(columns: dict[str, list], spec: TableSpec) -> pa.Table:
    schema = pa.schema(
        [pa.field(c.name, c.type.arrow_type()) for c in spec.columns]
        + [pa.field(n, t) for n, t in INPUT_META]
    )
    return pa.Table.from_pydict(columns, schema=schema)


def _open_lines(path: PurePath, spec: TableSpec):
    """A landed file's lines: the file, or the JSON lines an Avro container of Kafka records becomes."""
    if kafka_container.is_container(path):
        return io.BytesIO(kafka_container.as_json_lines(path, spec))
    return open_landed(path)


def _raw_lines(path: PurePath, wanted: set[int], spec: TableSpec) -> dict[int, str]:
    """The text of the ``wanted`` lines of a landed file (lines within CHANGELAKE_MAX_RECORD_BYTES)."""
    out: dict[int, str] = {}
    limit = max_record_bytes()
    with _open_lines(path, spec) as fh:
        line_no = 0
        while len(out) < len(wanted) and (line := fh.readline(limit + 1)):
            line_no += 1
            if line_no in wanted:
                out[line_no] = raw_text(line)
            while not line.endswith(b"\n") and (line := fh.readline(1 << 20)):
                pass  # the rest of a line too long to be a record
    return out


def raw_text(line: str | bytes) -> str:
    """A landed line as dead-letter text (bytes that are not UTF-8 are kept as ``\\xNN`` escapes)."""
    return line.decode("utf-8", "backslashreplace") if isinstance(line, bytes) else line
