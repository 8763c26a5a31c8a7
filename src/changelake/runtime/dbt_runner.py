"""Run dbt on changelake's tables, cold or warm.

Cold (dbt-spark ``method: session``): the app registers every PK table's current snapshot, its changelog and
its landed input as global temp views, then invokes dbt in-process; dbt-spark's session method picks up this
same SparkSession, so the models read changelake's tables directly.

Warm (``CHANGELAKE_SPARK_REMOTE`` set and the SQL endpoint of ``$CHANGELAKE_HOME`` running): the endpoint
already serves the same views; this waits until they show every table's current snapshot, then runs dbt's
``thrift`` target against it. No JVM starts in this process.

Either way dbt's artifacts (``manifest.json``, ``run_results.json``, the docs site) and logs go under
``$CHANGELAKE_HOME/dbt``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from changelake.config import Settings

BUILD_RESULTS = "build_run_results.json"  # run_results.json of the last build/run/test


def dbt_dirs(settings: Settings) -> dict[str, Path]:
    base = settings.home / "dbt"
    return {"target": base / "target", "logs": base / "logs"}


def run_dbt(args: list[str], settings: Settings, progress=print) -> int:
    """Run ``dbt <args>`` on the tables' current snapshots (warm through the SQL endpoint when
    ``settings.spark_remote`` is set, else in this process's SparkSession); return dbt's exit status."""
    from dbt.cli.main import dbtRunner

    if not args:
        args = ["build"]
    started = time.monotonic()
    target_args = (
        _warm_target(settings, progress)
        if settings.spark_remote
        else _session_target(settings, args, progress)
    )
    dirs = dbt_dirs(settings)
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("DBT_SEND_ANONYMOUS_USAGE_STATS", "false")
    os.environ.setdefault("DBT_USE_COLORS", "false")
    command = [
        *args,
        "--project-dir", str(settings.dbt_project_dir),
        "--profiles-dir", str(settings.dbt_project_dir),
        "--target-path", str(dirs["target"]),
        "--log-path", str(dirs["logs"]),
        *([] if "--target" in args else target_args),
    ]  # fmt: skip
    if args[0] == "docs" and "generate" in args:
        command.append("--static")  # one self-contained index.html, viewable without a server
        # Row counts in the catalog the docs read (dbt_project/macros/compute_statistics.sql).
        analyze = ["run-operation", "compute_statistics", *command[len(args) :]]
        analyze = [a for a in analyze if a != "--static"]
        if not dbtRunner().invoke(analyze).success:
            progress(
                "[dbt] WARNING: row counts not computed (compute_statistics failed); the docs show sizes"
            )
    progress(f"[dbt] dbt {' '.join(command)}")
    result = dbtRunner().invoke(command)
    status = 0 if result.success else (2 if result.exception is not None else 1)
    static_docs = dirs["target"] / "static_index.html"
    if args[0] == "docs" and "generate" in args and result.success and static_docs.exists():
        offline_static_docs(static_docs)
    summary = summarize(dirs["target"] / "run_results.json")
    if summary is not None and args[0] in ("build", "run", "test", "seed", "snapshot"):
        # Kept apart: a later `docs generate` overwrites run_results.json.
        shutil.copy(dirs["target"] / "run_results.json", dirs["target"] / BUILD_RESULTS)
        for node in summary["nodes"]:
            progress(
                f"[dbt] {node['status']:<7} {node['unique_id']} ({node['execution_time']:.1f}s){node['message']}"
            )
        counts = ", ".join(f"{k} {v}" for k, v in summary["counts"].items())
        progress(f"[dbt] {args[0]}: {counts} in {time.monotonic() - started:.1f}s")
    if result.exception is not None:
        progress(f"[dbt] error: {result.exception}")
    progress(f"[dbt] artifacts: {dirs['target']}")
    return status


#: What dbt's docs page (1.11) does wrong opened as file://, and the repair: the icons' SVG ``<use>`` carry
#: an Angular template as their address until Angular fills it in, and Chromium tries to load the raw
#: ``{{ getIcon(...) }}`` (186 console errors on the demo project; ``ng-attr-`` sets the attribute only once
#: filled in); the favicon is an unexpanded webpack ``require`` (one failed load; none is better).
DBT_DOCS_FIXES = {
    '<use xlink:href="{{': '<use ng-attr-xlink:href="{{',
    "href=\"${require('./assets/favicons/favicon.ico')}\"": 'href="data:,"',
}


def offline_static_docs(path: Path) -> int:
    """Make dbt's ``static_index.html`` open as ``file://`` without console errors; returns the fixes made.

    dbt's page loads nothing from the network itself (its tracker only with ``send_anonymous_usage_stats``,
    which :func:`run_dbt` turns off unless the environment asks for it).
    """
    from changelake.atomic import atomic_write_text

    text = path.read_text(encoding="utf-8")
    fixed, count = text, 0
    for wrong, right in DBT_DOCS_FIXES.items():
        count += fixed.count(wrong)
        fixed = fixed.replace(wrong, right)
    if count:
        atomic_write_text(path, fixed)
    return count


def _session_target(settings: Settings, args: list[str], progress) -> list[str]:
    """Cold: start Spark here (Hive catalog for dbt's tables) and register the views in it."""
    from changelake.api import ChangeLake
    from changelake.runtime.jvm import SPARK_CATALOG, spark_catalog
    from changelake.runtime.session import get_spark

    spark = get_spark(settings, app_name=f"changelake-dbt-{args[0]}", hive=True)
    # insert_overwrite models replace only the partitions a run produces (incremental windows).
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    lake = ChangeLake(settings=settings, spark=spark, progress=lambda m: None)
    views = lake.register_views()
    progress(f"[dbt] registered {len(views)} views: {', '.join(views)}")
    # The sources' catalog (dbt_project/models/staging/_sources.yml): `changelake` in a session built for these
    # settings; another name where this process's session reads another home's catalog under that one.
    catalog = spark_catalog(spark, settings)
    if catalog == SPARK_CATALOG or "--vars" in args:
        return []  # profiles.yml's default: CHANGELAKE_DBT_TARGET, else session
    return ["--vars", json.dumps({"changelake_catalog": catalog})]


def _warm_target(settings: Settings, progress) -> list[str]:
    """Warm: the endpoint's views, once they show the current snapshots, through dbt's thrift target."""
    from changelake.errors import ChangelakeError
    from changelake.runtime.endpoint_auth import thrift_env
    from changelake.runtime.server import running_endpoint, wait_for_views

    info = running_endpoint(settings)
    if info is None:
        raise ChangelakeError(
            f"CHANGELAKE_SPARK_REMOTE is {settings.spark_remote} but no SQL endpoint of {settings.home} is "
            "running (start it with `make sql`), and dbt needs its views; unset CHANGELAKE_SPARK_REMOTE to "
            "run dbt in its own Spark application"
        )
    wait_for_views(settings, progress=progress)
    os.environ["SPARK_THRIFT_HOST"] = str(info["host"])
    os.environ["SPARK_THRIFT_PORT"] = str(info["thrift_port"])
    os.environ.update(thrift_env(settings))  # dbt's thrift target logs in as the endpoint's owner
    progress(f"[dbt] warm: the SQL endpoint {info['jdbc_url']} (dbt target thrift)")
    return ["--target", "thrift"]


def summarize(run_results: Path) -> dict | None:
    """Per-node status from dbt's run_results.json, and counts per status."""
    if not run_results.exists():
        return None
    data = json.loads(run_results.read_text())
    nodes = [
        {
            "unique_id": r["unique_id"],
            "status": r["status"],
            "execution_time": r.get("execution_time") or 0.0,
            "failures": r.get("failures"),
            "message": f": {r['message']}"
            if r["status"] in ("fail", "error", "warn") and r.get("message")
            else "",
        }
        for r in data.get("results", [])
    ]
    counts: dict[str, int] = {}
    for n in nodes:
        counts[n["status"]] = counts.get(n["status"], 0) + 1
    return {"nodes": nodes, "counts": counts, "generated_at": data.get("metadata", {}).get("generated_at")}


def main(argv: list[str] | None = None) -> int:
    from changelake.config import load_settings

    return run_dbt(list(sys.argv[1:] if argv is None else argv), load_settings(), progress=_stderr)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
