"""Schema evolution by Fluss's ALTER TABLE rules (issue 14 items 1, 2 and 5): a spec file that adds nullable
columns at the end (or changes an alterable option) alters the table when it is opened for create/apply;
every other difference is refused naming the column or option and Fluss's rule; reads and writes use the
stored spec, so an edited ``bucket.num`` never moves a key; Fluss's table options are validated with its
messages."""

from __future__ import annotations

import json

import pytest
import yaml

from changelake import evolution
from changelake.errors import ChangelakeError, SpecError
from changelake.spec import TableSpec
from changelake.storage.iceberg import CHANGELOG_SUFFIX
from tests.helpers import changelog_of, rows_of

ORDERS = {
    "name": "e.orders",
    "columns": [{"name": "id", "type": "BIGINT"}, {"name": "amount", "type": "INT"}],
    "primary_key": ["id"],
    "options": {"bucket.num": 4},
    "source": {"format": "debezium-json"},
}
WITH_NOTE = {**ORDERS, "columns": [*ORDERS["columns"], {"name": "note", "type": "STRING"}]}


@pytest.fixture
def plain_lake(home):
    """A ChangeLake for what needs no Spark (creating, altering and refusing tables)."""
    from changelake import ChangeLake

    messages: list[str] = []
    instance = ChangeLake(home=home, tables_dir=home / "tables", progress=messages.append)
    instance.messages = messages
    return instance


def write_spec(lake, data: dict) -> TableSpec:
    """Put ``data`` in the tables directory as the table's spec file."""
    (lake.settings.tables_dir / f"{data['name']}.yaml").write_text(yaml.safe_dump(data))
    return TableSpec.from_dict(data)


def land(lake, table: str, batch_id: int, lines: list) -> None:
    directory = lake.settings.landing_dir / table
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{batch_id}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def stored(lake, name: str, changelog: bool = False) -> dict:
    """The spec JSON stored with the PK table (or its changelog table)."""
    namespace, table = name.split(".")
    return json.loads(lake.storage.stored_spec(namespace, table + (CHANGELOG_SUFFIX if changelog else "")))


def columns_of(lake, name: str, changelog: bool = False) -> list[str]:
    spec = lake.spec(name)
    table = lake.storage.changelog_table(spec) if changelog else lake.storage.pk_table(spec)
    return [f.name for f in table.schema().fields]


def debezium(op: str, after: dict | None, before: dict | None = None) -> dict:
    return {"op": op, "before": before, "after": after, "source": {}, "ts_ms": 0}


