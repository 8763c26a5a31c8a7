"""Latency of the changelake CLI as a user meets it (issue 13's targets): reads without a JVM on the bench's
5M-row table, and a 100-record batch applied through the warm SQL endpoint beside the cold path.

    make bench-latency                                                   # 5M rows, 5 repetitions, all parts
    .venv/bin/python benchmarks/bench_latency.py --rows 200000 --reps 3  # a smoke run
    .venv/bin/python benchmarks/bench_latency.py --home /tmp/lat         # build once, reuse on later runs
    .venv/bin/python benchmarks/bench_latency.py --no-warm --no-cold     # the reads only

The table is bench_apply.py's (same spec: 7 columns, primary key order_id, 32 buckets) with bench_data.py's
rows, loaded as batch 1 through changelake's own apply, then a ``--batch``-record batch 2 (70% updates, 20%
inserts, 10% deletes): two snapshots and some deletes. A second table of the same spec with
``--small-rows`` rows (for the applies only) separates the apply's fixed cost from the cost of rewriting
the buckets a batch touches. Both are built in one child process (one JVM) and recorded in
``<home>/latency-build.json``, so ``--home DIR`` reuses them.

Every measurement is a fresh process of the data env's CLI (``.venv/bin/changelake``), timed wall-clock from
start to exit, ``--reps`` times (median and max reported), and its output is checked against what a pyarrow
read of the table through pyiceberg says (not changelake's reader); a wrong answer is a failed check and
exit status 1. Read commands print ``--format jsonl`` so their output can be compared row by row (the
default table format differs only in how the same rows are printed).

Applies: ``--reps`` landed 100-record batches per table through the warm path (``infra/spark_server.sh
start`` on free ports, then ``changelake apply <table>`` with ``CHANGELAKE_SPARK_REMOTE=sc://…``; after each
batch the script waits until the endpoint's views show it, so its refresh never overlaps the next timing),
then ``--reps`` one-row ``changelake sql "DELETE FROM <big table> WHERE order_id = <live key>"`` through the
same endpoint (issue 37's target: <= 1 s; checked: batch committed, one row fewer), then the endpoint is
stopped and the script checks that none of its processes is left. Then
``--cold-reps`` batches of the same shape per table through the cold path (the same command without
``CHANGELAKE_SPARK_REMOTE``: a new local Spark JVM per process). A batch can only be applied once, so cold
and warm apply different batches of the same shape to the same table.

CHANGELAKE_* variables of the caller are ignored (the run has its own home). Python bytecode of
``src`` is compiled first, as ``make setup`` does. Writes ``benchmarks/results/latency.json``
(figures, targets met or missed, machine, load average at start and end) and prints a table.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import decimal
import json
import os
import platform
import re
import resource
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:  # imported from the tests, not run as a script
    sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from bench_apply import SPEC  # noqa: E402
from bench_data import COLUMNS, change_batch, generate, split  # noqa: E402
from bench_report import finish, print_checks  # noqa: E402

TABLE = SPEC["name"]
SMALL_TABLE = f"{TABLE}_small"
KEY = SPEC["primary_key"][0]
BUILD_MARKER = "latency-build.json"
APPLY_RECORDS = 100
DEFAULT_CLI = REPO / ".venv" / "bin" / "changelake"
# (key, what, limit in seconds, issue 13's "now" in seconds — measured there on one-row tables).
TARGETS = [
    ("lookup", "changelake lookup, cold CLI process, big table", 0.5, 13.8),
    ("scan_limit", "changelake scan --limit 10, big table", 1.0, 11.8),
    ("status", "changelake status", 1.0, 3.5),
    ("apply_warm_big", "100-record batch, warm path, end to end, big table", 3.0, 21.0),
    ("apply_warm_small", "100-record batch, warm path, end to end, small table", 3.0, 21.0),
    # issue 37: no figure before (there was no SQL write)
    (
        "sql_delete_warm_big",
        "1-row DELETE FROM (changelake sql), warm path, end to end, big table",
        1.0,
        None,
    ),
]
# The first 100-record batch through the warm endpoint after its start, against the later ones' median (issue 47).
FIRST_WARM_LIMIT = 1.5
# The apply's own progress lines: decode and merge take their own time, "committed ... in" the whole batch.
PHASES = {
    "decode_s": re.compile(r"decoded in ([\d.]+)s"),
    "merge_s": re.compile(r": merged .* in ([\d.]+)s"),
    "batch_s": re.compile(r"committed \(snapshot \d+\) in ([\d.]+)s"),
}
# The CLI's result lines name the writer's batch and the table's batch id; the checks use the table's.
APPLIED = re.compile(
    r"batch \d+ \(table batch (\d+)\): applied; inserted (\d+), updated (\d+), deleted (\d+), ignored (\d+); "
    r"changelog (\d+)"
)
SQL_DELETED = re.compile(
    r"^DELETE (\S+): sql batch \d+ \(table batch (\d+)\) applied; inserted 0, updated 0, deleted (\d+)", re.M
)

Check = Callable[[str], "str | None"]  # CLI stdout -> None if right, else what is wrong


# --- running the CLI --------------------------------------------------------------------------------------
@dataclass
class Run:
    """One CLI process: wall and CPU seconds, exit status, output."""

    seconds: float
    cpu_seconds: float
    returncode: int
    stdout: str
    stderr: str


@dataclass
class Case:
    """One timed invocation: CLI arguments and the check of its output."""

    args: list[str]
    check: Check


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """The caller's environment without CHANGELAKE_* (and without a Spark master or endpoint address),
    pointed at ``home`` and its ``tables`` directory."""
    drop = ("SPARK_MASTER", "SPARK_THRIFT_HOST", "SPARK_THRIFT_PORT", "SPARK_CONNECT_PORT")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHANGELAKE_") and k not in drop}
    env.update(CHANGELAKE_HOME=str(home), CHANGELAKE_TABLES=str(home / "tables"), **extra)
    return env


def run_cli(cli: Path, args: list[str], env: dict[str, str], timeout: float = 900) -> Run:
    """Run ``cli args`` as a new process and time it from start to exit. CPU time counts the process and
    the descendants it waited for (a read has none; a cold apply's JVM is not always among them)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [str(cli), *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(seconds, cpu, proc.returncode, proc.stdout, proc.stderr)


def summarize(seconds: list[float]) -> dict[str, float | None]:
    """Median, max and min of some timings (None for each when there are none)."""
    if not seconds:
        return {"median_s": None, "max_s": None, "min_s": None}
    return {
        "median_s": round(statistics.median(seconds), 3),
        "max_s": round(max(seconds), 3),
        "min_s": round(min(seconds), 3),
    }


def measure(
    name: str, cases: list[Case], cli: Path, env: dict[str, str], quiet: bool = False, progress_lines: int = 3
) -> dict:
    """Run each case once as a fresh CLI process; times, CPU, load, and which runs gave a wrong answer.
    Keeps the last ``progress_lines`` lines the last run printed on stderr (the CLI's progress)."""
    if not quiet:
        print(f"== {name}: {len(cases)} run(s) of changelake {shlex.join(cases[0].args)}", file=sys.stderr)
    runs, failures = [], []
    load_before = os.getloadavg()[0]
    last: Run | None = None
    for i, case in enumerate(cases):
        last = run_cli(cli, case.args, env)
        if last.returncode != 0:
            problem = f"exit {last.returncode}: {last.stderr.strip()[-500:]}"
        else:
            try:
                problem = case.check(last.stdout)
            except Exception as e:  # unparsable output is a wrong answer, not a crash of the benchmark
                problem = f"output not understood: {type(e).__name__}: {e}"
        runs.append(
            {"args": case.args, "seconds": round(last.seconds, 3), "cpu_s": round(last.cpu_seconds, 3)}
        )
        if problem:
            failures.append({"run": i, "args": case.args, "problem": problem})
            print(f"   CHECK FAILED: {name} run {i}: {problem}", file=sys.stderr, flush=True)
        elif not quiet:
            print(f"   {last.seconds:6.2f} s  {shlex.join(case.args)}", file=sys.stderr, flush=True)
    seconds = [r["seconds"] for r in runs]
    return {
        "command": "changelake " + shlex.join(cases[0].args),
        **summarize(seconds),
        "cpu_median_s": round(statistics.median(r["cpu_s"] for r in runs), 3),
        "runs": runs,
        "ok": not failures,
        "failures": failures,
        "load_1m_before": round(load_before, 2),
        "load_1m_after": round(os.getloadavg()[0], 2),
        # The CLI's own account of the last run (files, row groups read), from its progress on stderr.
        "progress": (last.stderr.strip().splitlines() if last else [])[-progress_lines:],
    }


# --- what the right answers are -----------------------------------------------------------------------
def jsonable(value: Any) -> Any:
    """A value as the CLI's ``--format jsonl`` prints it (decimals as strings, times as ISO-8601, bytes as
    base64), so rows read with pyarrow compare with parsed CLI output."""
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    return value


def as_rows(table: pa.Table) -> list[dict[str, Any]]:
    """A pyarrow table's rows as the CLI's ``--format jsonl`` shows them, parsed."""
    return [{k: jsonable(v) for k, v in row.items()} for row in table.to_pylist()]


def parse_jsonl(stdout: str) -> list[dict[str, Any]]:
    """One parsed JSON object per non-empty line of CLI output."""
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def rows_check(expected: list[dict[str, Any]]) -> Check:
    """The CLI printed exactly ``expected`` (rows as :func:`as_rows` gives them), in that order."""

    def check(stdout: str) -> str | None:
        got = parse_jsonl(stdout)
        if got == expected:
            return None
        if len(got) != len(expected):
            return (
                f"{len(got)} row(s), expected {len(expected)}: first got {got[:1]}, expected {expected[:1]}"
            )
        i = next(i for i, (g, e) in enumerate(zip(got, expected, strict=True)) if g != e)
        return f"row {i}: got {got[i]}, expected {expected[i]}"

    return check


def status_check(expected: dict[str, dict[str, Any]]) -> Check:
    """``status --format jsonl`` has a line per table in ``expected`` with those field values."""

    def check(stdout: str) -> str | None:
        lines = {row.get("table"): row for row in parse_jsonl(stdout)}
        for table, fields in expected.items():
            row = lines.get(table)
            if row is None:
                return f"no status line for {table} (got {sorted(map(str, lines))})"
            wrong = {k: (row.get(k), v) for k, v in fields.items() if row.get(k) != v}
            if wrong:
                return f"{table}: " + ", ".join(f"{k} {g!r}, expected {e!r}" for k, (g, e) in wrong.items())
        return None

    return check


def apply_check(batch_id: int, inserted: int, updated: int, deleted: int) -> Check:
    """``changelake apply`` applied exactly this batch with these counts."""

    def check(stdout: str) -> str | None:
        found = APPLIED.findall(stdout)
        if len(found) != 1:
            return f"expected one applied batch, got {len(found)}: {stdout.strip()[-300:]}"
        got = tuple(int(x) for x in found[0][:4])
        want = (batch_id, inserted, updated, deleted)
        if got != want:
            return f"applied (batch, inserted, updated, deleted) = {got}, expected {want}"
        return None

    return check


def apply_phases(progress: list[str], wall: float) -> dict[str, float | None]:
    """Where an apply's wall time went, from its progress lines: decode, merge, the rest of the batch
    (planning, checksum, commits), and what lies outside the batch (process start, imports, catalog,
    Spark session or JVM start if the decode did not pay it, changelog commit, exit)."""
    found: dict[str, float | None] = {}
    for key, pattern in PHASES.items():
        hits = [float(m.group(1)) for line in progress if (m := pattern.search(line))]
        found[key] = hits[-1] if hits else None
    batch, decode, merge = found["batch_s"], found["decode_s"], found["merge_s"]
    parts_known = None not in (batch, decode, merge)
    found["rest_of_batch_s"] = round(batch - decode - merge, 2) if parts_known else None
    found["outside_batch_s"] = round(wall - batch, 2) if batch is not None else None
    return found


class Truth:
    """A table as pyiceberg and pyarrow read it (the reference the CLI's answers are checked against)."""

    def __init__(self, home: Path, table: str):
        from pyiceberg.catalog import load_catalog

        from changelake.config import load_settings

        settings = load_settings(home=home, tables_dir=home / "tables")
        props = {"type": settings.catalog_type, "uri": settings.catalog_uri, "warehouse": settings.warehouse}
        self.catalog = load_catalog(settings.catalog_name, **props, **settings.catalog_properties)
        self.name = table
        self.ident = tuple(table.split("."))
        self.reload()

    def reload(self) -> None:
        self.pk = self.catalog.load_table(self.ident)
        self.log = self.catalog.load_table((self.ident[0], self.ident[1] + "__changelog"))

    def batch_snapshots(self) -> dict[int, int]:
        """Batch id -> snapshot id of every batch commit of the PK table."""
        out = {}
        for snap in self.pk.snapshots():
            batch = snap.summary.additional_properties.get("changelake.batch-id") if snap.summary else None
            if batch is not None:
                out[int(batch)] = snap.snapshot_id
        return out

    def last_batch(self) -> int:
        return max(self.batch_snapshots(), default=0)

    def last_landed(self) -> int:
        """The landing writer's last batch number, as the newest batch commit recorded every writer's
        (``changelake.writers``): a landed file is named by it, not by the table's batch id, which the SQL
        statements and the build's API batches also advance."""
        for snap in sorted(self.pk.snapshots(), key=lambda s: s.sequence_number, reverse=True):
            writers = snap.summary.additional_properties.get("changelake.writers") if snap.summary else None
            if writers is not None:
                return int(json.loads(writers).get("landing", 0))
        return 0

    def current_snapshot_id(self) -> int | None:
        snap = self.pk.current_snapshot()
        return snap.snapshot_id if snap else None

    def row_count(self) -> int:
        """Rows of the current snapshot: the record counts of the data files pyiceberg plans, less the distinct
        rows their position-delete files name (merge-on-read batches replace rows by position)."""
        import pyarrow.parquet as pq

        tasks = list(self.pk.scan().plan_files())
        paths = {task.file.file_path for task in tasks}
        gone: set[tuple[str, int]] = set()
        for path in {d.file_path for task in tasks for d in task.delete_files}:
            with self.pk.io.new_input(path).open() as stream:
                deletes = pq.read_table(stream, columns=["file_path", "pos"])
            named = zip(
                deletes.column("file_path").to_pylist(), deletes.column("pos").to_pylist(), strict=True
            )
            gone.update((file, pos) for file, pos in named if file in paths)
        return sum(task.file.record_count for task in tasks) - len(gone)

    def keys(self) -> np.ndarray:
        return self.pk.scan(selected_fields=(KEY,)).to_arrow()[KEY].to_numpy()

    def rows(self, at_batch: int | None = None) -> pa.Table:
        snapshot = None if at_batch is None else self.batch_snapshots()[at_batch]
        return self.pk.scan(snapshot_id=snapshot, selected_fields=tuple(COLUMNS)).to_arrow()

    def changelog(self, batch: int) -> pa.Table:
        """The changelog of one batch in the README's order: (_batch_id, partition keys, _bucket, _log_offset)
        (the bench spec has no partition keys)."""
        from pyiceberg.expressions import EqualTo

        log = self.log.scan(row_filter=EqualTo("_batch_id", batch)).to_arrow()
        return log.sort_by([(c, "ascending") for c in ("_batch_id", "_bucket", "_log_offset")])


def first_by_key(rows: pa.Table, limit: int) -> pa.Table:
    """The ``limit`` rows with the smallest keys, in key order."""
    index = pc.select_k_unstable(rows, k=min(limit, rows.num_rows), sort_keys=[(KEY, "ascending")])
    return rows.take(index).sort_by(KEY)


def key_rows(rows: pa.Table, key: int) -> list[dict[str, Any]]:
    """What a lookup of ``key`` must print: the table's row with that key, or nothing."""
    return as_rows(rows.filter(pc.equal(rows[KEY], key)))


# --- building the tables -----------------------------------------------------------------------------
def spec_of(table: str) -> dict[str, Any]:
    """bench_apply.py's table spec under another name."""
    return {**SPEC, "name": table}


def build_plan(args: argparse.Namespace) -> dict[str, dict[str, int]]:
    """The tables this run needs: the big one always, the small one only for the applies."""
    plan = {TABLE: {"rows": args.rows, "batch": args.batch}}
    if not (args.no_warm and args.no_cold):
        plan[SMALL_TABLE] = {"rows": args.small_rows, "batch": max(1, min(args.batch, args.small_rows // 10))}
    return plan


def built_tables(home: Path) -> dict[str, Any]:
    """The tables ``home`` holds, from its build marker (what each was built with, how long it took)."""
    path = home / BUILD_MARKER
    return json.loads(path.read_text())["tables"] if path.exists() else {}


def ensure_built(home: Path, plan: dict[str, dict[str, int]], chunk: int) -> tuple[dict[str, Any], list[str]]:
    """Build the planned tables missing from ``home`` (one child process, one JVM); return what the build
    marker records and the tables built now. A table already built with another size is an error (the
    figures would mix tables)."""
    have = built_tables(home)
    for table, want in plan.items():
        got = have.get(table)
        if got is not None and (got["rows"], got["batch"]) != (want["rows"], want["batch"]):
            raise SystemExit(
                f"{home} holds {table} with {got['rows']:,} rows and a {got['batch']:,}-record batch 2; "
                f"this run wants {want['rows']:,} and {want['batch']:,}: use another --home"
            )
    missing = {t: w for t, w in plan.items() if t not in have}
    if missing:
        what = ", ".join(f"{t} ({w['rows']:,} rows)" for t, w in missing.items())
        print(f"== building {what} in {home}", file=sys.stderr, flush=True)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--build-only", json.dumps(missing)]
        cmd += ["--home", str(home), "--chunk", str(chunk)]
        subprocess.run(cmd, check=True, env=clean_env(home))
    return built_tables(home), sorted(missing)


def build(home: Path, plan: dict[str, dict[str, int]], chunk: int) -> None:
    """In a child process: generate each table's rows and batch 2 with bench_data.py, write its spec file,
    create it and apply both batches through changelake's own apply (the API, one SparkSession)."""
    import yaml

    from changelake import ChangeLake

    (home / "tables").mkdir(parents=True, exist_ok=True)
    lake = ChangeLake(home=home, tables_dir=home / "tables")
    marker = home / BUILD_MARKER
    for table, want in plan.items():
        data = home / "data" / table
        started = time.perf_counter()
        meta = generate(data, want["rows"], want["batch"], chunk=chunk)
        generate_s = time.perf_counter() - started
        spec_path = home / "tables" / f"{table}.yaml"
        spec_path.write_text(yaml.safe_dump(spec_of(table), sort_keys=False))
        lake.create_table(spec_path)
        started = time.perf_counter()
        lake.apply(table, file=data / "base.parquet", batch_id=1)
        load_s = time.perf_counter() - started
        started = time.perf_counter()
        lake.apply(table, file=data / "batch.parquet", batch_id=2)
        batch_s = time.perf_counter() - started
        # Only batch 2's records are used later (the keys it updated and deleted).
        for name in ("base.parquet", "warmup.parquet", "versioned.parquet", "batch4.jsonl"):
            (data / name).unlink(missing_ok=True)
        tables = built_tables(home)
        tables[table] = {
            **want,
            "meta": meta,
            "generate_s": round(generate_s, 2),
            "initial_load_s": round(load_s, 2),
            "batch2_s": round(batch_s, 2),
            "built": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        marker.write_text(json.dumps({"tables": tables}, indent=2) + "\n")


# --- the reads ----------------------------------------------------------------------------------------
def read_cases(
    home: Path, truths: dict[str, Truth], reps: int, seed: int = 11
) -> tuple[dict[str, list[Case]], dict[str, Any]]:
    """The read measurements on the big table with their checks, and what they read (keys, batches)."""
    truth = truths[TABLE]
    current = truth.rows()
    last = truth.last_batch()
    batch2 = pq.read_table(home / "data" / TABLE / "batch.parquet", columns=["op", KEY])
    alive = pc.is_in(batch2[KEY], value_set=current[KEY].combine_chunks())
    updated = batch2.filter(pc.and_(pc.equal(batch2["op"], "+U"), alive))[KEY].to_numpy()
    deleted = batch2.filter(pc.and_(pc.equal(batch2["op"], "-D"), pc.invert(alive)))[KEY].to_numpy()
    rng = np.random.default_rng(seed)
    present_keys = [int(k) for k in rng.choice(updated, reps, replace=len(updated) < reps)]
    missing_keys = [int(k) for k in rng.choice(deleted, reps, replace=len(deleted) < reps)]
    at_batch1 = truth.rows(at_batch=1)
    log2 = truth.changelog(2)
    log1 = truth.changelog(1)
    log1_first, log1_records = log1.slice(0, 10), log1.num_rows
    del log1
    info = {
        "present_keys": present_keys,
        "missing_keys": missing_keys,
        "missing_keys_were_at_batch_1": all(key_rows(at_batch1, k) for k in missing_keys),
        "missing_keys_absent_now": not any(key_rows(current, k) for k in missing_keys),
        "rows_now": current.num_rows,
        "rows_at_batch_1": at_batch1.num_rows,
        "last_batch": last,
        "changelog_records_batch_2": log2.num_rows,
        "changelog_records_batch_1": log1_records,
    }
    jsonl = ["--format", "jsonl"]
    status_expected = {
        name: {
            "exists": True,
            "last_batch": t.last_batch(),
            "rows": current.num_rows if name == TABLE else t.row_count(),
            "snapshots": len(t.batch_snapshots()),
            "pending_batches": 0,
        }
        for name, t in truths.items()
    }
    cases = {
        "lookup": [
            Case(["lookup", TABLE, f"{KEY}={k}", *jsonl], rows_check(key_rows(current, k)))
            for k in present_keys
        ],
        "lookup_missing": [
            Case(["lookup", TABLE, f"{KEY}={k}", *jsonl], rows_check(key_rows(current, k)))
            for k in missing_keys
        ],
        "scan_limit": [
            Case(["scan", TABLE, "--limit", "10", *jsonl], rows_check(as_rows(first_by_key(current, 10))))
        ]
        * reps,
        "scan_at_batch": [
            Case(
                ["scan", TABLE, "--at-batch", "1", "--limit", "10", *jsonl],
                rows_check(as_rows(first_by_key(at_batch1, 10))),
            )
        ]
        * reps,
        "changelog_batch": [
            Case(
                ["changelog", TABLE, "--from-batch", "2", "--to-batch", "2", *jsonl],
                rows_check(as_rows(log2)),
            )
        ]
        * reps,
        "changelog_initial_limit": [
            Case(
                ["changelog", TABLE, "--from-batch", "1", "--to-batch", "1", "--limit", "10", *jsonl],
                rows_check(as_rows(log1_first)),
            )
        ]
        * reps,
        "status": [Case(["status", *jsonl], status_check(status_expected))] * reps,
    }
    return cases, info


READ_LABELS = {
    "lookup": "lookup, key present (updated in batch 2)",
    "lookup_missing": "lookup, key deleted in batch 2",
    "scan_limit": "scan --limit 10",
    "scan_at_batch": "scan --at-batch 1 --limit 10",
    "changelog_batch": "changelog --from-batch 2 --to-batch 2",
    "changelog_initial_limit": "changelog --from/--to-batch 1 --limit 10",
    "status": "status",
}


def prefix_lookup_note() -> str | None:
    """Why the bench table has no prefix lookup (None if it had one)."""
    from changelake.spec import TableSpec

    spec = TableSpec.from_dict(SPEC)
    physical = [k for k in spec.primary_key if k not in spec.partition_keys]
    if list(spec.bucket_key) == physical:
        return (
            f"not measured: the bench table's bucket key {list(spec.bucket_key)} is its whole primary key, "
            "so it has no bucket-key prefix (changelake refuses a prefix lookup on it, as Fluss does)"
        )
    return None


# --- the applies --------------------------------------------------------------------------------------
class Batches:
    """100-record batches of bench_data's shape (70% updates, 20% inserts, 10% deletes of distinct keys)
    over a table's live keys, landed as ``<landing>/<table>/<id>.parquet``."""

    def __init__(self, home: Path, truth: Truth, seed: int):
        self.home = home
        self.truth = truth
        self.alive = truth.keys()
        self.next_key = int(self.alive.max()) + 1 if len(self.alive) else 0
        self.rng = np.random.default_rng(seed)

    def land(self, size: int = APPLY_RECORDS) -> tuple[int, pa.Table]:
        """Land the landing writer's next batch; the table batch id it will commit as, and its records."""
        batch_id, seq = self.truth.last_batch() + 1, self.truth.last_landed() + 1
        records = change_batch(self.alive, self.next_key, size, self.rng)
        directory = self.home / "landing" / self.truth.name
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f".{seq}.parquet.tmp"  # not a batch name until renamed
        pq.write_table(records, tmp)
        tmp.replace(directory / f"{seq}.parquet")
        return batch_id, records

    def applied(self, records: pa.Table) -> None:
        """Track the live keys after ``records`` committed."""
        ops, keys = records["op"], records[KEY]
        gone = keys.filter(pc.equal(ops, "-D")).to_numpy()
        added = keys.filter(pc.equal(ops, "+I")).to_numpy()
        self.alive = np.concatenate([np.setdiff1d(self.alive, gone), added])
        self.next_key = max(self.next_key, int(added.max()) + 1 if len(added) else 0)


def apply_runs(
    label: str,
    table: str,
    truth: Truth,
    batches: Batches,
    count: int,
    cli: Path,
    env: dict[str, str],
    after: Callable[[int], float | None] | None = None,
) -> dict[str, Any]:
    """Land and apply ``count`` batches one by one, each a fresh ``changelake apply <table>`` process.
    Besides the CLI's counts, checks with pyiceberg that the batch committed and the row count moved by
    inserts minus deletes. ``after`` (warm path) waits for the endpoint's views and returns how long."""
    n_upd, n_ins, n_del = split(APPLY_RECORDS)
    results = []
    for _ in range(count):
        rows_before = truth.row_count()
        batch_id, records = batches.land()
        print(f"== {label}: {table} batch {batch_id} ({APPLY_RECORDS} records)", file=sys.stderr, flush=True)
        result = measure(
            f"{label} {table} batch {batch_id}",
            [Case(["apply", table], apply_check(batch_id, n_ins, n_upd, n_del))],
            cli,
            env,
            quiet=True,
            progress_lines=60,
        )
        truth.reload()
        rows_after = truth.row_count()
        committed = truth.last_batch() == batch_id and rows_after == rows_before + n_ins - n_del
        if result["ok"] and not committed:
            result["ok"] = False
            result["failures"].append(
                {
                    "problem": f"table after the apply: last batch {truth.last_batch()}, rows {rows_after} "
                    f"(expected batch {batch_id}, rows {rows_before + n_ins - n_del})"
                }
            )
        if truth.last_batch() == batch_id:
            batches.applied(records)
        entry = {
            "batch_id": batch_id,
            "seconds": result["median_s"],
            "ok": result["ok"],
            "load_1m_before": result["load_1m_before"],
        }
        if after is not None and truth.last_batch() == batch_id:
            # Waited from after the pyiceberg check above, not from the commit; the next timing starts only
            # once the endpoint has refreshed this table's views, so its refresh never overlaps a timing.
            entry["views_waited_s"] = after(truth.current_snapshot_id())
        if not result["ok"]:
            entry["failures"] = result["failures"]
        entry["phases"] = apply_phases(result["progress"], result["median_s"])
        entry["progress"] = result["progress"]
        print(f"   {result['median_s']:6.2f} s  ok={result['ok']}", file=sys.stderr, flush=True)
        results.append(entry)
    seconds = [r["seconds"] for r in results if r["ok"]]
    phase_medians = {}
    for key in ("decode_s", "merge_s", "rest_of_batch_s", "outside_batch_s"):
        values = [r["phases"][key] for r in results if r["ok"] and r["phases"][key] is not None]
        phase_medians[key] = round(statistics.median(values), 2) if values else None
    return {
        "command": f"changelake apply {table}",
        "records_per_batch": APPLY_RECORDS,
        "phases_median": phase_medians,
        "batches": results,
        "first_s": results[0]["seconds"] if results else None,
        "subsequent": summarize(seconds[1:]),
        **summarize(seconds),
        "ok": all(r["ok"] for r in results),
    }


def sql_delete_runs(
    table: str,
    truth: Truth,
    batches: Batches,
    count: int,
    cli: Path,
    env: dict[str, str],
    after: Callable[[int], float | None] | None = None,
) -> dict[str, Any]:
    """``count`` one-row ``changelake sql "DELETE FROM <table> WHERE <key> = <live key>"``, each a fresh
    process, checked as the applies are: the CLI says batch N deleted 1, pyiceberg shows batch N committed
    and one row fewer."""
    results = []
    for _ in range(count):
        key = int(batches.rng.choice(batches.alive))
        batch_id, rows_before = truth.last_batch() + 1, truth.row_count()
        # The statement the bench times: its own table and key column, and an int key (nothing spliced).
        statement = f"DELETE FROM {table} WHERE {KEY} = {key}"  # noqa: S608

        def deleted_one(stdout: str, batch_id: int = batch_id) -> str | None:
            found = SQL_DELETED.findall(stdout)
            if found != [(table, str(batch_id), "1")]:
                return f"expected 'DELETE {table}: batch {batch_id} applied; ... deleted 1', got {stdout.strip()[-300:]}"
            return None

        print(f"== warm sql: {statement}", file=sys.stderr, flush=True)
        result = measure(statement, [Case(["sql", statement], deleted_one)], cli, env, quiet=True)
        truth.reload()
        if result["ok"] and not (truth.last_batch() == batch_id and truth.row_count() == rows_before - 1):
            result["ok"] = False
            result["failures"].append(
                {"problem": f"after the delete: last batch {truth.last_batch()}, rows {truth.row_count()}"}
            )
        if truth.last_batch() == batch_id:
            batches.alive = batches.alive[batches.alive != key]
        entry = {"batch_id": batch_id, "key": key, "seconds": result["median_s"], "ok": result["ok"]}
        if after is not None and truth.last_batch() == batch_id:
            entry["views_waited_s"] = after(truth.current_snapshot_id())
        if not result["ok"]:
            entry["failures"] = result["failures"]
        entry["progress"] = result["progress"]
        print(f"   {result['median_s']:6.2f} s  ok={result['ok']}", file=sys.stderr, flush=True)
        results.append(entry)
    seconds = [r["seconds"] for r in results if r["ok"]]
    return {
        "command": f'changelake sql "DELETE FROM {table} WHERE {KEY} = <live key>"',  # noqa: S608
        "runs": results,
        "first_s": results[0]["seconds"] if results else None,
        **summarize(seconds),
        "ok": all(r["ok"] for r in results),
    }


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_answers(port: int) -> bool:
    """Whether something accepts connections on the loopback ``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def process_alive(pid: int) -> bool:
    """True for a running process (a zombie waiting for its parent to reap it is not running)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != b"Z"


def processes_of(home: Path) -> list[int]:
    """Live processes (other than this one) whose environment names ``home`` as CHANGELAKE_HOME: the
    endpoint's driver, its JVM and its Python workers inherit it."""
    needle = f"CHANGELAKE_HOME={home}".encode() + b"\0"
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{entry.name}/environ").read_bytes() + b"\0"
        except OSError:
            continue
        if needle in environ and process_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def wait_for_views(home: Path, table: str, snapshot_id: int | None, timeout: float = 120) -> float | None:
    """Seconds until the endpoint's views show ``snapshot_id`` of ``table`` (its views.json), None on timeout."""
    state = home / "spark-server" / "views.json"
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        try:
            if json.loads(state.read_text()).get(table) == snapshot_id:
                return round(time.perf_counter() - started, 2)
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    return None


@contextlib.contextmanager
def endpoint_running(home: Path) -> Iterator[dict[str, Any]]:
    """Start the endpoint (``infra/spark_server.sh start``) for ``home`` on free loopback ports; yield its
    record (ports, ``env`` for clients, ``start_s``, pids, and ``error`` when it did not start). On exit stop
    it and record ``stop_s`` and whether any process of it or its ports are left (``stopped_clean``)."""
    thrift, connect = free_port(), free_port()
    while connect == thrift:
        connect = free_port()
    server_env = clean_env(
        home, SPARK_THRIFT_HOST="127.0.0.1", SPARK_THRIFT_PORT=str(thrift), SPARK_CONNECT_PORT=str(connect)
    )
    script = str(REPO / "infra" / "spark_server.sh")
    endpoint: dict[str, Any] = {"thrift_port": thrift, "connect_port": connect}
    print(f"== starting the endpoint (Connect {connect}, Thrift {thrift})", file=sys.stderr, flush=True)
    pids: list[int] = []
    try:
        started = time.perf_counter()
        proc = subprocess.run(
            [script, "start"],
            env=server_env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        endpoint["start_s"] = round(time.perf_counter() - started, 2)
        endpoint["start_exit"] = proc.returncode
        if proc.returncode != 0:
            endpoint["error"] = (proc.stdout + proc.stderr).strip()[-1500:]
            print(f"   endpoint did not start: {endpoint['error']}", file=sys.stderr, flush=True)
        else:
            ready = json.loads((home / "spark-server" / "ready").read_text())
            pids = [int(ready["pid"]), int(ready["jvm_pid"])]
            endpoint.update(pid=pids[0], jvm_pid=pids[1], start_seconds_inside_app=ready.get("start_seconds"))
            print(f"   ready in {endpoint['start_s']} s", file=sys.stderr, flush=True)
        endpoint["env"] = server_env
        yield endpoint
    finally:
        endpoint.pop("env", None)  # not part of the report
        started = time.perf_counter()
        stop = subprocess.run(
            [script, "stop"],
            env=server_env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        endpoint["stop_s"] = round(time.perf_counter() - started, 2)
        endpoint["stop_output"] = (stop.stdout + stop.stderr).strip()[-300:]
        # The JVM's Python workers exit after their JVM: give them a moment before calling them leftovers.
        deadline = time.perf_counter() + 30
        while time.perf_counter() < deadline:
            left = sorted({*(p for p in pids if process_alive(p)), *processes_of(home)})
            ports = [p for p in (thrift, connect) if port_answers(p)]
            if not left and not ports:
                break
            time.sleep(0.5)
        endpoint["leftover_pids"] = left
        endpoint["ports_still_answering"] = ports
        endpoint["stopped_clean"] = not left and not ports


def warm_applies(
    home: Path, truths: dict[str, Truth], batches: dict[str, Batches], reps: int, cli: Path
) -> dict[str, Any]:
    """Start the endpoint on free ports, apply ``reps`` batches per table through it, stop it, and check
    that no process of it is left."""
    out: dict[str, Any] = {"tables": {}}
    with endpoint_running(home) as endpoint:
        out["endpoint"] = endpoint
        if "error" in endpoint:
            return out
        env = clean_env(home, CHANGELAKE_SPARK_REMOTE=f"sc://127.0.0.1:{endpoint['connect_port']}")
        for table, truth in truths.items():
            out["tables"][table] = apply_runs(
                "warm apply",
                table,
                truth,
                batches[table],
                reps,
                cli,
                env,
                after=lambda snap, t=table: wait_for_views(home, t, snap),
            )
        if TABLE in truths:
            out["sql_delete"] = sql_delete_runs(
                TABLE,
                truths[TABLE],
                batches[TABLE],
                reps,
                cli,
                env,
                after=lambda snap: wait_for_views(home, TABLE, snap),
            )
    return out


def cold_applies(
    home: Path, truths: dict[str, Truth], batches: dict[str, Batches], reps: int, cli: Path
) -> dict[str, Any]:
    """``reps`` batches per table through the cold path: each ``changelake apply`` starts its own JVM."""
    env = clean_env(home)
    return {
        "tables": {
            table: apply_runs("cold apply", table, truth, batches[table], reps, cli, env)
            for table, truth in truths.items()
        }
    }


# --- report -------------------------------------------------------------------------------------------
def machine_info() -> dict[str, Any]:
    """Cores, CPU, memory, versions and the commit measured (figures from a dirty tree say so)."""
    import importlib.metadata as md

    def first_line(cmd: list[str]) -> str | None:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
        except OSError:
            return None
        text = (proc.stdout or proc.stderr).strip()
        return text.splitlines()[0] if text else None

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        None,
    )
    mem_kb = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal")
    )
    # Every benchmark rewrites its result and the page rendered from it: those are not local changes.
    rendered = [":!benchmarks/results", ":!docs/benchmarks.md"]
    dirty = first_line(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no", "--", ".", *rendered]
    )
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "memory_gb": round(mem_kb / 1024 / 1024, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "java": first_line(["java", "-version"]),
        "pyspark": md.version("pyspark"),
        "pyiceberg": md.version("pyiceberg"),
        "pyarrow": md.version("pyarrow"),
        "git_commit": first_line(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]),
        "git_worktree_dirty": dirty is not None,
        "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE"),
    }


def evaluate_targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target with its median (pass/fail/n/a), the max, and ratios to the limit and the old figure."""
    warm = report.get("apply", {}).get("warm", {}).get("tables", {})
    values = {
        "lookup": report["reads"].get("lookup"),
        "scan_limit": report["reads"].get("scan_limit"),
        "status": report["reads"].get("status"),
        "apply_warm_big": warm.get(TABLE),
        "apply_warm_small": warm.get(SMALL_TABLE),
        "sql_delete_warm_big": report.get("apply", {}).get("warm", {}).get("sql_delete"),
    }
    out = []
    for key, what, limit, before in TARGETS:
        m = values[key] or {}
        median, worst = m.get("median_s"), m.get("max_s")
        status = "n/a" if median is None else ("pass" if median <= limit else "fail")
        if median is not None and not m.get("ok", True):
            status = "fail"  # a wrong answer misses the target whatever its time
        out.append(
            {
                "target": f"{what} <= {limit} s",
                "key": key,
                "median_s": median,
                "max_s": worst,
                "limit_s": limit,
                "status": status,
                "max_within_limit": None if worst is None else worst <= limit,
                "median_vs_limit": None if median is None else round(median / limit, 2),
                "issue_13_before_s": before,
                "speedup_vs_before": None if not median or before is None else round(before / median, 1),
            }
        )
    # issue 47: the endpoint's first batch after its start as fast as the later ones
    big = values["apply_warm_big"] or {}
    first, later = big.get("first_s"), (big.get("subsequent") or {}).get("median_s")
    ratio = round(first / later, 2) if first and later else None
    out.append(
        {
            "target": f"first warm batch after the endpoint's start <= {FIRST_WARM_LIMIT}x the later ones "
            "(median), big table",
            "key": "apply_warm_first_vs_later",
            "value": ratio,
            "limit": FIRST_WARM_LIMIT,
            "first_s": first,
            "later_median_s": later,
            "status": "n/a" if ratio is None else ("pass" if ratio <= FIRST_WARM_LIMIT else "fail"),
        }
    )
    return out


def print_report(report: dict[str, Any]) -> None:
    """The report as a readable table on stdout."""
    print()
    la = report["load_average"]
    print(f"machine: {report['machine']['cores']} cores, load average start {la['start']} end {la['end']}")
    t = report["table"]
    print(f"table {TABLE}: {t['rows_now']:,} rows, last batch {t['last_batch']}, {t['buckets']} buckets")
    print(f"\n{'read (fresh CLI process, big table)':44} {'median':>8} {'max':>8} {'cpu':>7}  ok")
    for key, label in READ_LABELS.items():
        m = report["reads"].get(key)
        if m:
            print(f"  {label:42} {m['median_s']:8.3f} {m['max_s']:8.3f} {m['cpu_median_s']:7.3f}  {m['ok']}")
    print(f"  {'lookup --prefix':42} {report['reads']['lookup_prefix']}")
    applies = report.get("apply", {})
    if applies:
        print(f"\n{'apply, 100 records (end to end)':44} {'first':>8} {'median':>8} {'max':>8}  ok")
        for path in ("warm", "cold"):
            for table, a in applies.get(path, {}).get("tables", {}).items():
                cells = [a.get("first_s"), a.get("median_s"), a.get("max_s")]
                shown = " ".join(f"{c:8.2f}" if c is not None else f"{'-':>8}" for c in cells)
                print(f"  {path + ' ' + table:42} {shown}  {a['ok']}")
        for table, r in applies.get("cold_vs_warm", {}).items():
            print(f"  cold / warm median, {table}: {r}")
        print("  where it went (medians, s): decode / merge / rest of the batch / outside the batch")
        for path in ("warm", "cold"):
            for table, a in applies.get(path, {}).get("tables", {}).items():
                ph = a["phases_median"]
                keys = ("decode_s", "merge_s", "rest_of_batch_s", "outside_batch_s")
                print(f"    {path + ' ' + table:40} " + " / ".join(str(ph[k]) for k in keys))
        d = applies.get("warm", {}).get("sql_delete")
        if d:
            print(
                f"  {'warm sql 1-row DELETE ' + TABLE:42} {d['first_s'] or 0:8.2f} {d['median_s'] or 0:8.2f} {d['max_s'] or 0:8.2f}  {d['ok']}"
            )
        ep = applies.get("warm", {}).get("endpoint")
        if ep:
            print(
                f"  endpoint: start {ep.get('start_s')} s, stop {ep.get('stop_s')} s, "
                f"clean stop {ep.get('stopped_clean')}"
            )
    print("\ntargets (median; issue 13's figure before)")
    for t in report["targets"]:
        if "value" in t:  # a ratio
            shown, before = f"{t['value']}x (first {t['first_s']} s, later {t['later_median_s']} s)", ""
            print(f"  {t['status'].upper():5} {t['target']:68} {shown}")
            continue
        shown = "-" if t["median_s"] is None else f"{t['median_s']:.3f} s (max {t['max_s']:.3f})"
        before = "" if t["issue_13_before_s"] is None else f"  before {t['issue_13_before_s']} s"
        print(f"  {t['status'].upper():5} {t['target']:68} {shown}{before}")
    print_checks(report["checks"])


def check(checks: list[dict[str, Any]], name: str, ok: bool, detail: str) -> None:
    """Record one correctness check of the run (any failed check makes the exit status 1)."""
    checks.append({"check": name, "ok": bool(ok), "detail": detail})


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000, help="rows of the big table (batch 1)")
    ap.add_argument("--batch", type=int, default=10_000, help="records of batch 2 (70/20/10)")
    ap.add_argument("--small-rows", type=int, default=10_000, help="rows of the small table (applies only)")
    ap.add_argument("--reps", type=int, default=5, help="runs per read; warm batches per table")
    ap.add_argument("--cold-reps", type=int, default=3, help="cold-path batches per table")
    ap.add_argument("--no-warm", action="store_true", help="skip the warm endpoint and its applies")
    ap.add_argument("--no-cold", action="store_true", help="skip the cold-path applies")
    ap.add_argument("--home", type=Path, help="build the tables here, or reuse them (kept after the run)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary home (its path is printed)")
    ap.add_argument("--chunk", type=int, default=1_000_000, help="records per generated chunk")
    ap.add_argument("--cli", type=Path, default=DEFAULT_CLI, help="the changelake executable to time")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "latency.json")
    ap.add_argument("--build-only", metavar="PLAN", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Build or reuse the tables, measure, check, write the report; 1 if any check failed."""
    args = parse_args(argv)
    if args.build_only:
        build(args.home.resolve(), json.loads(args.build_only), args.chunk)
        return 0
    load_start = os.getloadavg()
    started = time.perf_counter()
    when = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    machine = machine_info()
    # As `make setup` leaves a clone: the package's bytecode compiled (stale .pyc files recompile per run).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "src")], check=False)
    home = (args.home or Path(tempfile.mkdtemp(prefix="changelake-latency-"))).resolve()
    home.mkdir(parents=True, exist_ok=True)
    built, built_now = ensure_built(home, build_plan(args), args.chunk)
    truths = {name: Truth(home, name) for name in build_plan(args)}
    checks: list[dict[str, Any]] = []

    print("== reference reads (pyiceberg + pyarrow)", file=sys.stderr, flush=True)
    cases, info = read_cases(home, truths, args.reps)
    check(
        checks,
        "missing keys existed at batch 1 and are deleted now",
        info["missing_keys_were_at_batch_1"] and info["missing_keys_absent_now"],
        str(info["missing_keys"]),
    )
    check(
        checks,
        "the table has two or more batch snapshots",
        info["last_batch"] >= 2,
        f"last batch {info['last_batch']}",
    )
    env = clean_env(home)
    reads = {name: measure(name, case_list, args.cli, env) for name, case_list in cases.items()}
    reads["lookup_prefix"] = prefix_lookup_note()
    for name, m in reads.items():
        if isinstance(m, dict):
            detail = "; ".join(f["problem"] for f in m["failures"])[:500] or f"{len(m['runs'])} run(s)"
            check(checks, f"{name} output matches the pyarrow read", m["ok"], detail)

    apply_report: dict[str, Any] = {}
    apply_truths = {name: truths[name] for name in (TABLE, SMALL_TABLE) if name in truths}
    batches = {name: Batches(home, t, seed=100 + i) for i, (name, t) in enumerate(apply_truths.items())}
    if not args.no_warm:
        warm = warm_applies(home, apply_truths, batches, args.reps, args.cli)
        apply_report["warm"] = warm
        ep = warm["endpoint"]
        check(
            checks,
            "warm endpoint started",
            ep.get("start_exit") == 0,
            ep.get("error", f"{ep.get('start_s')} s"),
        )
        check(
            checks,
            "warm endpoint stopped, no process or port left",
            ep.get("stopped_clean", False),
            f"pids {ep.get('leftover_pids')}, ports {ep.get('ports_still_answering')}",
        )
        for table, a in warm["tables"].items():
            check(checks, f"warm applies on {table} committed", a["ok"], f"{len(a['batches'])} batch(es)")
        if "sql_delete" in warm:
            d = warm["sql_delete"]
            check(checks, f"warm sql DELETEs on {TABLE} committed", d["ok"], f"{len(d['runs'])} statement(s)")
    if not args.no_cold:
        apply_report["cold"] = cold = cold_applies(home, apply_truths, batches, args.cold_reps, args.cli)
        for table, a in cold["tables"].items():
            check(checks, f"cold applies on {table} committed", a["ok"], f"{len(a['batches'])} batch(es)")
    if "warm" in apply_report and "cold" in apply_report:
        apply_report["cold_vs_warm"] = {
            table: (
                round(cold_m / warm_m, 2)
                if (cold_m := apply_report["cold"]["tables"][table]["median_s"])
                and (warm_m := apply_report["warm"]["tables"].get(table, {}).get("median_s"))
                else None
            )
            for table in apply_report["cold"]["tables"]
        }

    big = built[TABLE]
    report: dict[str, Any] = {
        "when": when,
        "command": shlex.join([".venv/bin/python", "benchmarks/bench_latency.py", *(argv or sys.argv[1:])]),
        "machine": machine,
        "load_average": {
            "start": [round(x, 2) for x in load_start],
            "end": [round(x, 2) for x in os.getloadavg()],
        },
        "reps": args.reps,
        "table": {
            "name": TABLE,
            "rows": big["rows"],
            "buckets": SPEC["options"]["bucket.num"],
            "batch2_records": big["batch"],
            "initial_load_s": big["initial_load_s"],
            "batch2_s": big["batch2_s"],
            "built_this_run": TABLE in built_now,
            **info,
        },
        "small_table": (
            {"name": SMALL_TABLE, **{k: built[SMALL_TABLE][k] for k in ("rows", "batch", "initial_load_s")}}
            if SMALL_TABLE in built
            else None
        ),
        "reads": reads,
        "apply": apply_report,
        "checks": checks,
        "total_s": round(time.perf_counter() - started, 1),
    }
    report["targets"] = evaluate_targets(report)
    return finish(report, args.out, print_report, home, keep=args.home or args.keep, what="home")


if __name__ == "__main__":
    sys.exit(main())
