"""Decoding a batch's landed files in Spark tasks, so the driver never holds the batch's records.

The driver streams each file once (:func:`plan_batch`): it hashes it (the batch's checksum) and cuts JSON-lines
files into byte ranges at line boundaries, noting each range's first line number. Each range (a Parquet file
is cut into ranges of rows along its row groups) becomes a task that decodes its lines with the per-message
path of :mod:`changelake.inputs.readers` (same validation, same errors naming file, line and field), computes every
record's bucket (:func:`changelake.engine.buckets.bucket_ids`, Spark's function) and writes the records as one staged
Arrow IPC file with one record batch per (partition, bucket) it touched. It returns one small row: what it read,
skipped, quarantined, its counts per operation and where each bucket's records are. The staged files are the
shuffle: a bucket task reads its record batches directly, no record goes through Spark.

Records carry ``_seq``, a deterministic arrival position: ``file << 48 | line << 2 | change`` (a message
yields at most two records: an update's before and after images). ``_seq >> 2`` identifies the message, which
the bucket task uses to tell a Kafka redelivery from the two images of one update. Source ordering and Kafka
de-duplication happen in the bucket tasks (:func:`changelake.engine.buckets.order_and_dedup`), since only the
order of a key's records matters and a key's records all meet in one bucket task.
"""

from __future__ import annotations

import decimal
import functools
import hashlib
import itertools
import json
import os
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc  # noqa: F401 - pa.ipc
import pyarrow.parquet as pq

from changelake.engine.buckets import (
    KAFKA_COLUMNS,
    MESSAGE_SHIFT,
    ORDER_COLUMNS,
    TaskIO,
    bucket_ids,
    partition_key,
)
from changelake.errors import BadRecordError, ChangelakeError
from changelake.inputs import formats, readers
from changelake.spec import TableSpec

RANGE_BYTES = int(os.environ.get("CHANGELAKE_DECODE_RANGE_BYTES", 16 << 20))
# Rows of a Parquet file per decode task: small row groups are combined up to this many.
RANGE_ROWS = int(os.environ.get("CHANGELAKE_DECODE_RANGE_ROWS", 1 << 20))
SPLIT_ROWS = 1 << 16  # the fewest rows a range cut in halves (to give every core a task) may get
FILE_SHIFT, LINE_SHIFT = 48, MESSAGE_SHIFT
_ORDER_NUMBER = pa.decimal128(38, 9)
OPS = formats.OPS
STAT_COLUMNS = ("messages", "skipped", "records", *(f"op{op}" for op in OPS))


@dataclass(frozen=True)
class Range:
    """One decode task: bytes ``[start, end)`` of a JSON-lines file, or rows ``[start, end)`` of a Parquet
    file (``end`` -1: the whole file, whose footer the planner could not read)."""

    file_index: int
    path: str
    fmt: str
    start: int = 0
    end: int = 0
    first_line: int = 1


@dataclass
class BatchPlan:
    ranges: list[Range]
    bytes: int = 0
    messages: int = 0  # about: Parquet rows and JSON lines (an empty line counts too)
    digest: Future | None = None  # the checksum, computed while the batch decodes

    @property
    def checksum(self) -> str:
        """The batch's input checksum (waits for it; raises what reading the files raised)."""
        return self.digest.result()


@dataclass
class DecodeSummary:
    """What the decode tasks found, summed on the driver (small: no records)."""

    staged: list[str] = field(default_factory=list)
    messages: int = 0
    skipped: int = 0
    records: int = 0
    op_counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OPS, 0))
    dead_letters: list[dict] = field(default_factory=list)
    # partition key (``buckets.partition_key`` of partition values + bucket) -> the bucket's staged records
    groups: dict[str, StagedGroup] = field(default_factory=dict)


@dataclass
class StagedGroup:
    """Where one (partition, bucket)'s records of the batch are: record batches of staged files."""

    bucket: int
    parts: list[tuple[str, int]] = field(default_factory=list)  # (staged file, record batch)
    records: int = 0


