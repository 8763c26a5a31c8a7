"""What a read can leave unread: changelog files by their batch bounds, row groups by their statistics."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from changelake.storage.catalog import TableSource
from changelake.storage.files import TableFile


def batch_range(source: TableSource, f: TableFile) -> tuple[int | None, int | None]:
    """A changelog file's batches: its ``_batch_id`` bounds, or its partition (a table partitioned by batch)."""
    if f.batches is not None:
        return f.batches
    if "_batch_id" in source.partition_columns:
        b = f.partition[source.partition_columns.index("_batch_id")]
        return (b, b)
    return (None, None)


def overlaps(have: tuple[int | None, int | None], wanted: tuple[int | None, int | None]) -> bool:
    lo, hi = have
    return (wanted[0] is None or hi is None or hi >= wanted[0]) and (
        wanted[1] is None or lo is None or lo <= wanted[1]
    )


def batch_runs(files: list[TableFile], batches: Callable[[TableFile], tuple]) -> list[list[TableFile]]:
    """Files grouped into runs whose batch ranges overlap, runs in batch order (no batch is in two runs)."""
    ordered = sorted(files, key=lambda f: (batches(f)[0] is not None, batches(f)[0] or 0))
    runs: list[list[TableFile]] = []
    high: int | None = None
    for f in ordered:
        lo, hi = batches(f)
        if runs and (lo is None or high is None or lo <= high):
            runs[-1].append(f)
            high = None if hi is None or high is None else max(high, hi)
        else:
            runs.append([f])
            high = hi
    return runs


def in_batches(table: pa.Table, batches: tuple[int | None, int | None]) -> pa.Table:
    """The changelog rows of the batches ``from..to`` (both optional)."""
    low, high = batches
    if (low is None and high is None) or not table.num_rows:
        return table
    column = table.column("_batch_id")
    mask = None
    if low is not None:
        mask = pc.greater_equal(column, pa.scalar(low, pa.int64()))
    if high is not None:
        upper = pc.less_equal(column, pa.scalar(high, pa.int64()))
        mask = upper if mask is None else pc.and_(mask, upper)
    return table.filter(mask)


def group_starts(metadata: pq.FileMetaData) -> list[int]:
    """The file position of each row group's first row."""
    starts, at = [], 0
    for g in range(metadata.num_row_groups):
        starts.append(at)
        at += metadata.row_group(g).num_rows
    return starts


def may_contain(metadata: pq.FileMetaData, group: int, where: dict[str, Any]) -> bool:
    """False when a row group's min/max statistics exclude one of the looked-up values."""
    row_group = metadata.row_group(group)
    names = metadata.schema.names
    for name, value in where.items():
        if name not in names:
            continue
        column = row_group.column(names.index(name))
        s = column.statistics
        if s is None or not s.has_min_max:
            continue
        try:
            if value < s.min or value > s.max:
                return False
        except TypeError:  # e.g. aware vs naive datetimes: keep the row group
            continue
    return True


def bound_type(dtype: pa.DataType) -> type | None:
    """The Python type of the statistics that bound a column of ``dtype`` in a changelog read (types whose
    statistics and Python values order as Arrow sorts: offsets, batches, buckets, most partition columns),
    or None when none are used (floats: NaN and -0.0; timestamps: naive or aware values; decimals: older
    writers' statistics compare their bytes unsigned)."""
    if pa.types.is_boolean(dtype):
        return bool
    if pa.types.is_integer(dtype):
        return int
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return str  # UTF-8 byte order is code point order
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        return bytes
    if pa.types.is_date32(dtype):
        return dt.date
    return None


def lower_bound(row_group: pq.RowGroupMetaData, column: int | None, kind: type | None) -> tuple:
    """A sort position no record of the row group's ``column`` comes before: ``(0, min)`` from the
    statistics, or ``(-1,)`` (before everything) when they are missing, unusable or not of ``kind``.
    Nulls sort last (``(1,)``), so a minimum of the other values bounds them too."""
    if column is None or kind is None:
        return (-1,)
    s = row_group.column(column).statistics
    if s is None or not s.has_min_max:
        return (-1,)
    value = s.min
    if type(value) is not kind:
        return (-1,)
    return (0, value)


def manifest_lower_bound(raw: bytes | None, kind: type | None) -> tuple:
    """:func:`lower_bound` from a manifest entry's lower bound of a column (Iceberg's single-value
    serialization: integers and dates little-endian, strings UTF-8 and possibly truncated, which still bounds
    them from below), or ``(-1,)`` when there is none or ``kind`` (:func:`bound_type`) is not one read here."""
    if raw is None or kind is None:
        return (-1,)
    if kind is int and len(raw) in (4, 8):
        return (0, int.from_bytes(raw, "little", signed=True))
    if kind is dt.date and len(raw) == 4:
        return (0, dt.date(1970, 1, 1) + dt.timedelta(days=int.from_bytes(raw, "little", signed=True)))
    if kind is str:
        try:
            return (0, raw.decode("utf-8"))
        except UnicodeDecodeError:
            return (-1,)
    if kind is bytes:
        return (0, bytes(raw))
    if kind is bool and len(raw) == 1:
        return (0, raw != b"\x00")
    return (-1,)
