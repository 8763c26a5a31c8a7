"""Spark's xxhash64 over whole Arrow columns (numpy): the bucket of every record, computed where it is decoded.

The column form of :func:`changelake.bucketing.spark_xxhash64`, checked against it in tests/test_bucketing.py.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from changelake.bucketing import SEED, hash_value
from changelake.spec import TableSpec

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
    out = [hash_value(v, dtype, int(s)) for v, s in zip(array.to_pylist(), seed.tolist(), strict=True)]
    return np.array(out, np.uint64)


def xxhash64_columns(columns: list[pa.Array], dtypes: list) -> np.ndarray:
    """Spark's ``xxhash64(c1, c2, ...)`` of every row of storage-typed Arrow columns, as signed int64."""
    n = len(columns[0]) if columns else 0
    h = np.full(n, SEED, np.uint64)
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


__all__ = ["bucket_ids", "xxhash64_columns"]
