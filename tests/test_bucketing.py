"""The decode tasks bucket records with a vectorised Spark xxhash64 (``bucketing.bucket_ids``); it must equal the
one-value reference (``bucketing.spark_xxhash64``, itself checked against Spark in test_fastread.py) on every
storage type, nulls and multi-column keys included. No Spark here."""

from __future__ import annotations

import datetime as dt
import decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changelake.bucketing import bucket_ids, bucket_of, spark_xxhash64, xxhash64_columns
from changelake.spec import TableSpec

TYPES = {
    "BOOLEAN": st.booleans(),
    "TINYINT": st.integers(-128, 127),
    "SMALLINT": st.integers(-32768, 32767),
    "INT": st.integers(-(2**31), 2**31 - 1),
    "BIGINT": st.integers(-(2**63), 2**63 - 1),
    "FLOAT": st.floats(width=32),
    "DOUBLE": st.floats(),
    "DECIMAL(10,2)": st.decimals(min_value=-(10**8) + 1, max_value=10**8 - 1, places=2),
    "DECIMAL(18,0)": st.decimals(min_value=-(10**18) + 1, max_value=10**18 - 1, places=0),
    "DECIMAL(19,4)": st.decimals(min_value=-(10**15) + 1, max_value=10**15 - 1, places=4),
    "DECIMAL(38,10)": st.decimals(min_value=-(10**28) + 1, max_value=10**28 - 1, places=10),
    "STRING": st.text(max_size=80),
    "CHAR(5)": st.text(max_size=5),
    "BYTES": st.binary(max_size=80),
    "DATE": st.dates(),
    "TIME": st.times().map(lambda t: t.strftime("%H:%M:%S.%f")),
    "TIMESTAMP(6)": st.datetimes(),
    "TIMESTAMP_LTZ(6)": st.datetimes(timezones=st.just(dt.UTC)),
}
EDGES = {
    "FLOAT": [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1.5],
    "DOUBLE": [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 5e-324],
    "DECIMAL(38,10)": [
        decimal.Decimal("0"),
        decimal.Decimal("-1E-10"),
        decimal.Decimal("9999999999999999999999999999.9999999999"),
        decimal.Decimal("-9999999999999999999999999999.9999999999"),
        decimal.Decimal("-12.8"),
        decimal.Decimal("12.7"),
        decimal.Decimal("-0.0000000128"),
    ],
    "DECIMAL(19,4)": [decimal.Decimal("-922337203685477.5808"), decimal.Decimal("922337203685477.5807")],
    "STRING": [
        "",
        "a",
        "é",
        "héllo wörld ✓",
        "日本語テキスト",
        "🙂" * 9,
        "x" * 31,
        "y" * 32,
        "z" * 33,
        "w" * 200,
    ],
    "BYTES": [b"", b"\x00", bytes(range(256)), b"\xff" * 64],
    "BIGINT": [-(2**63), 2**63 - 1, -1, 0],
    "INT": [-(2**31), 2**31 - 1, -1],
    "DATE": [dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1969, 12, 31)],
    "TIMESTAMP(6)": [dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)],
}


def _spec(
    columns: dict[str, str], bucket_key: list[str], partition_keys: list[str] | None = None, n: int = 7
):
    return TableSpec.from_dict(
        {
            "name": "h.t",
            "columns": [{"name": name, "type": t} for name, t in columns.items()],
            "primary_key": list(columns),
            "partition_keys": partition_keys or [],
            "bucket_key": bucket_key,
            "options": {"bucket.num": n},
        }
    )


def _reference(values: list, type_name: str) -> list[int]:
    spec = _spec({"c": type_name}, ["c"])
    dtype = spec.column("c").type
    return [spark_xxhash64([v], [dtype]) for v in values]


def _vectorised(values: list, type_name: str, offset: int = 0) -> list[int]:
    spec = _spec({"c": type_name}, ["c"])
    dtype = spec.column("c").type
    storage = [dtype.decode_json(v) if type_name == "TIME" and v is not None else v for v in values]
    array = pa.array([None] * offset + storage, dtype.arrow_type()).slice(offset)  # a sliced array too
    return xxhash64_columns([array], [dtype]).tolist()


