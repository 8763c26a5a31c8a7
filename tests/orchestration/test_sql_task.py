"""The DAGs' SQL-write task (dags/changelake_dags/sql.py) on the real CLI (the data env's ``changelake`` in a
subprocess, no JVM for a statement this small): its idempotency key is the task's identity, so a retried task
is a no-op, and a refusal fails the task without retries."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from tests.orchestration.conftest import REPO, airflow_env

SPEC = """name: crm.customers
columns:
  - {name: customer_id, type: BIGINT}
  - {name: email, type: STRING}
primary_key: [customer_id]
options: {bucket.num: 1}
"""


@pytest.fixture
def sql_module(monkeypatch, tmp_path):
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "crm.customers.yaml").write_text(SPEC)
    for key, value in airflow_env(tmp_path / "home", tables).items():
        monkeypatch.setenv(key, value)
    monkeypatch.syspath_prepend(str(REPO / "dags"))
    for name in ("changelake_dags.common", "changelake_dags.sql"):
        sys.modules.pop(name, None)
    import changelake_dags.sql

    return changelake_dags.sql


def test_a_retried_sql_task_is_a_no_op_and_a_refusal_is_not_retried(sql_module, monkeypatch):
    import airflow.sdk
    from airflow.exceptions import AirflowFailException
    from airflow.sdk import DAG

    context = {
        "dag": SimpleNamespace(dag_id="gdpr"),
        "run_id": "manual__1",
        "task_instance": SimpleNamespace(task_id="forget"),
    }
    monkeypatch.setattr(airflow.sdk, "get_current_context", lambda: context)
    (first,) = sql_module.run_sql(
        "INSERT INTO crm.customers VALUES (42, 'a@example.com'), (43, 'b@example.com')"
    )
    assert (first["status"], first["batch_id"], first["counts"]["inserted"]) == ("applied", 1, 2)
    with DAG("gdpr", schedule=None) as dag:
        sql_module.sql_task("DELETE FROM crm.customers WHERE customer_id = 42", task_id="forget", retries=3)
    task = dag.get_task("forget")
    assert task.retries == 3
    (deleted,) = task.python_callable()
    (retried,) = task.python_callable()  # the same task instance again: an Airflow retry
    assert (deleted["status"], deleted["batch_id"], deleted["counts"]["deleted"]) == ("applied", 2, 1)
    assert (retried["status"], retried["batch_id"]) == ("already-applied", 2)
    with pytest.raises(
        AirflowFailException, match="only supports DELETE statement with conditions on primary key"
    ):
        sql_module.run_sql("DELETE FROM crm.customers WHERE email = 'b@example.com'")
