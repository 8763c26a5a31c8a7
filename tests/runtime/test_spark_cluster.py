"""A real distributed run: a Spark standalone master and worker on loopback (infra/spark_cluster.sh), the
apply app submitted to it with spark-submit, and the result identical to the same batches applied locally."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

import pytest

from tests.helpers import REPO

pytestmark = [pytest.mark.slow, pytest.mark.integration]
BIN = REPO / ".venv" / "bin"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stored(home, tables) -> tuple[list, list]:
    """The table's rows and changelog as stored, read with pyiceberg alone (no Spark, no extra JVM)."""
    from changelake.config import load_settings
    from changelake.spec import load_specs
    from changelake.storage.iceberg import Storage

    storage = Storage(load_settings(home=home, tables_dir=tables))
    spec = load_specs(tables)["shop.orders"]
    rows = storage.pk_table(spec).scan().to_arrow().drop_columns(["_bucket"]).to_pylist()
    log = storage.changelog_table(spec).scan().to_arrow().drop_columns(["_commit_timestamp"]).to_pylist()
    key = lambda r: sorted((k, str(v)) for k, v in r.items())  # noqa: E731
    return sorted(rows, key=key), sorted(log, key=lambda r: (r["_batch_id"], r["_bucket"], r["_log_offset"]))


def submit(env, master: str) -> str:
    python = str(BIN / "python")
    proc = subprocess.run(
        [str(BIN / "spark-submit"), "--master", master, "--conf", f"spark.pyspark.python={python}",
         "--conf", "spark.executor.memory=1g", str(REPO / "spark_apps" / "apply_app.py"), "shop.orders"],
        env={**env, "PYSPARK_PYTHON": python}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    return proc.stdout + proc.stderr


def test_apply_on_a_standalone_cluster_equals_the_local_run(tmp_path):
    tables = tmp_path / "tables"
    tables.mkdir()
    shutil.copy(REPO / "examples" / "tables" / "shop.orders.yaml", tables)
    envs = {}
    for run in ("local", "cluster"):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHANGELAKE_")}
        env.update(CHANGELAKE_HOME=str(tmp_path / run), CHANGELAKE_TABLES=str(tables))
        # Batches this small apply in-process without Spark; this test is about Spark on a cluster.
        env["CHANGELAKE_LOCAL_APPLY_RECORDS"] = "0"
        subprocess.run(
            [sys.executable, "-m", "changelake.cli", "datagen", "--batches", "2", "--records", "60"],
            env=env, check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        envs[run] = env

    port = free_port()
    cluster = {
        **envs["cluster"],
        "SPARK_CLUSTER_DIR": str(tmp_path / "spark-cluster"),
        "SPARK_MASTER_PORT": str(port),
        "SPARK_MASTER_WEBUI_PORT": str(free_port()),
        "SPARK_WORKER_WEBUI_PORT": str(free_port()),
        "SPARK_WORKER_MEMORY": "2g",
    }
    script = REPO / "infra" / "spark_cluster.sh"
    try:
        subprocess.run([str(script), "start"], env=cluster, check=True, timeout=180)
        cluster_log = submit(envs["cluster"], f"spark://127.0.0.1:{port}")
    finally:
        subprocess.run([str(script), "stop"], env=cluster, timeout=60)
    assert "[shop.orders] landing batch 2 (table batch 2) committed" in cluster_log
    # The tasks really ran on the worker: its work directory holds this application's executor logs.
    assert any((tmp_path / "spark-cluster" / "work").glob("app-*/*/stderr"))
    local_log = submit(envs["local"], "local[2]")
    assert "[shop.orders] landing batch 2 (table batch 2) committed" in local_log

    cluster_rows, cluster_log = stored(tmp_path / "cluster", tables)
    local_rows, local_log = stored(tmp_path / "local", tables)
    assert cluster_rows == local_rows and len(local_rows) > 20
    assert cluster_log == local_log and {r["_change_type"] for r in local_log} == {"+I", "-U", "+U", "-D"}
