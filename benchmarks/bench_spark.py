"""changelake beside the Spark table formats a Spark team would pick instead, on the same Spark, in one run.

    make bench-spark                                               # 5M rows, 500k batch, every peer
    .venv/bin/python benchmarks/bench_spark.py --rows 200000 --batch 20000 --peers delta   # a quick check

The same input files for everyone (``bench_data.py``'s table and bench batch, and ``--small-runs`` batches of
``--small`` records drawn as bench_small.py draws them), the same Spark settings (:data:`SPARK_CONF`: what
changelake's session sets, checked against its live session), one contestant after another, each in its own
process and JVM, nothing else running:

  changelake   the Python API in this process, as ``make bench`` and ``make bench-small`` run it
  iceberg      Iceberg 1.12.0, merge-on-read MERGE INTO (pyspark 4.1, the 'spark' jar set)
  delta        Delta Lake 4.4.0, MERGE with the change data feed (pyspark 4.1, 'bench-spark41')
  hudi         Hudi 1.2.0, merge-on-read upsert with CDC (pyspark 3.5, 'bench-spark35')
  paimon       Paimon 0.9.0, primary-key table, lookup changelog producer (pyspark 3.5, 'bench-spark35')

Hudi and Paimon run on Spark 3.5 in benchmarks/spark35's environment: no build of theirs for Spark 4.x is
served by the Maven Central this project reaches. The workloads, each after a warm-up, ``--reps`` times
(median) where a table is written whole: (1) the initial load; (2) the bench batch, whose changelog a reader
then reads (counted, and timed apart); (3) the small batches into the first table (median and p90), then a
full scan and point lookups; (4) the bench batch into aggregation tables (amount and qty summed).

Every peer's table must end each workload with changelake's rows (count and column sums) and its changelog
with changelake's changes, or its figure does not count. Writes benchmarks/results/spark-peers.json
(docs/benchmarks.md is rendered from it) and exits 1 if a check failed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import shutil
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
from bench_data import apply_liveness, change_batch, generate, settle
from bench_data import fingerprint as arrow_fingerprint
from bench_latency import machine_info
from bench_report import finish, print_checks
from spark_peers import change_counts

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
JARS = REPO / ".cache" / "jars"
TABLE = SPEC["name"]
#: The Spark settings every contestant runs with: changelake's session defaults
#: (changelake.runtime.session), checked against changelake's live session in every run.
SPARK_CONF = {
    "spark.master": "local[2]",
    "spark.driver.memory": "4g",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.compression.codec": "zstd",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.ui.enabled": "false",
}
#: Each peer: the Python that runs spark_peers.py (its pyspark) and the jar sets on its classpath.
PEERS = {
    "iceberg": (".venv", ["spark"]),
    "delta": (".venv", ["bench-spark41"]),
    "hudi": (".venv-spark35", ["bench-spark35"]),
    "paimon": (".venv-spark35", ["bench-spark35"]),
}
WORKLOADS = ("load", "batch", "small", "aggregation")
#: (workload, limit): changelake's median over the fastest counted peer's must stay at or below limit.
TARGETS = [("batch", 0.5), ("small", 0.5), ("load", 1.0), ("aggregation", 1.0)]


# --- data ---------------------------------------------------------------------------------------------------
def make_data(data: Path, rows: int, batch: int, small: int, small_runs: int, lookups: int) -> dict:
    """bench_data.py's files (the table, the bench batch), then ``small_runs`` batches of ``small`` records
    (70/20/10 over the keys alive after the bench batch, as bench_small.py draws them) and ``lookups`` live
    keys; spark-bench.json lists them for every contestant."""
    meta = generate(data, rows, batch)
    data.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(11)
    alive = apply_liveness(np.ones(rows, bool), pq.read_table(data / "batch.parquet"))
    names = []
    for i in range(small_runs):
        records = change_batch(np.flatnonzero(alive), len(alive), small, rng)
        alive = apply_liveness(alive, records)
        names.append(f"small-{i:02d}.parquet")
        pq.write_table(records, data / names[-1])
    keys = sorted(int(k) for k in rng.choice(np.flatnonzero(alive), lookups, replace=False))
    meta |= {"small_files": names, "lookup_keys": keys, "rows_after_small": int(alive.sum())}
    (data / "spark-bench.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


# --- changelake ---------------------------------------------------------------------------------------------
def timed(fn) -> float:
    settle()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run_changelake(work: Path, data: Path, meta: dict, reps: int) -> dict[str, Any]:
    """The workloads of the module docstring through changelake's Python API, in the peers' order."""
    from changelake import ChangeLake

    print("== changelake", file=sys.stderr, flush=True)
    for old in ("lake", "tables"):
        shutil.rmtree(work / old, ignore_errors=True)
    lake = ChangeLake(home=work / "lake", tables_dir=work / "tables", progress=lambda m: None)
    spark = lake.spark
    live = spark.sparkContext.getConf()
    out: dict[str, Any] = {"runs": {}, "fingerprints": {}, "spark": spark.version}
    out["spark_conf"] = {k: live.get(k, None) for k in SPARK_CONF}

    def progress(msg: str) -> None:
        print(f"   [changelake] {msg}", file=sys.stderr, flush=True)

    def rows_fp(table: str) -> dict[str, Any]:
        return arrow_fingerprint(lake.rows_arrow(table).select(["order_id", "qty", "amount"]))

    # The warm-up sends its rows through Spark, as bench_apply's does (10k records would apply in-process).
    lake.create_table({**SPEC, "name": "bench.warmup"})
    os.environ["CHANGELAKE_LOCAL_APPLY_RECORDS"] = "0"
    lake.apply("bench.warmup", file=data / "warmup.parquet", batch_id=1)
    del os.environ["CHANGELAKE_LOCAL_APPLY_RECORDS"]  # the default from here on, as make bench runs
    lake.apply("bench.warmup", file=data / meta["small_files"][0], batch_id=2)

    tables = [TABLE] + [f"{TABLE}_run{i}" for i in range(2, reps + 1)]
    aggs = [f"{TABLE}_agg{i}" for i in range(1, reps + 1)]
    out["runs"]["load"] = []
    for t in tables:
        lake.create_table({**SPEC, "name": t})
        out["runs"]["load"].append(timed(lambda t=t: lake.apply(t, file=data / "base.parquet", batch_id=1)))
        progress(f"load {t}: {out['runs']['load'][-1]:.2f} s")
    out["fingerprints"]["load"] = rows_fp(TABLE)

    out["runs"]["batch"] = []
    for i, t in enumerate(tables):
        out["runs"]["batch"].append(timed(lambda t=t: lake.apply(t, file=data / "batch.parquet", batch_id=2)))
        progress(f"batch {t}: {out['runs']['batch'][-1]:.2f} s")
        out["fingerprints"][f"batch_t{i + 1}"] = rows_fp(t)
        if i == 0:
            counts: dict[str, int] = {}

            def read_changelog(t: str = t, counts: dict[str, int] = counts) -> None:
                df = lake.changelog(t, from_batch=2, to_batch=2).groupBy("_change_type").count()
                counts.update({r["_change_type"]: r["count"] for r in df.collect()})

            # Three reads, the median, as for the peers: the first pays the JVM's first Iceberg scan.
            out["runs"]["changelog_read"] = [timed(read_changelog) for _ in range(3)]
            out["changelog_read_s"] = statistics.median(out["runs"]["changelog_read"])
            out["changelog"] = change_counts(counts)

    out["runs"]["small"] = []
    for i, name in enumerate(meta["small_files"]):
        out["runs"]["small"].append(
            timed(lambda i=i, n=name: lake.apply(TABLE, file=data / n, batch_id=3 + i))
        )
    progress(f"small: median {statistics.median(out['runs']['small']):.3f} s")
    out["fingerprints"]["small"] = rows_fp(TABLE)
    # Reads as a user makes them (no JVM), and the same through Spark for the same-engine comparison.
    out["runs"]["scan"] = [timed(lambda: lake.rows_arrow(TABLE)) for _ in range(3)]
    out["runs"]["scan_spark"] = [
        timed(lambda: lake.rows(TABLE).write.format("noop").mode("overwrite").save()) for _ in range(3)
    ]
    found: list[dict] = []
    out["runs"]["lookup"] = [
        timed(lambda k=k: found.extend(lake.lookup(TABLE, {"order_id": k}))) for k in meta["lookup_keys"]
    ]
    out["lookup_found"] = {"rows": len(found), "sum_qty": sum(r["qty"] for r in found)}
    out["runs"]["lookup_spark"] = [
        timed(lambda k=k: lake.rows(TABLE).filter(f"order_id = {k}").collect()) for k in meta["lookup_keys"]
    ]

    agg_options = {"table.merge-engine": "aggregation", "fields.amount.agg": "sum", "fields.qty.agg": "sum"}
    for t in aggs:
        lake.create_table({**SPEC, "name": t, "options": {**SPEC["options"], **agg_options}})
        lake.apply(t, file=data / "base.parquet", batch_id=1)
    out["runs"]["aggregation"] = []
    for i, t in enumerate(aggs):
        out["runs"]["aggregation"].append(
            timed(lambda t=t: lake.apply(t, file=data / "batch.parquet", batch_id=2))
        )
        progress(f"aggregation {t}: {out['runs']['aggregation'][-1]:.2f} s")
        out["fingerprints"][f"aggregation_agg{i + 1}"] = rows_fp(t)
    out["settings"] = {"bucket.num": str(SPEC["options"]["bucket.num"]), **agg_options}
    return out


def run_lake_process(work: Path, argv: list[str]) -> dict[str, Any]:
    """run_changelake in a process of its own (this script with --changelake-only, the same arguments)."""
    cmd = [sys.executable, __file__, *argv, "--work", str(work), "--changelake-only"]
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, timeout=4 * 3600)
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}: the changelake run failed (its output is above)"}
    return json.loads((work / "result-changelake.json").read_text())


# --- peers --------------------------------------------------------------------------------------------------
def run_peer(name: str, data: Path, work: Path, reps: int) -> dict[str, Any]:
    """One peer in its own process (its own pyspark and jars); a failure is reported, not fatal."""
    env_dir, jar_sets = PEERS[name]
    python = REPO / env_dir / "bin" / "python"
    out = work / f"peer-{name}.json"
    cmd = [str(python), str(HERE / "spark_peers.py"), "--peer", name, "--data", str(data)]
    cmd += ["--work", str(work / f"peer-{name}"), "--reps", str(reps), "--out", str(out)]
    cmd += ["--conf", json.dumps(SPARK_CONF), "--jars", *(str(JARS / s) for s in jar_sets)]
    if not python.exists():
        return {"error": f"{env_dir} is missing (make bench-spark creates it)"}
    print(f"== peer {name}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=4 * 3600)
    shutil.rmtree(work / f"peer-{name}", ignore_errors=True)  # its tables: a GB or two each
    sys.stderr.write("".join(line + "\n" for line in proc.stderr.splitlines() if line.startswith("   [")))
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or ["no output"]
        err = next((ln for ln in reversed(lines) if "Error" in ln or "Exception" in ln), lines[-1])
        return {"error": f"exit {proc.returncode}: {err.strip()[:400]}", "stderr_tail": lines[-40:]}
    return json.loads(out.read_text())


# --- the report ---------------------------------------------------------------------------------------------
def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1] if len(values) > 1 else values[0]


def same_rows(lake: dict[str, Any], peer: dict[str, Any]) -> list[dict[str, Any]]:
    """The peer's fingerprint after each workload beside changelake's, and its changelog's changes beside
    changelake's changelog: one check each. A workload the peer did not reach fails its check."""
    checks = []
    for key, expected in lake["fingerprints"].items():
        got = peer.get("fingerprints", {}).get(key)
        checks.append({"check": f"rows after {key}", "ok": got == expected, "detail": f"{got} vs {expected}"})
    want = {k: v for k, v in lake.get("changelog", {}).items() if k != "update_befores"}
    if "changelog" in peer:
        got = {k: v for k, v in peer["changelog"].items() if k != "update_befores"}
        befores = peer["changelog"]["update_befores"]
        ok = got == want and befores in (0, got["updates"])  # before images: in the update row, or one each
        checks.append(
            {"check": "changelog of the batch", "ok": ok, "detail": f"{peer['changelog']} vs {want}"}
        )
    return checks


