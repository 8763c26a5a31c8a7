"""Small batches into large tables: merge-on-read beside delta-rs MERGE + change data feed, in one run.

    make bench-small                                     # 1M and 5M rows; batches of 100, 1,000, 10,000
    make bench-small SMALL_ARGS=--huge                   # ... and a 20M-row table
    .venv/bin/python benchmarks/bench_small.py --sizes 200000 --reps 2 --scan-batches 10   # a quick check
    make bench-small SMALL_ARGS=--s3                     # the same on the local S3 endpoint

For each table size the same data goes to both (bench_data.py's table and batches, bench_apply.py's spec:
7 columns, 32 buckets, keys random over the whole table):

* delta-rs: the table written with change data feed on, then each batch MERGEd (the peer bench_apply.py uses),
  in its own process started before any JVM, each MERGE timed;
* changelake: the table loaded as batch 1 (Spark, local[2]), then the same batches one after another through
  the Python API in this process, with the default settings (merge-on-read, maintenance after each batch);
  each apply timed wall-clock, maintenance included.

Each batch size runs ``--reps`` batches in a row (70% updates, 20% inserts, 10% deletes, every key once); the
median is compared. changelake's first batch after the load reads the table's files into the applying
process (later ones take the rows it keeps): it is timed and reported on its own, not in the medians.
Then, on the largest table only (``write-only: true`` from here: nothing compacts but the scenario): a full
compaction; ``--scan-batches`` 1,000-record batches; ``changelake maintain --full``. The full scan without a
JVM of the three snapshots (compacted, uncompacted, compacted again) is timed in a fresh process, the three
read in turn seven times (medians); 20 random lookups in each state. And on the smallest table, the same
1,000-record batches into a copy-on-write twin: its rows and changelog must equal the merge-on-read table's.
Both tables must end with delta-rs's rows (count and column sums). Writes benchmarks/results/small.json
(docs/benchmarks.md is rendered from it) and prints the table with the targets of issue 31.

``--s3`` (issue 44): the same batches and checks on the project's local S3 endpoint, which the run starts and
stops (s3_lake.py). changelake's warehouse is ``s3://changelake/small/lake-<rows>/warehouse`` and it applies the
table and the batches from objects landed under ``s3://changelake/small/data-<rows>/``; delta-rs writes and
MERGEs its table at ``s3://changelake/small/delta-<rows>`` on the same endpoint (its keys passed in the
environment of its process, never on a command line), reading each batch from the local file as it does on
disk (its read of the batch is not timed). The requests of every changelake apply are counted from the
endpoint's log. Writes benchmarks/results/small-s3.json. ``--s3 --catalog rest``: changelake's tables behind
Iceberg's REST catalog (infra/rest_catalog.sh, a fresh one per table size) on that endpoint; writes
small-s3-rest.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from bench_apply import SPEC
from bench_data import (
    FINGERPRINT_COLUMNS,
    apply_liveness,
    change_batch,
    fingerprint,
    make_records,
    settle,
)
from bench_report import finish, print_checks
from s3_lake import BUCKET, Endpoint, request_summary

HERE = Path(__file__).resolve().parent
TABLE = SPEC["name"]


# --- data ---------------------------------------------------------------------------------------------------
def generate(
    out: Path, rows: int, sizes: list[int], reps: int, scan_batches: int, seed: int = 7
) -> list[dict]:
    """The table and its batches: ``reps + 1`` batches per size (the first one of all is changelake's cold
    batch), then ``scan_batches`` of 1,000 records; their paths and sizes, in the order they apply."""
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    pq.write_table(make_records(np.ones(rows, np.int8), np.arange(rows), rng), out / "base.parquet")
    alive = np.ones(rows, bool)
    next_key = rows
    plan = [("cold", sizes[0])] + [(f"{s}", s) for s in sizes for _ in range(reps)]
    plan += [("scan", 1000)] * scan_batches
    batches = []
    for i, (group, size) in enumerate(plan, start=2):
        batch = change_batch(np.flatnonzero(alive), next_key, size, rng)
        next_key += int(size * 0.2)
        alive = apply_liveness(alive, batch)
        path = out / f"batch-{i:04d}.parquet"
        pq.write_table(batch, path)
        batches.append({"batch_id": i, "group": group, "records": size, "path": str(path)})
    return batches


# --- delta-rs, in its own process ---------------------------------------------------------------------------
DELTA = r"""
import json, sys, time, os
import pyarrow.parquet as pq
sys.path.insert(0, sys.argv[3])
from bench_data import COLUMNS, FINGERPRINT_COLUMNS, fingerprint, settle
from deltalake import DeltaTable, write_deltalake

