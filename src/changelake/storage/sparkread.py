"""Spark access to the rows of a PK table and its changelog (reads plan files with pyiceberg, read natively)."""

from __future__ import annotations

import datetime as dt

from changelake.spec import TableSpec
from changelake.storage.iceberg import Storage


def bucket_expr(spec: TableSpec):
    """``bucket = pmod(xxhash64(<bucket key columns>), bucket.num)`` over the storage types.

    Spark's xxhash64 (seed 42) is stable across JVMs, machines and Spark versions, so every process —
    local or on a cluster — assigns a key to the same bucket.
    """
    from pyspark.sql import functions as F

    return F.pmod(F.xxhash64(*[F.col(k) for k in spec.bucket_key]), F.lit(spec.bucket_num)).cast("int")


def storage_struct(spec: TableSpec, with_bucket: bool = True):
    from pyspark.sql import types as T

    fields = [T.StructField(c.name, c.type.spark_type(), True) for c in spec.columns]
    if with_bucket:
        fields.append(T.StructField("_bucket", T.IntegerType(), True))
    return T.StructType(fields)


def changelog_struct(spec: TableSpec):
    from pyspark.sql import types as T

    return T.StructType(
        storage_struct(spec, with_bucket=False).fields
        + [
            T.StructField("_change_type", T.StringType(), True),
            T.StructField("_batch_id", T.LongType(), True),
            T.StructField("_bucket", T.IntegerType(), True),
            T.StructField("_log_offset", T.LongType(), True),
            T.StructField("_commit_timestamp", T.TimestampType(), True),
        ]
    )


def read_parquet(spark, schema, paths: list[str]):
    if not paths:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(*paths)


def to_view_types(spec: TableSpec, df):
    """Show stored columns as their declared types: TINYINT/SMALLINT cast back; a nanosecond timestamp
    (stored as a long) as a microsecond TIMESTAMP plus ``<col>__nanos`` with the exact value
    (:meth:`changelake.types.DataType.view_spark_columns`)."""
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    out: list[Column] = []
    for name in df.columns:
        col = next((c for c in spec.columns if c.name == name), None)
        out += [F.col(name)] if col is None else col.type.view_spark_columns(name)
    return df.select(*out)


def iceberg_partition_value(value):
    """Spark's Python value of an identity partition column, as pyiceberg keeps it in a DataFile."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return int((value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) / dt.timedelta(microseconds=1))
    if isinstance(value, dt.date):
        return (value - dt.date(1970, 1, 1)).days
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def rows_df(spark, storage: Storage, spec: TableSpec, snapshot_id: int | None = None, files=None):
    """Rows of the PK table (storage types, with ``_bucket``) at a snapshot, or of the given files
    (:class:`changelake.storage.files.TableFile`): the data files' rows less those their position-delete
    files name (:func:`without_deleted`)."""
    table = storage.pk_table(spec)
    if files is None:
        files = storage.table_files(table, snapshot_id)
    data = read_parquet(spark, storage_struct(spec), [f.path for f in files if not f.is_delete])
    return without_deleted(spark, data, [f.path for f in files if f.is_delete])


def without_deleted(spark, data, delete_paths: list[str]):
    """``data`` (read from Parquet files) without the rows that Iceberg position-delete files name: an anti-join
    on (file, row position), Spark's Parquet reader giving both as ``_metadata.file_path`` and
    ``_metadata.row_index`` (no Iceberg runtime needed). Spark writes a local path as ``file:/x`` where Iceberg
    metadata holds ``file:///x``: both sides are compared in one form."""
    if not delete_paths:
        return data
    from pyspark.sql import functions as F

    deleted = (
        spark.read.parquet(*delete_paths)
        .select(_same_path(F.col("file_path")).alias("_deleted_file"), F.col("pos").alias("_deleted_pos"))
        .distinct()
    )
    located = data.select(
        "*",
        _same_path(F.col("_metadata.file_path")).alias("_row_file"),
        F.col("_metadata.row_index").alias("_row_pos"),
    )
    condition = (F.col("_row_file") == F.col("_deleted_file")) & (F.col("_row_pos") == F.col("_deleted_pos"))
    return located.join(deleted, condition, "left_anti").drop("_row_file", "_row_pos")


def _same_path(column):
    """A file location in one form: ``file:`` URIs as plain absolute paths."""
    from pyspark.sql import functions as F

    return F.regexp_replace(column, r"^file:/+", "/")


def changelog_df(spark, storage: Storage, spec: TableSpec):
    table = storage.changelog_table(spec)
    return read_parquet(spark, changelog_struct(spec), [f.path for f in storage.data_files(table)])
