"""The reference model of the default engine (docs/semantics.md §2.2, §3.1, §5, §2.1) — what the Spark plan is checked against."""

import pytest

from changelake.engine.merge import apply_sequential
from changelake.errors import WriteRefusedError
from changelake.spec import TableSpec


def spec(**options):
    return TableSpec.from_dict(
        {
            "name": "t.kv",
            "columns": [
                {"name": "k", "type": "INT"},
                {"name": "v", "type": "DOUBLE"},
                {"name": "s", "type": "STRING"},
            ],
            "primary_key": ["k"],
            "options": options,
        }
    )


def test_canonical_example_spec_2_2():
    rows = {}
    log, counts = apply_sequential(
        spec(), rows, [("+I", (1, 2.0, "apple")), ("+I", (1, 4.0, "banana")), ("-D", (1, None, None))]
    )
    assert log == [
        ("+I", (1, 2.0, "apple")),
        ("-U", (1, 2.0, "apple")),
        ("+U", (1, 4.0, "banana")),
        ("-D", (1, 4.0, "banana")),
    ]
    assert rows == {}
    assert (counts.inserted, counts.updated, counts.deleted) == (1, 1, 1)


def test_identical_reupsert_still_emits_update_pair():
    rows = {(1,): (1, 1.0, "a")}
    log, _ = apply_sequential(spec(), rows, [("+U", (1, 1.0, "a"))])
    assert log == [("-U", (1, 1.0, "a")), ("+U", (1, 1.0, "a"))]


def test_reinsert_after_delete_is_insert_again_and_missing_delete_is_nothing():
    rows = {}
    log, counts = apply_sequential(
        spec(),
        rows,
        [("-D", (7, None, None)), ("+I", (7, 1.0, "x")), ("-D", (7, None, None)), ("+U", (7, 2.0, "y"))],
    )
    assert log == [("+I", (7, 1.0, "x")), ("-D", (7, 1.0, "x")), ("+I", (7, 2.0, "y"))]
    assert rows == {(7,): (7, 2.0, "y")}
    assert counts.ignored == 1


def test_update_before_records_are_dropped_and_counted():
    rows = {(1,): (1, 1.0, "a")}
    log, counts = apply_sequential(spec(), rows, [("-U", (1, 1.0, "a")), ("+U", (1, 2.0, "b"))])
    assert log == [("-U", (1, 1.0, "a")), ("+U", (1, 2.0, "b"))]
    assert counts.dropped_update_before == 1


def test_delete_behavior_ignore_and_sink_ignore_delete_drop_deletes():
    for options in ({"table.delete.behavior": "ignore"}, {"sink.ignore-delete": "true"}):
        rows = {(1,): (1, 1.0, "a")}
        log, counts = apply_sequential(spec(**options), rows, [("-D", (1, None, None))])
        assert log == [] and rows == {(1,): (1, 1.0, "a")} and counts.ignored == 1


def test_delete_behavior_disable_refuses_the_whole_batch():
    rows = {}
    with pytest.raises(WriteRefusedError, match="table.delete.behavior is set to 'disable'"):
        apply_sequential(
            spec(**{"table.delete.behavior": "disable"}),
            rows,
            [("+I", (1, 1.0, "a")), ("-D", (1, None, None))],
        )
    assert rows == {}


def test_wal_image_emits_only_update_after():
    rows = {}
    log, _ = apply_sequential(
        spec(**{"table.changelog.image": "WAL"}),
        rows,
        [("+I", (1, 1.0, "a")), ("+U", (1, 2.0, "b")), ("-D", (1, None, None))],
    )
    assert log == [("+U", (1, 1.0, "a")), ("+U", (1, 2.0, "b")), ("-D", (1, 2.0, "b"))]