data, path = sys.argv[1], sys.argv[2]
batches = json.loads(open(os.path.join(data, "batches.json")).read())
store = json.loads(os.environ.pop("DELTA_STORAGE_OPTIONS", "null"))  # None: a local path
settle()
start = time.perf_counter()
write_deltalake(path, pq.read_table(os.path.join(data, "base.parquet"), columns=COLUMNS),
                configuration={"delta.enableChangeDataFeed": "true"}, storage_options=store)
out = {"write_s": time.perf_counter() - start, "merges": []}
values = {c: f"s.{c}" for c in COLUMNS}
for b in batches:
    if b["group"] == "scan":
        continue
    source = pq.read_table(b["path"])
    settle()
    start = time.perf_counter()
    (DeltaTable(path, storage_options=store).merge(source, predicate="t.order_id = s.order_id", source_alias="s", target_alias="t")
        .when_matched_update(updates=values, predicate="s.op != '-D'")
        .when_matched_delete(predicate="s.op = '-D'")
        .when_not_matched_insert(updates=values, predicate="s.op != '-D'")
        .execute())
    out["merges"].append({"batch_id": b["batch_id"], "group": b["group"], "s": time.perf_counter() - start})
out["fingerprint"] = fingerprint(DeltaTable(path, storage_options=store).to_pyarrow_dataset().to_table(columns=FINGERPRINT_COLUMNS))
print(json.dumps(out))
"""


def run_delta(data: Path, table: str, store: dict[str, str] | None = None) -> dict[str, Any]:
    """delta-rs on the table at ``table`` (a local path, or an ``s3://`` location reached with ``store``: the
    storage options, handed over in the environment so that no key is on a command line)."""
    env = dict(os.environ)
    if store is not None:
        # object_store talks plain http to the local endpoint only when allowed; one writer, so no lock provider
        env["DELTA_STORAGE_OPTIONS"] = json.dumps(
            {**store, "AWS_ALLOW_HTTP": "true", "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
        )
    proc = subprocess.run(
        [sys.executable, "-c", DELTA, str(data), table, str(HERE)],
        capture_output=True,
        text=True,
        timeout=3600,
        env=env,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"delta-rs run failed: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- changelake ---------------------------------------------------------------------------------------------
def timed(fn) -> tuple[float, Any]:
    settle()
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def median_of(fn, n: int) -> float:
    return statistics.median(timed(fn)[0] for _ in range(n))


def run_changelake(
    lake,
    base: Any,
    batches: list[dict],
    largest: bool,
    smallest: bool,
    endpoint: Endpoint | None = None,
    catalog: dict[str, str] | None = None,
) -> dict[str, Any]:
    """changelake's side: the table loaded from ``base``, then each batch from its ``source`` (a local file, or
    its landed object with ``endpoint``, whose requests each apply are counted; ``catalog``: the REST catalog's
    variables the lake was made with, for the scan's fresh process)."""
    from changelake.storage.fastread import FastReader

    def requests() -> dict[str, int]:
        return endpoint.requests() if endpoint is not None else {}

    lake.create_table(SPEC)
    load_s, _ = timed(lambda: lake.apply(TABLE, file=base, batch_id=1))
    out: dict[str, Any] = {"load_s": load_s, "applies": []}
    twin = None
    if smallest:  # the copy-on-write twin: same batches, its rows and changelog must be the same
        twin = f"{TABLE}_cow"
        lake.create_table(
            {**SPEC, "name": twin, "options": {**SPEC["options"], "write.merge.mode": "copy-on-write"}}
        )
        lake.apply(twin, file=base, batch_id=1)
    reader = FastReader(lake.settings)
    for b in batches:
        if b["group"] == "scan":
            break
        requests()
        seconds, result = timed(lambda b=b: lake.apply(TABLE, file=b["source"], batch_id=b["batch_id"]))
        applied = {"batch_id": b["batch_id"], "group": b["group"], "s": seconds}
        if endpoint is not None:
            applied["requests"] = requests()
        out["applies"].append(applied)
        print(
            f"  batch {b['batch_id']} ({b['records']:,} records): {seconds * 1000:.0f} ms "
            + str(applied.get("requests", "")),
            flush=True,
        )
        if twin is not None:
            lake.apply(twin, file=b["source"], batch_id=b["batch_id"])
    if twin is not None:
        rows = [reader.rows_arrow(t).sort_by("order_id") for t in (TABLE, twin)]
        logs = [reader.changelog_arrow(t).drop_columns(["_commit_timestamp"]) for t in (TABLE, twin)]
        out["modes_identical"] = {"rows": rows[0].equals(rows[1]), "changelog": logs[0].equals(logs[1])}
    out["fingerprint"] = fingerprint(
        reader.rows_arrow(TABLE).select(FINGERPRINT_COLUMNS)
    )  # delta-rs's batches
    if largest:
        out["scan"] = scan_scenario(lake, batches, reader, endpoint, catalog)
    return out


