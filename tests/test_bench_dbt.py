"""benchmarks/bench_dbt.py without Spark: its model comparison and build checks can fail, its targets are the
ratios issue 16 names, identifiers reaching its SQL are validated, and the page renders its result."""

from __future__ import annotations

import json

import bench_dbt as bd
import pytest
import render_results as render


class _Cursor:
    """Answers ``select count(*)`` queries: ``rows`` for a plain count, ``extra`` rows for an EXCEPT ALL of the
    thrift schema's model over the session's (a model that differs), and raises for ``missing`` models."""

    def __init__(self, rows: int = 5, extra: dict[str, int] | None = None, missing: frozenset = frozenset()):
        self.rows, self.extra, self.missing = rows, extra or {}, missing
        self.sql: list[str] = []

    def execute(self, sql: str) -> None:
        self.sql.append(sql)
        if any(f"`{m}`" in sql for m in self.missing):
            raise RuntimeError("Table or view not found")

    def fetchall(self) -> list[tuple]:
        sql = self.sql[-1]
        if "except all" not in sql:
            return [(self.rows,)]
        first = sql.split("from (select * from ")[1].split(" except")[0]
        differs = next((n for m, n in self.extra.items() if f"`{m}`" in sql), 0)
        return [(differs if first.startswith("`analytics`") else 0,)]


def test_models_compare_both_ways_and_a_difference_or_missing_model_shows():
    same = bd.compare_models(_Cursor(), ["orders_per_shop"])
    assert same == {"orders_per_shop": {"rows": 5, "only_thrift": 0, "only_session": 0, "equal": True}}
    differs = bd.compare_models(_Cursor(extra={"orders_per_shop": 2}), ["orders_per_shop", "stg_orders"])
    assert differs["orders_per_shop"]["only_thrift"] == 2 and differs["stg_orders"]["only_thrift"] == 0
    assert [differs[m]["equal"] for m in ("orders_per_shop", "stg_orders")] == [False, True]
    gone = bd.compare_models(_Cursor(missing=frozenset({"stg_orders"})), ["stg_orders"])
    assert "not found" in gone["stg_orders"]["error"] and gone["stg_orders"]["equal"] is False


def test_identifiers_in_the_benchmark_sql_are_validated():
    assert bd.relation("analytics", "orders_per_shop") == "`analytics`.`orders_per_shop`"
    with pytest.raises(Exception, match="Invalid identifier"):
        bd.relation("analytics", "x` union select 1 --")
    cursor = _Cursor()
    assert "error" in bd.compare_models(cursor, ["bad name"])["bad name"] and cursor.sql == []


def _run(seconds: float, ok: bool = True) -> dict:
    return {"seconds": seconds, "ok": ok, "dbt_elapsed_s": seconds - 3, "nodes": 64}


def _report(session: list[dict], thrift: list[dict], point: float | None = 0.05) -> dict:
    report = {"session_builds": session, "thrift_builds": thrift}
    if point is not None:
        report["point_queries"] = {"open_connection": {"median_s": point}}
    return report


def test_targets_are_ratios_to_the_session_build_and_fail_when_missed():
    targets = bd.evaluate_targets(_report([_run(40), _run(44)], [_run(20), _run(17), _run(19)]))
    got = {t["key"]: (t["value"], t["status"]) for t in targets}
    assert got == {
        "thrift_first": (0.48, "pass"),
        "thrift_later": (0.43, "pass"),
        "point_query": (0.05, "pass"),
    }
    slow = bd.evaluate_targets(_report([_run(40), _run(44)], [_run(30), _run(22)], point=1.5))
    assert [t["status"] for t in slow] == ["fail", "fail", "fail"]
    # A failed build has no time: its target cannot pass on it.
    failed = bd.evaluate_targets(_report([_run(40, ok=False)], [_run(10, ok=False), _run(9)], point=None))
    assert [t["status"] for t in failed] == ["n/a", "n/a", "n/a"]
    # A failed first build leaves the later ones counted as later builds.
    first_failed = bd.evaluate_targets(_report([_run(40)], [_run(10, ok=False), _run(18)]))
    assert [(t["value"], t["status"]) for t in first_failed[:2]] == [(None, "n/a"), (0.45, "pass")]


def test_build_results_read_dbts_run_results(tmp_path):
    nodes = [
        {"unique_id": "model.changelake.orders_per_shop", "status": "success"},
        {"unique_id": "test.changelake.unique_x", "status": "pass"},
    ]
    (tmp_path / "run_results.json").write_text(json.dumps({"results": nodes, "elapsed_time": 12.345}))
    got = bd.build_results(tmp_path)
    assert got == {
        "nodes": 2,
        "statuses": {"success": 1, "pass": 1},
        "ok": True,
        "models": ["orders_per_shop"],
        "dbt_elapsed_s": 12.35,
    }
    nodes[1]["status"] = "fail"
    (tmp_path / "run_results.json").write_text(json.dumps({"results": nodes}))
    assert bd.build_results(tmp_path)["ok"] is False


def test_the_page_renders_a_result_and_says_what_failed():
    report = _report([_run(44)], [_run(21), _run(18)])
    report.update(
        when="2026-11-24T12:00:00+00:00",
        command="bench_dbt.py",
        data={"tables": ["shop.orders"], "apply_s": 2.4},
        summary={"session_build": {"median_s": 44}, "thrift_first_s": 21, "thrift_later": {"median_s": 18}},
        models={"orders_per_shop": {"rows": 3, "only_thrift": 0, "only_session": 1, "equal": False}},
        targets=bd.evaluate_targets(report),
        checks=[
            {"check": "every model equals the session build's", "ok": False, "detail": "orders_per_shop"}
        ],
    )
    text = render.render_dbt(report)
    assert "0.48×" in text and "0.41×" in text
    assert "Models equal to the session build's (`EXCEPT ALL` both ways): 0 of 1." in text
    assert "- FAILED every model equals the session build's: orders_per_shop" in text