# --- the happy path ----------------------------------------------------------------------------------------
def test_column_added_mid_stream_reads_old_rows_as_null_and_new_batches_carry_it(lake):
    write_spec(lake, ORDERS)
    land(lake, "e.orders", 1, [debezium("c", {"id": k, "amount": 10 * k}) for k in range(1, 9)])
    lake.apply_pending("e.orders")
    # Before the evolution a Debezium record carrying the new field is refused, naming it.
    land(lake, "e.orders", 2, [debezium("u", {"id": 1, "amount": 11, "note": "n1"}, {"id": 1, "amount": 10})])
    with pytest.raises(ChangelakeError, match="field 'note': unknown column"):
        lake.apply_pending("e.orders")

    write_spec(lake, WITH_NOTE)  # the DBA added a column; the next apply alters the table, then applies
    land(lake, "e.orders", 3, [debezium("c", {"id": 9, "amount": 90, "note": "n9"})])
    results = lake.apply_pending("e.orders")
    assert [r.batch_id for r in results] == [2, 3]
    assert any("altering the table: add column note STRING" in m for m in lake.messages)
    # Key 1's bucket (2) also holds key 6 (merged from an old file); buckets 1 and 3 are old files only.
    assert rows_of(lake.rows("e.orders")) == [
        (1, 11, "n1"),
        (2, 20, None),
        (3, 30, None),
        (4, 40, None),
        (5, 50, None),
        (6, 60, None),
        (7, 70, None),
        (8, 80, None),
        (9, 90, "n9"),
    ]
    # A past batch reads in its snapshot's schema (Iceberg's time travel), without the new column.
    assert rows_of(lake.rows("e.orders", at_batch=1)) == [(k, 10 * k) for k in range(1, 9)]
    # Both tables gained the column before their hidden columns; old changelog records read it as null.
    assert columns_of(lake, "e.orders") == ["id", "amount", "note", "_bucket"]
    assert columns_of(lake, "e.orders", changelog=True)[:4] == ["id", "amount", "note", "_change_type"]
    assert (
        stored(lake, "e.orders")
        == stored(lake, "e.orders", changelog=True)
        == lake.spec("e.orders").to_dict()
    )
    log = changelog_of(lake, "e.orders")
    assert sorted(r[1:] for r in log if r[2] in (1, 9)) == [
        ("+I", 1, 10, None),
        ("+I", 9, 90, "n9"),
        ("+U", 1, 11, "n1"),
        ("-U", 1, 10, None),
    ]

    # A partial update writes only the new column of an old row (the API writer's first batch, table batch 4).
    lake.apply(
        "e.orders", [{"op": "+U", "data": {"id": 2, "note": "p2"}}], batch_id=1, target_columns=["id", "note"]
    )
    assert sorted(rows_of(lake.rows("e.orders")))[1] == (2, 20, "p2")

    # Exactly once across the evolution point: batch 1 (decoded without the column) replays as a verified
    # no-op, and other input under its id is still refused.
    replay = lake.apply_pending("e.orders", from_batch=1)
    assert [(r.batch_id, r.status) for r in replay] == [
        (1, "already-applied"),
        (2, "already-applied"),
        (3, "already-applied"),
    ]
    land(lake, "e.orders", 1, [debezium("c", {"id": 1, "amount": 999})])
    # The landed file itself changed after its apply: reported as such, with both checksums.
    with pytest.raises(
        ChangelakeError, match=r"1\.jsonl: changed after batch 1 was applied from it \(checksum"
    ):
        lake.apply_pending("e.orders", from_batch=1, up_to=1)


def test_aggregation_table_adds_columns_with_and_without_an_aggregate_function(lake, tmp_path):
    base = {
        "name": "e.stats",
        "columns": [{"name": "k", "type": "INT"}, {"name": "total", "type": "BIGINT"}],
        "primary_key": ["k"],
        "options": {"table.merge-engine": "aggregation", "fields.total.agg": "sum"},
        "source": {"format": "upsert-kafka"},
    }
    write_spec(lake, base)
    first = tmp_path / "1.jsonl"
    first.write_text('{"key": {"k": 1}, "value": {"total": 10}}\n{"key": {"k": 2}, "value": {"total": 5}}\n')
    lake.apply("e.stats", file=first, batch_id=1)
    evolved = {
        **base,
        "columns": [*base["columns"], {"name": "qty", "type": "BIGINT"}, {"name": "tag", "type": "STRING"}],
        "options": {**base["options"], "fields.qty.agg": "sum"},  # tag: last_value_ignore_nulls, as in Fluss
    }
    write_spec(lake, evolved)
    second = tmp_path / "2.jsonl"
    second.write_text(
        '{"key": {"k": 1}, "value": {"total": 1, "qty": 3, "tag": "a"}}\n'
        '{"key": {"k": 1}, "value": {"total": 1, "qty": 4, "tag": null}}\n'
    )
    lake.apply("e.stats", file=second, batch_id=2)
    assert rows_of(lake.rows("e.stats")) == [(1, 12, 7, "a"), (2, 5, None, None)]
    assert lake.spec("e.stats").agg_function("qty") == "sum"
    assert lake.spec("e.stats").agg_function("tag") == "last_value_ignore_nulls"


