"""The Spark table formats a Spark team would pick instead of changelake, run on the bench's data (one peer
per process; run by bench_spark.py, which compares them with changelake).

    PYTHON benchmarks/spark_peers.py --peer delta --data DATA --work WORK --jars DIR [DIR...] \
        --conf '{"spark.master": "local[2]", ...}' --out result.json

Needs pyspark alone (no numpy, pyarrow or changelake), so the same file runs in the data env (pyspark 4.1:
Iceberg, Delta) and in benchmarks/spark35's environment (pyspark 3.5: Hudi, Paimon). Every peer reads the
input files bench_spark.py wrote (``base.parquet``, ``batch.parquet``, ``small-NN.parquet``) and runs, in
one Spark session, in this order:

  warm-up      a 10k-row table loaded and a 1,000-record batch applied, outside every timing
  load         ``--reps`` tables, each loaded with the 5M rows (``base.parquet``)
  batch        the bench batch (70% +U, 20% +I, 10% -D) into each of them; its changelog counted
  small        the ``small-NN.parquet`` batches one after another into the first table; then a full scan
               (every column, ``noop`` sink) and point lookups
  aggregation  ``--reps`` aggregation tables (amount and qty summed), loaded, then the bench batch into each

Every time includes reading the input files. Each table's rows are fingerprinted (count and column sums)
after each workload for bench_spark.py's same-rows check.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The table's columns as bench_data.py writes them (``op`` is the record's change kind, not a column).
COLUMNS = ["order_id", "user_id", "item", "amount", "qty", "score", "updated_at"]
VALUES = [c for c in COLUMNS if c != "order_id"]
#: The aggregation table's summed columns; the others take the latest value (changelake's default
#: ``last_value_ignore_nulls``, Paimon's ``last_non_null_value``: the batch carries no nulls).
SUMMED = ["amount", "qty"]
BUCKETS = 32
#: The names this module gives its tables (warmup, t1, agg2, ...): checked before they reach SQL text.
TABLE_NAME = re.compile(r"[a-z][a-z0-9_]*")


def checked(table: str) -> str:
    """``table`` if it is one of this module's plain table names, else ValueError (it goes into SQL text)."""
    if not TABLE_NAME.fullmatch(table):
        raise ValueError(f"not a bench table name: {table!r}")
    return table


def fingerprint(df) -> dict[str, Any]:
    """Row count and column sums of a Spark DataFrame of the table (bench_data.fingerprint over Arrow)."""
    from pyspark.sql import functions as F

    row = df.agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum("order_id").alias("sum_order_id"),
        F.sum("qty").alias("sum_qty"),
        F.sum("amount").alias("sum_amount"),
    ).first()
    return {
        "rows": row["rows"],
        "sum_order_id": row["sum_order_id"],
        "sum_qty": row["sum_qty"],
        "sum_amount": str(row["sum_amount"]),
    }


def change_counts(kinds: dict[str, int]) -> dict[str, int]:
    """A changelog's row counts by kind, in one vocabulary: inserts, updates (one per updated key: the
    after image, or Hudi's one ``u`` row holding both images), update_befores (where the format writes them
    as rows of their own) and deletes."""
    names = {
        "insert": "inserts", "+i": "inserts", "i": "inserts",
        "update_postimage": "updates", "update_after": "updates", "+u": "updates", "u": "updates",
        "update_preimage": "update_befores", "update_before": "update_befores", "-u": "update_befores",
        "delete": "deletes", "-d": "deletes", "d": "deletes",
    }  # fmt: skip
    out = {"inserts": 0, "updates": 0, "update_befores": 0, "deletes": 0}
    for kind, n in kinds.items():
        out[names[str(kind).lower()]] += n
    return out


