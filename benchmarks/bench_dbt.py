"""dbt and SQL clients on the warm SQL endpoint, beside ``changelake dbt build``, in one run (issue 16's targets).

    make bench-dbt                                                    # demo tables, 2 session + 3 thrift builds
    .venv/bin/python benchmarks/bench_dbt.py --session-reps 1 --thrift-reps 2   # shorter

The tables are the demo's: the specs of ``examples/tables`` in a new home, two ``changelake datagen`` batches
per table at the profiles' sizes, applied by one ``changelake apply`` (cold). Then, on that same data:

1. ``changelake dbt build`` ``--session-reps`` times: the ``session`` target, what a dbt user ran before the
   endpoint (a Spark JVM, the views of every table, dbt in that process). Its models go to the schema
   ``analytics_session`` so they can be compared with the endpoint's.
2. The endpoint (``infra/spark_server.sh start`` on free loopback ports), timed until both ports answer.
3. Plain ``dbt build --target thrift`` in ``dbt_project/``, as a dbt user runs it, ``--thrift-reps`` times:
   the first build after the start, then the later ones. The session builds keep their target directory
   across their runs (the first parses the project in full, the later ones partially); the thrift builds use
   the project's own ``target/``, as a user's do, where the endpoint's start parsed the project.
4. Every model the thrift build wrote equals the session build's (``EXCEPT ALL`` both ways, over PyHive).
5. Point queries over PyHive (``where order_id = k`` on ``changelake.shop.orders``): ``--queries`` keys on
   one connection, and a few with a new connection each (what dbt does per node); each answer is checked
   against pyiceberg's read of the table.
6. Commit to visible: a new batch of ``shop.orders`` applied through the warm path (``changelake apply`` with
   ``CHANGELAKE_SPARK_REMOTE``); the time from the command's exit until a PyHive query sees the batch, and
   the rows it then sees equal pyiceberg's.
7. ``infra/spark_server.sh stop``: timed, and no process of the endpoint or port may be left.

Any failed check (a failed build, a model that differs, a wrong answer, a leftover process) makes the exit
status 1. Writes ``benchmarks/results/dbt.json`` and prints a table; ``render_results.py`` puts it in
``docs/benchmarks.md``.
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

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:  # imported from the tests, not run as a script
    sys.path.insert(0, str(HERE))

from bench_latency import (  # noqa: E402
    DEFAULT_CLI,
    Truth,
    check,
    clean_env,
    endpoint_running,
    machine_info,
    run_cli,
    summarize,
)
from bench_report import finish, print_checks  # noqa: E402

from changelake.config import load_settings  # noqa: E402
from changelake.identifiers import quote  # noqa: E402
from changelake.runtime.endpoint_auth import hive_login, thrift_env  # noqa: E402

TABLE = "shop.orders"  # the table of the point queries and of the commit-to-visible batch
SESSION_SCHEMA = "analytics_session"
THRIFT_SCHEMA = "analytics"
# (key, what, limit): build times are ratios to the session build's median, the point query is seconds.
TARGETS = [
    ("thrift_first", "first dbt build --target thrift after the start / changelake dbt build", 0.5),
    ("thrift_later", "later dbt build --target thrift (median) / changelake dbt build", 0.5),
    ("point_query", "point query over PyHive (median, open connection), seconds", 1.0),
]


def build_results(target: Path) -> dict[str, Any]:
    """What a build's ``run_results.json`` says: node count, statuses, models, and dbt's own elapsed time."""
    results = json.loads((target / "run_results.json").read_text())
    nodes = results["results"]
    statuses: dict[str, int] = {}
    for node in nodes:
        statuses[node["status"]] = statuses.get(node["status"], 0) + 1
    return {
        "nodes": len(nodes),
        "statuses": statuses,
        "ok": bool(nodes) and all(n["status"] in ("pass", "success") for n in nodes),
        "models": sorted(n["unique_id"].split(".")[-1] for n in nodes if n["unique_id"].startswith("model.")),
        "dbt_elapsed_s": round(results.get("elapsed_time", 0.0), 2),
    }


def timed_build(label: str, cmd: list[str], env: dict[str, str], cwd: Path, target: Path) -> dict[str, Any]:
    """Run one build as a new process, timed from start to exit; its results from ``target``."""
    (target / "run_results.json").unlink(missing_ok=True)
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=1800, check=False)
    seconds = round(time.perf_counter() - started, 2)
    run: dict[str, Any] = {"seconds": seconds, "exit": proc.returncode}
    try:
        run.update(build_results(target))
    except (OSError, ValueError, KeyError) as e:
        run.update(ok=False, error=f"no run results: {e}")
    if proc.returncode != 0:
        run["ok"] = False
        run["output_tail"] = (proc.stdout + proc.stderr).strip()[-2000:]
    print(
        f"   {seconds:7.2f} s  {label}  ok={run['ok']} ({run.get('statuses')})", file=sys.stderr, flush=True
    )
    return run


def session_builds(home: Path, reps: int, cli: Path) -> list[dict[str, Any]]:
    """``changelake dbt build`` (session target) ``reps`` times, into ``analytics_session``."""
    from changelake.config import load_settings
    from changelake.runtime.dbt_runner import dbt_dirs

    target = dbt_dirs(load_settings(home=home, tables_dir=home / "tables"))["target"]
    env = clean_env(home, CHANGELAKE_DBT_SCHEMA=SESSION_SCHEMA)
    print(f"== changelake dbt build (session target), {reps} run(s)", file=sys.stderr, flush=True)
    return [
        timed_build("changelake dbt build", [str(cli), "dbt", "build"], env, REPO, target)
        for _ in range(reps)
    ]


def thrift_builds(home: Path, endpoint: dict[str, Any], reps: int) -> list[dict[str, Any]]:
    """Plain ``dbt build --target thrift`` in the project directory ``reps`` times."""
    dbt = Path(sys.executable).with_name("dbt")
    # The project's own target/ (a user's run writes there), logs beside the benchmark's home.
    target, logs = REPO / "dbt_project" / "target", home / "bench-dbt" / "thrift-logs"
    env = {**endpoint["env"], "DBT_PROFILES_DIR": ".", "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
    env.update(thrift_env(load_settings(home=Path(endpoint["env"]["CHANGELAKE_HOME"]))))
    cmd = [str(dbt), "build", "--target", "thrift", "--log-path", str(logs)]
    print(f"== dbt build --target thrift, {reps} run(s)", file=sys.stderr, flush=True)
    target.mkdir(parents=True, exist_ok=True)
    return [
        timed_build("dbt build --target thrift", cmd, env, REPO / "dbt_project", target) for _ in range(reps)
    ]


def hive_cursor(endpoint: dict[str, Any]):
    """A new PyHive connection's cursor to the endpoint."""
    from pyhive import hive

    login = hive_login(load_settings(home=Path(endpoint["env"]["CHANGELAKE_HOME"])))
    return hive.connect(host="127.0.0.1", port=int(endpoint["thrift_port"]), **login).cursor()


