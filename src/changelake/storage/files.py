"""The files of a table snapshot as changelake plans with them, and Iceberg v2 position-delete files.

A PK table's snapshot holds two kinds of files (:class:`TableFile`):

* **data files**, each sorted by ``(_bucket, primary key)``. A file written for one bucket (a batch's
  rewrite of the bucket, a compaction, an initial load) holds that bucket only; a merge-on-read batch writes
  one file per Iceberg partition holding the new rows of every bucket it touched.
* **position-delete files** (Iceberg v2, ``content = 1``): rows ``(file_path, pos)`` naming the rows of data
  files that a later batch replaced or deleted, sorted by path and position, as the Iceberg spec requires.
  Every Iceberg reader drops those rows without knowing the key (no equality deletes).

A delete file applies only to data files of its own Iceberg partition (the spec's scan-planning rule), so a
table partitioned by the hidden ``_bucket`` column (tables created before merge-on-read) needs one delete
file per touched bucket; tables created since are partitioned by their partition keys only and keep the
bucket as a sorted column, so a batch writes one delete file per partition however many buckets it touches.
A file's buckets are its ``_bucket`` partition value or the column's lower and upper bounds.

This module is light (pyarrow only, not even numpy): the JVM-free read commands use it.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from changelake.errors import ChangelakeError

if TYPE_CHECKING:
    from changelake.spec import TableSpec

DATA, POSITION_DELETES = 0, 1
BUCKET_COLUMN = "_bucket"
#: Field ids of a position-delete file's columns (reserved by the Iceberg spec).
FILE_PATH_ID, POS_ID = 2147483546, 2147483545
POSITION_DELETE_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), nullable=False, metadata={"PARQUET:field_id": str(FILE_PATH_ID)}),
        pa.field("pos", pa.int64(), nullable=False, metadata={"PARQUET:field_id": str(POS_ID)}),
    ]
)


@dataclass(frozen=True)
class TableFile:
    """One live file of a snapshot: a data file or a position-delete file."""

    path: str
    content: int  # DATA or POSITION_DELETES
    partition: tuple  # the Iceberg partition values, in partition-spec order
    record_count: int
    size: int
    buckets: tuple[int, int] | None = None  # the lowest and highest _bucket of a data file's rows
    sequence_number: int | None = None  # the data sequence number (None: not known, e.g. not committed yet)
    batches: tuple[int, int] | None = None  # a changelog file's lowest and highest _batch_id
    data_file: Any = field(default=None, compare=False, repr=False)  # pyiceberg's DataFile, when read by it
    # The sort order its writer declared (Iceberg's sort_order_id) and the snapshot that added it, when read
    # through pyiceberg: whether another writer may have left it out of changelake's order (engine/compact.py).
    sort_order_id: int | None = None
    added_by: int | None = None
    # Its columns' lower bounds as its manifest entry has them (field id -> Iceberg's single-value bytes), where
    # read: a read that wants the smallest keys opens only the files that may hold one (storage/fastread.py).
    lower_bounds: dict[int, bytes] | None = field(default=None, compare=False, repr=False)

    @property
    def is_delete(self) -> bool:
        return self.content == POSITION_DELETES

    def holds(self, bucket: int) -> bool:
        """Whether this data file may hold rows of ``bucket`` (unknown bounds: it may)."""
        return self.buckets is None or self.buckets[0] <= bucket <= self.buckets[1]

    @property
    def single_bucket(self) -> bool:
        return self.buckets is not None and self.buckets[0] == self.buckets[1]


@dataclass(frozen=True)
class Layout:
    """Where a table's rows go: its Iceberg identity partition columns, in spec order (the spec's partition
    keys, then ``_bucket`` for a table partitioned by bucket)."""

    partition_columns: tuple[str, ...]

    @property
    def bucket_partitioned(self) -> bool:
        return BUCKET_COLUMN in self.partition_columns

    def partition_of(self, values: tuple, bucket: int) -> tuple:
        """The Iceberg partition of a bucket's rows: its partition key values (and the bucket, when the table
        is partitioned by it)."""
        return (*values, bucket) if self.bucket_partitioned else tuple(values)

    def key_values(self, partition: tuple) -> tuple:
        """The partition key values of an Iceberg partition tuple (without the bucket)."""
        return tuple(v for c, v in zip(self.partition_columns, partition, strict=True) if c != BUCKET_COLUMN)

    def buckets_of(self, partition: tuple, lower: Any, upper: Any) -> tuple[int, int] | None:
        """A data file's bucket range: its partition value, else its ``_bucket`` bounds (None: unknown)."""
        if self.bucket_partitioned:
            b = partition[self.partition_columns.index(BUCKET_COLUMN)]
            return (b, b)
        if lower is None or upper is None:
            return None
        return (lower, upper)


