"""The SQL endpoint's warm-ups (:class:`changelake.runtime.server.Server` runs them at its start): Python
workers with the engine imported, SQL statements over the views and a synthetic relation (the JVM's JIT,
Spark's codegen cache, the Parquet paths), and one dbt build through the endpoint's own Thrift server. None
of them ever fails the start: a failing warm-up is reported and the start goes on."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from changelake.config import tuned
from changelake.runtime import endpoint_auth
from changelake.runtime.endpoint import Endpoint


def _import_engine(batches):
    """mapInArrow function: import the engine's modules in a Python worker, pass the batches through."""
    import changelake.engine.buckets
    import changelake.inputs.decode  # noqa: F401  (imported for its cost, once per reused worker)
    from changelake.pyworker import lazy_zip_invalidation

    lazy_zip_invalidation()

    yield from batches


def warm_kept_rows(lake, progress: Callable[[str], None] = print) -> threading.Thread:
    """Start reading every table's current data and delete files into the rows this process keeps for its
    applies (:func:`changelake.engine.buckets.keep_files`), in a thread: the first batch the endpoint applies
    after its start then merges as fast as the ones after it, which find the files the batch before them read
    or wrote. Tables whose files do not fit are left to their first batch; a table that cannot be read is
    reported and skipped.

    It also pays what only a process's first batch pays beyond reading files: the apply's and the maintenance's
    modules, and the first description of a written file for Iceberg (pyiceberg's schema check imports its
    error tables' renderer, ``rich``: ~0.1 s, a third of a warm 100-record batch), by describing one of the
    table's data files (its footer read; nothing is written)."""

    def run() -> None:
        import changelake.engine.apply
        import changelake.engine.maintain
        import changelake.inputs.decode  # noqa: F401 - the first apply's imports, paid here
        from changelake.engine.buckets import keep_files

        started, read, described = time.monotonic(), 0, False
        for name in sorted(lake.specs()):
            try:
                spec = lake.spec(name)
                table = lake.storage.pk_table(spec)
                files = lake.storage.table_files(table)
                data = [f.path for f in files if not f.is_delete]
                read += keep_files(
                    spec, dict(table.io.properties), data, [f.path for f in files if f.is_delete]
                )
                if data and not described:
                    lake.storage.to_data_files(table, data[:1])
                    described = True
            except Exception as e:  # noqa: BLE001 - a warm-up never fails the endpoint
                progress(f"[server] warm-up: {name}'s files not kept ({type(e).__name__}: {e})")
        progress(
            f"[server] warm-up: {read} table file(s) kept for applies in {time.monotonic() - started:.1f}s"
        )

    thread = threading.Thread(target=run, name="changelake-warm-kept-rows", daemon=True)
    thread.start()
    return thread


def warm_python_workers(spark, slots: int) -> None:
    """Start Python workers and import the engine in them before the first apply: the first batch applied
    through a fresh server otherwise pays ~10 s of worker start, imports and first-query planning (Spark
    reuses workers, ``spark.python.worker.reuse``, so this is paid once)."""
    spark.range(0, slots, numPartitions=slots).mapInArrow(_import_engine, "id long").collect()


WARM_MAX_BYTES = 64 * 1024 * 1024  # views larger than this are not scanned by the warm-up (seconds each)
WARM_SECONDS = 30.0  # the warm-up starts no new query after this long: it delays the ready file
WARM_ROUNDS = 3  # the JIT compiles a method after thousands of calls: one round leaves the first build slow


def warm_queries(relation: str, column: str) -> list[str]:
    """The statement shapes a dbt build sends, over one relation (a quoted, qualified name): not_null,
    unique, accepted_values and relationships tests wrapped as dbt wraps them (``count(*) as failures``), a
    unit test's union of model rows and fixture literals, and a plain projection."""
    c, v = _quoted(column), relation
    tests = [
        "select {c} from {v} where {c} is null",
        "select {c} as u, count(*) as n from {v} where {c} is not null group by {c} having count(*) > 1",
        "select {c} as value_field, count(*) as n from {v} group by {c} having {c} is null",
        "select a.{c} from (select {c} from {v} where {c} is not null) a"
        " left join (select {c} from {v}) b on a.{c} = b.{c} where b.{c} is null",
    ]
    wrap = (
        "select count(*) as failures, count(*) != 0 as should_warn, count(*) != 0 as should_error from ({}) t"
    )
    # A unit test: the model's rows beside fixture rows that are literals cast to the column types.
    unit = (
        "select cast({c} as string) as {c}, 'actual' as actual_or_expected from (select {c} from {v} limit 3) a"
        " union all select cast('1' as string) as {c}, 'expected' as actual_or_expected"
        " union all select cast(null as string) as {c}, 'expected' as actual_or_expected"
    )
    shapes = [wrap.format(t) for t in tests] + [unit, "select * from {v} limit 10"]
    return [shape.format(c=c, v=v) for shape in shapes]