def merge_sql(target: str, source: str, aggregate: bool) -> str:
    """The MERGE a user writes for a changelog batch: delete on ``-D``, else update or insert; on an
    aggregation table the summed columns add (``t.v + s.v``) and ``-D`` is ignored, as changelake's
    aggregation tables ignore deletes by default."""
    if aggregate:
        sets = [f"t.{c} = t.{c} + s.{c}" if c in SUMMED else f"t.{c} = s.{c}" for c in VALUES]
        matched = f"WHEN MATCHED AND s.op <> '-D' THEN UPDATE SET {', '.join(sets)}"
    else:
        sets = [f"t.{c} = s.{c}" for c in VALUES]
        matched = f"WHEN MATCHED AND s.op = '-D' THEN DELETE WHEN MATCHED THEN UPDATE SET {', '.join(sets)}"
    cols = ", ".join(COLUMNS)
    return (  # target and source are this module's names (checked), the rest constants
        f"MERGE INTO {target} t USING {source} s ON t.order_id = s.order_id {matched} "  # noqa: S608
        f"WHEN NOT MATCHED AND s.op <> '-D' THEN INSERT ({cols}) VALUES ({', '.join('s.' + c for c in COLUMNS)})"
    )


class Peer:
    """One table format: its Spark settings, how it creates, loads and changes a table, and how a reader gets
    the changelog of its last write. ``table`` names are plain identifiers (t1, agg2, ...)."""

    name = ""
    runtime = ""  #: the jar that provides it, for the report

    def __init__(self, work: Path):
        self.work = work

    def spark_conf(self) -> dict[str, str]:
        return {}

    def settings(self) -> dict[str, str]:
        """The table settings that are not the peer's defaults, as the report lists them."""
        return {}

    def create(self, spark, table: str, aggregate: bool) -> None:
        raise NotImplementedError

    def load(self, spark, table: str, path: str) -> None:
        raise NotImplementedError

    def apply(self, spark, table: str, path: str, aggregate: bool = False) -> None:
        raise NotImplementedError

    def rows(self, spark, table: str):
        raise NotImplementedError

    def mark(self, spark, table: str) -> Any:
        """Where the table's history stands (a version, a snapshot, an instant), before a write."""
        raise NotImplementedError

    def changelog(self, spark, table: str, since: Any) -> dict[str, int]:
        """Row counts by change kind of what was written after ``since``, read as a reader would."""
        raise NotImplementedError

    def lookup(self, spark, table: str, key: int) -> list:
        return self.rows(spark, table).filter(f"order_id = {int(key)}").collect()


def batch_view(spark, path: str, name: str = "batch_in"):
    """The batch file as a temporary view for MERGE (read inside the timing)."""
    spark.read.parquet(path).createOrReplaceTempView(name)
    return name


class Iceberg(Peer):
    """Apache Iceberg: a format-version 2 table with merge-on-read MERGE, UPDATE and DELETE, everything else
    Iceberg's defaults (unpartitioned; Parquet zstd). The changelog is ``create_changelog_view``."""

    name = "iceberg"
    runtime = "iceberg-spark-runtime-4.1_2.13 1.12.0"
    props = {
        "format-version": "2",
        "write.merge.mode": "merge-on-read",
        "write.update.mode": "merge-on-read",
        "write.delete.mode": "merge-on-read",
    }

    def spark_conf(self) -> dict[str, str]:
        return {
            "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
            "spark.sql.catalog.ice": "org.apache.iceberg.spark.SparkCatalog",
            "spark.sql.catalog.ice.type": "hadoop",
            "spark.sql.catalog.ice.warehouse": str(self.work / "iceberg"),
        }

    def settings(self) -> dict[str, str]:
        return dict(self.props)

    def full(self, table: str) -> str:
        return f"ice.db.{table}"

    def create(self, spark, table: str, aggregate: bool) -> None:
        spark.sql("CREATE NAMESPACE IF NOT EXISTS ice.db")
        props = ", ".join(f"'{k}' = '{v}'" for k, v in self.props.items())
        spark.sql(
            f"CREATE TABLE {self.full(table)} (order_id BIGINT, user_id BIGINT, item STRING, "
            f"amount DECIMAL(12,2), qty INT, score DOUBLE, updated_at TIMESTAMP_NTZ) USING iceberg "
            f"TBLPROPERTIES ({props})"
        )

    def load(self, spark, table: str, path: str) -> None:
        spark.read.parquet(path).select(*COLUMNS).writeTo(self.full(table)).append()

    def apply(self, spark, table: str, path: str, aggregate: bool = False) -> None:
        spark.sql(merge_sql(self.full(table), batch_view(spark, path), aggregate))

    def rows(self, spark, table: str):
        return spark.table(self.full(table))

    def mark(self, spark, table: str) -> Any:
        snapshots = f"{self.full(table)}.snapshots"
        return spark.table(snapshots).orderBy("committed_at", ascending=False).first()["snapshot_id"]

    def changelog(self, spark, table: str, since: Any) -> dict[str, int]:
        end = self.mark(spark, table)
        spark.sql(
            f"CALL ice.system.create_changelog_view(table => 'db.{table}', changelog_view => 'cl_{table}', "
            f"options => map('start-snapshot-id', '{since}', 'end-snapshot-id', '{end}'), "
            f"compute_updates => true, identifier_columns => array('order_id'))"
        )
        rows = spark.table(f"cl_{table}").groupBy("_change_type").count().collect()
        return {r["_change_type"]: r["count"] for r in rows}


