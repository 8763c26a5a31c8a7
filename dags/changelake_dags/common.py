"""Paths, assets and defaults shared by the DAGs. Nothing here touches a database or a connection."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import pendulum

REPO = Path(__file__).resolve().parents[2]
SPARK_APPS = REPO / "spark_apps"
# changelake's log4j2 config for a driver JVM that spark-submit starts (the library's copy; the data env's
# sessions load the same file themselves)
LOG4J = REPO / "src" / "changelake" / "runtime" / "log4j2.properties"
# The CLI's exit code of its one retryable error kind (changelake.errors.CommitConflict, docs/cli.md "Exit
# codes"): another writer kept committing first; the same command later converges. Every other failure of a
# changelake command is permanent (bad input, spec, unknown table, config), so a retry would only repeat it.
RETRYABLE_EXIT_CODES = {75}
SPARK_POOL = "changelake_spark"  # one slot locally: two Spark drivers would fight for 2 cores and Derby
START_DATE = pendulum.datetime(2026, 11, 1, tz="UTC")
DEFAULT_ARGS = {
    "owner": "changelake",
    "retries": 2,  # only a retryable failure uses them (failure() below); the delay is Airflow's
    # [core] default_task_retry_delay, 30 s in infra/airflow/env.sh
    "retry_exponential_backoff": True,
    "max_retry_delay": dt.timedelta(minutes=10),
}


def home() -> Path:
    return Path(os.environ.get("CHANGELAKE_HOME", REPO / ".changelake"))


def tables_dir() -> Path:
    return Path(os.environ.get("CHANGELAKE_TABLES", REPO / "examples" / "tables"))


SPEC_SUFFIXES = (".yaml", ".yml")  # the spec loader reads both


def table_names() -> list[str]:
    """Tables with a spec: read from file names only, so parsing a DAG stays cheap.

    Two spec files whose task names collide (``a__b.c`` and ``a.b__c``, or ``x.yaml`` beside ``x.yml``) are
    refused here with a message naming them, rather than as a duplicate task id deep inside Airflow; the spec
    loader refuses them too, so no table of such a set would apply anyway."""
    names: dict[str, str] = {}
    directory = tables_dir()
    if not directory.is_dir():
        return []
    for path in sorted(p for p in directory.iterdir() if p.suffix in SPEC_SUFFIXES and p.is_file()):
        key = task_name(path.stem).lower()
        if key in names:
            raise ValueError(
                f"spec files {names[key]} and {path.name} in {directory} give the same task name "
                f"'{task_name(path.stem)}'; rename one table"
            )
        names[key] = path.name
    return sorted(Path(n).stem for n in names.values())


def task_name(table: str) -> str:
    return table.replace(".", "__")


def landing_asset():
    """Updated when the demo source lands batches; schedules changelake_apply."""
    from airflow.sdk import Asset

    return Asset(name="changelake.landing", uri="changelake://landing", group="changelake")


def marts_asset():
    """Updated when dbt builds the marts; schedules changelake_quality."""
    from airflow.sdk import Asset

    return Asset(name="changelake.dbt_marts", uri="changelake://dbt/marts", group="changelake")


def table_asset(table: str):
    """The Asset updated when a batch of ``table`` commits."""
    from airflow.sdk import Asset

    return Asset(name=f"changelake.{table}", uri=f"changelake://tables/{table}", group="changelake")


def data_python() -> str:
    """The data environment's interpreter, which Spark's Python workers must use."""
    found = shutil.which("changelake")
    if found:
        return str(Path(found).with_name("python"))
    return str(REPO / ".venv" / "bin" / "python")


def spark_conf() -> dict[str, str]:
    """spark-submit settings: the data env's Python, changelake's log4j2 config and Derby home for the driver
    JVM, and its jars (spark-submit starts that JVM, so the app cannot set them itself)."""
    python = data_python()
    log4j = LOG4J
    # The jars the data env's session builder puts on the classpath (changelake.runtime.jvm): Iceberg's Spark
    # runtime, its JDBC drivers and changelake's catalog, which spark-submit must give its driver at launch.
    jars = sorted((REPO / ".cache" / "jars" / "spark").glob("*.jar")) + sorted(
        (REPO / ".cache" / "jars" / "changelake").glob("*.jar")
    )
    return {
        "spark.pyspark.python": python,
        "spark.pyspark.driver.python": python,
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={log4j} -Dderby.system.home={home() / 'metastore'}",
        **({"spark.jars": ",".join(str(j) for j in jars)} if jars else {}),
    }


def changelake_json(*args: str, timeout: int = 600) -> Any:
    """Run the data env's ``changelake`` CLI with ``args``, which must ask for its JSON output (``--json``,
    or ``--format json`` of a read command); stream its stderr (progress) into the task log and return the
    one JSON document it printed on stdout. The DAGs read the CLI only this way, never its text."""
    command = [shutil.which("changelake") or str(REPO / ".venv" / "bin" / "changelake"), *args]
    print("$ " + " ".join(command), flush=True)
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.stderr:
        print(proc.stderr, flush=True)
    if proc.returncode != 0:
        raise failure(
            f"{' '.join(command[1:])} exited with {proc.returncode}: {proc.stderr.strip()[-500:]}",
            proc.returncode,
        )
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        raise RuntimeError(
            f"{' '.join(command[1:])} printed no single JSON document on stdout ({e}): {proc.stdout[:500]!r}"
        ) from None


def failure(message: str, returncode: int) -> Exception:
    """The exception that fails a task for a changelake command that exited with ``returncode``: retried (by
    the task's ``retries``) only for a retryable kind, else failed at once -- a refused batch or a bad spec
    fails the same way on every try, and its retries would only delay the alert."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    if returncode in RETRYABLE_EXIT_CODES:
        return AirflowException(f"{message} (retryable: another writer committed first; retried)")
    return AirflowFailException(f"{message} (permanent: not retried; docs/cli.md 'Exit codes')")


def status() -> dict[str, dict]:
    """``changelake status`` per table (rows, last batch, pending batches, quarantined, redelivered, problem)."""
    return {row["table"]: row for row in changelake_json("status", "--format", "json")}


def maintenance_done(report: dict) -> str:
    """What ``changelake maintain --json`` did to one table, naming only the work done."""
    compacted = sum(c["files_removed"] for c in report["compacted"])
    done = [
        f"{n} {what}"
        for n, what in (
            (compacted, "file(s) compacted"),
            (report["expired_snapshots"], "snapshot(s) expired"),
            (report["orphans_deleted"], "orphan file(s) removed"),
            (report["files_deleted"], "file(s) deleted"),
        )
        if n
    ]
    return "; ".join(done) or "nothing was due"


def land_batches(batches: int, seed: int) -> list[dict]:
    """``changelake datagen`` for every table with a datagen profile: the landed batches (table, batch_id,
    path, messages, changes), as the CLI's ``datagen --json`` document lists them."""
    return changelake_json("datagen", "--batches", str(batches), "--seed", str(seed), "--json")["landed"]


def dbt_results() -> dict[str, str]:
    """Per-node status of the last dbt build (``$CHANGELAKE_HOME/dbt/target/build_run_results.json``)."""
    path = home() / "dbt" / "target" / "build_run_results.json"
    results = json.loads(path.read_text())["results"]
    statuses = {r["unique_id"]: r["status"] for r in results}
    for unique_id, state in sorted(statuses.items()):
        print(f"{state:<8} {unique_id}", flush=True)
    counts: dict[str, int] = {}
    for state in statuses.values():
        counts[state] = counts.get(state, 0) + 1
    print(f"dbt nodes: {counts}; artifacts in {path.parent}", flush=True)
    return statuses


def quality_results() -> dict:
    """Read the quality app's summary; raise AirflowFailException (no retry) on a critical failure."""
    from airflow.sdk.exceptions import AirflowFailException

    path = home() / "quality" / "quality_summary.json"
    summary = json.loads(path.read_text())
    print(
        f"Data Docs: {summary['data_docs']}\nsummary: {path}\nplot: {path.with_name('drift_redelivery.png')}"
    )
    failures = []
    for validation in summary["validations"]:
        for e in validation["expectations"]:
            if not e["success"]:
                line = (
                    f"{e['severity']}: {validation['suite']} / {validation['asset']}: {e['type']} "
                    f"({e['unexpected_count']} unexpected) offending keys {e['offending_keys']}"
                )
                print(line)
                if e["severity"] == "critical":
                    failures.append(line)
    print(f"suites: {summary['suites']}; drift totals: {summary['drift_total']}")
    result = {"data_docs": summary["data_docs"], "summary": str(path), "suites": summary["suites"]}
    if failures:
        raise AirflowFailException(f"{len(failures)} critical expectation(s) failed; first: {failures[0]}")
    return result


def warm_endpoint() -> dict | None:
    """The SQL endpoint serving this CHANGELAKE_HOME (``infra/spark_server.sh``), if its process lives and its
    Spark Connect port answers: its ready file (``connect_url``, ``jdbc_url``, pids). None when it is not
    running or ``CHANGELAKE_WARM`` is ``0``. (changelake.runtime.server.running_endpoint does the same in the data env,
    which the Airflow env cannot import.)"""
    if os.environ.get("CHANGELAKE_WARM", "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    try:
        info = json.loads((home() / "spark-server" / "ready").read_text())
        os.kill(int(info["pid"]), 0)
        with socket.create_connection((info["host"], int(info["connect_port"])), timeout=2):
            pass
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return info