def plan_batch(
    paths: list[Path], spec: TableSpec, fmt: str | None, target_columns: list[str] | None
) -> BatchPlan:
    """Cut the batch's files into decode ranges (JSON lines read once in 1 MiB chunks, Parquet by its footer)
    and start checksumming them in a thread: a new batch needs its checksum only at its commit, so hashing
    (a second for a few hundred MB) overlaps the decode.

    The checksum covers contents, format and target columns (not the file names), as before.
    """
    ranges: list[Range] = []
    total = messages = 0
    names = [fmt or readers.format_for(path, spec) for path in paths]
    for path, name in zip(paths, names, strict=True):
        if name not in readers.JSON_FORMATS and name != "changelog-parquet":
            raise ChangelakeError(f"{path}: unknown input format '{name}'; known: {readers.reader_names()}")
        parquet_alone = all(n == "changelog-parquet" for n in names)
        if name == "changelog-parquet" and (spec.source_options.ordering != "arrival" or not parquet_alone):
            raise ChangelakeError(f"{path}: Parquet batches are read in arrival order, alone")
    for index, (path, name) in enumerate(zip(paths, names, strict=True)):
        if name == "changelog-parquet":
            total += _size(path)
            parts = _parquet_ranges(index, str(path))
            ranges += parts
            messages += sum(max(0, r.end - r.start) for r in parts)
            continue
        start = offset = 0
        lines = 0
        first_line = 1
        with _open_landed(path) as fh:
            for chunk in iter(functools.partial(fh.read, 1 << 20), b""):
                # Close a range at the first line boundary where it holds enough bytes (maybe several per chunk).
                at = 0
                while (target := start + RANGE_BYTES - 1 - offset) < len(chunk):
                    newline = chunk.find(b"\n", max(target, at))
                    if newline < 0:
                        break
                    lines += chunk.count(b"\n", at, newline + 1)
                    at = newline + 1
                    ranges.append(Range(index, str(path), name, start, offset + at, first_line))
                    start, first_line = offset + at, lines + 1
                lines += chunk.count(b"\n", at)
                offset += len(chunk)
        total += offset
        messages += lines + 1
        if offset > start or not ranges or ranges[-1].file_index != index:
            ranges.append(Range(index, str(path), name, start, offset, first_line))
    hasher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="changelake-checksum")
    digest = hasher.submit(_checksum, list(paths), fmt, target_columns)
    hasher.shutdown(wait=False)
    return BatchPlan(ranges, total, messages, digest)


def _checksum(paths: list[Path], fmt: str | None, target_columns: list[str] | None) -> str:
    """sha256 of format and target columns, then every file's bytes and a separator."""
    h = hashlib.sha256(json.dumps([fmt, target_columns]).encode())
    for path in paths:
        with _open_landed(path) as fh:
            for chunk in iter(functools.partial(fh.read, 1 << 20), b""):
                h.update(chunk)  # hashlib releases the GIL on large updates
        h.update(b"\x00")
    return h.hexdigest()


def _open_landed(path: Path):
    try:
        return open(path, "rb")
    except OSError as e:
        raise ChangelakeError(f"{path}: cannot read the landed file: {e.strerror or e}") from None


def _size(path: Path) -> int:
    try:
        return os.path.getsize(path)
    except OSError as e:
        raise ChangelakeError(f"{path}: cannot read the landed file: {e.strerror or e}") from None


def _parquet_ranges(index: int, path: str) -> list[Range]:
    """Rows ``[start, end)`` per task, along row groups: small groups together up to RANGE_ROWS, a large one
    alone (:func:`split_ranges` cuts it if there are too few ranges for the cores). A file without a
    readable footer is one range; its task reports why."""
    try:
        sizes = [rg.num_rows for rg in _row_groups(pq.ParquetFile(path).metadata)]
    except (pa.ArrowException, OSError, ValueError):
        return [Range(index, path, "changelog-parquet", 0, -1, 1)]
    cuts, start, row = [], 0, 0
    for size in sizes:
        if row > start and row - start + size > RANGE_ROWS:
            cuts.append(row)
            start = row
        row += size
    if row > start or not cuts:
        cuts.append(row)
    bounds = [0, *cuts]
    return [Range(index, path, "changelog-parquet", a, b, a + 1) for a, b in itertools.pairwise(bounds)]


