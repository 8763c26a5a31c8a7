"""Fluss's MergeMode.OVERWRITE (docs/semantics.md §4.5): a write that bypasses the table's merge engine and
replaces rows as given -- the reference merge's rules (engine/merge.py), and the mode through the Python API,
a landed batch's manifest, ``changelake apply --merge-mode`` and ``changelake sql`` (the columnar merge is
compared with the reference in tests/engine/test_columnar.py::test_overwrite_merge_mode)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from changelake.engine.merge import apply_sequential
from changelake.errors import BatchRefusedError, ChangelakeError, WriteRefusedError
from changelake.spec import TableSpec
from tests.helpers import sparkless_lake

COLUMNS = [{"name": "k", "type": "INT"}, {"name": "n", "type": "BIGINT"}, {"name": "v", "type": "STRING"}]


def spec(options: dict, columns=COLUMNS) -> TableSpec:
    return TableSpec.from_dict({"name": "s.t", "columns": columns, "primary_key": ["k"], "options": options})


def run(options: dict, stored: list[tuple], records: list[tuple[str, tuple]], mode="overwrite", target=None):
    rows = {(r[0],): r for r in stored}
    log, counts = apply_sequential(spec(options), rows, records, target, None, mode)
    return sorted(rows.values()), log, counts


AGG = {"table.merge-engine": "aggregation", "fields.n.agg": "sum", "fields.v.agg": "listagg"}


def test_aggregation_rows_are_replaced_not_aggregated():
    rows, log, _ = run(AGG, [(1, 10, "a")], [("+I", (1, 3, "b"))])
    assert rows == [(1, 3, "b")] and log == [("-U", (1, 10, "a")), ("+U", (1, 3, "b"))]
    rows, _, _ = run(AGG, [(1, 10, "a")], [("+I", (1, 3, "b"))], mode=None)
    assert rows == [(1, 13, "a,b")]  # the default mode aggregates


def test_first_row_and_versioned_rows_are_replaced():
    rows, log, _ = run({"table.merge-engine": "first_row"}, [(1, 1, "a")], [("+U", (1, 2, "b"))])
    assert rows == [(1, 2, "b")] and log == [("-U", (1, 1, "a")), ("+U", (1, 2, "b"))]
    versioned = {"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "n"}
    rows, _, _ = run(versioned, [(1, 9, "new")], [("+U", (1, 1, "older"))])
    assert rows == [(1, 1, "older")]  # an older version replaces the row: no version is compared


@pytest.mark.parametrize(
    "options",
    [
        AGG,  # ignore, the aggregation default
        {**AGG, "table.delete.behavior": "disable"},
        {"table.merge-engine": "first_row", "table.delete.behavior": "disable"},
        {"sink.ignore-delete": "true"},
    ],
    ids=["ignore", "disable", "first_row-disable", "sink.ignore-delete"],
)
def test_deletes_apply_whatever_the_delete_behaviour(options):
    rows, log, counts = run(
        options, [(1, 1, "a"), (2, 2, "b")], [("-D", (1, None, None)), ("-D", (3, None, None))]
    )
    assert rows == [(2, 2, "b")] and log == [("-D", (1, 1, "a"))]
    assert (counts.deleted, counts.ignored) == (1, 1)  # a delete of a missing key changes nothing
    with pytest.raises(WriteRefusedError, match="disable"):
        if options.get("table.delete.behavior") != "disable":
            raise WriteRefusedError("disable: only the disable tables are refused in the default mode")
        run(options, [(1, 1, "a")], [("-D", (1, None, None))], mode=None)


def test_a_retraction_table_retracts_nothing():
    options = {**AGG, "table.agg.retract": "true", "fields.v.ignore-retract": "true"}
    rows, log, counts = run(options, [(1, 10, "a")], [("-U", (1, 4, None)), ("-D", (1, 10, "a"))])
    assert rows == [] and log == [("-D", (1, 10, "a"))] and counts.dropped_update_before == 1


def test_partial_writes_follow_the_last_row_rules_for_every_engine():
    # first_row refuses target columns in the default mode; the overwrite merger takes them.
    first_row = {"table.merge-engine": "first_row"}
    with pytest.raises(WriteRefusedError, match="Partial update is not supported for the first_row"):
        run(first_row, [], [("+I", (1, 1, "a"))], mode=None, target=["k", "v"])
    rows, _, _ = run(
        first_row, [(1, 1, "a")], [("+U", (1, 99, "b")), ("+I", (2, 99, "c"))], target=["k", "v"]
    )
    assert rows == [(1, 1, "b"), (2, None, "c")]  # non-target columns: kept, or null for a new key
    rows, _, _ = run(AGG, [(1, 10, "a")], [("+U", (1, 5, "b"))], target=["k", "n"])
    assert rows == [(1, 5, "a")]  # the target column replaced, not summed
    strict = [{"name": "k", "type": "INT"}, {"name": "n", "type": "BIGINT", "nullable": False}]
    with pytest.raises(WriteRefusedError, match="^Partial Update requires all columns except primary key"):
        strict_spec = spec({"table.merge-engine": "aggregation", "fields.n.agg": "sum"}, strict)
        apply_sequential(strict_spec, {}, [("+I", (1, 1))], ["k"], None, "overwrite")


def test_the_wal_image_takes_the_full_row_shortcut():
    options = {"table.merge-engine": "first_row", "table.changelog.image": "wal"}
    rows, log, _ = run(options, [(1, 1, "a")], [("+I", (1, 2, "b")), ("+I", (2, 3, "c"))])
    assert log == [("+U", (1, 2, "b")), ("+U", (2, 3, "c"))]


def test_merge_modes_are_named_as_flusss_enum():
    for given in ("OVERWRITE", "overwrite", " Overwrite "):
        assert run(AGG, [(1, 1, "a")], [("+I", (1, 2, "b"))], mode=given)[0] == [(1, 2, "b")]
    assert run(AGG, [(1, 1, "a")], [("+I", (1, 2, "b"))], mode="DEFAULT")[0] == [(1, 3, "a,b")]
    with pytest.raises(
        WriteRefusedError, match=r"Unknown merge mode 'upsert'; expected one of \[DEFAULT, OVERWRITE\]"
    ):
        run(AGG, [], [], mode="upsert")


# --- through the API, a landed manifest, the CLI and SQL ------------------------------------------------------
def make_lake(tmp_path, options=AGG):
    lake = sparkless_lake(tmp_path)
    lake.create_table(spec(options))
    return lake


def test_api_apply_in_overwrite_mode_is_its_own_exactly_once_batch(tmp_path):
    lake = make_lake(tmp_path)
    lake.apply("s.t", [{"op": "+I", "data": {"k": 1, "n": 10, "v": "a"}}], batch_id=1)
    lake.apply("s.t", [{"op": "+I", "data": {"k": 1, "n": 5, "v": "b"}}], batch_id=2)
    assert lake.lookup("s.t", {"k": 1})[0]["n"] == 15
    fix = [{"op": "+U", "data": {"k": 1, "n": 12, "v": "fixed"}}]
    result = lake.apply("s.t", fix, batch_id=3, merge_mode="overwrite")
    assert result.status == "applied" and lake.lookup("s.t", {"k": 1})[0] == {"k": 1, "n": 12, "v": "fixed"}
    assert [r["_change_type"] for r in lake.changelog_arrow("s.t").to_pylist()][-2:] == ["-U", "+U"]
    assert lake.apply("s.t", fix, batch_id=3, merge_mode="overwrite").status == "already-applied"
    with pytest.raises(BatchRefusedError, match="already applied from a different input"):
        lake.apply("s.t", fix, batch_id=3)  # the same records in the default mode are another input


def test_a_landed_manifest_names_the_merge_mode(tmp_path):
    lake = make_lake(tmp_path)
    landing = lake.settings.landing_dir / "s.t"
    landing.mkdir(parents=True)
    (landing / "1.jsonl").write_text(json.dumps({"op": "+I", "data": {"k": 1, "n": 10, "v": "a"}}) + "\n")
    (landing / "2.jsonl").write_text(json.dumps({"op": "+I", "data": {"k": 1, "n": 1, "v": "b"}}) + "\n")
    (landing / "2.manifest.json").write_text('{"merge_mode": "overwrite"}')
    (landing / "3.jsonl").write_text(json.dumps({"op": "-D", "data": {"k": 1}}) + "\n")
    (landing / "3.manifest.json").write_text('{"merge_mode": "OVERWRITE", "target_columns": ["k", "v"]}')
    results = lake.apply_pending("s.t")
    assert [r.status for r in results] == ["applied"] * 3
    # The overwrite (partial) delete applied on an 'ignore' table: its target column nulled, the row kept.
    assert lake.rows_arrow("s.t").to_pylist() == [{"k": 1, "n": 1, "v": None}]
    kinds = [r["_change_type"] for r in lake.changelog_arrow("s.t").to_pylist()]
    assert kinds == ["+I", "-U", "+U", "-U", "+U"]
    assert lake.input_arrow("s.t").num_rows == 3  # each batch's checksum verifies with its mode
    (landing / "4.jsonl").write_text(json.dumps({"op": "-D", "data": {"k": 1}}) + "\n")
    (landing / "4.manifest.json").write_text('{"merge_mode": "upsert"}')
    with pytest.raises(ChangelakeError, match="4.manifest.json: Unknown merge mode 'upsert'"):
        lake.apply_pending("s.t")


def test_sql_statement_option_and_cli(tmp_path):
    lake = make_lake(tmp_path, {**AGG, "table.delete.behavior": "disable"})
    lake.sql("INSERT INTO s.t VALUES (1, 10, 'a'), (2, 20, 'b')")
    with pytest.raises(WriteRefusedError, match="uses the 'AGGREGATION' merge engine"):
        lake.sql("UPDATE s.t SET n = 1 WHERE k = 1")
    (update,) = lake.sql("UPDATE s.t /*+ OPTIONS('merge-mode'='overwrite') */ SET n = 1 WHERE k = 1")
    (delete,) = lake.sql("DELETE FROM s.t /*+ OPTIONS('merge-mode'='overwrite') */ WHERE k = 2")
    assert (update.status, delete.status) == ("applied", "applied")
    assert lake.rows_arrow("s.t").to_pylist() == [{"k": 1, "n": 1, "v": "a"}]
    (insert,) = lake.sql("INSERT INTO s.t VALUES (1, 7, 'x')", merge_mode="overwrite")
    assert lake.rows_arrow("s.t").to_pylist() == [{"k": 1, "n": 7, "v": "x"}]
    assert (insert.batch_id, insert.writer_seq) == (4, 4)
    with pytest.raises(WriteRefusedError, match="contradicts the merge mode"):
        lake.sql(
            "INSERT INTO s.t /*+ OPTIONS('merge-mode'='overwrite') */ VALUES (1, 7, 'x')",
            merge_mode="default",
        )
    with pytest.raises(WriteRefusedError, match="Unsupported options found"):
        lake.sql("INSERT INTO s.t /*+ OPTIONS('sink.parallelism'='2') */ VALUES (1, 7, 'x')")
    env = {
        "CHANGELAKE_HOME": str(tmp_path),
        "CHANGELAKE_TABLES": str(tmp_path / "tables"),
        "PATH": "/usr/bin",
    }
    cli = [sys.executable, "-m", "changelake.cli"]
    out = subprocess.run(
        [*cli, "sql", "INSERT INTO s.t VALUES (1, 3, 'y')", "--merge-mode", "overwrite", "--json"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    assert json.loads(out.stdout)["statements"][0]["status"] == "applied"
    batch = tmp_path / "fix.jsonl"
    batch.write_text(json.dumps({"op": "+I", "data": {"k": 1, "n": 2, "v": "z"}}) + "\n")
    subprocess.run(
        [*cli, "apply", "s.t", "--file", str(batch), "--batch-id", "1", "--writer", "fixes",
         "--merge-mode", "OVERWRITE"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    assert lake.rows_arrow("s.t").to_pylist() == [{"k": 1, "n": 2, "v": "z"}]
    refused = subprocess.run(
        [*cli, "apply", "s.t", "--merge-mode", "overwrite"], capture_output=True, text=True, env=env
    )
    assert refused.returncode != 0 and "--merge-mode applies to one batch" in refused.stderr
