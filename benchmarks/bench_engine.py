"""A quick, repeatable benchmark of the apply engine alone (no peers, no memory sampling), for comparing two
versions of the code on a busy machine: the same data, the same JVM, every scenario repeated.

    .venv/bin/python benchmarks/bench_engine.py --rows 1000000 --batch 100000 --reps 3
    PYTHONPATH=/path/to/other/checkout/src .venv/bin/python benchmarks/bench_engine.py ...   # the other

Scenarios per repetition, each on a fresh table: ``initial`` (the rows as batch 1), ``parquet`` (the change
batch: 70% updates, 20% inserts, 10% deletes), ``bucket`` (``--small`` updates in one bucket), ``json`` (a batch
of the same shape as changelog JSON lines). Prints min and median seconds per scenario, the ratios the issue
sets targets on, and the apply's own progress lines (decode / merge split). Also the CPU seconds the driver,
its JVM and the Python workers spent (from /proc): on a machine others load, CPU time moves less than wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from bench_apply import SPEC
from bench_data import UPDATE, generate, make_records, settle

from changelake import ChangeLake

SCENARIOS = ("initial", "parquet", "bucket", "json")


def cpu_seconds() -> dict[str, float]:
    """CPU time (user + system) of this process (the driver), its JVM and the JVM's Python workers, the
    reaped ones included (each process's children's times)."""
    from bench_memory import descendants

    out = {"driver": 0.0, "jvm": 0.0, "workers": 0.0}
    for pid in [os.getpid(), *descendants(os.getpid())]:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        name, fields = raw.split(b"(", 1)[1].rsplit(b")", 1)[0], raw.rsplit(b")", 1)[1].split()
        kind = "driver" if pid == os.getpid() else ("jvm" if name == b"java" else "workers")
        out[kind] += sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime..cstime
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--small", type=int, default=2_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--data", type=Path, help="reuse (or create) the generated data here")
    ap.add_argument("--out", type=Path, help="write the timings as JSON")
    args = ap.parse_args()
    chosen = [s for s in args.scenarios.split(",") if s]

    work = Path(tempfile.mkdtemp(prefix="changelake-bench-engine-"))
    data = args.data or work / "data"
    if not (data / "meta.json").exists():
        generate(data, args.rows, args.batch)
    lines: list[str] = []
    lake = ChangeLake(home=work / "lake", tables_dir=work / "tables", progress=lines.append)
    lake.spark  # noqa: B018 - the JVM starts outside the timings
    import changelake

    print(f"changelake from {changelake.__file__}", file=sys.stderr)

    # Warm-up: JVM classes, Python workers and imports (through Spark: 10k rows would apply in this process).
    lake.create_table({**SPEC, "name": "bench.warmup"})
    local_records = os.environ.get("CHANGELAKE_LOCAL_APPLY_RECORDS")
    os.environ["CHANGELAKE_LOCAL_APPLY_RECORDS"] = "0"
    lake.apply("bench.warmup", file=data / "warmup.parquet", batch_id=1)
    if local_records is None:
        del os.environ["CHANGELAKE_LOCAL_APPLY_RECORDS"]
    else:
        os.environ["CHANGELAKE_LOCAL_APPLY_RECORDS"] = local_records

    timings: dict[str, list[float]] = {s: [] for s in chosen}
    cpu: dict[str, list[float]] = {s: [] for s in chosen}
    small_path = data / "small.parquet"
    for rep in range(args.reps):
        table = f"bench.t{rep}"
        lake.create_table({**SPEC, "name": table})

        def timed(name: str, batch_id: int, path: Path, table: str = table, rep: int = rep) -> None:
            lines.clear()
            settle()
            start, cpu_start = time.perf_counter(), cpu_seconds()
            lake.apply(table, file=path, batch_id=batch_id)
            if name in timings:
                timings[name].append(time.perf_counter() - start)
                used = {k: v - cpu_start[k] for k, v in cpu_seconds().items()}
                cpu[name].append(sum(used.values()))
                split = ", ".join(f"{k} {v:.2f}" for k, v in used.items())
                print(
                    f"rep {rep} {name:8} {timings[name][-1]:6.2f}s  cpu {cpu[name][-1]:6.2f}s ({split})",
                    file=sys.stderr,
                    flush=True,
                )
                for line in lines:
                    print("    " + line, file=sys.stderr)

        timed("initial", 1, data / "base.parquet")
        if {"parquet", "bucket", "json"} & set(chosen):
            timed("parquet", 2, data / "batch.parquet")
        if {"bucket", "json"} & set(chosen):
            if not small_path.exists():
                from pyspark.sql import functions as F

                keys = (
                    lake.rows(table)
                    .select("order_id")
                    .filter(F.pmod(F.xxhash64("order_id"), F.lit(SPEC["options"]["bucket.num"])) == 0)
                    .limit(args.small)
                    .toPandas()["order_id"]
                    .to_numpy()
                )
                pq.write_table(
                    make_records(np.full(len(keys), UPDATE, np.int8), keys, np.random.default_rng(7)),
                    small_path,
                )
            timed("bucket", 3, small_path)
        if "json" in chosen:
            timed("json", 4, data / "batch4.jsonl")

    report = {
        s: {
            "min": round(min(v), 3),
            "median": round(statistics.median(v), 3),
            "all": [round(x, 3) for x in v],
            "cpu_min": round(min(cpu[s]), 3),
            "cpu_median": round(statistics.median(cpu[s]), 3),
        }
        for s, v in timings.items()
        if v
    }
    print(f"load average at the end {os.getloadavg()}")
    for name, value in report.items():
        print(
            f"{name:8} min {value['min']:6.2f}s  median {value['median']:6.2f}s  cpu min {value['cpu_min']:6.2f}s  "
            f"median {value['cpu_median']:6.2f}s  {value['all']}"
        )
    if "parquet" in report:
        for name in ("bucket", "json"):
            if name in report:
                print(f"{name}/parquet (median) {report[name]['median'] / report['parquet']['median']:.3f}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    shutil.rmtree(work / "lake", ignore_errors=True)
    if args.data is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