def build_report(
    lake: dict[str, Any], peers: dict[str, dict], meta: dict, args, machine: dict[str, Any]
) -> dict[str, Any]:
    """spark-peers.json: issue 48's three keys (``workloads``: median seconds per workload and contestant,
    ``same_rows``: per peer, ``versions``), then what the page shows beside them (the machine, details per
    contestant, targets, checks). ``machine`` is bench_latency.machine_info()."""
    contestants = {"changelake": lake, **peers}
    workloads: dict[str, dict[str, float | None]] = {w: {} for w in WORKLOADS}
    details: dict[str, dict[str, Any]] = {}
    checks: list[dict[str, Any]] = []
    same: dict[str, bool] = {}
    changelog_ok: dict[str, bool] = {}  # the batch counts only with its changelog readable and complete
    for name, result in contestants.items():
        runs = result.get("runs", {})
        for w in WORKLOADS:
            workloads[w][name] = round(statistics.median(runs[w]), 3) if runs.get(w) else None
        d: dict[str, Any] = {k: [round(x, 3) for x in v] for k, v in runs.items()}
        d = {"runs_s": d}
        if runs.get("small"):
            d["small_p90_s"] = round(p90(runs["small"]), 3)
        for read in ("scan", "scan_spark", "lookup", "lookup_spark"):
            if runs.get(read):
                d[f"{read}_s"] = round(statistics.median(runs[read]), 3)
        for key in ("changelog", "changelog_read_s", "changelog_error", "settings", "spark", "runtime",
                    "lookup_found", "error", "stderr_tail", "spark_conf"):  # fmt: skip
            if key in result:
                d[key] = round(result[key], 3) if key == "changelog_read_s" else result[key]
        details[name] = d
        if name == "changelake":
            checks.append(
                {
                    "check": "changelake's Spark session has the settings every peer runs with",
                    "ok": lake.get("spark_conf") == SPARK_CONF,
                    "detail": json.dumps(lake.get("spark_conf")),
                }
            )
            expect = {
                "load": meta["rows"],
                "batch_t1": meta["rows_after_batch"],
                "small": meta["rows_after_small"],
            }
            for key, rows in expect.items():
                got = lake["fingerprints"][key]["rows"]
                checks.append(
                    {
                        "check": f"changelake rows after {key}",
                        "ok": got == rows,
                        "detail": f"{got} (expected {rows})",
                    }
                )
            continue
        if "error" in result:
            same[name] = False
            checks.append({"check": f"{name} ran", "ok": False, "detail": result["error"]})
            continue
        peer_checks = same_rows(lake, result)
        same[name] = all(c["ok"] for c in peer_checks if c["check"].startswith("rows"))
        changelog_ok[name] = any(c["ok"] for c in peer_checks if c["check"] == "changelog of the batch")
        details[name]["changelog_ok"] = changelog_ok[name]
        checks += [{**c, "check": f"{name}: {c['check']}"} for c in peer_checks]
        if lake["lookup_found"] != result.get("lookup_found"):
            checks.append({"check": f"{name}: point lookups found changelake's rows", "ok": False, "detail": f"{result.get('lookup_found')} vs {lake['lookup_found']}"})  # fmt: skip
    report = {
        "workloads": workloads,
        "same_rows": same,
        "versions": versions(lake, peers, machine),
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": shlex.join([".venv/bin/python", "benchmarks/bench_spark.py", *sys.argv[1:]]),
        "machine": machine,
        "spark_conf": SPARK_CONF,
        "rows": meta["rows"],
        "batch_records": meta["batch"]["records"],
        "small_records": args.small,
        "small_runs": args.small_runs,
        "reps": args.reps,
        "details": details,
        "checks": checks,
    }
    report["targets"] = evaluate_targets(workloads, same, changelog_ok)
    return report


