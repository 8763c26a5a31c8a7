"""The endpoint's SQL warm-up (changelake.runtime.server.warm_sql), without Spark: which views it scans,
which statements it sends, and that it never fails the start."""

from __future__ import annotations

from types import SimpleNamespace

from changelake.runtime import server
from changelake.runtime.server import warm_queries, warm_sql


class _FakeSpark:
    """newSession / table / sql / DataFrame.write as warm_sql uses them; records every statement."""

    def __init__(self, sizes: dict[str, int], failing: str | None = None):
        self.sizes = sizes
        self.failing = failing
        self.statements: list[str] = []
        self.written: list[str] = []

    def newSession(self):  # noqa: N802 (pyspark's name)
        return self

    def table(self, name: str):
        view = name.removeprefix("global_temp.").strip("`")
        stats = SimpleNamespace(sizeInBytes=lambda: self.sizes[view])
        plan = SimpleNamespace(stats=lambda: stats)
        jdf = SimpleNamespace(queryExecution=lambda: SimpleNamespace(optimizedPlan=lambda: plan))
        writer = SimpleNamespace(mode=lambda _m: SimpleNamespace(parquet=self.written.append))
        return SimpleNamespace(_jdf=jdf, columns=["id", "v"], write=writer)

    def sql(self, statement: str):
        if self.failing and self.failing in statement:
            raise RuntimeError("boom")
        self.statements.append(statement)
        return SimpleNamespace(collect=lambda: [])


def test_warm_queries_quote_names_and_wrap_tests_as_dbt_does():
    queries = warm_queries("a__x", "we`ird")
    assert all("global_temp.`a__x`" in q for q in queries)
    assert all("`we``ird`" in q for q in queries[:4])
    assert sum(q.startswith("select count(*) as failures") for q in queries) == 4


def test_warm_sql_scans_small_views_only_and_cleans_up(tmp_path, monkeypatch):
    monkeypatch.setattr(server, "WARM_ROUNDS", 2)
    spark = _FakeSpark({"small": 1000, "big": server.WARM_MAX_BYTES + 1})
    scratch = tmp_path / "warm-up"
    scratch.mkdir()
    (scratch / "leftover").write_text("x")
    messages: list[str] = []
    ran = warm_sql(spark, ["big", "small"], scratch, messages.append)
    per_view = len(warm_queries("small", "id")) + 1  # the statements and one Parquet write
    assert ran == 2 * per_view
    assert spark.statements == 2 * warm_queries("small", "id")
    assert not any("`big`" in s for s in spark.statements)
    assert spark.written == [str(scratch / "small")] * 2
    assert not scratch.exists()
    assert messages == [messages[0]] and "over 1 view(s)" in messages[0]


def test_a_failing_warm_up_query_is_reported_not_raised(tmp_path):
    spark = _FakeSpark({"a": 10, "b": 10}, failing="is not null group by")
    messages: list[str] = []
    ran = warm_sql(spark, ["a", "b"], tmp_path / "warm-up", messages.append)
    assert ran == 1  # the first statement ran, the second failed and ended the warm-up
    assert "warm-up stopped: RuntimeError: boom" in messages[0]
