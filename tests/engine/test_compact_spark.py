"""Compaction in Spark tasks (``CHANGELAKE_SPARK_COMPACT_BYTES`` forced to 0) against the same compaction in the
process: the same rows, the same files bucket by bucket in the same order, the same state; a task killed
midway leaves the table as it was and no file behind; a batch committing first makes it lose cleanly.

The tables are small (the threshold decides where the work runs, not the size); the shared Spark session runs
the tasks. benchmarks/bench_compact_scale.py shows the same path on a table larger than the driver's memory.
"""

from __future__ import annotations

from unittest import mock

import pyarrow.parquet as pq
import pytest

from changelake.engine import apply, compact
from changelake.spec import TableSpec
from changelake.storage import summary
from changelake.storage.iceberg import Storage
from changelake.storage.maintenance import list_files
from tests.helpers import local

COLUMNS = [
    {"name": "k", "type": "INT"},
    {"name": "p", "type": "STRING"},
    {"name": "n", "type": "BIGINT"},
    {"name": "s", "type": "STRING"},
]


def _spec(name: str, minor: bool) -> TableSpec:
    options = {"bucket.num": "4", "write.merge.mode": "merge-on-read", "write-only": "true"}
    if minor:  # deltas merged two at a time, never a full compaction unless asked
        options |= {
            "num-sorted-run.compaction-trigger": "2",
            "compaction.max-size-amplification-percent": "1000000",
        }
    return TableSpec.from_dict(
        {
            "name": name,
            "columns": COLUMNS,
            "primary_key": ["k", "p"],
            "bucket_key": ["k"],
            "partition_keys": ["p"],
            "options": options,
        }
    )


def _load(lake, spec: TableSpec, batches: int = 4) -> None:
    """A first batch of 200 keys in two partitions, then small batches merged on read (updates of earlier
    keys, deletes, new keys): every partition gets delta files and delete files."""
    lake.create_table(spec.to_dict())
    with mock.patch.object(apply, "REWRITE_SHARE", float("inf")):
        first = [
            {"op": "+I", "data": {"k": k, "p": p, "n": k, "s": f"v{k}"}}
            for k in range(100)
            for p in ("a", "b")
        ]
        lake.apply(spec.full_name, first, batch_id=1)
        for b in range(2, batches + 2):
            records = [
                {"op": "+U", "data": {"k": k, "p": "a", "n": b * 1000 + k, "s": f"b{b}"}}
                for k in range(b, 100, 7)
            ]
            records += [{"op": "-D", "data": {"k": k, "p": "b"}} for k in range(b, 100, 11)]
            records += [{"op": "+I", "data": {"k": 1000 + b, "p": "b", "n": b, "s": "new"}}]
            lake.apply(spec.full_name, records, batch_id=b)


def _files(storage: Storage, table) -> list[tuple]:
    """Each live file of the table as what it holds: (partition, delete?, its rows in file order), sorted."""
    out = []
    for f in storage.table_files(table):
        rows = pq.read_table(local(f.path))
        if f.is_delete:
            out.append(
                (str(f.partition), True, None)
            )  # paths differ between the tables; the count is checked
            continue
        out.append(
            (
                str(f.partition),
                False,
                [tuple(r.values()) for r in rows.select(["_bucket", "k", "p", "n", "s"]).to_pylist()],
            )
        )
    return sorted(out, key=repr)


def _rows(table) -> list[tuple]:
    """The table's rows, as pyiceberg's own scan reads them (every delete applied)."""
    return sorted(tuple(r[c["name"]] for c in COLUMNS) for r in table.scan().to_arrow().to_pylist())


def _state(table) -> dict:
    """The table's state as its snapshot carries it (what wrote the snapshot aside)."""
    return {k: v for k, v in Storage.state_properties(table).items() if k != summary.OPERATION}


def _compact(lake, spec, threshold: int, monkeypatch, full: bool):
    monkeypatch.setenv("CHANGELAKE_SPARK_COMPACT_BYTES", str(threshold))
    return compact.compact_table(
        lake.storage, spec, full=full, spark=lambda: lake.spark, progress=lake.progress
    )


