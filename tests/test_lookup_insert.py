"""Lookup with insert-if-not-exists (issue 14; Fluss's ``Lookuper`` with ``insertIfNotExists``): a key that
is not there is inserted through the exactly-once apply (key columns, nulls, a new auto-increment id) and
its stored row returned; a key that is there is returned without writing; batches of keys; Fluss's refusals
with its messages; the CLI; two processes inserting the same new keys end with one id per key."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from changelake import ChangeLake
from changelake.errors import ChangelakeError
from changelake.storage.iceberg import Storage
from changelake.storage.summary import BatchSummary
from tests.helpers import sparkless_lake

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


@pytest.fixture
def sparkless(tmp_path) -> ChangeLake:
    return sparkless_lake(tmp_path)


def last_batch(lake, table: str) -> int:
    return Storage.state(lake.storage.pk_table(lake.spec(table))).last_batch


# --- refusals (no Spark: they come before any write) ------------------------------------------------------
def test_a_not_null_column_outside_the_key_refuses_the_lookuper(sparkless):
    columns = [*UIDS["columns"][:2], {"name": "note", "type": "STRING", "nullable": False}]
    sparkless.create_table({**UIDS, "columns": columns})
    with pytest.raises(ChangelakeError) as err:
        sparkless.lookup("web.uid_mapping", {"user_id": "a"}, insert_if_not_exists=True)
    assert str(err.value) == (
        "Lookup with insertIfNotExists enabled cannot be created for table 'web.uid_mapping', because it "
        "contains non-nullable columns that are not primary key columns or auto increment columns: [note]. "
    )
    assert last_batch(sparkless, "web.uid_mapping") == 0
    # Without the insert it is a plain lookup: allowed, nothing found.
    assert sparkless.lookup("web.uid_mapping", {"user_id": "a"}) == []


def test_prefix_lookups_and_partial_keys_cannot_insert(sparkless):
    spec = {**UIDS, "columns": [{"name": "region", "type": "STRING"}, *UIDS["columns"]],
            "primary_key": ["region", "user_id"], "bucket_key": ["region"]}  # fmt: skip
    sparkless.create_table(spec)
    with pytest.raises(ChangelakeError, match="insertIfNotExists cannot be enabled for prefix key lookup"):
        sparkless.lookup("web.uid_mapping", {"region": "eu"}, prefix=True, insert_if_not_exists=True)
    with pytest.raises(ChangelakeError, match=r"must bind exactly the primary key \['region', 'user_id'\]"):
        sparkless.lookup_keys("web.uid_mapping", [{"user_id": "a"}], insert_if_not_exists=True)
    assert last_batch(sparkless, "web.uid_mapping") == 0


@pytest.mark.parametrize("engine", ["first_row", "versioned"])
def test_engines_without_partial_writes_refuse_the_insert(sparkless, engine):
    options = {"bucket.num": 1, "table.merge-engine": engine}
    if engine == "versioned":
        options["table.merge-engine.versioned.ver-column"] = "v"
    sparkless.create_table({"name": "t.e", "columns": [{"name": "k", "type": "INT"}, {"name": "v", "type": "INT"}],
                            "primary_key": ["k"], "options": options})  # fmt: skip
    with pytest.raises(
        ChangelakeError, match=f"Partial update is not supported for the {engine} merge engine."
    ):
        sparkless.lookup("t.e", {"k": 1}, insert_if_not_exists=True)
    assert last_batch(sparkless, "t.e") == 0


# --- inserts through the apply (Spark) --------------------------------------------------------------------
@pytest.mark.integration
def test_a_new_key_gets_an_id_and_the_next_lookup_returns_it_without_writing(lake):
    lake.create_table(UIDS)
    (row,) = lake.lookup("web.uid_mapping", {"user_id": "alice"}, insert_if_not_exists=True)
    assert row == {"user_id": "alice", "uid": row["uid"], "note": None} and row["uid"] >= 1
    assert last_batch(lake, "web.uid_mapping") == 1
    assert lake.lookup("web.uid_mapping", {"user_id": "alice"}, insert_if_not_exists=True) == [row]
    assert last_batch(lake, "web.uid_mapping") == 1  # found: nothing written
    log = lake.changelog_arrow("web.uid_mapping").to_pylist()
    assert [(r["_change_type"], r["user_id"], r["uid"], r["_batch_id"]) for r in log] == [
        ("+I", "alice", row["uid"], 1)
    ]


@pytest.mark.integration
def test_a_batch_of_keys_inserts_each_missing_key_once(lake):
    lake.create_table(UIDS)
    (alice,) = lake.lookup("web.uid_mapping", {"user_id": "alice"}, insert_if_not_exists=True)
    assert lake.lookup_keys("web.uid_mapping", [{"user_id": "bob"}, {"user_id": "zed"}]) == [None, None]
    keys = [{"user_id": u} for u in ("bob", "alice", "carol", "bob")]
    rows = lake.lookup_keys("web.uid_mapping", keys, insert_if_not_exists=True)
    assert [r["user_id"] for r in rows] == ["bob", "alice", "carol", "bob"]
    assert rows[1] == alice and rows[0] == rows[3]
    assert len({r["uid"] for r in rows}) == 3
    assert last_batch(lake, "web.uid_mapping") == 2  # one batch for bob and carol
    summary = BatchSummary.from_snapshot(
        lake.storage.pk_table(lake.spec("web.uid_mapping")).current_snapshot()
    )
    assert summary.counts["inserted"] == 2 and summary.target_columns == ("user_id",)
    assert sorted(r["user_id"] for r in lake.rows_arrow("web.uid_mapping").to_pylist()) == [
        "alice",
        "bob",
        "carol",
    ]


@pytest.mark.integration
def test_keys_of_other_types_and_engines(lake):
    """A composite key of CLI-text values on an aggregation table without an auto-increment column; a
    first_row table returns a key that is there without writing (only the insert is refused)."""
    lake.create_table({
        "name": "t.agg",
        "columns": [{"name": "day", "type": "DATE"}, {"name": "n", "type": "INT"}, {"name": "amount", "type": "DECIMAL(10,2)"}],
        "primary_key": ["day", "n"],
        "options": {"bucket.num": 2, "table.merge-engine": "aggregation", "fields.amount.agg": "sum"},
    })  # fmt: skip
    key = {"day": "2024-02-29", "n": "7"}
    (row,) = lake.lookup("t.agg", key, insert_if_not_exists=True)
    assert (row["day"].isoformat(), row["n"], row["amount"]) == ("2024-02-29", 7, None)
    assert lake.lookup("t.agg", {"day": "2024-02-29", "n": 7}, insert_if_not_exists=True) == [row]
    assert last_batch(lake, "t.agg") == 1

    # Nanosecond keys (stored as epoch nanoseconds) are written as the text that reads back to them: two
    # keys 1 ns apart are two rows.
    lake.create_table({"name": "t.ns", "columns": [{"name": "at", "type": "TIMESTAMP(9)"}, {"name": "v", "type": "INT"}],
                       "primary_key": ["at"]})  # fmt: skip
    keys = [{"at": "2024-01-01T00:00:00.123456789"}, {"at": "2024-01-01T00:00:00.123456788"}]
    rows = lake.lookup_keys("t.ns", keys, insert_if_not_exists=True)
    assert rows[0] != rows[1] and all(r is not None and r["v"] is None for r in rows)
    assert lake.lookup_keys("t.ns", keys[::-1], insert_if_not_exists=True) == rows[::-1]
    assert last_batch(lake, "t.ns") == 1 and lake.rows_arrow("t.ns").num_rows == 2

    lake.create_table({"name": "t.first", "columns": [{"name": "k", "type": "INT"}, {"name": "v", "type": "STRING"}],
                       "primary_key": ["k"], "options": {"table.merge-engine": "first_row"}})  # fmt: skip
    lake.apply("t.first", [{"op": "+I", "data": {"k": 1, "v": "kept"}}], batch_id=1)
    assert lake.lookup("t.first", {"k": 1}, insert_if_not_exists=True) == [{"k": 1, "v": "kept"}]
    with pytest.raises(
        ChangelakeError, match="Partial update is not supported for the first_row merge engine."
    ):
        lake.lookup_keys("t.first", [{"k": 1}, {"k": 2}], insert_if_not_exists=True)
    assert last_batch(lake, "t.first") == 1


@pytest.mark.integration
@pytest.mark.slow
def test_cli_lookup_insert_if_not_exists(home, cli_env):
    (home / "tables" / "web.uid_mapping.yaml").write_text(json.dumps(UIDS))

    def lookup(*args):
        result = subprocess.run(
            [sys.executable, "-m", "changelake.cli", "lookup", "web.uid_mapping", *args, "--format", "jsonl"],
            env=cli_env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        return result

    first = lookup("user_id=u1", "--insert-if-not-exists")
    assert first.returncode == 0, first.stderr[-3000:]
    (row,) = [json.loads(line) for line in first.stdout.splitlines()]
    assert row["user_id"] == "u1" and row["uid"] >= 1 and "inserting them as lookup batch 1" in first.stderr
    again = lookup("user_id=u1", "--insert-if-not-exists")
    assert [json.loads(line) for line in again.stdout.splitlines()] == [row]
    assert "inserting" not in again.stderr
    keys = home / "keys.jsonl"
    keys.write_text('{"user_id": "u2"}\n{"user_id": "u1"}\n')
    batch = lookup("--keys-file", str(keys), "--insert-if-not-exists")
    rows = [json.loads(line) for line in batch.stdout.splitlines()]
    assert [r["user_id"] for r in rows] == ["u2", "u1"] and rows[1] == row and rows[0]["uid"] != row["uid"]
    plain = lookup("user_id=u3")
    assert plain.returncode == 0 and plain.stdout == ""
    refused = lookup("user_id=u3", "--prefix", "--insert-if-not-exists")
    assert refused.returncode == 2 and "cannot be combined with --prefix" in refused.stderr


# --- two processes ----------------------------------------------------------------------------------------
INSERTER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from changelake import ChangeLake

    home, me, other, keys = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4].split(",")

    def progress(message):
        print(message, file=sys.stderr, flush=True)
        # Both processes reach their first insert before either applies it: real contention, every run.
        if "not found; inserting them as lookup batch" in message and not me.exists():
            me.touch()
            deadline = time.monotonic() + 240
            while not other.exists() and time.monotonic() < deadline:
                time.sleep(0.05)

    lake = ChangeLake(home=home, tables_dir=Path(home) / "tables", progress=progress)
    rows = lake.lookup_keys("web.uid_mapping", [{"user_id": k} for k in keys], insert_if_not_exists=True)
    print(json.dumps(rows))
    """
)


