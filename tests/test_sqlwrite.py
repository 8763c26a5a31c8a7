"""SQL writes (changelake.sqlwrite, ChangeLake.sql, ``changelake sql``) without a JVM: parsing, Fluss's
refusals word for word, literal typing, injection attempts, and statements applied in process compared with
the reference merge (engine/merge.apply_sequential) for every merge engine."""

from __future__ import annotations

import decimal
import json
import subprocess
import sys

import pytest

from changelake import sqlwrite
from changelake.engine.merge import apply_sequential
from changelake.errors import BatchRefusedError, ChangelakeError, WriteRefusedError
from changelake.spec import TableSpec
from changelake.storage.iceberg import Storage
from tests.helpers import sparkless_lake

COLUMNS = [
    {"name": "k", "type": "INT"},
    {"name": "c", "type": "STRING"},
    {"name": "n", "type": "BIGINT"},
    {"name": "d", "type": "DECIMAL(10,2)"},
]
ENGINES = {
    "default": {},
    "first_row": {"table.merge-engine": "first_row"},
    "versioned": {"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "n"},
    "aggregation": {"table.merge-engine": "aggregation", "fields.n.agg": "sum"},
}


def make_spec(
    name: str = "s.t", options: dict | None = None, columns=None, pk=("k",), partition_keys=()
) -> TableSpec:
    return TableSpec.from_dict(
        {
            "name": name,
            "columns": columns or COLUMNS,
            "primary_key": list(pk),
            "partition_keys": list(partition_keys),
            "options": {"bucket.num": 1, **(options or {})},
        }
    )


def plan_of(text: str, spec: TableSpec, stored: dict | None = None, source_rows=None):
    (tree,) = sqlwrite.parse(text)
    assert sqlwrite.target_table(tree, lambda: [spec.full_name]) == spec.full_name
    return sqlwrite.plan(
        tree,
        spec,
        lookup=lambda s, key: stored,
        read_rows=lambda s: source_rows,
        known=lambda: [spec.full_name],
        spec_of=lambda name: spec,
    )


# --- planning ------------------------------------------------------------------------------------------------
def test_insert_values_types_each_literal_by_its_column():
    plan = plan_of(
        "INSERT INTO s.t VALUES (1, 'it''s', -5, 12.345), (2, NULL, 9223372036854775807, -0.5)", make_spec()
    )
    assert plan.kind == "insert" and plan.target_columns is None
    assert plan.records == [
        # Flink's implicit cast to DECIMAL(10,2): HALF_UP to the scale; INT and BIGINT rows give BIGINT
        {"op": "+I", "data": {"k": 1, "c": "it's", "n": -5, "d": "12.35"}},
        {"op": "+I", "data": {"k": 2, "c": None, "n": 9223372036854775807, "d": "-0.50"}},
    ]


def test_insert_with_a_column_list_is_a_partial_update_unless_it_lists_every_column():
    spec = make_spec()
    partial = plan_of("INSERT INTO s.t (c, k) VALUES ('x', 3)", spec)
    assert partial.target_columns == ["c", "k"]
    assert partial.records == [{"op": "+I", "data": {"c": "x", "k": 3}}]
    full = plan_of("INSERT INTO s.t (n, d, c, k) VALUES (1, 2, 'x', 3)", spec)
    assert full.target_columns is None
    assert full.records == [{"op": "+I", "data": {"n": 1, "d": "2.00", "c": "x", "k": 3}}]


def test_insert_select_without_from_is_one_row():
    plan = plan_of("INSERT INTO s.t SELECT 1, 'a', 2, 3.5", make_spec())
    assert plan.records == [{"op": "+I", "data": {"k": 1, "c": "a", "n": 2, "d": "3.50"}}]


def test_insert_into_a_static_partition_gives_its_value_to_every_row():
    spec = make_spec(
        columns=[*COLUMNS, {"name": "p", "type": "STRING"}], pk=("k", "p"), partition_keys=("p",)
    )
    full = plan_of("INSERT INTO s.t PARTITION (p = 2030) VALUES (22, 'a', 1, 1), (33, 'b', 2, 2)", spec)
    assert full.target_columns is None
    assert [r["data"] for r in full.records] == [
        {"k": 22, "c": "a", "n": 1, "d": "1.00", "p": "2030"},
        {"k": 33, "c": "b", "n": 2, "d": "2.00", "p": "2030"},
    ]
    partial = plan_of("INSERT INTO s.t PARTITION (p = 'x') (k, n) VALUES (1, 5)", spec)
    assert partial.target_columns == ["k", "n", "p"]
    assert partial.records == [{"op": "+I", "data": {"k": 1, "n": 5, "p": "x"}}]
    with pytest.raises(WriteRefusedError, match="'c' in PARTITION .* is not a partition column"):
        plan_of("INSERT INTO s.t PARTITION (c = 'x') VALUES (1, 1, 1, 'p')", spec)
    with pytest.raises(WriteRefusedError, match="assigned more than once"):
        plan_of("INSERT INTO s.t PARTITION (p = 'x') (k, p) VALUES (1, 'y')", spec)


def test_delete_is_one_tombstone_keyed_by_the_whole_primary_key():
    spec = make_spec(columns=[*COLUMNS, {"name": "p", "type": "STRING"}], pk=("k", "p"))
    stored = {"k": 4, "c": "a", "n": 7, "d": None, "p": "x"}
    plan = plan_of("DELETE FROM s.t WHERE p = 'x' AND (s.t.k = 4)", spec, stored=stored)
    assert plan.records == [{"op": "-D", "data": {"k": 4, "p": "x"}}]
    # A missing key is nothing to write, said the way an UPDATE of a missing key says it.
    missing = plan_of("DELETE FROM s.t WHERE p = 'x' AND k = 5", spec, stored=None)
    updated = plan_of("UPDATE s.t SET c = 'b' WHERE p = 'x' AND k = 5", spec, stored=None)
    assert missing.records == [] and updated.records == []
    assert missing.note == updated.note == "no row of s.t has the key {'k': 5, 'p': 'x'}"


def test_update_writes_the_stored_row_with_the_new_values():
    stored = {"k": 1, "c": "a", "n": 7, "d": decimal.Decimal("1.50")}
    plan = plan_of("UPDATE s.t AS x SET c = 'b', d = NULL WHERE x.k = 1", make_spec(), stored=stored)
    assert plan.records == [{"op": "+U", "data": {"k": 1, "c": "b", "n": 7, "d": None}}]
    missing = plan_of("UPDATE s.t SET c = 'b' WHERE k = 2", make_spec(), stored=None)
    assert missing.records == [] and "no row" in str(missing.note)


def test_typed_literals_dates_timestamps_bytes_booleans():
    spec = make_spec(
        columns=[
            {"name": "k", "type": "INT"},
            {"name": "day", "type": "DATE"},
            {"name": "at", "type": "TIMESTAMP(3)"},
            {"name": "raw", "type": "BYTES"},
            {"name": "ok", "type": "BOOLEAN"},
            {"name": "f", "type": "DOUBLE"},
        ]
    )
    plan = plan_of(
        "INSERT INTO s.t VALUES (1, DATE '2024-02-29', TIMESTAMP '2024-01-01 10:00:00.5', X'00ff', TRUE, -1e3)",
        spec,
    )
    assert plan.records[0]["data"] == {
        "k": 1,
        "day": "2024-02-29",
        "at": "2024-01-01T10:00:00.500000000",  # TIMESTAMP(1) cast to the TIMESTAMP(3) column
        "raw": "AP8=",
        "ok": True,
        "f": -1000.0,
    }


# --- refusals, in Fluss's words ---------------------------------------------------------------------------------
FLUSS_REFUSALS = [
    (
        "first_row",
        "DELETE FROM s.t WHERE k = 1",
        "Table s.t uses the 'FIRST_ROW' merge engine which does not support DELETE or UPDATE statements.",
    ),
    (
        "versioned",
        "UPDATE s.t SET c = 'x' WHERE k = 1",
        "Table s.t uses the 'VERSIONED' merge engine which does not support DELETE or UPDATE statements.",
    ),
    (
        "aggregation",
        "DELETE FROM s.t WHERE k = 1",
        "Table s.t uses the 'AGGREGATION' merge engine which does not support DELETE or UPDATE statements.",
    ),
    (
        "first_row",
        "INSERT INTO s.t (k, c) VALUES (1, 'c1')",
        "Table s.t uses the 'FIRST_ROW' merge engine which does not support partial updates. Please make sure "
        "the number of specified columns in INSERT INTO matches columns of the Fluss table.",
    ),
    (
        "versioned",
        "INSERT INTO s.t (k, c) VALUES (1, 'c1')",
        "Table s.t uses the 'VERSIONED' merge engine which does not support partial updates. Please make sure "
        "the number of specified columns in INSERT INTO matches columns of the Fluss table.",
    ),
    (
        "default",
        "DELETE FROM s.t WHERE c = 'x'",
        "Currently, Fluss table only supports DELETE statement with conditions on primary key.",
    ),
    (
        "default",
        "DELETE FROM s.t WHERE k = 1 AND c = 'x'",
        "Currently, Fluss table only supports DELETE statement with conditions on primary key.",
    ),
    (
        "default",
        "DELETE FROM s.t WHERE k > 1",
        "Currently, Fluss table only supports DELETE statement with conditions on primary key.",
    ),
    (
        "default",
        "DELETE FROM s.t",
        "Currently, Fluss table only supports DELETE statement with conditions on primary key.",
    ),
    (
        "default",
        "DELETE FROM s.t WHERE k = 1 OR k = 2",
        "Currently, Fluss table only supports DELETE statement with conditions on primary key.",
    ),
    (
        "default",
        "UPDATE s.t SET c = 'x' WHERE n = 1",
        "Currently, Fluss table only supports UPDATE statement with conditions on primary key.",
    ),
    (
        "default",
        "UPDATE s.t SET k = 5, c = 'x' WHERE k = 1",
        "Updates to primary keys are not supported, primaryKeys ([k]), updatedColumns ([k, c])",
    ),
    (
        "default",
        "INSERT INTO s.t (c, n) VALUES ('x', 1)",
        "Fluss table sink does not support partial updates without fully specifying the primary key columns. "
        "The insert columns are [c, n], but the primary key columns are [k]. Please make sure the specified "
        "columns in INSERT INTO contains the primary key columns.",
    ),
    (
        "default",
        "INSERT INTO s.t VALUES (NULL, 'x', 1, 1)",
        "Column 'k' is NOT NULL, however, a null value is being written into it (row 1). You can set job "
        "configuration 'table.exec.sink.not-null-enforcer'='DROP' to suppress this exception and drop such "
        "records silently.",
    ),
]


@pytest.mark.parametrize(("engine", "text", "message"), FLUSS_REFUSALS)
def test_refusals_carry_fluss_words(engine, text, message):
    with pytest.raises(WriteRefusedError) as refused:
        plan_of(text, make_spec(options=ENGINES[engine]), stored={"k": 1, "c": "a", "n": 1, "d": None})
    assert str(refused.value) == message


def test_delete_and_update_on_a_disabled_delete_table_are_refused_as_fluss_0_9_1_does():
    """Fluss 0.9.1's FlinkTableSink.validateUpdatableAndDeletable refuses both, in its DELETE words (Fluss main
    lets UPDATE through; docs/semantics.md §16 keeps the release's rule)."""
    spec = make_spec(options={"table.delete.behavior": "disable"})
    for statement in ("DELETE FROM s.t WHERE k = 1", "UPDATE s.t SET c = 'z' WHERE k = 1"):
        with pytest.raises(
            WriteRefusedError,
            match=r"^Table s.t has delete behavior set to 'disable' which does not support DELETE statements\.$",
        ):
            plan_of(statement, spec, stored={"k": 1, "c": "a", "n": 1, "d": None})


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("SELECT * FROM s.t", "not SELECT"),
        ("DROP TABLE s.t", "not DROP"),
        ("TRUNCATE TABLE s.t", "not TRUNCATETABLE"),
        ("MERGE INTO s.t USING s.u ON s.t.k = s.u.k WHEN MATCHED THEN DELETE", "not MERGE"),
        ("CREATE TABLE s.x (a INT)", "not CREATE"),
    ],
)
def test_statements_other_than_writes_are_refused(text, words):
    with pytest.raises(WriteRefusedError, match=words):
        sqlwrite.parse(text)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("INSERT OVERWRITE s.t VALUES (1, 'a', 1, 1)", "SupportsOverwrite"),
        ("INSERT INTO s.t VALUES (1, 'a', 1)", "Different number of columns"),
        ("INSERT INTO s.t (k, zz) VALUES (1, 2)", "Unknown target column 'zz'"),
        ("INSERT INTO s.t (k, k) VALUES (1, 2)", "assigned more than once"),
        ("INSERT INTO s.t VALUES ('1', 'a', 1, 1)", "Incompatible types for sink column 'k' at position 0"),
        ("INSERT INTO s.t VALUES (1, 2, 1, 1)", "Incompatible types for sink column 'c' at position 1"),
        ("INSERT INTO s.t VALUES (1.5, 'a', 1, 1)", r"Query schema: \[EXPR\$0: DECIMAL\(2, 1\) NOT NULL"),
        ("INSERT INTO s.t VALUES (2147483648, 'a', 1, 1)", "EXPR\\$0: BIGINT NOT NULL"),
        ("INSERT INTO s.t VALUES (1, upper('a'), 1, 1)", "must be a literal"),
        ("INSERT INTO s.t VALUES (1, 'a' || 'b', 1, 1)", "must be a literal"),
        ("UPDATE s.t SET n = n + 1 WHERE k = 1", "must be a literal"),
        ("UPDATE s.t SET zz = 1 WHERE k = 1", "Unknown target column 'zz'"),
        (
            "DELETE FROM s.t WHERE k = '1'",
            r"Cannot apply '=' to arguments of type '<INTEGER> = <CHAR\(1\) NOT NULL>'",
        ),
        ("INSERT INTO s.t SELECT k, c, n, d FROM s.t GROUP BY k, c, n, d", "group"),
        ("INSERT INTO cat.s.t VALUES (1, 'a', 1, 1)", "catalog-qualified"),
        ("INSERT INTO nope VALUES (1)", "Unknown table nope: no table of that name"),
        ("DELETE FROM s.t WHERE k = 1 RETURNING *", "not supported|parse error"),
    ],
)
def test_bad_statements_name_what_is_wrong(text, words):
    with pytest.raises(ChangelakeError, match=words):
        plan_of(text, make_spec(), stored={"k": 1, "c": "a", "n": 1, "d": None})


