"""The warm Spark SQL endpoint: one long-lived Spark application that serves changelake's tables over both
Spark Connect (``sc://host:port``, for Python clients and the pipeline) and the Thrift/JDBC protocol
(``jdbc:hive2://host:port/default``, for plain ``dbt --target thrift``, PyHive, beeline and BI tools).

Both servers run on the application's own SparkContext. Every session reads the PK tables and their
changelogs as Iceberg tables in the Spark catalog ``changelake`` (``changelake.<ns>.<t>``,
``changelake.<ns>.<t>__changelog``: Iceberg's Spark runtime, :mod:`changelake.runtime.jvm`), which loads a
table's current metadata at each query, so a committed batch is visible at once and a query sees a whole
batch or none of it. The one view per table is ``global_temp.<ns>__<t>__input`` (the committed landed input,
:meth:`changelake.api.ChangeLake.register_views`). dbt's own tables live in the Hive (Derby) metastore under
``$CHANGELAKE_HOME/metastore``, as with ``changelake dbt``; embedded Derby admits one JVM, so while the
endpoint runs, dbt and the quality app go through it.

Freshness of the input views: the driver polls each table's current snapshot id (one catalog read per table)
every ``poll_seconds`` and re-registers the input view of a table whose snapshot changed (built again until
the snapshot did not move while it was built). After each poll the server writes the snapshot every view
shows to ``$CHANGELAKE_HOME/spark-server/views.json``; :func:`wait_for_views` lets a client (the dbt task after
an apply) wait until the views show the tables' current snapshots.

Who uses it: ``make sql`` for dbt users and SQL clients, and ``make airflow`` / ``make demo`` for the
pipeline, whose tasks run the apply, dbt and quality apps through it (:func:`running_endpoint`) instead of
starting a JVM per task. ``changelake apply`` goes further: it hands the whole batch to this driver over a
Unix socket (:mod:`changelake.runtime.applyservice`), so the applying process needs neither pyspark nor
pyiceberg.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from changelake import privacy
from changelake.atomic import atomic_write_text
from changelake.config import TUNING, Settings, tuned
from changelake.errors import ChangelakeError
from changelake.identifiers import quote
from changelake.runtime import endpoint_auth, jvm
from changelake.runtime.applyservice import ApplyService
from changelake.runtime.endpoint import Endpoint
from changelake.runtime.warmup import (
    warm_dbt,
    warm_dbt_skipped,
    warm_kept_rows,
    warm_python_workers,
    warm_sql,
)
from changelake.spec import TableSpec
from changelake.storage.iceberg import Storage, TableState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from changelake.api import ChangeLake

DEFAULT_POLL_SECONDS = TUNING["server_poll_seconds"][1]  # CHANGELAKE_SERVER_POLL_SECONDS unset
CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
# Keys that say where the endpoint listens and what it lets in: the environment decides them, not the config
# file's spark_conf (which may still choose another HiveServer2 authentication, e.g. LDAP).
_LISTENING = (
    "spark.plugins",
    "spark.connect.grpc.binding.",
    "spark.hadoop.hive.server2.thrift.",
    "spark.sql.extensions",
    "spark.sql.runSQLOnFiles",
    "spark.driver.extraClassPath",
    "spark.driver.bindAddress",
    "spark.authenticate",
)
MAX_PIN_ATTEMPTS = 5  # a table committing faster than its views register is re-polled, not waited for
VIEW_STATE = "views.json"  # table -> snapshot id its views show, rewritten after every poll that changed it


def server_conf(settings: Settings, endpoint: Endpoint, classes: Path | None = None) -> dict[str, str]:
    """Spark settings of the server application: modest memory, both servers bound to ``endpoint``, Hive's
    scratch and operation-log directories under ``$CHANGELAKE_HOME/spark-server`` instead of /tmp; with
    ``classes`` (:func:`endpoint_auth.compiled_classes`), the endpoint's security (:func:`security_conf`)."""
    work = settings.home / "spark-server"
    hive = {
        "hive.server2.thrift.bind.host": endpoint.host,
        "hive.server2.thrift.port": str(endpoint.thrift_port),
        "hive.server2.transport.mode": "binary",
        "hive.exec.scratchdir": str(work / "hive-scratch"),
        "hive.exec.local.scratchdir": str(work / "hive-local-scratch"),
        "hive.downloaded.resources.dir": str(work / "hive-resources"),
        "hive.server2.logging.operation.log.location": str(work / "operation-logs"),
        "hive.querylog.location": str(work / "query-logs"),
        # No impersonation: with doAs (Hive's default) every operation runs as the connecting user, so each
        # Thrift session opened a metastore client of its own (a DataNucleus store over Derby) and closing
        # it tore that down: ~300 ms to open and ~300 ms to close a session, against ~45 ms and ~8 ms
        # without. Executors read and write as the endpoint's user either way (docs/sql-endpoint.md).
        "hive.server2.enable.doAs": "false",
    }
    return {
        "spark.driver.memory": "2g",
        # A runaway statement is cancelled (its tasks interrupted) after the timeout, and a result larger
        # than the cap fails the statement instead of the driver (OutOfMemoryError): issue 42.
        "spark.sql.thriftServer.queryTimeout": f"{tuned('server_statement_timeout')}s",
        "spark.sql.thriftServer.interruptOnCancel": "true",
        "spark.driver.maxResultSize": f"{tuned('server_max_result_mb')}m",
        **reserved_slot(settings.spark_master),
        # Clients' statements and the server's own work (input views, applies) in separate pools: the server's
        # pool takes the next free core first, so a reader's long query does not queue an apply behind all its
        # tasks (running tasks are not preempted: the timeout bounds those).
        "spark.scheduler.mode": "FAIR",
        "spark.scheduler.allocation.file": str(scheduler_pools(settings)),
        # Closing a Thrift session calls System.gc(): a stop-the-world full GC of ~1 s per dbt node on
        # 2 cores, unless G1 runs it as a concurrent cycle. (defaultJavaOptions: extraJavaOptions is
        # session.py's, with the Derby home and log4j config.)
        "spark.driver.defaultJavaOptions": " ".join(
            ["-XX:+ExplicitGCInvokesConcurrent", *(_auth_properties(settings) if classes else [])]
        ),
        # dbt's incremental insert_overwrite replaces only the partitions a run writes (as the dbt app sets).
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
        # Each session caches a table's file list; when dbt (in its session) rebuilds a mart, a SQL client's
        # open session would read deleted files. No cache: each query resolves the table (a metastore read).
        "spark.sql.filesourceTableRelationCacheSize": "0",
        # A statement's RPC returns when it has finished: dbt-spark polls an unfinished statement every
        # `poll_interval` (5 s), which made each dbt node wait ~5 s for a query of well under a second.
        "spark.sql.hive.thriftServer.async": "false",
        "spark.plugins": CONNECT_PLUGIN,
        "spark.connect.grpc.binding.address": endpoint.host,
        "spark.connect.grpc.binding.port": str(endpoint.connect_port),
        # HiveThriftServer2.startWithContext builds its HiveConf from the Hadoop configuration.
        **{f"spark.hadoop.{k}": v for k, v in hive.items()},
        **(security_conf(settings, endpoint, classes) if classes else {}),
    }


