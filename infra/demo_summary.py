"""Summary printed at the end of `make demo`: what each table holds, what dbt and the quality suites did, and
where everything is, as tables and commands that work when pasted (tests/test_demo_summary.py runs them)."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
from pathlib import Path

from changelake import ChangeLake
from changelake.config import Settings, load_settings
from changelake.terminal import format_table, writers_cell

REPO = Path(__file__).resolve().parents[1]
#: The ports `make sql` and `make airflow` use unless told otherwise (infra/spark_server.sh, infra/airflow/env.sh).
PORT_DEFAULTS = (("SPARK_THRIFT_PORT", "10000"), ("SPARK_CONNECT_PORT", "15002"))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-dir", type=Path, required=True)
    args = parser.parse_args()
    lake = ChangeLake(progress=None)
    print("\n==> changelake demo summary")
    status = lake.status()
    print("\n".join(tables_table(lake, status, args.run_dir / "changelake_apply.log")))
    for lines in (dbt_table(lake), quality_table(lake)):
        if lines:
            print()
            print("\n".join(lines))
    print()
    print("\n".join(where(lake, args.run_dir)))
    print()
    print("\n".join(next_steps(lake)))
    (args.run_dir / "summary.json").write_text(json.dumps(status, indent=2) + "\n")
    return 0


def tables_table(lake: ChangeLake, status: list[dict], apply_log: Path) -> list[str]:
    """A line per table: its merge engine, the batches this run applied, its rows and changelog."""
    applied: dict[str, int] = {}
    text = apply_log.read_text(errors="replace") if apply_log.exists() else ""
    for table in re.findall(r"\[([\w.]+)\] [\w.-]+ batch \d+ \(table batch \d+\) committed", text):
        applied[table] = applied.get(table, 0) + 1
    headers = ["table", "engine", "applied now", "writers", "rows", "changelog", "quarantined",
               "redelivered", "deduplicated"]  # fmt: skip
    rows = [
        [
            row["table"],
            lake.spec(row["table"]).merge_engine or "last_row",
            f"{applied.get(row['table'], 0):,}",
            writers_cell(row),
            f"{row['rows']:,}",
            *(f"{row[k]:,}" for k in ("changelog_records", "quarantined", "redelivered", "deduplicated")),
        ]
        for row in status
    ]
    return format_table(headers, rows, right=["applied now", *headers[4:]])


def dbt_table(lake: ChangeLake) -> list[str]:
    """dbt's last build: per kind of node (model, test, ...), how many ended in each status."""
    from changelake.runtime.dbt_runner import BUILD_RESULTS, dbt_dirs, summarize

    build = summarize(dbt_dirs(lake.settings)["target"] / BUILD_RESULTS)
    if build is None:
        return []
    kinds: dict[str, dict[str, int]] = {}
    for node in build["nodes"]:
        counts = kinds.setdefault(node["unique_id"].split(".")[0], {})
        counts[node["status"]] = counts.get(node["status"], 0) + 1
    statuses = sorted({s for counts in kinds.values() for s in counts})
    rows = [[kind, *(str(counts.get(s, "")) for s in statuses)] for kind, counts in sorted(kinds.items())]
    return format_table(["dbt build", *statuses], rows, right=statuses)


def quality_table(lake: ChangeLake) -> list[str]:
    """The quality run: per suite, its validations and how many passed; then the drift totals."""
    path = lake.settings.home / "quality" / "quality_summary.json"
    if not path.exists():
        return []
    q = json.loads(path.read_text())
    expectations = [e for v in q["validations"] for e in v["expectations"]]
    rows = [
        [name, str(s["validations"]), str(s["validations"] - s["failed"]), str(s["failed"])]
        for name, s in sorted(q["suites"].items())
    ]
    lines = format_table(["quality suite", "validations", "passed", "failed"], rows, right=["validations",
                         "passed", "failed"])  # fmt: skip
    passed = sum(1 for e in expectations if e["success"])
    drift = ", ".join(f"{k} {v}" for k, v in sorted((q.get("drift_total") or {}).items())) or "none"
    return [*lines, f"{passed} of {len(expectations)} expectations passed; drift totals: {drift}"]


