"""Apply benchmark on local Spark: changelake beside the peers a user could pick instead, in one run.

    make bench                                   # 5M rows, 500k-record batch, every peer (the defaults)
    make bench BENCH_ARGS=--huge                 # ... plus a 20M-record batch with its peak memory
    .venv/bin/python benchmarks/bench_apply.py --rows 200000 --batch 20000 --small 2000   # a quick check

Same data for everyone (bench_data.py writes it in a separate process, so this process — the Spark driver
whose memory is reported — never holds the generated records). Peers run first, each in its own process,
before the JVM starts (bench_peers.py):
  delta-rs          write of the table (change data feed on); MERGE of the batch writing table + feed
  DuckDB            latest-row-per-key rewrite of the whole table (table + batch -> Parquet)
  pyiceberg         append of the table; Table.upsert of the batch + delete of its deleted keys
changelake scenarios (same JVM, only through the public API):
  warm-up           10k rows into a throwaway table, so JVM and Python workers start outside the timings
  initial load      the table's rows applied as batch 1 (all inserts)
  engine loads      the same rows as batch 1 of a versioned and an aggregation table
  raw copy          the table's rows read and written as Parquet by Spark — the floor for touching every bucket
  naive rewrite     union(table, batch) + last row per key over the whole table, deletes dropped, written
  apply (parquet)   the batch: 70% updates, 20% inserts, 10% deletes, random keys, last-row engine
  versioned         the batch on the versioned table (ver-column updated_at), 30% of records older
  aggregation       the batch on the aggregation table: amount sum, qty max, item listagg
  apply 1 bucket    ``--small`` updates whose keys all live in one bucket, ``--small-runs`` batches (median, p90),
                    with the maintenance after each in the background (ChangeLake(background_maintenance=)),
                    waited for outside the timing and listed per batch beside the batch plus that wait
  apply (json)      a batch of the same shape landed as changelog JSON lines (the table's second large batch)
  parquet, second   the same records as Parquet into tables in the same state: the JSON target's baseline
  huge (--huge)     a ``--huge-records`` batch (default 20M, keys repeating), applied last
The scenarios the targets compare with a peer or with each other by a single time (the initial loads, the
Parquet, versioned, aggregation and JSON batches, and delta-rs's write and MERGE) run ``--reps`` times
(default 5), each changelake run on its own copy of the table (``bench.orders``, ``bench.orders_run2``, ...)
and each delta-rs run in a fresh process; the median is compared and every run is listed: one timing on
this project's 2-core VMs moves by 15-30% from minute to minute.
Every changelake scenario reports the peak RSS of the driver (this process), the JVM and its Python workers
(the largest over its runs).
The run checks that every peer ends with changelake's rows (count and column sums) and delta-rs's change
feed with changelake's changelog count, and exits 1 if a check fails. Writes benchmarks/results/latest.json
(docs/benchmarks.md is rendered from it by render_results.py) and prints a table with the targets.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from bench_data import COLUMNS, UPDATE, make_records, settle
from bench_memory import PhaseMemory, child_jvm
from bench_report import finish, print_checks
from spark_peers import fingerprint  # a table's row count and column sums in Spark, as the peers compare them

from changelake import ChangeLake

HERE = Path(__file__).resolve().parent
BUCKETS = 32
SPEC = {
    "name": "bench.orders",
    "columns": [
        {"name": "order_id", "type": "BIGINT"},
        {"name": "user_id", "type": "BIGINT"},
        {"name": "item", "type": "STRING"},
        {"name": "amount", "type": "DECIMAL(12,2)"},
        {"name": "qty", "type": "INT"},
        {"name": "score", "type": "DOUBLE"},
        {"name": "updated_at", "type": "TIMESTAMP(6)"},
    ],
    "primary_key": ["order_id"],
    "options": {"bucket.num": BUCKETS},
}
ENGINE_OPTIONS = {
    "versioned": {"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "updated_at"},
    "aggregation": {
        "table.merge-engine": "aggregation",
        "fields.amount.agg": "sum",
        "fields.qty.agg": "max",
        "fields.item.agg": "listagg",
    },
}
PEER_NAMES = ("delta", "duckdb", "iceberg")
# (label, report key, limit): the targets, each a ratio or a size that must stay at or below limit.
TARGETS = [
    ("last-row apply <= 1.0x delta-rs MERGE + change data feed", "apply_vs_delta_merge_cdf", 1.0),
    ("versioned <= 1.3x last-row", "versioned_vs_last_row", 1.3),
    ("aggregation <= 1.3x last-row", "aggregation_vs_last_row", 1.3),
    # issue 47: the JSON as Flink's JSON format writes it by default (bench_data.write_jsonl)
    ("JSON input (Flink's default encoding) <= 1.15x Parquet input", "json_vs_parquet", 1.15),
    ("initial load <= 1.0x delta-rs write", "initial_load_vs_delta_write", 1.0),
    ("one-bucket batch <= 5% of the full batch", "one_bucket_vs_full_batch", 0.05),
    ("one-bucket batch p90 <= 2x its median", "one_bucket_p90_vs_median", 2.0),
    ("driver peak RSS, initial load <= 1 GB", "driver_peak_mb_initial_load", 1024),
    ("driver peak RSS, huge batch <= 1 GB", "driver_peak_mb_huge", 1024),
]


def generate_data(data: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Run bench_data.py in its own process (so this driver never holds the records); its meta.json."""
    cmd = [sys.executable, str(HERE / "bench_data.py"), "--dir", str(data)]
    cmd += ["--rows", str(args.rows), "--batch", str(args.batch), "--chunk", str(args.chunk)]
    if args.huge:
        cmd += ["--huge-records", str(args.huge_records)]
    subprocess.run(cmd, check=True)
    return json.loads((data / "meta.json").read_text())


