"""Decoding a batch's landed files in Spark tasks, so the driver never holds the batch's records.

The driver streams each file once (:func:`plan_batch`): it hashes it (the batch's checksum) and cuts JSON-lines
files into byte ranges at line boundaries, noting each range's first line number. Each range (a Parquet file
is one range) becomes a task that decodes its lines with the per-message path of :mod:`changelake.readers`
(same validation, same errors naming file, line and field), writes the decoded records as one staged Parquet
file and returns one small row: what it read, skipped, quarantined, and its counts per operation.

Records carry ``_seq``, a deterministic arrival position: ``file << 48 | line << 2 | change`` (a message
yields at most two records: an update's before and after images). ``_seq >> 2`` identifies the message, which
the bucket task uses to tell a Kafka redelivery from the two images of one update. Source ordering and Kafka
de-duplication happen in the bucket tasks (:func:`changelake.buckets.order_and_dedup`), since only the
order of a key's records matters and a key's records all meet in one bucket task.
"""

from __future__ import annotations

import decimal
import functools
import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from changelake import formats, readers
from changelake.buckets import KAFKA_COLUMNS, MESSAGE_SHIFT, ORDER_COLUMNS
from changelake.errors import BadRecordError, ChangelakeError
from changelake.spec import TableSpec

RANGE_BYTES = int(os.environ.get("CHANGELAKE_DECODE_RANGE_BYTES", 32 << 20))
FILE_SHIFT, LINE_SHIFT = 48, MESSAGE_SHIFT
_ORDER_NUMBER = pa.decimal128(38, 9)
OPS = formats.OPS
STAT_COLUMNS = ("messages", "skipped", "records", *(f"op{op}" for op in OPS))


@dataclass(frozen=True)
class Range:
    """One decode task: lines ``[start, end)`` bytes of a JSON-lines file, or a whole Parquet file."""

    file_index: int
    path: str
    fmt: str
    start: int = 0
    end: int = 0
    first_line: int = 1


@dataclass
class BatchPlan:
    checksum: str
    ranges: list[Range]
    bytes: int = 0


@dataclass
class DecodeSummary:
    """What the decode tasks found, summed on the driver (small: no records)."""

    staged: list[str] = field(default_factory=list)
    messages: int = 0
    skipped: int = 0
    records: int = 0
    op_counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OPS, 0))
    dead_letters: list[dict] = field(default_factory=list)


def plan_batch(
    paths: list[Path], spec: TableSpec, fmt: str | None, target_columns: list[str] | None
) -> BatchPlan:
    """Checksum the batch's files and cut them into decode ranges, reading each file once in 1 MiB chunks.

    The checksum covers contents, format and target columns (not the file names), as before.
    """
    h = hashlib.sha256(json.dumps([fmt, target_columns]).encode())
    ranges: list[Range] = []
    total = 0
    names = [fmt or readers.format_for(path, spec) for path in paths]
    for path, name in zip(paths, names, strict=True):
        if name not in readers.JSON_FORMATS and name != "changelog-parquet":
            raise ChangelakeError(f"{path}: unknown input format '{name}'; known: {readers.reader_names()}")
        parquet_alone = all(n == "changelog-parquet" for n in names)
        if name == "changelog-parquet" and (spec.source_options.ordering != "arrival" or not parquet_alone):
            raise ChangelakeError(f"{path}: Parquet batches are read in arrival order, alone")
    for index, (path, name) in enumerate(zip(paths, names, strict=True)):
        start = offset = 0
        lines = 0
        first_line = 1
        try:
            fh = open(path, "rb")  # closed by the with below
        except OSError as e:
            raise ChangelakeError(f"{path}: cannot read the landed file: {e.strerror or e}") from None
        with fh:
            for chunk in iter(functools.partial(fh.read, 1 << 20), b""):
                h.update(chunk)
                if name == "changelog-parquet":
                    offset += len(chunk)
                    continue
                newlines = chunk.count(b"\n")
                # Close a range at the last line boundary once it holds enough bytes.
                if offset + len(chunk) - start >= RANGE_BYTES and newlines:
                    cut = chunk.rfind(b"\n") + 1
                    ranges.append(Range(index, str(path), name, start, offset + cut, first_line))
                    start = offset + cut
                    first_line = lines + newlines + 1
                lines += newlines
                offset += len(chunk)
        h.update(b"\x00")
        total += offset
        if name == "changelog-parquet":
            ranges.append(Range(index, str(path), name, 0, offset, 1))
        elif offset > start or not ranges or ranges[-1].file_index != index:
            ranges.append(Range(index, str(path), name, start, offset, first_line))
    return BatchPlan(h.hexdigest(), ranges, total)