def _quoted(identifier: str) -> str:
    """A Spark SQL identifier in backticks (names of registered views and their columns)."""
    return "`" + identifier.replace("`", "``") + "`"


#: The metastore database the warm-up's CREATE TABLE AS SELECT statements write into (dropped at its end).
WARM_DATABASE = "changelake_warm_up_db"


def warm_model_statements(name: str, relation: str) -> list[str]:
    """A dbt table model as dbt-spark builds it on the endpoint: drop, then CREATE TABLE AS SELECT into the
    metastore (the Hive client, the Parquet writer and the commit protocol)."""
    table = f"{_quoted(WARM_DATABASE)}.{_quoted(name)}"
    create = f"create table {table} using parquet as select * from {relation}"  # noqa: S608 - quoted names
    return [f"drop table if exists {table}", create]


#: The synthetic relation the warm-up always runs over (a temp view of the warm-up's own session, so no
#: SQL client sees it): the column types changelake tables hold, so the code the first build needs is
#: compiled even when the endpoint starts before any table exists (as ``make demo`` starts it).
WARM_SYNTHETIC = "changelake_warm_up"
WARM_SYNTHETIC_ROWS = 20_000
_SYNTHETIC_COLUMNS = (
    "id",
    "cast(id % 997 as string) as name",
    "cast(id / 7 as decimal(18, 2)) as amount",
    "cast(id as double) / 3 as score",
    "date_add(date'2026-01-01', cast(id % 365 as int)) as day",
    "timestamp_seconds(id * 61) as updated_at",
    "id % 2 = 0 as flag",
)


def warm_sql(spark, views: list[str], scratch: Path, progress=print) -> int:
    """Run the statement shapes of a dbt build, in a session of their own, so the first build after a
    start finds the JVM's JIT, Spark's codegen cache and the Parquet paths warm (it took 36 s against
    23-25 s for the builds after it): first over a small synthetic Parquet relation (:data:`WARM_SYNTHETIC`),
    then over the registered views. Views above :data:`WARM_MAX_BYTES` are skipped (their scans would delay
    the start by seconds each); a failing query is reported, never fatal. Returns the statements run."""
    import shutil

    session = spark.newSession()
    started = time.monotonic()
    relations = []
    ran = 0
    try:
        synthetic = scratch / WARM_SYNTHETIC
        session.range(0, WARM_SYNTHETIC_ROWS, 1, 2).selectExpr(*_SYNTHETIC_COLUMNS).write.mode(
            "overwrite"
        ).parquet(str(synthetic))
        ran += 1
        frame = session.read.parquet(str(synthetic))
        frame.createOrReplaceTempView(WARM_SYNTHETIC)
        relations.append((WARM_SYNTHETIC, _quoted(WARM_SYNTHETIC), "name"))
        for view in views:
            frame = session.table(f"global_temp.{_quoted(view)}")
            # The plan's size estimate: the Parquet files' bytes, known without running a job.
            size = int(frame._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())
            if size <= WARM_MAX_BYTES and frame.columns:
                relations.append((view, f"global_temp.{_quoted(view)}", frame.columns[0]))
        session.sql(f"create database if not exists {_quoted(WARM_DATABASE)}").collect()
        ran += 1
        for _round in range(WARM_ROUNDS):
            for name, relation, column in relations:
                if time.monotonic() - started > WARM_SECONDS:
                    break
                for sql in warm_queries(relation, column) + warm_model_statements(name, relation):
                    session.sql(sql).collect()
                    ran += 1
    except Exception as e:  # a cold first build is slower, not wrong
        progress(f"[server] warm-up stopped: {type(e).__name__}: {e}")
    finally:
        try:
            session.sql(f"drop database if exists {_quoted(WARM_DATABASE)} cascade").collect()
        except Exception as e:  # noqa: BLE001 - reported; the next start drops it again
            progress(f"[server] warm-up: could not drop {WARM_DATABASE}: {e}")
        shutil.rmtree(scratch, ignore_errors=True)
    progress(
        f"[server] warm-up: {ran} statement(s) over a synthetic relation and {max(0, len(relations) - 1)} "
        f"view(s) in {time.monotonic() - started:.1f}s"
    )
    return ran


#: The schema the start's dbt build writes into, dropped at its end: the users' marts are never touched.
WARM_DBT_SCHEMA = "changelake_warm_up_dbt"
WARM_DBT_TIMEOUT = 300.0  # seconds; a build still running then is killed (the start goes on without it)


def dbt_source_views(project: Path) -> set[str]:
    """The global temp views a dbt project reads: the tables of its sources in schema ``global_temp``
    (``identifier`` when set, else ``name``), from the YAML files under ``models/``."""
    import yaml

    views: set[str] = set()
    for path in sorted((project / "models").rglob("*.yml")):
        document = yaml.safe_load(path.read_text()) or {}
        for source in document.get("sources") or []:
            if str(source.get("schema", "")).lower() != "global_temp":
                continue
            views.update(str(t.get("identifier") or t["name"]) for t in source.get("tables") or [])
    return views


