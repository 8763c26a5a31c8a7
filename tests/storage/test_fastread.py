"""Reads without a JVM (changelake.storage.fastread) return exactly what the Spark reads return.

Spark builds the tables and is the reference side of every comparison; the fast reads run both ways to the
metadata (direct: sqlite3 + JSON + Avro; pyiceberg).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import json
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from changelake.bucketing import bucket_of, spark_xxhash64
from changelake.errors import ChangelakeError
from changelake.inputs.landing import landing_status
from changelake.spec import TableSpec
from changelake.storage import avro, catalog, fastread
from changelake.storage.fastread import FastReader
from changelake.storage.files import TableFile

# Arrow type of a fast read -> Spark's simpleString of the same column in the Spark read.
_SPARK_NAME = {
    pa.bool_(): "boolean",
    pa.int8(): "tinyint",
    pa.int16(): "smallint",
    pa.int32(): "int",
    pa.int64(): "bigint",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.string(): "string",
    pa.binary(): "binary",
    pa.date32(): "date",
    pa.timestamp("us"): "timestamp_ntz",
    pa.timestamp("us", tz="UTC"): "timestamp",
}

HASHED = {
    "BOOLEAN": [True, False],
    "TINYINT": [-128, 0, 127],
    "SMALLINT": [-32768, 7, 32767],
    "INT": [-(2**31), -1, 0, 1, 2**31 - 1],
    "BIGINT": [-(2**63), -1, 0, 42, 2**63 - 1],
    "FLOAT": [0.0, -0.0, 1.5, -3.25e10, float("nan"), float("inf")],
    "DOUBLE": [0.0, -0.0, 0.1, -1e300, float("nan"), float("-inf")],
    "DECIMAL(10,2)": [decimal.Decimal("0.00"), decimal.Decimal("-12.50"), decimal.Decimal("99999999.99")],
    "DECIMAL(38,10)": [
        decimal.Decimal("0E-10"),
        decimal.Decimal("-1.0000000000"),
        decimal.Decimal("1234567890123456789012345678.1234567890"),
        decimal.Decimal("-9999999999999999999999999999.9999999999"),
    ],
    "STRING": ["", "a", "abcd", "héllo wörld ✓", "x" * 31, "y" * 32, "z" * 33, "0123456789" * 10 + "end"],
    "CHAR(3)": ["abc", "é"],
    "BYTES": [b"", b"\x00", b"\xff\x00\x01\x02\x03", bytes(range(70))],
    "DATE": [dt.date(1970, 1, 1), dt.date(1969, 12, 31), dt.date(2024, 2, 29)],
    "TIME": ["00:00:00.000000", "23:59:59.999999"],
    "TIMESTAMP(6)": [dt.datetime(1970, 1, 1), dt.datetime(1969, 12, 31, 23, 59, 59, 999999), dt.datetime(2024, 5, 6, 7, 8, 9, 123456)],
    "TIMESTAMP_LTZ(3)": [dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=dt.UTC), dt.datetime(1960, 1, 1, tzinfo=dt.UTC)],
    # Precision 7..9: stored as nanoseconds since the epoch, hashed as the long they are.
    "TIMESTAMP(9)": [-(2**63), -1, 0, 1_767_268_800_123_456_789, 2**63 - 1],
    "TIMESTAMP_LTZ(7)": [1_767_268_800_123_456_789, -1_000_000_001],
}  # fmt: skip


def _normalized(value):
    """Spark's Python value as the fast read gives it: bytes, and instants timezone-aware in UTC."""
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def _spark_rows(df) -> list[dict]:
    """Rows of a Spark DataFrame with TIMESTAMP (LTZ) values made aware UTC, as the fast read returns them."""
    instants = {name for name, kind in df.dtypes if kind == "timestamp"}
    return [
        {
            k: v.astimezone(dt.UTC) if k in instants and v is not None else _normalized(v)
            for k, v in r.asDict().items()
        }
        for r in df.collect()
    ]


def _spark_name(arrow_type: pa.DataType) -> str:
    if pa.types.is_decimal(arrow_type):
        return f"decimal({arrow_type.precision},{arrow_type.scale})"
    return _SPARK_NAME[arrow_type]


def _assert_same(arrow: pa.Table, df, ordered: bool, key: list[str]) -> None:
    assert [(f.name, _spark_name(f.type)) for f in arrow.schema] == df.dtypes
    fast, spark = arrow.to_pylist(), _spark_rows(df)
    if not ordered:
        spark.sort(key=lambda r: tuple(r[k] for k in key))
        fast.sort(key=lambda r: tuple(r[k] for k in key))
    assert fast == spark