@pytest.mark.parametrize(
    "text",
    [
        "DELETE FROM s.t WHERE k = 1; DROP TABLE s.t",
        "DELETE FROM `s`.`t; DROP TABLE x` WHERE k = 1",
        "DELETE FROM s.`t` WHERE `k = 1 OR 1` = 1",
        "INSERT INTO s.t (`k`, `c) VALUES (1, 'x'); --`) VALUES (1, 'x')",
        "UPDATE s.t SET c = 'x' WHERE k = 1 -- AND c = 'y'\n OR 1 = 1",
    ],
)
def test_injection_attempts_are_refused_before_anything_is_written(text):
    with pytest.raises(ChangelakeError):
        for tree in sqlwrite.parse(text):
            assert sqlwrite.target_table(tree, lambda: ["s.t"]) == "s.t"
            sqlwrite.plan(
                tree,
                make_spec(),
                lookup=lambda s, k: {"k": 1, "c": "a", "n": 1, "d": None},
                read_rows=lambda s: None,
                known=lambda: ["s.t"],
                spec_of=lambda n: make_spec(),
            )


def test_quotes_in_literals_are_data_not_syntax():
    # Flink's literal rules: '' is a quote, a backslash is itself, a comment marker inside a string is text.
    plan = plan_of("INSERT INTO s.t VALUES (1, 'a''b\\c -- ; DROP TABLE s.t', 1, 1)", make_spec())
    assert plan.records[0]["data"]["c"] == "a'b\\c -- ; DROP TABLE s.t"
    with pytest.raises(ChangelakeError):
        plan_of('INSERT INTO s.t VALUES (1, "double quoted", 1, 1)', make_spec())