#: The scheduler pool of the endpoint's own jobs (view refreshes, applies over the socket).
SERVER_POOL = "changelake"


def reserved_slot(master: str) -> dict[str, str]:
    """One task slot more than ``local[n]`` asks for, and statements still split into ``n`` tasks by default:
    a reader's few long tasks (a cross join of two ranges: one task per partition, each running for minutes)
    fill the cores but not the last slot, which the server's pool takes first, so applies and view refreshes
    go on beside it. A statement that asks for more partitions can still fill every slot; the statement timeout
    bounds it. Other masters are left alone (a cluster's executors are sized there)."""
    match = re.fullmatch(r"local\[(\d+)\]", master.strip())
    if match is None:
        return {}
    cores = int(match.group(1))
    return {
        "spark.master": f"local[{cores + 1}]",
        "spark.default.parallelism": str(cores),
        "spark.sql.leafNodeDefaultParallelism": str(cores),
    }


def scheduler_pools(settings: Settings) -> Path:
    """Write the FAIR scheduler's pools (the server's own, weighted 10 with one core's minimum share, and the
    clients' default pool) into the server's directory; their file's path."""
    path = server_dir(settings) / "fairscheduler.xml"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(
        path,
        '<?xml version="1.0"?>\n<allocations>\n'
        f'  <pool name="{SERVER_POOL}"><schedulingMode>FIFO</schedulingMode><weight>10</weight>'
        "<minShare>1</minShare></pool>\n"
        '  <pool name="default"><schedulingMode>FAIR</schedulingMode><weight>1</weight>'
        "<minShare>0</minShare></pool>\n</allocations>\n",
    )
    return path