def test_xxhash64_and_buckets_equal_spark(spark):
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from changelake.storage import sparkread

    columns = [{"name": f"c{i}", "type": t} for i, t in enumerate(HASHED)]
    spec = TableSpec.from_dict(
        {
            "name": "h.all",
            "columns": columns,
            "primary_key": [c["name"] for c in columns],
            "options": {"bucket.num": 7},
        }
    )
    width = max(len(v) for v in HASHED.values())
    rows = [tuple(v[i % len(v)] for v in HASHED.values()) for i in range(width)]
    struct = sparkread.storage_struct(spec, with_bucket=False)
    df = spark.createDataFrame(rows, T.StructType(struct.fields))
    names = list(spec.column_names)
    expected = df.select(*[F.xxhash64(n) for n in names], sparkread.bucket_expr(spec)).collect()
    for row, want in zip(rows, expected, strict=True):
        values = dict(zip(names, row, strict=True))
        got = [spark_xxhash64([values[n]], [spec.column(n).type]) for n in names]
        assert list(zip(names, got, strict=True)) == list(zip(names, want[:-1], strict=True))
        assert bucket_of(spec, values) == want[-1]  # every column together, as the apply buckets a key


SPEC = {
    "name": "f.events",
    "columns": [
        {"name": "day", "type": "DATE"},
        {"name": "k", "type": "BIGINT"},
        {"name": "sub", "type": "STRING"},
        {"name": "ti", "type": "TINYINT"},
        {"name": "si", "type": "SMALLINT"},
        {"name": "amount", "type": "DECIMAL(12,2)"},
        {"name": "f", "type": "FLOAT"},
        {"name": "ok", "type": "BOOLEAN"},
        {"name": "raw", "type": "BYTES"},
        {"name": "tm", "type": "TIME"},
        {"name": "ts", "type": "TIMESTAMP(6)"},
        {"name": "at", "type": "TIMESTAMP_LTZ(6)"},
    ],
    "primary_key": ["day", "k", "sub"],
    "partition_keys": ["day"],
    "bucket_key": ["k"],
    "options": {"bucket.num": 3},
}


def _record(op: str, day: str, k: int, sub: str, n: int) -> dict:
    return {
        "op": op,
        "data": {
            "day": day,
            "k": k,
            "sub": sub,
            "ti": n % 100 - 50,
            "si": n * 7,
            "amount": f"{n}.{n % 100:02d}",
            "f": n / 4,
            "ok": n % 2 == 0,
            "raw": ["AAE=", "/w==", ""][n % 3],
            "tm": f"10:{n % 60:02d}:00",
            "ts": f"2024-01-01T00:00:{n % 60:02d}.5",
            "at": f"2024-01-01T00:{n % 60:02d}:00+02:00",
        },
    }


@pytest.fixture(scope="module", params=["rewritten", "merged-on-read"])
def events(spark, tmp_path_factory, request):
    """A partitioned table with three buckets over four batches: inserts, updates, deletes, a new partition;
    its buckets rewritten by each batch, or merged on read (delete files and new rows; these buckets are so
    small that the default rewrites them).

    Built once for the module (the tests only read it, besides landing files for the status test).
    """
    from changelake import ChangeLake
    from changelake.engine import apply

    home = tmp_path_factory.mktemp("fastread")
    (home / "tables").mkdir()
    lake = ChangeLake(home=home, tables_dir=home / "tables", spark=spark, progress=None)
    mode = "copy-on-write" if request.param == "rewritten" else "merge-on-read"
    lake.create_table(
        {**SPEC, "options": {**SPEC["options"], "write-only": "true", "write.merge.mode": mode}}
    )
    with pytest.MonkeyPatch.context() as mp:
        if request.param == "merged-on-read":
            mp.setattr(apply, "REWRITE_SHARE", float("inf"))
        _events_batches(lake)
    deletes = [
        f for f in lake.storage.table_files(lake.storage.pk_table(lake.spec("f.events"))) if f.is_delete
    ]
    assert bool(deletes) == (request.param == "merged-on-read")
    return lake


