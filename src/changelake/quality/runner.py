"""The data-quality app (``changelake quality``): Great Expectations suites on the current snapshots.

Builds the checks of :mod:`changelake.quality.suites` for every PK table and for the dbt marts that
exist, validates each through a GX checkpoint (file context under ``$CHANGELAKE_HOME/quality``, see
:mod:`.gxproject`), then rebuilds the Data Docs once (made to work offline by :mod:`.datadocs`) and writes a
compact JSON summary and a PNG of the redelivered share per batch and the drift per batch of each
aggregation table, each replacing its previous version atomically. Returns 1 when an expectation of
severity ``critical`` failed, else 0.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from changelake.atomic import atomic_write_bytes, atomic_write_text
from changelake.config import Settings, tuned
from changelake.quality.datadocs import default_assets, localize_data_docs

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
    run_time = dt.datetime.now(dt.UTC)  # one run in the Data Docs: every validation of this call shares it
    # The schema dbt builds into (profiles.yml reads the same variable); it reaches SQL, so it is validated.
    dbt_schema = check_name(dbt_schema or settings.dbt_schema, "dbt schema")
    spark = spark or get_spark(settings, app_name="changelake-quality", hive=True)
    lake = ChangeLake(settings=settings, spark=spark, progress=lambda m: None)
    checks: list = []
    redeliveries: list[dict[str, Any]] = []
    for name, spec in sorted(lake.specs().items()):
        if not lake.storage.exists(spec) or (tables is not None and name not in tables):
            continue
        spec = lake.spec(name)  # the stored layout: keys and delete behaviour as the table was written
        rows, changelog = lake.rows(name), lake.changelog(name)
        history = lake.storage.batch_history(lake.storage.pk_table(spec))
        last = max((b.batch_id for _, b in history), default=0)
        checked = f"{name} at batch {last}" if last else f"{name} before its first batch"
        table_checks = [suites.pk_uniqueness(name, rows, suites.key_columns(spec))]
        table_checks += suites.tombstone_handling(spec, rows, changelog)
        for check in table_checks:
            check.checked = checked
        checks += table_checks
        for _snapshot_id, batch in history:
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
        check = suites.redelivery(spark.createDataFrame(redeliveries), max_redelivery_share)
        check.checked = f"{len(redeliveries)} batches of {len({r['table'] for r in redeliveries})} tables"
        checks.append(check)
    built = _dbt_build_time(settings)
    marts = _existing_marts(spark, dbt_schema)
    configured = mart_checks(settings)
    for mart, grain in configured.grains.items():
        if mart in marts:
            check = suites.pk_uniqueness(f"{dbt_schema}.{mart}", spark.table(f"{dbt_schema}.{mart}"), grain)
            check.checked = f"{dbt_schema}.{mart} {built}"
            checks.append(check)
    drift_totals: dict[str, float] = {}
    for table, (mart, keys) in configured.drift.items():
        if tables is not None and table not in tables:
            continue
        if mart in marts:
            frame = spark.table(f"{dbt_schema}.{mart}")
            check = suites.drift(f"{table} drift ({dbt_schema}.{mart})", frame, keys, drift_threshold)
            check.checked = f"{dbt_schema}.{mart} {built}"
            checks.append(check)
            drift_totals[table] = float(frame.agg({"drift": "sum"}).first()[0] or 0)
        else:
            progress(
                f"[quality] {dbt_schema}.{mart} not built yet (run `changelake dbt build`): drift not checked"
            )

    context = _context(settings, progress)
    results = []
    for i, check in enumerate(checks, start=1):
        progress(f"[quality] {i}/{len(checks)} {check.suite}: {check.asset} ({check.checked})")
        results.append(_validate(context, check, run_time))
    forget_old_runs(context, tuned("datadocs_runs"), progress)
    docs = build_data_docs(context, progress, settings)
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
    atomic_write_text(out / "quality_summary.json", json.dumps(summary, indent=2, default=str) + "\n")
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


def _dbt_build_time(settings: Settings) -> str:
    """When dbt's last build finished (its run results), for the run names of the mart checks."""
    from changelake.runtime.dbt_runner import BUILD_RESULTS, dbt_dirs, summarize

    build = summarize(dbt_dirs(settings)["target"] / BUILD_RESULTS)
    stamp = (build or {}).get("generated_at")
    return f"built {stamp[:19].replace('T', ' ')} UTC" if stamp else "(no dbt build recorded)"


def forget_old_runs(context, keep: int, progress=print) -> int:
    """Delete the stored validation results of all but the latest ``keep`` quality runs (a run is one
    ``run_time``), so that the Data Docs, rebuilt from the store, keep those runs only; the rendered pages
    of the validations go too (the next build writes the kept ones again). Returns the runs deleted."""
    store = context.validation_results_store
    keys = store.list_keys()
    runs = sorted({str(k.run_id.run_time) for k in keys}, reverse=True)
    gone = set(runs[keep:])
    for key in keys:
        if str(key.run_id.run_time) in gone:
            store.remove_key(key)
    if gone:
        site = _site_directory(context)
        shutil.rmtree(site / "validations", ignore_errors=True)
        progress(f"[quality] Data Docs: {len(gone)} older run(s) deleted, the latest {keep} kept")
    return len(gone)


