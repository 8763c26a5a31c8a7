"""Apply landed changelog batches to every PK table, exactly once (thin DAG file; helpers in changelake_dags)."""

from __future__ import annotations

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import Param, dag, task
from airflow.timetables.assets import AssetOrTimeSchedule
from airflow.timetables.trigger import CronTriggerTimetable
from changelake_dags import common, operators

LANDING = common.landing_asset()
TABLES = common.table_names()


@dag(
    dag_id="changelake_apply",
    # Every 5 minutes, and at once when the demo source lands batches: new batches need no human.
    schedule=AssetOrTimeSchedule(
        timetable=CronTriggerTimetable("*/5 * * * *", timezone="UTC"), assets=LANDING
    ),
    start_date=common.START_DATE,
    catchup=False,
    max_active_runs=1,
    default_args=common.DEFAULT_ARGS,
    tags=["changelake", "apply"],
    params={
        "table": Param("all", enum=["all", *TABLES], description="Apply one table, or all of them"),
        "from_batch": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            description="Replay/backfill from this batch id (already-applied batches are verified no-ops)",
        ),
        "to_batch": Param(None, type=["null", "integer"], minimum=1, description="Stop after this batch id"),
    },  # fmt: skip
    doc_md=__doc__
    + """

For each table with a spec: `has_batches__<table>` checks for landed batches newer than the table's last
one, or records on its Kafka topics after the offsets it applied (or a replay range from the Params), then `apply__<table>` runs `spark_apps/apply_app.py`: through the
warm Spark endpoint when it is up (`make airflow` starts it; the log says `warm path`), else through
`spark-submit` on the `spark_default` connection (`cold path`). A committed batch updates the table's Asset
(`changelake://tables/<table>`), which schedules `changelake_dbt`. Replays are no-ops thanks to the
exactly-once protocol, so retries and backfills are safe.
""",
)
def changelake_apply():
    @task
    def find_pending(params=None) -> dict[str, int]:
        """Landed batches (or Kafka records) waiting per table (a replay range counts every selected table).

        A table whose landing has a problem (a bad batch file name) still gets its apply task: it applies
        the batches below the problem and then fails naming it, while the other tables go on."""
        selected = TABLES if params["table"] == "all" else [params["table"]]
        state = common.status()
        replay = params["from_batch"] is not None
        pending = {}
        for t in selected:
            row = state.get(t, {})
            if row.get("problem"):
                print(f"{t}: {row['problem']}")
            # A Kafka-sourced table: the records its topics hold after the offsets it applied (one batch).
            waiting = (
                row.get("pending_batches", 0) + (row.get("kafka_lag") or 0) + (1 if row.get("problem") else 0)
            )
            pending[t] = 1 if replay else waiting
        return pending

    pending = find_pending()

    @task
    def report(params=None) -> dict[str, dict]:
        """Rows, last batch, changelog records, source counts and landing problems per table."""
        state = common.status()
        for name, row in state.items():
            print(
                f"{name}: last batch {row['last_batch']}, {row['rows']} rows, {row['changelog_records']} changelog "
                f"records, {row['pending_batches']} pending, quarantined {row['quarantined']}, "
                f"redelivered {row['redelivered']} (deduplicated {row['deduplicated']})"
                + (f"; PROBLEM: {row['problem']}" if row.get("problem") else "")
            )
        return state

    # all_done: the report runs (and names the problem) even when one table's apply failed.
    summary = report.override(trigger_rule="all_done")()
    # The run's outcome: failed when a table's apply failed (the report above succeeds either way), success
    # when every apply succeeded or had nothing to do.
    all_applied = EmptyOperator(task_id="all_applied", trigger_rule="none_failed")
    for table in TABLES:
        name = common.task_name(table)

        @task.short_circuit(task_id=f"has_batches__{name}", ignore_downstream_trigger_rules=False)
        def has_batches(pending: dict[str, int], table: str = table) -> bool:
            waiting = pending.get(table, 0)
            print(f"{table}: {waiting} batch(es) to apply")
            return waiting > 0

        apply = operators.spark_submit(
            f"apply__{name}",
            "apply_app.py",
            [
                table,
                "--from-batch",
                "{{ params.from_batch if params.from_batch is not none else '' }}",
                "--up-to",
                "{{ params.to_batch if params.to_batch is not none else '' }}",
            ],  # fmt: skip
            outlets=[common.table_asset(table)],
        )
        has_batches(pending) >> apply >> [summary, all_applied]


changelake_apply()
