"""Run dbt inside a changelake Spark app (dbt-spark ``method: session``).

The app registers every PK table's current snapshot, its changelog and its landed input as global temp
views, then invokes dbt in-process; dbt-spark's session method picks up this same SparkSession, so the
models read changelake's tables directly. dbt's artifacts (``manifest.json``, ``run_results.json``, the docs
site) and logs go under ``$CHANGELAKE_HOME/dbt``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from changelake.config import Settings

PROJECT_DIR = Path(__file__).resolve().parents[2] / "dbt_project"
BUILD_RESULTS = "build_run_results.json"  # run_results.json of the last build/run/test


def dbt_dirs(settings: Settings) -> dict[str, Path]:
    base = settings.home / "dbt"
    return {"target": base / "target", "logs": base / "logs"}


def run_dbt(args: list[str], settings: Settings, progress=print) -> int:
    """Register the views, run ``dbt <args>`` in this process's SparkSession, return dbt's exit status."""
    from dbt.cli.main import dbtRunner

    from changelake.api import ChangeLake
    from changelake.session import get_spark

    if not args:
        args = ["build"]
    started = time.monotonic()
    spark = get_spark(settings, app_name=f"changelake-dbt-{args[0]}", hive=True)
    # insert_overwrite models replace only the partitions a run produces (incremental windows).
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    lake = ChangeLake(settings=settings, spark=spark, progress=lambda m: None)
    views = lake.register_views()
    progress(f"[dbt] registered {len(views)} views: {', '.join(views)}")
    dirs = dbt_dirs(settings)
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("DBT_SEND_ANONYMOUS_USAGE_STATS", "false")
    os.environ.setdefault("DBT_USE_COLORS", "false")
    command = [
        *args,
        "--project-dir", str(PROJECT_DIR),
        "--profiles-dir", str(PROJECT_DIR),
        "--target-path", str(dirs["target"]),
        "--log-path", str(dirs["logs"]),
    ]  # fmt: skip
    if args[0] == "docs" and "generate" in args:
        command.append("--static")  # one self-contained index.html, viewable without a server
    progress(f"[dbt] dbt {' '.join(command)}")
    result = dbtRunner().invoke(command)
    status = 0 if result.success else (2 if result.exception is not None else 1)
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
