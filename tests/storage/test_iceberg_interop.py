"""Readers changelake did not write, on one table it did: Iceberg's Java reader (Spark with Iceberg's Spark
runtime), pyiceberg, DuckDB's iceberg extension, polars and daft each return exactly ``changelake scan``'s
rows. The table has several merge-on-read batches (position-delete files), a partition, DECIMAL, TIMESTAMP
and DATE columns, a column added after its first batches and an expired snapshot; its Spark rows are read
once more ``VERSION AS OF`` a batch's snapshot, against ``scan --at-batch``. One table for the module, built
without Spark; one Spark session (the suite's)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from changelake.api import ChangeLake
from changelake.errors import ChangelakeError
from changelake.storage.iceberg import Storage
from tests.helpers import local, sparkless_lake

SPEC = {
    "name": "interop.orders",
    "primary_key": ["order_id", "region"],
    "partition_keys": ["region"],
    "options": {"bucket.num": 2, "snapshot.num-retained.min": 2, "snapshot.num-retained.max": 3},
    "columns": [
        {"name": "order_id", "type": "BIGINT"},
        {"name": "region", "type": "STRING"},
        {"name": "amount", "type": "DECIMAL(12, 2)"},
        {"name": "placed_at", "type": "TIMESTAMP(6)"},
        {"name": "ship_date", "type": "DATE"},
        {"name": "status", "type": "STRING"},
    ],
}
WITH_NOTE = dict(SPEC, columns=[*SPEC["columns"], {"name": "note", "type": "STRING"}])
COLUMNS = [c["name"] for c in WITH_NOTE["columns"]]


def _order(i: int, status: str, note: str | None = None) -> dict:
    row = {
        "order_id": i,
        "region": ("eu", "us")[i % 2],
        "amount": f"{i * 7 % 1000}.{i % 100:02d}",
        "placed_at": f"2026-0{1 + i % 9}-1{i % 10} 0{i % 10}:1{i % 6}:0{i % 10}.{i:06d}"[:26],
        "ship_date": f"2026-1{i % 3}-2{i % 8}",
        "status": status,
    }
    return row if note is None else {**row, "note": note}


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    """The module's table: 4 batches merged on read around an ADD COLUMN, maintenance that expires snapshots."""
    home = tmp_path_factory.mktemp("interop")
    lake = sparkless_lake(home)
    spec_file = home / "tables" / "interop.orders.yaml"
    spec_file.write_text(json.dumps(SPEC))
    lake.create_table(SPEC)
    lake.apply("interop.orders", [{"op": "+I", "data": _order(i, "new")} for i in range(800)], batch_id=1)
    changes = [{"op": "+U", "data": _order(i, "paid")} for i in range(0, 800, 37)]
    changes += [{"op": "-D", "data": _order(i, "new")} for i in range(5, 800, 101)]
    lake.apply("interop.orders", changes, batch_id=2)
    spec_file.write_text(json.dumps(WITH_NOTE))
    lake.create_table(WITH_NOTE)  # ALTER TABLE ... ADD COLUMN note
    changes = [{"op": "+U", "data": _order(i, "shipped", f"n{i}")} for i in range(3, 800, 41)]
    changes += [{"op": "+I", "data": _order(i, "new", "late")} for i in range(800, 830)]
    lake.apply("interop.orders", changes, batch_id=3)
    changes = [{"op": "-D", "data": _order(i, "x", None)} for i in range(11, 800, 97)]
    changes += [{"op": "+U", "data": _order(i, "paid", "again")} for i in range(800, 830, 3)]
    lake.apply("interop.orders", changes, batch_id=4)
    lake.maintain("interop.orders")  # expires the snapshots beyond the retention options
    return lake


def _pk(lake):
    return lake.storage.pk_table(lake.spec("interop.orders"))


def _normal(rows) -> list[tuple]:
    """Rows (dicts) as comparable tuples in key order: timestamps naive microseconds, decimals exact."""
    out = []
    for r in rows:
        values = []
        for c in COLUMNS:
            v = r.get(c)
            if isinstance(v, dt.datetime):
                v = v.replace(tzinfo=None)
            elif hasattr(v, "to_pydatetime"):  # pandas.Timestamp
                v = v.to_pydatetime().replace(tzinfo=None)
            elif isinstance(v, float):
                v = Decimal(str(v))
            values.append(v)
        out.append(tuple(values))
    return sorted(out, key=lambda t: (t[0], t[1]))


