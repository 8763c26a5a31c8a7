"""DAG integrity: every DAG imports cleanly and fast, without DB or connection lookups at parse time, and
carries tags, retries, a static start date and an explicit schedule."""

from __future__ import annotations

import pendulum
import pytest

from tests.orchestration.conftest import REPO, airflow_env

EXPECTED = {
    "changelake_apply",
    "changelake_demo_source",
    "changelake_dbt",
    "changelake_maintenance",
    "changelake_quality",
}


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory):
    import os
    import sys

    tmp = tmp_path_factory.mktemp("dagbag")
    env = airflow_env(tmp / "home", REPO / "examples" / "tables")
    # No metadata DB is reachable while parsing: a DAG that queries it at parse time fails to import.
    env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{tmp}/missing-dir/airflow.db"
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        from airflow.dag_processing.dagbag import DagBag
        from airflow.sdk import BaseHook, Variable

        def refuse(*args, **kwargs):
            raise AssertionError("a DAG file looked up a connection or variable at parse time")

        patches = [(BaseHook, "get_connection"), (Variable, "get")]
        originals = [getattr(obj, name) for obj, name in patches]
        for obj, name in patches:
            setattr(obj, name, refuse)
        try:
            # The DAG processor puts the bundle (the DAG folder) on sys.path; so does this test.
            sys.path.insert(0, str(REPO / "dags"))
            yield DagBag(dag_folder=str(REPO / "dags"), bundle_path=REPO / "dags")
        finally:
            for (obj, name), original in zip(patches, originals, strict=True):
                setattr(obj, name, original)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_no_import_errors_and_every_dag_is_there(dagbag):
    assert dagbag.import_errors == {}
    assert EXPECTED <= set(dagbag.dags)


def test_each_dag_file_parses_in_under_two_seconds(dagbag):
    stats = {s.file: s.duration.total_seconds() for s in dagbag.dagbag_stats}
    assert stats and all(seconds < 2 for seconds in stats.values()), stats


@pytest.mark.parametrize("dag_id", sorted(EXPECTED))
def test_dag_conventions(dagbag, dag_id):
    from airflow.timetables.simple import NullTimetable

    dag = dagbag.dags[dag_id]
    assert dag.tags and "changelake" in dag.tags
    assert dag.start_date == pendulum.datetime(2026, 11, 1, tz="UTC")  # static, not now()
    assert not isinstance(dag.timetable, NullTimetable), "every DAG needs an explicit schedule"
    assert dag.catchup is False and dag.max_active_runs == 1
    assert dag.doc_md
    for task in dag.tasks:
        assert task.retries >= 2, task.task_id
    # only the DAG that writes data of its own (the demo source) waits to be unpaused; the env's default
    # (DAGS_ARE_PAUSED_AT_CREATION=False) unpauses the rest, which only react to data or maintain
    assert dag.is_paused_upon_creation is (True if dag_id == "changelake_demo_source" else None)


def test_apply_dag_has_a_task_pair_per_table_with_assets_and_the_spark_pool(dagbag):
    dag = dagbag.dags["changelake_apply"]
    tables = sorted(p.stem for p in (REPO / "examples" / "tables").glob("*.yaml"))
    assert len(tables) == 7
    for table in tables:
        name = table.replace(".", "__")
        apply = dag.get_task(f"apply__{name}")
        assert apply.pool == "changelake_spark"
        assert [a.uri for a in apply.outlets] == [f"changelake://tables/{table}"]
        assert dag.get_task(f"has_batches__{name}").downstream_task_ids == {f"apply__{name}"}
    assert set(dag.params) == {"table", "from_batch", "to_batch"}


def test_maintenance_dag_maintains_every_table_without_spark(dagbag):
    dag = dagbag.dags["changelake_maintenance"]
    tables = sorted(p.stem for p in (REPO / "examples" / "tables").glob("*.yaml"))
    assert sorted(t.task_id for t in dag.tasks) == sorted(f"maintain__{t.replace('.', '__')}" for t in tables)
    assert all(t.pool != "changelake_spark" for t in dag.tasks)  # pyiceberg and pyarrow only
    assert set(dag.params) == {"table", "full", "orphans_older_than"}