def split_ranges(ranges: list[Range], tasks: int) -> list[Range]:
    """Cut the largest Parquet ranges in halves until there are ``tasks`` ranges (one per decode task the
    cores can run), none under SPLIT_ROWS rows. A half of a row group reads the whole group: worth it only
    when a core would otherwise wait."""
    ranges = list(ranges)
    while len(ranges) < tasks:
        parquet = [i for i, r in enumerate(ranges) if r.fmt == "changelog-parquet" and r.end >= 0]
        if not parquet:
            break
        i = max(parquet, key=lambda i: ranges[i].end - ranges[i].start)
        r = ranges[i]
        if r.end - r.start < 2 * SPLIT_ROWS:
            break
        middle = (r.start + r.end) // 2
        ranges[i : i + 1] = [
            Range(r.file_index, r.path, r.fmt, r.start, middle, r.start + 1),
            Range(r.file_index, r.path, r.fmt, middle, r.end, middle + 1),
        ]
    return ranges


def _row_groups(metadata) -> list:
    return [metadata.row_group(i) for i in range(metadata.num_row_groups)]


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
        [pa.field(n, pa.string()) for n in ("staged", "groups", "dead_letters", "error")]
        + [pa.field(c, pa.int64()) for c in STAT_COLUMNS]
    )


def decode_range(r: Range, spec: TableSpec, staging_dir: str, io) -> dict:
    """Decode one range, stage its records (a record batch per bucket), and return its stats row."""
    opts = spec.source_options
    out = readers.DecodedBatch(readers.batch_arrow_schema(spec).empty_table())
    if r.fmt == "changelog-parquet":
        table, first = _read_parquet_range(r, spec, opts, out)
        seq = (r.file_index << FILE_SHIFT) | (np.arange(first + 1, first + 1 + table.num_rows) << LINE_SHIFT)
        table = table.set_column(0, "_seq", pa.array(seq, pa.int64()))
        for f in list(staged_schema(spec))[table.num_columns :]:
            table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    else:
        table = _decode_lines(r, spec, out)
    staged, groups = None, []
    if table.num_rows:
        table = table.cast(staged_schema(spec))  # one schema (nullability too) for every path's records
        staged = f"{staging_dir}/part-{r.file_index:05d}-{r.start:016d}-{uuid.uuid4().hex[:8]}.arrow"
        groups = _stage(table, spec, io, staged)
    ops = out_ops(table)
    return {
        "staged": staged,
        "groups": json.dumps(groups) if groups else None,
        "dead_letters": json.dumps(out.dead_letters) if out.dead_letters else None,
        "messages": out.messages,
        "skipped": out.skipped,
        "records": table.num_rows,
        **{f"op{op}": ops[op] for op in OPS},
    }


def bucket_groups(spec: TableSpec, table: pa.Table) -> tuple[np.ndarray, list[tuple[str, int]]]:
    """A group id per record and, per group, its partition key and bucket: the records' (partition, bucket).

    The key is :func:`changelake.engine.buckets.partition_key` of the partition values as Iceberg keeps them
    (dates as days, timestamps as microseconds) and the bucket, as the bucket's data files are keyed."""
    bucket = bucket_ids(spec, table)
    if not spec.partition_keys:
        present = np.flatnonzero(np.bincount(bucket, minlength=spec.bucket_num))
        slot = np.zeros(spec.bucket_num, np.int64)
        slot[present] = np.arange(len(present))
        return slot[bucket], [(partition_key((int(b),)), int(b)) for b in present]
    from changelake.engine.columnar import _group_ids

    columns = [_iceberg_values(table.column(k)) for k in spec.partition_keys]
    keys = pa.Table.from_arrays([*columns, pa.array(bucket, pa.int32())], names=[*spec.partition_keys, "_b"])
    gid = _group_ids(keys)
    first = np.full(int(gid.max()) + 1, len(gid), np.int64)
    np.minimum.at(first, gid, np.arange(len(gid)))
    rows = keys.take(pa.array(first)).to_pylist()
    return gid, [(partition_key(tuple(row.values())), row["_b"]) for row in rows]


