"""Decoding a batch's landed files in Spark tasks, so the driver never holds the batch's records.

The driver plans the files (:func:`plan_batch`): it cuts JSON-lines files into byte ranges at
line boundaries, noting each range's first line number, while a thread hashes them (the batch's checksum).
Each range (a Parquet file is cut into ranges of rows along its row groups) becomes a task that decodes its
lines with the per-message path of :mod:`changelake.inputs.readers` (same validation, same errors naming file,
line and field), computes every record's bucket (:func:`changelake.bucketing.bucket_ids`, Spark's
function) and writes the records as one staged Arrow IPC file with one record batch per (partition, bucket) it
touched. It returns one small row: what it read, skipped, quarantined, its counts per operation and where each
bucket's records are. The staged files are the shuffle: a bucket task reads its record batches directly, no
record goes through Spark.

Records carry ``_seq``, a deterministic arrival position: ``file << 48 | line << 2 | change`` (a message
yields at most two records: an update's before and after images). ``_seq >> 2`` identifies the message, which
the bucket task uses to tell a Kafka redelivery from the two images of one update. Source ordering and Kafka
de-duplication happen in the bucket tasks (:func:`changelake.engine.buckets.order_and_dedup`), since only the
order of a key's records matters and a key's records all meet in one bucket task. Which message holds a Kafka
offset is settled before, batch-wide: the decode tasks claim every offset
(:class:`~changelake.inputs.records.OffsetIndex`), so a different record at a held offset is a bad record
whatever the buckets, and a redelivery (the same record again) always shares its original's bucket.

A line longer than CHANGELAKE_MAX_RECORD_BYTES is planned as a range of its own that no task reads whole.
"""

from __future__ import annotations

import decimal
import json
import mmap
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc  # noqa: F401 - pa.ipc

from changelake import privacy
from changelake.arrow_keys import group_ids
from changelake.bucketing import bucket_ids
from changelake.config import max_record_bytes, tuned
from changelake.errors import BadRecordError, ChangelakeError
from changelake.inputs import formats, kafka, landed, landing, readers
from changelake.inputs.formats import kafka_container
from changelake.inputs.landed import LandedPath
from changelake.inputs.records import (
    CLAIMS_SCHEMA,
    KAFKA_COLUMNS,
    MESSAGE_SHIFT,
    ORDER_COLUMNS,
    DecodedBatch,
    OffsetIndex,
    batch_arrow_schema,
    decode_claims,
    encode_claims,
    line_of,
    message_digests,
    partition_key,
    record_digests,
)
from changelake.objectstore import ObjectPath
from changelake.pyworker import lazy_zip_invalidation
from changelake.spec import TableSpec
from changelake.storage.taskio import TaskIO

# JSON lines are planned in ranges of about CHANGELAKE_DECODE_RANGE_BYTES; a decode task reads the consecutive
# ranges of its share as one, up to CHANGELAKE_DECODE_MAX_RANGE_BYTES (what one read and one JSON parse hold in
# a task's memory); a Parquet file in tasks of about CHANGELAKE_DECODE_RANGE_ROWS rows (config.TUNING).

PLAN_CHUNK_BYTES = 1 << 20  # what the planner reads of a JSON-lines file at a time
MAP_MIN_BYTES = 4 << 20  # a decode task maps a range of lines at least this large instead of reading it


SPLIT_ROWS = 1 << 16  # the fewest rows a range cut in halves (to give every core a task) may get
FILE_SHIFT, LINE_SHIFT = 48, MESSAGE_SHIFT  # as records.FILE_SHIFT, records.MESSAGE_SHIFT
_ORDER_NUMBER = pa.decimal128(38, 9)
OPS = formats.OPS
STAT_COLUMNS = ("messages", "skipped", "records", *(f"op{op}" for op in OPS))


@dataclass(frozen=True)
class Range:
    """One decode task: bytes ``[start, end)`` of a JSON-lines file, or rows ``[start, end)`` of a Parquet
    file (``end`` -1: the whole file, whose footer the planner could not read)."""

    file_index: int
    path: str | ObjectPath  # a local file's path, or a landed object (which carries its store to the task)
    fmt: str
    start: int = 0
    end: int = 0
    first_line: int = 1
    # A line longer than this many bytes (CHANGELAKE_MAX_RECORD_BYTES), the range's only one: its task reports it
    # as a bad record and reads no more than its first bytes. 0: a range of lines to decode.
    too_long: int = 0


@dataclass
class BatchPlan:
    ranges: list[Range]
    bytes: int = 0
    messages: int = 0  # about: Parquet rows and JSON lines (an empty line counts too)
    digest: Future | None = None  # the checksum, computed while the batch decodes

    @property
    def checksum(self) -> str:
        """The batch's input checksum (waits for it; raises what reading the files raised)."""
        if self.digest is None:
            raise ChangelakeError("the batch's checksum was never started (no input files were planned)")
        return self.digest.result()


