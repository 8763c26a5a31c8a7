"""The ``__input`` view comes from what was committed (issue 12): each landed batch is read with the columns
and source settings recorded with its commit, its files checked against the committed checksum; a changed
or missing file is a clear error naming file and batch (and only that table's input view fails, when read);
quarantined records are not part of the input."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from changelake.errors import ChangelakeError
from changelake.storage.iceberg import Storage
from changelake.storage.summary import BatchSummary

pytestmark = pytest.mark.integration

NOTES = {
    "name": "t.notes",
    "columns": [{"name": "k", "type": "INT"}, {"name": "v", "type": "STRING"}],
    "primary_key": ["k"],
    "options": {"bucket.num": 2},
    "source": {"format": "changelog-json", "ignore-unknown-fields": True, "on-bad-record": "quarantine"},
}


def write_spec(lake, spec: dict) -> None:
    (lake.settings.tables_dir / f"{spec['name']}.yaml").write_text(json.dumps(spec))  # JSON is YAML


def land(lake, table: str, batch_id: int, lines: list) -> object:
    directory = lake.settings.landing_dir / table
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{batch_id}.jsonl"
    path.write_text("".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines))
    return path


def recorded(lake, table: str) -> bool:
    """Whether the apply records how it read each batch (``changelake.input``, changelake.engine.apply)."""
    pk = lake.storage.pk_table(lake.spec(table))
    return all(BatchSummary.from_snapshot(s).input is not None for s in Storage.batch_snapshots(pk))


def needs_recorded_input(lake, table: str) -> None:
    assert recorded(lake, table), "every batch's snapshot records how it was read (changelake.input)"


def rows(table: pa.Table, *names: str) -> list[tuple]:
    return list(zip(*(table.column(n).to_pylist() for n in names), strict=True))


def test_input_is_read_with_the_source_settings_and_columns_of_its_commit(lake):
    write_spec(lake, NOTES)
    land(lake, "t.notes", 1, [
        {"op": "+I", "data": {"k": 1, "v": "a", "note": "dropped: not a column yet"}},
        "not json",  # quarantined
        {"op": "+I", "data": {"k": 2, "v": "b"}},
    ])  # fmt: skip
    lake.apply_pending()
    needs_recorded_input(lake, "t.notes")
    assert lake.dead_letters("t.notes")[0]["line"] == 2
    # The spec file changes after the commit: a new column `note`, unknown fields and bad records refused.
    write_spec(
        lake,
        {
            **NOTES,
            "columns": [*NOTES["columns"], {"name": "note", "type": "STRING"}],
            "source": {"format": "changelog-json"},
        },
    )
    land(lake, "t.notes", 2, [{"op": "+U", "data": {"k": 2, "v": "c", "note": "kept"}}])
    lake.apply_pending()
    got = lake.input_arrow("t.notes")
    # Batch 1 as applied: note dropped (it was not a column), the bad line quarantined, not refused.
    assert rows(got, "_batch_id", "_line", "_op", "k", "v", "note") == [
        (1, 1, "+I", 1, "a", None),
        (1, 3, "+I", 2, "b", None),
        (2, 1, "+U", 2, "c", "kept"),
    ]
    assert got.schema.names[:3] == ["k", "v", "note"]


def test_a_changed_landed_file_is_an_error_naming_file_and_batch(lake, spark):
    write_spec(lake, NOTES)
    land(lake, "t.notes", 1, [{"op": "+I", "data": {"k": 1, "v": "a"}}])
    second = land(lake, "t.notes", 2, [{"op": "+I", "data": {"k": 2, "v": "b"}}])
    lake.apply_pending()
    assert lake.input_arrow("t.notes").num_rows == 2
    second.write_text(json.dumps({"op": "+I", "data": {"k": 2, "v": "B"}}) + "\n")
    with pytest.raises(ChangelakeError, match=r"t.notes: landed file .*2\.jsonl of batch 2 changed since"):
        lake.input_arrow("t.notes")
    # The table still reads; its input view raises the same message when read.
    lake.register_views(["t.notes"])
    assert lake.rows("t.notes").count() == 2
    with pytest.raises(Exception, match="of batch 2 changed since the batch was committed"):
        spark.sql("select count(*) from global_temp.t__notes__input").collect()
    assert any("__input view" in m and "batch 2" in m for m in lake.messages)
    second.write_text(json.dumps({"op": "+I", "data": {"k": 2, "v": "b"}}) + "\n")  # restored
    assert rows(lake.input_arrow("t.notes"), "_batch_id", "v") == [(1, "a"), (2, "b")]


def test_a_missing_landed_file_is_an_error_naming_file_and_batch(lake):
    write_spec(lake, NOTES)
    first = land(lake, "t.notes", 1, [{"op": "+I", "data": {"k": 1, "v": "a"}}])
    lake.apply_pending()
    needs_recorded_input(lake, "t.notes")
    first.unlink()
    with pytest.raises(ChangelakeError, match=r"landed file .*1\.jsonl of batch 1 is missing"):
        lake.input_arrow("t.notes")


def test_parquet_batches_are_input_too_without_their_quarantined_rows(lake):
    spec = {**NOTES, "name": "t.pq", "source": {"on-bad-record": "quarantine"}}
    write_spec(lake, spec)
    directory = lake.settings.landing_dir / "t.pq"
    directory.mkdir(parents=True)
    table = pa.table({"op": ["+I", "+I", "?", "-D"], "k": [1, 2, 3, 1], "v": ["a", "b", "c", None]})
    pq.write_table(table, directory / "1.parquet")
    lake.apply_pending()
    got = lake.input_arrow("t.pq")
    assert rows(got, "_batch_id", "_line", "_op", "k", "v") == [
        (1, 1, "+I", 1, "a"),
        (1, 2, "+I", 2, "b"),
        (1, 4, "-D", 1, None),
    ]
    assert [d["line"] for d in lake.dead_letters("t.pq")] == [3]


def test_batches_not_from_landed_files_have_no_landed_input(lake):
    write_spec(lake, NOTES)
    lake.apply("t.notes", [{"op": "+I", "data": {"k": 1, "v": "api"}}], batch_id=1)
    land(lake, "t.notes", 1, [{"op": "+I", "data": {"k": 2, "v": "landed"}}])  # the landing writer's first
    lake.apply_pending()
    assert rows(lake.input_arrow("t.notes"), "_batch_id", "v") == [(2, "landed")]  # the table's batch 2


@pytest.mark.slow
def test_dbt_exact_recomputation_still_matches_after_the_source_changes(lake, spark):
    import shutil

    import yaml
    from pyspark.sql import functions as F

    from changelake.inputs.datagen import generate
    from changelake.runtime.dbt_runner import dbt_dirs, run_dbt, summarize
    from tests.helpers import REPO

    name = "shop.shop_user_stats"
    shutil.copy(REPO / "examples" / "tables" / f"{name}.yaml", lake.settings.tables_dir)
    generate(lake.specs()[name], lake.settings.landing_dir, batches=2, records=60)
    lake.apply_pending()
    needs_recorded_input(lake, name)
    # After the commits the source says the key's fields carry a prefix: read with it, every record's key
    # would be missing (quarantined), and the recomputation would have no input.
    spec_file = lake.settings.tables_dir / f"{name}.yaml"
    edited = yaml.safe_load(spec_file.read_text())
    edited["source"]["key.fields-prefix"] = "k_"
    spec_file.write_text(yaml.safe_dump(edited))
    try:
        status = run_dbt(
            ["build", "--select", "+shop_user_stats_drift"], lake.settings, progress=lambda m: None
        )
        summary = summarize(dbt_dirs(lake.settings)["target"] / "run_results.json")
        failed = [n for n in summary["nodes"] if n["status"] in ("fail", "error")]
        assert status == 0 and not failed, failed
        drift = spark.table("analytics.shop_user_stats_drift")
        assert drift.count() == lake.rows(name).count() > 5
        assert drift.agg(F.max(F.abs("drift"))).first()[0] == 0
    finally:
        spark.sql("drop database if exists analytics cascade")