@pytest.mark.parametrize("full", [True, False], ids=["full", "minor"])
def test_spark_tasks_compact_to_exactly_what_the_process_does(lake, monkeypatch, full):
    """Two tables given the same batches, one compacted in the process, one in Spark tasks: the same rows
    (pyiceberg's scan), the same data files partition by partition with their rows in the same order (the
    (_bucket, key) sort), as many delete files, and the same state in the compaction's snapshot."""
    here, there = _spec(f"c.here{int(full)}", not full), _spec(f"c.there{int(full)}", not full)
    for spec in (here, there):
        _load(lake, spec)
    before = lake.storage.table_files(lake.storage.pk_table(there))
    assert any(compact.is_delta(f) for f in before) and any(f.is_delete for f in before)
    rows = _rows(lake.storage.pk_table(there))
    states = [_state(lake.storage.pk_table(s)) for s in (here, there)]
    lake.messages.clear()
    done_here = _compact(lake, here, 1 << 40, monkeypatch, full)
    assert any("in this process" in m for m in lake.messages) and not any("Spark" in m for m in lake.messages)
    lake.messages.clear()
    done_there = _compact(lake, there, 0, monkeypatch, full)
    assert any("in Spark tasks" in m for m in lake.messages)
    assert (done_there.full, done_there.minor) == ((2, 0) if full else (0, 2))
    assert (done_there.full, done_there.minor, done_there.rows_written, done_there.files_added) == (
        done_here.full,
        done_here.minor,
        done_here.rows_written,
        done_here.files_added,
    )
    a, b = lake.storage.pk_table(here), lake.storage.pk_table(there)
    assert _files(lake.storage, a) == _files(lake.storage, b)
    for f in lake.storage.table_files(b):  # every data file in (_bucket, key) order
        if not f.is_delete:
            order = [
                tuple(r.values())
                for r in pq.read_table(local(f.path), columns=["_bucket", "k", "p"]).to_pylist()
            ]
            assert order == sorted(order)
    if full:  # one file per bucket, no delta or delete file left
        assert not any(compact.is_delta(f) or f.is_delete for f in lake.storage.table_files(b))
    assert _rows(b) == _rows(a) == rows
    assert [_state(t) for t in (a, b)] == states  # the last batch's, carried
    assert b.current_snapshot().summary.additional_properties.get("changelake.operation") == "compact"


def _compaction_files(table) -> list[str]:
    """Every file under the table's compaction directories, referenced or not."""
    return [p for p, _ in list_files(table.location(), dict(table.io.properties)) if "/compact-" in p]


def test_a_killed_compaction_task_leaves_the_table_as_it_was(lake, monkeypatch):
    """A Spark task's Python worker killed (as an OOM kill would) after writing its bucket's file: the job
    fails, the compaction raises, the table keeps its snapshot and files, and no file the compaction wrote
    is left; the next run compacts."""
    spec = _spec("c.killed", minor=False)
    _load(lake, spec)
    table = lake.storage.pk_table(spec)
    snapshot, files = table.current_snapshot().snapshot_id, lake.storage.table_files(table)
    monkeypatch.setenv("CHANGELAKE_FAULT", "compaction-task")
    with pytest.raises(Exception, match="(?i)python worker"):  # the job's failure, as PySpark raises it
        _compact(lake, spec, 0, monkeypatch, full=True)
    table = lake.storage.pk_table(spec)
    assert table.current_snapshot().snapshot_id == snapshot
    assert {f.path for f in lake.storage.table_files(table)} == {f.path for f in files}
    assert _compaction_files(table) == []
    monkeypatch.delenv("CHANGELAKE_FAULT")
    done = _compact(lake, spec, 0, monkeypatch, full=True)
    assert done.full == 2 and done.committed is not None
    assert set(_compaction_files(lake.storage.pk_table(spec))) == set(
        f.path for f in lake.storage.table_files(lake.storage.pk_table(spec))
    )


def test_a_spark_compaction_losing_to_a_batch_leaves_nothing(lake, monkeypatch):
    """A batch commits while the compaction's tasks have written their files: the compaction's commit loses,
    its files are removed, the table is the batch's (its rows and state), and the next run compacts."""
    spec = _spec("c.race", minor=False)
    _load(lake, spec)
    rows = _rows(lake.storage.pk_table(spec))

    def batch_first(point: str) -> None:
        if point == "before-compaction-commit":
            lake.apply(
                spec.full_name,
                [{"op": "+I", "data": {"k": 5000, "p": "a", "n": 1, "s": "racer"}}],
                batch_id=6,
            )

    with mock.patch.object(compact, "fault", side_effect=batch_first):
        done = _compact(lake, spec, 0, monkeypatch, full=True)
    assert done.committed is None and (done.full, done.files_added, done.rows_written) == (0, 0, 0)
    assert any("another writer committed first" in n for n in done.notes)
    table = lake.storage.pk_table(spec)
    assert Storage.state(table).batch.batch_id == 6
    assert _compaction_files(table) == []
    assert _rows(table) == sorted([*rows, (5000, "a", 1, "racer")])
    assert _compact(lake, spec, 0, monkeypatch, full=True).full == 2


def test_maintain_sends_a_large_compaction_to_spark_and_says_where(lake, monkeypatch):
    """``changelake maintain``/``compact`` (the API under them, and the maintenance DAG's task) hand the
    compaction their Spark session: above the threshold its buckets run as Spark tasks, and the progress
    names the table, the partition, its buckets and rows."""
    spec = _spec("c.maintained", minor=False)
    _load(lake, spec)
    monkeypatch.setenv("CHANGELAKE_SPARK_COMPACT_BYTES", "0")
    lake.messages.clear()
    (report,) = lake.maintain(spec.full_name, full=True, expiry=False)
    assert report.compacted[0].full == 2
    assert any(m.startswith("[c.maintained] compacting partition ['a']: 4 bucket(s)") for m in lake.messages)
    assert any("in 8 Spark task(s)" in m for m in lake.messages)