@dataclass
class DecodeSummary:
    """What the decode tasks found, summed on the driver (small: no records)."""

    staged: list[str] = field(default_factory=list)
    staged_bytes: dict[str, int] = field(default_factory=dict)  # each staged file's size
    messages: int = 0
    skipped: int = 0
    records: int = 0
    op_counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OPS, 0))
    dead_letters: list[dict] = field(default_factory=list)
    # partition key (``records.partition_key`` of partition values + bucket) -> the bucket's staged records
    groups: dict[str, StagedGroup] = field(default_factory=dict)


@dataclass
class StagedGroup:
    """Where one (partition, bucket)'s records of the batch are: record batches of staged files."""

    bucket: int
    parts: list[tuple[str, int]] = field(default_factory=list)  # (staged file, record batch)
    records: int = 0


def plan_batch(
    paths: list[LandedPath],
    spec: TableSpec,
    fmt: str | None,
    target_columns: list[str] | None,
    merge_mode: str | None = None,
) -> BatchPlan:
    """Cut the batch's files into decode ranges (JSON lines read once in 1 MiB chunks, Parquet by its footer)
    and start checksumming them in a thread: a new batch needs its checksum only at its commit, so hashing
    (a second for a few hundred MB) overlaps the decode.

    The checksum covers contents, format, target columns and merge mode (not the file names), as before.
    """
    ranges: list[Range] = []
    total = messages = 0
    names = [fmt or readers.format_for(path, spec) for path in paths]
    # A rows format (Parquet) carries no ordering field and is read alone, as the whole-batch reader has it.
    rows_alone = all(isinstance(formats.FORMATS.get(n), formats.RowsFormat) for n in names)
    arrival = spec.source_options.ordering == "arrival"
    for path, name in zip(paths, names, strict=True):
        f = formats.FORMATS.get(name)
        if f is None:
            raise ChangelakeError(f"{path}: unknown input format '{name}'; known: {readers.reader_names()}")
        if isinstance(f, formats.RowsFormat) and not (arrival and rows_alone):
            raise ChangelakeError(f"{path}: {f.title} batches are read in arrival order, alone")
    for index, (path, name) in enumerate(zip(paths, names, strict=True)):
        f = formats.FORMATS[name]
        if isinstance(f, formats.RowsFormat):
            total += _size(path)
            parts = _row_ranges(f, index, landed.location(path))
            ranges += parts
            messages += sum(max(0, r.end - r.start) for r in parts)
            continue
        if kafka_container.is_container(path):  # read whole by one task, as JSON lines it becomes
            kafka_container.check_format(path, name)
            size = _size(path)
            parts, lines = [Range(index, landed.location(path), name, 0, size, 1)], 0
        else:
            parts, size, lines = _line_ranges(path, index, name)
        ranges += parts
        total += size
        messages += lines + 1
    hasher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="changelake-checksum")
    digest = hasher.submit(landing.batch_checksum, list(paths), fmt, target_columns, merge_mode)
    hasher.shutdown(wait=False)
    return BatchPlan(ranges, total, messages, digest)


def plan_topic(ranges: list[kafka.PartitionRange], spec: TableSpec) -> BatchPlan:
    """A topic batch as decode ranges: one per partition with offsets to read (:mod:`changelake.inputs.kafka`),
    its lines numbered by offset (``first_line`` is the range's first offset). Its checksum is its ranges'."""
    fmt = str(spec.source.get("format"))
    planned = [
        Range(index, r.label, fmt, r.start, r.end, r.start) for index, r in enumerate(ranges) if r.size
    ]
    if any(r.end >= 1 << (FILE_SHIFT - LINE_SHIFT) for r in planned):
        raise ChangelakeError(
            f"{spec.full_name}: Kafka offsets beyond 2^46 do not fit a record's arrival number"
        )
    digest: Future = Future()
    digest.set_result(kafka.checksum(ranges, fmt))
    return BatchPlan(planned, 0, sum(r.size for r in ranges), digest)


