"""The SQL catalog's metadata cache (changelake.storage.iceberg._cache_metadata): a table's metadata file is
read once per location, a commit from another catalog object (another process) is seen at the next load, and
what a commit wrote is not read back."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.schema import Schema
from pyiceberg.serializers import FromInputFile
from pyiceberg.types import LongType, NestedField

from changelake.storage.iceberg import METADATA_CACHE_ENTRIES, _cache_metadata


@pytest.fixture
def catalogs(tmp_path, monkeypatch):
    """Two cached catalogs on one SQLite file (two processes, as far as the cache can tell), a table in it, and
    the list of metadata files read so far."""

    def catalog():
        return _cache_metadata(
            SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
        )

    a, b = catalog(), catalog()
    a.create_namespace("ns")
    schema = Schema(NestedField(1, "k", LongType(), required=False))
    a.create_table(
        ("ns", "t"),
        schema,
        properties={
            "schema.name-mapping.default": schema.name_mapping.model_dump_json(),
            "commit.retry.num-retries": "0",  # as changelake's tables: a lost race is the caller's to handle
        },
    )
    reads: list[str] = []
    original = FromInputFile.table_metadata
    monkeypatch.setattr(
        FromInputFile, "table_metadata", lambda f, *a, **k: reads.append(f.location) or original(f)
    )
    return a, b, reads, tmp_path


def append(table, path, values):
    pq.write_table(pa.table({"k": pa.array(values, pa.int64())}), path)
    tx = table.transaction()
    with tx.update_snapshot().fast_append() as op:
        op.append_data_file(parquet_file_to_data_file(table.io, table.metadata, str(path)))
    return tx.commit_transaction()


def test_a_location_is_read_once_and_tables_are_distinct_objects(catalogs):
    a, _, reads, _ = catalogs
    first, second, third = (a.load_table(("ns", "t")) for _ in range(3))
    assert len(reads) <= 1  # create_table's own load may have cached it already
    assert first.metadata is second.metadata is third.metadata  # frozen, shared
    assert first is not second  # each caller still gets a Table of its own (a commit updates it in place)


def test_another_catalogs_commit_is_seen_and_a_commit_is_not_read_back(catalogs):
    a, b, reads, tmp = catalogs
    stale = a.load_table(("ns", "t"))
    committed = append(b.load_table(("ns", "t")), tmp / "1.parquet", [1, 2])
    assert reads.count(committed.metadata_location) == 0  # b wrote it; b's own loads inside the commit hit
    fresh = a.load_table(("ns", "t"))
    assert fresh.metadata_location == committed.metadata_location != stale.metadata_location
    assert fresh.current_snapshot().snapshot_id == committed.current_snapshot().snapshot_id
    assert reads.count(committed.metadata_location) == 1  # a had not seen it: read once
    a.load_table(("ns", "t"))
    assert reads.count(committed.metadata_location) == 1
    assert sorted(fresh.scan().to_arrow()["k"].to_pylist()) == [1, 2]


def test_a_stale_table_still_loses_its_commit_race(catalogs):
    a, b, _, tmp = catalogs
    stale = a.load_table(("ns", "t"))
    append(b.load_table(("ns", "t")), tmp / "1.parquet", [1])
    with pytest.raises(CommitFailedException):
        append(stale, tmp / "2.parquet", [2])


def test_a_commit_does_not_load_its_table_again_and_a_stale_one_changes_nothing(catalogs):
    """The commit's base is the table being committed (no SELECT of the catalog row inside commit_table); a
    commit on a stale table still fails, and the catalog row keeps naming the winner's metadata."""
    from sqlalchemy import event

    a, b, _, tmp = catalogs
    statements: list[str] = []
    event.listen(a.engine, "before_cursor_execute", lambda _c, _cur, sql, *_: statements.append(sql))
    table = a.load_table(("ns", "t"))
    statements.clear()
    committed = append(table, tmp / "1.parquet", [1])
    selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert selects == [] and any(s.lstrip().upper().startswith("UPDATE") for s in statements)
    stale = a.load_table(("ns", "t"))
    winner = append(b.load_table(("ns", "t")), tmp / "2.parquet", [2])
    with pytest.raises(CommitFailedException):
        append(stale, tmp / "3.parquet", [3])
    now = a.load_table(("ns", "t"))
    assert now.metadata_location == winner.metadata_location != committed.metadata_location
    assert sorted(now.scan().to_arrow()["k"].to_pylist()) == [1, 2]


def test_a_dropped_table_is_gone_and_the_cache_is_bounded(catalogs):
    a, b, _, tmp = catalogs
    for i in range(METADATA_CACHE_ENTRIES + 5):
        append(a.load_table(("ns", "t")), tmp / f"{i}.parquet", [i])
    assert len(a.load_table(("ns", "t")).scan().to_arrow()) == METADATA_CACHE_ENTRIES + 5
    b.drop_table(("ns", "t"))
    with pytest.raises(NoSuchTableError):
        a.load_table(("ns", "t"))


def test_a_sqlite_catalog_runs_in_write_ahead_log_mode_and_read_only_readers_see_its_commits(tmp_path):
    """Storage puts a SQLite catalog's file in WAL mode (one log sync a commit, not a journal's and the file's);
    a read-only connection, as the fast reader opens the file, sees a commit made after it opened."""
    import sqlite3

    from changelake import ChangeLake
    from changelake.config import load_settings
    from changelake.storage.iceberg import Storage

    settings = load_settings(home=tmp_path, tables_dir=tmp_path)
    db = settings.catalog_uri[len("sqlite:///") :]
    Storage(settings).catalog  # noqa: B018 - opening it is what sets the mode
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    reader = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    before = reader.execute("select count(*) from iceberg_tables").fetchone()[0]
    lake = ChangeLake(settings=settings, spark=object(), progress=lambda _m: None)
    lake.create_table({"name": "w.t", "columns": [{"name": "k", "type": "INT"}], "primary_key": ["k"]})
    assert (
        reader.execute("select count(*) from iceberg_tables").fetchone()[0] == before + 2
    )  # and __changelog