def query(cursor, sql: str) -> list[tuple]:
    cursor.execute(sql)
    return cursor.fetchall()


def relation(schema: str, name: str) -> str:
    """``schema.name`` for Spark SQL, each part validated and quoted (model names come from dbt's results);
    the queries built from it are marked ``noqa: S608`` for that reason."""
    return f"{quote(schema)}.{quote(name)}"


# The demo's orders table and its changelog, as Iceberg tables in the endpoint's `changelake` catalog.
VIEW = f"{quote('changelake')}.{relation('shop', 'orders')}"
CHANGELOG_VIEW = f"{quote('changelake')}.{relation('shop', 'orders__changelog')}"


def compare_models(cursor, models: list[str]) -> dict[str, Any]:
    """Rows of each model in the thrift schema against the session schema, both ways (EXCEPT ALL)."""
    out = {}
    for model in models:
        try:
            a, b = relation(THRIFT_SCHEMA, model), relation(SESSION_SCHEMA, model)
            [(rows,)] = query(cursor, f"select count(*) from {a}")  # noqa: S608
            [(only_a,)] = query(
                cursor,
                f"select count(*) from (select * from {a} except all select * from {b})",  # noqa: S608
            )
            [(only_b,)] = query(
                cursor,
                f"select count(*) from (select * from {b} except all select * from {a})",  # noqa: S608
            )
            out[model] = {
                "rows": rows,
                "only_thrift": only_a,
                "only_session": only_b,
                "equal": not only_a and not only_b,
            }
        except Exception as e:  # a model missing on one side (or a bad name) fails the check, not the run
            out[model] = {"error": f"{type(e).__name__}: {str(e)[:300]}", "equal": False}
    return out