def _line_ranges(
    path: LandedPath, index: int, fmt: str, limit: int | None = None
) -> tuple[list[Range], int, int]:
    """A JSON-lines file cut into ranges at the first newline after every CHANGELAKE_DECODE_RANGE_BYTES, each with its first
    line number; and the file's bytes and newlines. The file is read once through one reused 1 MiB buffer
    whose newlines numpy finds: 88 MB planned in 20 ms, and the driver's memory stays flat whatever the file's
    size (a memory map of the file would count it all in the driver's resident set).

    A line longer than ``limit`` bytes (CHANGELAKE_MAX_RECORD_BYTES) is a range of its own, marked
    ``too_long``: no task reads it whole (a 150 MB line parsed cost 2.7 GB), its task reports it as a bad
    record, and the lines around it decode as usual."""
    limit = max_record_bytes() if limit is None else limit
    range_bytes = tuned("decode_range_bytes")
    ranges: list[Range] = []
    start = offset = lines = 0  # the open range's first byte; the bytes and newlines before the chunk
    first_line = 1  # the open range's first line
    line_start = 0  # the first byte of the line the chunk begins in
    chunk = bytearray(PLAN_CHUNK_BYTES)
    view, text = memoryview(chunk), np.frombuffer(chunk, np.uint8)
    with _open_landed(path) as fh:
        while n := fh.readinto(view):
            ends = np.flatnonzero(text[:n] == 10) + offset  # the chunk's newlines, as file offsets
            # The lines ending in the chunk that are over the limit: past its first, only if the chunk is longer.
            if n > limit:
                long = np.flatnonzero(np.diff(ends, prepend=line_start - 1) - 1 > limit).tolist()
            else:
                long = [0] if len(ends) and ends[0] - line_start > limit else []
            at = 0  # the chunk's newlines before ends[at] are in closed ranges
            for stop in [*long, len(ends)]:
                # Close a range at the first newline where it holds enough bytes (maybe several per chunk).
                while (cut := at + int(np.searchsorted(ends[at:stop], start + range_bytes - 1))) < stop:
                    ranges.append(
                        Range(index, landed.location(path), fmt, start, int(ends[cut]) + 1, first_line)
                    )
                    start, first_line, at = int(ends[cut]) + 1, lines + cut + 2, cut + 1
                if stop < len(ends):  # a line over the limit: closes the open range, then a range of its own
                    begin, end = int(ends[stop - 1]) + 1 if stop else line_start, int(ends[stop]) + 1
                    if begin > start:
                        ranges.append(Range(index, landed.location(path), fmt, start, begin, first_line))
                    ranges.append(
                        Range(index, landed.location(path), fmt, begin, end, lines + stop + 1, limit)
                    )
                    start, first_line, at = end, lines + stop + 2, stop + 1
            lines += len(ends)
            line_start = int(ends[-1]) + 1 if len(ends) else line_start
            offset += n
    if offset - line_start > limit:  # the file ends in a line over the limit (no newline after it)
        if line_start > start:
            ranges.append(Range(index, landed.location(path), fmt, start, line_start, first_line))
        ranges.append(Range(index, landed.location(path), fmt, line_start, offset, lines + 1, limit))
        start = offset
    if offset > start or not ranges:
        ranges.append(Range(index, landed.location(path), fmt, start, offset, first_line))
    return ranges, offset, lines


def _open_landed(path: LandedPath):
    try:
        return landed.open_landed(path)  # never through a link (a producer could swap one in mid-apply)
    except OSError as e:
        raise ChangelakeError(f"{path}: cannot read the landed file: {e.strerror or e}") from None


def _size(path: LandedPath) -> int:
    try:
        return landed.size_of(path)
    except OSError as e:
        raise ChangelakeError(f"{path}: cannot read the landed file: {e.strerror or e}") from None


def _row_ranges(f: formats.RowsFormat, index: int, path: str | ObjectPath) -> list[Range]:
    """Rows ``[start, end)`` per task, about CHANGELAKE_DECODE_RANGE_ROWS each, as the format cuts its file
    (:func:`split_ranges` cuts a large one if there are too few ranges for the cores). A file the format
    cannot plan is one range; its task reports why."""
    bounds = f.row_ranges(landed.as_landed(path), tuned("decode_range_rows"))
    if bounds is None:
        return [Range(index, path, f.name, 0, -1, 1)]
    return [Range(index, path, f.name, a, b, a + 1) for a, b in bounds]


def split_ranges(ranges: list[Range], tasks: int) -> list[Range]:
    """Cut the largest ranges of rows (Parquet) in halves until there are ``tasks`` ranges (one per decode task
    the cores can run), none under SPLIT_ROWS rows. A half of a row group reads the whole group: worth it
    only when a core would otherwise wait."""
    ranges = list(ranges)
    while len(ranges) < tasks:
        by_rows = [i for i, r in enumerate(ranges) if _rows_format(r) is not None and r.end >= 0]
        if not by_rows:
            break
        i = max(by_rows, key=lambda i: ranges[i].end - ranges[i].start)
        r = ranges[i]
        if r.end - r.start < 2 * SPLIT_ROWS:
            break
        middle = (r.start + r.end) // 2
        ranges[i : i + 1] = [
            Range(r.file_index, r.path, r.fmt, r.start, middle, r.start + 1),
            Range(r.file_index, r.path, r.fmt, middle, r.end, middle + 1),
        ]
    return ranges


def _rows_format(r: Range) -> formats.RowsFormat | None:
    """The range's format if it is a range of rows (not bytes of lines)."""
    f = formats.FORMATS.get(r.fmt)
    return f if isinstance(f, formats.RowsFormat) else None


def staged_schema(spec: TableSpec) -> pa.Schema:
    """A decoded record: arrival position, op, the columns, then the source metadata ordering may use."""
    meta = [
        pa.field("_kafka_topic", pa.string()),
        pa.field("_kafka_partition", pa.int32()),
        pa.field("_kafka_offset", pa.int64()),
        pa.field(ORDER_COLUMNS[0], _ORDER_NUMBER),
        pa.field(ORDER_COLUMNS[1], pa.string()),
    ]
    return pa.schema(list(batch_arrow_schema(spec)) + meta)