def _events_batches(lake) -> None:
    days = ["2024-01-01", "2024-01-02"]
    lake.apply(
        "f.events", [_record("+I", d, k, s, k) for d in days for k in range(8) for s in "ab"], batch_id=1
    )
    lake.apply(
        "f.events",
        [_record("+U", "2024-01-01", k, "a", 100 + k) for k in range(4)]
        + [{"op": "-D", "data": {"day": "2024-01-02", "k": k, "sub": "b"}} for k in range(3)],
        batch_id=2,
    )
    lake.apply("f.events", [_record("+I", "2024-01-03", 99, "z", 7)], batch_id=3)
    lake.apply(
        "f.events",
        [
            {"op": "-D", "data": {"day": "2024-01-03", "k": 99, "sub": "z"}},
            _record("+U", "2024-01-01", 5, "b", 55),
        ],
        batch_id=4,
    )


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "pyiceberg"])
def test_fast_reads_equal_spark_reads(events, direct):
    lake = events
    reader = FastReader(lake.settings, direct=direct)
    key = ["day", "k", "sub"]
    table = lake.storage.pk_table(lake.spec("f.events"))
    for batch in (1, 2, 3, 4, None):
        fast = reader.rows_arrow("f.events", at_batch=batch)
        _assert_same(fast, lake.rows("f.events", at_batch=batch), False, key)
        # pyiceberg's own scan of the same snapshot (deletes applied by an independent Iceberg reader)
        snap = None if batch is None else lake.storage.snapshot_for_batch(table, batch).snapshot_id
        scanned = table.scan(snapshot_id=snap).to_arrow().drop_columns(["_bucket"])
        assert sorted(map(str, scanned.to_pylist())) == sorted(
            map(str, fast.cast(scanned.schema, safe=False).to_pylist())
        )
    first = lake.rows("f.events", at_batch=2).orderBy(*key).limit(5)
    _assert_same(reader.rows_arrow("f.events", at_batch=2, limit=5), first, True, key)
    for lo, hi in ((None, None), (2, 3), (4, None), (None, 1), (5, None)):
        _assert_same(
            reader.changelog_arrow("f.events", lo, hi), lake.changelog("f.events", lo, hi), True, key
        )
    log = reader.changelog_arrow("f.events")
    # The total order: batch, then each (partition, bucket) log in offset order (or the table-wide offset).
    order = (
        ["_batch_id", "day", "_bucket", "_log_offset"] if "_bucket" in log.column_names else ["_log_offset"]
    )
    positions = list(zip(*(log.column(c).to_pylist() for c in order), strict=True))
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert reader.changelog_arrow("f.events", limit=7) == log.slice(0, 7)
    with pytest.raises(ChangelakeError, match="batch 9 is not in the table's history"):
        reader.rows_arrow("f.events", at_batch=9)


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "pyiceberg"])
def test_lookups_read_one_bucket_and_equal_spark(events, direct):
    from pyspark.sql import functions as F

    lake = events
    reader = FastReader(lake.settings, direct=direct)
    current = lake.rows("f.events")
    for row in _spark_rows(current.select("day", "k", "sub")):
        key = {"day": row["day"].isoformat(), "k": str(row["k"]), "sub": row["sub"]}
        want = current.filter(
            (F.col("day") == row["day"]) & (F.col("k") == row["k"]) & (F.col("sub") == row["sub"])
        )
        _assert_same(
            pa.Table.from_pylist(reader.lookup("f.events", key), fastread.view_schema(lake.spec("f.events"))),
            want,
            True,
            ["k"],
        )
        # The data files that may hold the key's (partition, bucket): its own and the batches' new rows.
        assert 1 <= reader.last_stats.files_read < reader.last_stats.files_planned
    assert reader.lookup("f.events", {"day": "2024-01-02", "k": 1, "sub": "b"}) == []  # deleted in batch 2
    assert reader.lookup("f.events", {"day": "2024-01-09", "k": 1, "sub": "a"}) == []  # no such partition
    assert reader.lookup("f.events", {"day": "2024-01-01", "k": 12345, "sub": "a"}) == []
    prefix = reader.lookup("f.events", {"day": "2024-01-01", "k": 5}, prefix=True)
    want = current.filter((F.col("day") == dt.date(2024, 1, 1)) & (F.col("k") == 5)).orderBy("sub")
    assert prefix == _spark_rows(want) and [r["sub"] for r in prefix] == ["a", "b"]
    assert (
        lake.lookup("f.events", {"day": "2024-01-01", "k": 5}, prefix=True) == prefix
    )  # the API's fast path


