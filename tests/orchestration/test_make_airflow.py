"""`make airflow` (infra/airflow/standalone.sh) starts cleanly: the API server first and the scheduler only once
it answers, so a run triggered at once finishes without a traceback in the log; every socket its processes
listen on is on loopback; the executor is sized to the machine. Without the warm endpoint (no JVM): the DAG
run here only asks the CLI what is pending."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.orchestration.conftest import AIRFLOW, REPO, airflow_env

pytestmark = pytest.mark.integration

STANDALONE = REPO / "infra" / "airflow" / "standalone.sh"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(pids: set[int]) -> list[str]:
    """The local addresses (hex, as /proc/net/tcp* shows them) the processes ``pids`` listen on."""
    inodes = set()
    for pid in pids:
        try:
            for fd in (Path("/proc") / str(pid) / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:  # the process ended meanwhile
            continue
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # state LISTEN, socket of one of the processes
                found.append(fields[1])
    return found


def group_of(leader: int) -> set[int]:
    """Every process in the process group ``leader`` leads (standalone.sh starts the components in one)."""
    pids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == leader:  # the process group id, the fifth field of stat
            pids.add(int(stat.parent.name))
    return pids


def is_loopback(address: str) -> bool:
    host = address.split(":")[0]
    return host in ("0100007F", "00000000000000000000000001000000")  # 127.0.0.1, ::1


def test_the_checker_tells_loopback_from_every_interface():
    assert is_loopback("0100007F:1F90") and is_loopback("00000000000000000000000001000000:1F90")
    assert not is_loopback("00000000:1F90") and not is_loopback("00000000000000000000000000000000:1F90")


def test_the_executor_is_sized_to_the_machine(tmp_path):
    env = airflow_env(tmp_path / "home", tmp_path / "tables")
    assert int(env["AIRFLOW__CORE__PARALLELISM"]) == max(2, len(os.sched_getaffinity(0)))
    assert env["AIRFLOW__API__HOST"] == "127.0.0.1"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].startswith("http://127.0.0.1:")


def runs_of(dag: str, env: dict[str, str]) -> list[dict]:
    """The DAG's runs, as ``airflow dags list-runs --output json`` lists them (warnings may come first)."""
    listed = subprocess.run(
        [str(AIRFLOW), "dags", "list-runs", dag, "--output", "json"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    return next((json.loads(line) for line in listed.stdout.splitlines() if line.startswith("[")), [])


def test_make_airflow_starts_in_order_on_loopback_and_logs_no_traceback(tmp_path):
    tables = tmp_path / "tables"
    tables.mkdir()
    home = tmp_path / "home"
    env = airflow_env(home, tables, AIRFLOW_PORT=str(free_port()), CHANGELAKE_WARM="0")
    log = home / "airflow" / "standalone.log"
    started = subprocess.run([str(STANDALONE), "start"], env=env, cwd=REPO, capture_output=True, text=True)
    try:
        assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
        assert f"Airflow UI: http://localhost:{env['AIRFLOW_PORT']}" in started.stdout
        leader = int((home / "airflow" / "standalone.pid").read_text())
        addresses = listening(group_of(leader))
        assert addresses and all(is_loopback(a) for a in addresses), addresses  # no serve-logs on 0.0.0.0
        run_id = f"make_airflow_{int(time.time())}"
        trigger = [str(AIRFLOW), "dags", "trigger", "changelake_apply", "--run-id", run_id]
        for _ in range(30):  # until the DAG processor has put the DAG into the database
            if subprocess.run(trigger, env=env, cwd=REPO, capture_output=True).returncode == 0:
                break
            time.sleep(2)
        state = None
        for _ in range(120):
            state = next(
                (r["state"] for r in runs_of("changelake_apply", env) if r["run_id"] == run_id), None
            )
            if state in ("success", "failed"):
                break
            time.sleep(2)
        assert state == "success", log.read_text()[-4000:]
    finally:
        subprocess.run([str(STANDALONE), "stop"], env=env, cwd=REPO, capture_output=True)
    assert log.stat().st_mode & 0o077 == 0  # it holds the generated admin password
    text = log.read_text()
    before_scheduler, _, _ = text.partition("scheduler | ")
    assert "api-server | " in before_scheduler, "the scheduler started before the API server"
    assert "the API server answers" in before_scheduler
    assert "Traceback" not in text and "ConnectError" not in text, text[-4000:]
