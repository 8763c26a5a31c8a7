"""Summary printed at the end of `make demo`: what each table holds and where everything is."""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

from changelake import ChangeLake


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-dir", type=Path, required=True)
    args = parser.parse_args()
    lake = ChangeLake(progress=None)
    apply_log = (args.run_dir / "changelake_apply.log").read_text(errors="replace")
    applied: dict[str, int] = {}
    for table in re.findall(r"\[([\w.]+)\] [\w.-]+ batch \d+ \(table batch \d+\) committed", apply_log):
        applied[table] = applied.get(table, 0) + 1
    print("\n==> changelake demo summary")
    header = f"{'table':<22}{'engine':<13}{'applied now':>12}{'last batch':>11}{'rows':>7}{'changelog':>10}"
    header += f"{'quarantined':>12}{'redelivered':>12}{'deduplicated':>13}"
    print(header)
    for row in lake.status():
        engine = lake.spec(row["table"]).merge_engine or "last_row"
        print(
            f"{row['table']:<22}{engine:<13}{applied.get(row['table'], 0):>12}{row['last_batch']:>11}"
            f"{row['rows']:>7}{row['changelog_records']:>10}{row['quarantined']:>12}{row['redelivered']:>12}"
            f"{row['deduplicated']:>13}"
        )
    home = lake.settings.home
    from changelake.runtime.dbt_runner import BUILD_RESULTS, dbt_dirs, summarize

    target = dbt_dirs(lake.settings)["target"]
    build = summarize(target / BUILD_RESULTS)
    if build is not None:
        kinds: dict[str, dict[str, int]] = {}
        for node in build["nodes"]:
            kind = node["unique_id"].split(".")[0]
            kinds.setdefault(kind, {}).setdefault(node["status"], 0)
            kinds[kind][node["status"]] += 1
        print("\ndbt build: " + "; ".join(f"{k}: {v}" for k, v in sorted(kinds.items())))
    print(f"dbt docs site:         {target / 'static_index.html'}")
    quality = home / "quality" / "quality_summary.json"
    if quality.exists():
        q = json.loads(quality.read_text())
        passed = sum(1 for v in q["validations"] for e in v["expectations"] if e["success"])
        total = sum(len(v["expectations"]) for v in q["validations"])
        suites = ", ".join(
            f"{name}: {s['validations'] - s['failed']}/{s['validations']} passed"
            for name, s in q["suites"].items()
        )
        print(f"\nquality: {passed}/{total} expectations passed ({suites}); drift totals {q['drift_total']}")
        print(f"Data Docs (GX):        {q['data_docs']}")
        print(f"quality summary, plot: {quality}, {quality.with_name('drift_redelivery.png')}")
    print(f"\nwarehouse (Iceberg):   {lake.settings.warehouse}")
    print(f"catalog:               {lake.settings.catalog_uri}")
    print(f"landing batches:       {lake.settings.landing_dir}")
    print(f"Airflow logs of this run: {args.run_dir}")
    print(
        f"Airflow UI:            make airflow  (then http://localhost:{os.environ.get('AIRFLOW_PORT', '8080')})"
    )
    print(
        f"inspect a table:       .venv/bin/changelake scan shop.orders --limit 5   (CHANGELAKE_HOME={home})"
    )
    (args.run_dir / "summary.json").write_text(json.dumps(lake.status(), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
