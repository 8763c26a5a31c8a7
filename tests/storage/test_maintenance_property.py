"""Snapshot expiry, the batch history, compaction and the orphan sweep change nothing a user reads (issue 32).

Random sequences of applies (some with bad records, quarantined), replays of earlier batches (the same input:
a no-op; other input: refused), expiries, compactions and orphan sweeps run on a table with a tiny retention;
the same applies run on a twin that never expires nor compacts. After every step the two agree on rows,
changelog, status totals and dead letters, and pyiceberg's own scan reads the maintained table. No Spark.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changelake.errors import BatchRefusedError
from changelake.storage.fastread import FastReader
from tests.helpers import sparkless_lake

pytestmark = pytest.mark.slow

_names = itertools.count()


def _spec(name: str, options: dict) -> dict:
    return {
        "name": name,
        "columns": [
            {"name": "k", "type": "INT"},
            {"name": "v", "type": "STRING"},
            {"name": "n", "type": "TINYINT"},
        ],
        "primary_key": ["k"],
        "source": {"on-bad-record": "quarantine"},
        "options": {"bucket.num": 2, **options},
    }


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    return sparkless_lake(tmp_path_factory.mktemp("maintenance"))


record = st.fixed_dictionaries(
    {
        "op": st.sampled_from(["+I", "+U", "+U", "-D"]),
        "k": st.integers(0, 40),
        "v": st.sampled_from(["a", "b", "c"]),
        "n": st.integers(-128, 200),  # above 127 does not fit a TINYINT: quarantined
    }
)
action = st.one_of(
    st.tuples(st.just("apply"), st.lists(record, min_size=1, max_size=15)),
    st.tuples(st.just("replay"), st.integers(0, 100)),
    st.tuples(st.just("replay-changed"), st.integers(0, 100)),
    st.tuples(st.just("expire"), st.none()),
    st.tuples(st.just("compact"), st.booleans()),
    st.tuples(st.just("orphans"), st.none()),
)


@settings(
    max_examples=50,
    deadline=dt.timedelta(seconds=30),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    actions=st.lists(action, min_size=3, max_size=14),
    retained=st.integers(1, 3),
    history=st.sampled_from([1, 2, 100_000]),
    write_only=st.booleans(),
)
def test_maintenance_changes_nothing_a_reader_sees(
    lake, tmp_path_factory, actions, retained, history, write_only
):
    n = next(_names)
    kept = f"m.kept{n}"  # never expires, never compacts
    maintained = f"m.maint{n}"
    never = {"write-only": "true", "snapshot.num-retained.min": "1000", "snapshot.num-retained.max": "1000"}
    options = {
        "snapshot.num-retained.min": str(retained),
        "snapshot.num-retained.max": str(retained + 1),
        "snapshot.time-retained": "0 s",
        "batch-history.num-retained": str(history),
        "num-sorted-run.compaction-trigger": "2",
        "write-only": str(write_only).lower(),
    }
    for old in lake.settings.tables_dir.glob("*.yaml"):  # status lists the tables of spec files: these two
        old.unlink()
    for name, opts in ((kept, never), (maintained, options)):
        (lake.settings.tables_dir / f"{name}.yaml").write_text(json.dumps(_spec(name, opts)))
        lake.create_table(_spec(name, opts))
    files = tmp_path_factory.mktemp("batches")
    reader = FastReader(lake.settings)
    landed: list = []
    if actions[0][0] != "apply":
        actions = [("apply", [{"op": "+I", "k": 1, "v": "a", "n": 1}]), *actions]
    for kind, arg in actions:
        if kind == "apply":
            batch_id = len(landed) + 1
            path = files / f"{batch_id}.jsonl"
            path.write_text(
                "".join(json.dumps({"op": r["op"], "data": {c: r[c] for c in "kvn"}}) + "\n" for r in arg)
            )
            landed.append(path)
            for table in (kept, maintained):
                assert lake.apply(table, file=path, batch_id=batch_id).status == "applied"
        elif kind in ("replay", "replay-changed"):
            batch_id = arg % len(landed) + 1
            if kind == "replay":
                assert (
                    lake.apply(maintained, file=landed[batch_id - 1], batch_id=batch_id).status
                    == "already-applied"
                )
            else:
                changed = files / f"{batch_id}-changed.jsonl"
                changed.write_text(landed[batch_id - 1].read_text() + '{"op": "-D", "data": {"k": 999}}\n')
                try:
                    result = lake.apply(maintained, file=changed, batch_id=batch_id)
                except BatchRefusedError as e:
                    assert "already applied from a different input" in str(e)
                else:
                    # Only a batch older than the history's window: its input can no longer be checked.
                    assert (
                        history < len(landed) and result.status == "already-applied" and result.counts == {}
                    )
        elif kind == "expire":
            lake.maintain(maintained, compaction=False)
        elif kind == "compact":
            lake.maintain(maintained, expiry=False, full=arg)
        else:
            lake.maintain(maintained, compaction=False, expiry=False, orphans_older_than_s=0.0)
        _assert_same(lake, reader, kept, maintained)
    table = lake.storage.pk_table(lake.spec(maintained))
    if not write_only or any(kind == "expire" for kind, _ in actions):
        assert (
            len(table.metadata.snapshots) <= retained + 1 + 10
        )  # the retention, and the ten an apply waits for


def _assert_same(lake, reader: FastReader, kept: str, maintained: str) -> None:
    def rows(name):
        return sorted(tuple(r.values()) for r in reader.rows_arrow(name).to_pylist())

    def log(name):
        return [
            tuple(v for c, v in r.items() if c != "_commit_timestamp")
            for r in reader.changelog_arrow(name).to_pylist()
        ]

    assert rows(maintained) == rows(kept)
    scanned = lake.storage.pk_table(lake.spec(maintained)).scan().to_arrow().drop_columns(["_bucket"])
    assert sorted(tuple(r.values()) for r in scanned.to_pylist()) == rows(kept)
    assert log(maintained) == log(kept)
    status = {s["table"]: s for s in lake.status()}
    for key in ("last_batch", "rows", "changelog_records", "quarantined", "redelivered", "deduplicated"):
        assert status[maintained][key] == status[kept][key], key
    assert lake.dead_letters(maintained) == lake.dead_letters(kept)