def staged_schema(spec: TableSpec) -> pa.Schema:
    """A decoded record: arrival position, op, the columns, then the source metadata ordering may use."""
    meta = [
        pa.field("_kafka_topic", pa.string()),
        pa.field("_kafka_partition", pa.int32()),
        pa.field("_kafka_offset", pa.int64()),
        pa.field(ORDER_COLUMNS[0], _ORDER_NUMBER),
        pa.field(ORDER_COLUMNS[1], pa.string()),
    ]
    return pa.schema(list(readers.batch_arrow_schema(spec)) + meta)


def stats_schema() -> pa.Schema:
    return pa.schema(
        [pa.field(n, pa.string()) for n in ("staged", "dead_letters", "error")]
        + [pa.field(c, pa.int64()) for c in STAT_COLUMNS]
    )


def decode_range(r: Range, spec: TableSpec, staging_dir: str, io) -> dict:
    """Decode one range, stage its records as Parquet, and return its stats row."""
    opts = spec.source_options
    out = readers.DecodedBatch(readers.batch_arrow_schema(spec).empty_table())
    if r.fmt == "changelog-parquet":
        table = readers._read_parquet(Path(r.path), spec, opts, out)
        seq = pa.array([(r.file_index << FILE_SHIFT) | (i + 1) << LINE_SHIFT for i in range(table.num_rows)])
        table = table.set_column(0, "_seq", seq.cast(pa.int64()))
        for f in list(staged_schema(spec))[table.num_columns :]:
            table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    else:
        table = _decode_lines(r, spec, out)
    staged = None
    if table.num_rows:
        staged = f"{staging_dir}/part-{r.file_index:05d}-{r.start:016d}-{uuid.uuid4().hex[:8]}.parquet"
        with io.new_output(staged).create(overwrite=False) as sink:
            pq.write_table(table, sink)
    ops = out_ops(table)
    return {
        "staged": staged,
        "dead_letters": json.dumps(out.dead_letters) if out.dead_letters else None,
        "messages": out.messages,
        "skipped": out.skipped,
        "records": table.num_rows,
        **{f"op{op}": ops[op] for op in OPS},
    }


def out_ops(table: pa.Table) -> dict[str, int]:
    import pyarrow.compute as pc

    counts = dict.fromkeys(OPS, 0)
    if table.num_rows:
        for row in pc.value_counts(table.column("_op")).to_pylist():
            counts[row["values"]] = row["counts"]
    return counts


def _decode_lines(r: Range, spec: TableSpec, out: readers.DecodedBatch) -> pa.Table:
    """Decode the lines of one byte range through readers' per-message path."""
    opts = spec.source_options
    reader = readers._JsonReader(spec, r.fmt, opts, out)
    names = spec.column_names
    seqs: list[int] = []
    ops: list[str] = []
    columns: list[list] = [[] for _ in names]
    kafka: list[list] = [[], [], []]
    order_number: list = []
    order_text: list = []
    base = r.file_index << FILE_SHIFT
    with open(r.path, "rb") as fh:
        fh.seek(r.start)
        data = fh.read(r.end - r.start)
    for line_no, raw in enumerate(data.splitlines(keepends=True), start=r.first_line):
        if not raw.strip():
            continue
        out.messages += 1
        try:
            # Bytes: _entry checks UTF-8 (and that the file is not Parquet) for every caller alike.
            entry = reader._entry(r.path, line_no, raw)
            number, text = (None, None) if entry is None else _order_values(entry.order, opts.ordering)
        except formats.FieldError as e:
            out.reject(BadRecordError(r.path, line_no, e.field, e.reason), readers.raw_text(raw), opts)
            continue
        if entry is None:
            out.skipped += 1
            continue
        for change, (op, values) in enumerate(entry.changes):
            seqs.append(base | line_no << LINE_SHIFT | change)
            ops.append(op)
            for i, v in enumerate(values):
                columns[i].append(v)
            meta = entry.kafka or (None, None, None)
            for i in range(3):
                kafka[i].append(meta[i])
            order_number.append(number)
            order_text.append(text)
    schema = staged_schema(spec)
    arrays = [pa.array(seqs, pa.int64()), pa.array(ops, pa.string())]
    arrays += [pa.array(col, schema.field(n).type) for col, n in zip(columns, names, strict=True)]
    arrays += [pa.array(v, schema.field(n).type) for v, n in zip(kafka, KAFKA_COLUMNS, strict=True)]
    arrays += [pa.array(order_number, _ORDER_NUMBER), pa.array(order_text, pa.string())]
    return pa.Table.from_arrays(arrays, schema=schema)


