"""The pipeline through Airflow on tiny data: the demo source lands batches, the apply DAG runs the Spark app
for each table, and the tables hold exactly what the sources say.

Cold: no endpoint, spark-submit per task (local Spark), as on a cluster without the warm server; a replay
of the same range through the DAG's Params changes nothing. Warm: with the SQL endpoint up (as `make airflow`
and `make demo` start it) apply, dbt and quality all run through it."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

from tests.orchestration.conftest import AIRFLOW, DATA_PY, REPO

pytestmark = pytest.mark.integration

# Computed in the data env, independently of the apply path: datagen's simulated Debezium source for
# shop.orders, and the exact per-key aggregation of the upsert-kafka events (once per Kafka offset).
EXPECTED = r"""
import collections, decimal, json, sys
from pathlib import Path
from changelake.inputs.datagen import Profile, _Source
from changelake.spec import load_specs

tables, landing, batches = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
specs = load_specs(tables)
orders = specs["shop.orders"]
source = _Source(orders, Profile.of(orders, records=30), 42)
for b in range(1, batches + 1):
    source.batch(b)
rows = sorted([[str(r[c.name]) if r[c.name] is not None else None for c in orders.columns] for r in source.rows.values()])
seen, stats = set(), collections.defaultdict(lambda: [0, decimal.Decimal(0)])
for b in range(1, batches + 1):
    for line in (landing / "shop.shop_user_stats" / f"{b}.jsonl").read_text().splitlines():
        m = json.loads(line)
        if (m["partition"], m["offset"]) in seen:
            continue
        seen.add((m["partition"], m["offset"]))
        acc = stats[f'{m["key"]["shop_id"]}/{m["key"]["user_id"]}']
        acc[0] += m["value"]["num_orders"]
        acc[1] += decimal.Decimal(m["value"]["total_amount"])
print(json.dumps({"orders": rows, "stats": {k: [v[0], str(v[1])] for k, v in stats.items()}}))
"""

ACTUAL = r"""
import json, sys
from changelake import ChangeLake
lake = ChangeLake(progress=None)
spec = lake.spec("shop.orders")
orders = sorted([[str(r[c.name]) if r[c.name] is not None else None for c in spec.columns]
                 for r in lake.rows("shop.orders").collect()])
stats = {f"{r['shop_id']}/{r['user_id']}": [r["num_orders"], str(r["total_amount"])]
         for r in lake.rows("shop.shop_user_stats").collect()}
