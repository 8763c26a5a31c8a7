"""The endpoint's SQL warm-up (changelake.runtime.server.warm_sql), without Spark: which views it scans,
which statements it sends, and that it never fails the start."""

from __future__ import annotations

from types import SimpleNamespace

from changelake.runtime import server
from changelake.runtime.server import warm_model_statements, warm_queries, warm_sql


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
    monkeypatch.setattr(server, "WARM_ROUNDS", 2)
    spark = _FakeSpark({"small": 1000, "big": server.WARM_MAX_BYTES + 1})
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
    monkeypatch.setattr(server, "WARM_ROUNDS", 1)
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