SCANS = r"""
import json, statistics, sys, time
from pathlib import Path
from changelake.config import load_settings
from changelake.storage.fastread import FastReader, view_schema
home, table, snapshots = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
reader = FastReader(load_settings(home=home, tables_dir=home / "tables"))  # an S3 warehouse: from the environment
spec, source = reader._pk(table)
files = {name: reader._files(source, snapshot) for name, snapshot in snapshots.items()}
scan = lambda name: reader._read(source, files[name], view_schema(spec)).num_rows
for name in snapshots:
    scan(name)  # page cache and first touch
times = {name: [] for name in snapshots}
for _ in range(7):  # interleaved: a minute's noise hits every state alike
    for name in snapshots:
        start = time.perf_counter()
        scan(name)
        times[name].append(time.perf_counter() - start)
print(json.dumps({name: statistics.median(t) for name, t in times.items()}))
"""


def scan_scenario(
    lake, batches: list[dict], reader, endpoint: Endpoint | None = None, catalog: dict[str, str] | None = None
) -> dict[str, Any]:
    """The full scan without a JVM, of the table compacted, after the uncompacted 1,000-record batches, and
    compacted again: three snapshots of one table, read interleaved in a fresh process (a reader, not the
    applying process with its kept rows). Lookups while the batches are uncompacted and after."""
    rng = np.random.default_rng(3)
    keys = [int(k) for k in rng.integers(0, 1_000_000, 20)]

    def lookups() -> float:
        times = []
        for k in keys:
            start = time.perf_counter()
            reader.lookup(TABLE, {"order_id": k})
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    def snapshot() -> int:
        return lake.storage.pk_table(lake.spec(TABLE)).current_snapshot().snapshot_id

    out: dict[str, Any] = {}
    lake.create_table(
        {**SPEC, "options": {**SPEC["options"], "write-only": "true"}}
    )  # no compaction, no expiry
    lake.maintain(TABLE, full=True, expiry=False)
    snapshots = {"compacted": snapshot()}
    out["compacted_lookup_s"] = lookups()
    scan_batches = [b for b in batches if b["group"] == "scan"]
    scan_requests = []
    for b in scan_batches:
        if endpoint is not None:
            endpoint.requests()
        lake.apply(TABLE, file=b["source"], batch_id=b["batch_id"])
        if endpoint is not None:
            scan_requests.append(endpoint.requests())
    if endpoint is not None:
        out["uncompacted_batch_requests"] = request_summary(scan_requests)
    snapshots["uncompacted"] = snapshot()
    files = lake.storage.table_files(lake.storage.pk_table(lake.spec(TABLE)))
    out["uncompacted_batches"] = len(scan_batches)
    out["uncompacted_files"] = {
        "data": sum(1 for f in files if not f.is_delete),
        "delete": sum(1 for f in files if f.is_delete),
    }
    out["uncompacted_lookup_s"] = lookups()
    out["compaction_s"] = timed(lambda: lake.maintain(TABLE, full=True, expiry=False))[0]
    snapshots["recompacted"] = snapshot()
    out["recompacted_lookup_s"] = lookups()
    settle()
    proc = subprocess.run(
        [sys.executable, "-c", SCANS, str(lake.settings.home), TABLE, json.dumps(snapshots)],
        capture_output=True,
        text=True,
        timeout=600,
        env=None
        if endpoint is None
        else endpoint.cli_env(lake.settings.home, lake.settings.warehouse, catalog),
    )
    if proc.returncode != 0:
        raise RuntimeError(f"scan timing failed: {proc.stderr[-3000:]}")
    scans = json.loads(proc.stdout.strip().splitlines()[-1])
    out.update({f"{name}_scan_s": seconds for name, seconds in scans.items()})
    lake.create_table(SPEC)
    return out