def _site_directory(context) -> Path:
    """The local Data Docs site's directory (as the generated project configures it)."""
    from changelake.quality.gxproject import DATA_DOCS_DIR

    return Path(context.root_directory) / DATA_DOCS_DIR


def build_data_docs(context, progress=print, settings: Settings | None = None) -> str:
    """Rebuild the Data Docs from every stored validation, make them work offline (their assets where
    ``settings`` say, else where the loaded settings do); returns the index URL."""
    context.build_data_docs()
    docs = context.get_docs_sites_urls()[0]["site_url"]
    site = Path(docs.removeprefix("file://")).parent
    _report_localized(localize_data_docs(site, default_assets(settings)), progress)
    return docs


def _report_localized(localized, progress) -> None:
    if localized.missing:
        progress(
            f"[quality] WARNING: Data Docs need internet: {len(localized.missing)} of their scripts/styles are "
            f"not in {localized.assets} (e.g. {localized.missing[0]}), so the pages load them from CDNs. "
            "Run infra/datadocs_assets.sh (needs npm) to make them work offline."
        )
    elif localized.remote:
        page, urls = next(iter(localized.remote.items()))
        progress(
            f"[quality] WARNING: {len(localized.remote)} Data Docs page(s) still load from the network "
            f"(e.g. {page}: {urls[0]})"
        )
    else:
        progress(f"[quality] Data Docs work offline ({localized.pages} page(s) rewritten to local copies)")


def _existing_marts(spark, schema: str) -> set[str]:
    if not spark.catalog.databaseExists(schema):
        return set()
    return {t.name for t in spark.catalog.listTables(schema)}


def _context(settings: Settings, progress=None):
    """The GX file context under ``quality/gx``, checked and mended first (:mod:`.gxproject`)."""
    from changelake.quality.gxproject import open_context

    return open_context(quality_dir(settings), progress)


def local_rows_limit() -> int:
    """Frames with at most this many rows are validated by GX's pandas engine (``CHANGELAKE_QUALITY_LOCAL_ROWS``,
    default 100,000; 0 = always Spark)."""
    return tuned("quality_local_rows")


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


def _validate(context, check, run_time: dt.datetime | None = None) -> dict[str, Any]:
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier

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
    # The run's name says what it checked (GX stores results under it: no '/' in it); __none__ otherwise.
    run_id = RunIdentifier(run_name=(check.checked or check.asset).replace("/", "-"), run_time=run_time)
    result = checkpoint.run(
        batch_parameters={"dataframe": check.frame if local is None else local}, run_id=run_id
    )
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


def drift_per_batch(redeliveries: list[dict], drift_totals: dict[str, float]) -> dict[str, dict[str, Any]]:
    """Per aggregation table checked for drift: the records each batch counted twice, the mart's total drift
    and the label the plot gives it.

    An aggregation table counts a redelivered record twice unless the source deduplicates it
    (``dedup: kafka-offsets``), so a batch adds ``redelivered - deduplicated`` records of drift; the drift mart
    measures the resulting difference in value (its ``drift`` column, summed over keys).
    """
    panel = {}
    for table in sorted(drift_totals):
        batches = sorted(
            (r["batch_id"], r["redelivered"] - r["deduplicated"]) for r in redeliveries if r["table"] == table
        )
        total = drift_totals[table]
        twice = sum(n for _, n in batches)
        if total == 0 and twice == 0:
            label = "no drift"
        elif total == 0:
            label = f"no drift in the mart ({twice} records counted twice)"
        else:
            label = f"drift {total:g} (sum over keys), {twice} records counted twice"
        panel[table] = {
            "batch_ids": [b for b, _ in batches],
            "counted_twice": [n for _, n in batches],
            "drift_total": total,
            "label": label,
        }
    return panel


def _figure(redeliveries: list[dict], drift_totals: dict[str, float]):
    """The two panels: redelivered share per batch, and drift per batch of each aggregation table."""
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

    panel = drift_per_batch(redeliveries, drift_totals)
    right.set(title="Drift per batch (aggregation tables)", xlabel="batch id", ylabel="records counted twice")
    right.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    right.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))  # records, not fractions
    for table, p in panel.items():
        color = "#2a9d8f" if p["label"] == "no drift" else "#e76f51"
        right.plot(
            p["batch_ids"], p["counted_twice"], marker="o", color=color, label=f"{table}: {p['label']}"
        )
    if panel:
        right.legend(fontsize=8, loc="upper left")
        right.set_ylim(bottom=0, top=max([1, *(n for p in panel.values() for n in p["counted_twice"])]) * 1.3)
    if not panel:
        right.text(
            0.5,
            0.5,
            "no aggregation table checked for drift",
            ha="center",
            va="center",
            transform=right.transAxes,
        )
    elif all(p["label"] == "no drift" for p in panel.values()):
        right.text(
            0.5,
            0.5,
            "no drift",
            ha="center",
            va="center",
            fontsize=20,
            color="#2a9d8f",
            transform=right.transAxes,
        )
    fig.tight_layout()
    return fig


def _plot(redeliveries: list[dict], drift_totals: dict[str, float], path: Path) -> Path:
    import io

    import matplotlib.pyplot as plt

    fig = _figure(redeliveries, drift_totals)
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(
        path, png.getvalue()
    )  # a run stopped mid-save leaves the previous plot, not half a PNG
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
