"""The DAGs retry only what a retry can fix, through real `airflow dags test` runs of changelake_apply (cold:
spark-submit of the apply app): a refused batch fails its task on the first try; a lost commit race (every
commit made to lose by ``CHANGELAKE_FAULT=commit-conflict``) is retried until the task's retries run out."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.orchestration.conftest import AIRFLOW, REPO, airflow_env
from tests.specs import kv

pytestmark = pytest.mark.integration

SPEC = kv("demo.fruit", **{"bucket.num": 1})
TASK = "apply__demo__fruit"


@pytest.fixture
def fruit_home(tmp_path):
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "demo.fruit.yaml").write_text(SPEC)
    home = tmp_path / "home"
    env = airflow_env(home, tables)
    # no warm endpoint (cold spark-submit, as on a cluster); retries 1 s apart instead of 30 s
    env.update(CHANGELAKE_WARM="0", AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY="1")
    subprocess.run([str(REPO / "infra" / "airflow" / "standalone.sh"), "init"], env=env, check=True, cwd=REPO)
    return home, env


def run_apply(env) -> str:
    proc = subprocess.run(
        [str(AIRFLOW), "dags", "test", "changelake_apply", "-c", json.dumps({"table": "demo.fruit"})],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return proc.stdout + proc.stderr


def tries(log: str) -> int:
    """How many times the apply task of demo.fruit ran in this DAG run."""
    return len(re.findall(rf"\[DAG TEST\] running task <TaskInstance: changelake_apply\.{TASK} ", log))


def test_a_refused_batch_fails_once_and_a_lost_race_is_retried(fruit_home):
    home, env = fruit_home
    landing = home / "landing" / "demo.fruit"
    landing.mkdir(parents=True)
    (landing / "1.jsonl").write_text('{"op": "+I", "data": {"k": "one", "v": "a"}}\n')  # k is an INT

    log = run_apply(env)
    assert "state=failed" in log.split("DagRun Finished")[-1], log[-3000:]
    assert tries(log) == 1, log[-6000:]
    assert "exited with 2" in log or "Error code is: 2" in log, log[-6000:]
    assert "permanent: not retried" in log, log[-6000:]

    (landing / "1.jsonl").write_text('{"op": "+I", "data": {"k": 1, "v": "a"}}\n')
    log = run_apply({**env, "CHANGELAKE_FAULT": "commit-conflict"})
    assert "state=failed" in log.split("DagRun Finished")[-1], log[-3000:]
    assert tries(log) == 3, log[-6000:]  # the first try and its 2 retries (DEFAULT_ARGS)
    assert "retryable: another writer committed first" in log, log[-6000:]
    assert "permanent" not in log, log[-6000:]

    log = run_apply(env)  # the writer "gone": the same run applies the batch
    assert "state=success" in log.split("DagRun Finished")[-1], log[-3000:]
    assert tries(log) == 1
