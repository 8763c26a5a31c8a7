"""Spark reads of a merge-on-read table: Iceberg's Spark runtime (the ``changelake`` catalog) beside the view
layer it replaced (``storage/sparkread.py``: the data files planned once with pyiceberg, position deletes
dropped by an anti-join on ``_metadata.file_path`` / ``row_index``).

python benchmarks/bench_spark_reads.py [--rows 200000] [--batches 20] [--runs 15]

Builds the table without Spark (batches applied in this process), then in one SparkSession times, per reader,
a point query, a count and a full aggregate; the view is registered once (its planning is not in its
queries' time, as the endpoint registered it once per commit), the Iceberg table is planned by every query.
Run it alone on the machine (flock -x /tmp/changelake-cpu.lock)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args(argv)

    from changelake import ChangeLake
    from changelake.config import load_settings
    from changelake.runtime.session import get_spark
    from changelake.storage import sparkread

    home = Path(tempfile.mkdtemp(prefix="bench-spark-reads-"))
    (home / "tables").mkdir()
    settings = load_settings(home=home, tables_dir=home / "tables")
    lake = ChangeLake(settings=settings, spark=lambda: None, progress=lambda _m: None)
    spec = {
        "name": "bench.t",
        "primary_key": ["k"],
        "options": {"bucket.num": 4},
        "columns": [
            {"name": "k", "type": "BIGINT"},
            {"name": "v", "type": "STRING"},
            {"name": "n", "type": "DOUBLE"},
        ],
    }
    lake.create_table(spec)
    lake.apply(
        "bench.t",
        [{"op": "+I", "data": {"k": i, "v": f"v{i}", "n": i * 0.5}} for i in range(args.rows)],
        batch_id=1,
    )
    step = max(1, args.rows // 500)
    for b in range(2, args.batches + 2):
        changes = [
            {"op": "+U", "data": {"k": i, "v": f"b{b}", "n": float(b)}} for i in range(b, args.rows, step)
        ]
        lake.apply("bench.t", changes, batch_id=b)
    table = lake.storage.pk_table(lake.spec("bench.t"))
    files = lake.storage.table_files(table)
    print(f"table: {args.rows:,} rows, {len(files)} files ({sum(f.is_delete for f in files)} delete files)")

    spark = get_spark(settings, app_name="bench-spark-reads")
    lake = ChangeLake(settings=settings, spark=spark, progress=lambda _m: None)
    view = sparkread.rows_df(spark, lake.storage, lake.spec("bench.t")).drop("_bucket")
    view.createOrReplaceTempView("anti_join_view")
    iceberg = lake.iceberg_table("bench.t")
    queries = {
        "point": "SELECT * FROM {t} WHERE k = 4242",
        "count": "SELECT count(*) FROM {t}",
        "aggregate": "SELECT v, count(*), sum(n) FROM {t} GROUP BY v",
    }
    results: dict[str, dict[str, float]] = {}
    for name, sql in queries.items():
        for reader, relation in (("view", "anti_join_view"), ("iceberg", iceberg)):
            statement = sql.format(t=relation)
            first = spark.sql(statement).collect()  # warm-up (and the answer to compare)
            times = []
            for _ in range(args.runs):
                started = time.perf_counter()
                got = spark.sql(statement).collect()
                times.append(time.perf_counter() - started)
            assert sorted(map(tuple, got)) == sorted(map(tuple, first))
            results.setdefault(name, {})[reader] = statistics.median(times)
        a, b = (results[name][k] for k in ("view", "iceberg"))
        assert sorted(map(tuple, spark.sql(sql.format(t="anti_join_view")).collect())) == sorted(
            map(tuple, spark.sql(sql.format(t=iceberg)).collect())
        ), name
        print(f"{name:>9}: view {a * 1000:7.1f} ms   iceberg {b * 1000:7.1f} ms   iceberg/view {b / a:.2f}x")
    print(json.dumps(results))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
