"""Decoded records: the Arrow shape of a batch's records, what reading a batch found, and the rules a table adds
to its column types. Shared by every format's decoding (:mod:`changelake.inputs.formats`), the batch reader
(:mod:`changelake.inputs.readers`) and the decode tasks (:mod:`changelake.inputs.decode`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from changelake.errors import BadRecordError
from changelake.inputs.formats.base import OPS

if TYPE_CHECKING:
    from changelake.inputs.sources import SourceOptions
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