class Delta(Peer):
    """Delta Lake: a table with the change data feed on, MERGE; everything else Delta's defaults
    (unpartitioned, copy-on-write MERGE: no deletion vectors unless a table asks for them)."""

    name = "delta"
    runtime = "delta-spark_4.1_2.13 4.4.0"

    def spark_conf(self) -> dict[str, str]:
        return {
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        }

    def settings(self) -> dict[str, str]:
        return {"delta.enableChangeDataFeed": "true"}

    def path(self, table: str) -> str:
        return str(self.work / "delta" / table)

    def full(self, table: str) -> str:
        return f"delta.`{self.path(table)}`"

    def create(self, spark, table: str, aggregate: bool) -> None:
        spark.sql(
            f"CREATE TABLE {self.full(table)} (order_id BIGINT, user_id BIGINT, item STRING, "
            f"amount DECIMAL(12,2), qty INT, score DOUBLE, updated_at TIMESTAMP_NTZ) USING delta "
            f"TBLPROPERTIES (delta.enableChangeDataFeed = true)"
        )

    def load(self, spark, table: str, path: str) -> None:
        spark.read.parquet(path).select(*COLUMNS).write.format("delta").mode("append").save(self.path(table))

    def apply(self, spark, table: str, path: str, aggregate: bool = False) -> None:
        spark.sql(merge_sql(self.full(table), batch_view(spark, path), aggregate))

    def rows(self, spark, table: str):
        return spark.read.format("delta").load(self.path(table))

    def mark(self, spark, table: str) -> Any:
        return spark.sql(f"DESCRIBE HISTORY {self.full(table)} LIMIT 1").first()["version"]

    def changelog(self, spark, table: str, since: Any) -> dict[str, int]:
        feed = (
            spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", int(since) + 1)
            .load(self.path(table))
        )
        return {r["_change_type"]: r["count"] for r in feed.groupBy("_change_type").count().collect()}