def stats_schema() -> pa.Schema:
    return pa.schema(
        [pa.field(n, pa.string()) for n in ("staged", "groups", "dead_letters", "error", "claims")]
        + [pa.field(c, pa.int64()) for c in (*STAT_COLUMNS, "staged_bytes")]
    )


def decode_range(
    r: Range,
    spec: TableSpec,
    staging_dir: str,
    io,
    offsets: OffsetIndex | None = None,
    kafka_config: dict[str, str] | None = None,
) -> dict:
    """Decode one range, stage its records (a record batch per bucket), and return its stats row.

    ``offsets``: the Kafka offsets the task's earlier ranges claimed (:func:`decode_task`); without it the
    range's are checked among themselves. ``kafka_config``: the client settings a topic range is read with."""
    opts = spec.source_options
    out = DecodedBatch(batch_arrow_schema(spec).empty_table())
    rows = _rows_format(r)
    if r.too_long:
        out.messages += 1
        with _open_landed(landed.as_landed(r.path)) as fh:
            fh.seek(r.start)
            prefix = fh.read(min(readers.LONG_LINE_PREFIX, r.too_long + 1))
        error = BadRecordError(str(r.path), r.first_line, None, readers.line_too_long(r.too_long))
        out.reject(error, readers.raw_text(prefix), opts)
        table = staged_schema(spec).empty_table()
    elif rows is not None:
        table, first = (
            rows.read_rows(landed.as_landed(r.path), r.start, r.end, spec, opts, out)
            if r.end >= 0
            else (rows.read(landed.as_landed(r.path), spec, opts, out), 0)
        )
        seq = (r.file_index << FILE_SHIFT) | (np.arange(first + 1, first + 1 + table.num_rows) << LINE_SHIFT)
        table = table.set_column(0, "_seq", pa.array(seq, pa.int64()))
        for f in list(staged_schema(spec))[table.num_columns :]:
            table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    else:
        table = _decode_lines(r, spec, out, offsets, kafka_config)
    staged: str | None = None
    groups: list[list] = []
    staged_bytes: int | None = None
    if table.num_rows:
        table = table.cast(staged_schema(spec))  # one schema (nullability too) for every path's records
        staged = f"{staging_dir}/part-{r.file_index:05d}-{r.start:016d}-{uuid.uuid4().hex[:8]}.arrow"
        groups, staged_bytes = _stage(table, spec, io, staged)
    ops = out_ops(table)
    return {
        "staged": staged,
        "staged_bytes": staged_bytes,
        "groups": json.dumps(groups) if groups else None,
        "dead_letters": json.dumps(out.dead_letters) if out.dead_letters else None,
        "messages": out.messages,
        "skipped": out.skipped,
        "records": table.num_rows,
        **{f"op{op}": ops[op] for op in OPS},
    }


def bucket_groups(spec: TableSpec, table: pa.Table) -> tuple[np.ndarray, list[tuple[str, int]]]:
    """A group id per record and, per group, its partition key and bucket: the records' (partition, bucket).

    The key is :func:`changelake.inputs.records.partition_key` of the partition values as Iceberg keeps them
    (dates as days, timestamps as microseconds) and the bucket, as the bucket's data files are keyed."""
    bucket = bucket_ids(spec, table)
    if not spec.partition_keys:
        present = np.flatnonzero(np.bincount(bucket, minlength=spec.bucket_num))
        slot = np.zeros(spec.bucket_num, np.int64)
        slot[present] = np.arange(len(present))
        return slot[bucket], [(partition_key((int(b),)), int(b)) for b in present]
    columns = [_iceberg_values(table.column(k)) for k in spec.partition_keys]
    keys = pa.Table.from_arrays([*columns, pa.array(bucket, pa.int32())], names=[*spec.partition_keys, "_b"])
    gid = group_ids(keys)
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


def _stage(table: pa.Table, spec: TableSpec, io, path: str) -> tuple[list[list], int]:
    """Write the records as one Arrow IPC file, a record batch per (partition, bucket) in arrival order inside
    it, without the columns that are null in every record; return ``[partition key, bucket, batch index,
    records]`` per group, and the file's size (the bucket tasks open it without asking the store). The file is read once, by this batch's bucket tasks: writing it is a copy
    (compressed only when it leaves the machine)."""
    gid, groups = bucket_groups(spec, table)
    # numpy sorts 16-bit integers by radix: 4x faster than 64-bit ones.
    order = np.argsort(gid.astype(np.int16) if len(groups) < 1 << 15 else gid, kind="stable")
    counts = np.bincount(gid, minlength=len(groups))
    # Columns of nothing but nulls (the source metadata of most inputs) are neither reordered nor written:
    # the bucket tasks read them back as nulls (read_staged). A million records stage 36 MB less.
    empty = [c for c in table.column_names if table.column(c).null_count == table.num_rows]
    table = table.drop_columns(empty).take(pa.array(order)).combine_chunks()
    options = pa.ipc.IpcWriteOptions(compression=None if TaskIO.local_path(path) else "lz4")
    out, start = [], 0
    with io.open_output(path) as sink:
        with pa.ipc.new_file(sink, table.schema, options=options) as writer:
            for index, ((key, bucket), n) in enumerate(zip(groups, counts.tolist(), strict=True)):
                batch = table.slice(start, n).to_batches()
                writer.write_batch(batch[0] if batch else pa.RecordBatch.from_pylist([], schema=table.schema))
                out.append([key, bucket, index, n])
                start += n
        size = sink.tell()
    return out, size