status = {s["table"]: s for s in lake.status()}
print(json.dumps({"orders": orders, "stats": stats, "status": status}))
"""


def dags_test(env, dag_id: str, conf: dict | None = None) -> str:
    proc = subprocess.run(
        [str(AIRFLOW), "dags", "test", dag_id, "-c", json.dumps(conf or {})],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = proc.stdout + proc.stderr
    assert (
        f"DagRun Finished: dag_id={dag_id}" in log and "state=success" in log.split("DagRun Finished")[-1]
    ), log[-4000:]
    return log


def data_env(env, script: str, *args: str) -> dict:
    proc = subprocess.run(
        [str(DATA_PY), "-c", script, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_demo_source_then_apply_through_airflow(pipeline_home):
    home, tables, env = pipeline_home
    # Small batches keep the run short: the profile's record count is overridden through the CLI default.
    for spec in tables.glob("*.yaml"):
        spec.write_text(
            spec.read_text().replace("records: 120", "records: 30").replace("records: 150", "records: 30")
        )
    source_log = dags_test(env, "changelake_demo_source", {"batches": 2})
    assert "[shop.orders] batch 2:" in source_log
    apply_log = dags_test(env, "changelake_apply")
    assert "cold path: spark-submit" in apply_log and "warm path" not in apply_log
    # Task logs carry the apply counts.
    assert (
        "[shop.orders] landing batch 1 (table batch 1) committed" in apply_log
        and "[shop.shop_user_stats] landing batch 2 (table batch 2) committed" in apply_log
    )
    assert "inserted" in apply_log and "deduplicated" in apply_log

    expected = data_env(env, EXPECTED, str(tables), str(home / "landing"), "2")
    actual = data_env(env, ACTUAL)
    assert actual["orders"] == expected["orders"] and len(expected["orders"]) > 10
    assert actual["stats"] == expected["stats"]
    status = actual["status"]
    assert {t: (s["last_batch"], s["pending_batches"]) for t, s in status.items()} == {
        "shop.orders": (2, 0),
        "shop.shop_user_stats": (2, 0),
    }

    # Backfill/replay of batches 1..2 for one table through the Params: verified no-ops, nothing changes.
    replay_log = dags_test(env, "changelake_apply", {"table": "shop.orders", "from_batch": 1, "to_batch": 2})
    assert (
        "[shop.orders] landing batch 1 already applied as table batch 1" in replay_log
        and "committed" not in replay_log
    )
    assert data_env(env, ACTUAL) == actual

    # Maintenance: every table compacted whole and swept; what a reader sees stays the same.
    maintenance_log = dags_test(env, "changelake_maintenance", {"full": True, "orphans_older_than": "0 s"})
    # each table's line names the work done (common.maintenance_done); last_maintenance below says it ran
    assert re.search(r"shop\.orders: (\d+ file\(s\) compacted|nothing was due)", maintenance_log), (
        maintenance_log[-3000:]
    )
    after = data_env(env, ACTUAL)
    assert (after["orders"], after["stats"]) == (actual["orders"], actual["stats"])
    for table, row in after["status"].items():
        assert (row["last_maintenance"] is not None) == row["exists"], table
        assert {k: row[k] for k in ("last_batch", "rows", "quarantined")} == {
            k: actual["status"][table][k] for k in ("last_batch", "rows", "quarantined")
        }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


@pytest.fixture
def warm_endpoint(pipeline_home):
    """The warm SQL endpoint of the test's home on free ports, started as `make airflow` starts it; stopped
    (and checked for leftovers) at the end."""
    home, tables, env = pipeline_home
    env = {**env, "SPARK_THRIFT_PORT": str(_free_port()), "SPARK_CONNECT_PORT": str(_free_port())}
    script = str(REPO / "infra" / "spark_server.sh")
    subprocess.run([script, "start"], env=env, cwd=REPO, check=True, timeout=600, capture_output=True)
    info = json.loads((home / "spark-server" / "ready").read_text())
    try:
        yield home, tables, env
    finally:
        subprocess.run([script, "stop"], env=env, cwd=REPO, timeout=180, capture_output=True)
    assert not any(_alive(pid) for pid in (info["pid"], info["jvm_pid"])), "the endpoint outlived its stop"


def test_the_pipeline_runs_warm_through_the_endpoint(warm_endpoint):
    """With the endpoint up, every Spark task of apply, dbt and quality runs through it (no spark-submit),
    and the results are the ones the sources say."""
    home, tables, env = warm_endpoint
    for spec in tables.glob("*.yaml"):
        spec.write_text(
            spec.read_text().replace("records: 120", "records: 30").replace("records: 150", "records: 30")
        )
    dags_test(env, "changelake_demo_source", {"batches": 2})
    apply_log = dags_test(env, "changelake_apply")
    assert apply_log.count("warm path:") == 2 and "cold path" not in apply_log
    assert (
        "[shop.orders] landing batch 2 (table batch 2) committed" in apply_log
        and "[shop.shop_user_stats] landing batch 2 (table batch 2) committed" in apply_log
    )

    expected = data_env(env, EXPECTED, str(tables), str(home / "landing"), "2")
    actual = data_env(env, ACTUAL)
    assert actual["orders"] == expected["orders"] and actual["stats"] == expected["stats"]

    # dbt's thrift target on the endpoint, for the marts of these two tables.
    dbt_log = dags_test(env, "changelake_dbt", {"select": "+orders_per_shop +shop_user_stats_drift"})
    assert (
        "cold path" not in dbt_log and "(dbt target thrift)" in dbt_log and "views current for 2" in dbt_log
    )
    results = json.loads((home / "dbt" / "target" / "build_run_results.json").read_text())["results"]
    assert results and all(r["status"] in ("pass", "success") for r in results)
    assert {"model.changelake.orders_per_shop", "model.changelake.shop_user_stats_drift"} <= {
        r["unique_id"] for r in results
    }

    quality_log = dags_test(env, "changelake_quality")
    assert "warm path:" in quality_log and "cold path" not in quality_log
    summary = json.loads((home / "quality" / "quality_summary.json").read_text())
    failed = [e for v in summary["validations"] for e in v["expectations"] if not e["success"]]
    assert summary["validations"] and not failed
    suites = {v["asset"] for v in summary["validations"]}
    assert any("orders_per_shop" in a for a in suites) and any("shop_user_stats_drift" in a for a in suites)
