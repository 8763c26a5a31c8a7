"""The batch-summary protocol (changelake.storage.summary): typed reads of what committed batches hold, the
stored format unchanged, and a malformed summary named by its key. No Spark."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from changelake.engine import buckets, merge
from changelake.errors import ChangelakeError
from changelake.storage import summary
from changelake.storage.summary import AutoIncrementState, BatchSummary, ChangelogSummary, WriterPosition

# Captured from a committed snapshot (batch 2 of an upsert-kafka table with an auto-increment column, Kafka
# offset dedup and a quarantined line, applied in process by the apply engine before the summary protocol
# was typed): Iceberg's own properties and all of changelake's, as pyiceberg read them back.
COMMITTED = {
    "added-files-size": "2244",
    "removed-files-size": "2250",
    "added-data-files": "2",
    "deleted-data-files": "2",
    "added-records": "4",
    "deleted-records": "3",
    "changed-partition-count": "2",
    "changelake.batch-id": "2",
    "changelake.checksum": "4d9ab0d24cbb39b8c55bac64680b91783b7899f33fe5a80dfedb3745a77a8b3b",
    "changelake.log-start-offset": "3",
    "changelake.log-end-offset": "8",
    "changelake.changelog-manifest": "file:///tmp/cap/home/warehouse/cap/users/metadata/changelake/"
    "changelog-000000000002-046e7ceee3f8.json",
    "changelake.changelog-records": "5",
    "changelake.target-columns": "user_id,v",
    "changelake.input": '{"columns": ["user_id", "uid", "v"], "files": ["2.jsonl"], "format": null, '
    '"landed": true, "source": {"dedup": "kafka-offsets", "format": "upsert-kafka", "on-bad-record": '
    '"quarantine"}, "target_columns": ["user_id", "v"]}',
    "changelake.kafka-offsets": '{"users:0": 5}',
    "changelake.auto-increment": '{"counter": 200000, "buckets": {"[0]": [4, 100000], "[1]": [100002, 200000]}}',
    "changelake.touched-buckets": "2",
    "changelake.dead-letter": "file:///tmp/cap/home/warehouse/cap/users/dead-letter/batch-000000000002.jsonl",
    "changelake.source.messages": "5",
    "changelake.source.skipped": "0",
    "changelake.source.quarantined": "1",
    "changelake.source.redelivered": "1",
    "changelake.source.deduplicated": "1",
    "changelake.records": "3",
    "changelake.inserted": "1",
    "changelake.updated": "2",
    "changelake.deleted": "0",
    "changelake.ignored": "0",
    "changelake.dropped_update_before": "0",
    "changelake.committed-at-ms": "1795337316356",
    "total-data-files": "2",
    "total-delete-files": "0",
    "total-records": "4",
    "total-files-size": "2244",
    "total-position-deletes": "0",
    "total-equality-deletes": "0",
}
# The same table's changelog snapshot of that batch.
COMMITTED_CHANGELOG = {
    "added-files-size": "4771",
    "added-data-files": "2",
    "added-records": "5",
    "changed-partition-count": "1",
    "changelake.batch-id": "2",
    "changelake.log-start-offset": "3",
    "changelake.log-end-offset": "8",
    "changelake.pk-snapshot-id": "1123545789831859310",
    "total-data-files": "4",
    "total-records": "8",
}


def ours(props: dict[str, str]) -> list[tuple[str, str]]:
    """changelake's properties, in order."""
    return [(k, v) for k, v in props.items() if k.startswith("changelake.")]