def test_alterable_options_and_free_sections_change_without_refusal(plain_lake):
    lake = plain_lake
    write_spec(lake, ORDERS)
    lake.create_table(lake.settings.tables_dir / "e.orders.yaml")
    before = lake.storage.pk_table(lake.spec("e.orders")).metadata_location
    changed = {**ORDERS, "source": {"format": "upsert-kafka"}, "datagen": {"records": 3}, "comment": "c"}
    write_spec(lake, changed)
    spec = lake.create_table(lake.settings.tables_dir / "e.orders.yaml")
    # source/datagen/comment are read from the file and never need a commit
    assert spec.source == {"format": "upsert-kafka"} and spec.comment == "c"
    assert lake.spec("e.orders").source_options.format == "upsert-kafka"
    assert lake.storage.pk_table(spec).metadata_location == before
    alterable = {
        **changed,
        "options": {**ORDERS["options"], "sink.ignore-delete": True, "table.log.ttl": "3d"},
    }
    write_spec(lake, alterable)
    assert lake.create_table(lake.settings.tables_dir / "e.orders.yaml").ignore_delete
    assert stored(lake, "e.orders")["options"]["table.log.ttl"] == "3d"
    assert stored(lake, "e.orders", changelog=True) == stored(lake, "e.orders")  # altered together
    write_spec(lake, changed)  # RESET
    lake.create_table(lake.settings.tables_dir / "e.orders.yaml")
    assert "table.log.ttl" not in stored(lake, "e.orders")["options"]
    assert not lake.spec("e.orders").ignore_delete


# --- refusals ------------------------------------------------------------------------------------------------
AGG = {
    "name": "e.refuse",
    "columns": [
        {"name": "k", "type": "INT"},
        {"name": "p", "type": "STRING"},
        {"name": "v", "type": "BIGINT"},
        {"name": "s", "type": "STRING"},
    ],
    "primary_key": ["k", "p"],
    "partition_keys": ["p"],
    "options": {"bucket.num": 2, "table.merge-engine": "aggregation", "fields.v.agg": "sum"},
}
COLS = AGG["columns"]


def _with(**changes) -> dict:
    return {**AGG, **changes}


def _opts(**changes) -> dict:
    return _with(options={**AGG["options"], **changes})


@pytest.mark.parametrize(
    "changed, message",
    [
        (_with(columns=COLS[:3]), "column 's' dropped (Not support drop column now.)"),
        (
            _with(columns=[*COLS[:3], {"name": "s2", "type": "STRING"}]),
            "column 's' renamed to 's2' (Not support rename column now.)",
        ),
        (
            _with(columns=[*COLS[:3], {"name": "s", "type": "INT"}]),
            "column 's' type STRING -> INT (Not support modify column now.)",
        ),
        (
            _with(columns=[*COLS[:2], {"name": "v", "type": "INT"}, COLS[3]]),
            "column 'v' type BIGINT -> INT (Not support modify column now.)",
        ),
        (
            _with(columns=[*COLS[:3], {"name": "s", "type": "STRING", "nullable": False}]),
            "column 's' NULL -> NOT NULL (Not support modify column now.)",
        ),
        (
            _with(columns=[*COLS, {"name": "n", "type": "INT", "nullable": False}]),
            "column 'n' added NOT NULL (Column n must be nullable.)",
        ),
        (
            _with(columns=[*COLS[:3], {"name": "n", "type": "INT"}, COLS[3]]),
            "column 'n' added before existing column 's' (Only support addColumn column at last now.)",
        ),
        (_with(columns=[COLS[0], COLS[1], COLS[3], COLS[2]]), "columns reordered to ['k', 'p', 's', 'v']"),
        (
            _with(primary_key=["k", "p", "s"]),
            "primary key ['k', 'p'] -> ['k', 'p', 's'] (a table's primary key",
        ),
        (
            _with(primary_key=["k", "p"], partition_keys=[]),
            "partition keys ['p'] -> [] (a table's partition keys cannot change",
        ),
        (
            _opts(**{"bucket.num": 4}),
            "bucket.num 2 -> 4 (The option 'bucket.num' is not supported to alter yet.)",
        ),
        (
            _with(options={"bucket.num": 2}),
            "option 'table.merge-engine' 'aggregation' -> (unset) (The following options are not supported to "
            "alter yet: 'table.merge-engine'.)",
        ),
        (
            _opts(**{"table.delete.behavior": "disable"}),
            "option 'table.delete.behavior' (unset) -> 'disable' (The following options are not supported to "
            "alter yet: 'table.delete.behavior'.)",
        ),
        (
            _opts(**{"table.log.format": "compacted"}),
            "The following options are not supported to alter yet: 'table.log.format'.",
        ),
        (
            _opts(**{"fields.v.agg": "max"}),
            "option 'fields.v.agg' 'sum' -> 'max': the aggregate function of existing column 'v' is part of the "
            "column (Not support modify column now.)",
        ),
        (
            _with(
                columns=[*COLS, {"name": "n", "type": "BIGINT"}],
                options={**AGG["options"], "auto-increment.fields": "n"},
            ),
            "option 'auto-increment.fields' (unset) -> 'n' (The option 'auto-increment.fields' is not supported",
        ),
    ],
)
def test_unsupported_changes_are_refused_naming_what_and_the_rule(plain_lake, changed, message):
    lake = plain_lake
    lake.create_table(AGG)
    before = stored(lake, "e.refuse")
    write_spec(lake, changed)
    with pytest.raises(SpecError) as refused:
        lake.apply("e.refuse", [], batch_id=1)  # opening the table for a write refuses before any work
    assert message in str(refused.value)
    assert "Table e.refuse already exists with a different spec: the given spec changes what" in str(
        refused.value
    )
    assert stored(lake, "e.refuse") == before == stored(lake, "e.refuse", changelog=True)


