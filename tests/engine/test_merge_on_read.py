"""Merge-on-read against copy-on-write against the one-record-at-a-time reference, over random batch
sequences with random compactions in between, for every merge engine and partial updates (issue 31).

Each example builds one table spec (engine, buckets, partitions), writes the same batches into a
merge-on-read table and a copy-on-write table, compacts the merge-on-read one at random points (minor: its
delta and delete files merged; full: every bucket rewritten), and checks after every batch:

* the rows read without a JVM and the reference's rows are the same, for both tables;

and at the end that pyiceberg's own scan (an independent Iceberg reader applying the delete files) reads the
reference's rows, that the two changelogs are identical (change types, images, batches, buckets, log
offsets), and that each key's changes are the reference's, in its order.

No Spark: the batches are small and merge in this process, as the apply service merges them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
from unittest import mock

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from changelake.engine import apply, buckets, compact
from changelake.engine.merge import apply_sequential
from changelake.spec import TableSpec
from changelake.storage.fastread import FastReader
from tests.helpers import local, sparkless_lake

pytestmark = pytest.mark.slow

KEYS = range(8)
ENGINES = {
    "last_row": {},
    "last_row_wal": {"table.changelog.image": "wal"},
    "first_row": {"table.merge-engine": "first_row"},
    "versioned": {"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "n"},
    "aggregation": {
        "table.merge-engine": "aggregation",
        "fields.n.agg": "sum",
        "fields.m.agg": "max",
        "fields.s.agg": "listagg",
        "table.delete.behavior": "allow",
    },
}
PARTIAL = ("last_row", "aggregation")  # engines that take partial updates
VALUE_COLUMNS = ("n", "m", "s")


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    return sparkless_lake(tmp_path_factory.mktemp("mor"))


_names = itertools.count()


def _spec(engine: str, buckets: int, partitioned: bool, mode: str) -> dict:
    columns = [{"name": "k", "type": "INT"}, {"name": "p", "type": "STRING"}]
    columns += [
        {"name": "n", "type": "INT"},
        {"name": "m", "type": "BIGINT"},
        {"name": "s", "type": "STRING"},
    ]
    return {
        "name": f"mor.t{next(_names)}",
        "columns": columns,
        "primary_key": ["k", "p"],
        "bucket_key": ["k"],
        "partition_keys": ["p"] if partitioned else [],
        # write-only: the compactions are the test's own, at the points it chooses.
        "options": {"bucket.num": buckets, "write.merge.mode": mode, "write-only": "true", **ENGINES[engine]},
    }


@st.composite
def cases(draw):
    engine = draw(st.sampled_from(sorted(ENGINES)))
    partitioned = draw(st.booleans())
    record = st.fixed_dictionaries(
        {
            "op": st.sampled_from(["+I", "+U", "+U", "-U", "-D"]),
            "k": st.sampled_from(KEYS),
            "p": st.sampled_from(["x", "y"] if partitioned else ["x"]),
            "n": st.one_of(st.none(), st.integers(-5, 5)),
            "m": st.one_of(st.none(), st.integers(-(2**40), 2**40)),
            "s": st.one_of(st.none(), st.sampled_from(["a", "b", "é", ""])),
        }
    )
    batches = []
    for _ in range(draw(st.integers(2, 4))):
        targets = None
        if engine in PARTIAL and draw(st.integers(0, 3)) == 0:
            targets = ["k", "p", *draw(st.lists(st.sampled_from(VALUE_COLUMNS), min_size=1, unique=True))]
        batches.append(
            (
                draw(st.lists(record, max_size=12)),
                targets,
                draw(st.sampled_from([None, "minor", "full"])),
            )
        )
    # How often a merge-on-read batch rewrites a bucket whole instead (apply.REWRITE_SHARE): never unless it
    # is empty (these buckets are tiny: the default rewrites most), or as the default decides.
    share = draw(st.sampled_from([float("inf"), float("inf"), apply.REWRITE_SHARE]))
    return engine, draw(st.sampled_from([1, 3])), partitioned, batches, share


def _rows(table) -> list[tuple]:
    return sorted(tuple(r[c] for c in ("k", "p", *VALUE_COLUMNS)) for r in table.to_pylist())


def _changes(log) -> list[tuple]:
    return [
        (
            r["_batch_id"],
            r["_bucket"],
            r["_log_offset"],
            r["_change_type"],
            r["k"],
            r["p"],
            r["n"],
            r["m"],
            r["s"],
        )
        for r in log.to_pylist()
    ]


@settings(
    max_examples=200,
    deadline=dt.timedelta(seconds=20),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=cases())
def test_merge_on_read_equals_copy_on_write_and_the_reference(lake, case):
    engine, buckets, partitioned, batches, share = case
    with mock.patch.object(apply, "REWRITE_SHARE", share):
        _check(lake, engine, buckets, partitioned, batches)
    if share == float("inf") and any(r["op"] in ("+U", "-D") for b in batches[1:] for r in b[0]):
        event("merged on read")


def _check(lake, engine, buckets, partitioned, batches) -> None:
    mor = lake.create_table(_spec(engine, buckets, partitioned, "merge-on-read"))
    cow = lake.create_table(_spec(engine, buckets, partitioned, "copy-on-write"))
    spec = TableSpec.from_dict(_spec(engine, buckets, partitioned, "merge-on-read"))
    reader = FastReader(lake.settings)
    reference: dict = {}
    per_key: dict[tuple, list] = {}
    for batch_id, (records, targets, compaction) in enumerate(batches, start=1):
        payload = [
            {
                "op": r["op"],
                "data": {c: v for c, v in r.items() if c != "op" and (targets is None or c in targets)},
            }
            for r in records
        ]
        rows = [
            (
                r["op"],
                tuple(r[c] if targets is None or c in targets else None for c in ("k", "p", *VALUE_COLUMNS)),
            )
            for r in records
        ]
        log, _counts = apply_sequential(spec, reference, rows, targets)
        for op, row in log:
            per_key.setdefault(row[:2], []).append((op, row))
        for table in (mor, cow):
            lake.apply(table.full_name, payload, batch_id=batch_id, target_columns=targets)
        if compaction is not None:
            # minor: any two delta (or delete) files of a tier merge, and no full compaction however much the
            # deltas amplify these tiny tables; full: every bucket rewritten.
            options = {
                "num-sorted-run.compaction-trigger": "2",
                "compaction.max-size-amplification-percent": "1000000",
            }
            due = dataclasses.replace(mor, options={**mor.options, **options})
            done = compact.compact_table(lake.storage, due, full=compaction == "full")
            if done.minor:
                event("minor compaction")
        want = sorted(tuple(v) for v in reference.values())
        for table in (mor, cow):
            assert _rows(reader.rows_arrow(table.full_name)) == want, (table.full_name, batch_id)
    # pyiceberg's own scan of the merge-on-read table (its delete files applied by an independent reader), and
    # the changelogs: checked once, at the end (each batch's rows were checked above).
    assert _rows(lake.storage.pk_table(mor).scan().to_arrow()) == want
    mor_log, cow_log = (_changes(reader.changelog_arrow(t.full_name)) for t in (mor, cow))
    assert mor_log == cow_log
    got: dict[tuple, list] = {}
    for _b, _bucket, _offset, op, *row in mor_log:
        got.setdefault(tuple(row[:2]), []).append((op, tuple(row)))
    assert got == per_key
    assert not any(f.is_delete for f in lake.storage.table_files(lake.storage.pk_table(cow)))


def _overlapping_batches(lake, spec, batches=5) -> dict:
    """Batches merged on read, each updating a key the one before wrote (so its deletes name rows of earlier
    delta files) and one of the first batch's; the reference rows by key."""
    lake.create_table(dataclasses.replace(spec).to_dict())
    reference: dict = {}
    with mock.patch.object(apply, "REWRITE_SHARE", float("inf")):
        for batch_id in range(1, batches + 1):
            records = [
                {"op": "+U", "k": k, "p": "x", "n": batch_id, "m": k, "s": f"b{batch_id}"}
                for k in ([0, 1, 2, 3, 4, 5, 6, 7] if batch_id == 1 else [batch_id - 1, batch_id, 7])
            ]
            payload = [{"op": r["op"], "data": {c: v for c, v in r.items() if c != "op"}} for r in records]
            lake.apply(spec.full_name, payload, batch_id=batch_id)
            for r in records:
                reference[(r["k"], "x")] = tuple(r[c] for c in ("k", "p", *VALUE_COLUMNS))
    return reference