# --- applied in process, against the reference merge --------------------------------------------------------
def _expected(spec: TableSpec, batches: list[tuple[list[tuple[str, tuple]], list[str] | None]]):
    """Rows and changelog the reference model gives for these batches of (op, full row) records."""
    rows: dict = {}
    log = []
    for records, target in batches:
        changes, _ = apply_sequential(spec, rows, records, target)
        log += changes
    return sorted(rows.values()), log


def _actual(lake, spec: TableSpec):
    names = list(spec.column_names)
    rows = sorted(tuple(r[c] for c in names) for r in lake.rows_arrow(spec.full_name).to_pylist())
    log = [
        (r["_change_type"], tuple(r[c] for c in names))
        for r in lake.changelog_arrow(spec.full_name).to_pylist()
    ]
    return rows, log


D = decimal.Decimal
# Per engine: statements, and the (records, target columns) the reference model applies for each.
SCENARIOS = {
    "default": [
        (
            "INSERT INTO s.t VALUES (1, 'a', 10, 1.5), (2, 'b', 20, NULL)",
            [("+I", (1, "a", 10, D("1.50"))), ("+I", (2, "b", 20, None))],
            None,
        ),
        (
            "INSERT INTO s.t (k, c) VALUES (1, 'a2'), (3, 'c')",
            [("+I", (1, "a2", None, None)), ("+I", (3, "c", None, None))],
            ["k", "c"],
        ),
        ("UPDATE s.t SET n = 11, d = 2 WHERE k = 1", [("+U", (1, "a2", 11, D("2.00")))], None),
        ("DELETE FROM s.t WHERE k = 2", [("-D", (2, None, None, None))], None),
        ("DELETE FROM s.t WHERE k = 99", [], None),  # no such key: nothing to write, as for an UPDATE
        ("INSERT INTO s.t (k, n) SELECT k + 0, n FROM s.t WHERE k = 1", None, None),  # refused: k + 0
    ],
    "first_row": [
        (
            "INSERT INTO s.t VALUES (1, 'a', 10, 1.5), (1, 'b', 20, 2)",
            [("+I", (1, "a", 10, D("1.50"))), ("+I", (1, "b", 20, D("2.00")))],
            None,
        ),
        ("INSERT INTO s.t VALUES (2, 'c', 1, NULL)", [("+I", (2, "c", 1, None))], None),
    ],
    "versioned": [
        (
            "INSERT INTO s.t VALUES (1, 'v5', 5, NULL), (1, 'v3', 3, NULL)",
            [("+I", (1, "v5", 5, None)), ("+I", (1, "v3", 3, None))],
            None,
        ),
        ("INSERT INTO s.t VALUES (1, 'v5b', 5, 1)", [("+I", (1, "v5b", 5, D("1.00")))], None),
    ],
    "aggregation": [
        (
            "INSERT INTO s.t VALUES (1, 'a', 10, 1), (1, 'b', 5, NULL)",
            [("+I", (1, "a", 10, D("1.00"))), ("+I", (1, "b", 5, None))],
            None,
        ),
        (
            "INSERT INTO s.t (k, n) VALUES (1, 7), (2, 1)",
            [("+I", (1, None, 7, None)), ("+I", (2, None, 1, None))],
            ["k", "n"],
        ),
    ],
}