#: Where the guard records every Thrift statement's plan kinds when ``CHANGELAKE_SERVER_GUARD_RECORD=1``.
GUARD_RECORD = "guard-record.tsv"


def _auth_properties(settings: Settings) -> list[str]:
    """JVM system properties: where the authenticator and guard read the users, and HiveServer2's CUSTOM
    authentication (its provider reads a fresh HiveConf, which takes ``hive.*`` system properties); with
    ``CHANGELAKE_SERVER_GUARD_RECORD=1``, where the guard records what it checked."""
    record = [f"-Dchangelake.endpoint.guard.record={server_dir(settings) / GUARD_RECORD}"]
    return [
        f"-Dchangelake.endpoint.secrets={endpoint_auth.secrets_path(settings)}",
        "-Dhive.server2.authentication=CUSTOM",
        f"-Dhive.server2.custom.authentication.class={endpoint_auth.AUTHENTICATOR_CLASS}",
        *(record if tuned("server_guard_record") else []),
    ]


def security_conf(settings: Settings, endpoint: Endpoint, classes: Path) -> dict[str, str]:
    """What locks the endpoint down (docs/sql-endpoint.md, "Security"): Thrift logins checked by the
    changelake authenticator, every Thrift statement checked by the guard extension, no SQL on files, and in
    local mode the driver's RPC and block manager on loopback with Spark's own authentication. Spark
    Connect's token is passed in the environment (SPARK_CONNECT_AUTHENTICATE_TOKEN), not as a setting a
    ``SET`` could show."""
    conf = {
        # The authenticator and guard must be on the JVM's own class path (HiveServer2 loads them there), and
        # changelake's catalog there extends Iceberg's SparkCatalog: the pinned jars go beside them, or the
        # catalog's first use fails with NoClassDefFoundError (spark.jars are a child class loader's).
        "spark.driver.extraClassPath": os.pathsep.join(map(str, [classes, *jvm.pinned_jars(settings)])),
        "spark.sql.extensions": endpoint_auth.GUARD_CLASS,
        "spark.sql.runSQLOnFiles": "false",
        "spark.hadoop.hive.server2.authentication": "CUSTOM",
        "spark.hadoop.hive.server2.custom.authentication.class": endpoint_auth.AUTHENTICATOR_CLASS,
    }
    if settings.spark_master.startswith("local"):
        # Every socket of the JVM on loopback (the driver's RPC and block manager listen even in local mode),
        # and Spark's shared-secret authentication on them (generated per application in local mode).
        conf.update(
            {
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.driver.host": "127.0.0.1",
                "spark.authenticate": "true",
            }
        )
    return conf


def pk_state(lake: ChangeLake, spec: TableSpec) -> TableState | None:
    """The PK table's current state (snapshot id, last batch), or None if the table does not exist."""
    try:
        return Storage.state(lake.storage.pk_table(spec))
    except ChangelakeError:
        return None


def table_snapshots(lake: ChangeLake, specs: dict[str, TableSpec]) -> dict[str, int | None]:
    """Current PK snapshot id of every table in ``specs`` that exists in the catalog (one catalog read per
    table; only a commit changes the id)."""
    states = {name: pk_state(lake, spec) for name, spec in sorted(specs.items())}
    return {name: state.snapshot_id for name, state in states.items() if state is not None}


def server_dir(settings: Settings) -> Path:
    """Pid, log, ready file and view state of the endpoint."""
    return settings.home / "spark-server"


def running_endpoint(settings: Settings) -> dict[str, Any] | None:
    """The ready file of the endpoint serving ``settings.home``, if its process is alive and its Spark
    Connect port answers; else None (not started, still starting, or gone without cleaning up)."""
    try:
        info = json.loads((server_dir(settings) / "ready").read_text())
        os.kill(int(info["pid"]), 0)
        with socket.create_connection((info["host"], int(info["connect_port"])), timeout=2):
            pass
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return info