# --- the run ------------------------------------------------------------------------------------------------
def medians(runs: list[dict], group: str) -> float | None:
    times = [r["s"] for r in runs if r["group"] == group]
    return statistics.median(times) if times else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 5_000_000])
    p.add_argument("--huge", action="store_true", help="add a 20M-row table")
    p.add_argument("--batches", type=int, nargs="+", default=[100, 1000, 10_000])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--scan-batches", type=int, default=100)
    p.add_argument("--work", type=Path, help="scratch directory (default: a new temporary one)")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory")
    p.add_argument("--s3", action="store_true", help="both sides on the local S3 endpoint (started here)")
    p.add_argument(
        "--catalog",
        choices=["sqlite", "rest"],
        default="sqlite",
        help="rest (with --s3): changelake's tables behind Iceberg's REST catalog on the endpoint",
    )
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    if args.catalog == "rest" and not args.s3:
        p.error("--catalog rest keeps its tables on the S3 endpoint: add --s3")
    name = ("small-s3" if args.s3 else "small") + ("-rest" if args.catalog == "rest" else "")
    out = args.out or HERE / "results" / f"{name}.json"
    sizes = sorted(set(args.sizes + ([20_000_000] if args.huge else [])))
    work = args.work or Path(tempfile.mkdtemp(prefix="changelake-bench-small-"))
    os.environ.setdefault("CHANGELAKE_LOCAL_APPLY_RECORDS", "10000")
    endpoint = Endpoint(work / "s3") if args.s3 else None
    try:
        tables = run(args, sizes, work, endpoint)
    finally:
        if endpoint is not None:
            endpoint.stop()
    report = build_report(tables, sizes, args)
    return finish(report, out, print_report, work, args.keep, "scratch")


