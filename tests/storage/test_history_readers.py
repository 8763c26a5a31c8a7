"""Readers of history say what expired (issue 32): ``scan --at-batch`` of a batch whose snapshot expired,
``changelog --from-batch`` below what ``table.log.ttl`` kept; the batch history keeps the expired batches'
summaries for replays, dead letters and status. No Spark."""

from __future__ import annotations

import json
import time

import pytest

from changelake.engine import compact
from changelake.errors import ChangelakeError
from changelake.storage.fastread import FastReader
from tests.helpers import sparkless_lake

SPEC = {
    "name": "h.t",
    "columns": [{"name": "k", "type": "INT"}, {"name": "v", "type": "STRING"}],
    "primary_key": ["k"],
    "options": {
        "bucket.num": 2,
        "write-only": "true",
        "snapshot.num-retained.min": "2",
        "snapshot.num-retained.max": "3",
        "snapshot.time-retained": "0 s",
    },
}


@pytest.fixture
def lake(tmp_path):
    lake = sparkless_lake(tmp_path)
    (lake.settings.tables_dir / "h.t.yaml").write_text(json.dumps(SPEC))
    lake.create_table(SPEC)
    for b in range(1, 9):
        lake.apply("h.t", [{"op": "+I", "data": {"k": b, "v": f"v{b}"}}], batch_id=b)
    return lake


def test_an_expired_batch_is_said_to_have_expired_and_stays_in_the_history(lake):
    reader = FastReader(lake.settings)
    assert [r["k"] for r in reader.rows_arrow("h.t", at_batch=2, by_key=True).to_pylist()] == [1, 2]
    (report,) = lake.maintain("h.t", compaction=False)
    assert report.to_dict()["expired_snapshots"] >= 5
    kept = "snapshots are retained for batches 7..8"
    for read in (lambda: reader.rows_arrow("h.t", at_batch=2), lambda: lake.rows("h.t", at_batch=2)):
        with pytest.raises(
            ChangelakeError, match=f"batch 2 was applied, but its snapshot has expired.*{kept}"
        ):
            read()
    with pytest.raises(ChangelakeError, match="batch 12 is not in the table's history"):
        reader.rows_arrow("h.t", at_batch=12)
    assert [r["k"] for r in reader.rows_arrow("h.t", at_batch=8, by_key=True).to_pylist()] == list(
        range(1, 9)
    )
    (status,) = lake.status()
    assert (status["snapshots"], status["history_batches"]) == (2, 6)
    # The history answers for the expired batches: their summaries in order, the retained ones after them.
    history = lake.storage.batch_history(lake.storage.pk_table(lake.spec("h.t")))
    assert [b.batch_id for _, b in history] == list(range(1, 9))
    assert all(b.counts["inserted"] == 1 for _, b in history)


def test_the_changelog_below_table_log_ttl_is_gone_and_said_to_be(lake):
    reader = FastReader(lake.settings)
    assert reader.changelog_arrow("h.t", 1, 8).num_rows == 8
    spec = lake.spec("h.t")
    later = time.time() + 8 * 86_400  # a week and a day on: every file older than table.log.ttl (7 d)
    done = compact.compact_changelog(lake.storage, spec, now_s=later)
    assert done.files_removed == 8 and lake.storage.data_files(lake.storage.changelog_table(spec)) == []
    with pytest.raises(
        ChangelakeError, match=r"the changelog of batches before 9 has expired \(table.log.ttl\)"
    ):
        reader.changelog_arrow("h.t", 3, 5)
    assert reader.changelog_arrow("h.t").num_rows == 0  # what is kept: nothing
    lake.apply("h.t", [{"op": "+I", "data": {"k": 9, "v": "v9"}}], batch_id=9)
    assert [r["k"] for r in reader.changelog_arrow("h.t", 9).to_pylist()] == [9]
    assert [r["k"] for r in reader.rows_arrow("h.t", by_key=True).to_pylist()] == list(
        range(1, 10)
    )  # rows stay


def test_a_short_ttl_keeps_the_recent_batches(lake):
    spec = lake.spec("h.t")
    files = lake.storage.data_files(lake.storage.changelog_table(spec))
    newest = max(f.batches[1] for f in files)
    ts_id = lake.storage.changelog_table(spec).schema().find_field("_commit_timestamp").field_id
    uppers = sorted(compact._upper(f, ts_id) for f in files)
    cutoff = (uppers[4] + uppers[5]) / 2 / 1e6  # between the fifth and the sixth file's newest record
    short = {**spec.options, "table.log.ttl": "1 s"}
    import dataclasses

    done = compact.compact_changelog(lake.storage, dataclasses.replace(spec, options=short), now_s=cutoff + 1)
    assert done.files_removed == 5
    reader = FastReader(lake.settings)
    assert [r["_batch_id"] for r in reader.changelog_arrow("h.t", 6).to_pylist()] == list(
        range(6, newest + 1)
    )
    with pytest.raises(ChangelakeError, match="before 6 has expired"):
        reader.changelog_arrow("h.t", 5)
