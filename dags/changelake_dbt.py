"""Build the dbt project on changelake's tables whenever a table's batch commits (thin DAG file).

`dbt_build` runs `spark_apps/dbt_app.py build`. Warm (the SQL endpoint is up): it waits until the endpoint's
views show every table's current snapshot and runs dbt's `thrift` target against it, with no JVM of its own.
Cold: spark-submit; the app registers every PK table, changelog and landed input as views and runs dbt in
the same SparkSession (dbt-spark `method: session`).
`model_results` puts every model's and test's status into the log and XCom; `dbt_docs` regenerates the
docs site under $CHANGELAKE_HOME/dbt/target. The marts' Asset schedules `changelake_quality`.
"""

from __future__ import annotations

from airflow.sdk import AssetAny, Param, dag, task
from changelake_dags import common, operators

MARTS = common.marts_asset()


@dag(
    dag_id="changelake_dbt",
    schedule=AssetAny(*[common.table_asset(t) for t in common.table_names()]),
    start_date=common.START_DATE,
    catchup=False,
    max_active_runs=1,
    default_args=common.DEFAULT_ARGS,
    tags=["changelake", "dbt"],
    params={
        "select": Param("", type="string", description="dbt --select (empty: the whole project)"),
        "full_refresh": Param(False, type="boolean", description="Rebuild incremental models from scratch"),
    },
    doc_md=__doc__,
)
def changelake_dbt():
    dbt_build = operators.spark_submit(
        "dbt_build",
        "dbt_app.py",
        ["build", "--select", "{{ params.select }}", "{{ '--full-refresh' if params.full_refresh else '' }}"],
        outlets=[MARTS],
    )

    @task
    def model_results() -> dict[str, str]:
        """Status of every dbt node of the build (model, test, unit test), from run_results.json."""
        return common.dbt_results()

    dbt_docs = operators.spark_submit("dbt_docs", "dbt_app.py", ["docs", "generate"])
    dbt_build >> [model_results(), dbt_docs]


changelake_dbt()