def run(args: argparse.Namespace, sizes: list[int], work: Path, endpoint: Endpoint | None) -> dict[str, Any]:
    """Both sides on every table size: delta-rs first (each in its own process), then changelake in this one;
    on local disk, or with ``endpoint`` both on the S3 endpoint (the inputs landed there first)."""
    tables: dict[str, Any] = {}
    plans: dict[int, list[dict]] = {}
    bases: dict[int, Any] = {}
    for rows in sizes:
        data = work / f"data-{rows}"
        print(f"generating {rows:,} rows and their batches", flush=True)
        plans[rows] = generate(
            data, rows, args.batches, args.reps, args.scan_batches if rows == sizes[-1] else 0
        )
        bases[rows] = data / "base.parquet"
        for b in plans[rows]:
            b["source"] = b["path"]
        if endpoint is not None:  # changelake applies landed objects: the same bytes, PUT before any clock
            prefix = f"s3://{BUCKET}/small/data-{rows}"
            bases[rows] = endpoint.land(f"{prefix}/base.parquet", data / "base.parquet")
            for b in plans[rows]:
                b["source"] = endpoint.land(f"{prefix}/{Path(b['path']).name}", Path(b["path"]))
        (data / "batches.json").write_text(json.dumps(plans[rows]))
        print(f"delta-rs on {rows:,} rows", flush=True)
        if endpoint is None:
            tables[str(rows)] = {"delta": run_delta(data, str(work / f"delta-{rows}" / "delta"))}
        else:
            endpoint.requests()
            delta = run_delta(data, f"s3://{BUCKET}/small/delta-{rows}", endpoint.options)
            delta["requests"] = endpoint.requests()  # the whole run: the write, the merges, the final read
            tables[str(rows)] = {"delta": delta}
    from changelake import ChangeLake

    for rows in sizes:
        home = work / f"lake-{rows}"
        (home / "tables").mkdir(parents=True, exist_ok=True)
        catalog = None
        if endpoint is None:
            lake = ChangeLake(home=home, tables_dir=home / "tables", progress=lambda m: None)
        else:
            warehouse = f"s3://{BUCKET}/small/lake-{rows}/warehouse"
            lake, catalog = endpoint.lake(home, warehouse, str(rows) if args.catalog == "rest" else None)
        print(f"changelake on {rows:,} rows", flush=True)
        tables[str(rows)]["changelake"] = run_changelake(
            lake,
            bases[rows],
            plans[rows],
            largest=rows == sizes[-1],
            smallest=rows == sizes[0],
            endpoint=endpoint,
            catalog=catalog,
        )
    return tables