def point_queries(endpoint: dict[str, Any], truth: Truth, n: int, fresh: int) -> dict[str, Any]:
    """``n`` point queries on one connection (after one untimed query), ``fresh`` with a new connection each."""
    rows = truth.pk.scan(selected_fields=("order_id", "shop_id")).to_arrow().sort_by("order_id")
    step = max(1, rows.num_rows // max(n, 1))
    keys = [int(k) for k in rows.column("order_id").to_pylist()[::step][:n]]
    want = dict(zip(rows.column("order_id").to_pylist(), rows.column("shop_id").to_pylist(), strict=True))
    sql = f"select order_id, shop_id from {VIEW} where order_id = {{}}"  # noqa: S608
    cursor = hive_cursor(endpoint)
    query(cursor, sql.format(keys[0]))  # the connection's first statement
    seconds, wrong = [], []
    for key in keys:
        started = time.perf_counter()
        got = query(cursor, sql.format(key))
        seconds.append(time.perf_counter() - started)
        if got != [(key, want[key])]:
            wrong.append({"key": key, "got": [list(r) for r in got], "want": want[key]})
    fresh_seconds = []
    for key in keys[:fresh]:
        started = time.perf_counter()
        got = query(hive_cursor(endpoint), sql.format(key))
        fresh_seconds.append(time.perf_counter() - started)
        if got != [(key, want[key])]:
            wrong.append({"key": key, "got": [list(r) for r in got], "want": want[key], "connection": "new"})
    return {
        "sql": sql.format("k"),
        "open_connection": {**summarize(seconds), "queries": len(seconds)},
        "new_connection": {**summarize(fresh_seconds), "queries": len(fresh_seconds)},
        "wrong_answers": wrong,
    }


def commit_to_visible(home: Path, endpoint: dict[str, Any], truth: Truth, cli: Path) -> dict[str, Any]:
    """Land and apply one batch of ``shop.orders`` through the warm path; seconds from the apply's exit
    until PyHive sees its batch id, and whether the rows then seen are pyiceberg's."""
    env = clean_env(home)
    landed = run_cli(cli, ["datagen", TABLE, "--batches", "1", "--records", "40", "--json"], env)
    if landed.returncode != 0:
        return {"ok": False, "error": landed.stderr.strip()[-1000:]}
    batch_id = json.loads(landed.stdout)["landed"][0]["batch_id"]
    warm = clean_env(home, CHANGELAKE_SPARK_REMOTE=f"sc://127.0.0.1:{endpoint['connect_port']}")
    applied = run_cli(cli, ["apply", TABLE], warm)
    exited = time.perf_counter()
    out: dict[str, Any] = {"batch_id": batch_id, "apply_s": round(applied.seconds, 2)}
    if applied.returncode != 0:
        return {**out, "ok": False, "error": applied.stderr.strip()[-1000:]}
    cursor = hive_cursor(endpoint)
    seen = None
    while time.perf_counter() - exited < 120:
        [(seen,)] = query(cursor, f"select max(_batch_id) from {CHANGELOG_VIEW}")  # noqa: S608
        if seen == batch_id:
            break
        time.sleep(0.05)
    out["visible_after_s"] = round(time.perf_counter() - exited, 2) if seen == batch_id else None
    truth.reload()
    want = sorted(truth.pk.scan(selected_fields=("order_id",)).to_arrow().column("order_id").to_pylist())
    got = sorted(k for (k,) in query(cursor, f"select order_id from {VIEW}"))  # noqa: S608
    out["rows_match"] = got == want
    out["ok"] = seen == batch_id and got == want and truth.pk.current_snapshot() is not None
    return out


def prepare(home: Path, cli: Path) -> dict[str, Any]:
    """The demo tables in ``home``: specs copied, two datagen batches per table, one cold apply."""
    tables = home / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    for spec in (REPO / "examples" / "tables").glob("*.yaml"):
        shutil.copy(spec, tables)
    env = clean_env(home)
    print("== the demo tables: changelake datagen --batches 2; changelake apply", file=sys.stderr, flush=True)
    landed = run_cli(cli, ["datagen", "--batches", "2", "--json"], env)
    applied = run_cli(cli, ["apply"], env) if landed.returncode == 0 else landed
    return {
        "tables": sorted(p.stem for p in tables.glob("*.yaml")),
        "batches_landed": len(json.loads(landed.stdout)["landed"]) if landed.returncode == 0 else 0,
        "apply_s": round(applied.seconds, 2),
        "ok": landed.returncode == 0 and applied.returncode == 0,
        "error": None if applied.returncode == 0 else applied.stderr.strip()[-1500:],
    }


def build_summary(report: dict[str, Any]) -> dict[str, Any]:
    """The builds that passed, summarized: the session builds, the first thrift build after the start (None if
    it failed), the later thrift builds, and dbt's own elapsed time (median) of each kind."""
    session, thrift = report["session_builds"], report["thrift_builds"]
    return {
        "session_build": summarize([r["seconds"] for r in session if r["ok"]]),
        "thrift_first_s": thrift[0]["seconds"] if thrift and thrift[0]["ok"] else None,
        "thrift_later": summarize([r["seconds"] for r in thrift[1:] if r["ok"]]),
        "median_dbt_elapsed_s": {
            kind: statistics.median([r["dbt_elapsed_s"] for r in report[kind] if r["ok"]] or [0])
            for kind in ("session_builds", "thrift_builds")
        },
    }


def evaluate_targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target: the measured value, its limit, pass/fail (n/a when it could not be measured)."""
    builds = build_summary(report)
    session, first = builds["session_build"]["median_s"], builds["thrift_first_s"]
    later = builds["thrift_later"]["median_s"]
    point = (report.get("point_queries") or {}).get("open_connection", {}).get("median_s")
    values = {
        "thrift_first": round(first / session, 2) if first and session else None,
        "thrift_later": round(later / session, 2) if later and session else None,
        "point_query": point,
    }
    return [
        {
            "key": key,
            "target": f"{what} <= {limit}",
            "value": values[key],
            "limit": limit,
            "status": "n/a" if values[key] is None else ("pass" if values[key] <= limit else "fail"),
        }
        for key, what, limit in TARGETS
    ]


def print_report(report: dict[str, Any]) -> None:
    """The report as a readable table on stdout."""
    print()
    la = report["load_average"]
    print(f"machine: {report['machine']['cores']} cores, load average start {la['start']} end {la['end']}")
    print(
        f"demo tables: {', '.join(report['data']['tables'])}; cold apply of the demo batches {report['data']['apply_s']} s"
    )
    print(f"\n{'build':44} {'seconds':>8} {'dbt says':>9} {'nodes':>6}  ok")
    for kind, label in (
        ("session_builds", "changelake dbt build"),
        ("thrift_builds", "dbt build --target thrift"),
    ):
        for i, r in enumerate(report[kind]):
            print(
                f"  {label + f' #{i + 1}':42} {r['seconds']:8.2f} {r.get('dbt_elapsed_s', 0):9.2f} {r.get('nodes', 0):6}  {r['ok']}"
            )
    ep = report.get("endpoint") or {}
    print(
        f"\nendpoint: start {ep.get('start_s')} s, stop {ep.get('stop_s')} s, clean stop {ep.get('stopped_clean')}"
    )
    pq = report.get("point_queries")
    if pq:
        o, n = pq["open_connection"], pq["new_connection"]
        print(
            f"point query, open connection: median {o['median_s']} s, max {o['max_s']} s ({o['queries']} keys)"
        )
        print(
            f"point query, new connection:  median {n['median_s']} s, max {n['max_s']} s ({n['queries']} keys)"
        )
    cv = report.get("commit_to_visible")
    if cv:
        print(
            f"warm apply of batch {cv.get('batch_id')}: {cv.get('apply_s')} s; visible over PyHive {cv.get('visible_after_s')} s after"
        )
    print("\ntargets")
    for t in report["targets"]:
        print(f"  {t['status'].upper():5} {t['target']:82} {t['value']}")
    print_checks(report["checks"])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--session-reps", type=int, default=2, help="changelake dbt build runs (session target)")
    ap.add_argument(
        "--thrift-reps", type=int, default=3, help="dbt build --target thrift runs (first + later)"
    )
    ap.add_argument("--queries", type=int, default=20, help="point queries on one connection")
    ap.add_argument("--fresh-queries", type=int, default=5, help="point queries with a new connection each")
    ap.add_argument("--keep", action="store_true", help="keep the temporary home (its path is printed)")
    ap.add_argument("--cli", type=Path, default=DEFAULT_CLI, help="the changelake executable")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "dbt.json")
    args = ap.parse_args(argv)
    if args.session_reps < 1 or args.thrift_reps < 2:
        ap.error("--session-reps must be >= 1 and --thrift-reps >= 2 (a first build and a later one)")
    return args


def main(argv: list[str] | None = None) -> int:
    """Prepare, measure, check, write the report; 1 if any check failed."""
    args = parse_args(argv)
    load_start = os.getloadavg()
    started = time.perf_counter()
    when = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    machine = machine_info()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "src")], check=False)
    home = Path(tempfile.mkdtemp(prefix="changelake-bench-dbt-")).resolve()
    checks: list[dict[str, Any]] = []
    report: dict[str, Any] = {
        "when": when,
        "command": shlex.join([".venv/bin/python", "benchmarks/bench_dbt.py", *(argv or sys.argv[1:])]),
        "machine": machine,
        "session_builds": [],
        "thrift_builds": [],
    }
    report["data"] = data = prepare(home, args.cli)
    check(
        checks,
        "demo tables landed and applied",
        data["ok"],
        data["error"] or f"{data['batches_landed']} batches",
    )
    if data["ok"]:
        report["session_builds"] = session_builds(home, args.session_reps, args.cli)
        with endpoint_running(home) as endpoint:
            report["endpoint"] = endpoint
            if "error" not in endpoint:
                report["thrift_builds"] = thrift_builds(home, endpoint, args.thrift_reps)
                cursor = hive_cursor(endpoint)
                models = report["thrift_builds"][0].get("models", [])
                report["models"] = compare_models(cursor, models)
                truth = Truth(home, TABLE)
                report["point_queries"] = point_queries(endpoint, truth, args.queries, args.fresh_queries)
                report["commit_to_visible"] = commit_to_visible(home, endpoint, truth, args.cli)
        ep = report["endpoint"]
        check(
            checks, "endpoint started", ep.get("start_exit") == 0, ep.get("error", f"{ep.get('start_s')} s")
        )
        check(
            checks,
            "endpoint stopped, no process or port left",
            ep.get("stopped_clean", False),
            f"pids {ep.get('leftover_pids')}, ports {ep.get('ports_still_answering')}",
        )
    for kind in ("session_builds", "thrift_builds"):
        runs = report[kind]
        bad = [i for i, r in enumerate(runs) if not r["ok"]]
        check(
            checks,
            f"{kind.replace('_', ' ')} passed",
            bool(runs) and not bad,
            f"{len(runs)} run(s), failed {bad}",
        )
    models = report.get("models", {})
    differ = {m: c for m, c in models.items() if not c["equal"]}
    check(
        checks,
        "every model equals the session build's",
        bool(models) and not differ,
        str(differ or sorted(models)),
    )
    pq = report.get("point_queries") or {}
    check(
        checks,
        "point queries answer what pyiceberg reads",
        bool(pq) and not pq["wrong_answers"],
        str(pq.get("wrong_answers"))[:500],
    )
    cv = report.get("commit_to_visible") or {}
    check(
        checks,
        "a warm-applied batch becomes visible whole",
        cv.get("ok", False),
        str({k: cv.get(k) for k in ("visible_after_s", "rows_match", "error")}),
    )

    report["load_average"] = {
        "start": [round(x, 2) for x in load_start],
        "end": [round(x, 2) for x in os.getloadavg()],
    }
    report["summary"] = build_summary(report)
    report["checks"] = checks
    report["targets"] = evaluate_targets(report)
    report["total_s"] = round(time.perf_counter() - started, 1)
    return finish(report, args.out, print_report, home, keep=args.keep, what="home")


if __name__ == "__main__":
    sys.exit(main())