def test_reads_a_summary_written_in_the_current_format():
    s = BatchSummary.from_properties(COMMITTED)
    assert (s.batch_id, s.log_start_offset, s.log_end_offset, s.changelog_records) == (2, 3, 8, 5)
    assert s.checksum.startswith("4d9ab0d24cbb") and s.changelog_manifest.endswith("-046e7ceee3f8.json")
    assert s.target_columns == ("user_id", "v")
    assert s.input["files"] == ["2.jsonl"] and s.input["landed"] is True and s.input["format"] is None
    assert s.input["source"]["format"] == "upsert-kafka"
    assert s.kafka_offsets == {"users:0": 5}
    assert s.auto_increment == AutoIncrementState(200000, {"[0]": (4, 100000), "[1]": (100002, 200000)})
    assert s.touched_buckets == 2
    assert s.dead_letter.endswith("/dead-letter/batch-000000000002.jsonl")
    assert s.source == {"messages": 5, "skipped": 0, "quarantined": 1, "redelivered": 1, "deduplicated": 1}
    assert s.counts == {
        "records": 3,
        "inserted": 1,
        "updated": 2,
        "deleted": 0,
        "ignored": 0,
        "dropped_update_before": 0,
    }
    assert s.committed_at_ms == 1795337316356


def test_writing_it_again_gives_the_same_properties_byte_for_byte():
    assert list(BatchSummary.from_properties(COMMITTED).to_properties().items()) == ours(COMMITTED)


def test_changelog_summary_reads_and_writes_its_format():
    s = ChangelogSummary.from_properties(COMMITTED_CHANGELOG)
    assert s == ChangelogSummary(
        batch_id=2, log_start_offset=3, log_end_offset=8, pk_snapshot_id=1123545789831859310
    )
    assert list(s.to_properties().items()) == ours(COMMITTED_CHANGELOG)


def test_round_trip_of_a_batch_without_the_optional_parts():
    s = BatchSummary(
        batch_id=7, checksum="abc", changelog_manifest="m.json", log_start_offset=4, log_end_offset=9
    )
    props = s.to_properties()
    # "none" is how it has always been written: empty target columns and dead letter, no key for the rest.
    assert props[summary.TARGET_COLUMNS] == "" and props[summary.DEAD_LETTER] == ""
    assert not {summary.INPUT, summary.KAFKA_OFFSETS, summary.AUTO_INCREMENT, summary.COMMITTED_AT_MS} & set(
        props
    )
    assert all(props[k] == "0" for k in (*summary.SOURCE_KEYS.values(), *summary.COUNT_KEYS.values()))
    assert BatchSummary.from_properties(props) == s


def test_round_trip_of_a_full_batch():
    s = replace(
        BatchSummary.from_properties(COMMITTED),
        target_columns=("k",),
        input={"files": ["9.parquet"], "landed": False, "format": "changelog-parquet"},
        kafka_offsets={"b:1": 10, "a:0": 3},
        auto_increment=AutoIncrementState(5, {"[1]": (2, 5), "[0]": (1, 1)}),
    )
    props = s.to_properties()
    assert props[summary.KAFKA_OFFSETS] == '{"a:0": 3, "b:1": 10}'  # sorted, as always
    assert props[summary.AUTO_INCREMENT] == '{"counter": 5, "buckets": {"[1]": [2, 5], "[0]": [1, 1]}}'
    assert BatchSummary.from_properties(props) == s


def test_keys_older_batches_lack_read_as_their_defaults():
    later = (
        "input",
        "source.",
        "dead-letter",
        "touched-buckets",
        "kafka-offsets",
        "auto-increment",
        "committed",
    )
    older = {k: v for k, v in COMMITTED.items() if not k.startswith(tuple(summary.PREFIX + p for p in later))}
    s = BatchSummary.from_properties(older)
    assert (s.batch_id, s.counts["inserted"], s.log_end_offset) == (2, 1, 8)
    assert (s.input, s.kafka_offsets, s.auto_increment, s.dead_letter, s.committed_at_ms) == (
        None,
        {},
        None,
        None,
        None,
    )
    assert s.touched_buckets == 0 and set(s.source.values()) == {0}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("changelake.batch-id", "two"),
        ("changelake.batch-id", None),
        ("changelake.checksum", None),
        ("changelake.changelog-manifest", None),
        ("changelake.log-end-offset", "8.0"),
        ("changelake.inserted", ""),
        ("changelake.source.redelivered", "1e3"),
        ("changelake.touched-buckets", "two"),
        ("changelake.committed-at-ms", "now"),
        ("changelake.input", "{not json"),
        ("changelake.input", '["2.jsonl"]'),
        ("changelake.kafka-offsets", '{"users:0": "5"}'),
        ("changelake.kafka-offsets", "[5]"),
        ("changelake.auto-increment", '{"counter": "1", "buckets": {}}'),
        ("changelake.auto-increment", '{"counter": 1, "buckets": {"[0]": [4]}}'),
    ],
)
def test_a_malformed_summary_is_an_error_naming_the_key(key, value):
    props = {k: v for k, v in COMMITTED.items() if k != key}
    if value is not None:
        props[key] = value
    with pytest.raises(ChangelakeError, match=f"malformed batch summary: {key} is"):
        BatchSummary.from_properties(props)