def int_bound(value: bytes | None) -> int | None:
    """An Iceberg single-value serialization of an int (4 bytes) or long (8 bytes), little-endian."""
    if value is None:
        return None
    return struct.unpack("<i" if len(value) == 4 else "<q", value)[0]


def int_bounds(lower: dict, upper: dict, field_id) -> tuple[int, int] | None:
    """A file's lowest and highest value of an int/long column from its manifest bounds (None: not recorded)."""
    low, high = int_bound(lower.get(field_id)), int_bound(upper.get(field_id))
    return None if low is None or high is None else (low, high)


# --- position-delete files ----------------------------------------------------------------------------------
def side_location(location: str) -> str:
    """Where changelake keeps the files of the table at ``location`` that no Iceberg metadata names (changelog
    manifests, dead letters, the batch history's chunks): beside the table's location, not under it, since
    Iceberg's own ``remove_orphan_files`` deletes every file under a table's location that its metadata does
    not reference (``<ns>/t`` -> ``<ns>/.changelake/t``; no table name starts with a dot). Tables keep the
    side files they wrote under their location before: their summaries name each by its full path."""
    parent, _, name = location.rstrip("/").rpartition("/")
    return f"{parent}/.changelake/{name}"


def delete_stats(table: pa.Table) -> dict[str, Any]:
    """What an Iceberg manifest records of a position-delete file's rows: count and the bounds of its two
    columns (full paths: readers match a delete file to a data file by its path bounds)."""
    if not table.num_rows:
        return {"records": 0}
    paths = table.column("file_path")
    bounds = pc.min_max(table.column("pos"))
    return {
        "records": table.num_rows,
        "path_lower": paths[0].as_py(),  # sorted by path
        "path_upper": paths[-1].as_py(),
        "pos_lower": bounds["min"].as_py(),
        "pos_upper": bounds["max"].as_py(),
    }


def write_position_deletes(sink, table: pa.Table, compression: str = "zstd") -> None:
    """Write a position-delete file (Parquet, the spec's field ids, both columns required), its rows sorted
    by path and position."""
    pq.write_table(
        table.cast(POSITION_DELETE_SCHEMA),
        sink,
        compression=compression,
        use_dictionary=["file_path"],
        column_encoding={"pos": "DELTA_BINARY_PACKED"},
    )


def read_position_deletes(source) -> dict[str, pa.Array]:
    """A position-delete file's positions per data file path (int64 arrays). pyarrow only: the CLI's read
    commands run without numpy."""
    # The paths as a dictionary (as Parquet stores them): a delete file names a few data files, each in a
    # long run of rows, and reading them as strings made every row's ~150-byte copy of its path (30 MB and
    # ~100 ms for a 200,000-row delete file, most of a cold scan --limit 10's reading).
    parquet = pq.ParquetFile(source, read_dictionary=["file_path"])
    table = parquet.read(columns=["file_path", "pos"], use_threads=False).unify_dictionaries()
    if not table.num_rows:
        return {}
    paths = table.column("file_path").combine_chunks()
    names = None
    if pa.types.is_dictionary(paths.type):
        paths, names = paths.indices, paths.dictionary.to_pylist()
    pos = table.column("pos").combine_chunks()
    # The spec sorts the rows by path: one run per data file.
    runs = pc.run_end_encode(paths)
    out: dict[str, pa.Array] = {}
    start = 0
    values = runs.values.to_pylist()
    for value, end in zip(values, runs.run_ends.to_pylist(), strict=True):
        path = value if names is None else names[value]
        part = pos.slice(start, end - start)
        out[path] = pa.concat_arrays([out[path], part]) if path in out else part
        start = end
    return out


def check_stored_types(table: str, spec: TableSpec, column_types: Mapping[str, str]) -> None:
    """Refuse a table whose nanosecond timestamp columns are not stored as nanoseconds (``column_types``:
    column -> Iceberg type name, as the table's schema has it).

    Before changelake kept TIMESTAMP(7..9)/TIMESTAMP_LTZ(7..9) exactly, they were Iceberg ``timestamp``
    columns of microseconds, bucketed by the microsecond value: reading them as nanoseconds would be off by a
    factor of 1000 and a lookup would hash to another bucket, so such a table is refused, saying how to go on.
    The one check for writes (:mod:`changelake.storage.iceberg`) and reads (:mod:`changelake.storage.fastread`).
    """
    for c in spec.columns:
        stored = column_types.get(c.name)
        if c.type.is_nanos and stored is not None and stored != "long":  # nanoseconds are kept in a long
            raise ChangelakeError(
                f"Table {table}: column '{c.name}' is {c.type} but stored as {stored} (microseconds): the table "
                "was created before changelake kept TIMESTAMP(7..9)/TIMESTAMP_LTZ(7..9) to the nanosecond, and "
                "its rows were bucketed by the microsecond values. Recreate the table (drop it, create it, apply "
                "its batches again) to keep nanoseconds"
            )