@pytest.fixture(scope="module")
def expected(lake):
    """``changelake scan``'s rows (the JVM-free reader)."""
    rows = _normal(lake.rows_arrow("interop.orders").to_pylist())
    assert len(rows) == 830 - len(range(5, 800, 101)) - len(range(11, 800, 97))
    return rows


def test_the_table_has_what_the_readers_must_handle(lake):
    pk = _pk(lake)
    files = Storage.table_files(pk)
    assert any(f.is_delete for f in files)  # merge-on-read: position deletes to apply
    assert {f.partition for f in files} == {("eu",), ("us",)}
    history = json.loads(pk.properties.get("changelake.history", "[]"))
    assert history, "maintenance expired batch snapshots into the history"
    old = [f for f in Storage.data_files(pk) if "batch-000000000001" in f.path]
    assert old and "note" not in pq.read_schema(local(old[0].path)).names  # files from before the ADD COLUMN


def test_pyiceberg(lake, expected):
    assert _normal(_pk(lake).scan().to_arrow().to_pylist()) == expected


def test_duckdb_iceberg_extension(lake, expected):
    import duckdb

    extensions = Path(duckdb.__file__).parent.parent / "duckdb_ext" / "extensions" / f"v{duckdb.__version__}"
    (platform,) = list(extensions.iterdir())
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(
        f"LOAD '{platform / 'avro.duckdb_extension'}'"
    )  # the iceberg extension reads manifests with it
    con.execute(f"LOAD '{platform / 'iceberg.duckdb_extension'}'")
    metadata = local(_pk(lake).metadata_location)
    got = con.execute(f"SELECT {', '.join(COLUMNS)} FROM iceberg_scan('{metadata}')").fetchall()
    assert _normal([dict(zip(COLUMNS, r, strict=True)) for r in got]) == expected


def test_polars(lake, expected):
    import polars as pl

    assert _normal(pl.scan_iceberg(_pk(lake)).collect().to_dicts()) == expected


def test_daft(lake, expected):
    """Daft reads only files that carry Iceberg field ids (it refused every changelake table before)."""
    import daft

    assert _normal(daft.read_iceberg(_pk(lake)).to_pylist()) == expected


@pytest.mark.spark
def test_spark_with_icebergs_runtime(lake, expected, spark):
    from changelake.runtime import jvm

    catalog = jvm.spark_catalog(spark, lake.settings)
    table = f"{catalog}.interop.orders"
    frame = spark.table(table)
    assert "_bucket" not in frame.columns  # hidden, still readable by name
    assert _normal([r.asDict() for r in frame.collect()]) == expected
    assert spark.sql(f"SELECT count(DISTINCT _bucket) FROM {table}").first()[0] == 2
    # Time travel by SQL against `scan --at-batch`: the oldest retained batch snapshot, named in its summary.
    batches = {
        int(r.summary["changelake.batch-id"]): r.snapshot_id
        for r in spark.sql(f"SELECT snapshot_id, summary FROM {table}.snapshots").collect()
        if "changelake.batch-id" in r.summary and r.summary.get("changelake.operation") != "compact"
    }
    assert 1 not in batches  # expired
    batch = min(batches)
    assert batch < 4
    then = spark.sql(f"SELECT * FROM {table} VERSION AS OF {batches[batch]}").collect()
    assert _normal([r.asDict() for r in then]) == _normal(
        lake.reader.rows_arrow("interop.orders", at_batch=batch).to_pylist()
    )
    assert _normal([r.asDict() for r in then]) != expected
    # The changelog, and ChangeLake.rows (the same catalog, declared types).
    log = spark.table(f"{catalog}.interop.orders__changelog")
    assert log.count() == lake.changelog_arrow("interop.orders").num_rows
    with_spark = ChangeLake(settings=lake.settings, spark=spark, progress=lambda _m: None)
    assert _normal([r.asDict() for r in with_spark.rows("interop.orders").collect()]) == expected