def test_status_and_dead_letters_agree_both_ways(events):
    lake = events
    (lake.settings.tables_dir / "f.events.yaml").write_text(json.dumps(SPEC))
    landing = lake.settings.landing_dir / "f.events"
    landing.mkdir(parents=True)
    for batch in (3, 5, 6):  # the table's batches came through the API: every landed one is pending
        (landing / f"{batch:03d}.jsonl").write_text("")
    (landing / "005.manifest.json").write_text("{}")  # not a batch
    direct, via_iceberg = FastReader(lake.settings, direct=True), FastReader(lake.settings, direct=False)
    # the table's state from its metadata, the landing's (pending batches, problems) added as status does
    (status,) = landing_status(direct, direct.status())
    assert status == landing_status(via_iceberg, via_iceberg.status())[0]
    rows = lake.rows("f.events").count()
    assert (status["last_batch"], status["rows"], status["snapshots"], status["pending_batches"]) == (
        4,
        rows,
        4,
        3,
    )
    assert direct.dead_letters("f.events") == via_iceberg.dead_letters("f.events") == []


def test_direct_reads_fall_back_to_pyiceberg(events, monkeypatch):
    lake = events
    messages: list[str] = []
    expected = FastReader(lake.settings, direct=True).rows_arrow("f.events")

    def unsupported(_data):
        raise avro.Unsupported("Avro codec snappy")

    monkeypatch.setattr(catalog, "read_avro", unsupported)
    assert FastReader(lake.settings, messages.append, direct=True).rows_arrow("f.events") == expected
    assert any("reading through pyiceberg (Avro codec snappy)" in m for m in messages)


def test_lookup_skips_row_groups_by_statistics(tmp_path):
    """Within a file, only row groups whose min/max admit the key are read (here: 1 of 10)."""
    path = tmp_path / "sorted.parquet"
    table = pa.table({"k": pa.array(range(100), pa.int64()), "v": pa.array([f"v{i}" for i in range(100)])})
    pq.write_table(table, path, row_group_size=10)
    source = catalog.TableSource(name="x.y", properties={}, columns=["k", "v"], partition_columns=[])
    source.open = lambda p, size=None: p  # a local path, as the direct way opens files
    reader = FastReader.__new__(FastReader)
    reader.progress = lambda _m: None
    stats = fastread._Stats()
    files = [TableFile(str(path), 0, (), 100, path.stat().st_size)]
    found = reader._read(source, files, table.schema, where={"k": 42}, stats=stats)
    assert found.to_pylist() == [{"k": 42, "v": "v42"}]
    assert (stats.row_groups, stats.row_groups_read) == (10, 1)
    assert reader._read(source, files, table.schema, where={"k": 1000}, stats=stats).num_rows == 0


