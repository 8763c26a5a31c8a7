"""The data-quality app (``changelake quality``): Great Expectations suites on the current snapshots.

Builds the checks of :mod:`changelake.quality.suites` for every PK table and for the dbt marts that
exist, validates each through a GX checkpoint (file context under ``$CHANGELAKE_HOME/quality``), then rebuilds the Data Docs once and writes a compact JSON summary and a PNG of redelivery share per batch and drift
per aggregation table. Returns 1 when an expectation of severity ``critical`` failed, else 0.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from changelake.config import CHECKOUT, Settings

MAX_REPORTED_KEYS = 20


@dataclass(frozen=True)
class MartChecks:
    """What ``marts.yaml`` in the ``expectations_dir`` setting asks of the dbt marts."""

    grains: dict[str, list[str]]  # mart -> the columns that identify a row (checked for uniqueness)
    drift: dict[str, tuple[str, list[str]]]  # aggregation table -> (its drift mart, the mart's keys)


def mart_checks(settings: Settings) -> MartChecks:
    """Read ``<expectations_dir>/marts.yaml``; a missing file means no mart is checked."""
    import yaml

    from changelake.errors import ChangelakeError
    from changelake.identifiers import check_name

    path = settings.expectations_dir / "marts.yaml"
    if not path.exists():
        return MartChecks({}, {})
    data = yaml.safe_load(path.read_text()) or {}
    try:
        grains = {
            check_name(mart, f"{path}: mart"): [check_name(c, f"{path}: {mart} column") for c in cols]
            for mart, cols in (data.get("grains") or {}).items()
        }
        drift = {
            table: (
                check_name(d["mart"], f"{path}: {table} mart"),
                [check_name(c, f"{path}: {table} key") for c in d["keys"]],
            )
            for table, d in (data.get("drift") or {}).items()
        }
    except (AttributeError, KeyError, TypeError) as e:
        raise ChangelakeError(
            f"{path}: expected `grains: {{mart: [columns]}}` and "
            f"`drift: {{table: {{mart: name, keys: [columns]}}}}` ({e!r})"
        ) from e
    return MartChecks(grains, drift)


def quality_dir(settings: Settings) -> Path:
    return settings.home / "quality"


def run_quality(
    settings: Settings,
    drift_threshold: float = 0.0,
    max_redelivery_share: float = 0.5,
    dbt_schema: str | None = None,
    spark=None,
    progress=print,
    tables: list[str] | None = None,
) -> int:
    """Validate every suite, rebuild Data Docs, write the summary and plot; 1 if a critical check failed.

    ``tables`` limits the PK-table suites (and the drift checks) to those tables; marts are always checked.
    """
    from changelake.api import ChangeLake
    from changelake.identifiers import check_name
    from changelake.quality import suites
    from changelake.runtime.session import get_spark

    started = time.monotonic()
    # The schema dbt builds into (profiles.yml reads the same variable); it reaches SQL, so it is validated.
    dbt_schema = check_name(dbt_schema or os.environ.get("CHANGELAKE_DBT_SCHEMA", "analytics"), "dbt schema")
    spark = spark or get_spark(settings, app_name="changelake-quality", hive=True)
    lake = ChangeLake(settings=settings, spark=spark, progress=lambda m: None)
    checks: list = []
    redeliveries: list[dict[str, Any]] = []
    for name, spec in sorted(lake.specs().items()):
        if not lake.storage.exists(spec) or (tables is not None and name not in tables):
            continue
        spec = lake.spec(name)  # the stored layout: keys and delete behaviour as the table was written
        rows, changelog = lake.rows(name), lake.changelog(name)
        checks.append(suites.pk_uniqueness(name, rows, suites.key_columns(spec)))
        checks += suites.tombstone_handling(spec, rows, changelog)
        for _snapshot_id, batch in lake.storage.batch_history(lake.storage.pk_table(spec)):
            messages, redelivered = batch.source["messages"], batch.source["redelivered"]
            redeliveries.append(
                {
                    "table": name,
                    "batch_id": batch.batch_id,
                    "messages": messages,
                    "redelivered": redelivered,
                    "deduplicated": batch.source["deduplicated"],
                    "redelivered_share": redelivered / messages if messages else 0.0,
                }
            )
    if redeliveries:
        checks.append(suites.redelivery(spark.createDataFrame(redeliveries), max_redelivery_share))
    marts = _existing_marts(spark, dbt_schema)
    configured = mart_checks(settings)
    for mart, grain in configured.grains.items():
        if mart in marts:
            checks.append(
                suites.pk_uniqueness(f"{dbt_schema}.{mart}", spark.table(f"{dbt_schema}.{mart}"), grain)
            )
    drift_totals: dict[str, float] = {}
    for table, (mart, keys) in configured.drift.items():
        if tables is not None and table not in tables:
            continue
        if mart in marts:
            frame = spark.table(f"{dbt_schema}.{mart}")
            checks.append(suites.drift(f"{table} drift ({dbt_schema}.{mart})", frame, keys, drift_threshold))
            drift_totals[table] = float(frame.agg({"drift": "sum"}).first()[0] or 0)
        else:
            progress(
                f"[quality] {dbt_schema}.{mart} not built yet (run `changelake dbt build`): drift not checked"
            )

    context = _context(settings)
    results = []
    for i, check in enumerate(checks, start=1):
        progress(f"[quality] {i}/{len(checks)} {check.suite}: {check.asset}")
        results.append(_validate(context, check))
    context.build_data_docs()
    docs = context.get_docs_sites_urls()[0]["site_url"]
    localized = localize_data_docs(Path(docs.removeprefix("file://")).parent)
    if localized:
        progress(f"[quality] Data Docs use local copies of their scripts ({localized} page(s) rewritten)")
    failed_critical = [
        r for r in results for e in r["expectations"] if not e["success"] and e["severity"] == "critical"
    ]
    summary = {
        "generated_at": dt.datetime.now(dt.UTC).isoformat(),
        "success": not failed_critical,
        "drift_threshold": drift_threshold,
        "max_redelivery_share": max_redelivery_share,
        "suites": {
            suite: {
                "validations": sum(1 for r in results if r["suite"] == suite),
                "failed": sum(1 for r in results if r["suite"] == suite and not r["success"]),
            }
            for suite in suites.SUITES
        },
        "drift_total": drift_totals,
        "redelivery": redeliveries,
        "validations": results,
        "data_docs": docs,
    }
    out = quality_dir(settings)
    (out / "quality_summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    plot = _plot(redeliveries, drift_totals, out / "drift_redelivery.png")
    for r in results:
        for e in r["expectations"]:
            if not e["success"]:
                offending = f"; offending keys: {e['offending_keys']}" if e["offending_keys"] else ""
                progress(
                    f"[quality] FAILED ({e['severity']}) {r['suite']} / {r['asset']}: {e['type']} {e['kwargs']}: "
                    f"{e['unexpected_count']} unexpected{offending}"
                )
    passed = sum(1 for r in results for e in r["expectations"] if e["success"])
    total = sum(len(r["expectations"]) for r in results)
    progress(
        f"[quality] {passed}/{total} expectations passed in {len(results)} validations "
        f"({time.monotonic() - started:.1f}s); critical failures: {len(failed_critical)}"
    )
    progress(f"[quality] Data Docs: {docs}")
    progress(f"[quality] summary: {out / 'quality_summary.json'}; plot: {plot}")
    return 1 if failed_critical else 0


#: CDN address of each asset Data Docs load -> its file in the npm packages of infra/datadocs_assets.sh.
CDN_ASSETS = {
    "https://code.jquery.com/jquery-3.7.1.min.js": "jquery/dist/jquery.min.js",
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js": "bootstrap/dist/js/bootstrap.min.js",
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": "bootstrap/dist/css/bootstrap.min.css",
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js": "popper.js/dist/umd/popper.min.js",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js": "bootstrap-table/dist/bootstrap-table.min.js",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css": "bootstrap-table/dist/bootstrap-table.min.css",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js":
        "bootstrap-table/dist/extensions/filter-control/bootstrap-table-filter-control.min.js",
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.min.css":
        "bootstrap-table/dist/extensions/filter-control/bootstrap-table-filter-control.min.css",
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js":
        "bootstrap-datepicker/dist/js/bootstrap-datepicker.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css":
        "bootstrap-datepicker/dist/css/bootstrap-datepicker.min.css",
    "https://cdn.jsdelivr.net/npm/vega@5": "vega/build/vega.min.js",
    "https://cdn.jsdelivr.net/npm/vega-lite@5": "vega-lite/build/vega-lite.min.js",
    "https://cdn.jsdelivr.net/npm/vega-embed@6": "vega-embed/build/vega-embed.min.js",
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css":
        "@forevolve/bootstrap-dark/dist/css/bootstrap-prefers-dark.css",
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css": "@fortawesome/fontawesome-free/css/all.min.css",
}  # fmt: skip


def localize_data_docs(site: Path, assets: Path | None = None) -> int:
    """Point the Data Docs pages at local copies of their CDN scripts and styles, so they render offline.

    ``assets`` is the ``node_modules`` that ``infra/datadocs_assets.sh`` fills (default: the data env's);
    without it the pages keep their CDN links. Returns how many pages were rewritten.
    """
    import shutil

    default = CHECKOUT / ".venv" / "datadocs-assets" / "node_modules"
    assets = Path(os.environ.get("CHANGELAKE_DATADOCS_ASSETS", assets or default))
    if not (assets / "jquery").is_dir():
        return 0
    vendor = site / "static" / "vendor"
    for relative in CDN_ASSETS.values():
        target = vendor / relative
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(assets / relative, target)
    fonts = assets / "@fortawesome" / "fontawesome-free" / "webfonts"
    if fonts.is_dir() and not (vendor / "@fortawesome" / "fontawesome-free" / "webfonts").exists():
        shutil.copytree(fonts, vendor / "@fortawesome" / "fontawesome-free" / "webfonts")
    rewritten = 0
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        if "https://" not in text:
            continue
        prefix = os.path.relpath(vendor, page.parent)
        new = text
        for url, relative in CDN_ASSETS.items():
            new = new.replace(f'"{url}"', f'"{prefix}/{relative}"')
        if new != text:
            page.write_text(new, encoding="utf-8")
            rewritten += 1
    return rewritten


def _existing_marts(spark, schema: str) -> set[str]:
    if not spark.catalog.databaseExists(schema):
        return set()
    return {t.name for t in spark.catalog.listTables(schema)}


def _context(settings: Settings):
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    root = quality_dir(settings)
    root.mkdir(parents=True, exist_ok=True)
    context = gx.get_context(mode="file", project_root_dir=str(root))
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    context.variables.save()
    return context


def local_rows_limit() -> int:
    """Frames with at most this many rows are validated by GX's pandas engine (``CHANGELAKE_QUALITY_LOCAL_ROWS``,
    default 100,000; 0 = always Spark)."""
    return int(os.environ.get("CHANGELAKE_QUALITY_LOCAL_ROWS", "100000"))


def _local_frame(frame, limit: int):
    """``frame`` as a pandas DataFrame when it has at most ``limit`` rows, else None.

    GX's Spark engine runs several Spark jobs per expectation (the metrics, then the unexpected rows): over
    Spark Connect each costs a round trip, ~0.25 s, even on a ten-row table. One Arrow fetch of a small frame
    and GX's pandas engine give the same results (the same built-in expectations) in milliseconds; frames
    above the limit stay in Spark, so a large table never lands on the driver. Fetching ``limit + 1`` rows
    is what tells the two apart without a count job.
    """
    if limit <= 0 or not hasattr(frame, "limit"):
        return None
    local = frame.limit(limit + 1).toPandas()
    return local if len(local) <= limit else None


def _plain(value: Any) -> Any:
    """A numpy/pandas scalar as the Python value the Spark engine reports (NaN and NaT as None)."""
    import math

    import numpy as np
    import pandas as pd

    if isinstance(value, np.generic):
        value = value.item()
    if value is pd.NaT or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def _validate(context, check) -> dict[str, Any]:
    import great_expectations as gx

    local = _local_frame(check.frame, local_rows_limit())
    if local is not None:
        source = context.data_sources.add_or_update_pandas(name="changelake-local")
    else:
        source = context.data_sources.add_or_update_spark(name="changelake")
    try:
        asset = source.get_asset(check.asset)
    except LookupError:
        asset = source.add_dataframe_asset(name=check.asset)
    try:
        batch = asset.get_batch_definition("current")
    except KeyError:
        batch = asset.add_batch_definition_whole_dataframe("current")
    suite = gx.ExpectationSuite(name=check.name, expectations=check.expectations, meta={"suite": check.suite})
    suite = context.suites.add_or_update(suite)
    definition = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=check.name, data=batch, suite=suite)
    )
    checkpoint = context.checkpoints.add_or_update(
        gx.Checkpoint(
            name=check.name,
            validation_definitions=[definition],
            actions=[],  # Data Docs are rebuilt once, after every validation ran
            result_format={"result_format": "COMPLETE", "unexpected_index_column_names": check.keys}
            if check.keys
            else {"result_format": "SUMMARY"},
        )
    )
    result = checkpoint.run(batch_parameters={"dataframe": check.frame if local is None else local})
    expectations = []
    for run in result.run_results.values():
        for r in run.results:
            config = r.expectation_config
            index = r.result.get("unexpected_index_list") or []
            keys = [
                {k: _plain(v) for k, v in row.items() if k in check.keys} for row in index[:MAX_REPORTED_KEYS]
            ]
            expectations.append(
                {
                    "type": config.type,
                    "kwargs": {k: v for k, v in config.kwargs.items() if k not in ("batch_id",)},
                    "severity": str(getattr(config.severity, "value", config.severity)),
                    "success": bool(r.success),
                    "unexpected_count": _plain(r.result.get("unexpected_count")),
                    "observed_value": _plain(r.result.get("observed_value")),
                    "offending_keys": keys,
                }
            )
    return {
        "suite": check.suite,
        "asset": check.asset,
        "engine": "spark" if local is None else "pandas",
        "success": bool(result.success),
        "expectations": expectations,
    }


def _plot(redeliveries: list[dict], drift_totals: dict[str, float], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    tables = sorted({r["table"] for r in redeliveries if r["redelivered"]}) or sorted(
        {r["table"] for r in redeliveries}
    )
    for table in tables:
        points = sorted(
            (r["batch_id"], r["redelivered_share"] * 100) for r in redeliveries if r["table"] == table
        )
        left.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=table)
    left.set(title="Redelivered records per batch", xlabel="batch id", ylabel="% of the batch's messages")
    left.set_ylim(bottom=0)
    left.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    if tables:
        left.legend(fontsize=8)
    names = sorted(drift_totals)
    right.bar(
        names,
        [drift_totals[n] for n in names],
        color=["#2a9d8f" if drift_totals[n] == 0 else "#e76f51" for n in names],
    )
    right.set(title="Drift vs exact recomputation (sum over keys)", ylabel="drift")
    right.set_ylim(bottom=0, top=max([1.0, *drift_totals.values()]) * 1.15)
    for i, n in enumerate(names):
        right.annotate(f"{drift_totals[n]:g}", (i, drift_totals[n]), ha="center", va="bottom")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    import argparse

    from changelake.config import load_settings

    parser = argparse.ArgumentParser(prog="quality_app", description=__doc__.split("\n")[0])
    parser.add_argument("--drift-threshold", type=float, default=0.0)
    parser.add_argument("--max-redelivery-share", type=float, default=0.5)
    parser.add_argument("--table", action="append", dest="tables", help="check only this table (repeatable)")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="exit 0 even when expectations fail (an orchestrator judges quality_summary.json instead)",
    )
    args = parser.parse_args(argv)
    status = run_quality(
        load_settings(),
        args.drift_threshold,
        args.max_redelivery_share,
        progress=lambda m: print(m, file=sys.stderr, flush=True),
        tables=args.tables,
    )
    return 0 if args.report_only else status