def _order_values(order: tuple | None, ordering: str) -> tuple[decimal.Decimal | None, str | None]:
    """The ``ordering`` field's value as (number, text); Kafka ordering uses the Kafka columns instead."""
    if order is None or ordering in ("arrival", "kafka-offset"):
        return None, None
    kind, number, text = order
    if kind == 1:
        return None, text
    try:
        value = decimal.Context(prec=60).create_decimal(number).quantize(decimal.Decimal("1e-9"))
    except (decimal.InvalidOperation, ValueError, TypeError):
        value = None
    if value is None or len(value.as_tuple().digits) > 38:
        raise formats.FieldError(ordering, f"ordering value {number!r} does not fit DECIMAL(38,9)")
    return value, None


def decode_task(spec: TableSpec, staging_dir: str, io_properties: dict[str, str]):
    """The ``mapInArrow`` function: every input row is a :class:`Range`; every output row its stats."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyiceberg.io.pyarrow import PyArrowFileIO

        io = PyArrowFileIO(io_properties)
        for batch in batches:
            for row in batch.to_pylist():
                r = Range(**row)
                try:
                    stats = decode_range(r, spec, staging_dir, io)
                except ChangelakeError as e:
                    # Reported by the driver as the error itself, not as a failed Spark job.
                    stats = {"error": _error_json(e, r), "records": 0, "messages": 0, "skipped": 0}
                    stats.update({f"op{op}": 0 for op in OPS})
                yield pa.RecordBatch.from_pylist([stats], schema=stats_schema())

    return run


def ranges_schema() -> pa.Schema:
    return pa.schema(
        [
            pa.field("file_index", pa.int64()),
            pa.field("path", pa.string()),
            pa.field("fmt", pa.string()),
            pa.field("start", pa.int64()),
            pa.field("end", pa.int64()),
            pa.field("first_line", pa.int64()),
        ]
    )


def _error_json(e: ChangelakeError, r: Range) -> str:
    if isinstance(e, BadRecordError):
        return json.dumps(
            {"bad_record": [e.file, e.line, e.field, e.reason], "at": [r.file_index, e.line or 0]}
        )
    return json.dumps({"message": str(e), "type": type(e).__name__, "at": [r.file_index, r.first_line]})


def raise_first_error(stats: list[dict]) -> None:
    """Raise the batch's first error in arrival order (file, then line), as the task raised it."""
    from changelake import errors

    found = [json.loads(row["error"]) for row in stats if row.get("error")]
    if not found:
        return
    first = min(found, key=lambda e: e["at"])
    if "bad_record" in first:
        raise BadRecordError(*first["bad_record"])
    raise getattr(errors, first["type"], ChangelakeError)(first["message"])


def summarize(stats: list[dict]) -> DecodeSummary:
    """Sum the decode tasks' rows (they come back in any order; dead letters sorted by file and line)."""
    raise_first_error(stats)
    out = DecodeSummary()
    for row in stats:
        if row["staged"]:
            out.staged.append(row["staged"])
        out.messages += row["messages"]
        out.skipped += row["skipped"]
        out.records += row["records"]
        for op in OPS:
            out.op_counts[op] += row[f"op{op}"]
        if row["dead_letters"]:
            out.dead_letters += json.loads(row["dead_letters"])
    out.staged.sort()
    out.dead_letters.sort(key=lambda d: (str(d["file"]), d["line"] or 0))
    return out