def test_a_batch_folds_the_partitions_few_deletes_into_its_own_delete_file(lake):
    """Merged on read in the applying process, a batch's delete file takes in the partition's earlier delete
    files (the commit removes them): one delete file per partition, every row as the reference has it, for
    changelake's reader and pyiceberg's; past FOLD_POSITIONS a batch writes its own delete file beside them."""
    spec = TableSpec.from_dict(_spec("last_row", 1, False, "merge-on-read"))
    reference = _overlapping_batches(lake, spec)
    files = lake.storage.table_files(lake.storage.pk_table(spec))
    deletes = [f for f in files if f.is_delete]
    assert len(deletes) == 1 and sum(compact.is_delta(f) for f in files) == 4
    named = {r["file_path"] for r in pq.read_table(local(deletes[0].path)).to_pylist()}
    data = sorted((f for f in files if not f.is_delete), key=lambda f: f.sequence_number)
    assert named == {f.path for f in data[:-1]}  # the bucket file's rows and every delta's but the last one's
    want = sorted(reference.values())
    assert _rows(FastReader(lake.settings).rows_arrow(spec.full_name)) == want
    assert _rows(lake.storage.pk_table(spec).scan().to_arrow()) == want

    wide = TableSpec.from_dict(_spec("last_row", 1, False, "merge-on-read"))
    # Each batch deletes 3 rows: batch 3 folds batch 2's 3 positions; from batch 4 on the partition's delete
    # files hold more than 4, so batches 4 and 5 write their own beside them.
    with mock.patch.object(buckets, "FOLD_POSITIONS", 4):
        reference = _overlapping_batches(lake, wide)
    files = lake.storage.table_files(lake.storage.pk_table(wide))
    assert sum(f.is_delete for f in files) == 3
    want = sorted(reference.values())
    assert _rows(FastReader(lake.settings).rows_arrow(wide.full_name)) == want
    assert _rows(lake.storage.pk_table(wide).scan().to_arrow()) == want


