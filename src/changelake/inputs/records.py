"""Decoded records: the Arrow shape of a batch's records, what reading a batch found, the rules a table adds
to its column types, and which message holds each Kafka offset (:class:`OffsetIndex`). Shared by every
format's decoding (:mod:`changelake.inputs.formats`), the batch reader (:mod:`changelake.inputs.readers`) and
the decode tasks (:mod:`changelake.inputs.decode`).
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc  # noqa: F401 - pa.ipc

from changelake.errors import BadRecordError
from changelake.inputs.formats.base import OPS

if TYPE_CHECKING:
    from changelake.source_options import SourceOptions
    from changelake.spec import TableSpec


@dataclass
class DecodedBatch:
    """Typed records of one batch, in batch order, and what reading them found."""

    records: pa.Table  # _seq, _op, <columns>
    dead_letters: list[dict] = field(default_factory=list)  # quarantined: file, line, field, reason, raw
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


# --- one Kafka offset, one record ---------------------------------------------------------------------------
#: A record's ``_seq`` is ``file << FILE_SHIFT | line << MESSAGE_SHIFT | change`` (an update's two images are
#: changes 0 and 1 of one message), in the decode tasks and the batch reader alike.
FILE_SHIFT, MESSAGE_SHIFT = 48, 2
_LINE_MASK = (1 << (FILE_SHIFT - MESSAGE_SHIFT)) - 1
# Source metadata columns a decoded record may carry (absent when the format has none).
KAFKA_COLUMNS = ("_kafka_topic", "_kafka_partition", "_kafka_offset")
ORDER_COLUMNS = ("_order_number", "_order_text")  # the ``ordering`` field's value (number or text)


def partition_key(partition: tuple) -> str:
    """The JSON key of a (partition values..., bucket) tuple in the batch's bookkeeping (the staged files'
    groups, the merge tasks' outputs)."""
    return json.dumps(list(partition), default=str)


_KAFKA_KEY = ["topic", "partition", "offset"]
#: The messages :meth:`OffsetIndex.claim` takes (and its claims, as decode tasks report them).
CLAIMS_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("digest", pa.int64()),
        pa.field("seq", pa.int64()),
    ]
)
_CHANGE_WEIGHTS = np.array([1, 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9], np.uint64)


def line_of(seq: int) -> int:
    """The line (or Parquet row) of a record's or message's ``_seq``."""
    return (seq >> MESSAGE_SHIFT) & _LINE_MASK