def test_an_aggregate_function_on_a_new_column_of_a_last_row_table_is_kept_unused_as_fluss_0_9_1_does(
    plain_lake,
):
    """Fluss 0.9.1 keeps a function of a table without the aggregation engine (a custom property of its Flink
    tables, unchecked by its server); Fluss main's refusal is stricter, not a relaxation (docs/semantics.md §16)."""
    plain_lake.create_table(ORDERS)
    spec = plain_lake.create_table({**WITH_NOTE, "options": {"bucket.num": 4, "fields.note.agg": "listagg"}})
    assert spec.column_names == ("id", "amount", "note") and spec.merge_engine is None


def test_a_changed_bucket_key_is_refused(plain_lake):
    base = {
        "name": "e.bk",
        "columns": [{"name": "a", "type": "INT"}, {"name": "b", "type": "INT"}],
        "primary_key": ["a", "b"],
        "bucket_key": ["a"],
    }
    plain_lake.create_table(base)
    with pytest.raises(SpecError) as refused:
        plain_lake.create_table({**base, "bucket_key": ["a", "b"]})
    assert "bucket key ['a'] -> ['a', 'b'] (The option 'bucket.key' is not supported to alter yet.)" in str(
        refused.value
    )


# --- crash between the two schema updates --------------------------------------------------------------------
def test_crash_between_changelog_and_pk_updates_converges_on_the_next_open(plain_lake):
    lake = plain_lake
    lake.create_table(ORDERS)
    new = TableSpec.from_dict(WITH_NOTE)
    lake.storage.evolve_table(new, new.table + CHANGELOG_SUFFIX)  # the first half, then the "crash"
    assert "note" in columns_of(lake, "e.orders", changelog=True)
    assert "note" not in columns_of(lake, "e.orders")
    assert lake.spec("e.orders").column_names == ("id", "amount")  # the PK table's spec is the commit point

    write_spec(lake, WITH_NOTE)
    lake.create_table(lake.settings.tables_dir / "e.orders.yaml")  # re-run: the changelog half is a no-op
    assert columns_of(lake, "e.orders") == ["id", "amount", "note", "_bucket"]
    assert columns_of(lake, "e.orders", changelog=True).count("note") == 1
    assert stored(lake, "e.orders") == stored(lake, "e.orders", changelog=True) == new.to_dict()
    table = lake.storage.pk_table(new)
    lake.create_table(lake.settings.tables_dir / "e.orders.yaml")  # converged: nothing more to commit
    assert lake.storage.pk_table(new).metadata_location == table.metadata_location
    mapping = {
        m["names"][0]: m["field-id"] for m in json.loads(table.properties["schema.name-mapping.default"])
    }
    assert mapping == {f.name: f.field_id for f in table.schema().fields}


