"""The endpoint's warm-ups without Spark: the SQL warm-up (``warm_sql``: which views it scans, which
statements it sends) and the start's dbt build (``warm_dbt``: when it runs, into which schema, with what), and
that neither ever fails the start."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from changelake.runtime import warmup
from changelake.runtime.endpoint import Endpoint
from changelake.runtime.warmup import (
    WARM_DBT_SCHEMA,
    dbt_source_views,
    warm_dbt,
    warm_dbt_skipped,
    warm_model_statements,
    warm_queries,
    warm_sql,
)


class _FakeSpark:
    """newSession / table / sql / DataFrame.write as warm_sql uses them; records every statement."""

    def __init__(self, sizes: dict[str, int], failing: str | None = None):
        self.sizes = sizes
        self.failing = failing
        self.statements: list[str] = []
        self.written: list[str] = []
        self.temp_views: list[str] = []

    def newSession(self):  # noqa: N802 (pyspark's name)
        return self

    def table(self, name: str):
        view = name.removeprefix("global_temp.").strip("`")
        stats = SimpleNamespace(sizeInBytes=lambda: self.sizes[view])
        plan = SimpleNamespace(stats=lambda: stats)
        jdf = SimpleNamespace(queryExecution=lambda: SimpleNamespace(optimizedPlan=lambda: plan))
        writer = SimpleNamespace(mode=lambda _m: SimpleNamespace(parquet=self.written.append))
        return SimpleNamespace(_jdf=jdf, columns=["id", "v"], write=writer)

    def _frame(self, name: str):
        writer = SimpleNamespace(mode=lambda _m: SimpleNamespace(parquet=self.written.append))
        return SimpleNamespace(
            columns=["id", "name"], write=writer, createOrReplaceTempView=self.temp_views.append, name=name
        )

    def range(self, *args):  # the synthetic relation: spark.range(...).selectExpr(...)
        return SimpleNamespace(selectExpr=lambda *columns: self._frame("synthetic"))

    @property
    def read(self):
        return SimpleNamespace(parquet=lambda path: self._frame(path))

    def sql(self, statement: str):
        if self.failing and self.failing in statement:
            raise RuntimeError("boom")
        self.statements.append(statement)
        return SimpleNamespace(collect=lambda: [])


def test_warm_queries_quote_names_and_wrap_tests_as_dbt_does():
    queries = warm_queries("global_temp.`a__x`", "we`ird")
    assert all("global_temp.`a__x`" in q for q in queries)
    assert all("`we``ird`" in q for q in queries[:4])
    assert sum(q.startswith("select count(*) as failures") for q in queries) == 4


CREATE_DB = "create database if not exists `changelake_warm_up_db`"
DROP_DB = "drop database if exists `changelake_warm_up_db` cascade"


def test_warm_model_statements_rebuild_a_table_in_the_scratch_database():
    assert warm_model_statements("we`ird", "global_temp.`v`") == [
        "drop table if exists `changelake_warm_up_db`.`we``ird`",
        "create table `changelake_warm_up_db`.`we``ird` using parquet as select * from global_temp.`v`",
    ]


def test_warm_sql_runs_over_the_synthetic_relation_and_small_views_only_and_cleans_up(tmp_path, monkeypatch):
    monkeypatch.setattr(warmup, "WARM_ROUNDS", 2)
    spark = _FakeSpark({"small": 1000, "big": warmup.WARM_MAX_BYTES + 1})
    scratch = tmp_path / "warm-up"
    scratch.mkdir()
    (scratch / "leftover").write_text("x")
    messages: list[str] = []
    ran = warm_sql(spark, ["big", "small"], scratch, messages.append)
    synthetic = warm_queries("`changelake_warm_up`", "name") + warm_model_statements(
        "changelake_warm_up", "`changelake_warm_up`"
    )
    small = warm_queries("global_temp.`small`", "id") + warm_model_statements("small", "global_temp.`small`")
    assert spark.temp_views == ["changelake_warm_up"]  # a temp view of the warm-up's session, not global
    assert spark.statements == [CREATE_DB, *(2 * (synthetic + small)), DROP_DB]
    assert not any("`big`" in s for s in spark.statements)
    assert spark.written == [str(scratch / "changelake_warm_up")]  # the synthetic relation's files
    assert ran == 1 + 1 + 2 * (len(synthetic) + len(small))
    assert not scratch.exists()
    assert messages == [messages[0]] and "a synthetic relation and 1 view(s)" in messages[0]


def test_the_synthetic_relation_warms_even_without_tables(tmp_path, monkeypatch):
    monkeypatch.setattr(warmup, "WARM_ROUNDS", 1)
    spark = _FakeSpark({})
    ran = warm_sql(spark, [], tmp_path / "warm-up", lambda _m: None)
    assert spark.statements == [
        CREATE_DB,
        *warm_queries("`changelake_warm_up`", "name"),
        *warm_model_statements("changelake_warm_up", "`changelake_warm_up`"),
        DROP_DB,
    ]
    assert ran == 1 + len(spark.statements) - 1


def test_a_failing_warm_up_query_is_reported_not_raised_and_the_scratch_database_dropped(tmp_path):
    spark = _FakeSpark({"a": 10, "b": 10}, failing="is not null group by")
    messages: list[str] = []
    ran = warm_sql(spark, ["a", "b"], tmp_path / "warm-up", messages.append)
    assert ran == 3  # the synthetic write, the database and the first statement; the second failed
    assert "warm-up stopped: RuntimeError: boom" in messages[0]
    assert spark.statements[-1] == DROP_DB


# ---- the start's dbt build (warm_dbt), with a stand-in dbt executable that records how it was called ----

REPO_PROJECT = Path(__file__).resolve().parents[2] / "dbt_project"

FAKE_DBT = """#!{python}
import json, os, sys, time
command = sys.argv[1]
with open(os.environ["FAKE_DBT_CALLS"], "a") as calls:
    calls.write(json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd(), "env": {{
        k: os.environ.get(k) for k in ("CHANGELAKE_DBT_SCHEMA", "SPARK_THRIFT_HOST", "SPARK_THRIFT_PORT",
                                       "DBT_PROFILES_DIR")}}}}) + "\\n")