@pytest.mark.parametrize("engine", list(SCENARIOS))
def test_statements_applied_equal_the_reference_merge(tmp_path, engine):
    lake = sparkless_lake(tmp_path)
    spec = make_spec(options=ENGINES[engine])
    lake.create_table(spec)
    applied = []
    for number, (text, records, target) in enumerate(SCENARIOS[engine], start=1):
        if records is None:
            with pytest.raises(WriteRefusedError):
                lake.sql(text)
            continue
        (result,) = lake.sql(text)
        if not records:
            assert result.status == "nothing to write" and result.batch_id is None, (number, result)
            continue
        assert result.status == "applied" and result.batch_id == len(applied) + 1, (number, result)
        assert result.writer_seq == result.batch_id  # the sql writer is the table's only writer here
        applied.append((records, target))
    assert _actual(lake, spec) == _expected(spec, applied)


def test_update_of_a_missing_key_writes_nothing(tmp_path):
    lake = sparkless_lake(tmp_path)
    lake.create_table(make_spec())
    (result,) = lake.sql("UPDATE s.t SET c = 'x' WHERE k = 1")
    assert result.status == "nothing to write" and result.batch_id is None
    assert lake.rows_arrow("s.t").num_rows == 0
    assert Storage.state(lake.storage.pk_table(lake.spec("s.t"))).last_batch == 0