def versions(lake: dict[str, Any], peers: dict[str, dict], machine: dict[str, Any]) -> dict[str, str]:
    """Each contestant's build and the Spark it ran on (changelake: the commit measured)."""
    dirty = " with local changes" if machine.get("git_worktree_dirty") else ""
    out = {"changelake": f"commit {machine.get('git_commit')}{dirty}, Spark {lake.get('spark')}"}
    for name, result in peers.items():
        env_dir = PEERS[name][0]
        out[name] = f"{result.get('runtime', '?')}, Spark {result.get('spark', '?')} ({env_dir})"
    return out


def evaluate_targets(
    workloads: dict[str, dict], same: dict[str, bool], changelog_ok: dict[str, bool]
) -> list[dict[str, Any]]:
    """changelake over the fastest peer whose rows matched, per target workload (n/a without such a peer);
    on the batch, only peers whose changelog of it a reader could read, with changelake's changes."""
    out = []
    for w, limit in TARGETS:
        counted = {
            p: s
            for p, s in workloads[w].items()
            if p != "changelake" and s is not None and same.get(p) and (w != "batch" or changelog_ok.get(p))
        }
        lake = workloads[w].get("changelake")
        fastest = min(counted, key=counted.get) if counted else None
        value = round(lake / counted[fastest], 2) if fastest and lake is not None else None
        status = "n/a" if value is None else ("pass" if value <= limit else "fail")
        out.append({"workload": w, "fastest_peer": fastest, "value": value, "limit": limit, "status": status})
    return out


