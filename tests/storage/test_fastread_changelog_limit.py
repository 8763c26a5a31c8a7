"""A changelog read with a limit returns exactly the first records of the read without one (same rows, same
order), while reading only the row groups those records need.

No Spark: the batches are small and applied in this process (``changelake.engine.apply.LOCAL_RECORDS``).
Files are written in row groups of a few rows so that a read can stop inside a file, a batch's changelog goes
to several files (a writer flushing every few rows, as a large batch's does), and one batch's files are
rewritten out of order with tied offsets to check that the limited read never trusts their order.
"""

from __future__ import annotations

import functools
import json

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from changelake import cli
from changelake.engine import buckets
from changelake.storage import catalog, fastread
from changelake.storage.fastread import FastReader

SPEC = {
    "name": "cl.events",
    "columns": [
        {"name": "day", "type": "DATE"},
        {"name": "region", "type": "STRING"},
        {"name": "k", "type": "BIGINT"},
        {"name": "v", "type": "STRING"},
        {"name": "n", "type": "INT"},
    ],
    "primary_key": ["day", "region", "k"],
    "partition_keys": ["day", "region"],
    "bucket_key": ["k"],
    # Maintenance left to the tests (the compacted fixture): the files stay as the batches wrote them.
    "options": {"bucket.num": 3, "write-only": "true"},
}
TABLE = SPEC["name"]
ROW_GROUP_ROWS = 4
DAYS = ["2024-01-01", "2024-01-02"]
REGIONS = ["eu", "us", "ápac"]  # a non-ASCII value: strings order by their UTF-8 bytes


def _row(day: str, region: str, k: int, n: int) -> dict:
    return {"day": day, "region": region, "k": k, "v": f"v{n}", "n": n}


def _build(home):
    """Partitions (day, region) x 3 buckets over four batches: inserts, updates and deletes, a new partition,
    a one-record batch; every Parquet file in row groups of ``ROW_GROUP_ROWS`` rows."""
    from changelake import ChangeLake

    (home / "tables").mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(
            "CHANGELAKE_LOCAL_APPLY_RECORDS", "1000000"
        )  # in this process, whatever the environment says
        mp.setattr(buckets, "FLUSH_ROWS", 16)  # a batch's changelog in several files, as a large batch's is
        mp.setattr(pq, "write_table", functools.partial(pq.write_table, row_group_size=ROW_GROUP_ROWS))
        lake = ChangeLake(home=home, tables_dir=home / "tables", progress=None)
        lake.create_table(SPEC)
        first = [{"op": "+I", "data": _row(d, r, k, k)} for d in DAYS for r in REGIONS for k in range(30)]
        lake.apply(TABLE, first, batch_id=1)
        second = [
            {"op": "+U", "data": _row(DAYS[0], r, k, 100 + k)} for r in REGIONS for k in range(0, 12, 2)
        ]
        second += [{"op": "-D", "data": _row(DAYS[1], "us", k, 0)} for k in range(5)]
        second += [{"op": "+I", "data": _row("2024-01-03", "eu", k, k)} for k in range(7)]
        lake.apply(TABLE, second, batch_id=2)
        lake.apply(TABLE, [{"op": "+U", "data": _row(DAYS[1], "eu", 3, 333)}], batch_id=3)
        lake.apply(
            TABLE, [{"op": "+I", "data": _row(DAYS[1], "eu", k, k)} for k in range(20, 40)], batch_id=4
        )
    return lake


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """The table, built once: the tests only read it."""
    return _build(tmp_path_factory.mktemp("changelog-limit"))


@pytest.fixture(scope="module")
def compacted(tmp_path_factory):
    """The same table after a full maintenance run: its changelog files merged into one across batches."""
    from changelake.engine.maintain import maintain

    lake = _build(tmp_path_factory.mktemp("changelog-limit-compacted"))
    spec = lake.spec(TABLE)
    before = len(lake.storage.data_files(lake.storage.changelog_table(spec)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pq, "write_table", functools.partial(pq.write_table, row_group_size=ROW_GROUP_ROWS))
        maintain(lake.storage, spec, lake.applier.roll_forward_changelog, full=True)
    (merged,) = lake.storage.data_files(lake.storage.changelog_table(spec))
    assert before > 4 and merged.batches == (1, 4)
    return lake


def _limits(total: int) -> list[int]:
    return sorted({-1, 0, 1, 2, 3, 4, 5, 7, 8, 9, 13, 30, 50, total - 1, total, total + 3})


def _assert_limited_reads_are_prefixes(reader: FastReader) -> None:
    for lo, hi in ((None, None), (1, 1), (2, 2), (2, 3), (3, 4), (1, 4), (4, None), (5, None)):
        full = reader.changelog_arrow(TABLE, lo, hi)
        for limit in _limits(full.num_rows):
            got = reader.changelog_arrow(TABLE, lo, hi, limit=limit)
            want = full.slice(0, max(limit, 0))
            assert got.schema == full.schema
            assert got.to_pylist() == want.to_pylist(), (lo, hi, limit)


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "pyiceberg"])
def test_a_limited_changelog_is_the_first_records_of_the_whole_one(table, direct):
    reader = FastReader(table.settings, direct=direct)
    log = reader.changelog_arrow(TABLE)
    stats = reader.last_stats
    assert stats.row_groups_read == stats.row_groups > 2 * stats.files_read  # files of several groups
    # The whole read is in the documented order, and spans batches, partitions and buckets.
    order = fastread.changelog_order(log.column_names, table.spec(TABLE))
    assert order == ["_batch_id", "day", "region", "_bucket", "_log_offset"]
    positions = list(zip(*(log.column(c).to_pylist() for c in order), strict=True))
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert len({p[:4] for p in positions}) > 10
    _assert_limited_reads_are_prefixes(reader)


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "pyiceberg"])
def test_a_limited_changelog_of_merged_batches_is_the_first_records_of_the_whole_one(
    table, compacted, direct
):
    """One file holding every batch (a compacted changelog): the same records, whole or limited, as the
    table read before the merge."""
    reader = FastReader(compacted.settings, direct=direct)
    before = FastReader(table.settings, direct=direct)
    for lo, hi in ((None, None), (2, 2), (2, 3), (4, None)):
        got, want = (
            r.changelog_arrow(TABLE, lo, hi).drop_columns(["_commit_timestamp"]) for r in (reader, before)
        )
        assert got.to_pylist() == want.to_pylist() and got.num_rows
    _assert_limited_reads_are_prefixes(reader)