def out_ops(table: pa.Table) -> dict[str, int]:
    counts = dict.fromkeys(OPS, 0)
    if table.num_rows:
        for row in pc.value_counts(table.column("_op")).to_pylist():
            counts[row["values"]] = row["counts"]
    return counts


def _decode_lines(
    r: Range,
    spec: TableSpec,
    out: DecodedBatch,
    offsets: OffsetIndex | None = None,
    kafka_config: dict[str, str] | None = None,
) -> pa.Table:
    """Decode the lines of one byte range: column-wise when its format can (:func:`_json_columns`), else
    through readers' per-message path (which names any problem's line). Records with Kafka offsets claim them
    in ``offsets`` (:func:`_claim_offsets`). A topic range's lines are read from Kafka first."""
    opts = spec.source_options
    if kafka.is_topic_range(str(r.path)):
        topic, partition = kafka.parse_label(str(r.path))
        records = kafka.range_records(
            kafka_config or {}, kafka.PartitionRange(topic, partition, r.start, r.end)
        )
        if opts.ordering == "arrival" and tuned("fast_json"):
            table = _topic_columns(records, r, spec, out, offsets)
            if table is not None:
                return table
        view = memoryview(kafka.render_lines(records, spec))
    elif kafka_container.is_container(r.path):
        view = memoryview(kafka_container.as_json_lines(r.path, spec))
    else:
        view = _mapped(r)
    if opts.ordering == "arrival" and tuned("fast_json"):
        table = _json_columns(view, r, spec)
        if table is not None:
            out.messages += table.num_rows
            if table.num_rows and table.column("_kafka_offset").null_count < table.num_rows:
                raw = view.tobytes() if opts.quarantine else b""  # the dead letters' text, if any
                table = _claim_offsets(
                    table, r, raw, spec, out, offsets or OffsetIndex({r.file_index: r.path})
                )
            return table
    data = view.tobytes()  # the per-message path splits lines of bytes
    reader = readers._JsonReader(spec, r.fmt, opts, out)
    names = spec.column_names
    seqs: list[int] = []
    ops: list[str] = []
    columns: list[list] = [[] for _ in names]
    kafka_meta: list[list] = [[], [], []]
    order_number: list = []
    order_text: list = []
    base = r.file_index << FILE_SHIFT
    stop: BadRecordError | None = None
    for line_no, raw in enumerate(_lines(data), start=r.first_line):
        if not raw.strip():
            continue
        out.messages += 1
        try:
            # Bytes: _entry checks UTF-8 (and that the file is not Parquet) for every caller alike.
            entry = reader._entry(str(r.path), line_no, raw)
            number, text = (None, None) if entry is None else _order_values(entry.order, opts.ordering)
        except formats.FieldError as e:
            error = BadRecordError(str(r.path), line_no, e.field, e.reason)
            if not opts.quarantine:
                stop = error  # raised once the offsets of the lines before it are claimed
                break
            out.reject(error, readers.raw_text(raw), opts)
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
                kafka_meta[i].append(meta[i])
            order_number.append(number)
            order_text.append(text)
    schema = staged_schema(spec)
    arrays = [pa.array(seqs, pa.int64()), pa.array(ops, pa.string())]
    arrays += [pa.array(col, schema.field(n).type) for col, n in zip(columns, names, strict=True)]
    arrays += [pa.array(v, schema.field(n).type) for v, n in zip(kafka_meta, KAFKA_COLUMNS, strict=True)]
    arrays += [pa.array(order_number, _ORDER_NUMBER), pa.array(order_text, pa.string())]
    table = pa.Table.from_arrays(arrays, schema=schema)
    if any(v is not None for v in kafka_meta[2]):
        table = _claim_offsets(table, r, data, spec, out, offsets or OffsetIndex({r.file_index: r.path}))
    if stop is not None:
        raise stop
    return table