class Hudi(Peer):
    """Apache Hudi: a merge-on-read table keyed by order_id, unpartitioned, CDC on; the initial load a
    ``bulk_insert`` (Hudi's advice for loading a table), every batch one ``upsert`` whose ``-D`` records
    carry ``_hoodie_is_deleted`` (Hudi's way to delete in the same write). No ordering (precombine) field:
    the latest write wins, as in changelake's last-row tables. Everything else Hudi's defaults. The
    aggregation batch joins the batch with the table's rows and upserts ``t.v + s.v`` (Hudi's MERGE INTO
    refuses target columns on the right of a merge-on-read table's update)."""

    name = "hudi"
    runtime = "hudi-spark3.5-bundle_2.12 1.2.0"

    def spark_conf(self) -> dict[str, str]:
        return {
            "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
            "spark.sql.extensions": "org.apache.spark.sql.hudi.HoodieSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.hudi.catalog.HoodieCatalog",
            "spark.kryo.registrator": "org.apache.spark.HoodieSparkKryoRegistrar",
        }

    def options(self, table: str) -> dict[str, str]:
        return {
            "hoodie.table.name": table,
            "hoodie.datasource.write.table.type": "MERGE_ON_READ",
            "hoodie.datasource.write.recordkey.field": "order_id",
            "hoodie.datasource.write.partitionpath.field": "",
            "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.NonpartitionedKeyGenerator",
            "hoodie.table.cdc.enabled": "true",
        }

    def settings(self) -> dict[str, str]:
        return {k: v for k, v in self.options("t").items() if k != "hoodie.table.name"} | {
            "load": "hoodie.datasource.write.operation=bulk_insert",
            "batch": "hoodie.datasource.write.operation=upsert, _hoodie_is_deleted on -D",
        }

    def path(self, table: str) -> str:
        return str(self.work / "hudi" / table)

    def create(self, spark, table: str, aggregate: bool) -> None:
        pass  # the first write creates the table

    def load(self, spark, table: str, path: str) -> None:
        df = spark.read.parquet(path).select(*COLUMNS)
        (
            df.write.format("hudi")
            .options(**self.options(table))
            .option("hoodie.datasource.write.operation", "bulk_insert")
            .mode("overwrite")
            .save(self.path(table))
        )

    def apply(self, spark, table: str, path: str, aggregate: bool = False) -> None:
        from pyspark.sql import functions as F

        if aggregate:
            # Hudi's MERGE INTO refuses ``t.v + s.v`` on a merge-on-read table ("Target table's field
            # cannot be the right-value of the update clause for MOR table"), and Hudi has no summing
            # payload: a user joins the batch with the table's current rows and upserts the sums.
            batch = spark.read.parquet(path).filter(F.col("op") != "-D")
            current = self.rows(spark, table).select(
                "order_id", *[F.col(c).alias(f"_current_{c}") for c in SUMMED]
            )
            joined = batch.join(current, "order_id", "left")
            for c in SUMMED:
                summed = F.coalesce(F.col(f"_current_{c}"), F.lit(0)) + F.col(c)
                joined = joined.withColumn(c, summed.cast(batch.schema[c].dataType))
            df = joined.select(*COLUMNS)
        else:
            df = spark.read.parquet(path).withColumn("_hoodie_is_deleted", F.col("op") == "-D")
            df = df.select(*COLUMNS, "_hoodie_is_deleted")
        (
            df.write.format("hudi")
            .options(**self.options(table))
            .option("hoodie.datasource.write.operation", "upsert")
            .mode("append")
            .save(self.path(table))
        )

    def rows(self, spark, table: str):
        return spark.read.format("hudi").load(self.path(table)).select(*COLUMNS)

    def mark(self, spark, table: str) -> Any:
        # The completed instants on the timeline (Hudi 1.x: .hoodie/timeline/<requested>_<completed>.<action>).
        timeline = Path(self.path(table)) / ".hoodie" / "timeline"
        done = sorted(
            f.split(".")[0].split("_")[1]
            for f in os.listdir(timeline)
            if "_" in f.split(".")[0] and f.split(".")[-1] in ("deltacommit", "commit")
        )
        return done[-1]

    def changelog(self, spark, table: str, since: Any) -> dict[str, int]:
        feed = (
            spark.read.format("hudi")
            .option("hoodie.datasource.query.type", "incremental")
            .option("hoodie.datasource.query.incremental.format", "cdc")
            .option("hoodie.datasource.read.begin.instanttime", since)
            .load(self.path(table))
        )
        return {r["op"]: r["count"] for r in feed.groupBy("op").count().collect()}


