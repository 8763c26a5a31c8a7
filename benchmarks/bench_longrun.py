"""A year of minute batches, compressed: thousands of small batches into one table, in one process, with the
default settings; files, bytes, metadata files and batch time must stay bounded (issue 32).

    make bench-longrun                                        # 1,200 batches
    make bench-longrun LONGRUN_ARGS="--batches 10000"         # the 10,000-batch run
    .venv/bin/python benchmarks/bench_longrun.py --batches 300 --every 100    # a quick check
    make bench-longrun LONGRUN_ARGS=--s3                      # the same on the local S3 endpoint

The table: 3 columns, 4 buckets; each batch 20 records with random keys among 100,000, 80% upserts and 20%
deletes, applied through the Python API (merged in the process, maintenance after each batch as an apply
runs it). Every ``--every`` batches the warehouse is counted (files, bytes, metadata JSON files). At the end:

* the rows equal a Python model of the batches (a dict), and pyiceberg's own scan reads the same rows;
* a replay of a retained batch, of an expired one and of the first one is a no-op; the first batch landed
  with other content is refused;
* ``status`` totals and the changelog record count match the model;
* the CLI's ``lookup``, ``status`` and ``scan --limit 10`` each run as a fresh process (cold), median of 3.

Targets: at the end at most 500 files and 50 MB in the warehouse and 100 metadata files, the median of the
last 50 batches at most 1.2x the first 50's, and the cold reads at most 0.5 s. Writes
benchmarks/results/longrun.json (or ``--out``) and prints the table.

``--s3``: the same batches and checks with the warehouse (``s3://changelake/longrun/warehouse``) and the landed
batches (``s3://changelake/longrun/landing/``) on the project's local S3 endpoint, which the run starts and
stops (s3_lake.py); the warehouse is counted as the objects under its prefix, and the requests of every apply
are counted from the endpoint's log. Writes benchmarks/results/longrun-s3.json. ``--s3 --catalog rest``: the
table behind Iceberg's REST catalog (infra/rest_catalog.sh) on that endpoint; writes longrun-s3-rest.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_report import finish, print_checks
from s3_lake import BUCKET, Endpoint, lists_whole_table, request_summary, usage

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SPEC = {
    "name": "lr.events",
    "columns": [
        {"name": "k", "type": "BIGINT"},
        {"name": "v", "type": "STRING"},
        {"name": "n", "type": "INT"},
    ],
    "primary_key": ["k"],
    "options": {"bucket.num": 4},
}
TABLE = SPEC["name"]


def batch(rng: random.Random, batch_id: int, model: dict) -> list[dict]:
    out = []
    for _ in range(20):
        k = rng.randrange(100_000)
        if rng.random() < 0.2:
            out.append({"op": "-D", "data": {"k": k}})
            model.pop(k, None)
        else:
            v = f"v{rng.randrange(10**6)}"
            out.append({"op": "+U", "data": {"k": k, "v": v, "n": batch_id}})
            model[k] = (v, batch_id)
    return out


def cold_cli(env: dict, *args: str, reps: int = 3) -> tuple[float, str]:
    times, out = [], ""
    for _ in range(reps):
        start = time.perf_counter()
        proc = subprocess.run(
            [str(REPO / ".venv" / "bin" / "changelake"), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        times.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise RuntimeError(f"changelake {' '.join(args)}: {proc.stderr[-2000:]}")
        out = proc.stdout
    return statistics.median(times), out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batches", type=int, default=1200)
    p.add_argument("--every", type=int, default=200)
    p.add_argument("--work", type=Path)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--out", type=Path)
    p.add_argument(
        "--s3",
        action="store_true",
        help="warehouse and landed batches on the local S3 endpoint (started here)",
    )
    p.add_argument(
        "--catalog",
        choices=["sqlite", "rest"],
        default="sqlite",
        help="rest (with --s3): the table behind Iceberg's REST catalog on the endpoint",
    )
    args = p.parse_args()
    if args.catalog == "rest" and not args.s3:
        p.error("--catalog rest keeps its tables on the S3 endpoint: add --s3")
    name = ("longrun-s3" if args.s3 else "longrun") + ("-rest" if args.catalog == "rest" else "")
    out = args.out or HERE / "results" / (
        f"{name}.json" if args.batches < 5000 else f"{name}-{args.batches}.json"
    )
    work = args.work or Path(tempfile.mkdtemp(prefix="changelake-bench-longrun-"))
    endpoint = Endpoint(work / "s3") if args.s3 else None
    try:
        report = run(args, work, endpoint)
    finally:
        if endpoint is not None:
            endpoint.stop()
    return finish(report, out, lambda r: print_checks(r["checks"]), work, args.keep, "scratch")


def run(args: argparse.Namespace, work: Path, endpoint: Endpoint | None) -> dict:
    home = work / "lake"
    (home / "tables").mkdir(parents=True, exist_ok=True)
    (home / "tables" / f"{TABLE}.yaml").write_text(json.dumps(SPEC))
    landing = work / "batches"
    landing.mkdir(exist_ok=True)

    from changelake import ChangeLake
    from changelake.errors import BatchRefusedError

    if endpoint is None:
        warehouse: Path | str = home / "warehouse"
        lake = ChangeLake(home=home, tables_dir=home / "tables", progress=lambda m: None)
    else:
        warehouse = f"s3://{BUCKET}/longrun/warehouse"
        lake, catalog = endpoint.lake(home, warehouse, "longrun" if args.catalog == "rest" else None)

    def location(path: Path) -> Path | str:
        """Where the apply reads the batch file: the local file, or its object in the landing prefix."""
        return path if endpoint is None else f"s3://{BUCKET}/longrun/landing/{TABLE}/{path.name}"

    def landed(path: Path) -> Path | str:
        """The batch file landed where the apply reads it (on S3: its bytes PUT as the object)."""
        return path if endpoint is None else endpoint.land(str(location(path)), path)

    def still_landed(path: Path) -> bool:
        return path.exists() if endpoint is None else endpoint.store.info(str(location(path))) is not None

    lake.create_table(SPEC)
    requests: list[dict[str, int]] = []
    listed: list[list[str]] = []  # the prefixes each apply listed
    rng = random.Random(7)
    model: dict = {}
    times: list[float] = []
    samples = []
    started = time.monotonic()
    for b in range(1, args.batches + 1):
        path = landing / f"{b}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in batch(rng, b, model)))
        source = landed(path)
        if endpoint is not None:
            endpoint.requests()  # the landing's PUT is not the apply's
        t = time.perf_counter()
        lake.apply(TABLE, file=source, batch_id=b)
        times.append(time.perf_counter() - t)
        if endpoint is not None:
            requests.append(endpoint.requests())
            listed.append(endpoint.listed)
        if b % args.every == 0 or b == args.batches:
            sample = {
                "batch": b,
                **usage(warehouse, endpoint.store if endpoint else None),
                "median_ms_last_50": round(statistics.median(times[-50:]) * 1000, 1),
                "elapsed_s": round(time.monotonic() - started, 1),
            }
            samples.append(sample)
            print(
                f"batch {b:>6}: {sample['files']:>5} files, {sample['bytes'] / 1e6:6.1f} MB, "
                f"{sample['metadata_files']} metadata files, median of the last 50 {sample['median_ms_last_50']} ms",
                flush=True,
            )
        if b % 2000 == 0:  # a year of landed batches is not the warehouse's: keep the scratch small
            gone = [old for old in landing.glob("*.jsonl") if int(old.stem) < b - 100 and int(old.stem) != 1]
            for old in gone:
                old.unlink()
            if endpoint is not None:
                endpoint.store.delete_many(str(location(old)) for old in gone)

    rows = {r["k"]: (r["v"], r["n"]) for r in lake.rows_arrow(TABLE).to_pylist()}
    scanned = lake.storage.pk_table(lake.spec(TABLE)).scan().to_arrow().to_pylist()
    status = {s["table"]: s for s in lake.status()}[TABLE]
    replays = {}
    for name, b in (("retained", args.batches), ("expired", args.batches - 100), ("first", 1)):
        path = landing / f"{b}.jsonl"
        replays[name] = (
            lake.apply(TABLE, file=location(path), batch_id=b).status if still_landed(path) else "file gone"
        )
    changed = landing / "changed.jsonl"
    changed.write_text(json.dumps({"op": "+I", "data": {"k": 1, "v": "x", "n": 0}}) + "\n")
    try:
        lake.apply(TABLE, file=landed(changed), batch_id=1)
        refused = False
    except BatchRefusedError:
        refused = True
    if endpoint is None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHANGELAKE_")}
        env.update(CHANGELAKE_HOME=str(home), CHANGELAKE_TABLES=str(home / "tables"))
    else:
        env = endpoint.cli_env(home, str(warehouse), catalog)
        endpoint.requests()
    key = next(iter(rows))
    reads, cold_requests = {}, {}
    for name, command in (
        ("lookup", ["lookup", TABLE, f"k={key}"]),
        ("status", ["status"]),
        ("scan_limit_10", ["scan", TABLE, "--limit", "10"]),
    ):
        reads[name] = cold_cli(env, *command, "--format", "jsonl")[0]
        if endpoint is not None:  # three runs each
            cold_requests[name] = {k: v / 3 for k, v in endpoint.requests().items()}
    kind = "objects" if endpoint is not None else "files"
    end = samples[-1]
    first50, last50 = statistics.median(times[:50]), statistics.median(times[-50:])
    checks = [
        {"check": "rows equal the model", "ok": rows == model, "detail": f"{len(rows):,} rows"},
        {
            "check": "pyiceberg's own scan reads the same rows",
            "ok": {r["k"]: (r["v"], r["n"]) for r in scanned} == model,
            "detail": f"{len(scanned):,} rows",
        },
        {
            "check": "replays of a retained, an expired and the first batch are no-ops",
            "ok": set(replays.values()) == {"already-applied"},
            "detail": str(replays),
        },
        {"check": "batch 1 with other input is refused", "ok": refused, "detail": str(refused)},
        {
            "check": "status: last batch and rows",
            "ok": (status["last_batch"], status["rows"]) == (args.batches, len(model)),
            "detail": f"{status['last_batch']}, {status['rows']}",
        },
        {"check": f"warehouse <= 500 {kind}", "ok": end["files"] <= 500, "detail": str(end["files"])},
        {"check": "warehouse <= 50 MB", "ok": end["bytes"] <= 50e6, "detail": f"{end['bytes'] / 1e6:.1f} MB"},
        {
            "check": "metadata files <= 100",
            "ok": end["metadata_files"] <= 100,
            "detail": str(end["metadata_files"]),
        },
        {
            "check": "median of the last 50 batches <= 1.2x the first 50",
            "ok": last50 <= 1.2 * first50,
            "detail": f"{last50 * 1000:.1f} ms vs {first50 * 1000:.1f} ms ({last50 / first50:.2f}x)",
        },
        *[
            {
                "check": f"cold `changelake {name.replace('_', ' ')}` <= 0.5 s",
                "ok": s <= 0.5,
                "detail": f"{s:.2f} s",
            }
            for name, s in reads.items()
        ],
    ]
    report = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([".venv/bin/python", "benchmarks/bench_longrun.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg": os.getloadavg()},
        "where": "s3" if endpoint is not None else "local",
        "warehouse": str(warehouse),
        "catalog": args.catalog,
        "batches": args.batches,
        "samples": samples,
        "median_ms_first_50": round(first50 * 1000, 1),
        "median_ms_last_50": round(last50 * 1000, 1),
        "cold_reads_s": {k: round(v, 3) for k, v in reads.items()},
        "status": status,
        "checks": checks,
    }
    if endpoint is not None:
        report["requests_per_batch"] = request_summary(requests)
        report["list_batch_ids"] = [i + 1 for i in report["requests_per_batch"].pop("list_batches")]
        # A LIST of an apply attempt's prefix (expiry removing an emptied one) is not a LIST of the table.
        tables = [
            lake.storage.pk_table(lake.spec(TABLE)).location(),
            lake.storage.changelog_table(lake.spec(TABLE)).location(),
        ]
        report["whole_table_list_batch_ids"] = [
            b for b, prefixes in enumerate(listed, 1) if any(lists_whole_table(p, tables) for p in prefixes)
        ]
        print(f"applies that listed a whole table: {report['whole_table_list_batch_ids']}")
        report["requests_cold_reads"] = cold_requests
        print(f"requests per batch: {report['requests_per_batch']}")
    return report


if __name__ == "__main__":
    sys.exit(main())