def test_a_fold_after_a_minor_compaction_carries_positions_of_files_it_removed(lake):
    """Inline compactions merge the deltas while the partition's one (folded) delete file still names rows of
    them; the next batch folds that file, dangling positions included (Iceberg readers ignore positions of
    files not in the table). The commit must still find the delete file's partition, and every reader the
    reference's rows. (Found by the 10,000-batch long run: the apply failed on the dangling path.)"""
    raw = _spec("last_row", 1, False, "merge-on-read")
    raw["options"] = {**raw["options"], "write-only": "false", "num-sorted-run.compaction-trigger": "2"}
    spec = TableSpec.from_dict(raw)
    reference = _overlapping_batches(lake, spec, batches=30)
    table = lake.storage.pk_table(spec)
    operations = [
        s.summary.additional_properties.get("changelake.operation") for s in table.metadata.snapshots
    ]
    assert "compact" in operations  # the inline compactions ran between the batches
    want = sorted(reference.values())
    assert _rows(FastReader(lake.settings).rows_arrow(spec.full_name)) == want
    assert _rows(table.scan().to_arrow()) == want


def test_a_minor_compaction_merges_deltas_under_every_delete_and_keeps_the_rest(lake):
    """Four batches merged on read (each updating keys the one before wrote, so deletes name rows of earlier
    delta files and of the bucket files); a minor compaction merges the deltas and the delete files: the rows
    stay the reference's, and the files are one delta file and one delete file naming bucket-file rows only."""
    spec = TableSpec.from_dict(_spec("last_row", 1, False, "merge-on-read"))
    with mock.patch.object(buckets, "FOLD_POSITIONS", 0):  # every batch keeps its own delete file
        reference = _overlapping_batches(lake, spec)
    name = spec.full_name
    table = lake.storage.pk_table(spec)
    before = lake.storage.table_files(table)
    assert sum(compact.is_delta(f) for f in before) == 4 and sum(f.is_delete for f in before) == 4
    due = dataclasses.replace(
        spec,
        options={
            **spec.options,
            "num-sorted-run.compaction-trigger": "2",
            "compaction.max-size-amplification-percent": "1000000",
        },
    )
    done = compact.compact_table(lake.storage, due)
    assert (done.minor, done.full) == (1, 0)
    after = lake.storage.table_files(lake.storage.pk_table(spec))
    deltas, deletes = [f for f in after if compact.is_delta(f)], [f for f in after if f.is_delete]
    assert len(deltas) == 1 and len(deletes) == 1
    named = {r["file_path"] for r in pq.read_table(local(deletes[0].path)).to_pylist()}
    assert named <= {
        f.path for f in after if not f.is_delete and not compact.is_delta(f)
    }  # bucket files only
    want = sorted(reference.values())
    assert _rows(FastReader(lake.settings).rows_arrow(name)) == want
    assert _rows(lake.storage.pk_table(spec).scan().to_arrow()) == want
