"""Partial updates (docs/semantics.md §6, §4.3): target columns, partial deletes, and Fluss's refusals."""

import json

import pytest

from changelake.engine.merge import apply_sequential
from changelake.errors import WriteRefusedError
from changelake.spec import TableSpec
from changelake.storage.summary import BatchSummary
from tests.helpers import changelog_of, rows_of

T = {
    "name": "t.partial",
    "columns": [
        {"name": "k", "type": "INT"},
        {"name": "v1", "type": "DOUBLE"},
        {"name": "v2", "type": "STRING"},
    ],
    "primary_key": ["k"],
}


def spec(**options):
    return TableSpec.from_dict({**T, "options": options})


def test_docs_example_two_column_sets_build_one_row():
    s, rows = spec(), {}
    log1, _ = apply_sequential(s, rows, [("+I", (1, 2.0, "ignored")), ("+I", (2, 3.0, None))], ["k", "v1"])
    assert log1 == [
        ("+I", (1, 2.0, None)),
        ("+I", (2, 3.0, None)),
    ]  # non-target columns of a new key are null
    log2, _ = apply_sequential(s, rows, [("+I", (1, None, "t1")), ("+I", (2, 99.0, "t2"))], ["k", "v2"])
    assert rows == {(1,): (1, 2.0, "t1"), (2,): (2, 3.0, "t2")}
    assert log2[:2] == [("-U", (1, 2.0, None)), ("+U", (1, 2.0, "t1"))]


def test_key_only_target_on_existing_key_is_a_noop_and_all_columns_is_a_full_write():
    rows = {(1,): (1, 1.0, "a")}
    log, counts = apply_sequential(spec(), rows, [("+U", (1, 5.0, "z"))], ["k"])
    assert log == [] and rows == {(1,): (1, 1.0, "a")} and counts.ignored == 1
    log, _ = apply_sequential(spec(), rows, [("+U", (1, 5.0, "z"))], ["v2", "k", "v1", "k"])
    assert rows == {(1,): (1, 5.0, "z")}


def test_partial_delete_nulls_targets_or_removes_the_row():
    rows = {(1,): (1, 1.0, "a"), (2,): (2, None, "b")}
    log, counts = apply_sequential(
        spec(), rows, [("-D", (1, None, None)), ("-D", (2, None, None))], ["k", "v2"]
    )
    # key 1 keeps a non-null non-target column (v1) -> update; key 2 has nothing else left -> delete
    assert log == [("-U", (1, 1.0, "a")), ("+U", (1, 1.0, None)), ("-D", (2, None, "b"))]
    assert rows == {(1,): (1, 1.0, None)} and (counts.updated, counts.deleted) == (1, 1)


def test_wal_partial_update_keeps_insert():
    log, _ = apply_sequential(
        spec(**{"table.changelog.image": "wal"}), {}, [("+I", (1, 1.0, "a"))], ["k", "v1"]
    )
    assert log == [("+I", (1, 1.0, None))]


def test_aggregation_partial_aggregates_targets_and_keeps_the_rest():
    s = TableSpec.from_dict({**T, "options": {"table.merge-engine": "aggregation", "fields.v1.agg": "sum"}})
    rows = {}
    apply_sequential(s, rows, [("+I", (1, 1.0, "a"))])
    log, _ = apply_sequential(s, rows, [("+I", (1, 2.0, "b"))], ["k", "v1"])
    assert rows == {(1,): (1, 3.0, "a")}
    log, _ = apply_sequential(s, rows, [("+I", (1, 9.0, "c"))], ["k"])  # key only: -U/+U with the same values
    assert log == [("-U", (1, 3.0, "a")), ("+U", (1, 3.0, "a"))]


@pytest.mark.parametrize(
    "options, columns, target, message",
    [
        (
            {},
            T["columns"],
            ["v1"],
            "The target write columns [v1] must contain the primary key columns [k].",
        ),
        ({}, T["columns"], ["k", "nope"], "Can not find target column: nope for table t.partial."),
        (
            {"table.merge-engine": "first_row"},
            T["columns"],
            ["k", "v1"],
            "Partial update is not supported for the first_row merge engine.",
        ),
        (
            {"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "v0"},
            [*T["columns"], {"name": "v0", "type": "INT"}],
            ["k", "v1", "v2", "v0"],
            "Partial update is not supported for the versioned merge engine.",
        ),
        (
            {},
            [*T["columns"], {"name": "v3", "type": "INT", "nullable": False}],
            ["k", "v1"],
            "Partial Update requires all columns except primary key to be nullable, but column v3 is NOT NULL.",
        ),
        (
            {"table.merge-engine": "aggregation"},
            [*T["columns"], {"name": "v3", "type": "INT", "nullable": False}],
            ["k", "v1"],
            "Partial aggregate requires all columns except primary key to be nullable, but column v3",
        ),
    ],
)
def test_refused_partial_writes(options, columns, target, message):
    s = TableSpec.from_dict({**T, "columns": columns, "options": options})
    with pytest.raises(WriteRefusedError) as err:
        apply_sequential(s, {}, [], target)
    assert message in str(err.value)


@pytest.mark.integration
def test_partial_batches_through_spark_with_a_landed_manifest(lake):
    lake.create_table(T)
    landing = lake.settings.landing_dir / "t.partial"
    landing.mkdir(parents=True)
    (landing / "1.jsonl").write_text(
        '{"op": "+I", "data": {"k": 1, "v1": 2.0}}\n{"op": "+I", "data": {"k": 2, "v1": 3.0}}\n'
    )
    (landing / "1.manifest.json").write_text(json.dumps({"target_columns": ["k", "v1"]}))
    (landing / "2.jsonl").write_text(
        '{"op": "+I", "data": {"k": 1, "v2": "t1"}}\n{"op": "+I", "data": {"k": 2, "v2": "t2"}}\n'
    )
    (landing / "2.manifest.json").write_text(json.dumps({"target_columns": ["k", "v2"]}))
    results = lake.apply_pending("t.partial")
    assert rows_of(lake.rows("t.partial")) == [(1, 2.0, "t1"), (2, 3.0, "t2")]
    assert [c[1] for c in changelog_of(lake, "t.partial")] == ["+I", "+I", "-U", "+U", "-U", "+U"]
    summary = BatchSummary.from_snapshot(lake.storage.pk_table(lake.spec("t.partial")).current_snapshot())
    assert summary.target_columns == ("k", "v2") and results[1].counts["updated"] == 2
    # The same file as a full-row write is a different batch input: refused as a replay of batch 2.
    from changelake.errors import BatchRefusedError
    from changelake.storage.summary import WriterPosition

    with pytest.raises(BatchRefusedError, match="landing batch 2 was already applied from a different input"):
        lake.applier.apply_files(lake.spec("t.partial"), WriterPosition("landing", 2), [landing / "2.jsonl"])
    with pytest.raises(WriteRefusedError, match="must contain the primary key"):
        lake.apply("t.partial", [{"op": "+I", "data": {"k": 3}}], batch_id=3, target_columns=["v1"])
