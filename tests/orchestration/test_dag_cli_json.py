"""The DAGs read the changelake CLI only through its JSON documents: their tasks run here on the real CLI's
output (the data env's ``changelake`` in a subprocess, no JVM) against a test's own homes."""

from __future__ import annotations

import sys

import pytest

from tests.orchestration.conftest import REPO, airflow_env

PARAMS = {"table": "all", "from_batch": None, "to_batch": None}


@pytest.fixture
def dagbag(monkeypatch, tmp_path):
    """The DAG folder parsed with Airflow's and changelake's homes under tmp_path; one demo table, small batches."""
    tables = tmp_path / "tables"
    tables.mkdir()
    spec = (REPO / "examples" / "tables" / "shop.orders.yaml").read_text()
    (tables / "shop.orders.yaml").write_text(spec.replace("records: 120", "records: 9"))
    for key, value in airflow_env(tmp_path / "home", tables).items():
        monkeypatch.setenv(key, value)
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.syspath_prepend(str(REPO / "dags"))
    sys.modules.pop("changelake_dags.common", None)
    bag = DagBag(dag_folder=str(REPO / "dags"), bundle_path=REPO / "dags")
    assert bag.import_errors == {}
    return bag


def task_function(dagbag, dag_id: str, task_id: str):
    """The Python function behind a @task of a DAG, to call as the worker would."""
    return dagbag.dags[dag_id].get_task(task_id).python_callable


def test_the_demo_source_returns_the_batches_datagen_landed(dagbag, tmp_path):
    landed = task_function(dagbag, "changelake_demo_source", "land_batches")(
        params={"batches": 2, "seed": 42}
    )
    assert [(b["table"], b["batch_id"]) for b in landed] == [("shop.orders", 1), ("shop.orders", 2)]
    for batch in landed:
        path = tmp_path / "home" / "landing" / "shop.orders" / f"{batch['batch_id']}.jsonl"
        assert batch["path"] == str(path)
        assert batch["messages"] == len(path.read_text().splitlines()) == 9
    # The same seed from the next batch id on: the source continues, it does not repeat.
    (more,) = task_function(dagbag, "changelake_demo_source", "land_batches")(
        params={"batches": 1, "seed": 42}
    )
    assert more["batch_id"] == 3


def test_the_apply_dag_finds_pending_batches_and_reports_from_the_status_document(dagbag):
    task_function(dagbag, "changelake_demo_source", "land_batches")(params={"batches": 2, "seed": 7})
    find_pending = task_function(dagbag, "changelake_apply", "find_pending")
    assert find_pending(params=PARAMS) == {"shop.orders": 2}
    assert find_pending(params={**PARAMS, "from_batch": 1}) == {"shop.orders": 1}  # a replay: one run
    state = task_function(dagbag, "changelake_apply", "report")(params=PARAMS)
    assert set(state) == {"shop.orders"}
    row = state["shop.orders"]
    assert (row["exists"], row["last_batch"], row["rows"], row["pending_batches"], row["problem"]) == (
        False, 0, 0, 2, None,
    )  # fmt: skip


def test_a_landing_problem_still_gets_its_table_an_apply_run(dagbag, tmp_path):
    landing = tmp_path / "home" / "landing" / "shop.orders"
    landing.mkdir(parents=True)
    (landing / "0.jsonl").write_text("{}\n")  # batch ids start at 1: a problem the status names
    assert task_function(dagbag, "changelake_apply", "find_pending")(params=PARAMS) == {"shop.orders": 1}
    state = task_function(dagbag, "changelake_apply", "report")(params=PARAMS)
    assert "batch ids are positive" in state["shop.orders"]["problem"]


def test_the_cli_helper_takes_only_a_json_document(dagbag):
    from changelake_dags import common

    assert common.changelake_json("status", "--format", "json")[0]["table"] == "shop.orders"
    with pytest.raises(RuntimeError, match="no single JSON document"):
        common.changelake_json("status")  # the aligned text table
    from airflow.sdk.exceptions import AirflowFailException

    # an unknown table (exit 4) can never succeed: the task fails without retries
    with pytest.raises(AirflowFailException, match="exited with 4.*permanent: not retried"):
        common.changelake_json("scan", "shop.nope", "--format", "json")