def record_digests(spec: TableSpec, records: pa.Table) -> np.ndarray:
    """A 64-bit digest (int64) of each record's content: its row kind and its values in storage types, a null
    told apart from any value. Two deliveries of one Kafka record digest alike; two different records differ
    but for a 2^-64 chance. Spark's xxhash64 over the columns, the bucket hash's own code (vectorised)."""
    from changelake.bucketing import xxhash64_columns
    from changelake.types import parse_type

    n = records.num_rows
    columns = [records.column(name) for name in spec.column_names]
    # xxhash64 skips a null: the columns' null pattern, 63 columns to a word, is hashed first.
    words = [np.zeros(n, np.int64) for _ in range(max(1, -(-len(columns) // 63)))]
    for i, column in enumerate(columns):
        if column.null_count:
            nulls = column.is_null().to_numpy(zero_copy_only=False).astype(np.int64)
            words[i // 63] |= nulls << (i % 63)
    op = pc.index_in(records.column("_op"), value_set=pa.array(OPS)).cast(pa.int64())
    long = parse_type("BIGINT")
    hashed = [op, *(pa.array(w) for w in words), *columns]
    types = [long] * (1 + len(words)) + [c.type for c in spec.columns]
    return xxhash64_columns(hashed, types)


def message_digests(seq: np.ndarray, digests: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per message (records sharing ``seq >> MESSAGE_SHIFT``, consecutive): the row of its first record and the
    digest of its records in order."""
    if not len(seq):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    message = seq >> MESSAGE_SHIFT
    starts = np.flatnonzero(np.concatenate(([True], message[1:] != message[:-1])))
    weighted = digests.view(np.uint64) * _CHANGE_WEIGHTS[seq & ((1 << MESSAGE_SHIFT) - 1)]  # wraps: mod 2^64
    return starts, np.add.reduceat(weighted, starts).view(np.int64)


class OffsetIndex:
    """The Kafka offsets of a batch's messages read so far, each with the first message that had it (its
    ``seq`` and content digest): one offset is one record. A later message at an offset is a redelivery when
    its content is the first one's, and a **conflict** (a bad record) when it is not.

    The decode tasks and the batch reader claim their messages here in arrival order, range by range. A task
    that decodes part of a batch only notes them (``defer``): the first message of each offset and content it
    read, which :func:`changelake.inputs.decode.summarize` claims for the whole batch, since the first
    message of an offset may be another task's."""

    def __init__(self, paths: dict[int, Any], defer: bool = False):
        self.paths = (
            paths  # file index (``seq >> FILE_SHIFT``) -> landed file (path text or object), for messages
        )
        self.defer = defer
        self.first = CLAIMS_SCHEMA.empty_table()  # one row per offset: its first message
        self.added: list[pa.Table] = []  # rows of ``first`` added since :meth:`take_added` (deferred: notes)

    def claim(self, messages: pa.Table) -> pa.Table:
        """Claim the offsets of ``messages`` (:data:`CLAIMS_SCHEMA`, later than every message claimed before):
        the conflicts, as ``seq`` (the later message), ``first_seq`` and the offset's topic, partition and
        offset, in arrival order. A redelivery is neither a conflict nor remembered. Deferred, none."""
        if not messages.num_rows:
            return _NO_CONFLICTS
        if self.defer:
            noted = (
                messages.cast(CLAIMS_SCHEMA)
                .sort_by("seq")
                .group_by([*_KAFKA_KEY, "digest"], use_threads=False)
            )
            self.added.append(noted.aggregate([("seq", "first")]).rename_columns({"seq_first": "seq"}))
            return _NO_CONFLICTS
        ordered = pa.concat_tables([self.first, messages.cast(CLAIMS_SCHEMA).sort_by("seq")])
        owners = ordered.group_by(_KAFKA_KEY, use_threads=False).aggregate(
            [("seq", "first"), ("digest", "first")]
        )
        owners = owners.rename_columns({"seq_first": "first_seq", "digest_first": "first_digest"}).select(
            [*_KAFKA_KEY, "first_digest", "first_seq"]
        )
        new = owners.filter(pc.greater_equal(owners.column("first_seq"), pc.min(messages.column("seq"))))
        if new.num_rows:
            self.added.append(new.rename_columns(CLAIMS_SCHEMA.names))
        self.first = owners.rename_columns(CLAIMS_SCHEMA.names)
        if new.num_rows == messages.num_rows:  # every offset new and once: nothing to compare
            return _NO_CONFLICTS
        held = messages.join(owners, keys=_KAFKA_KEY, use_threads=False)
        differs = pc.and_(
            pc.not_equal(held.column("seq"), held.column("first_seq")),
            pc.not_equal(held.column("digest"), held.column("first_digest")),
        )
        return _conflicts_of(held.filter(differs))

    def take_added(self) -> pa.Table:
        """The offsets first claimed (or noted) since the last call (:data:`CLAIMS_SCHEMA`)."""
        added = (
            pa.concat_tables([a.select(CLAIMS_SCHEMA.names) for a in self.added])
            if self.added
            else CLAIMS_SCHEMA.empty_table()
        )
        self.added = []
        return added

    def conflict_reason(self, conflict: dict) -> str:
        """Why the later message of a conflict (a row of :meth:`claim`) is a bad record, naming the first."""
        first = conflict["first_seq"]
        where = f"{self.paths.get(first >> FILE_SHIFT, '?')}:{line_of(first)}"
        return (
            f"offset {conflict['offset']} of topic '{conflict['topic']}' partition {conflict['partition']} was "
            f"read before at {where} with different content; one Kafka offset is one record (a redelivery "
            "repeats it exactly)"
        )


def _conflicts_of(held: pa.Table) -> pa.Table:
    return held.select(["seq", "first_seq", *_KAFKA_KEY]).sort_by("seq")


_NO_CONFLICTS = pa.schema(
    [("seq", pa.int64()), ("first_seq", pa.int64()), ("topic", pa.string()), ("partition", pa.int32()),
     ("offset", pa.int64())]
).empty_table()  # fmt: skip


def encode_claims(claims: pa.Table, paths: dict[int, Any]) -> str | None:
    """Claims (:data:`CLAIMS_SCHEMA`) and the files they are in, as text for a decode task's stats row (Arrow
    IPC, zstd, base64); None for none."""
    if not claims.num_rows:
        return None
    files = pc.unique(pc.shift_right(claims.column("seq"), FILE_SHIFT)).to_pylist()
    schema = CLAIMS_SCHEMA.with_metadata({"paths": json.dumps({f: str(paths.get(f, "?")) for f in files})})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_table(claims.cast(schema))
    return base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")


def decode_claims(text: str) -> tuple[pa.Table, dict[int, str]]:
    """:func:`encode_claims` read back: the claims and the files (by file index) they are in."""
    table = pa.ipc.open_stream(pa.py_buffer(base64.b64decode(text))).read_all()
    paths = json.loads((table.schema.metadata or {}).get(b"paths", b"{}"))
    return table.replace_schema_metadata(None), {int(f): p for f, p in paths.items()}


def batch_arrow_schema(spec: TableSpec) -> pa.Schema:
    """A batch's records: arrival position, row kind, the table's columns in storage types."""
    return pa.schema(
        [pa.field("_seq", pa.int64(), False), pa.field("_op", pa.string(), False)]
        + [pa.field(c.name, c.type.arrow_type()) for c in spec.columns]
    )


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
