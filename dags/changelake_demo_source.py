"""Demo source: land one new deterministic batch per demo table with `changelake datagen`, on a schedule, so
the UI shows a living pipeline (thin DAG file; helpers in changelake_dags). Paused when Airflow first sees it:
it writes data, so it runs on its own only when asked (`make airflow DEMO_SOURCE=1`, or unpause it in the UI);
`make demo` triggers it once."""

from __future__ import annotations

from airflow.sdk import Param, dag, task
from changelake_dags import common

LANDING = common.landing_asset()


@dag(
    dag_id="changelake_demo_source",
    schedule="*/10 * * * *",
    start_date=common.START_DATE,
    catchup=False,
    max_active_runs=1,
    is_paused_upon_creation=True,
    default_args=common.DEFAULT_ARGS,
    tags=["changelake", "demo"],
    params={
        "batches": Param(1, type="integer", minimum=1, maximum=20, description="Batches per table"),
        "seed": Param(42, type="integer", description="datagen seed (same seed and batch id, same data)"),
    },
    doc_md=__doc__,
)
def changelake_demo_source():
    @task(outlets=[LANDING])
    def land_batches(params=None) -> list[dict]:
        """Run `changelake datagen --json` for every table with a datagen profile; return what landed (table,
        batch_id, path, messages, changes per batch) from its JSON document."""
        landed = common.land_batches(params["batches"], params["seed"])
        print(f"{len(landed)} batch(es) landed for {len({b['table'] for b in landed})} table(s)")
        return landed

    land_batches()


changelake_demo_source()