@pytest.mark.integration
@pytest.mark.slow
def test_two_processes_inserting_the_same_new_keys_get_one_id_per_key(home, cli_env):
    (home / "tables" / "web.uid_mapping.yaml").write_text(json.dumps(UIDS))
    first, second = [f"u{i}" for i in range(0, 8)], [f"u{i}" for i in range(4, 12)]  # u4..u7 in both
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", INSERTER, str(home), str(home / me), str(home / other), ",".join(keys)],
            env=cli_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for keys, me, other in ((first, "a.ready", "b.ready"), (second, "b.ready", "a.ready"))
    ]
    outputs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]
    ids: dict[str, int] = {}
    for out, _ in outputs:
        for row in json.loads(out.splitlines()[-1]):
            assert ids.setdefault(row["user_id"], row["uid"]) == row["uid"], row  # both saw the same id
    assert sorted(ids) == sorted(set(first) | set(second)) and len(set(ids.values())) == 12
    # Both reached the insert of batch 1; the loser found it taken and looked up again.
    assert all("inserting them as lookup batch 1" in err for _, err in outputs)
    assert any("another caller inserted lookup batch 1 first" in err for _, err in outputs)

    lake = sparkless_lake(home)
    assert {r["user_id"]: r["uid"] for r in lake.rows_arrow("web.uid_mapping").to_pylist()} == ids
    log = lake.changelog_arrow("web.uid_mapping").to_pylist()
    assert sorted((r["_change_type"], r["user_id"]) for r in log) == sorted(("+I", u) for u in ids)