@pytest.mark.parametrize("type_name", sorted(EDGES))
def test_edge_values_and_nulls_hash_as_the_reference(type_name):
    values = [*EDGES[type_name], None]
    assert _vectorised(values, type_name) == _reference(values, type_name)
    assert _vectorised(values, type_name, offset=3) == _reference(values, type_name)


@pytest.mark.parametrize("type_name", sorted(TYPES))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_key_type_hashes_as_the_reference(type_name, data):
    values = data.draw(st.lists(st.none() | TYPES[type_name], max_size=40))
    if type_name == "TIME":
        spec = _spec({"c": "TIME"}, ["c"])
        values = [None if v is None else spec.column("c").type.decode_json(v) for v in values]
    assert _vectorised(values, type_name) == _reference(values, type_name)


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.none() | TYPES["STRING"], TYPES["BIGINT"], st.none() | TYPES["DECIMAL(38,10)"], TYPES["DATE"]
        ),
        min_size=1,
        max_size=30,
    ),
    n=st.integers(1, 300),
)
def test_buckets_of_a_multi_column_key_are_the_lookups_buckets(rows, n):
    spec = _spec(
        {"s": "STRING", "b": "BIGINT", "d": "DECIMAL(38,10)", "day": "DATE"}, ["s", "b", "d"], ["day"], n
    )
    table = pa.table(
        {
            name: pa.array([r[i] for r in rows], spec.column(name).type.arrow_type())
            for i, name in enumerate("s b d day".split())
        }
    )
    got = bucket_ids(spec, table).tolist()
    want = [bucket_of(spec, {"s": r[0], "b": r[1], "d": r[2]}) for r in rows]
    assert got == want
    assert all(0 <= b < n for b in got)


def test_chunked_columns_and_empty_tables():
    spec = _spec({"k": "STRING"}, ["k"])
    chunked = pa.chunked_array([pa.array(["a", "bb"]), pa.array([], pa.string()), pa.array(["ccc"])])
    assert bucket_ids(spec, pa.table({"k": chunked})).tolist() == [
        bucket_of(spec, {"k": v}) for v in ["a", "bb", "ccc"]
    ]
    assert bucket_ids(spec, pa.table({"k": pa.array([], pa.string())})).tolist() == []
    assert (
        xxhash64_columns([pa.array(np.arange(3))], [_spec({"k": "BIGINT"}, ["k"]).column("k").type]).dtype
        == np.int64
    )


@pytest.mark.parametrize("n", [1, 2, 32, 256, 3, 7, 100])
@pytest.mark.parametrize("type_name", ["INT", "BIGINT"])
def test_bucket_counts_that_are_powers_of_two_or_not(n, type_name):
    """A power-of-two bucket count takes the hash's low bits instead of a division: the same buckets as the
    lookups' reference, for hashes of both signs, and the key column is left as it was."""
    lo, hi = (-(2**31), 2**31 - 1) if type_name == "INT" else (-(2**63), 2**63 - 1)
    values = [lo, hi, 0, -1, 1, *np.random.default_rng(n).integers(lo, hi, 500, endpoint=True).tolist()]
    spec = _spec({"k": type_name}, ["k"], n=n)
    column = pa.array(values, spec.column("k").type.arrow_type())
    got = bucket_ids(spec, pa.table({"k": column})).tolist()
    assert got == [bucket_of(spec, {"k": v}) for v in values]
    assert {np.sign(h) for h in xxhash64_columns([column], [spec.column("k").type]).tolist()} >= {-1, 1}


def test_the_column_hashes_leave_the_callers_arrays_as_they_were():
    """The hashes work in place on arrays of their own: a caller's writable values and seeds stay unchanged."""
    from changelake.bucketing.columns import _hash_int, _hash_long

    values = np.random.default_rng(3).integers(-(2**63), 2**63 - 1, 1000, dtype=np.int64)
    seeds = np.random.default_rng(4).integers(0, 2**63, 1000, dtype=np.int64).astype(np.uint64)
    kept_values, kept_seeds = values.copy(), seeds.copy()
    for hash_ in (_hash_long, _hash_int):
        first = hash_(values, seeds)
        assert np.array_equal(values, kept_values) and np.array_equal(seeds, kept_seeds)
        assert np.array_equal(hash_(values, seeds), first)