def wait_for_views(
    settings: Settings,
    timeout: float = 120.0,
    progress=print,
    current: Callable[[], dict[str, int | None]] | None = None,
) -> dict[str, int | None]:
    """Wait until the running endpoint's views show every table's current snapshot (the server polls
    about once a second); return the snapshot per table. ``current`` gives the snapshots to wait for
    (default: each table's current snapshot, read from the catalog now). Raises ChangelakeError naming the
    tables still stale after ``timeout`` seconds (a table whose views keep failing to build: see the log)."""
    if current is None:
        from changelake.api import ChangeLake

        lake = ChangeLake(settings=settings, progress=None)
        want = table_snapshots(lake, lake.specs())
    else:
        want = current()
    state = server_dir(settings) / VIEW_STATE
    started = time.monotonic()
    while True:
        try:
            shown = json.loads(state.read_text())
        except (OSError, ValueError):
            shown = {}
        stale = sorted(name for name, snap in want.items() if shown.get(name) != snap)
        if not stale:
            progress(
                f"[server] views current for {len(want)} table(s) after {time.monotonic() - started:.1f}s"
            )
            return want
        if time.monotonic() - started > timeout:
            raise ChangelakeError(
                f"the SQL endpoint's views of {', '.join(stale)} are not at the current snapshot after "
                f"{timeout:.0f}s; see {server_dir(settings) / 'server.log'}"
            )
        time.sleep(0.2)


class ViewRefresher:
    """Keeps the global temp views of every table at its current snapshot."""

    def __init__(self, lake: ChangeLake, progress=print, state_path: Path | None = None):
        self.lake = lake
        self.progress = progress
        self.state_path = state_path  # where the snapshot of every registered view is published
        self.registered: dict[str, int | None] = {}  # table -> snapshot id its views show
        self._failures: dict[str, str] = {}  # table (or "" for the whole poll) -> last failure reported
        self._published: dict[str, int | None] | None = None

    def poll(self) -> list[str]:
        """Re-register the views of tables whose snapshot changed (or that appeared); drop the views of
        tables that disappeared. Returns the tables refreshed."""
        specs = self.lake.specs()  # read once per poll: parsing the YAML specs is most of an idle poll
        current = table_snapshots(self.lake, specs)
        for name in sorted(set(self.registered) - set(current)):
            self._drop(name)
        changed = [n for n, snap in current.items() if n not in self.registered or self.registered[n] != snap]
        changed += [n for n in self._dropped_by_a_client(current) if n not in changed]
        refreshed = []
        for name in changed:
            try:
                self.refresh(specs[name])
            except Exception as e:  # one broken table must not keep the others stale; retried next poll
                self.report_failure(
                    name, f"[server] {name}: refresh failed, retrying: {type(e).__name__}: {e}"
                )
                continue
            self.clear_failure(name)
            refreshed.append(name)
        self.publish()
        return refreshed

    def _dropped_by_a_client(self, current: dict[str, int | None]) -> list[str]:
        """Tables registered at their current snapshot whose views are gone: dropped by a Spark Connect client
        (the guard refuses it to every Thrift user), registered again by this poll."""
        expected = {name: _table_views(name) for name in current if name in self.registered}
        if not expected:
            return []
        present = {t.name for t in self.lake.spark.catalog.listTables("global_temp")}
        gone = [name for name, views in expected.items() if not set(views) <= present]
        for name in gone:
            self.progress(f"[server] {name}: a view was dropped by a client; registering it again")
        return gone

    def publish(self) -> None:
        """Write which snapshot every view shows (atomically: a reader sees the old state or the new)."""
        if self.state_path is None or self._published == self.registered:
            return
        tmp = self.state_path.with_name(self.state_path.name + ".tmp")
        tmp.write_text(json.dumps(self.registered, indent=2, sort_keys=True) + "\n")
        tmp.replace(self.state_path)
        self._published = dict(self.registered)

    def report_failure(self, key: str, message: str) -> None:
        """Report a failure once, not on every poll while it lasts."""
        if self._failures.get(key) != message:
            self._failures[key] = message
            self.progress(message)

    def clear_failure(self, key: str) -> None:
        self._failures.pop(key, None)

    def refresh(self, spec: TableSpec) -> int | None:
        """Register the table's views and return the snapshot id they show.

        Pinned: if the table committed while its view was being built, it is built again, so it names the
        batch views.json says (bounded; a table still moving is caught by the next poll).
        """
        name = spec.full_name
        started = time.monotonic()
        for _attempt in range(MAX_PIN_ATTEMPTS):
            before = pk_state(self.lake, spec)
            frames = self.frames(spec)
            after = pk_state(self.lake, spec)
            if after == before:
                break
        for view, frame in frames.items():
            frame.createOrReplaceGlobalTempView(view)
        snap = after.snapshot_id if after else None
        self.registered[name] = snap
        batch = after.last_batch if after else 0
        self.progress(
            f"[server] {name}: views at batch {batch} (snapshot {snap}) in {time.monotonic() - started:.2f}s"
        )
        return snap

    def frames(self, spec: TableSpec) -> dict[str, Any]:
        """The table's view as :meth:`ChangeLake.register_views` names it, built but not yet registered
        (building takes a second or so: the changelog roll-forward, the input decoding). Its rows and changelog
        need none: clients read them as Iceberg tables (``changelake.<ns>.<table>``)."""
        name = spec.full_name
        self.lake.applier.roll_forward_changelog(spec)  # a crashed apply's changelog, before readers look
        return {_table_views(name)[0]: self.lake.input_view(name)}

    def _drop(self, name: str) -> None:
        for view in _table_views(name):
            self.lake.spark.catalog.dropGlobalTempView(view)
        self.registered.pop(name, None)
        self.progress(f"[server] {name}: table gone, views dropped")


