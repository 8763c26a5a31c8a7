"""A full compaction of a table larger than the driver's memory, in Spark tasks, with ``spark.driver.memory=512m``.

    flock -x /tmp/changelake-cpu.lock .venv/bin/python benchmarks/bench_compact_scale.py [--gb 3.2] [--buckets 32]

What it builds (in a process of its own, before Spark starts, so the driver's peak below is the compaction's):
a table of one partition holding ``--gb`` GB of Parquet in bucket files, a position-delete file removing
every 20th row, and a merge-on-read delta file of new keys, so a full compaction has everything to fold. The
files are written directly with pyarrow through changelake's own writer (``buckets.write_file``: the table's
codec, field ids, every key in the bucket Spark's xxhash64 gives it, sorted by key) and committed through
its storage layer (``Storage.commit_files``): applying 3 GB as batches would take most of an hour on two
cores and measure the apply, which ``make bench`` does. A first small batch goes through the apply, so the
table has a state the compaction must carry.

What it measures: ``changelake maintain --full`` without expiry (``ChangeLake.maintain``), on
``spark.master=local[2]`` with ``spark.driver.memory=512m``; ``CHANGELAKE_SPARK_COMPACT_BYTES`` left at its
default, so the size decides. Wall time, rows and bytes read and written, rows/s and MB/s, the peak RSS of
the driver's Python process, of its JVM and of the Python workers (benchmarks/bench_memory.py), the JVM's
maximum heap (what 512m gave it). Then it checks the result from the metadata (one file per bucket, rows =
loaded - deleted + delta) and that one bucket's file is sorted by key, writes
``benchmarks/results/compact_scale.json`` and removes the table (``--keep`` keeps it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "benchmarks" / "results" / "compact_scale.json"
sys.path.insert(0, str(ROOT / "benchmarks"))

TABLE = "bench.big"
SPEC = {
    "name": TABLE,
    "columns": [
        {"name": "k", "type": "BIGINT"},
        {"name": "v", "type": "STRING"},
        {"name": "n", "type": "BIGINT"},
        {"name": "x", "type": "DOUBLE"},
    ],
    "primary_key": ["k"],
    "options": {"write-only": "true"},  # no maintenance after the first batch: the benchmark runs it
}
CHUNK_ROWS = 4_000_000
VALUE_CHARS = 80
DELETE_EVERY = 20
DELTA_ROWS = 1_000_000
FIRST_BATCH = 1_000


def _lake(home: Path, **overrides):
    from changelake import ChangeLake

    return ChangeLake(home=home, tables_dir=home / "tables", **overrides)


def _rows(start: int, count: int, rng):
    """``count`` rows of keys ``start..``: random letters (zstd keeps about 60% of them), random numbers."""
    import numpy as np
    import pyarrow as pa

    letters = rng.integers(97, 123, size=count * VALUE_CHARS, dtype=np.uint8)
    offsets = np.arange(0, (count + 1) * VALUE_CHARS, VALUE_CHARS, dtype=np.int32)
    values = pa.StringArray.from_buffers(count, pa.py_buffer(offsets), pa.py_buffer(letters))
    return pa.table(
        {
            "k": pa.array(np.arange(start, start + count, dtype=np.int64)),
            "v": values,
            "n": pa.array(rng.integers(0, 1 << 62, size=count, dtype=np.int64)),
            "x": pa.array(rng.random(count)),
        }
    )


def generate(home: Path, gb: float, buckets: int) -> dict:
    """Create the table, apply a first small batch, then write and commit the bucket files, the delete file
    and the delta file (see the module's docstring). What was loaded."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from changelake.bucketing.columns import bucket_ids
    from changelake.engine import buckets as bk
    from changelake.engine.compact import rewrite_context
    from changelake.storage.files import delete_stats, write_position_deletes
    from changelake.storage.taskio import TaskIO

    lake = _lake(home, progress=lambda _m: None)
    spec = lake.create_table({**SPEC, "options": {**SPEC["options"], "bucket.num": str(buckets)}})
    lake.apply(
        TABLE,
        [{"op": "+I", "data": {"k": -i, "v": "first", "n": i, "x": 0.5}} for i in range(1, FIRST_BATCH + 1)],
    )
    storage = lake.storage
    table = storage.pk_table(spec)
    ctx = rewrite_context(storage, spec, table)
    io = TaskIO(ctx.io_properties)
    out_dir = f"{table.location()}/data/bench-load-{uuid.uuid4().hex[:8]}"
    rng = np.random.default_rng(44)
    target = int(gb * 1e9)
    written_bytes = 0
    base_rows = 0
    paths: list[str] = []
    deleted: list[tuple[str, np.ndarray]] = []
    started = time.monotonic()
    while written_bytes < target:
        rows = _rows(base_rows, CHUNK_ROWS, rng)
        ids = bucket_ids(spec, rows)
        rows = rows.append_column("_bucket", pa.array(ids, pa.int32()))
        rows = rows.take(pc.sort_indices(rows, sort_keys=[("_bucket", "ascending"), ("k", "ascending")]))
        bounds = np.searchsorted(rows.column("_bucket").to_numpy(), np.arange(buckets + 1))
        for b in range(buckets):
            part = rows.slice(int(bounds[b]), int(bounds[b + 1] - bounds[b]))
            if not part.num_rows:
                continue
            path = f"{out_dir}/bucket-{b:04d}-{uuid.uuid4().hex}-000.parquet"
            bk.write_file(io, path, part, bk.data_dictionary(spec), ctx)
            written_bytes += io.size(path)
            paths.append(path)
            deleted.append((path, np.arange(0, part.num_rows, DELETE_EVERY, dtype=np.int64)))
        base_rows += rows.num_rows
        print(f"  generated {base_rows:,} rows, {written_bytes / 1e9:.2f} GB", flush=True)
    delta = _rows(base_rows, DELTA_ROWS, rng)
    delta = delta.append_column("_bucket", pa.array(bucket_ids(spec, delta), pa.int32()))
    delta = delta.take(pc.sort_indices(delta, sort_keys=[("_bucket", "ascending"), ("k", "ascending")]))
    delta_path = f"{out_dir}/delta-{uuid.uuid4().hex}.parquet"
    bk.write_file(io, delta_path, delta, bk.data_dictionary(spec), ctx, bk.SHARED_ROW_GROUP_ROWS)
    written_bytes += io.size(delta_path)
    deleted.sort()
    positions = bk.position_deletes([p for p, _ in deleted], [d for _, d in deleted])
    delete_path = f"{out_dir}/deletes-{uuid.uuid4().hex}.parquet"
    with io.open_output(delete_path) as sink:
        write_position_deletes(sink, positions, ctx.delta_compression)
    added = storage.to_data_files(table, sorted(paths) + [delta_path])
    partition = added[0].partition
    described = storage.to_delete_file(
        table, delete_path, delete_stats(positions), io.size(delete_path), partition
    )
    props = {**storage.state_properties(table)}
    storage.commit_files(table, added, [described], set(), props)
    return {
        "base_rows": base_rows,
        "base_files": len(paths),
        "deleted_rows": positions.num_rows,
        "delta_rows": DELTA_ROWS,
        "first_batch_rows": FIRST_BATCH,
        "loaded_bytes": written_bytes + io.size(delete_path),
        "generate_s": round(time.monotonic() - started, 1),
    }


def compact(home: Path, loaded: dict) -> dict:
    """Start Spark (512m driver), run the full compaction, measure it and check the result."""
    import pyarrow.parquet as pq
    from bench_memory import PhaseMemory, child_jvm

    from changelake.config import tuned
    from changelake.storage.taskio import TaskIO

    lines: list[str] = []

    def progress(message: str) -> None:
        lines.append(message)
        print("  " + message, flush=True)

    conf = {"spark.driver.memory": "512m"}
    lake = _lake(home, progress=progress, spark_master="local[2]", spark_conf=conf)
    storage = lake.storage
    spec = lake.spec(TABLE)
    before = storage.table_files(storage.pk_table(spec))
    read_bytes = sum(f.size for f in before)
    started = time.monotonic()
    spark = lake.spark
    jvm_start_s = time.monotonic() - started
    max_heap_mb = spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory() / 2**20
    memory = PhaseMemory(child_jvm()).start()
    started = time.monotonic()
    reports = lake.maintain(TABLE, full=True, expiry=False)
    seconds = time.monotonic() - started
    peaks = memory.stop()
    done = next(c for c in reports[0].compacted if c.table == spec.full_name)
    table = storage.pk_table(spec)
    after = storage.table_files(table)
    rows = sum(f.record_count for f in after)
    expected = (
        loaded["base_rows"] - loaded["deleted_rows"] + loaded["delta_rows"] + loaded["first_batch_rows"]
    )
    single = all(f.single_bucket and not f.is_delete for f in after)
    one = max(after, key=lambda f: f.size)
    io = TaskIO(dict(table.io.properties))
    with io.open_input(one.path) as stream:
        keys = pq.read_table(stream, columns=["k"]).column("k").to_numpy()
    ordered = bool((keys[1:] > keys[:-1]).all())
    written_bytes = sum(f.size for f in after)
    return {
        "spark_master": "local[2]",
        "spark_conf": conf,
        "spark_compact_bytes": tuned("spark_compact_bytes"),
        "jvm_max_heap_mb": round(max_heap_mb),
        "jvm_start_s": round(jvm_start_s, 1),
        "compact_s": round(seconds, 1),
        "files_before": len(before),
        "files_after": len(after),
        "bytes_read": read_bytes,
        "bytes_written": written_bytes,
        "rows_written": done.rows_written,
        "rows_per_s": round(done.rows_written / seconds),
        "read_mb_per_s": round(read_bytes / 2**20 / seconds, 1),
        "memory": peaks,
        "check": {
            "rows": rows,
            "expected_rows": expected,
            "one_file_per_bucket": single and len(after) == spec.bucket_num,
            "largest_file_sorted_by_key": ordered,
        },
        "in_spark": any("in Spark tasks" in m for m in lines),
        "progress": [m for m in lines if "compact" in m],
    }


def _load(home: Path, args: argparse.Namespace) -> dict:
    """The load, in a child process (its memory is not the driver's)."""
    print(f"loading {args.gb} GB into {home}", flush=True)
    child = subprocess.run(
        [
            sys.executable,
            __file__,
            "--gb",
            str(args.gb),
            "--buckets",
            str(args.buckets),
            "--generate-only",
            str(home),
        ],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    out = child.stdout.strip().splitlines()
    print("\n".join(out[:-1]), flush=True)
    loaded = json.loads(out[-1])
    print(f"loaded: {loaded}", flush=True)
    return loaded


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gb", type=float, default=3.2, help="GB of bucket files to load (default 3.2)")
    ap.add_argument("--buckets", type=int, default=32)
    ap.add_argument(
        "--work", type=Path, default=None, help="where the table goes (default: a temp dir in .cache)"
    )
    ap.add_argument("--keep", action="store_true", help="keep the table afterwards")
    ap.add_argument(
        "--load-only", action="store_true", help="load the table into --work and stop (implies --keep)"
    )
    ap.add_argument(
        "--reuse", action="store_true", help="compact the table an earlier --load-only left in --work"
    )
    ap.add_argument("--generate-only", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.generate_only is not None:  # the child process of the load
        print(json.dumps(generate(args.generate_only, args.gb, args.buckets)))
        return 0
    (ROOT / ".cache").mkdir(exist_ok=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-compact-", dir=ROOT / ".cache"))
    home = work / "lake"
    (home / "tables").mkdir(parents=True, exist_ok=True)
    try:
        saved = work / "loaded.json"
        if args.reuse:
            loaded = json.loads(saved.read_text())
        else:
            loaded = _load(home, args)
            saved.write_text(json.dumps(loaded))
        if args.load_only:
            return 0
        figures = compact(home, loaded)
        result = {
            "command": os.environ.get("BENCH_COMMAND")
            or " ".join(["benchmarks/bench_compact_scale.py", *(argv if argv is not None else sys.argv[1:])]),
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load": list(os.getloadavg()),
            "cores": os.cpu_count(),
            "buckets": args.buckets,
            "loaded": loaded,
            **figures,
        }
        RESULT.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps({k: v for k, v in result.items() if k != "progress"}, indent=2))
        check = figures["check"]
        ok = (
            check["rows"] == check["expected_rows"]
            and check["one_file_per_bucket"]
            and check["largest_file_sorted_by_key"]
        )
        return 0 if ok and figures["in_spark"] else 1
    finally:
        if not (args.keep or args.load_only):
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