def _iceberg_values(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A partition column as pyiceberg keeps identity partition values: dates as days, timestamps as
    microseconds since the epoch (UTC), the rest as they are."""
    if pa.types.is_date32(column.type):
        return column.cast(pa.int32())
    if pa.types.is_timestamp(column.type):
        return column.cast(pa.int64())
    return column


def _stage(table: pa.Table, spec: TableSpec, io, path: str) -> list[list]:
    """Write the records as one Arrow IPC file, a record batch per (partition, bucket) in arrival order inside
    it; return ``[partition key, bucket, batch index, records]`` per group. The file is read once, by this
    batch's bucket tasks: writing it is a copy (compressed only when it leaves the machine)."""
    gid, groups = bucket_groups(spec, table)
    # numpy sorts 16-bit integers by radix: 4x faster than 64-bit ones.
    order = np.argsort(gid.astype(np.int16) if len(groups) < 1 << 15 else gid, kind="stable")
    counts = np.bincount(gid, minlength=len(groups))
    # Columns of nothing but nulls (the source metadata of most inputs) need no reordering.
    empty = [i for i, c in enumerate(table.columns) if c.null_count == table.num_rows]
    moved = table.drop_columns([table.column_names[i] for i in empty]).take(pa.array(order))
    for i in empty:
        moved = moved.add_column(i, table.field(i), pa.nulls(table.num_rows, table.field(i).type))
    table = moved.combine_chunks()
    options = pa.ipc.IpcWriteOptions(compression=None if TaskIO.local_path(path) else "lz4")
    out, start = [], 0
    with io.open_output(path) as sink, pa.ipc.new_file(sink, table.schema, options=options) as writer:
        for index, ((key, bucket), n) in enumerate(zip(groups, counts.tolist(), strict=True)):
            batch = table.slice(start, n).to_batches()
            writer.write_batch(batch[0] if batch else pa.RecordBatch.from_pylist([], schema=table.schema))
            out.append([key, bucket, index, n])
            start += n
    return out


def _read_parquet_range(r: Range, spec: TableSpec, opts, out: readers.DecodedBatch) -> tuple[pa.Table, int]:
    """The decoded rows ``[r.start, r.end)`` of a Parquet file (reading only their row groups) and the row
    number before the first; checks and errors as :func:`changelake.inputs.readers._read_parquet` has them."""
    path = Path(r.path)
    if r.end < 0:
        return readers._read_parquet(path, spec, opts, out), 0
    try:
        parquet = pq.ParquetFile(r.path)
        picked, first, row = [], None, 0
        for i, rg in enumerate(_row_groups(parquet.metadata)):
            if row < r.end and row + rg.num_rows > r.start:
                picked.append(i)
                first = row if first is None else first
            row += rg.num_rows
        table = parquet.read_row_groups(picked) if picked else parquet.schema_arrow.empty_table()
        table = table.slice(r.start - (first or 0), r.end - r.start)
    except (pa.ArrowException, OSError, ValueError):
        # Whatever the reader says of this file (it reads it whole), in its words.
        return readers._read_parquet(path, spec, opts, out), 0
    table = readers.parquet_columns(table, path, spec, opts)
    out.messages += table.num_rows
    rows = pa.array(np.arange(r.start + 1, r.start + 1 + table.num_rows), pa.int64())
    result, bad = readers._decode_rows(table, path, spec, rows)
    for error in bad:  # the first raises under on-bad-record: fail
        out.reject(error, readers._raw_row(table, error.line - 1 - r.start), opts)
    return result, r.start


def out_ops(table: pa.Table) -> dict[str, int]:
    counts = dict.fromkeys(OPS, 0)
    if table.num_rows:
        for row in pc.value_counts(table.column("_op")).to_pylist():
            counts[row["values"]] = row["counts"]
    return counts


def _decode_lines(r: Range, spec: TableSpec, out: readers.DecodedBatch) -> pa.Table:
    """Decode the lines of one byte range: column-wise when every line is plain changelog JSON
    (:func:`_json_columns`), else through readers' per-message path (which names any problem's line)."""
    opts = spec.source_options
    with open(r.path, "rb") as fh:
        fh.seek(r.start)
        data = fh.read(r.end - r.start)
    if r.fmt == "changelog-json" and opts.ordering == "arrival" and FAST_JSON:
        table = _json_columns(data, r, spec)
        if table is not None:
            out.messages += table.num_rows
            return table
    reader = readers._JsonReader(spec, r.fmt, opts, out)
    names = spec.column_names
    seqs: list[int] = []
    ops: list[str] = []
    columns: list[list] = [[] for _ in names]
    kafka: list[list] = [[], [], []]
    order_number: list = []
    order_text: list = []
    base = r.file_index << FILE_SHIFT
    for line_no, raw in enumerate(_lines(data), start=r.first_line):
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


# --- changelog JSON, column-wise ----------------------------------------------------------------------------
# A range of well-formed changelog JSON (``{"op": ..., "data": {...}}`` per line, values in their plain JSON
# forms) is parsed by pyarrow's JSON reader and converted with Arrow kernels. Only values whose per-message
# decoding is certain to give the same storage value take this path; a range with anything else (a bad record,
# a duplicate key, a NaN literal, a decimal written as a number, a zone offset, a lone carriage return, ...)
# is decoded line by line, so every error and dead letter is the per-message path's own.
FAST_JSON = os.environ.get("CHANGELAKE_FAST_JSON", "1") != "0"
_DATE_TEXT = r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
_CLOCK_TEXT = r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
_STAMP_TEXT = _DATE_TEXT + "T" + _CLOCK_TEXT + r"(\.[0-9]{1,6})?"


def _json_columns(data: bytes, r: Range, spec: TableSpec) -> pa.Table | None:
    """The staged records of a range of plain changelog JSON lines, or None to decode it line by line."""
    import pyarrow.json as pj

    line_numbers = _object_lines(data, r.first_line)
    if line_numbers is None:
        return None
    if not len(line_numbers):
        return staged_schema(spec).empty_table()
    if readers.ColumnRules(spec).checks:
        return None  # float keys and bitmaps have rules of their own: the per-message path checks them
    converters = []
    fields = []
    for column in spec.columns:
        parse_type, convert = _json_converter(column.type)
        if convert is None:
            return None  # a type decoded value by value (bytes, nanoseconds, ...): no column-wise path
        fields.append(pa.field(column.name, parse_type))
        converters.append(convert)
    schema = pa.schema([pa.field("op", pa.string()), pa.field("data", pa.struct(fields))])
    try:
        parsed = pj.read_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(use_threads=False, block_size=max(1 << 20, len(data) + 1)),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error"),
        )
    except (pa.ArrowException, ValueError, UnicodeError):
        return None
    n = parsed.num_rows
    if n != len(line_numbers) or parsed.schema != schema:
        return None  # an object spanning lines or two on one line: not JSON lines
    op = parsed.column("op").combine_chunks()
    body = parsed.column("data").combine_chunks()
    if op.null_count or body.null_count or not pc.all(pc.is_in(op, pa.array(formats.OPS))).as_py():
        return None
    not_delete = pc.not_equal(op, "-D")
    arrays = []
    for column, convert in zip(spec.columns, converters, strict=True):
        try:
            array = convert(body.field(column.name))
        except (pa.ArrowException, ValueError, OverflowError):
            return None
        if array is None:
            return None
        required = column.name in spec.primary_key or not column.nullable
        if required and array.null_count:
            missing = (
                pc.is_null(array)
                if column.name in spec.primary_key
                else pc.and_(pc.is_null(array), not_delete)
            )
            if pc.any(missing).as_py():
                return None
        arrays.append(array)
    seq = (r.file_index << FILE_SHIFT) | (line_numbers << LINE_SHIFT)
    staged = staged_schema(spec)
    columns = [pa.array(seq, pa.int64()), op, *arrays]
    columns += [pa.nulls(n, f.type) for f in list(staged)[len(columns) :]]
    return pa.Table.from_arrays(columns, schema=staged)