def build_report(tables: dict, sizes: list[int], args) -> dict[str, Any]:
    rows_out = []
    for rows in sizes:
        t = tables[str(rows)]
        for size in args.batches:
            cl, dl = medians(t["changelake"]["applies"], str(size)), medians(t["delta"]["merges"], str(size))
            row = {"rows": rows, "records": size, "changelake_s": cl, "delta_s": dl, "ratio": cl / dl}
            counted = [
                a["requests"]
                for a in t["changelake"]["applies"]
                if a["group"] == str(size) and "requests" in a
            ]
            if counted:
                row["requests"] = request_summary(counted)
            rows_out.append(row)
    first = {r["rows"]: r for r in rows_out if r["records"] == 1000}
    small, large = sizes[0], sizes[-1]
    scan = tables[str(large)]["changelake"].get("scan", {})
    checks = [
        {
            "check": f"{r['records']:,} records into {r['rows']:,} rows: changelake <= delta-rs MERGE + CDF",
            "ok": r["ratio"] <= 1.0,
            "detail": f"{r['changelake_s']:.3f} s vs {r['delta_s']:.3f} s ({r['ratio']:.2f}x)",
        }
        for r in rows_out
    ]
    if 5_000_000 in first:
        checks.append(
            {
                "check": "1,000 records into 5M rows <= 0.25 s",
                "ok": first[5_000_000]["changelake_s"] <= 0.25,
                "detail": f"{first[5_000_000]['changelake_s']:.3f} s",
            }
        )
    if 5_000_000 in first and 1_000_000 in first:
        growth = first[5_000_000]["changelake_s"] / first[1_000_000]["changelake_s"]
        checks.append(
            {
                "check": "1,000 records: 5M-row table <= 1.3x the 1M-row table",
                "ok": growth <= 1.3,
                "detail": f"{growth:.2f}x",
            }
        )
    if scan:
        worse = scan["uncompacted_scan_s"] / scan["compacted_scan_s"]
        after = scan["recompacted_scan_s"] / scan["compacted_scan_s"]
        checks += [
            {
                "check": f"scan after {scan['uncompacted_batches']} uncompacted batches <= 1.5x compacted",
                "ok": worse <= 1.5,
                "detail": f"{worse:.2f}x ({scan['uncompacted_scan_s']:.2f} s vs {scan['compacted_scan_s']:.2f} s)",
            },
            {
                "check": "scan after compaction <= 1.1x compacted",
                "ok": after <= 1.1,
                "detail": f"{after:.2f}x",
            },
            {
                "check": "lookup with the batches uncompacted <= 0.5 s",
                "ok": scan["uncompacted_lookup_s"] <= 0.5,
                "detail": f"{scan['uncompacted_lookup_s'] * 1000:.0f} ms",
            },
        ]
    modes = tables[str(small)]["changelake"].get("modes_identical")
    if modes:
        checks.append(
            {
                "check": "merge-on-read and copy-on-write: same rows and changelog",
                "ok": all(modes.values()),
                "detail": str(modes),
            }
        )
    for rows in sizes:
        t = tables[str(rows)]
        checks.append(
            {
                "check": f"{rows:,} rows: changelake ends with delta-rs's rows",
                "ok": t["changelake"]["fingerprint"] == t["delta"]["fingerprint"],
                "detail": f"{t['changelake']['fingerprint']} vs {t['delta']['fingerprint']}",
            }
        )
    return {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([".venv/bin/python", "benchmarks/bench_small.py", *sys.argv[1:]]),
        "where": "s3" if args.s3 else "local",
        "catalog": args.catalog,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg": os.getloadavg()},
        "args": {
            "sizes": sizes,
            "batches": args.batches,
            "reps": args.reps,
            "scan_batches": args.scan_batches,
        },
        "small_batches": rows_out,
        "tables": tables,
        "checks": checks,
    }


def print_report(report: dict[str, Any]) -> None:
    print("\nsmall batches (median seconds per batch)")
    print(f"  {'rows':>12} {'records':>8} {'changelake':>11} {'delta-rs':>9} {'ratio':>6}")
    for r in report["small_batches"]:
        print(
            f"  {r['rows']:>12,} {r['records']:>8,} {r['changelake_s']:>11.3f} {r['delta_s']:>9.3f} {r['ratio']:>6.2f}"
        )
    for r in report["small_batches"]:
        if "requests" in r:
            q = r["requests"]
            print(
                f"  requests per {r['records']:,}-record batch into {r['rows']:,} rows: median {q['median']} "
                f"(total {q['median_total']}, at most {q['max_total']}); batches with a LIST: {q['batches_with_list']}"
            )
    for rows, t in report["tables"].items():
        cl = t["changelake"]
        cold = [a["s"] for a in cl["applies"] if a["group"] == "cold"]
        print(
            f"  {int(rows):,} rows: changelake load {cl['load_s']:.2f} s, first batch after it {cold[0]:.3f} s "
            f"(reads the table's files); delta-rs write {t['delta']['write_s']:.2f} s"
        )
        if "scan" in cl:
            s = cl["scan"]
            print(
                f"  scan {s['compacted_scan_s']:.2f} s compacted, {s['uncompacted_scan_s']:.2f} s after "
                f"{s['uncompacted_batches']} batches ({s['uncompacted_files']}), {s['recompacted_scan_s']:.2f} s "
                f"compacted again (compaction {s['compaction_s']:.2f} s); lookup {s['compacted_lookup_s'] * 1000:.0f} / "
                f"{s['uncompacted_lookup_s'] * 1000:.0f} / {s['recompacted_lookup_s'] * 1000:.0f} ms"
            )
    print_checks(report["checks"])


if __name__ == "__main__":
    sys.exit(main())