def where(lake: ChangeLake, run_dir: Path) -> list[str]:
    """Where the reports, the data and this run's logs are (HTML reports as file:// URLs a browser opens)."""
    from changelake.runtime.dbt_runner import dbt_dirs

    settings = lake.settings
    places = [("dbt docs", (dbt_dirs(settings)["target"] / "static_index.html"))]
    quality = settings.home / "quality" / "quality_summary.json"
    if quality.exists():
        docs = json.loads(quality.read_text()).get("data_docs")
        if docs:
            places.append(("Data Docs (GX)", Path(str(docs).removeprefix("file://"))))
        places += [("quality summary", quality), ("drift plot", quality.with_name("drift_redelivery.png"))]
    lines = ["reports and data:"]
    for label, path in places:
        shown = path.as_uri() if path.suffix == ".html" and path.exists() else str(path)
        lines.append(f"  {label + ':':<18}{shown}")
    lines += [
        f"  {'warehouse:':<18}{settings.warehouse}",
        f"  {'catalog:':<18}{settings.catalog_uri}",
        f"  {'landing batches:':<18}{settings.landing_dir}",
        f"  {'logs of this run:':<18}{run_dir}",
    ]
    return lines


#: What the REST catalog's env file (infra/rest_catalog.sh) sets besides the AWS variables.
_REST_ENV = ("CHANGELAKE_CATALOG_TYPE", "CHANGELAKE_CATALOG_URI", "CHANGELAKE_WAREHOUSE")


def next_steps(lake: ChangeLake) -> list[str]:
    """Commands to paste next, from the repository root: each names the settings (CHANGELAKE_HOME, ...) that
    the CLI would not find there by itself, and the ports `make` would not choose by itself."""
    pasted = pasted_environment(lake.settings)
    env = "".join(f"{k}={shlex.quote(v)} " for k, v in pasted.items())
    port = os.environ.get("AIRFLOW_PORT", "8080")
    airflow = env + ("" if port == "8080" else f"AIRFLOW_PORT={port} ")
    sql = env + "".join(f"{k}={os.environ[k]} " for k, d in PORT_DEFAULTS if os.environ.get(k, d) != d)
    cli = f"{env}.venv/bin/changelake"
    services = []
    if os.environ.get("CHANGELAKE_DEMO_S3") == "1":
        # The demo stopped the S3 endpoint and the REST catalog; the commands below need them and their env file
        # (the keys and the token, generated again at each start), which the shell reads, never the screen.
        ports = "".join(f"{k}={os.environ[k]} " for k in ("S3_PORT", "REST_PORT") if os.environ.get(k))
        exported = {k: v for k, v in pasted.items() if k not in _REST_ENV}
        services = [
            "  export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in exported.items()),
            f"  {ports}make rest-catalog   # the S3 endpoint and the REST catalog again, on the demo's objects",
            '  source "$(infra/rest_catalog.sh env)"   # their address, keys and token (make rest-catalog-stop s3-stop)',
        ]
        cli, airflow = ".venv/bin/changelake", airflow.removeprefix(env)
        sql = sql.removeprefix(env)
    return [
        f"next (paste from {REPO}):",
        *services,
        f"  {cli} status",
        f"  {cli} scan shop.orders --limit 5",
        f"  {cli} lookup shop.orders order_id=22",
        f"  {airflow}make airflow      # the Airflow UI on http://localhost:{port}, its login printed",
        f"  {sql}make sql          # the warm SQL endpoint for dbt, beeline, PyHive (docs/sql-endpoint.md)",
    ]


def pasted_environment(settings: Settings) -> dict[str, str]:
    """The CHANGELAKE_* variables a command pasted in the repository root needs to see ``settings``: none
    when the checkout's project file leads to them, as after a plain `make demo`."""
    given = {k: v for k, v in os.environ.items() if k.startswith("CHANGELAKE_")}
    needed: dict[str, str] = {}
    for variable in ("CHANGELAKE_HOME", *sorted(given)):
        if variable in given and variable not in needed and _settings_with(needed) != settings:
            if _settings_with({**needed, variable: given[variable]}) != _settings_with(needed):
                needed[variable] = given[variable]
    return needed


def _settings_with(variables: dict[str, str]) -> Settings:
    """The settings a command started in the repository root with only ``variables`` set would load."""
    saved, cwd = dict(os.environ), Path.cwd()
    try:
        for key in [k for k in os.environ if k.startswith("CHANGELAKE_")]:
            del os.environ[key]
        os.environ.update(variables)
        os.chdir(REPO)
        return load_settings()
    finally:
        os.environ.clear()
        os.environ.update(saved)
        os.chdir(cwd)


if __name__ == "__main__":
    raise SystemExit(main())