def print_report(report: dict[str, Any]) -> None:
    names = list(report["details"])
    print("\nmedian seconds (rows matched changelake: yes/no)")
    print(f"  {'workload':12}" + "".join(f"{n:>12}" for n in names))
    for w, by in report["workloads"].items():
        print(
            f"  {w:12}" + "".join(f"{'–' if by.get(n) is None else format(by[n], '.3f'):>12}" for n in names)
        )
    print(
        "  same rows   "
        + "".join(
            f"{'' if n == 'changelake' else ('yes' if report['same_rows'].get(n) else 'no'):>12}"
            for n in names
        )
    )
    print("\ntargets (changelake / fastest peer)")
    for t in report["targets"]:
        print(
            f"  {t['status'].upper():5} {t['workload']:12} {t['value']} vs {t['fastest_peer']} (limit {t['limit']})"
        )
    print_checks(report["checks"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--batch", type=int, default=500_000)
    ap.add_argument("--small", type=int, default=1_000, help="records of each small batch")
    ap.add_argument("--small-runs", type=int, default=20)
    ap.add_argument("--lookups", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--peers", default=",".join(PEERS), help="comma-separated; '' runs none")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "spark-peers.json")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (its path is printed)")
    ap.add_argument(
        "--work",
        type=Path,
        help="a work directory kept between runs: a contestant whose result is there, from inputs of the "
        "same sizes, is not run again (a long run can be finished in parts)",
    )
    ap.add_argument("--rerun", default="", help="with --work: contestants to run again (comma-separated)")
    ap.add_argument("--changelake-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    names = [p for p in args.peers.split(",") if p]
    if unknown := set(names) - set(PEERS):
        ap.error(f"unknown peers {sorted(unknown)}; known: {', '.join(PEERS)}")
    work = args.work or Path(tempfile.mkdtemp(prefix="changelake-bench-spark-"))
    data = work / "data"
    sizes = [args.rows, args.batch, args.small, args.small_runs, args.lookups, args.reps]
    listed = data / "spark-bench.json"
    if listed.exists() and json.loads(listed.read_text()).get("sizes") == sizes:
        meta = json.loads(listed.read_text())  # the same inputs as the results kept beside them
    else:
        for stale in work.glob("*.json"):
            stale.unlink()
        print(f"== generating {args.rows:,} rows and the batches in {data}", file=sys.stderr, flush=True)
        meta = make_data(data, args.rows, args.batch, args.small, args.small_runs, args.lookups)
        listed.write_text(json.dumps({**meta, "sizes": sizes}, indent=2) + "\n")
    rerun = set(args.rerun.split(","))

    def kept(name: str, run) -> dict[str, Any]:
        """The contestant's kept result from these inputs, else a fresh one (kept unless it failed)."""
        path = work / f"result-{name}.json"
        if path.exists() and name not in rerun:
            print(f"== {name}: the result kept in {path}", file=sys.stderr, flush=True)
            return json.loads(path.read_text())
        result = run()
        if "error" not in result:
            path.write_text(json.dumps(result, indent=2) + "\n")
        return result

    if args.changelake_only:  # the contestant process main() starts below
        path = work / "result-changelake.json"
        path.write_text(json.dumps(run_changelake(work, data, meta, args.reps), indent=2) + "\n")
        return 0
    # changelake first, in a process of its own as every peer: no JVM stays up beside the next contestant.
    lake = kept("changelake", lambda: run_lake_process(work, sys.argv[1:]))
    if "error" in lake:  # nothing to compare the peers with
        print(lake["error"], file=sys.stderr)
        return 1
    peers = {name: kept(name, lambda n=name: run_peer(n, data, work, args.reps)) for name in names}
    report = build_report(lake, peers, meta, args, machine_info())
    keep = args.keep or args.work is not None
    return finish(report, args.out, print_report, work, keep=keep, what="work directory")


if __name__ == "__main__":
    sys.exit(main())