def _claim_offsets(
    table: pa.Table, r: Range, data: bytes, spec: TableSpec, out: DecodedBatch, offsets: OffsetIndex
) -> pa.Table:
    """Claim the Kafka offsets of a range's messages, in arrival order, after those of the task's earlier
    ranges: a message at an offset an earlier one holds with different content is a bad record naming both
    (raised, the first one, under ``on-bad-record: fail``; else a dead letter, and its records are dropped).
    A redelivery (same content) stays: it is in the same bucket as its original, whose task counts or drops it
    (:func:`changelake.engine.buckets.order_and_dedup`). Vectorised but for the conflicts themselves."""
    has = pc.is_valid(table.column("_kafka_offset"))
    kafka = table.filter(has)
    seq = kafka.column("_seq").to_numpy()
    starts, digests = message_digests(seq, record_digests(spec, kafka))
    rows = pa.array(starts)
    messages = pa.table(
        [
            kafka.column("_kafka_topic").take(rows),
            kafka.column("_kafka_partition").take(rows),
            kafka.column("_kafka_offset").take(rows),
            pa.array(digests, pa.int64()),
            pa.array(seq[starts] >> LINE_SHIFT << LINE_SHIFT, pa.int64()),
        ],
        schema=CLAIMS_SCHEMA,
    )
    conflicts = offsets.claim(messages).to_pylist()
    if not conflicts:
        return table
    lines = _lines(data) if spec.source_options.quarantine else []
    for conflict in conflicts:
        line = line_of(conflict["seq"])
        raw = readers.raw_text(lines[line - r.first_line]) if lines else ""
        error = BadRecordError(str(r.path), line, "offset", offsets.conflict_reason(conflict))
        out.reject(error, raw, spec.source_options)
    losers = np.array([c["seq"] >> LINE_SHIFT for c in conflicts], np.int64)
    return table.filter(pa.array(~np.isin(table.column("_seq").to_numpy() >> LINE_SHIFT, losers)))


# --- JSON lines, column-wise ------------------------------------------------------------------------------
# A format may decode a range of lines column-wise (changelog JSON: pyarrow's JSON reader and Arrow kernels)
# when the result is certain to equal the per-message path's; a range it declines is decoded line by line,
# so every error and dead letter is the per-message path's own. CHANGELAKE_FAST_JSON=0 turns it off.


def _mapped(r: Range) -> memoryview:
    """A range's bytes, as a view of its memory-mapped file when it is large (MAP_MIN_BYTES): reading 44 MB
    into a copy cost 27 ms, more than the column-wise path's own checks of them. The mapping goes when the last
    view of it does. A small range (a batch decoded in the applying process) is read: a landed file cut short
    while mapped would stop the process with SIGBUS, where a read only comes back short."""
    with landed.open_landed(r.path) as fh:
        if r.end - r.start >= MAP_MIN_BYTES:
            try:
                return memoryview(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))[r.start : r.end]
            except (OSError, ValueError):  # a file system that cannot map it: read it
                pass
        fh.seek(r.start)
        return memoryview(fh.read(max(0, r.end - r.start)))


def _json_columns(data: bytes | memoryview, r: Range, spec: TableSpec) -> pa.Table | None:
    """The staged records of a range decoded column-wise by its format, or None to decode it line by line."""
    f = formats.FORMATS[r.fmt]
    decoded = f.columns(data, r.first_line, spec) if isinstance(f, formats.JsonLinesFormat) else None
    if decoded is None:
        return None
    # A format whose records carry Kafka metadata adds its [topic, partition, offset] columns.
    line_numbers, op, arrays = decoded[:3]
    extra: tuple = tuple(decoded)[3:]
    kafka = list(extra[0]) if extra else []
    staged = staged_schema(spec)
    if not len(line_numbers):
        return staged.empty_table()
    seq = (r.file_index << FILE_SHIFT) | (line_numbers << LINE_SHIFT)
    columns = [pa.array(seq, pa.int64()), op, *arrays, *kafka]
    columns += [pa.nulls(len(line_numbers), meta.type) for meta in list(staged)[len(columns) :]]
    return pa.Table.from_arrays(columns, schema=staged)


def _topic_columns(
    records: kafka.RangeRecords, r: Range, spec: TableSpec, out: DecodedBatch, offsets: OffsetIndex | None
) -> pa.Table | None:
    """A topic range decoded column-wise from its records' bytes when its format can (upsert-kafka with Avro
    parts: :meth:`~changelake.inputs.formats.upsert_kafka.UpsertKafka.record_columns`), else None. The JSON
    lines of :func:`kafka.render_lines` give the same table, but each record's parts then go through base64
    text and a JSON parse and back, per record."""
    f = formats.FORMATS[r.fmt]
    record_columns = getattr(f, "record_columns", None)
    decoded = record_columns(records, spec) if record_columns is not None else None
    if decoded is None:
        return None
    line_numbers, op, arrays, kafka_arrays = decoded
    staged = staged_schema(spec)
    n = len(line_numbers)
    out.messages += n
    if not n:
        return staged.empty_table()
    seq = (r.file_index << FILE_SHIFT) | (line_numbers << LINE_SHIFT)
    columns = [pa.array(seq, pa.int64()), op, *arrays, *kafka_arrays]
    columns += [pa.nulls(n, meta.type) for meta in list(staged)[len(columns) :]]
    table = pa.Table.from_arrays(columns, schema=staged)
    # The dead letters' text, if any (a record claiming an offset another holds): its rendered line.
    raw = kafka.render_lines(records, spec) if spec.source_options.quarantine else b""
    return _claim_offsets(table, r, raw, spec, out, offsets or OffsetIndex({r.file_index: r.path}))


