"""Where a key lives: Spark's xxhash64 over storage values, the bucket of a key, its partition value.

One package for both forms of the hash, so every path buckets a key the same way: :func:`bucket_of` (one key,
plain Python: lookups; this module) and :func:`bucket_ids` (whole Arrow columns in numpy: the decode tasks;
:mod:`changelake.bucketing.columns`, imported only when asked for, so a lookup never loads numpy). Both compute
``pmod(xxhash64(bucket key columns), bucket.num)`` as :func:`changelake.storage.sparkread.bucket_expr` does in
Spark; the one-value form is checked against Spark in tests/storage/test_fastread.py and the column form
against the one-value form in tests/test_bucketing.py.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import struct
from typing import Any

from changelake.spec import TableSpec
from changelake.types import DataType

# --- Spark's xxhash64, for the bucket of a key --------------------------------------------------------------
# org.apache.spark.sql.catalyst.expressions.XXH64 and XxHash64's per-type rules (seed 42; a null column
# leaves the hash unchanged), over the storage types. Verified against Spark in tests/storage/test_fastread.py.
_P1, _P2, _P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
_P4, _P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5
_M = (1 << 64) - 1
SEED = 42
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EXACT = decimal.Context(
    prec=80
)  # scaling a DECIMAL(38,s) without rounding (the default context keeps 28 digits)


def _rotl1(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def _fmix1(h: int) -> int:
    h ^= h >> 33
    h = (h * _P2) & _M
    h ^= h >> 29
    h = (h * _P3) & _M
    return h ^ (h >> 32)


def _hash_int1(value: int, seed: int) -> int:
    h = (seed + _P5 + 4) & _M
    h ^= ((value & 0xFFFFFFFF) * _P1) & _M
    return _fmix1((_rotl1(h, 23) * _P2 + _P3) & _M)


def _hash_long1(value: int, seed: int) -> int:
    h = (seed + _P5 + 8) & _M
    h ^= (_rotl1(((value & _M) * _P2) & _M, 31) * _P1) & _M
    return _fmix1((_rotl1(h, 27) * _P1 + _P4) & _M)


def _hash_bytes1(data: bytes, seed: int) -> int:
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed & _M, (seed - _P1) & _M]
        while i <= n - 32:
            for j, word in enumerate(struct.unpack_from("<4Q", data, i)):
                v[j] = (_rotl1((v[j] + word * _P2) & _M, 31) * _P1) & _M
            i += 32
        h = (_rotl1(v[0], 1) + _rotl1(v[1], 7) + _rotl1(v[2], 12) + _rotl1(v[3], 18)) & _M
        for lane in v:
            h = ((h ^ ((_rotl1((lane * _P2) & _M, 31) * _P1) & _M)) * _P1 + _P4) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i <= n - 8:
        (word,) = struct.unpack_from("<Q", data, i)
        h ^= (_rotl1((word * _P2) & _M, 31) * _P1) & _M
        h = (_rotl1(h, 27) * _P1 + _P4) & _M
        i += 8
    if i + 4 <= n:
        (word,) = struct.unpack_from("<I", data, i)
        h ^= (word * _P1) & _M
        h = (_rotl1(h, 23) * _P2 + _P3) & _M
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _M
        h = (_rotl1(h, 11) * _P1) & _M
        i += 1
    return _fmix1(h)


def _micros(value: dt.datetime) -> int:
    delta = value - (_EPOCH_UTC if value.tzinfo is not None else _EPOCH)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def hash_value(value: Any, dtype: DataType, seed: int) -> int:
    """One column's step of Spark's xxhash64, for a storage value of ``dtype``."""
    kind = dtype.storage_kind
    if value is None:
        return seed
    if kind == "boolean":
        return _hash_int1(1 if value else 0, seed)
    if kind == "int":
        return _hash_int1(value, seed)
    if kind == "long":
        return _hash_long1(value, seed)
    if kind == "date":
        return _hash_int1((value - _EPOCH.date()).days, seed)
    if kind in ("timestamp", "timestamptz"):
        return _hash_long1(_micros(value), seed)
    if kind == "float":
        bits = 0x7FC00000 if math.isnan(value) else struct.unpack("<i", struct.pack("<f", value))[0]
        return _hash_int1(0 if value == 0.0 else bits, seed)
    if kind == "double":
        bits = 0x7FF8000000000000 if math.isnan(value) else struct.unpack("<q", struct.pack("<d", value))[0]
        return _hash_long1(0 if value == 0.0 else bits, seed)
    if kind == "decimal":
        precision, scale = dtype.decimal_shape
        unscaled = int(decimal.Decimal(value).scaleb(scale, context=_EXACT))
        if precision <= 18:
            return _hash_long1(unscaled, seed)
        # java.math.BigInteger.toByteArray: minimal big-endian two's complement
        bits = unscaled.bit_length() if unscaled >= 0 else (-unscaled - 1).bit_length()
        return _hash_bytes1(unscaled.to_bytes(bits // 8 + 1, "big", signed=True), seed)
    if kind == "string":
        return _hash_bytes1(value.encode("utf-8"), seed)
    if kind == "binary":
        return _hash_bytes1(bytes(value), seed)
    raise AssertionError(kind)


def spark_xxhash64(values: list[Any], dtypes: list[DataType]) -> int:
    """Spark's ``xxhash64(c1, c2, ...)`` (a signed long) of storage values of the given types."""
    h = SEED
    for value, dtype in zip(values, dtypes, strict=True):
        h = hash_value(value, dtype, h)
    return h - (1 << 64) if h >> 63 else h


def bucket_of(spec: TableSpec, values: dict[str, Any]) -> int:
    """The bucket the apply puts a key in: ``pmod(xxhash64(bucket key columns), bucket.num)`` (see
    :func:`changelake.storage.sparkread.bucket_expr`), from storage values of the bucket key columns."""
    h = spark_xxhash64([values[k] for k in spec.bucket_key], [spec.column(k).type for k in spec.bucket_key])
    return h % spec.bucket_num  # Python's % of a positive modulus is Spark's pmod


def partition_value(value: Any) -> Any:
    """A storage value as Iceberg keeps it in an identity partition (as ``tables.iceberg_partition_value``)."""
    if isinstance(value, dt.datetime):
        return _micros(value if value.tzinfo is None else value.astimezone(dt.UTC))
    if isinstance(value, dt.date):
        return (value - _EPOCH.date()).days
    if isinstance(value, bytearray):
        return bytes(value)
    return value


__all__ = ["bucket_ids", "bucket_of", "hash_value", "partition_value", "spark_xxhash64", "xxhash64_columns"]


def __getattr__(name: str) -> Any:
    # The column form by its name here too, loaded (with numpy) on first use.
    if name in ("bucket_ids", "xxhash64_columns"):
        from changelake.bucketing import columns

        return getattr(columns, name)
    raise AttributeError(name)