def _lines(data: bytes) -> list[bytes]:
    """The lines of a byte range, each with its newline, ending at b"\\n" only: as the byte-range planner and
    the reader of a landed file count them (``bytes.splitlines`` would also break at a lone \\r and shift
    every later line number of an error or dead letter)."""
    parts = data.split(b"\n")
    tail = parts.pop()  # what follows the last newline: b"" when the range ends with one
    return [p + b"\n" for p in parts] + ([tail] if tail else [])


def _object_lines(data: bytes, first_line: int) -> np.ndarray | None:
    """The line number of every non-blank line, if each is one ``{...}`` (a carriage return only before a
    newline, the text valid UTF-8); else None."""
    raw = np.frombuffer(data, np.uint8)
    if not len(raw):
        return np.zeros(0, np.int64)
    newlines = np.flatnonzero(raw == 10)
    returns = np.flatnonzero(raw == 13)
    if (
        len(returns)
        and ((returns + 1 >= len(raw)) | (raw[np.minimum(returns + 1, len(raw) - 1)] != 10)).any()
    ):
        return None  # a lone \r: the per-line path decides what it means inside its line
    starts = np.r_[0, newlines + 1]
    ends = np.r_[newlines, len(raw)]  # exclusive, without the newline
    ends = ends - ((ends > starts) & (raw[np.maximum(ends - 1, 0)] == 13))  # without a \r before it
    blank = ends == starts
    filled = np.flatnonzero(~blank)
    if (raw[starts[filled]] != ord("{")).any() or (raw[ends[filled] - 1] != ord("}")).any():
        return None
    try:
        pa.array([data], pa.binary()).cast(pa.string()).validate(full=True)
    except pa.ArrowInvalid:
        return None
    return filled.astype(np.int64) + first_line