# --- the stored spec is the source of truth for layout -------------------------------------------------------
def test_an_edited_bucket_num_is_refused_and_reads_keep_the_stored_layout(lake):
    write_spec(lake, ORDERS)
    land(lake, "e.orders", 1, [debezium("c", {"id": k, "amount": k}) for k in range(1, 5)])
    lake.apply_pending("e.orders")
    write_spec(lake, {**ORDERS, "options": {"bucket.num": 8}})
    land(lake, "e.orders", 2, [debezium("c", {"id": 5, "amount": 5})])
    with pytest.raises(
        SpecError, match=r"bucket.num 4 -> 8 \(The option 'bucket.num' is not supported to alter yet"
    ):
        lake.apply_pending("e.orders")
    spec = lake.spec("e.orders")
    assert spec.bucket_num == 4 and spec.source_options.format == "debezium-json"
    assert any("reading with the stored spec" in m and "bucket.num 4 -> 8" in m for m in lake.messages)
    assert rows_of(lake.rows("e.orders")) == [(k, k) for k in range(1, 5)]


def test_lookups_hash_with_the_stored_bucket_num_after_the_file_is_edited(lake):
    write_spec(lake, ORDERS)
    land(lake, "e.orders", 1, [debezium("c", {"id": k, "amount": k}) for k in range(1, 5)])
    lake.apply_pending("e.orders")
    write_spec(lake, {**ORDERS, "options": {"bucket.num": 8}})  # key 2: bucket 1 of 4, but 5 of 8
    assert lake.lookup("e.orders", {"id": 2}) == [{"id": 2, "amount": 2}]


def test_spark_free_reads_give_null_for_a_column_old_files_lack(lake, tmp_path):
    write_spec(lake, ORDERS)
    land(lake, "e.orders", 1, [debezium("c", {"id": k, "amount": k}) for k in range(1, 5)])
    lake.apply_pending("e.orders")
    write_spec(lake, WITH_NOTE)
    land(lake, "e.orders", 2, [debezium("c", {"id": 9, "amount": 9, "note": "n"})])
    lake.apply_pending("e.orders")
    assert lake.lookup("e.orders", {"id": 3}) == [{"id": 3, "amount": 3, "note": None}]
    assert sorted(lake.rows_arrow("e.orders").to_pylist(), key=lambda r: r["id"])[-1] == {
        "id": 9,
        "amount": 9,
        "note": "n",
    }


# --- Fluss's table options on a primary-key table ---------------------------------------------------------------
PK = {
    "name": "o.t",
    "columns": [{"name": "k", "type": "INT"}, {"name": "v", "type": "STRING"}],
    "primary_key": ["k"],
}


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {"table.log.format": "INDEXED"},
            "Currently, Primary Key Table supports ARROW or COMPACTED log format when kv format is COMPACTED.",
        ),
        (
            {"table.kv.format": "compacted", "table.log.format": "indexed"},
            "Currently, Primary Key Table supports ARROW or COMPACTED log format when kv format is COMPACTED.",
        ),
        (
            {"table.kv.format": "json"},
            "Invalid value for config 'table.kv.format'. Reason: Could not parse value 'json' for key "
            "'table.kv.format'.",
        ),
        (
            {"table.log.format": "parquet"},
            "Invalid value for config 'table.log.format'. Reason: Could not parse value 'parquet' for key "
            "'table.log.format'.",
        ),
        (
            {"table.log.ttl": "unknown"},
            "Invalid value for config 'table.log.ttl'. Reason: Could not parse value 'unknown' for key "
            "'table.log.ttl'.",
        ),
        ({"table.log.ttl": "10"}, "Could not parse value '10' for key 'table.log.ttl'."),  # no unit
        (
            {"table.kv.format-version": "two"},
            "Could not parse value 'two' for key 'table.kv.format-version'.",
        ),
        ({"table.replication.factor": -1}, "'table.replication.factor' must be greater than 0."),
        ({"table.log.tiered.local-segments": 0}, "'table.log.tiered.local-segments' must be greater than 0."),
        (
            {"table.log.ttl": "1h", "table.log.local-ttl": "2h"},
            "'table.log.local-ttl' must be less than or equal to 'table.log.ttl'.",
        ),
        (
            {"table.log.arrow.compression.zstd.level": 23},
            "Invalid ZSTD compression level: 23. Expected a value between 1 and 22.",
        ),
        (
            {"table.statistics.columns": "*"},  # an option of Fluss main, which 0.9.1 does not know
            "'table.statistics.columns' is not a recognized Fluss table property in the current cluster version.",
        ),
        (
            {"table.auto-partition.enabled": True},
            "Currently, auto partition is only supported for partitioned table, please set table property "
            "'table.auto-partition.enabled' to false.",
        ),
        (
            {"table.datalake.historical-partition.enabled": True, "table.datalake.enabled": True},
            "'table.datalake.historical-partition.enabled' has unmet requirements: 'table.auto-partition.enabled' "
            "must be set to true; 'table.datalake.format' must be set to 'paimon' (currently not set); the table "
            "must define exactly one partition key (found 0).",
        ),
        (
            {"table.no-such.option": "x"},
            "'table.no-such.option' is not a recognized Fluss table property in the current cluster version.",
        ),
    ],
)
def test_fluss_table_options_are_validated_with_fluss_messages(options, message):
    with pytest.raises(SpecError) as refused:
        TableSpec.from_dict({**PK, "options": options})
    assert message in str(refused.value)


