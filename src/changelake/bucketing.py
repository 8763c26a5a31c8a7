"""Where a key lives: Spark's xxhash64 over storage values, the bucket of a key, its partition value.

One module for both forms of the hash, so every path buckets a key the same way: :func:`bucket_of` (one key,
plain Python: lookups) and :func:`bucket_ids` (whole Arrow columns in numpy: the decode tasks). Both compute
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

import numpy as np
import pyarrow as pa

from changelake.spec import TableSpec
from changelake.types import DataType

# --- Spark's xxhash64, for the bucket of a key --------------------------------------------------------------
# org.apache.spark.sql.catalyst.expressions.XXH64 and XxHash64's per-type rules (seed 42; a null column
# leaves the hash unchanged), over the storage types. Verified against Spark in tests/storage/test_fastread.py.
_P1, _P2, _P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
_P4, _P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5
_M = (1 << 64) - 1
_SEED = 42
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


def _hash_value(value: Any, dtype: DataType, seed: int) -> int:
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
    h = _SEED
    for value, dtype in zip(values, dtypes, strict=True):
        h = _hash_value(value, dtype, h)
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


# --- Spark's xxhash64 over Arrow columns: the bucket of every record, computed where it is decoded -------------
# The same function as :func:`changelake.storage.sparkread.bucket_expr` (Spark's ``pmod(xxhash64(bucket key), n)``) and
# :func:`changelake.storage.fastread.bucket_of` (its one-value reference), over whole columns with numpy uint64
# arithmetic (which wraps around as Java's long does). A column type it does not know is hashed value by value
# with the reference.
_N1, _N2, _N3 = np.uint64(0x9E3779B185EBCA87), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9)
_N4, _N5 = np.uint64(0x85EBCA77C2B2AE63), np.uint64(0x27D4EB2F165667C5)


def _rotl(x: np.ndarray, r: int, tmp: np.ndarray | None = None) -> np.ndarray:
    """``x`` rotated left by ``r`` bits; with ``tmp`` (an array of x's shape) in place, into ``x``."""
    if tmp is None:
        return (x << np.uint64(r)) | (x >> np.uint64(64 - r))
    np.right_shift(x, np.uint64(64 - r), out=tmp)
    np.left_shift(x, np.uint64(r), out=x)
    return np.bitwise_or(x, tmp, out=x)


def _fmix(h: np.ndarray, tmp: np.ndarray | None = None) -> np.ndarray:
    """XXH64's avalanche; with ``tmp`` in place, into ``h``."""
    if tmp is None:
        tmp = np.empty_like(h)
        h = h.copy()
    for shift, prime in ((33, _N2), (29, _N3), (32, None)):
        np.right_shift(h, np.uint64(shift), out=tmp)
        np.bitwise_xor(h, tmp, out=h)
        if prime is not None:
            np.multiply(h, prime, out=h)
    return h


# The column hashes below work in place on fresh arrays (a million values: 5 ms instead of 13): every
# temporary of the plain expressions is a pass over memory.
def _hash_int(value: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """XXH64.hashInt of 32-bit values (any integer dtype; the low 32 bits count)."""
    v = value.astype(np.int64).astype(np.uint64)  # a fresh array
    np.bitwise_and(v, np.uint64(0xFFFFFFFF), out=v)
    np.multiply(v, _N1, out=v)
    h = np.add(seed, _N5 + np.uint64(4))
    np.bitwise_xor(h, v, out=h)
    _rotl(h, 23, tmp=v)
    np.multiply(h, _N2, out=h)
    np.add(h, _N3, out=h)
    return _fmix(h, tmp=v)


def _hash_long(value: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """XXH64.hashLong of 64-bit values."""
    v = value.astype(np.int64).view(np.uint64)  # a fresh array (astype copies): the caller's values stay
    tmp = np.empty_like(v)
    np.multiply(v, _N2, out=v)
    _rotl(v, 31, tmp)
    np.multiply(v, _N1, out=v)
    h = np.add(seed, _N5 + np.uint64(8))
    np.bitwise_xor(h, v, out=h)
    _rotl(h, 27, tmp)
    np.multiply(h, _N1, out=h)
    np.add(h, _N4, out=h)
    return _fmix(h, tmp)


class _Bytes:
    """A byte buffer read as little-endian words at any offset: two aligned 64-bit loads and shifts (the
    buffer is padded, so a word never runs past it)."""

    def __init__(self, data: np.ndarray):
        size = (len(data) // 8 + 2) * 8
        padded = np.zeros(size, np.uint8)
        padded[: len(data)] = data
        self.data = padded
        self.words = padded.view("<u8")

    def word64(self, pos: np.ndarray) -> np.ndarray:
        index, shift = pos >> 3, ((pos & 7) * 8).astype(np.uint64)
        low, high = self.words[index], self.words[index + 1]
        # (high << 64 - shift) is undefined for shift 0 in numpy: mask it off instead.
        return (low >> shift) | np.where(shift > 0, high << (np.uint64(64) - shift), np.uint64(0))

    def word32(self, pos: np.ndarray) -> np.ndarray:
        return self.word64(pos) & np.uint64(0xFFFFFFFF)


def _hash_bytes(data: _Bytes, starts: np.ndarray, lengths: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """XXH64.hashUnsafeBytes of each ``data[start:start+length]``: 32-byte stripes, then 8-byte words, a
    4-byte word and single bytes, each step over all the values that still have that much left."""
    n = len(starts)
    h = seed + _N5
    stripes = lengths // 32
    long_rows = np.flatnonzero(stripes > 0)
    if len(long_rows):
        s = seed[long_rows]
        lanes = [s + _N1 + _N2, s + _N2, s.copy(), s - _N1]
        base, count = starts[long_rows], stripes[long_rows]
        for k in range(int(count.max())):
            active = np.flatnonzero(count > k)
            at = base[active] + 32 * k
            for j in range(4):
                lane = lanes[j]
                lane[active] = _rotl(lane[active] + data.word64(at + 8 * j) * _N2, 31) * _N1
        v1, v2, v3, v4 = lanes
        hl = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        for lane in lanes:
            hl = (hl ^ (_rotl(lane * _N2, 31) * _N1)) * _N1 + _N4
        h[long_rows] = hl
    h = h + lengths.astype(np.uint64)
    at = stripes * 32
    while True:  # at most three 8-byte words are left after the stripes
        rows = np.flatnonzero(at + 8 <= lengths)
        if not len(rows):
            break
        x = h[rows] ^ (_rotl(data.word64(starts[rows] + at[rows]) * _N2, 31) * _N1)
        h[rows] = _rotl(x, 27) * _N1 + _N4
        at[rows] += 8
    rows = np.flatnonzero(at + 4 <= lengths)
    if len(rows):
        x = h[rows] ^ (data.word32(starts[rows] + at[rows]) * _N1)
        h[rows] = _rotl(x, 23) * _N2 + _N3
        at[rows] += 4
    for _ in range(3):
        rows = np.flatnonzero(at < lengths)
        if not len(rows):
            break
        x = h[rows] ^ (data.data[starts[rows] + at[rows]].astype(np.uint64) * _N5)
        h[rows] = _rotl(x, 11) * _N1
        at[rows] += 1
    assert len(h) == n
    return _fmix(h)


def _binary_parts(array: pa.Array) -> tuple[_Bytes, np.ndarray, np.ndarray]:
    """The bytes, start offsets and lengths of a string or binary array."""
    array = array.cast(pa.large_binary())
    offsets = np.frombuffer(array.buffers()[1], np.int64)[array.offset : array.offset + len(array) + 1]
    data = array.buffers()[2]
    raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    return _Bytes(raw), offsets[:-1].copy(), np.diff(offsets)


def _decimal_words(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The unscaled 128-bit values of a decimal128 array as (low, high) 64-bit words."""
    words = np.frombuffer(array.buffers()[1], "<u8").reshape(-1, 2)[array.offset : array.offset + len(array)]
    return words[:, 0].copy(), words[:, 1].copy()


def _bit_length(x: np.ndarray) -> np.ndarray:
    """Bits of each uint64 (0 for 0), by binary search."""
    bits = np.zeros(len(x), np.int64)
    for shift in (32, 16, 8, 4, 2, 1):
        big = (x >> np.uint64(shift)) > 0
        bits[big] += shift
        x = np.where(big, x >> np.uint64(shift), x)
    return bits + (x > 0)


def _hash_big_decimal(array: pa.Array, seed: np.ndarray) -> np.ndarray:
    """A DECIMAL of precision > 18: XXH64 of java.math.BigInteger.toByteArray() of the unscaled value (the
    minimal big-endian two's complement)."""
    lo, hi = _decimal_words(array)
    negative = (hi >> np.uint64(63)).astype(bool)
    mlo, mhi = np.where(negative, ~lo, lo), np.where(negative, ~hi, hi)
    bits = np.where(mhi > 0, 64 + _bit_length(mhi), _bit_length(mlo))
    lengths = bits // 8 + 1
    big_endian = np.empty((len(lo), 16), np.uint8)
    big_endian[:, :8] = hi.astype(">u8").view(np.uint8).reshape(-1, 8)
    big_endian[:, 8:] = lo.astype(">u8").view(np.uint8).reshape(-1, 8)
    starts = np.arange(len(lo), dtype=np.int64) * 16 + 16 - lengths
    return _hash_bytes(_Bytes(big_endian.ravel()), starts, lengths, seed)


def _hash_column(array: pa.Array, dtype, seed: np.ndarray) -> np.ndarray:
    """One column's step of Spark's xxhash64 (storage values of ``dtype``); nulls leave the hash as it is."""
    kind, t = dtype.storage_kind, array.type
    valid = array.is_valid().to_numpy(zero_copy_only=False)
    if kind == "boolean" and pa.types.is_boolean(t):
        hashed = _hash_int(array.fill_null(False).to_numpy(zero_copy_only=False).astype(np.int64), seed)
    elif kind in ("int", "date") and (pa.types.is_int32(t) or pa.types.is_date32(t)):
        hashed = _hash_int(array.cast(pa.int32()).fill_null(0).to_numpy(), seed)
    elif kind == "long" and pa.types.is_int64(t):
        hashed = _hash_long(array.fill_null(0).to_numpy(), seed)
    elif kind in ("timestamp", "timestamptz") and pa.types.is_timestamp(t) and t.unit == "us":
        hashed = _hash_long(array.cast(pa.int64()).fill_null(0).to_numpy(), seed)
    elif kind == "float" and pa.types.is_float32(t):
        f = array.fill_null(0.0).to_numpy(zero_copy_only=False)
        bits = np.where(np.isnan(f), np.int32(0x7FC00000), np.where(f == 0, 0, f.view(np.int32)))
        hashed = _hash_int(bits, seed)
    elif kind == "double" and pa.types.is_float64(t):
        f = array.fill_null(0.0).to_numpy(zero_copy_only=False)
        nan = np.int64(0x7FF8000000000000)
        bits = np.where(np.isnan(f), nan, np.where(f == 0, np.int64(0), f.view(np.int64)))
        hashed = _hash_long(bits, seed)
    elif kind == "decimal" and pa.types.is_decimal128(t):
        hashed = (
            _hash_long(_decimal_words(array)[0], seed)
            if t.precision <= 18
            else _hash_big_decimal(array, seed)
        )
    elif kind in ("string", "binary") and (pa.types.is_string(t) or pa.types.is_binary(t)):
        hashed = _hash_bytes(*_binary_parts(array), seed)
    else:
        return _hash_each(array, dtype, seed)
    return np.where(valid, hashed, seed)


def _hash_each(array: pa.Array, dtype, seed: np.ndarray) -> np.ndarray:
    """The reference, value by value: for a storage type the vectorised steps do not cover."""
    out = [_hash_value(v, dtype, int(s)) for v, s in zip(array.to_pylist(), seed.tolist(), strict=True)]
    return np.array(out, np.uint64)


def xxhash64_columns(columns: list[pa.Array], dtypes: list) -> np.ndarray:
    """Spark's ``xxhash64(c1, c2, ...)`` of every row of storage-typed Arrow columns, as signed int64."""
    n = len(columns[0]) if columns else 0
    h = np.full(n, _SEED, np.uint64)
    for array, dtype in zip(columns, dtypes, strict=True):
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks() if array.num_chunks else pa.array([], array.type)
        h = _hash_column(array, dtype, h)
    return h.view(np.int64)


def bucket_ids(spec: TableSpec, records: pa.Table) -> np.ndarray:
    """The bucket of every record: ``pmod(xxhash64(bucket key columns), bucket.num)`` (int32), as
    :func:`changelake.storage.sparkread.bucket_expr` computes it in Spark."""
    keys = list(spec.bucket_key)
    h = xxhash64_columns([records.column(k) for k in keys], [spec.column(k).type for k in keys])
    n = spec.bucket_num
    if n & (n - 1) == 0:  # a power of two: pmod is the low bits (two's complement), without a division
        return np.bitwise_and(h, np.int64(n - 1)).astype(np.int32)
    return np.mod(h, np.int64(n)).astype(np.int32)  # numpy's mod of a positive n is pmod


__all__ = ["bucket_ids", "bucket_of", "partition_value", "spark_xxhash64", "xxhash64_columns"]
