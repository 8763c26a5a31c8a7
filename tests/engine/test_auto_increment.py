"""Auto-increment columns (docs/semantics.md §8): ids from per-bucket cached segments, only on a key's first insert."""

import pytest

from changelake.errors import SpecError, WriteRefusedError
from changelake.spec import TableSpec
from changelake.storage.summary import BatchSummary

UIDS = {
    "name": "web.uid_mapping",
    "columns": [
        {"name": "user_id", "type": "STRING"},
        {"name": "uid", "type": "BIGINT"},
        {"name": "note", "type": "STRING"},
    ],
    "primary_key": ["user_id"],
    "options": {"bucket.num": 2, "auto-increment.fields": "uid"},
}


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"auto-increment.fields": "user_id"}, "Auto increment column can not be used as the primary key."),
        ({"auto-increment.fields": "note"}, "The data type of auto increment column must be INT or BIGINT."),
        ({"auto-increment.fields": "uid,note"}, "Multiple auto increment columns are not supported yet."),
        ({"auto-increment.fields": "nope"}, "Auto increment column nope does not exist in table columns ["),
        ({"table.auto-increment.cache-size": "0"}, "must be a positive integer"),
    ],
)
def test_auto_increment_options_are_validated(changes, message):
    with pytest.raises(SpecError) as err:
        TableSpec.from_dict({**UIDS, "options": {**UIDS["options"], **changes}})
    assert message in str(err.value)


def insert(user, note=None):
    return {"op": "+I", "data": {"user_id": user, "note": note}}


@pytest.mark.integration
def test_ids_per_bucket_segments_kept_on_update_and_continued_across_batches(lake):
    lake.create_table(UIDS)
    with pytest.raises(
        WriteRefusedError, match=r"auto-increment column \[uid\], but update target columns are not"
    ):
        lake.apply("web.uid_mapping", [insert("a")], batch_id=1)
    with pytest.raises(
        WriteRefusedError, match=r"Auto-increment column \[uid\] at index 1 must not be included"
    ):
        lake.apply("web.uid_mapping", [insert("a")], batch_id=1, target_columns=["user_id", "uid"])

    users = ["u1", "u2", "u3", "u4", "u5"]
    lake.apply("web.uid_mapping", [insert(u) for u in users], batch_id=1, target_columns=["user_id", "note"])
    first = {r["user_id"]: r["uid"] for r in lake.rows("web.uid_mapping").collect()}
    assert len(set(first.values())) == 5
    # Like Fluss's example: each bucket draws from its own segment of 100000 ids (1.., 100001..).
    segments = {(uid - 1) // 100_000 for uid in first.values()}
    assert segments <= {0, 1} and all((uid - 1) % 100_000 < 5 for uid in first.values())

    lake.apply(
        "web.uid_mapping",
        [insert("u1", "updated"), insert("u6")],
        batch_id=2,
        target_columns=["user_id", "note"],
    )
    second = {r["user_id"]: (r["uid"], r["note"]) for r in lake.rows("web.uid_mapping").collect()}
    assert second["u1"] == (first["u1"], "updated")  # an update keeps the id
    assert second["u6"][0] not in first.values()
    same_segment = [uid for uid in first.values() if (uid - 1) // 100_000 == (second["u6"][0] - 1) // 100_000]
    assert second["u6"][0] == max(same_segment) + 1  # the bucket continues its cached range


@pytest.mark.integration
def test_small_cache_spans_segments_and_ids_stay_unique(lake):
    lake.create_table({**UIDS, "options": {**UIDS["options"], "table.auto-increment.cache-size": 2}})
    target = ["user_id", "note"]
    lake.apply("web.uid_mapping", [insert(f"a{i}") for i in range(7)], batch_id=1, target_columns=target)
    lake.apply("web.uid_mapping", [insert(f"b{i}") for i in range(5)], batch_id=2, target_columns=target)
    uids = [r["uid"] for r in lake.rows("web.uid_mapping").collect()]
    assert len(uids) == 12 and len(set(uids)) == 12 and min(uids) >= 1
    summary = BatchSummary.from_snapshot(
        lake.storage.pk_table(lake.spec("web.uid_mapping")).current_snapshot()
    )
    assert summary.auto_increment.counter >= max(uids)  # ids come from segments the counter handed out


def test_the_last_id_of_the_type_is_handed_out_then_fluss_refusal():
    """Fluss's BoundedSegmentSequenceGenerator: the type's largest value is the last id, then the sequence
    (named by its column) refuses, in Fluss's words (SegmentSequenceGeneratorTest)."""
    from changelake.engine.merge import IdAllocator

    ids = IdAllocator([(2**31 - 2, 2**31)], 2**31 - 1, "order_no")
    assert [ids.next(), ids.next()] == [2**31 - 2, 2**31 - 1]
    with pytest.raises(WriteRefusedError) as err:
        ids.next()
    assert str(err.value) == 'Reached maximum value of sequence "<order_no>" (2147483647).'


def test_segments_a_batch_takes_one_after_another_stay_one_range(lake):
    """A bucket whose batch takes more than one segment, with no other bucket taking one in between, keeps
    what it left unused whole: a key written six times takes two segments of 5 but one id, and the next six
    new keys go on from 2, as Fluss's bucket counts on (FlussTableITCase's single-bucket table, cache 5)."""
    spec = {
        **UIDS,
        "options": {"bucket.num": 1, "auto-increment.fields": "uid", "table.auto-increment.cache-size": 5},
    }
    lake.create_table(spec)
    target = ["user_id", "note"]
    lake.apply("web.uid_mapping", [insert("a", str(i)) for i in range(6)], batch_id=1, target_columns=target)
    lake.apply("web.uid_mapping", [insert(u) for u in "bcdefg"], batch_id=2, target_columns=target)
    lake.apply("web.uid_mapping", [insert(u) for u in "dh"], batch_id=3, target_columns=target)
    rows = lake.rows_arrow("web.uid_mapping").to_pylist()
    assert {r["user_id"]: r["uid"] for r in rows} == {u: i for i, u in enumerate("abcdefgh", start=1)}
    summary = BatchSummary.from_snapshot(
        lake.storage.pk_table(lake.spec("web.uid_mapping")).current_snapshot()
    )
    assert summary.auto_increment.counter == 10  # two segments, no id given up
