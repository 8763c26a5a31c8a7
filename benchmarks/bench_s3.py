"""Tables on the local S3 endpoint beside the same tables on local disk, in one run (issue 44).

    .venv/bin/python benchmarks/bench_s3.py                       # 5M rows, the 500k batch, 1,000-record batches
    .venv/bin/python benchmarks/bench_s3.py --rows 200000 --batch 20000 --reps 1   # a quick check

The bench's table and batch (bench_data.py, bench_apply.py's spec: 7 columns, 32 buckets, random keys) go to two
lakes with the default catalog (SQLite): one with its warehouse on local disk and its input in local files, one
with its warehouse (``s3://changelake/bench/warehouse``) and its input objects on the project's S3 endpoint
(infra/s3.sh, started here with its request log on). Each lake loads the table as batch 1, then takes the
500k-record batch (Spark, local[2], as in ``make bench``), then ``--small-batches`` 1,000-record batches (in this
process). The 500k batch runs ``--reps`` times (5), each on its own copy of the table, local and S3 in turn; the
medians are compared. Five, as ``make bench`` takes: the first run on each side pays a warm-up (on S3 the
endpoint's JIT compiler, ~0.5 s of its CPU), and the median of the two runs this took before was the mean of
a cold run and a warm one. For every S3 batch the endpoint's requests are counted by kind (GET, LIST, HEAD, PUT,
multipart POST, a DeleteObjects POST, DELETE) from its log. Then, in fresh processes, ``changelake lookup`` and ``scan --limit 10``
on the S3 table, cold (no JVM; each its own process), ``--cold-runs`` times each.

Writes benchmarks/results/s3.json and prints the figures with the targets:
  the 500k batch on S3 <= 1.3x local disk; a 1,000-record batch <= 1.5x; lookup and scan --limit 10 <= 0.5 s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from bench_apply import SPEC
from bench_data import apply_liveness, change_batch, settle

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TABLE = SPEC["name"]
TARGETS = [
    ("500k batch on S3 <= 1.3x local disk", "batch_s3_vs_local", 1.3),
    ("1,000-record batch on S3 <= 1.5x local disk", "small_s3_vs_local", 1.5),
    ("cold lookup on S3 <= 0.5 s", "lookup_cold_s", 0.5),
    ("cold scan --limit 10 on S3 <= 0.5 s", "scan_cold_s", 0.5),
]
REQUEST = re.compile(r"\{(GET|PUT|POST|HEAD|DELETE)@[0-9a-f]+ (\S+) HTTP")


def requests_since(log: Path, offset: int) -> tuple[Counter, int]:
    """The S3 requests logged after byte ``offset`` of the endpoint's log, by kind; and the log's new end."""
    with open(log, "rb") as fh:
        fh.seek(offset)
        text = fh.read().decode("utf-8", "replace")
        end = fh.tell()
    kinds: Counter = Counter()
    for method, url in REQUEST.findall(text):
        if method == "GET" and "list-type=" in url:
            kinds["LIST"] += 1
        elif method == "POST" and "?delete" in url:
            kinds["POST (delete objects)"] += 1
        elif method == "POST":
            kinds["POST (multipart)"] += 1
        else:
            kinds[method] += 1
    return kinds, end


def timed(fn) -> tuple[float, Any]:
    settle()
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def start_s3(base: Path) -> dict[str, str]:
    env = {**os.environ, "S3_DIR": str(base), "S3_REQUEST_LOG": "1", "S3_HEAP": "1g"}
    subprocess.run([str(REPO / "infra" / "s3.sh"), "start"], env=env, check=True, stdout=subprocess.DEVNULL)
    out = {}
    for line in (base / "s3.env").read_text().splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        out[name] = value
    return out


def small_batches(data: Path, rows: int, count: int, size: int) -> list[Path]:
    """``count`` batches of ``size`` records (70/20/10) over the keys alive after the big batch."""
    rng = np.random.default_rng(7)
    alive = apply_liveness(np.ones(rows, bool), pq.read_table(data / "batch.parquet"))
    next_key = len(alive)
    out = []
    for i in range(count):
        batch = change_batch(np.flatnonzero(alive), next_key, size, rng)
        alive = apply_liveness(alive, batch)
        next_key = len(alive)
        path = data / f"small-{i}.parquet"
        pq.write_table(batch, path)
        out.append(path)
    return out


def cold(env: dict[str, str], args: list[str], runs: int) -> list[float]:
    """Wall seconds of ``changelake ARGS`` in fresh processes."""
    out = []
    for _ in range(runs):
        settle()
        start = time.perf_counter()
        done = subprocess.run(
            [str(REPO / ".venv" / "bin" / "changelake"), *args], env=env, capture_output=True, text=True
        )
        out.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"changelake {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--batch", type=int, default=500_000)
    ap.add_argument("--small", type=int, default=1_000)
    ap.add_argument("--small-batches", type=int, default=7)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cold-runs", type=int, default=7)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "s3.json")
    args = ap.parse_args()
    for name in [
        v for vs in __import__("changelake.objectstore").objectstore.OPTION_VARIABLES.values() for v in vs
    ]:
        os.environ.pop(name, None)  # the lakes get their store explicitly
    from changelake import ChangeLake, objectstore

    work = Path(tempfile.mkdtemp(prefix="changelake-bench-s3-"))
    data = work / "data"
    subprocess.run(
        [sys.executable, str(HERE / "bench_data.py"), "--dir", str(data), "--rows", str(args.rows)]
        + ["--batch", str(args.batch)],
        check=True,
    )
    smalls = small_batches(data, args.rows, args.small_batches, args.small)
    s3_env = start_s3(work / "s3")
    log = work / "s3" / "server.log"
    options = {
        k: s3_env[k] for k in ("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    }
    store = objectstore.Store(options)
    prefix = "s3://changelake/bench"
    try:
        inputs = {}
        for path in [data / "base.parquet", data / "batch.parquet", *smalls]:
            store.put(f"{prefix}/input/{path.name}", path.read_bytes())
            inputs[path.name] = f"{prefix}/input/{path.name}"
        lakes = {
            "local": ChangeLake(
                home=work / "local", tables_dir=work / "local" / "tables", progress=lambda m: None
            ),
            "s3": ChangeLake(
                home=work / "s3home",
                tables_dir=work / "s3home" / "tables",
                warehouse=f"{prefix}/warehouse",
                storage_options=options,
                progress=lambda m: None,
            ),
        }
        lakes["s3"]._spark = lakes["local"].spark  # one JVM for both (the session is not tied to a warehouse)

        def source(kind: str, name: str) -> Any:
            return inputs[name] if kind == "s3" else data / name

        result: dict[str, Any] = {"rows": args.rows, "batch": args.batch, "small": args.small, "runs": []}
        offset = requests_since(log, 0)[1]
        for rep in range(args.reps):
            table = TABLE if rep == 0 else f"{TABLE}_run{rep + 1}"
            for kind in ("local", "s3") if rep % 2 == 0 else ("s3", "local"):
                lake = lakes[kind]
                lake.create_table({**SPEC, "name": table})
                load_s, _ = timed(
                    lambda lake=lake, table=table, kind=kind: lake.apply(
                        table, file=source(kind, "base.parquet"), batch_id=1
                    )
                )
                offset = requests_since(log, offset)[1]
                batch_s, _ = timed(
                    lambda lake=lake, table=table, kind=kind: lake.apply(
                        table, file=source(kind, "batch.parquet"), batch_id=2
                    )
                )
                kinds, offset = requests_since(log, offset)
                run = {"rep": rep + 1, "where": kind, "load_s": load_s, "batch_s": batch_s}
                if kind == "s3":
                    run["batch_requests"] = dict(kinds)
                result["runs"].append(run)
                print(
                    f"  {kind:5} rep {rep + 1}: load {load_s:.2f} s, 500k batch {batch_s:.2f} s {dict(kinds) if kind == 's3' else ''}",
                    flush=True,
                )
        small_runs: dict[str, list] = {"local": [], "s3": []}
        for i, path in enumerate(smalls):
            for kind in ("local", "s3") if i % 2 == 0 else ("s3", "local"):
                offset = requests_since(log, offset)[1]
                seconds, _ = timed(
                    lambda kind=kind, path=path, i=i: lakes[kind].apply(
                        TABLE, file=source(kind, path.name), batch_id=3 + i
                    )
                )
                kinds, offset = requests_since(log, offset)
                small_runs[kind].append(
                    {"batch_id": 3 + i, "s": seconds, **({"requests": dict(kinds)} if kind == "s3" else {})}
                )
                print(
                    f"  {kind:5} {args.small}-record batch {3 + i}: {seconds * 1000:.0f} ms {dict(kinds) if kind == 's3' else ''}",
                    flush=True,
                )
        result["small_runs"] = small_runs
        # Reads without a JVM, cold: each a fresh `changelake` process on the S3 table.
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHANGELAKE_")}
        env.update(s3_env)
        env.update(
            CHANGELAKE_HOME=str(work / "s3home"),
            CHANGELAKE_TABLES=str(work / "s3home" / "tables"),
            CHANGELAKE_WAREHOUSE=f"{prefix}/warehouse",
        )
        offset = requests_since(log, offset)[1]
        lookups = cold(env, ["lookup", TABLE, "order_id=12345"], args.cold_runs)
        lookup_requests, offset = requests_since(log, offset)
        scans = cold(env, ["scan", TABLE, "--limit", "10"], args.cold_runs)
        scan_requests, offset = requests_since(log, offset)
        result["lookup_cold"] = {
            "runs_s": lookups,
            "requests_per_run": {k: v / args.cold_runs for k, v in lookup_requests.items()},
        }
        result["scan_cold"] = {
            "runs_s": scans,
            "requests_per_run": {k: v / args.cold_runs for k, v in scan_requests.items()},
        }
        # The figures the targets compare.
        batch = {k: statistics.median(r["batch_s"] for r in result["runs"] if r["where"] == k) for k in lakes}
        small = {
            k: statistics.median(r["s"] for r in small_runs[k][1:]) for k in lakes
        }  # the first reads the table in
        result["figures"] = {
            "batch_local_s": batch["local"],
            "batch_s3_s": batch["s3"],
            "batch_s3_vs_local": batch["s3"] / batch["local"],
            "small_local_s": small["local"],
            "small_s3_s": small["s3"],
            "small_s3_vs_local": small["s3"] / small["local"],
            "lookup_cold_s": statistics.median(lookups),
            "scan_cold_s": statistics.median(scans),
            "table_bytes_s3": sum(
                i.size for i in store.list(f"{prefix}/warehouse/bench/orders", recursive=True)
            ),
        }
        result["when"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        result["command"] = ".venv/bin/python benchmarks/bench_s3.py " + " ".join(sys.argv[1:])
        result["load"] = os.getloadavg()
    finally:
        subprocess.run(
            [str(REPO / "infra" / "s3.sh"), "stop"],
            env={**os.environ, "S3_DIR": str(work / "s3")},
            check=False,
            stdout=subprocess.DEVNULL,
        )
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print()
    failed = 0
    for label, key, limit in TARGETS:
        value = result["figures"][key]
        ok = value <= limit
        failed += not ok
        print(f"{'ok    ' if ok else 'MISSED'} {label}: {value:.3f}")
    for name, value in result["figures"].items():
        print(f"  {name}: {value:.3f}" if isinstance(value, float) else f"  {name}: {value:,}")
    print(f"requests per 1,000-record S3 batch: {small_runs['s3'][-1].get('requests')}")
    print(
        f"requests per 500k S3 batch: {[r.get('batch_requests') for r in result['runs'] if r['where'] == 's3']}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
