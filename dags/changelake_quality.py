"""Data quality after every dbt build: Great Expectations suites on the PK tables and marts (thin DAG file).

`run_suites` runs `spark_apps/quality_app.py` (on the warm SQL endpoint over Spark Connect when it is up,
else through spark-submit: PK uniqueness, tombstone handling, at-least-once duplicate
drift) and rebuilds the Data Docs. `check_results` reads the summary: it puts the report's location and
per-suite counts into the log and XCom, and fails (without retrying: a failed expectation is not transient)
when an expectation of severity critical failed, naming the offending keys.
"""

from __future__ import annotations

from airflow.sdk import Param, dag, task
from changelake_dags import common, operators

MARTS = common.marts_asset()


@dag(
    dag_id="changelake_quality",
    schedule=[MARTS],
    start_date=common.START_DATE,
    catchup=False,
    max_active_runs=1,
    default_args=common.DEFAULT_ARGS,
    tags=["changelake", "quality"],
    params={
        "drift_threshold": Param(
            0, type="number", minimum=0, description="Allowed drift per key and in total"
        ),
        "max_redelivery_share": Param(
            0.5,
            type="number",
            minimum=0,
            maximum=1,
            description="Warn above this share of redelivered records",
        ),
    },
    doc_md=__doc__,
)
def changelake_quality():
    run_suites = operators.spark_submit(
        "run_suites",
        "quality_app.py",
        [
            "--drift-threshold",
            "{{ params.drift_threshold }}",
            "--max-redelivery-share",
            "{{ params.max_redelivery_share }}",
            "--report-only",
        ],  # fmt: skip
    )

    @task
    def check_results() -> dict:
        """Report location and per-suite results into XCom; fail on a critical expectation."""
        return common.quality_results()

    run_suites >> check_results()


changelake_quality()