@pytest.mark.parametrize("key", ["changelake.pk-snapshot-id", "changelake.log-start-offset"])
def test_a_malformed_changelog_summary_is_an_error_naming_the_key(key):
    with pytest.raises(ChangelakeError, match=f"{key} is missing"):
        ChangelogSummary.from_properties({k: v for k, v in COMMITTED_CHANGELOG.items() if k != key})
    with pytest.raises(ChangelakeError, match=f"{key} is not an integer"):
        ChangelogSummary.from_properties({**COMMITTED_CHANGELOG, key: "x"})


def test_batch_of_follows_the_batch_sequence_of_either_table():
    assert summary.batch_of(COMMITTED) == 2 and summary.batch_of(COMMITTED_CHANGELOG) == 2
    assert summary.batch_of({"total-records": "4"}) is None
    with pytest.raises(ChangelakeError, match="changelake.batch-id is not an integer"):
        summary.batch_of({"changelake.batch-id": "2;"})


def test_from_snapshot_is_none_without_a_batch():
    class Snap:
        def __init__(self, props):
            self.summary = type("Summary", (), {"additional_properties": props})()

    assert BatchSummary.from_snapshot(None) is None and ChangelogSummary.from_snapshot(None) is None
    assert BatchSummary.from_snapshot(Snap({"total-records": "0"})) is None
    assert BatchSummary.from_snapshot(Snap(COMMITTED)) == BatchSummary.from_properties(COMMITTED)
    assert ChangelogSummary.from_snapshot(Snap(COMMITTED_CHANGELOG)).pk_snapshot_id == 1123545789831859310


def test_counters_are_the_engines():
    """The stored counters are the ones the merge and the bucket tasks count, in the same order."""
    assert summary.COUNTERS == tuple(merge.BatchCounts().as_dict()) == buckets.COUNTERS
    assert set(buckets.SOURCE_COUNTERS) <= set(summary.SOURCE_COUNTERS)
    with pytest.raises(ValueError, match="unknown counter"):
        BatchSummary(batch_id=1, checksum="c", changelog_manifest="m", counts={"upserted": 1})


def test_a_batch_applied_in_process_commits_the_summary_its_result_reports(home):
    """The apply engine writes through the protocol: Storage.state and the result agree with what was read
    back from the catalog, and the commit is stamped with its time."""
    from changelake.config import load_settings
    from changelake.engine.apply import Applier
    from changelake.spec import TableSpec
    from changelake.storage.iceberg import Storage

    def no_spark():
        raise AssertionError("a small batch started Spark")

    storage = Storage(load_settings(home=home, tables_dir=home / "tables"))
    spec = TableSpec.from_dict(
        {
            "name": "t.kv",
            "columns": [{"name": "k", "type": "INT"}, {"name": "v", "type": "STRING"}],
            "primary_key": ["k"],
            "options": {"bucket.num": 2},
        }
    )
    spec = storage.create(spec)
    path = home / "1.jsonl"
    path.write_text("".join(json.dumps({"op": "+I", "data": {"k": k, "v": "x"}}) + "\n" for k in range(5)))
    result = Applier(no_spark, storage, lambda m: None).apply_files(
        spec, WriterPosition("landing", 1), [path]
    )
    state = Storage.state(storage.pk_table(spec))
    committed = state.batch
    assert (committed.batch_id, state.last_batch, state.snapshot_id) == (1, 1, result.snapshot_id)
    assert committed.counts == result.counts and committed.counts["inserted"] == 5
    assert committed.source == result.source and committed.source["messages"] == 5
    assert (committed.log_start_offset, committed.log_end_offset) == (0, result.log_end_offset) == (0, 5)
    assert committed.input["files"] == ["1.jsonl"] and committed.input["landed"] is False
    assert committed.committed_at_ms is not None and committed.target_columns is None
    logged = ChangelogSummary.from_snapshot(storage.changelog_table(spec).current_snapshot())
    assert logged == ChangelogSummary(1, 0, 5, result.snapshot_id)