def test_idempotency_key_makes_a_retry_a_no_op(tmp_path):
    lake = sparkless_lake(tmp_path)
    spec = make_spec(options=ENGINES["aggregation"])
    lake.create_table(spec)
    statement = "INSERT INTO s.t (k, n) VALUES (1, 5)"
    (first,) = lake.sql(statement, idempotency_key="load-1")
    (again,) = lake.sql(statement, idempotency_key="load-1")
    assert (first.status, again.status) == ("applied", "already-applied")
    assert again.batch_id == first.batch_id == 1 and again.counts == first.counts
    assert lake.lookup("s.t", {"k": 1})[0]["n"] == 5  # summed once, not twice
    (other,) = lake.sql(statement, idempotency_key="load-2")  # another key: another batch
    assert other.batch_id == 2 and lake.lookup("s.t", {"k": 1})[0]["n"] == 10
    with pytest.raises(BatchRefusedError, match="used by another statement"):
        lake.sql("INSERT INTO s.t (k, n) VALUES (1, 6)", idempotency_key="load-1")
    assert lake.lookup("s.t", {"k": 1})[0]["n"] == 10


def test_a_retried_statement_with_its_batch_id_is_a_no_op(tmp_path):
    lake = sparkless_lake(tmp_path)
    lake.create_table(make_spec())
    lake.sql("INSERT INTO s.t VALUES (1, 'a', 1, 1)")
    (first,) = lake.sql("UPDATE s.t SET c = 'b' WHERE k = 1", batch_id=2)
    (again,) = lake.sql("UPDATE s.t SET c = 'b' WHERE k = 1", batch_id=2)
    assert (first.status, again.status) == ("applied", "already-applied")
    assert [r["_change_type"] for r in lake.changelog_arrow("s.t").to_pylist()] == ["+I", "-U", "+U"]