def _lines(data: bytes) -> list[bytes]:
    """The lines of a byte range, each with its newline, ending at b"\\n" only: as the byte-range planner and
    the reader of a landed file count them (``bytes.splitlines`` would also break at a lone \\r and shift
    every later line number of an error or dead letter)."""
    parts = data.split(b"\n")
    tail = parts.pop()  # what follows the last newline: b"" when the range ends with one
    return [p + b"\n" for p in parts] + ([tail] if tail else [])


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
    kafka_config: dict[str, str] | None = None,
):
    """The ``mapInArrow`` function: every input row is the index of a group of ``ranges`` (``spark.range``'s
    ``id``); it decodes them one after the other and yields one stats row per range (``kafka_config``: the
    client settings of a topic batch's ranges).

    Records with Kafka offsets claim them batch-wide (:class:`~changelake.inputs.records.OffsetIndex`). One
    task claims its ranges' in turn. When several tasks decode the batch, each only notes its ranges' offsets
    in its stats rows and :func:`summarize` claims them for the batch: a conflict found there can only
    refuse the batch, so under ``on-bad-record: quarantine``, where the later record must be left out
    instead, one task decodes every range of such a batch."""
    kafka = any(getattr(formats.FORMATS.get(r.fmt), "kafka_metadata", False) for r in ranges)
    if kafka and spec.source_options.quarantine and len(groups) > 1:
        groups = [sorted(i for g in groups for i in g)] + [[] for _ in groups[1:]]
    report = kafka and sum(1 for g in groups if g) > 1
    paths = {r.file_index: r.path for r in ranges}

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        lazy_zip_invalidation()  # for this worker's next tasks
        privacy.restrict_worker()  # a Spark worker has its JVM's umask, whoever started that
        io = TaskIO(io_properties)
        for batch in batches:
            for group in batch.column(0).to_pylist():
                offsets = OffsetIndex(paths, defer=report)
                for index in groups[group]:
                    r = ranges[index]
                    try:
                        stats = decode_range(r, spec, staging_dir, io, offsets, kafka_config)
                    except ChangelakeError as e:
                        # Reported by the driver as the error itself, not as a failed Spark job.
                        stats = {"error": _error_json(e, r), "records": 0, "messages": 0, "skipped": 0}
                        stats.update({f"op{op}": 0 for op in OPS})
                    if report:  # the offsets the range noted, a bad one's lines before it included
                        stats["claims"] = encode_claims(offsets.take_added(), paths)
                    yield pa.RecordBatch.from_pylist([stats], schema=stats_schema())

    return run


def plan_tasks(ranges: list[Range], cores: int) -> tuple[list[Range], list[list[int]]]:
    """The decode ranges and their grouping into Spark tasks (indexes of ranges per task).

    Rows (Parquet) cost about the same per row, so they are cut into one equal share per core
    (:func:`share_rows`): a whole row group more per task would leave a core idle for its time at the end
    (5 row groups on 2 cores: 3 on one, 2 on the other). Lines are shared out the same way, by bytes
    (:func:`share_lines`). A topic batch's partitions are cut into offset ranges of about equal counts."""
    if ranges and all(kafka.is_topic_range(str(r.path)) for r in ranges):
        return share_offsets(ranges, cores)
    if ranges and all(_rows_format(r) is None for r in ranges):
        return share_lines(ranges, cores)
    if cores > 1 and ranges and all(_rows_format(r) is not None and r.end >= 0 for r in ranges):
        return share_rows(ranges, cores)
    ranges = split_ranges(ranges, cores)
    return ranges, group_ranges(ranges, cores * 2)