if command == "build":
    time.sleep(float(os.environ.get("FAKE_DBT_SLEEP", "0")))
    print("1 of 1 ERROR creating sql table model x")
    sys.exit(int(os.environ.get("FAKE_DBT_EXIT", "0")))
"""


def _fake_dbt(tmp_path: Path, monkeypatch, exit_code: int = 0, sleep: float = 0.0) -> tuple[Path, Path]:
    dbt = tmp_path / "bin" / "dbt"
    dbt.parent.mkdir()
    dbt.write_text(FAKE_DBT.format(python=sys.executable))
    dbt.chmod(0o755)
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_DBT_CALLS", str(calls))
    monkeypatch.setenv("FAKE_DBT_EXIT", str(exit_code))
    monkeypatch.setenv("FAKE_DBT_SLEEP", str(sleep))
    monkeypatch.delenv("CHANGELAKE_SERVER_WARM_DBT", raising=False)
    monkeypatch.delenv("CHANGELAKE_DBT_SCHEMA", raising=False)
    return dbt, calls


def _calls(path: Path) -> dict[str, dict]:
    if not path.exists():
        return {}
    return {c["argv"][0]: c for c in map(json.loads, path.read_text().splitlines())}


def test_dbt_source_views_are_the_global_temp_sources_of_the_project(tmp_path):
    views = dbt_source_views(REPO_PROJECT)
    assert views == {"shop__shop_user_stats__input", "shop__shop_revenue__input"}  # the tables: Iceberg
    (tmp_path / "models" / "x").mkdir(parents=True)
    (tmp_path / "models" / "x" / "s.yml").write_text(
        "version: 2\nsources:\n"
        "  - name: a\n    schema: global_temp\n    tables: [{name: t1}, {name: t2, identifier: real_t2}]\n"
        "  - name: b\n    schema: raw\n    tables: [{name: elsewhere}]\n"
    )
    assert dbt_source_views(tmp_path) == {"t1", "real_t2"}


def test_warm_dbt_builds_into_the_scratch_schema_parses_for_users_and_drops_the_schema(tmp_path, monkeypatch):
    dbt, calls = _fake_dbt(tmp_path, monkeypatch)
    dropped: list[str] = []
    messages: list[str] = []
    endpoint = Endpoint(host="127.0.0.1", thrift_port=41234, connect_port=41235)
    views = sorted(dbt_source_views(REPO_PROJECT)) + ["other__table"]
    code = warm_dbt(REPO_PROJECT, endpoint, views, dropped.append, messages.append, dbt=dbt)
    assert code == 0
    assert dropped == [WARM_DBT_SCHEMA, WARM_DBT_SCHEMA]  # a killed start's leftover, then this build's
    got = _calls(calls)
    build, parse = got["build"], got["parse"]
    assert build["argv"][:3] == ["build", "--target", "thrift"]
    target = build["argv"][build["argv"].index("--target-path") + 1]
    assert not target.startswith(str(REPO_PROJECT)) and not Path(target).exists()  # scratch, removed
    assert build["env"] == {
        "CHANGELAKE_DBT_SCHEMA": WARM_DBT_SCHEMA,
        "SPARK_THRIFT_HOST": "127.0.0.1",
        "SPARK_THRIFT_PORT": "41234",
        "DBT_PROFILES_DIR": str(REPO_PROJECT),
    }
    # The parse writes the users' partial-parse state: their schema, the project's own target/.
    assert parse["argv"] == ["parse", "--target", "thrift"] and parse["cwd"] == str(REPO_PROJECT)
    assert parse["env"]["CHANGELAKE_DBT_SCHEMA"] == "analytics"
    assert parse["env"]["SPARK_THRIFT_PORT"] == "41234"
    assert "exit 0; dbt parse" in messages[-1]


def test_warm_dbt_waits_for_every_source_view_and_can_be_turned_off(tmp_path, monkeypatch):
    dbt, calls = _fake_dbt(tmp_path, monkeypatch)
    views = sorted(dbt_source_views(REPO_PROJECT))
    messages: list[str] = []
    assert warm_dbt(REPO_PROJECT, Endpoint(), views[1:], [].append, messages.append, dbt=dbt) is None
    assert f"not registered ({views[0]}, ...)" in messages[0]
    monkeypatch.setenv("CHANGELAKE_SERVER_WARM_DBT", "0")
    assert warm_dbt(REPO_PROJECT, Endpoint(), views, [].append, messages.append, dbt=dbt) is None
    assert len(messages) == 1 and _calls(calls) == {}


def test_warm_dbt_skipped_says_whether_the_start_builds_the_project(tmp_path, monkeypatch):
    """The server runs the synthetic SQL warm-up only where this says the dbt build will not run."""
    dbt, _calls = _fake_dbt(tmp_path, monkeypatch)
    views = sorted(dbt_source_views(REPO_PROJECT))
    assert warm_dbt_skipped(REPO_PROJECT, views, dbt) is None
    assert f"not registered ({views[0]}, ...)" in warm_dbt_skipped(REPO_PROJECT, views[1:], dbt)
    assert "is missing" in warm_dbt_skipped(tmp_path, views, dbt)
    monkeypatch.setenv("CHANGELAKE_SERVER_WARM_DBT", "0")
    assert warm_dbt_skipped(REPO_PROJECT, views, dbt) == ""


def test_a_failing_or_hanging_warm_dbt_build_is_reported_and_the_schema_still_dropped(tmp_path, monkeypatch):
    views = sorted(dbt_source_views(REPO_PROJECT))
    dbt, _calls_path = _fake_dbt(tmp_path, monkeypatch, exit_code=1)
    dropped: list[str] = []
    messages: list[str] = []
    assert warm_dbt(REPO_PROJECT, Endpoint(), views, dropped.append, messages.append, dbt=dbt) == 1
    assert "dbt build exited 1: 1 of 1 ERROR creating sql table model x" in messages[0]
    assert dropped == [WARM_DBT_SCHEMA] * 2

    monkeypatch.setenv("FAKE_DBT_SLEEP", "30")
    dropped.clear()
    started = time.monotonic()
    code = warm_dbt(REPO_PROJECT, Endpoint(), views, dropped.append, messages.append, dbt=dbt, timeout=1.0)
    assert code is None and time.monotonic() - started < 10
    assert any("dbt build stopped after 1s" in m for m in messages)
    assert dropped == [WARM_DBT_SCHEMA] * 2


def test_warm_kept_rows_keeps_every_tables_files_so_the_first_apply_reads_none(tmp_path, monkeypatch):
    """The endpoint's start reads the tables' data and delete files into the rows its applies keep: the first
    batch after it merges on read without opening a data or delete file (it only writes its own)."""
    import pyarrow.parquet as pq

    from changelake.engine import buckets
    from tests.helpers import sparkless_lake

    lake = sparkless_lake(tmp_path)
    spec = {
        "name": "w.t",
        "columns": [{"name": "k", "type": "INT"}, {"name": "v", "type": "STRING"}],
        "primary_key": ["k"],
        "options": {"bucket.num": 2, "write-only": "true"},
    }
    (tmp_path / "tables" / "w.t.yaml").write_text(
        json.dumps(spec)
    )  # the endpoint serves the spec files' tables
    lake.create_table(spec)
    lake.apply("w.t", [{"op": "+I", "data": {"k": k, "v": "a"}} for k in range(400)], batch_id=1)
    lake.apply("w.t", [{"op": "+U", "data": {"k": k, "v": "b"}} for k in range(0, 400, 7)], batch_id=2)
    table = lake.storage.pk_table(lake.spec("w.t"))
    files = lake.storage.table_files(table)
    assert any(f.is_delete for f in files) and sum(not f.is_delete for f in files) >= 2
    buckets.STORED_ROWS.clear()  # as in a freshly started endpoint
    messages: list[str] = []
    described: list[list[str]] = []
    describe = lake.storage.to_data_files
    monkeypatch.setattr(
        lake.storage, "to_data_files", lambda t, paths: described.append(paths) or describe(t, paths)
    )
    warmup.warm_kept_rows(lake, messages.append).join(timeout=60)
    # the first batch's first description of a file for Iceberg (and its imports) is paid here, read-only
    assert len(described) == 1 and described[0][0] in {f.path for f in files if not f.is_delete}
    monkeypatch.undo()
    schema = buckets.row_schema(lake.spec("w.t"))
    assert all(
        buckets.STORED_ROWS.get_deletes(f.path) is not None
        if f.is_delete
        else buckets.STORED_ROWS.holds(f.path, schema)
        for f in files
    )
    assert messages and f"{len(files)} table file(s) kept" in messages[-1]
    opened: list[str] = []
    real = pq.ParquetFile

    def parquet_file(source, *args, **kwargs):
        opened.append(str(getattr(source, "path", source)))
        return real(source, *args, **kwargs)

    monkeypatch.setattr(pq, "ParquetFile", parquet_file)
    monkeypatch.setattr(buckets, "read_position_deletes", lambda _s: opened.append("deletes") or {})
    lake.apply("w.t", [{"op": "+U", "data": {"k": 3, "v": "c"}}], batch_id=3)
    assert opened == [] and lake.lookup("w.t", {"k": 3}) == [{"k": 3, "v": "c"}]


def test_warm_kept_rows_reports_a_table_it_cannot_read_and_goes_on(tmp_path):
    lake = SimpleNamespace(
        specs=lambda: {"a.broken": None, "b.fine": None},
        spec=lambda name: (_ for _ in ()).throw(RuntimeError("no such file")) if name == "a.broken" else name,
        storage=SimpleNamespace(
            pk_table=lambda _spec: SimpleNamespace(io=SimpleNamespace(properties={})),
            table_files=lambda _table: [],
        ),
    )
    messages: list[str] = []
    warmup.warm_kept_rows(lake, messages.append).join(timeout=10)
    assert "a.broken's files not kept (RuntimeError: no such file)" in messages[0]
    assert messages[-1].startswith("[server] warm-up: 0 table file(s) kept")