def test_a_refused_statement_leaves_the_table_as_it_was(tmp_path):
    lake = sparkless_lake(tmp_path)
    lake.create_table(make_spec())
    lake.sql("INSERT INTO s.t VALUES (1, 'a', 1, 1)")
    before = (lake.rows_arrow("s.t"), lake.changelog_arrow("s.t").num_rows)
    with pytest.raises(WriteRefusedError):  # the second statement is refused; the first stays applied
        lake.sql("INSERT INTO s.t VALUES (2, 'b', 2, 2); DELETE FROM s.t WHERE c = 'a'")
    with pytest.raises(WriteRefusedError):
        lake.sql("INSERT INTO s.t VALUES (3, 'c', 3, 3), (4, NULL, 'x', 4)")
    rows = lake.rows_arrow("s.t").to_pylist()
    assert [r["k"] for r in rows] == [1, 2]
    assert before[1] + 1 == lake.changelog_arrow("s.t").num_rows


def test_insert_select_projects_and_filters_one_table(tmp_path):
    lake = sparkless_lake(tmp_path)
    lake.create_table(make_spec())
    lake.create_table(make_spec("s.copy", options=ENGINES["aggregation"]))
    lake.sql(
        "INSERT INTO s.t VALUES (1, 'a', 10, 1.25), (2, NULL, 20, 2), (3, 'c', 30, NULL), (4, 'd', NULL, 4)"
    )
    (result,) = lake.sql(
        "INSERT INTO s.copy (k, n, c) SELECT x.k, n, 'copied' FROM s.t AS x "
        "WHERE (n >= 20 OR c IS NULL) AND NOT k IN (3) AND d > 1"
    )
    assert result.counts["inserted"] == 1
    assert lake.rows_arrow("s.copy").to_pylist() == [{"k": 2, "c": "copied", "n": 20, "d": None}]
    (none,) = lake.sql("INSERT INTO s.copy SELECT * FROM global_temp.s__t WHERE k = 42")
    assert none.status == "nothing to write"