def share_offsets(ranges: list[Range], shares: int) -> tuple[list[Range], list[list[int]]]:
    """A topic batch's partition ranges cut into ``shares`` groups of about equal offset counts (a partition
    split where a share ends; a piece keeps its partition's index, so records stay in offset order)."""
    total = sum(r.end - r.start for r in ranges)
    if shares <= 1 or total <= SPLIT_ROWS:
        return ranges, [list(range(len(ranges)))] if ranges else []
    per_share = -(-total // shares)
    pieces: list[Range] = []
    groups: list[list[int]] = [[]]
    room = per_share
    for r in ranges:
        start = r.start
        while start < r.end:
            end = min(r.end, start + room)
            groups[-1].append(len(pieces))
            pieces.append(Range(r.file_index, r.path, r.fmt, start, end, start))
            room -= end - start
            start = end
            if room == 0:  # this share is full: the next one (the last share takes what is left)
                if len(groups) < shares:
                    groups.append([])
                room = per_share if len(groups) < shares else total
    return pieces, [g for g in groups if g]


def share_lines(ranges: list[Range], shares: int) -> tuple[list[Range], list[list[int]]]:
    """Byte ranges of lines in one share of about equal bytes per core, each share's consecutive ranges of
    a file joined up to CHANGELAKE_DECODE_MAX_RANGE_BYTES.

    Measured on 500k changelog-JSON records (88 MB, 2 cores): 16-MiB ranges in 4 tasks decoded in 1.5 s
    (a task of two ranges ran alone at the end, and every range pays a parse and a staged file of its
    own), two shares of 44 MB in 1.0 s; 4 tasks of 22 MB took as long as 2."""
    max_range = tuned("decode_max_range_bytes")
    pieces: list[Range] = []
    groups: list[list[int]] = []
    for group in group_ranges(ranges, max(1, shares)):
        joined: list[int] = []
        for r in (ranges[i] for i in group):
            last = pieces[-1] if joined else None
            if (
                last is not None
                and last.file_index == r.file_index
                and last.end == r.start
                and r.end - last.start <= max_range
                and not (last.too_long or r.too_long)
            ):
                pieces[-1] = Range(last.file_index, last.path, last.fmt, last.start, r.end, last.first_line)
            else:
                joined.append(len(pieces))
                pieces.append(r)
        groups.append(joined)
    return pieces, groups


def share_rows(ranges: list[Range], shares: int) -> tuple[list[Range], list[list[int]]]:
    """Ranges of rows cut at the ``shares - 1`` boundaries that make every share hold the same rows (a cut
    leaving fewer than SPLIT_ROWS on either side is moved to the range's edge), and the consecutive ranges of
    each share."""
    total = sum(r.end - r.start for r in ranges)
    bounds = [total * k // shares for k in range(1, shares)]
    pieces: list[Range] = []
    at = 0  # rows before the range, over the batch
    for r in ranges:
        edges = [r.start]
        for b in bounds:
            cut = r.start + b - at
            if edges[-1] + SPLIT_ROWS <= cut <= r.end - SPLIT_ROWS:
                edges.append(cut)
        edges.append(r.end)
        pieces += [
            Range(r.file_index, r.path, r.fmt, a, b, a + 1)
            for a, b in zip(edges[:-1], edges[1:], strict=True)
        ]
        at += r.end - r.start
    groups: list[list[int]] = [[] for _ in range(shares)]
    at = 0
    for index, piece in enumerate(pieces):
        # The share the piece's middle falls in (a piece under SPLIT_ROWS may straddle a boundary).
        middle = at + (piece.end - piece.start) // 2
        groups[sum(1 for b in bounds if middle >= b)].append(index)
        at += piece.end - piece.start
    return pieces, [g for g in groups if g]


def group_ranges(ranges: list[Range], tasks: int) -> list[list[int]]:
    """Consecutive ranges into at most ``tasks`` groups of about equal size (a Spark task costs a Python
    worker a round trip or more; a few per core are enough to even out)."""
    if not ranges:
        return []
    sizes = [max(1, r.end - r.start) if r.end >= 0 and not r.too_long else 1 for r in ranges]
    tasks = max(1, min(tasks, len(ranges)))
    groups: list[list[int]] = [[] for _ in range(tasks)]
    total, running = sum(sizes), 0
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
    """Raise the batch's first error in arrival order (file, then line), as the task raised it, or a Kafka
    offset two tasks' records hold with different content (:func:`offset_conflicts`), if that comes first."""
    from changelake import errors

    found = [json.loads(row["error"]) for row in stats if row.get("error")]
    found += offset_conflicts(stats)
    if not found:
        return
    first = min(found, key=lambda e: e["at"])
    if "bad_record" in first:
        raise BadRecordError(*first["bad_record"])
    raise getattr(errors, first["type"], ChangelakeError)(first["message"])


def offset_conflicts(stats: list[dict]) -> list[dict]:
    """The Kafka offsets several decode tasks noted (:func:`decode_task`), claimed for the batch: every
    message whose offset an earlier one holds with different content, as a task's error (a bad record naming
    both)."""
    paths: dict[int, str] = {}
    parts = []
    for row in stats:
        if row.get("claims"):
            part, where = decode_claims(row["claims"])
            parts.append(part)
            paths.update(where)
    if not parts:
        return []
    claims = pa.concat_tables(parts).sort_by("seq")
    offsets = OffsetIndex(paths)
    found: list[dict] = []
    for conflict in offsets.claim(claims).to_pylist():
        seq = conflict["seq"]
        line = line_of(seq)
        record = [paths.get(seq >> FILE_SHIFT, "?"), line, "offset", offsets.conflict_reason(conflict)]
        found.append({"bad_record": record, "at": [seq >> FILE_SHIFT, line]})
    return found


def summarize(stats: list[dict]) -> DecodeSummary:
    """Sum the decode tasks' rows (they come back in any order; dead letters sorted by file and line)."""
    raise_first_error(stats)
    out = DecodeSummary()
    for row in stats:
        if row["staged"]:
            out.staged.append(row["staged"])
            if row.get("staged_bytes"):
                out.staged_bytes[row["staged"]] = row["staged_bytes"]
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