#: The peers' times that a target compares with one of changelake's, run --reps times (median compared).
REPEATED_PEER_TIMES = {"delta": ("write_s", "merge_cdf_s")}


def run_peers(
    names: list[str], data: Path, work: Path, reps: int = 1, attempts: int = 2
) -> dict[str, dict[str, Any]]:
    """Each peer in a fresh process, one after another; the peers of :data:`REPEATED_PEER_TIMES` ``reps``
    times, each run in a fresh process. A peer process that dies is run once more (the first failure is
    kept in the result); one that fails every time is reported, not fatal."""
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        print(f"== peer {name}", file=sys.stderr, flush=True)
        out, peer_work = work / f"peer-{name}.json", work / f"peer-{name}"
        cmd = [sys.executable, str(HERE / "bench_peers.py"), "--peer", name, "--dir", str(data)]
        failures: list[dict[str, Any]] = []
        runs: list[dict[str, Any]] = []
        for _run in range(reps if name in REPEATED_PEER_TIMES else 1):
            for _ in range(attempts):
                shutil.rmtree(peer_work, ignore_errors=True)
                out.unlink(missing_ok=True)
                proc = subprocess.run(
                    [*cmd, "--work", str(peer_work), "--out", str(out)], capture_output=True, text=True
                )
                if proc.returncode == 0:
                    runs.append(json.loads(out.read_text()))
                    break
                lines = proc.stderr.strip().splitlines() or ["no output"]
                failures.append({"error": f"exit {proc.returncode}: {lines[-1]}", "stderr_tail": lines[-25:]})
                print(f"   {name} failed: {failures[-1]['error']}", file=sys.stderr, flush=True)
        if runs:
            results[name] = median_runs(runs, REPEATED_PEER_TIMES.get(name, ()))
        else:
            results[name] = {"error": failures[-1]["error"]}
        if failures:
            results[name]["failed_attempts"] = failures
        print(
            f"   {json.dumps({k: v for k, v in results[name].items() if k != 'failed_attempts'})}",
            file=sys.stderr,
            flush=True,
        )
        shutil.rmtree(peer_work, ignore_errors=True)
    return results