class Paimon(Peer):
    """Apache Paimon: a primary-key table (order_id) with ``bucket`` = changelake's 32 and the lookup
    changelog producer. A batch is written as it is, its change kind taken from the ``op`` column
    (``rowkind.field``: Paimon's way to write a changelog that arrives as data), so no write reads the table.
    The aggregation table is Paimon's aggregation merge engine (``sum``; ``ignore-delete`` as changelake's
    aggregation tables ignore deletes by default). Everything else Paimon's defaults."""

    name = "paimon"
    runtime = "paimon-spark-3.5 0.9.0"

    def spark_conf(self) -> dict[str, str]:
        return {
            "spark.sql.extensions": "org.apache.paimon.spark.extensions.PaimonSparkSessionExtensions",
            "spark.sql.catalog.paimon": "org.apache.paimon.spark.SparkCatalog",
            "spark.sql.catalog.paimon.warehouse": str(self.work / "paimon"),
        }

    def props(self, aggregate: bool) -> dict[str, str]:
        props = {
            "primary-key": "order_id",
            "bucket": str(BUCKETS),
            "changelog-producer": "lookup",
            "rowkind.field": "op",
        }
        if aggregate:
            props |= {"merge-engine": "aggregation", "ignore-delete": "true"}
            props |= {f"fields.{c}.aggregate-function": "sum" for c in SUMMED}
        return props

    def settings(self) -> dict[str, str]:
        return self.props(aggregate=False) | {
            "aggregation table": ", ".join(
                f"{k}={v}" for k, v in self.props(True).items() if k not in self.props(False)
            )
        }

    def full(self, table: str) -> str:
        return f"paimon.db.{table}"

    def create(self, spark, table: str, aggregate: bool) -> None:
        spark.sql("CREATE DATABASE IF NOT EXISTS paimon.db")
        props = ", ".join(f"'{k}' = '{v}'" for k, v in self.props(aggregate).items())
        spark.sql(
            f"CREATE TABLE {self.full(table)} (op STRING, order_id BIGINT NOT NULL, user_id BIGINT, "
            f"item STRING, amount DECIMAL(12,2), qty INT, score DOUBLE, updated_at TIMESTAMP_NTZ) "
            f"TBLPROPERTIES ({props})"
        )

    def load(self, spark, table: str, path: str) -> None:
        spark.read.parquet(path).select("op", *COLUMNS).writeTo(self.full(table)).append()

    def apply(self, spark, table: str, path: str, aggregate: bool = False) -> None:
        self.load(spark, table, path)

    def rows(self, spark, table: str):
        return spark.table(self.full(table)).select(*COLUMNS)

    def mark(self, spark, table: str) -> Any:
        return spark.table(f"paimon.db.`{table}$snapshots`").agg({"snapshot_id": "max"}).first()[0]

    def changelog(self, spark, table: str, since: Any) -> dict[str, int]:
        end = self.mark(spark, table)
        feed = spark.read.option("incremental-between", f"{since},{end}").table(
            f"paimon.db.`{table}$audit_log`"
        )
        return {r["rowkind"]: r["count"] for r in feed.groupBy("rowkind").count().collect()}


PEERS: dict[str, type[Peer]] = {p.name: p for p in (Iceberg, Delta, Hudi, Paimon)}