def test_cli_sql_reports_each_statement_and_exits_2_on_a_refusal(home, cli_env):
    (home / "tables" / "s.t.yaml").write_text(
        json.dumps({"name": "s.t", "columns": COLUMNS, "primary_key": ["k"], "options": {"bucket.num": 1}})
    )
    script = home / "w.sql"
    script.write_text("INSERT INTO s.t VALUES (1, 'a', 1, 1);\nUPDATE s.t SET c = 'b' WHERE k = 1;\n")

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "changelake.cli", "sql", *args],
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    done = cli("-f", str(script), "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert [(s["kind"], s["status"], s["batch_id"]) for s in document["statements"]] == [
        ("insert", "applied", 1),
        ("update", "applied", 2),
    ]
    deleted = cli("DELETE FROM s.t WHERE k = 1", "--idempotency-key", "gdpr-1")
    assert deleted.returncode == 0 and "DELETE s.t: sql batch 3 (table batch 3) applied" in deleted.stdout
    retried = cli("DELETE FROM s.t WHERE k = 1", "--idempotency-key", "gdpr-1")
    assert "no-op (already applied as sql batch 3 (table batch 3))" in retried.stdout
    refused = cli("DELETE FROM s.t WHERE c = 'b'")
    assert refused.returncode == 2
    assert (
        "Currently, Fluss table only supports DELETE statement with conditions on primary key."
        in refused.stderr
    )
    status = subprocess.run(
        [sys.executable, "-m", "changelake.cli", "status", "--format", "json"],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert json.loads(status.stdout)[0]["last_batch"] == 3


def test_partitioned_keys_ignored_deletes_and_auto_increment_tables(tmp_path):
    lake = sparkless_lake(tmp_path)
    day = {"name": "day", "type": "STRING"}
    lake.create_table(make_spec("s.p", columns=[*COLUMNS, day], pk=("k", "day"), partition_keys=("day",)))
    lake.sql("INSERT INTO s.p VALUES (1, 'a', 1, 1, '2024-01-01'), (1, 'b', 2, 2, '2024-01-02')")
    lake.sql("UPDATE s.p SET c = 'x' WHERE k = 1 AND day = '2024-01-02'")
    (deleted,) = lake.sql("DELETE FROM s.p WHERE day = '2024-01-01' AND k = 1")
    assert deleted.counts["deleted"] == 1
    assert [(r["day"], r["c"]) for r in lake.rows_arrow("s.p").to_pylist()] == [("2024-01-02", "x")]

    lake.create_table(make_spec("s.ig", options={"table.delete.behavior": "ignore"}))
    lake.sql("INSERT INTO s.ig VALUES (1, 'a', 1, 1)")
    (ignored,) = lake.sql("DELETE FROM s.ig WHERE k = 1")  # committed, dropped by the table's behaviour
    assert (ignored.status, ignored.counts["ignored"], ignored.changelog_records) == ("applied", 1, 0)
    assert lake.rows_arrow("s.ig").num_rows == 1

    auto = [{"name": "k", "type": "INT"}, {"name": "id", "type": "BIGINT"}, {"name": "c", "type": "STRING"}]
    lake.create_table(make_spec("s.ai", columns=auto, options={"auto-increment.fields": "id"}))
    (inserted,) = lake.sql("INSERT INTO s.ai (k, c) VALUES (1, 'a')")  # every write names its columns
    assert inserted.counts["inserted"] == 1 and lake.lookup("s.ai", {"k": 1})[0]["id"] is not None
    for full_row in ("INSERT INTO s.ai VALUES (2, 5, 'b')", "UPDATE s.ai SET c = 'z' WHERE k = 1"):
        with pytest.raises(WriteRefusedError, match=r"^This table has auto increment column \[id\]"):
            lake.sql(full_row)


def test_a_batch_committed_by_another_writer_meanwhile_makes_the_statement_plan_again(tmp_path, monkeypatch):
    lake = sparkless_lake(tmp_path)
    lake.create_table(make_spec())
    lake.sql("INSERT INTO s.t VALUES (1, 'a', 1, 1)")
    real_plan, calls = sqlwrite.plan, []

    def plan_then_race(tree, spec, **kwargs):
        planned = real_plan(tree, spec, **kwargs)
        calls.append(planned.records)
        if len(calls) == 1:  # another writer commits table batch 2 after this UPDATE read the row
            lake.apply("s.t", [{"op": "+U", "data": {"k": 1, "c": "other", "n": 9, "d": "9"}}], batch_id=1)
        return planned

    monkeypatch.setattr(sqlwrite, "plan", plan_then_race)
    (result,) = lake.sql("UPDATE s.t SET c = 'mine' WHERE k = 1")
    assert result.batch_id == 3 and len(calls) == 2
    # planned again on the other writer's row: its n and d are kept, not the stale ones read first
    assert calls[0][0]["data"]["n"] == 1 and calls[1][0]["data"]["n"] == 9
    assert lake.lookup("s.t", {"k": 1}) == [{"k": 1, "c": "mine", "n": 9, "d": decimal.Decimal("9.00")}]