def median_runs(runs: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, Any]:
    """The first run's result with each of ``keys`` replaced by the median over ``runs``, every run's value
    beside it (``<key minus _s>_runs_s``), and each peak RSS (``*_peak_rss_mb``) the largest of the runs."""
    merged = dict(runs[0])
    for key in keys:
        values = [run[key] for run in runs if run.get(key) is not None]
        if values:
            merged[key] = round(statistics.median(values), 2)
            merged[f"{key.removesuffix('_s')}_runs_s"] = values
    for key in [k for k in merged if k.endswith("_peak_rss_mb")]:
        values = [run[key] for run in runs if run.get(key) is not None]
        merged[key] = max(values) if values else None
    if len(runs) > 1:
        merged["runs"] = len(runs)
    return merged


def touched_buckets(settings: Any, table: str) -> int | None:
    """Buckets the table's last batch touched, from its Iceberg snapshot summary (``changelake.touched-buckets``);
    ``settings`` is ``ChangeLake.settings`` (catalog name, type, URI, warehouse, properties).

    changelake tables are plain Iceberg, so this reads the catalog with pyiceberg rather than through
    changelake's internals. (Iceberg's own ``changed-partition-count`` counts partitions: the bucket is a
    column, not a partition, of a table made since merge-on-read.)"""
    from pyiceberg.catalog import load_catalog

    props = {"type": settings.catalog_type, "uri": settings.catalog_uri, "warehouse": settings.warehouse}
    catalog = load_catalog(settings.catalog_name, **props, **settings.catalog_properties)
    snapshot = catalog.load_table(tuple(table.split("."))).current_snapshot()
    value = snapshot.summary.additional_properties.get("changelake.touched-buckets") if snapshot else None
    return None if value is None else int(value)


def ratio(numerator: float | None, denominator: float | None, digits: int = 2) -> float | None:
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, digits)


