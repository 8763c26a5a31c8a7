"""SQL writes from a DAG: a task that runs ``changelake sql`` (docs/sql-writes.md), e.g. a correction or a GDPR
delete of one customer as a step of a pipeline::

    from changelake_dags.sql import sql_task

    sql_task("DELETE FROM shop.customers WHERE customer_id = 42", task_id="forget_customer_42")

Each statement is one exactly-once batch of its table. The task's idempotency key is its own identity
(``<dag_id>/<run_id>/<task_id>``), so an Airflow retry of a task whose statement was applied before the
failure (a lost worker, a timeout after the commit) is a no-op and not a second write; a new DAG run writes
again. Refusals (Fluss's words, exit 2) fail the task without retries (:func:`common.failure`).
"""

from __future__ import annotations

from typing import Any

from changelake_dags import common


def run_sql(statement: str, idempotency_key: str | None = None) -> list[dict[str, Any]]:
    """``changelake sql <statement> --json`` (warm on the SQL endpoint when it runs): one result per statement
    (kind, table, status applied | already-applied | nothing to write, batch id, counts)."""
    args = ["sql", statement, "--json"]
    if idempotency_key is not None:
        args += ["--idempotency-key", idempotency_key]
    results = common.changelake_json(*args)["statements"]
    for r in results:
        print(
            f"{r['kind']} {r['table']}: {r['status']}"
            + (
                f" as sql batch {r['writer_seq']} (table batch {r['batch_id']})"
                if r["batch_id"] is not None
                else f" ({r['note']})"
            )
            + f"; {r['counts']}",
            flush=True,
        )
    return results


def sql_task(statement: str, task_id: str = "sql_write", **task_kwargs: Any):
    """A TaskFlow task (in the DAG being defined) that runs ``statement`` with the task's identity as its
    idempotency key; ``task_kwargs`` go to ``@task`` (retries, pool, ...)."""
    from airflow.sdk import get_current_context, task

    @task(task_id=task_id, **task_kwargs)
    def sql_write() -> list[dict[str, Any]]:
        context = get_current_context()
        key = f"{context['dag'].dag_id}/{context['run_id']}/{context['task_instance'].task_id}"
        return run_sql(statement, idempotency_key=key)

    return sql_write()