def test_cli_reads_every_type_as_the_api_does(events):
    """The CLI imports pyarrow without numpy and pandas; every type still prints as the API reads it."""
    import os
    import subprocess
    import sys

    lake = events
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHANGELAKE_")}
    env.update(CHANGELAKE_HOME=str(lake.settings.home), CHANGELAKE_TABLES=str(lake.settings.tables_dir))

    def cli(*args: str) -> list[dict]:
        result = subprocess.run(
            [sys.executable, "-m", "changelake.cli", *args, "--format", "jsonl"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        return [json.loads(line) for line in result.stdout.splitlines()]

    def api(table: pa.Table | list[dict]) -> list[dict]:
        rows = table.to_pylist() if isinstance(table, pa.Table) else table
        return [json.loads(json.dumps(r, default=fastread.json_default)) for r in rows]

    reader = FastReader(lake.settings)
    assert cli("scan", "f.events") == api(reader.rows_arrow("f.events", by_key=True))
    assert cli("scan", "f.events", "--at-batch", "2", "--limit", "4") == api(
        reader.rows_arrow("f.events", at_batch=2, limit=4)
    )
    assert cli("changelog", "f.events", "--from-batch", "2") == api(reader.changelog_arrow("f.events", 2))
    assert cli("lookup", "f.events", "day=2024-01-01", "k=5", "--prefix") == api(
        reader.lookup("f.events", {"day": "2024-01-01", "k": 5}, prefix=True)
    )


def test_changelog_order_is_per_bucket_when_the_changelog_has_buckets():
    spec = TableSpec.from_dict({**SPEC, "name": "f.order"})
    per_bucket = ["day", "k", "sub", "_change_type", "_batch_id", "_bucket", "_log_offset"]
    assert fastread.changelog_order(per_bucket, spec) == ["_batch_id", "day", "_bucket", "_log_offset"]
    table_wide = [c for c in per_bucket if c != "_bucket"]  # a changelog written before per-bucket offsets
    assert fastread.changelog_order(table_wide, spec) == ["_log_offset"]


def test_fast_reads_of_an_evolved_table_equal_spark(lake):
    """A column added by schema evolution: files written before it read as nulls, as Spark reads them."""
    base = {
        "name": "f.evolved",
        "columns": [{"name": "id", "type": "BIGINT"}, {"name": "amount", "type": "INT"}],
        "primary_key": ["id"],
        "options": {"bucket.num": 2},
    }
    lake.create_table(base)
    lake.apply("f.evolved", [{"op": "+I", "data": {"id": i, "amount": i}} for i in range(6)], batch_id=1)
    lake.create_table({**base, "columns": [*base["columns"], {"name": "note", "type": "STRING"}]})
    lake.apply("f.evolved", [{"op": "+U", "data": {"id": 1, "amount": 10, "note": "n"}}], batch_id=2)
    reader = FastReader(lake.settings)
    for batch in (1, None):
        _assert_same(
            reader.rows_arrow("f.evolved", at_batch=batch), lake.rows("f.evolved", batch), False, ["id"]
        )
    _assert_same(reader.changelog_arrow("f.evolved"), lake.changelog("f.evolved"), True, ["id"])
    untouched = [
        r
        for r in range(6)
        if bucket_of(lake.spec("f.evolved"), {"id": r}) != bucket_of(lake.spec("f.evolved"), {"id": 1})
    ]
    assert reader.lookup("f.evolved", {"id": untouched[0]}) == [
        {"id": untouched[0], "amount": untouched[0], "note": None}
    ]


def test_the_first_rows_read_the_keys_of_only_the_row_groups_that_may_hold_them(tmp_path):
    """``scan --limit``: the footers of the files that may hold one of the first rows (every file when their
    manifest bounds are not known), then the keys of the row groups whose statistics admit one of the
    first rows (here the first of 40), then those rows. Local files are read a row group at a time; objects
    a few at once, in the same order."""
    files = []
    for f in range(4):  # file f holds keys f*100 .. f*100+99, row groups of 10, written newest keys first
        path = tmp_path / f"part-{f}.parquet"
        keys = list(range(f * 100 + 99, f * 100 - 1, -1))
        pq.write_table(
            pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array([f"v{k}" for k in keys])}),
            path,
            row_group_size=10,
        )
        files.append(TableFile(str(path), 0, (), 100, path.stat().st_size))
    source = catalog.TableSource(name="x.y", properties={}, columns=["k", "v"], partition_columns=[])
    source.open = lambda p, size=None: p
    reader = FastReader.__new__(FastReader)
    reader.progress = lambda _m: None
    spec = SimpleNamespace(primary_key=["k"])
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])

    def first_rows(among, n):
        stats = fastread._Stats()
        return reader._first_rows(spec, source, among, n, stats, "", schema).to_pylist(), stats

    first, stats = first_rows(files, 3)
    assert first == [{"k": k, "v": f"v{k}"} for k in range(3)]
    assert (stats.files_read, stats.row_groups, stats.row_groups_read) == (4, 40, 1)
    # The last rows of file 0 and the first of file 1: two row groups of keys (and their rows).
    first, stats = first_rows(files[1:], 12)
    assert [r["k"] for r in first] == list(range(100, 112))
    assert stats.row_groups_read == 2
    # With the files' lower bounds from their manifest entries, only the files that may hold one of the first
    # rows are opened: file 0 for the first 3; files 1 and 2 for the first 101 from 100, not file 3.
    source.field_ids = {"k": 1, "v": 2}
    bounded = [
        dataclasses.replace(f, lower_bounds={1: (i * 100).to_bytes(8, "little", signed=True), 2: b"v"})
        for i, f in enumerate(files)
    ]
    first, stats = first_rows(bounded, 3)
    assert first == [{"k": k, "v": f"v{k}"} for k in range(3)]
    assert (stats.files_read, stats.row_groups, stats.row_groups_read) == (1, 10, 1)
    first, stats = first_rows(bounded[1:], 101)
    assert [r["k"] for r in first] == list(range(100, 201))
    assert stats.files_read == 2  # file 3's lowest key (300) is past the 101st row (200)
