"""Fixtures for the Airflow env's tests: an Airflow home and a changelake home per test, under tmp_path."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO

AIRFLOW = REPO / ".venv-airflow" / "bin" / "airflow"
DATA_PY = REPO / ".venv" / "bin" / "python"


def airflow_env(home: Path, tables: Path, **given: str) -> dict[str, str]:
    """The environment `infra/airflow/env.sh` builds, pointed at a test's own homes (and ``given``, e.g. an
    AIRFLOW_PORT, set before it runs)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "CHANGELAKE_"))}
    env.update(REPO_ROOT=str(REPO), CHANGELAKE_HOME=str(home), CHANGELAKE_TABLES=str(tables), **given)
    script = f". {REPO}/infra/airflow/env.sh && env -0"
    out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, check=True, cwd=REPO).stdout
    return dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)


@pytest.fixture
def pipeline_home(tmp_path):
    """A changelake home with two demo tables (last-row via Debezium, aggregation via upsert-kafka)."""
    tables = tmp_path / "tables"
    tables.mkdir()
    for name in ("shop.orders", "shop.shop_user_stats"):
        shutil.copy(REPO / "examples" / "tables" / f"{name}.yaml", tables / f"{name}.yaml")
    home = tmp_path / "home"
    env = airflow_env(home, tables)
    subprocess.run([str(REPO / "infra" / "airflow" / "standalone.sh"), "init"], env=env, check=True, cwd=REPO)
    return home, tables, env