def evaluate_targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target with its value from this run and ``pass``/``fail``/``n/a`` (peer skipped, no --huge)."""
    out = []
    for label, key, limit in TARGETS:
        value = report.get(key)
        status = "n/a" if value is None else ("pass" if value <= limit else "fail")
        out.append({"target": label, "key": key, "value": value, "limit": limit, "status": status})
    return out


def check(checks: list[dict[str, Any]], name: str, ok: bool, detail: str) -> None:
    checks.append({"check": name, "ok": bool(ok), "detail": detail})
    if not ok:
        print(f"   CHECK FAILED: {name}: {detail}", file=sys.stderr, flush=True)


def check_peers(checks: list[dict[str, Any]], peers: dict[str, dict], lake_fp: dict, changes: int) -> None:
    """Every peer that ran ends with changelake's table after the batch; delta's feed has its changes."""
    peer_fp_keys = ("rows", "sum_order_id", "sum_qty", "sum_amount")
    for name, result in peers.items():
        if "skipped" in result:
            continue
        if "error" in result:
            check(checks, f"{name} ran", False, result["error"])
            continue
        got = {k: result["fingerprint"][k] for k in peer_fp_keys}
        check(
            checks, f"{name} table == changelake table", got == lake_fp, f"{name} {got}, changelake {lake_fp}"
        )
    delta = peers.get("delta", {})
    if "cdf_rows" in delta:
        check(
            checks,
            "delta change data feed rows == changelake changelog rows",
            delta["cdf_rows"] == changes,
            f"delta {delta['cdf_rows']} ({delta['cdf_by_type']}), changelake {changes}",
        )


def print_report(report: dict[str, Any]) -> None:
    scalars = {k: v for k, v in report.items() if not isinstance(v, dict | list)}
    print()
    print(f"{'metric':36} value")
    for key, value in scalars.items():
        print(f"{key:36} {value}")
    print("\npeers (seconds; changelake / peer)")
    for name, result in report["peers"].items():
        shown = {k: v for k, v in result.items() if k.endswith("_s") or k in ("skipped", "error", "package")}
        print(f"  {name:8} {json.dumps(shown)}")
    print("\npeak RSS per scenario (MB)")
    for name, mem in report["memory"].items():
        print(f"  {name:22} " + "  ".join(f"{k.removesuffix('_mb')} {v}" for k, v in mem.items()))
    print("\ntargets")
    for t in report["targets"]:
        print(f"  {t['status'].upper():5} {t['target']:58} {t['value']} (limit {t['limit']})")
    print_checks(report["checks"], detail=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000, help="rows of the table (initial load)")
    ap.add_argument("--batch", type=int, default=500_000, help="records of the change batch")
    ap.add_argument("--small", type=int, default=10_000, help="records of the one-bucket batch")
    ap.add_argument(
        "--small-runs", type=int, default=10, help="one-bucket batches applied (median and p90 reported)"
    )
    ap.add_argument(
        "--reps",
        type=int,
        default=5,
        help="runs of the initial loads, the full batches (every engine, JSON) and delta-rs's write and MERGE",
    )
    ap.add_argument("--huge", action="store_true", help="also apply a --huge-records batch (opt-in)")
    ap.add_argument("--huge-records", type=int, default=20_000_000)
    ap.add_argument("--chunk", type=int, default=1_000_000, help="records per generated chunk")
    ap.add_argument("--peers", default=",".join(PEER_NAMES), help="comma-separated; '' runs none")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "latest.json")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (its path is printed)")
    args = ap.parse_args()
    peer_names = [p for p in args.peers.split(",") if p]
    if unknown := set(peer_names) - set(PEER_NAMES):
        ap.error(f"unknown peers {sorted(unknown)}; known: {', '.join(PEER_NAMES)}")

    work = Path(tempfile.mkdtemp(prefix="changelake-bench-"))
    data = work / "data"
    print(f"== generating {args.rows:,}-row table and batches in {data}", file=sys.stderr, flush=True)
    meta = generate_data(data, args)
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    peers = run_peers(peer_names, data, work, reps=args.reps)

    progress_lines: dict[str, list[str]] = {}
    current: list[str] = []

    def progress(msg: str) -> None:
        current.append(msg)
        print("   ", msg, file=sys.stderr, flush=True)

    lake = ChangeLake(home=work / "lake", tables_dir=work / "tables", progress=progress)
    spark = lake.spark  # the session starts outside every timing
    from pyspark.sql import functions as F

    jvm = child_jvm()
    results: dict[str, float] = {}
    memory: dict[str, dict[str, float | None]] = {}
    checks: list[dict[str, Any]] = []

    def measure(name: str, message: str, fn: Callable[[], Any]) -> Any:
        """Time ``fn`` and record the peak RSS of driver, JVM and workers while it ran."""
        print(f"== {message}", file=sys.stderr, flush=True)
        current.clear()
        settle()  # the files of the scenarios before are written out, not inside this timing
        mem = PhaseMemory(jvm).start()
        start = time.perf_counter()
        try:
            return fn()
        finally:
            results[f"{name}_s"] = time.perf_counter() - start
            memory[name] = mem.stop()
            progress_lines[name] = list(current[-40:])

    runs: dict[str, list[float]] = {}

    def measure_runs(name: str, message: str, fns: list[Callable[[], Any]]) -> None:
        """``measure`` each of ``fns`` in turn; the scenario's time is their median, every run is listed, and
        its peak RSS is the largest of the runs."""
        times, peaks = [], []
        for i, fn in enumerate(fns):
            suffix = f" (run {i + 1} of {len(fns)})" if len(fns) > 1 else ""
            measure(name, message + suffix, fn)
            times.append(results[f"{name}_s"])
            peaks.append(memory[name])
        results[f"{name}_s"] = statistics.median(times)
        runs[name] = [round(t, 3) for t in times]
        memory[name] = {k: max((p[k] for p in peaks if p[k] is not None), default=None) for k in peaks[0]}

    # JVM classes, Python workers and imports start once here, not inside the first timed scenario. A 10k-row
    # batch is applied in this process (no Spark job), so the warm-up sends it through Spark explicitly.
    lake.create_table({**SPEC, "name": "bench.warmup"})
    local_records = os.environ.get("CHANGELAKE_LOCAL_APPLY_RECORDS")
    os.environ["CHANGELAKE_LOCAL_APPLY_RECORDS"] = "0"
    try:
        measure(
            "warmup",
            "warm-up: 10k rows into a throwaway table",
            lambda: lake.apply("bench.warmup", file=data / "warmup.parquet", batch_id=1),
        )
    finally:
        if local_records is None:
            del os.environ["CHANGELAKE_LOCAL_APPLY_RECORDS"]
        else:
            os.environ["CHANGELAKE_LOCAL_APPLY_RECORDS"] = local_records
    table = SPEC["name"]

    def copies_of(name: str) -> list[str]:
        """A table and its copies, one per --reps run: the first is the one later scenarios use."""
        return [name] + [f"{name}_run{i}" for i in range(2, args.reps + 1)]

    copies = copies_of(table)
    for name in copies:
        lake.create_table({**SPEC, "name": name})
    measure_runs(
        "initial_load",
        f"initial load: {args.rows:,} rows as batch 1",
        [lambda n=name: lake.apply(n, file=data / "base.parquet", batch_id=1) for name in copies],
    )
    engine_tables: dict[str, list[str]] = {}
    for engine, options in ENGINE_OPTIONS.items():
        names = copies_of(f"{table}_{engine}")
        for name in names:
            lake.create_table({**SPEC, "name": name, "options": {**SPEC["options"], **options}})
        measure_runs(
            f"initial_load_{engine}",
            f"initial load of the {engine} table",
            [lambda n=name: lake.apply(n, file=data / "base.parquet", batch_id=1) for name in names],
        )
        engine_tables[engine] = names

    measure("raw_copy", "raw copy", lambda: lake.rows(table).write.parquet(str(work / "copy")))

    def naive() -> None:
        from pyspark.sql import Window

        old = lake.rows(table).select(F.lit(-1).cast("long").alias("_seq"), F.lit("+I").alias("op"), *COLUMNS)
        new = spark.read.parquet(str(data / "batch.parquet")).select(
            F.monotonically_increasing_id().alias("_seq"),
            "op",
            *[F.col(c).cast(old.schema[c].dataType) for c in COLUMNS],
        )
        w = Window.partitionBy("order_id").orderBy(F.col("_seq").desc())
        latest = (
            old.unionByName(new).withColumn("_rn", F.row_number().over(w)).filter("_rn = 1 and op != '-D'")
        )
        latest.drop("_rn", "_seq", "op").write.parquet(str(work / "naive"))

    measure("naive_rewrite", "naive rewrite", naive)
    measure_runs(
        "apply_parquet",
        f"apply {args.batch:,} records (parquet)",
        [lambda n=name: lake.apply(n, file=data / "batch.parquet", batch_id=2) for name in copies],
    )

    # Outside the timings: changelake's result of the batch, which every peer must match.
    lake_fp = fingerprint(lake.rows(table))
    for name in copies[1:]:
        copy_fp = fingerprint(lake.rows(name))
        check(checks, f"{name} after the batch equals {table}", copy_fp == lake_fp, json.dumps(copy_fp))
    changes = lake.changelog(table, from_batch=2, to_batch=2).count()
    check(
        checks,
        "changelake rows after the batch",
        lake_fp["rows"] == meta["rows_after_batch"],
        f"{lake_fp['rows']} (expected {meta['rows_after_batch']})",
    )
    check(
        checks,
        "changelake changelog rows of the batch",
        changes == meta["changes_of_batch"],
        f"{changes} (expected {meta['changes_of_batch']})",
    )
    check_peers(checks, peers, lake_fp, changes)

    measure_runs(
        "apply_versioned",
        f"versioned: apply {args.batch:,} records, 30% older versions",
        [
            lambda n=name: lake.apply(n, file=data / "versioned.parquet", batch_id=2)
            for name in engine_tables["versioned"]
        ],
    )
    measure_runs(
        "apply_aggregation",
        f"aggregation: apply {args.batch:,} records (sum, max, listagg)",
        [
            lambda n=name: lake.apply(n, file=data / "batch.parquet", batch_id=2)
            for name in engine_tables["aggregation"]
        ],
    )

    # Keys of one bucket by the documented bucket function: pmod(xxhash64(bucket key), bucket.num).
    in_bucket0 = (
        lake.rows(table)
        .select("order_id")
        .filter(F.pmod(F.xxhash64("order_id"), F.lit(BUCKETS)) == 0)
        .limit(args.small)
        .toPandas()["order_id"]
        .to_numpy()
    )
    rng = np.random.default_rng(7)
    small = make_records(np.full(len(in_bucket0), UPDATE, np.int8), in_bucket0, rng)
    pq.write_table(small, data / "small.parquet")
    # A batch of ~0.1 s is at the mercy of whatever ran before it: the JVM's GC and the cleanup of a finished
    # job, and this process touching memory the VM has not backed yet (the first run after the big scenarios
    # took 0.25-0.28 s in every run, the next ones 0.12-0.17 s). So the same updates go in as --small-runs
    # consecutive batches and the median is reported, every run listed beside it.
    # The maintenance due after each batch (a minor compaction every fifth batch, the changelog's merge every
    # tenth, expiry) runs in the background once the batch is committed and reported
    # (ChangeLake(background_maintenance=...)). Its time is not the batch's, and it is not hidden:
    # after each timing the run waits for it (outside the timing) and lists, per batch, the maintenance's own
    # seconds and the batch plus that wait -- what a caller applying batches back to back, or a CLI command,
    # which exits only after it, waits.
    maintenance_s: dict[int, float] = {}

    def maintenance_progress(message: str) -> None:
        progress(message)
        if done := re.search(r"maintenance after the batch: ([0-9.]+)s", message):
            maintenance_s[len(one_bucket_runs)] = float(done[1])

    background = ChangeLake(
        home=work / "lake",
        tables_dir=work / "tables",
        spark=spark,
        progress=progress,
        background_maintenance=maintenance_progress,
    )
    one_bucket_runs, touched_each, with_maintenance = [], [], []
    for i in range(args.small_runs):
        measure(
            "apply_one_bucket",
            f"apply {len(in_bucket0):,} records in one bucket (run {i + 1} of {args.small_runs})",
            lambda i=i: background.apply(table, file=data / "small.parquet", batch_id=3 + i),
        )
        waited = background.wait_for_maintenance(table)
        with_maintenance.append(round(results["apply_one_bucket_s"] + waited, 3))
        one_bucket_runs.append(round(results["apply_one_bucket_s"], 3))
        touched_each.append(touched_buckets(lake.settings, table))
    results["apply_one_bucket_s"] = statistics.median(one_bucket_runs)
    touched = max(touched_each)
    check(
        checks,
        "each one-bucket batch touched one bucket",
        set(touched_each) == {1},
        f"touched-buckets {touched_each}",
    )
    next_batch = 3 + args.small_runs

    # The copies took batch 2 only (the one-bucket updates change values, not which keys exist).
    measure_runs(
        "apply_json",
        f"apply {args.batch:,} records (json lines)",
        [
            lambda n=name: lake.apply(n, file=data / "batch4.jsonl", batch_id=next_batch if n == table else 3)
            for name in copies
        ],
    )
    # The same records as Parquet into tables in the same state (a table's second large batch reads the first
    # one's new rows and delete files: merge-on-read), so the ratio compares the input formats alone.
    seconds = [f"{table}_second{i}" for i in range(1, len(copies) + 1)]
    for name in seconds:
        lake.create_table({**SPEC, "name": name})
        lake.apply(name, file=data / "base.parquet", batch_id=1)
        lake.apply(name, file=data / "batch.parquet", batch_id=2)
    measure_runs(
        "apply_parquet_second",
        f"apply {args.batch:,} records (parquet, the same records as the JSON batch, the table's second batch)",
        [lambda n=name: lake.apply(n, file=data / "batch4.parquet", batch_id=3) for name in seconds],
    )
    final_rows = lake.rows(table).count()
    copy_rows = [lake.rows(name).count() for name in copies[1:] + seconds]
    check(
        checks,
        "changelake rows after the JSON batch",
        {final_rows, *copy_rows} == {meta["rows_after_batch4"]},
        f"{[final_rows, *copy_rows]} (expected {meta['rows_after_batch4']})",
    )

    huge: dict[str, Any] = {}
    if args.huge:
        huge = {"records": args.huge_records}
        try:
            measure(
                "huge",
                f"huge: apply {args.huge_records:,} records",
                lambda: lake.apply(table, file=data / "huge.parquet", batch_id=next_batch + 1),
            )
            huge["rows_after"] = lake.rows(table).count()
        except Exception as e:  # a batch too large for this engine is a result to report, not a crash
            huge["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            print(f"   huge batch failed: {huge['error']}", file=sys.stderr, flush=True)
        huge |= {"apply_s": round(results["huge_s"], 2), **memory["huge"]}
        if "error" not in huge:
            huge["records_per_s"] = round(args.huge_records / results["huge_s"])

    d, p = results, peers
    report: dict[str, Any] = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": shlex.join([".venv/bin/python", "benchmarks/bench_apply.py", *sys.argv[1:]]),
        "machine": f"{os.cpu_count()} cores, spark master {spark.sparkContext.master}",
        "rows": args.rows,
        "batch_records": args.batch,
        "batch_changelog_rows": changes,
        "small_batch_records": len(in_bucket0),
        "small_batch_touched_buckets": touched,
        "apply_one_bucket_runs_s": one_bucket_runs,
        # the maintenance after each one-bucket batch, in the background (0: none was due), and the batch plus
        # the wait for it: what a caller applying back to back waits
        "apply_one_bucket_maintenance_runs_s": [
            round(maintenance_s.get(i, 0.0), 3) for i in range(len(one_bucket_runs))
        ],
        "apply_one_bucket_with_maintenance_runs_s": with_maintenance,
        "reps": args.reps,
        "runs_s": runs,
        **{k: round(v, 2) for k, v in results.items() if k != "huge_s"},
        "apply_records_per_s": round(args.batch / d["apply_parquet_s"]),
        "apply_json_records_per_s": round(args.batch / d["apply_json_s"]),
        "apply_vs_raw_copy": ratio(d["apply_parquet_s"], d["raw_copy_s"]),
        "naive_vs_apply": ratio(d["naive_rewrite_s"], d["apply_parquet_s"]),
        "one_bucket_vs_full_batch": ratio(d["apply_one_bucket_s"], d["apply_parquet_s"], 3),
        "apply_one_bucket_p90_s": round(float(np.percentile(one_bucket_runs, 90)), 3),
        "one_bucket_p90_vs_median": ratio(float(np.percentile(one_bucket_runs, 90)), d["apply_one_bucket_s"]),
        "versioned_vs_last_row": ratio(d["apply_versioned_s"], d["apply_parquet_s"]),
        "aggregation_vs_last_row": ratio(d["apply_aggregation_s"], d["apply_parquet_s"]),
        "json_vs_parquet": ratio(d["apply_json_s"], d["apply_parquet_second_s"]),
        # changelake / peer: below 1 means changelake is faster.
        "apply_vs_delta_merge_cdf": ratio(d["apply_parquet_s"], p.get("delta", {}).get("merge_cdf_s")),
        "initial_load_vs_delta_write": ratio(d["initial_load_s"], p.get("delta", {}).get("write_s")),
        "apply_vs_duckdb_rewrite": ratio(d["apply_parquet_s"], p.get("duckdb", {}).get("rewrite_s")),
        "apply_vs_iceberg_upsert_delete": ratio(
            d["apply_parquet_s"], p.get("iceberg", {}).get("upsert_delete_s")
        ),
        "initial_load_vs_iceberg_append": ratio(d["initial_load_s"], p.get("iceberg", {}).get("append_s")),
        "driver_peak_mb_initial_load": memory["initial_load"]["driver_peak_mb"],
        "driver_peak_mb_huge": huge.get("driver_peak_mb"),
        "peak_rss_python_driver_mb": max(m["driver_peak_mb"] or 0 for m in memory.values()),
        "peak_rss_jvm_mb": max(m["jvm_peak_mb"] or 0 for m in memory.values()) if jvm else None,
        "peak_rss_python_worker_mb": max(m["worker_peak_mb"] or 0 for m in memory.values()) if jvm else None,
        "final_rows": final_rows,
        "peers": peers,
        "huge": huge,
        "memory": memory,
        "progress": progress_lines,
        "checks": checks,
    }
    report["targets"] = evaluate_targets(report)
    return finish(report, args.out, print_report, work, keep=args.keep, what="work directory")


if __name__ == "__main__":
    sys.exit(main())