def timed(fn: Callable[[], Any]) -> float:
    """Seconds ``fn`` took; what earlier phases wrote is flushed first, as in every bench (bench_data.settle)."""
    os.sync()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def session(peer: Peer, conf: dict[str, str], jars: list[Path]):
    """A local Spark session with the bench's shared settings (``conf``: bench_spark.SPARK_CONF, what
    changelake's session sets) and the peer's catalog and extensions; jars from the pinned cache only."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(f"bench-spark-{peer.name}")
    jar_files = sorted(str(j) for d in jars for j in Path(d).glob("*.jar"))
    settings = {
        **conf,
        **peer.spark_conf(),
        "spark.jars": ",".join(jar_files),
        "spark.sql.warehouse.dir": str(peer.work / "spark-warehouse"),
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={peer.work / 'derby'}",
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run(peer: Peer, spark, data: Path, reps: int, small: list[Path], keys: list[int]) -> dict[str, Any]:
    """Every workload of the module docstring, in its order; times, fingerprints and changelog counts."""
    out: dict[str, Any] = {"runs": {}, "fingerprints": {}, "settings": peer.settings()}
    base, batch = str(data / "base.parquet"), str(data / "batch.parquet")

    def progress(msg: str) -> None:
        print(f"   [{peer.name}] {msg}", file=sys.stderr, flush=True)

    progress("warm-up")
    peer.create(spark, "warmup", aggregate=False)
    peer.load(spark, "warmup", str(data / "warmup.parquet"))
    peer.apply(spark, "warmup", str(small[0]))
    peer.rows(spark, "warmup").write.format("noop").mode("overwrite").save()

    tables = [checked(f"t{i}") for i in range(1, reps + 1)]
    aggs = [checked(f"agg{i}") for i in range(1, reps + 1)]
    out["runs"]["load"] = []
    for t in tables:
        peer.create(spark, t, aggregate=False)
        out["runs"]["load"].append(timed(lambda t=t: peer.load(spark, t, base)))
        progress(f"load {t}: {out['runs']['load'][-1]:.2f} s")
    out["fingerprints"]["load"] = fingerprint(peer.rows(spark, tables[0]))

    out["runs"]["batch"] = []
    for i, t in enumerate(tables):
        since = peer.mark(spark, t)
        out["runs"]["batch"].append(timed(lambda t=t: peer.apply(spark, t, batch)))
        progress(f"batch {t}: {out['runs']['batch'][-1]:.2f} s")
        out["fingerprints"][f"batch_{t}"] = fingerprint(peer.rows(spark, t))
        if i == 0:  # the changelog of the batch, as a reader gets it (timed: some formats compute it here)
            try:
                counts: dict[str, int] = {}
                # Three reads, the median: the first Spark read of a format pays its classes' loading.
                out["runs"]["changelog_read"] = [
                    timed(
                        lambda t=t, since=since, counts=counts: counts.update(peer.changelog(spark, t, since))
                    )
                    for _ in range(3)
                ]
                out["changelog_read_s"] = statistics.median(out["runs"]["changelog_read"])
                out["changelog"] = change_counts(counts)
            except Exception as e:  # a format that cannot give it is a result, not a crash
                out["changelog_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
                progress(f"changelog: {out['changelog_error']}")

    out["runs"]["small"] = []
    for path in small:
        out["runs"]["small"].append(timed(lambda p=path: peer.apply(spark, tables[0], str(p))))
    progress(f"small: median {statistics.median(out['runs']['small']):.2f} s")
    out["fingerprints"]["small"] = fingerprint(peer.rows(spark, tables[0]))
    out["runs"]["scan"] = [
        timed(lambda: peer.rows(spark, tables[0]).write.format("noop").mode("overwrite").save())
        for _ in range(3)
    ]
    found: list[dict] = []
    out["runs"]["lookup"] = [
        timed(lambda k=k: found.extend(r.asDict() for r in peer.lookup(spark, tables[0], k))) for k in keys
    ]
    out["lookup_found"] = {"rows": len(found), "sum_qty": sum(r["qty"] for r in found)}

    for t in aggs:
        peer.create(spark, t, aggregate=True)
        peer.load(spark, t, base)
    out["runs"]["aggregation"] = []
    for t in aggs:
        out["runs"]["aggregation"].append(timed(lambda t=t: peer.apply(spark, t, batch, aggregate=True)))
        progress(f"aggregation {t}: {out['runs']['aggregation'][-1]:.2f} s")
        out["fingerprints"][f"aggregation_{t}"] = fingerprint(peer.rows(spark, t))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--peer", choices=sorted(PEERS), required=True)
    ap.add_argument("--data", type=Path, required=True, help="bench_spark.py's input directory")
    ap.add_argument("--work", type=Path, required=True, help="where the peer writes its tables (emptied)")
    ap.add_argument("--jars", type=Path, nargs="+", default=[], help="directories of the peer's jars")
    ap.add_argument("--conf", default="{}", help="the shared Spark settings, as JSON")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    meta = json.loads((args.data / "spark-bench.json").read_text())
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    peer = PEERS[args.peer](args.work)
    spark = session(peer, json.loads(args.conf), args.jars)
    small = [args.data / name for name in meta["small_files"]]
    result = run(peer, spark, args.data, args.reps, small, meta["lookup_keys"])
    result |= {"runtime": peer.runtime, "spark": spark.version}
    spark.stop()
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