def warm_dbt_skipped(project: Path, views: list[str], dbt: Path | None = None) -> str | None:
    """Why :func:`warm_dbt` would not build ``project`` with these registered views: None when it would, ""
    when ``CHANGELAKE_SERVER_WARM_DBT`` is 0 (nothing to report), else the reason (dbt or the project missing,
    a source view not registered yet)."""
    if not tuned("server_warm_dbt"):
        return ""
    dbt = dbt or Path(sys.executable).with_name("dbt")
    if not dbt.exists() or not (project / "dbt_project.yml").exists():
        return f"no dbt build ({dbt} or {project}/dbt_project.yml is missing)"
    missing = sorted(dbt_source_views(project) - set(views))
    if missing:
        return f"no dbt build yet: {len(missing)} source view(s) not registered ({missing[0]}, ...)"
    return None


def warm_dbt(
    project: Path,
    endpoint: Endpoint,
    views: list[str],
    drop: Callable[[str], None],
    progress=print,
    dbt: Path | None = None,
    timeout: float = WARM_DBT_TIMEOUT,
    password: str = "",
    dbt_schema: str = "analytics",
) -> int | None:
    """Build the dbt project once through the endpoint's own Thrift server into :data:`WARM_DBT_SCHEMA`,
    then drop that schema. The JVM compiles a statement's code the first time it runs (Janino for Spark's
    generated classes, the JIT for the rest), and the synthetic warm-up can only send similar shapes; this
    sends the project's exact statements over the tables' real data, so a user's first ``dbt build --target
    thrift`` finds them compiled. Skipped (None) when ``CHANGELAKE_SERVER_WARM_DBT`` is 0, when dbt or the
    project is missing, or while any of the project's sources is not registered (``make demo`` starts the
    endpoint before its tables exist). Returns dbt's exit code; a failing build is reported, never fatal."""
    dbt = dbt or Path(sys.executable).with_name("dbt")
    skipped = warm_dbt_skipped(project, views, dbt)
    if skipped is not None:
        if skipped:
            progress(f"[server] warm-up: {skipped}")
        return None
    import subprocess
    import tempfile

    env = {
        **os.environ,
        "CHANGELAKE_DBT_TARGET": "thrift",
        "CHANGELAKE_DBT_SCHEMA": WARM_DBT_SCHEMA,
        "SPARK_THRIFT_HOST": endpoint.host,
        "SPARK_THRIFT_PORT": str(endpoint.thrift_port),
        "SPARK_THRIFT_USER": endpoint_auth.OWNER_USER,
        "SPARK_THRIFT_PASSWORD": password,
        "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
    }
    if (project / "profiles.yml").exists():
        env["DBT_PROFILES_DIR"] = str(project)
    started = time.monotonic()
    code: int | None = None
    # Beside the build, on the other core: ``dbt parse`` with the users' settings into the project's own
    # target/, so a user's first build reads dbt's partial-parse state instead of parsing in full (~1.5-2.5
    # s here). dbt keeps that state per profile (host, port, schema) and target name, so it is the state a
    # plain ``dbt build --target thrift`` against this endpoint looks for.
    parse = subprocess.Popen(
        [str(dbt), "parse", "--target", "thrift"],
        cwd=project,
        env={**env, "CHANGELAKE_DBT_SCHEMA": dbt_schema},  # the users' schema (settings.dbt_schema)
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with tempfile.TemporaryDirectory(prefix="changelake-warm-dbt-") as scratch:
        cmd = [str(dbt), "build", "--target", "thrift", "--target-path", f"{scratch}/target"]
        cmd += ["--log-path", f"{scratch}/logs"]
        try:
            drop(WARM_DBT_SCHEMA)  # left by a start that was killed mid-build
            run = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=timeout)
            code = run.returncode
            if code != 0:
                tail = [line for line in run.stdout.splitlines() if "ERROR" in line or "Error" in line][-3:]
                progress(
                    f"[server] warm-up: dbt build exited {code}: {' | '.join(tail) or run.stdout[-300:]}"
                )
        except subprocess.TimeoutExpired:
            progress(f"[server] warm-up: dbt build stopped after {timeout:.0f}s")
        except Exception as e:  # noqa: BLE001 - a cold first build is slower, not wrong
            progress(f"[server] warm-up: dbt build failed: {type(e).__name__}: {e}")
        finally:
            try:
                drop(WARM_DBT_SCHEMA)
            except Exception as e:  # noqa: BLE001 - reported; the next start drops it again
                progress(f"[server] warm-up: could not drop {WARM_DBT_SCHEMA}: {e}")
    try:
        parse.wait(timeout=max(1.0, timeout - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        parse.kill()
        parse.wait()
    progress(
        f"[server] warm-up: dbt build of {project} into {WARM_DBT_SCHEMA} (dropped) in "
        f"{time.monotonic() - started:.1f}s, exit {code}; dbt parse for {project / 'target'}: exit "
        f"{parse.returncode}"
    )
    return code