def test_valid_fluss_table_options_are_accepted_and_enums_normalised():
    spec = TableSpec.from_dict(
        {
            **PK,
            "options": {
                "table.kv.format": "INDEXED",
                "table.log.format": "Indexed",
                "table.kv.format-version": 2,
                "table.replication.factor": 3,
                "table.log.arrow.compression.type": "LZ4_FRAME",
                "table.log.arrow.compression.zstd.level": 22,
                "table.log.ttl": "7 d",
                "table.log.local-ttl": "0ms",
                "table.log.tiered.local-segments": 5,
                "table.datalake.enabled": "TRUE",
                "table.datalake.format": "iceberg",
                "table.datalake.freshness": "5min",
                "table.kv.standby-replica.enabled": False,
                "table.auto-partition.enabled": False,
            },
        }
    )
    assert spec.options["table.kv.format"] == "indexed" and spec.options["table.log.format"] == "indexed"
    assert spec.options["table.log.arrow.compression.type"] == "lz4_frame"
    assert TableSpec.from_dict({**PK, "options": {"table.log.format": "compacted"}}).options == {
        "table.log.format": "compacted"
    }


def test_an_applier_with_a_stale_spec_refuses_to_rewrite_a_bucket_holding_newer_columns(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from changelake.engine.buckets import read_stored
    from changelake.storage.taskio import TaskIO

    path = tmp_path / "written-after-the-alter.parquet"
    pq.write_table(
        pa.table({"id": [1], "amount": [1], "note": ["n"], "_bucket": pa.array([0], pa.int32())}), path
    )
    stale = TableSpec.from_dict(ORDERS)  # the spec before the column was added
    for keep_rows in (False, True):  # a bucket task reads the file (never kept rows of another process)
        with pytest.raises(ChangelakeError, match=r"has columns \['note'\] that the spec in use lacks"):
            read_stored(stale, TaskIO({}), [str(path)], keep_rows=keep_rows)


def test_a_time_column_stored_without_its_precision_takes_the_spec_files():
    """changelake stored every TIME(p) as a bare TIME before it kept TIME's precision (issue 46)."""
    import json

    spec = TableSpec.from_dict(
        {"name": "e.t", "columns": [{"name": "k", "type": "INT"}, {"name": "at", "type": "TIME(3)"}],
         "primary_key": ["k"]}
    )  # fmt: skip
    legacy = {
        **spec.to_dict(),
        "columns": [{"name": "k", "type": "INT", "nullable": False}, {"name": "at", "type": "TIME"}],
    }
    stored = evolution.stored_spec(json.dumps(legacy), "e.t", spec)
    assert str(stored.column("at").type) == "TIME(3)" and not evolution.plan(stored, spec)
    assert str(evolution.stored_spec(json.dumps(legacy), "e.t").column("at").type) == "TIME(0)"
    current = {**legacy, "columns": [legacy["columns"][0], {"name": "at", "type": "TIME(0)"}]}
    with pytest.raises(SpecError, match=r"type TIME\(0\) -> TIME\(3\)"):
        evolution.plan(evolution.stored_spec(json.dumps(current), "e.t", spec), spec)  # a real change