class Server:
    """The running endpoint: a SparkSession with the Spark Connect plugin, HiveThriftServer2 on its
    context, and the view refresher."""

    def __init__(self, settings: Settings, endpoint: Endpoint, progress=print):
        self.settings = settings
        self.endpoint = endpoint
        self.progress = progress
        self.spark: SparkSession | None = None
        self.refresher: ViewRefresher | None = None
        self.apply_service: ApplyService | None = None
        self._thrift = None
        self.secrets: endpoint_auth.EndpointSecrets | None = None

    def start(self) -> None:
        """Build the session (Connect starts with the context), start the Thrift server, register views."""
        from changelake.api import ChangeLake
        from changelake.runtime.session import get_spark

        endpoint_auth.private_dir(self.settings.home / "spark-server")
        secrets = self.secrets = endpoint_auth.ensure_secrets(self.settings)
        # Spark Connect reads its token from the environment when no setting names it (see security_conf).
        os.environ["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = secrets.connect_token
        conf = server_conf(self.settings, self.endpoint, endpoint_auth.compiled_classes(self.settings))
        # The config file's spark_conf wins over the server's defaults, but not over where it listens.
        pinned = {k: v for k, v in conf.items() if k.startswith(_LISTENING)}
        merged = {**conf, **self.settings.spark_conf, **pinned}
        settings = replace(self.settings, spark_conf=merged)
        spark = self.spark = get_spark(settings, app_name="changelake-sql-server", hive=True)
        jvm = spark._jvm
        thrift = jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2
        self._thrift = thrift.startWithContext(spark._jsparkSession.sqlContext())
        # A client gone mid-statement has its jobs cancelled at once, not at the statement timeout: HiveServer2
        # notices a dropped connection only when the statement has run (Disconnects.java).
        if not jvm.changelake.endpoint.Disconnects.install(self._thrift, spark._jsc.sc()):
            self.progress("[server] Thrift over HTTP: a dropped client's statement runs until its timeout")
        slots = max(1, spark.sparkContext.defaultParallelism)
        warm_python_workers(spark, slots)
        lake = ChangeLake(settings=settings, spark=spark, progress=lambda _m: None)
        state = server_dir(self.settings) / VIEW_STATE
        state.unlink(missing_ok=True)
        refresher = self.refresher = ViewRefresher(lake, self.progress, state_path=state)
        refresher.poll()
        # The apps come over Spark Connect, whose first query pays its own planning and worker start.
        remote = connect_session(self.endpoint, settings=self.settings)
        try:
            warm_python_workers(remote, slots)
        finally:
            remote.stop()

        # `changelake apply` hands whole batches to this driver (see changelake.runtime.applyservice).
        def lake_for(request_settings, progress):
            spark.sparkContext.setLocalProperty("spark.scheduler.pool", SERVER_POOL)  # this request's thread
            return ChangeLake(settings=request_settings, spark=spark, progress=progress)

        self.apply_service = ApplyService(settings, lake_for, log=self.progress)
        self.apply_service.start()
        warm_kept_rows(lake, self.progress)  # in a thread: the first batch merges as the later ones do
        views = sorted(_views(refresher))
        # The dbt build below sends the project's exact statements, which the synthetic SQL warm-up only
        # approximates: before it, ~30 s of the start that a user's first build no longer needs (sql-endpoint.md).
        if warm_dbt_skipped(self.settings.dbt_project_dir, views) is not None:
            warm_sql(spark, views, server_dir(self.settings) / "warm-up", self.progress)
        else:
            self.progress("[server] warm-up: the dbt build warms the statements (no synthetic SQL warm-up)")
        warm_dbt(
            self.settings.dbt_project_dir,
            self.endpoint,
            views,
            self._drop_database,
            self.progress,
            password=secrets.password(),
            dbt_schema=self.settings.dbt_schema,
        )

    def _drop_database(self, name: str) -> None:
        """Drop a metastore database and its tables (the warm-up's scratch schema)."""
        spark, _ = self._running()
        spark.sql(f"drop database if exists {quote(name)} cascade").collect()

    def _running(self) -> tuple[SparkSession, ViewRefresher]:
        """The session and view refresher :meth:`start` made."""
        if self.spark is None or self.refresher is None:
            raise RuntimeError("the SQL endpoint is not running: Server.start() first")
        return self.spark, self.refresher

    def jvm_pid(self) -> int:
        """The pid of the endpoint's JVM (the ready file lists it beside the Python pid)."""
        spark, _ = self._running()
        jvm = spark._jvm
        assert jvm is not None, "a classic session (not Spark Connect) has a py4j gateway"
        return int(jvm.java.lang.ProcessHandle.current().pid())

    def registered_views(self) -> list[str]:
        """The views the running endpoint serves, sorted."""
        _, refresher = self._running()
        return sorted(refresher.registered)

    def serve(self, stop: threading.Event, poll_seconds: float = DEFAULT_POLL_SECONDS) -> None:
        """Poll for new snapshots until ``stop`` is set; a failing poll is reported and retried."""
        spark, refresher = self._running()
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", SERVER_POOL)
        # In a thread of its own: a poll that refreshes a view waits for a task slot, the list must not.
        jobs = threading.Thread(
            target=self._publish_jobs, args=(stop, poll_seconds), name="running-jobs", daemon=True
        )
        jobs.start()
        while not stop.wait(poll_seconds):
            try:
                refresher.poll()
            except Exception as e:  # a bad spec or a catalog hiccup must not take the endpoint down
                refresher.report_failure("", f"[server] poll failed, retrying: {type(e).__name__}: {e}")
            else:
                refresher.clear_failure("")

    def _publish_jobs(self, stop: threading.Event, seconds: float) -> None:
        """Write the running jobs (:func:`running_jobs`) to ``jobs.json`` whenever they changed, until ``stop``."""
        spark, refresher = self._running()
        path = server_dir(self.settings) / RUNNING_JOBS
        published = None
        while not stop.wait(seconds):
            try:
                jobs = running_jobs(spark)
                if jobs != published:
                    atomic_write_text(path, json.dumps(jobs, indent=2) + "\n")
                    published = jobs
            except Exception as e:  # noqa: BLE001 - an observation only: never a reason to stop serving
                refresher.report_failure("jobs", f"[server] listing running jobs failed: {e}")

    def stop(self) -> None:
        """Stop within seconds, also mid-query: every running job is cancelled first."""
        if self.spark is not None:
            self.spark.sparkContext.cancelAllJobs()
        if self.apply_service is not None:
            self.apply_service.stop()
            self.apply_service = None
        if self._thrift is not None:
            self._thrift.stop()
            self._thrift = None
        if self.spark is not None:
            self.spark.stop()  # stops the Spark Connect service with the context
            self.spark = None


#: The Spark jobs running on the endpoint, rewritten by each poll when they changed (:func:`running_jobs`).
RUNNING_JOBS = "jobs.json"


def running_jobs(spark: SparkSession) -> list[dict[str, Any]]:
    """The endpoint's running Spark jobs: id and description (a Thrift statement's jobs carry its text), from
    the application's status store, so an operator or a test sees whether a statement still runs without
    Spark's web UI."""
    context = spark._jsc.sc()
    store = context.statusStore()
    jobs = []
    for job_id in sorted(context.statusTracker().getActiveJobIds()):
        try:
            description = store.job(int(job_id)).description()
        except Exception:  # noqa: BLE001 - the job ended between the two reads
            continue
        jobs.append(
            {"job": int(job_id), "description": description.get() if description.isDefined() else None}
        )
    return jobs


def _table_views(name: str) -> list[str]:
    """A table's global temp views: its committed landed input."""
    return [name.replace(".", "__", 1) + "__input"]


def _views(refresher: ViewRefresher) -> list[str]:
    """The global temp views the refresher registered (one per table)."""
    return [view for name in refresher.registered for view in _table_views(name)]


def connect_session(
    endpoint: Endpoint | None = None, url: str | None = None, settings: Settings | None = None
):
    """A new Spark Connect SparkSession on the running endpoint (``url``, else ``endpoint``, else
    :meth:`Endpoint.from_env`), with the token of the endpoint of ``settings.home`` (default: the
    environment's settings); the caller keeps it and ``stop()``s it.

    Works beside a classic SparkSession in the same process (pyspark's generic builder refuses that).
    Needs the pyspark ``connect`` extra (grpcio, grpcio-status, googleapis-common-protos, zstandard),
    which the data env installs.
    """
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    if settings is None:
        from changelake.config import load_settings

        settings = load_settings()
    url = endpoint_auth.with_token(url or (endpoint or Endpoint.from_env()).connect_url, settings)
    return RemoteSparkSession.builder.remote(url).create()


def main(argv: list[str] | None = None) -> int:
    """Run the endpoint in the foreground until SIGTERM/SIGINT; ``infra/spark_server.sh`` runs it in the
    background. Writes ``$CHANGELAKE_HOME/spark-server/ready`` (URLs and pids) once both servers listen and
    the views are registered."""
    import argparse
    import json

    from changelake.config import load_settings

    parser = argparse.ArgumentParser(prog="server_app.py", description=main.__doc__)
    parser.add_argument("--poll-seconds", type=float, default=None, help="snapshot poll interval")
    args = parser.parse_args(argv)
    poll = args.poll_seconds or tuned("server_poll_seconds")
    settings = load_settings()
    endpoint = Endpoint.from_env()
    # What the endpoint writes (table files, changelogs, staged records, dbt's tables) is its user's alone, as
    # with the CLI: applies handed over the socket run here, not under the CLI's umask.
    privacy.restrict()
    ready = server_dir(settings) / "ready"
    ready.unlink(missing_ok=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    started = time.monotonic()
    server = Server(settings, endpoint, progress=_stderr)
    try:
        server.start()
        info: dict[str, Any] = {
            "connect_url": endpoint.connect_url,
            "jdbc_url": endpoint.jdbc_url,
            "host": endpoint.host,
            "connect_port": endpoint.connect_port,
            "thrift_port": endpoint.thrift_port,
            "pid": os.getpid(),
            "jvm_pid": server.jvm_pid(),
            "views": server.registered_views(),
            "apply_socket": str(server.apply_service.path) if server.apply_service else None,
            "start_seconds": round(time.monotonic() - started, 2),
        }
        atomic_write_text(ready, json.dumps(info, indent=2) + "\n")  # waiters poll for it: never half
        _stderr(f"[server] ready in {info['start_seconds']}s: {endpoint.connect_url} {endpoint.jdbc_url}")
        server.serve(stop, poll)
    finally:
        ready.unlink(missing_ok=True)
        server.stop()
        _stderr("[server] stopped")
    return 0


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
