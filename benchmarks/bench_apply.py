"""Apply benchmark on local Spark: changelake's bucket-aware apply versus raw Spark baselines, in one run.

    make bench                       # 5M rows, 500k-record batch (defaults)
    .venv/bin/python benchmarks/bench_apply.py --rows 1000000 --batch 100000   # a quicker run

Scenarios (same JVM, same data, measured side by side):
  initial load      the 5M-row table applied as batch 1 (all inserts)                  [warms the JVM]
  raw copy          spark.read.parquet(table files).write.parquet(...) — the floor for touching every bucket
  naive rewrite     union(table, batch) + last row per key over the whole table, deletes dropped, written
  apply (parquet)   changelake apply of the 500k batch: 70% updates, 20% inserts, 10% deletes, random keys
  apply (json)      the same kind of batch landed as changelog JSON lines (driver-side decoding included)
  apply 1 bucket    10k updates whose keys all live in one bucket
  versioned         the 500k batch on a versioned table (ver-column updated_at), 30% of records older
  aggregation       the 500k batch on an aggregation table: amount sum, qty max, item listagg
The engine tables start from the same 5M rows (the last-row table's files, committed as their batch 1).
Writes benchmarks/results/latest.json and prints a table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from changelake import ChangeLake
from changelake.config import load_settings

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
    "options": {"bucket.num": 32},
}


def make_records(ops: np.ndarray, keys: np.ndarray, rng: np.random.Generator) -> pa.Table:
    n = len(keys)
    cents = rng.integers(100, 10_000_000, n)
    base = np.datetime64("2026-01-01T00:00:00", "us")
    return pa.table(
        {
            "op": pa.array(ops.tolist() if n < 1000 else ops, pa.string()),
            "order_id": pa.array(keys, pa.int64()),
            "user_id": pa.array(rng.integers(0, 1_000_000, n), pa.int64()),
            "item": pa.array(np.char.add("item-", rng.integers(0, 50_000, n).astype(str)), pa.string()),
            "amount": pa.array(cents / 100.0).cast(pa.decimal128(12, 2), safe=False),
            "qty": pa.array(rng.integers(1, 20, n), pa.int32()),
            "score": pa.array(rng.random(n), pa.float64()),
            "updated_at": pa.array(
                base + rng.integers(0, 10**12, n).astype("timedelta64[us]"), pa.timestamp("us")
            ),
        }
    )


def change_batch(existing: int, next_key: int, size: int, rng) -> tuple[pa.Table, int]:
    n_upd, n_ins = int(size * 0.7), int(size * 0.2)
    n_del = size - n_upd - n_ins
    picked = rng.choice(existing, n_upd + n_del, replace=False)
    keys = np.concatenate([picked[:n_upd], np.arange(next_key, next_key + n_ins), picked[n_upd:]])
    ops = np.array(["+U"] * n_upd + ["+I"] * n_ins + ["-D"] * n_del, dtype=object)
    order = rng.permutation(size)
    return make_records(ops[order], keys[order], rng), next_key + n_ins


def to_jsonl(table: pa.Table, path: Path) -> None:
    cols = [c for c in table.column_names if c != "op"]
    with open(path, "w") as fh:
        for row in table.to_pylist():
            data = {c: row[c] for c in cols}
            if row["op"] == "-D":
                data = {"order_id": row["order_id"]}
            else:
                data["amount"] = str(data["amount"])
                data["updated_at"] = data["updated_at"].isoformat()
            fh.write(json.dumps({"op": row["op"], "data": data}) + "\n")


ENGINE_OPTIONS = {
    "versioned": {"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "updated_at"},
    "aggregation": {
        "table.merge-engine": "aggregation",
        "fields.amount.agg": "sum",
        "fields.qty.agg": "max",
        "fields.item.agg": "listagg",
    },
}


def seed_like(lake, source: str, engine: str) -> str:
    """Create an engine variant of ``source`` holding the same rows, committed as its batch 1."""
    name = f"{source}_{engine}"
    lake.create_table({**SPEC, "name": name, "options": {**SPEC["options"], **ENGINE_OPTIONS[engine]}})
    src = lake.storage.pk_table(lake.spec(source))
    dst = lake.storage.pk_table(lake.spec(name))
    manifest = f"{dst.location()}/metadata/changelake/seed.json"
    lake.storage.write_json(
        dst, manifest, {"batch_id": 1, "files": [], "records": 0, "log_start_offset": 0, "log_end_offset": 0}
    )
    files = [f.file_path for f in lake.storage.data_files(src)]
    lake.storage.commit_batch(
        dst,
        [],
        lake.storage.to_data_files(dst, files),
        {
            "batch-id": 1,
            "checksum": "seed",
            "log-start-offset": 0,
            "log-end-offset": 0,
            "changelog-manifest": manifest,
        },
    )
    return name


def peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def jvm_pid() -> int | None:
    me = os.getpid()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().split()
        except OSError:
            continue
        if int(fields[3]) == me and "java" in Path(stat.parent / "comm").read_text():
            return int(stat.parent.name)
    return None


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--batch", type=int, default=500_000)
    ap.add_argument("--small", type=int, default=10_000)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "latest.json")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="changelake-bench-"))
    rng = np.random.default_rng(42)
    log: list[str] = []

    def progress(msg: str) -> None:
        log.append(msg)
        print("   ", msg, file=sys.stderr, flush=True)

    lake = ChangeLake(load_settings(home=work, tables_dir=work / "tables"), progress=progress)
    spark = lake.spark
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    lake.create_table(SPEC)
    landing = work / "in"
    landing.mkdir()
    results: dict[str, float] = {}

    print(f"== generating {args.rows:,}-row table and batches", file=sys.stderr)
    base = make_records(np.array(["+I"] * args.rows, dtype=object), np.arange(args.rows), rng)
    pq.write_table(base, landing / "base.parquet")
    del base
    batch, next_key = change_batch(np.arange(args.rows), args.rows, args.batch, rng)
    pq.write_table(batch, landing / "batch.parquet")

    print("== initial load (batch 1)", file=sys.stderr)
    results["initial_load_s"] = timed(
        lambda: lake.apply("bench.orders", file=landing / "base.parquet", batch_id=1)
    )

    engine_tables = {engine: seed_like(lake, "bench.orders", engine) for engine in ENGINE_OPTIONS}
    table = lake.storage.pk_table(lake.spec("bench.orders"))
    files = [f.file_path for f in lake.storage.data_files(table)]
    from changelake.tables import storage_struct

    schema = storage_struct(lake.spec("bench.orders"))
    print("== raw copy", file=sys.stderr)
    results["raw_copy_s"] = timed(
        lambda: spark.read.schema(schema).parquet(*files).write.parquet(str(work / "copy"))
    )

    print("== naive rewrite", file=sys.stderr)

    def naive() -> None:
        cols = [c["name"] for c in SPEC["columns"]]
        old = (
            spark.read.schema(schema)
            .parquet(*files)
            .select(F.lit(-1).cast("long").alias("_seq"), F.lit("+I").alias("op"), *cols)
        )
        new = spark.read.parquet(str(landing / "batch.parquet")).select(
            F.monotonically_increasing_id().alias("_seq"), "op", *cols
        )
        w = Window.partitionBy("order_id").orderBy(F.col("_seq").desc())
        latest = (
            old.unionByName(new).withColumn("_rn", F.row_number().over(w)).filter("_rn = 1 and op != '-D'")
        )
        latest.drop("_rn", "_seq", "op").write.parquet(str(work / "naive"))

    results["naive_rewrite_s"] = timed(naive)

    print(f"== apply {args.batch:,} records (parquet)", file=sys.stderr)
    results["apply_parquet_s"] = timed(
        lambda: lake.apply("bench.orders", file=landing / "batch.parquet", batch_id=2)
    )

    print(f"== versioned: apply {args.batch:,} records, 30% older versions", file=sys.stderr)
    older = rng.random(batch.num_rows) < 0.3
    ts = batch.column("updated_at").to_numpy()
    shifted = np.where(older, np.datetime64("2020-01-01T00:00:00", "us"), ts + np.timedelta64(365, "D"))
    versioned_batch = batch.set_column(
        batch.schema.get_field_index("updated_at"), "updated_at", pa.array(shifted, pa.timestamp("us"))
    )
    pq.write_table(versioned_batch, landing / "versioned.parquet")
    results["apply_versioned_s"] = timed(
        lambda: lake.apply(engine_tables["versioned"], file=landing / "versioned.parquet", batch_id=2)
    )
    print(f"== aggregation: apply {args.batch:,} records (sum, max, listagg)", file=sys.stderr)
    results["apply_aggregation_s"] = timed(
        lambda: lake.apply(engine_tables["aggregation"], file=landing / "batch.parquet", batch_id=2)
    )

    print(f"== apply {args.small:,} records in one bucket", file=sys.stderr)
    from changelake.tables import bucket_expr

    spec = lake.spec("bench.orders")
    in_bucket0 = (
        lake.rows("bench.orders")
        .select("order_id")
        .withColumn("_bucket", bucket_expr(spec))
        .filter("_bucket = 0")
        .limit(args.small)
        .toPandas()["order_id"]
        .to_numpy()
    )
    small = make_records(np.array(["+U"] * len(in_bucket0), dtype=object), in_bucket0, rng)
    pq.write_table(small, landing / "small.parquet")
    results["apply_one_bucket_s"] = timed(
        lambda: lake.apply("bench.orders", file=landing / "small.parquet", batch_id=3)
    )
    touched = (
        lake.storage.pk_table(spec)
        .current_snapshot()
        .summary.additional_properties["changelake.touched-buckets"]
    )

    print(f"== apply {args.batch:,} records (json lines)", file=sys.stderr)
    alive = lake.rows("bench.orders").select("order_id").toPandas()["order_id"].to_numpy()
    batch4, _ = change_batch(alive, next_key, args.batch, rng)
    to_jsonl(batch4, landing / "batch4.jsonl")
    results["apply_json_s"] = timed(
        lambda: lake.apply("bench.orders", file=landing / "batch4.jsonl", batch_id=4)
    )

    pid = jvm_pid()
    report = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()} cores, spark master {spark.sparkContext.master}",
        "rows": args.rows,
        "batch_records": args.batch,
        "small_batch_records": args.small,
        "small_batch_touched_buckets": int(touched),
        **{k: round(v, 2) for k, v in results.items()},
        "apply_records_per_s": round(args.batch / results["apply_parquet_s"]),
        "apply_json_records_per_s": round(args.batch / results["apply_json_s"]),
        "apply_vs_raw_copy": round(results["apply_parquet_s"] / results["raw_copy_s"], 2),
        "naive_vs_apply": round(results["naive_rewrite_s"] / results["apply_parquet_s"], 2),
        "one_bucket_vs_full_batch": round(results["apply_one_bucket_s"] / results["apply_parquet_s"], 3),
        "versioned_vs_last_row": round(results["apply_versioned_s"] / results["apply_parquet_s"], 2),
        "aggregation_vs_last_row": round(results["apply_aggregation_s"] / results["apply_parquet_s"], 2),
        "peak_rss_python_driver_mb": round(peak_rss_mb(os.getpid())),
        "peak_rss_jvm_mb": round(peak_rss_mb(pid)) if pid else None,
        "final_rows": lake.rows("bench.orders").count(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print()
    print(f"{'metric':34} value")
    for key, value in report.items():
        print(f"{key:34} {value}")
    print(f"\nwritten to {args.out}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
