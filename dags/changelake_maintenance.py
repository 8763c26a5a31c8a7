"""Keep every PK table bounded: compaction, snapshot expiry and the orphan sweep, hourly (thin DAG file).

Every apply already compacts and expires what is due after its commit; this DAG runs what an apply leaves
to it: full compactions of large partitions, expiry of tables that stopped taking batches, and the orphan
sweep, which removes files nothing of the table names (a killed apply's or compaction's) once they are older
than its safety age. It is the whole maintenance of tables with `write-only: true`. Each table's task runs
`changelake maintain <table> --json` (pyarrow and pyiceberg; Spark tasks, one per bucket, only for a compaction
larger than CHANGELAKE_SPARK_COMPACT_BYTES) and logs what it did; a step that
loses a race to a batch leaves the table as it was and is tried again next hour. docs/operations.md#maintenance.
"""

from __future__ import annotations

from airflow.sdk import Param, dag, task
from airflow.timetables.trigger import CronTriggerTimetable
from changelake_dags import common

TABLES = common.table_names()


@dag(
    dag_id="changelake_maintenance",
    schedule=CronTriggerTimetable("17 * * * *", timezone="UTC"),
    start_date=common.START_DATE,
    catchup=False,
    max_active_runs=1,
    default_args=common.DEFAULT_ARGS,
    tags=["changelake", "maintenance"],
    params={
        "table": Param("all", enum=["all", *TABLES], description="Maintain one table, or all of them"),
        "full": Param(
            False, type="boolean", description="Rewrite every partition with delta or delete files"
        ),
        "orphans_older_than": Param(
            "1 d", type="string", description="Remove unreferenced files older than this ('off': no sweep)"
        ),
    },
    doc_md=__doc__,
)
def changelake_maintenance():
    for table in TABLES:

        @task(task_id=f"maintain__{common.task_name(table)}")
        def maintain(table: str = table, params=None) -> dict | None:
            """``changelake maintain`` on one table: what it compacted, expired and deleted."""
            if params["table"] not in ("all", table):
                print(f"{table}: not selected")
                return None
            if not common.status().get(table, {}).get("exists"):  # a spec whose table is not created yet
                print(f"{table}: not created yet, nothing to maintain")
                return None
            args = ["maintain", table, "--orphans-older-than", params["orphans_older_than"], "--json"]
            (report,) = common.changelake_json(*args, *(["--full"] if params["full"] else []))["tables"]
            print(f"{table}: {common.maintenance_done(report)}")
            return report

        maintain()


changelake_maintenance()