def _json_converter(dtype):
    """(the type pyarrow parses a column's JSON values as, a function from that array to the storage array
    or None when a value needs the per-message path); (None, None) for a type decoded value by value."""
    name, storage = dtype.name, dtype.arrow_type()
    if name == "BOOLEAN":
        return pa.bool_(), lambda a: a
    if name in ("TINYINT", "SMALLINT", "INT", "BIGINT"):
        lo, hi = (
            (-(2 ** (b - 1)), 2 ** (b - 1) - 1)
            if (b := {"TINYINT": 8, "SMALLINT": 16, "INT": 32}.get(name))
            else (None, None)
        )

        def integer(a: pa.Array) -> pa.Array | None:
            if lo is not None and a.null_count < len(a):
                if pc.min(a).as_py() < lo or pc.max(a).as_py() > hi:
                    return None
            return a.cast(storage)

        return pa.int64(), integer
    if name in ("FLOAT", "DOUBLE"):

        def number(a: pa.Array) -> pa.Array | None:
            # Parsed as doubles, then narrowed as the per-message path narrows a Python float.
            out = a.cast(storage, safe=False)
            if not pc.all(pc.fill_null(pc.is_finite(out), True)).as_py():
                return None  # NaN/Infinity literals (not JSON) or a FLOAT out of range
            values = out.to_numpy(zero_copy_only=False)
            if (np.signbit(values) & (values == 0)).any():
                return None  # -0 is the integer 0 there, -0.0 a negative zero: not told apart here
            return out

        return pa.float64(), number
    if name in ("CHAR", "STRING"):

        def text(a: pa.Array) -> pa.Array | None:
            if (
                name == "CHAR"
                and a.null_count < len(a)
                and pc.max(pc.utf8_length(a)).as_py() > dtype.precision
            ):
                return None
            return a

        return pa.string(), text
    if name == "DECIMAL":
        precision, scale = dtype.precision, dtype.scale

        whole = f"0*[0-9]{{1,{precision - scale}}}" if precision > scale else "0+"
        fraction = rf"(\.[0-9]{{1,{scale}}})?" if scale else ""
        # Digits that fit without rounding (rounding HALF_UP, and refusals, are the per-message path's).
        fits = f"^-?{whole}{fraction}$"

        def decimal_text(a: pa.Array) -> pa.Array | None:
            values = a.drop_null()
            if len(values):
                if pc.max(pc.utf8_length(values)).as_py() > 100:
                    return None
                if not pc.all(pc.match_substring_regex(values, fits)).as_py():
                    return None
            return a.cast(storage)

        return pa.string(), decimal_text
    if name == "DATE":
        return pa.string(), _temporal_converter(_DATE_TEXT, pa.date32())
    if name == "TIME":

        def clock(a: pa.Array) -> pa.Array | None:
            values = a.drop_null()
            if (
                len(values)
                and not pc.all(pc.match_substring_regex(values, rf"^{_CLOCK_TEXT}\.[0-9]{{6}}$")).as_py()
            ):
                return None
            return a

        return pa.string(), clock
    if name in ("TIMESTAMP", "TIMESTAMP_LTZ") and storage in (
        pa.timestamp("us"),
        pa.timestamp("us", tz="UTC"),
    ):
        zone = "Z?" if name == "TIMESTAMP_LTZ" else ""
        return pa.string(), _temporal_converter(_STAMP_TEXT + zone, storage)
    return None, None