def test_a_small_limit_reads_a_few_row_groups(table):
    reader = FastReader(table.settings)
    reader.changelog_arrow(TABLE, 1, 1, limit=ROW_GROUP_ROWS + 1)
    stats = reader.last_stats
    assert stats.row_groups > 10 and stats.row_groups_read <= 3  # the whole batch is read otherwise
    assert stats.rows == ROW_GROUP_ROWS + 1
    reader.changelog_arrow(TABLE, 1, 1)
    assert reader.last_stats.row_groups_read == stats.row_groups


def test_files_out_of_order_with_tied_offsets_read_as_a_stable_sort(tmp_path):
    """Batch 2's files rewritten in reverse row order, in row groups of 3, every two offsets equal: a limited
    read still returns what the whole read's stable sort gives (among equal keys: files in plan order, rows
    in file order). Changelake never writes such files; the limited read must not depend on it."""
    lake = _build(tmp_path)
    reader = FastReader(lake.settings)
    rewritten = 0
    for f in reader._files(reader._changelog_source(lake.spec(TABLE)), None):
        if "/batch-000000000002" not in f.path:
            continue
        path = catalog.local_path(f.path)
        data = pq.read_table(path)
        data = data.take(pa.array(range(data.num_rows - 1, -1, -1), pa.int64()))
        halved = pc.divide(data.column("_log_offset"), pa.scalar(2, pa.int64()))
        data = data.set_column(data.schema.get_field_index("_log_offset"), "_log_offset", halved)
        pq.write_table(data, path, row_group_size=3)
        rewritten += 1
    assert rewritten >= 3
    full = reader.changelog_arrow(TABLE, 2, 2)
    offsets = list(
        zip(full.column("_bucket").to_pylist(), full.column("_log_offset").to_pylist(), strict=True)
    )
    assert len(set(offsets)) < len(offsets)  # ties the limited read must break as the stable sort does
    wider = reader.changelog_arrow(TABLE, 1, 3)
    for limit in _limits(full.num_rows):
        got = reader.changelog_arrow(TABLE, 2, 2, limit=limit)
        assert got.to_pylist() == full.slice(0, max(limit, 0)).to_pylist(), limit
        got = reader.changelog_arrow(TABLE, 1, 3, limit=limit + 140)
        assert got.to_pylist() == wider.slice(0, max(limit + 140, 0)).to_pylist(), limit


def test_the_cli_prints_the_first_records_of_the_whole_changelog(table, capsys):
    home = str(table.settings.home)
    args = [
        "--home",
        home,
        "--tables",
        str(table.settings.tables_dir),
        "changelog",
        TABLE,
        "--format",
        "jsonl",
    ]
    assert cli.main(args + ["--from-batch", "1", "--to-batch", "2"]) == 0
    whole = capsys.readouterr().out.splitlines()
    assert cli.main(args + ["--from-batch", "1", "--to-batch", "2", "--limit", "11"]) == 0
    limited = capsys.readouterr().out.splitlines()
    assert limited == whole[:11] and len(whole) > 11
    assert [json.loads(line)["_batch_id"] for line in limited] == [1] * 11


def test_without_usable_statistics_a_limited_read_is_still_exact(table, monkeypatch):
    """Columns whose statistics are not used (floats, timestamps, decimals) bound nothing: the read visits
    every row group of the batch, in plan order, and still returns the first records."""
    monkeypatch.setattr(fastread, "bound_type", lambda dtype: None)
    reader = FastReader(table.settings)
    reader.changelog_arrow(TABLE, 1, 1, limit=1)
    assert reader.last_stats.row_groups_read == reader.last_stats.row_groups
    _assert_limited_reads_are_prefixes(reader)