@pytest.mark.spark
def test_icebergs_own_procedures_between_applies(spark, tmp_path):
    """Iceberg's maintenance from Spark, through Iceberg's own SparkCatalog over the same catalog, between
    applies: sort rewrites of both tables, a position-delete rewrite, an expiry that keeps one snapshot and an
    orphan sweep. Every batch still applies exactly once, a replay is still a no-op, status names the last
    committer, and the rows and changelog are what changelake alone would hold."""
    import os
    import time

    (tmp_path / "tables").mkdir()
    lake = ChangeLake(
        home=tmp_path, tables_dir=tmp_path / "tables", catalog_name="teams", progress=lambda _m: None
    )
    spec = {
        "name": "ns.t",
        "primary_key": ["k"],
        "options": {"bucket.num": 2},
        "columns": [{"name": "k", "type": "INT"}, {"name": "v", "type": "STRING"}],
    }
    (tmp_path / "tables" / "ns.t.yaml").write_text(json.dumps(spec))
    lake.create_table(spec)
    expected = {k: f"a{k}" for k in range(300)}

    sent: dict[int, list[dict]] = {}

    def apply(batch_id: int, changes: dict[int, str | None]):
        records = [
            {"op": "-D" if v is None else "+U", "data": {"k": k, "v": v or ""}} for k, v in changes.items()
        ]
        sent[batch_id] = records
        result = lake.apply("ns.t", records, batch_id=batch_id)
        for k, v in changes.items():
            if v is None:
                expected.pop(k, None)
            else:
                expected[k] = v
        return result

    lake.apply("ns.t", [{"op": "+I", "data": {"k": k, "v": v}} for k, v in expected.items()], batch_id=1)
    batch2 = {k: f"b{k}" for k in range(0, 300, 29)} | {7: None, 8: None}
    apply(2, batch2)
    # The team's own catalog: Iceberg's SparkCatalog, unchanged, over the same SQLite catalog.
    teams = {
        "spark.sql.catalog.teams": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.teams.type": "jdbc",
        "spark.sql.catalog.teams.uri": f"jdbc:sqlite:{tmp_path / 'catalog.db'}",
        "spark.sql.catalog.teams.warehouse": lake.settings.warehouse,
        "spark.sql.catalog.teams.jdbc.schema-version": "V1",
        "spark.sql.catalog.teams.cache-enabled": "false",
    }
    for key, value in teams.items():
        spark.conf.set(key, value)
    for table in ("ns.t", "ns.t__changelog"):
        spark.sql(
            f"CALL teams.system.rewrite_data_files(table => '{table}', strategy => 'sort', "
            "options => map('rewrite-all', 'true'))"
        ).collect()
    spark.sql(
        "CALL teams.system.rewrite_position_delete_files(table => 'ns.t', options => map('rewrite-all', 'true'))"
    ).collect()
    (status,) = lake.status()
    assert status["last_batch"] == 2 and status["last_commit"].startswith("spark"), status
    # A replay is a no-op; the next batch applies once, its changelog is committed once.
    assert lake.apply("ns.t", sent[2], batch_id=2).status == "already-applied"
    with pytest.raises(ChangelakeError, match="already applied from a different input"):
        lake.apply("ns.t", [{"op": "+U", "data": {"k": 1, "v": "zz"}}], batch_id=2)
    assert apply(3, {5: "c5", 300: "c300"}).status == "applied"
    # An expiry keeping one snapshot, then an orphan sweep (every file made 4 days old: the procedure's own
    # safety interval is 3 days).
    now = time.time()
    spark.sql(
        "CALL teams.system.expire_snapshots(table => 'ns.t', older_than => TIMESTAMP '2100-01-01 00:00:00', "
        "retain_last => 1)"
    ).collect()
    for directory, _dirs, files in os.walk(tmp_path / "warehouse"):
        for name in files:
            os.utime(Path(directory, name), (now - 4 * 86400, now - 4 * 86400))
    for table in ("ns.t", "ns.t__changelog"):
        spark.sql(f"CALL teams.system.remove_orphan_files(table => '{table}')").collect()
    assert lake.apply("ns.t", sent[3], batch_id=3).status == "already-applied"
    assert apply(4, {11: "d11", 12: None}).status == "applied"
    lake.maintain("ns.t", full=True)
    assert {r["k"]: r["v"] for r in lake.rows_arrow("ns.t").to_pylist()} == expected
    assert {
        r["k"]: r["v"] for r in lake.storage.pk_table(lake.spec("ns.t")).scan().to_arrow().to_pylist()
    } == (expected)
    log = lake.changelog_arrow("ns.t").to_pylist()
    assert [(r["_change_type"], r["k"]) for r in log if r["_batch_id"] == 3] == [
        ("-U", 5),
        ("+U", 5),
        ("+I", 300),
    ]
    assert [(r["_change_type"], r["k"]) for r in log if r["_batch_id"] == 4] == [
        ("-U", 11),
        ("+U", 11),
        ("-D", 12),
    ]
    (status,) = lake.status()
    assert (status["last_batch"], status["last_commit"]) == (4, "changelake: compaction")
    frame = spark.table(f"{lake.iceberg_table('ns.t')}")
    assert {r.k: r.v for r in frame.collect()} == expected