def _temporal_converter(pattern: str, storage: pa.DataType):
    def convert(a: pa.Array) -> pa.Array | None:
        values = a.drop_null()
        if len(values):
            if not pc.all(pc.match_substring_regex(values, f"^{pattern}$")).as_py():
                return None
            if pc.any(pc.starts_with(values, "0000")).as_py():
                return None  # year 0: not a date
        text = pc.replace_substring_regex(a, "Z$", "") if pa.types.is_timestamp(storage) else a
        parse = pa.timestamp("us") if pa.types.is_timestamp(storage) else storage
        out = text.cast(parse)
        return out.cast(storage) if parse != storage else out

    return convert


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


def decode_task(
    spec: TableSpec,
    staging_dir: str,
    io_properties: dict[str, str],
    ranges: list[Range],
    groups: list[list[int]],
):
    """The ``mapInArrow`` function: every input row is the index of a group of ``ranges`` (``spark.range``'s
    ``id``); it decodes them one after the other and yields one stats row per range."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        io = TaskIO(io_properties)
        for batch in batches:
            for group in batch.column(0).to_pylist():
                for index in groups[group]:
                    r = ranges[index]
                    try:
                        stats = decode_range(r, spec, staging_dir, io)
                    except ChangelakeError as e:
                        # Reported by the driver as the error itself, not as a failed Spark job.
                        stats = {"error": _error_json(e, r), "records": 0, "messages": 0, "skipped": 0}
                        stats.update({f"op{op}": 0 for op in OPS})
                    yield pa.RecordBatch.from_pylist([stats], schema=stats_schema())

    return run


def group_ranges(ranges: list[Range], tasks: int) -> list[list[int]]:
    """Consecutive ranges into at most ``tasks`` groups of about equal size (a Spark task costs a Python
    worker a round trip or more; a few per core are enough to even out)."""
    if not ranges:
        return []
    sizes = [max(1, r.end - r.start) if r.end >= 0 else 1 for r in ranges]
    tasks = max(1, min(tasks, len(ranges)))
    total, groups, running = sum(sizes), [[] for _ in range(tasks)], 0
    for index, size in enumerate(sizes):
        # The group a range's middle falls in, by cumulative size (each group gets at least one range).
        slot = min(tasks - 1, (running + size // 2) * tasks // total)
        groups[slot].append(index)
        running += size
    return [g for g in groups if g]


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
        for key, bucket, row_group, n in json.loads(row.get("groups") or "[]"):
            group = out.groups.setdefault(key, StagedGroup(bucket))
            group.parts.append((row["staged"], row_group))
            group.records += n
        out.messages += row["messages"]
        out.skipped += row["skipped"]
        out.records += row["records"]
        for op in OPS:
            out.op_counts[op] += row[f"op{op}"]
        if row["dead_letters"]:
            out.dead_letters += json.loads(row["dead_letters"])
    out.staged.sort()
    for group in out.groups.values():
        group.parts.sort()
    out.dead_letters.sort(key=lambda d: (str(d["file"]), d["line"] or 0))
    return out