# --- the table's writers (issue 41) --------------------------------------------------------------------------
def _legacy(batch_id: int, files: list[str] | None, landed: bool = False) -> BatchSummary:
    """A batch committed before writers were recorded: how it was read is all that tells its writer."""
    how = None if files is None else {"files": files, "landed": landed, "columns": [], "source": {}}
    return BatchSummary(batch_id=batch_id, checksum="c", changelog_manifest="m", input=how)


def test_a_batch_committed_before_writers_keeps_its_id_as_its_number_and_its_writer_is_told_from_its_input():
    batches = [
        _legacy(1, None),  # before inputs were recorded: landed files were all there was
        _legacy(2, ["2.jsonl"], landed=True),
        _legacy(3, ["sql-0123456789abcdef0123-ffff.jsonl"]),
        _legacy(4, ["api-0123.jsonl"]),  # API records and lookup inserts were staged alike
        _legacy(5, ["sql-9999.jsonl"]),
        _legacy(6, ["6.jsonl"], landed=True),
    ]
    assert [b.position for b in batches] == [
        WriterPosition("landing", 1),
        WriterPosition("landing", 2),
        WriterPosition("sql", 3),
        WriterPosition("api", 4),
        WriterPosition("sql", 5),
        WriterPosition("landing", 6),
    ]
    # A migrated table: landed batches 7, 8, ... are the landing writer's next, whatever the SQL batches took.
    assert summary.writer_positions(batches) == {"landing": 6, "sql": 5, "api": 4}
    assert summary.BatchSummary.from_properties(COMMITTED).position == WriterPosition("landing", 2)


def test_writer_fields_round_trip_and_stay_out_of_the_history():
    from changelake.storage import history

    s = replace(_legacy(7, ["x.jsonl"]), writer="etl", writer_seq=3, writers={"etl": 3, "landing": 4})
    props = s.to_properties()
    assert (props["changelake.writer"], props["changelake.writer-seq"]) == ("etl", "3")
    assert json.loads(props["changelake.writers"]) == {"etl": 3, "landing": 4}
    back = BatchSummary.from_properties(props)
    assert back.position == WriterPosition("etl", 3) and back.writers == {"etl": 3, "landing": 4}
    # The positions are the latest snapshot's state: a history entry keeps its batch's own writer, not them.
    (entry,) = history.decode(history.encode([(1, props)]))
    assert entry.batch.position == WriterPosition("etl", 3) and entry.batch.writers is None
    with pytest.raises(ChangelakeError, match="changelake.writers is not a JSON object of writer positions"):
        BatchSummary.from_properties({**props, "changelake.writers": '{"etl": "3"}'})


@pytest.mark.parametrize("name", ["", "Etl", "1job", "a b", "x" * 65, 7, "sql", "lookup", "kafka-orders"])
def test_writer_names_the_api_takes(name):
    with pytest.raises(ChangelakeError):
        summary.check_writer_name(name)


def test_reserved_writer_names_are_changelake_s_own():
    assert summary.check_writer_name("sql", internal=True) == "sql"
    assert summary.check_writer_name("etl.daily-2") == "etl.daily-2"
    assert summary.check_writer_name("landing") == "landing"  # a landed batch's file applied from elsewhere
