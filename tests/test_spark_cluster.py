"""A real distributed run: a Spark standalone master and worker on loopback (infra/spark_cluster.sh), the
apply app submitted to it with spark-submit, and the result identical to the same batches applied locally."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.integration]
BIN = REPO / ".venv" / "bin"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scan(env) -> list[dict]:
    out = subprocess.run(
        [sys.executable, "-m", "changelake.cli", "scan", "shop.orders", "--format", "jsonl"],
        env=env, capture_output=True, text=True, check=True, timeout=300,
    ).stdout  # fmt: skip
    return [json.loads(line) for line in out.splitlines()]


def changelog(env) -> list[tuple]:
    out = subprocess.run(
        [sys.executable, "-m", "changelake.cli", "changelog", "shop.orders", "--format", "jsonl"],
        env=env, capture_output=True, text=True, check=True, timeout=300,
    ).stdout  # fmt: skip
    rows = [json.loads(line) for line in out.splitlines()]
    return sorted((r["_log_offset"], r["_change_type"], r["order_id"], r["status"]) for r in rows)


def submit(env, master: str) -> str:
    python = str(BIN / "python")
    proc = subprocess.run(
        [str(BIN / "spark-submit"), "--master", master, "--conf", f"spark.pyspark.python={python}",
         "--conf", "spark.executor.memory=1g", str(REPO / "spark_apps" / "apply_app.py"), "shop.orders"],
        env={**env, "PYSPARK_PYTHON": python}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout + proc.stderr


def test_apply_on_a_standalone_cluster_equals_the_local_run(tmp_path):
    tables = tmp_path / "tables"
    tables.mkdir()
    shutil.copy(REPO / "tables" / "shop.orders.yaml", tables)
    envs = {}
    for run in ("local", "cluster"):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHANGELAKE_")}
        env.update(CHANGELAKE_HOME=str(tmp_path / run), CHANGELAKE_TABLES=str(tables))
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
    assert "[shop.orders] batch 2 committed" in cluster_log
    # The tasks really ran on the worker: its work directory holds this application's executor logs.
    assert any((tmp_path / "spark-cluster" / "work").glob("app-*/*/stderr"))
    local_log = submit(envs["local"], "local[2]")
    assert "[shop.orders] batch 2 committed" in local_log

    assert scan(envs["cluster"]) == scan(envs["local"]) and len(scan(envs["local"])) > 20
    assert changelog(envs["cluster"]) == changelog(envs["local"])
