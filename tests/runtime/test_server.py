"""The warm SQL endpoint (infra/spark_server.sh, changelake.runtime.server).

Without Spark: the endpoint's settings and the view refresher's decisions (which tables to re-register, a
broken table not blocking the others, gone tables dropped).

End to end (slow): the script starts the server on the demo tables; plain `dbt build --target thrift`
passes and its marts equal the `session` target's (read over Spark Connect); a SQL client (PyHive) reads a
PK table, its changelog and a mart and answers a point query; a batch applied through the Python API shows
up in the next queries whole (never half a batch); `stop` leaves no process or port behind.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from changelake.runtime.endpoint import Endpoint
from changelake.runtime.endpoint_auth import thrift_env
from changelake.runtime.server import ViewRefresher, server_conf
from changelake.runtime.warmup import WARM_DBT_SCHEMA
from tests.helpers import DEMO_TABLES, REPO, land_and_apply_demo

DEMO = DEMO_TABLES
MARTS = {
    "orders_per_shop": ["shop_id"],
    "pageviews_per_region": ["region"],
    "user_clicks_hourly": ["user_id", "window_start"],
    "shop_user_stats_drift": ["shop_id", "user_id"],
}


# --- without Spark ----------------------------------------------------------------------------------------
def test_endpoint_from_env_and_server_conf(tmp_path):
    assert Endpoint.from_env({}) == Endpoint("127.0.0.1", 10000, 15002)
    endpoint = Endpoint.from_env(
        {"SPARK_THRIFT_HOST": "10.0.0.5", "SPARK_THRIFT_PORT": "10123", "SPARK_CONNECT_PORT": "15123"}
    )
    assert endpoint.connect_url == "sc://10.0.0.5:15123"
    assert endpoint.jdbc_url == "jdbc:hive2://10.0.0.5:10123/default"
    from changelake.config import load_settings

    conf = server_conf(load_settings(home=tmp_path), endpoint)
    assert conf["spark.plugins"] == "org.apache.spark.sql.connect.SparkConnectPlugin"
    assert conf["spark.connect.grpc.binding.address"] == "10.0.0.5"
    assert conf["spark.connect.grpc.binding.port"] == "15123"
    assert conf["spark.hadoop.hive.server2.thrift.bind.host"] == "10.0.0.5"
    assert conf["spark.hadoop.hive.server2.thrift.port"] == "10123"
    assert conf["spark.hadoop.hive.exec.scratchdir"].startswith(str(tmp_path))
    # doAs would open a metastore client per Thrift session.
    assert conf["spark.hadoop.hive.server2.enable.doAs"] == "false"
    with pytest.raises(Exception, match="must be integers"):
        Endpoint.from_env({"SPARK_THRIFT_PORT": "ten"})


class _FakeLake:
    """specs / storage.pk_table / rows / changelog / input_view / spark.catalog, as ViewRefresher uses
    them; a frame records the view it is registered as."""

    def __init__(self):
        self.snapshots: dict[str, int | None] = {}
        self.broken: set[str] = set()
        self.built: list[str] = []  # tables whose frames were built
        self.registered: list[str] = []  # views registered, in order
        self.dropped: list[str] = []
        self.present: set[str] = set()  # the global views that exist now
        self.storage = SimpleNamespace(pk_table=self._pk_table)
        self.spark = SimpleNamespace(
            catalog=SimpleNamespace(
                dropGlobalTempView=self._drop,
                listTables=lambda _db: [SimpleNamespace(name=n) for n in sorted(self.present)],
            )
        )

    def _drop(self, view: str) -> None:
        self.dropped.append(view)
        self.present.discard(view)

    def _register(self, view: str) -> None:
        self.registered.append(view)
        self.present.add(view)

    def specs(self):
        return {
            n: SimpleNamespace(full_name=n, namespace=n.split(".")[0], table=n.split(".")[1])
            for n in self.snapshots
        }

    def _pk_table(self, spec):
        snap = self.snapshots[spec.full_name]
        current = (
            None if snap is None else SimpleNamespace(snapshot_id=snap, summary=None, parent_snapshot_id=None)
        )
        return SimpleNamespace(current_snapshot=lambda: current, metadata=SimpleNamespace(refs={}))

    @property
    def applier(self):
        return SimpleNamespace(
            roll_forward_changelog=lambda spec: self.input_view(spec.full_name, built=False)
        )

    def input_view(self, name, built=True):
        if name in self.broken:
            raise RuntimeError(f"cannot read {name}")
        if built:
            self.built.append(name)
        return SimpleNamespace(createOrReplaceGlobalTempView=self._register)


def _tables(views: list[str]) -> list[str]:
    return [v.removesuffix("__input").replace("__", ".") for v in views]


def test_refresher_registers_only_what_changed_and_isolates_failures():
    lake = _FakeLake()
    lake.snapshots = {"a.x": 1, "a.y": None, "b.z": 7}
    messages: list[str] = []
    refresher = ViewRefresher(lake, messages.append)
    assert refresher.poll() == ["a.x", "a.y", "b.z"]  # first poll: everything, empty tables too
    assert lake.registered[:1] == ["a__x__input"]
    assert refresher.poll() == [] and _tables(lake.registered) == ["a.x", "a.y", "b.z"]  # nothing new

    lake.snapshots["a.x"] = 2  # a commit
    lake.snapshots["a.y"] = 3
    lake.broken = {"a.y"}
    assert refresher.poll() == ["a.x"]  # a.y fails, a.x still refreshed
    assert sum("a.y: refresh failed" in m for m in messages) == 1
    assert refresher.poll() == [] and sum("a.y: refresh failed" in m for m in messages) == 1  # once
    lake.broken = set()
    assert refresher.poll() == ["a.y"]  # retried until it works
    assert refresher.registered == {"a.x": 2, "a.y": 3, "b.z": 7}

    del lake.snapshots["b.z"]  # dropped table: its view goes
    assert refresher.poll() == []
    assert lake.dropped == ["b__z__input"] and "b.z" not in refresher.registered


def test_refresher_registers_again_a_view_a_client_dropped():
    lake = _FakeLake()
    lake.snapshots = {"a.x": 1, "b.z": 7}
    messages: list[str] = []
    refresher = ViewRefresher(lake, messages.append)
    refresher.poll()
    lake.present.discard("b__z__input")  # DROP VIEW global_temp.b__z__input through the endpoint
    assert refresher.poll() == ["b.z"]
    assert "b__z__input" in lake.present and any("dropped by a client" in m for m in messages)
    assert refresher.poll() == []


def test_refresher_rebuilds_views_when_the_table_commits_meanwhile():
    """A table's view must name one snapshot: a commit while it is built means build again, and only the
    frame of the settled snapshot is registered."""
    lake = _FakeLake()
    lake.snapshots = {"a.x": 1}
    commits = iter([2])  # a commit lands while the first frames are built
    build = lake.input_view

    def input_then_commit(name, built=True):
        frame = build(name, built)
        lake.snapshots["a.x"] = next(commits, lake.snapshots["a.x"])
        return frame

    lake.input_view = input_then_commit
    refresher = ViewRefresher(lake, lambda _m: None)
    refresher.poll()
    assert lake.built == ["a.x", "a.x"] and refresher.registered == {"a.x": 2}
    assert lake.registered == ["a__x__input"]


def test_refresher_publishes_the_snapshot_each_view_shows(tmp_path):
    lake = _FakeLake()
    lake.snapshots = {"a.x": 1, "b.z": None}
    state = tmp_path / "views.json"
    lake.broken = {"b.z"}
    refresher = ViewRefresher(lake, lambda _m: None, state_path=state)
    refresher.poll()
    assert json.loads(state.read_text()) == {"a.x": 1}  # a table whose views failed is not published
    lake.broken = set()
    lake.snapshots["a.x"] = 5
    refresher.poll()
    assert json.loads(state.read_text()) == {"a.x": 5, "b.z": None}
    del lake.snapshots["a.x"]
    refresher.poll()
    assert json.loads(state.read_text()) == {"b.z": None}


def test_wait_for_views_returns_when_the_views_catch_up_and_names_stale_tables(tmp_path):
    import threading

    from changelake.config import load_settings
    from changelake.errors import ChangelakeError
    from changelake.runtime.server import VIEW_STATE, server_dir, wait_for_views

    settings = load_settings(home=tmp_path)
    state = server_dir(settings) / VIEW_STATE
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"a.x": 1, "b.z": 4}))
    want = {"a.x": 2, "b.z": 4}
    timer = threading.Timer(0.5, lambda: state.write_text(json.dumps({"a.x": 2, "b.z": 4})))
    timer.start()
    started = time.monotonic()
    assert wait_for_views(settings, timeout=30, progress=lambda _m: None, current=lambda: want) == want
    timer.join()
    assert 0.4 < time.monotonic() - started < 10  # waited for the refresh, and no longer
    with pytest.raises(ChangelakeError, match=r"views of c\.new are not at the current snapshot"):
        wait_for_views(settings, timeout=0.5, progress=lambda _m: None, current=lambda: {**want, "c.new": 9})


def test_running_endpoint_needs_a_live_process_and_an_answering_port(tmp_path):
    from changelake.config import load_settings
    from changelake.runtime.server import running_endpoint, server_dir

    settings = load_settings(home=tmp_path)
    assert running_endpoint(settings) is None  # never started
    ready = server_dir(settings) / "ready"
    ready.parent.mkdir(parents=True)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        info = {"pid": os.getpid(), "host": "127.0.0.1", "connect_port": port, "connect_url": "sc://x"}
        ready.write_text(json.dumps(info))
        assert running_endpoint(settings) == info
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
        ready.write_text(json.dumps({**info, "pid": int(dead.stdout)}))
        assert running_endpoint(settings) is None  # its process is gone
    ready.write_text(json.dumps(info))
    assert running_endpoint(settings) is None  # nothing answers on the port any more


# --- end to end --------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


@pytest.fixture
def demo(lake):
    return land_and_apply_demo(lake)


@pytest.fixture
def endpoint(demo, tmp_path):
    """The server started by the script on free loopback ports, stopped (and checked) at the end."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHANGELAKE_", "SPARK_"))}
    env.update(
        CHANGELAKE_HOME=str(demo.settings.home),
        CHANGELAKE_TABLES=str(demo.settings.tables_dir),
        SPARK_THRIFT_PORT=str(_free_port()),
        SPARK_CONNECT_PORT=str(_free_port()),
    )
    script = REPO / "infra" / "spark_server.sh"
    started = time.monotonic()
    subprocess.run([str(script), "start"], env=env, check=True, timeout=600)
    print(f"\nserver start (script, until both ports answer): {time.monotonic() - started:.1f}s")
    info = json.loads((demo.settings.home / "spark-server" / "ready").read_text())
    info["env"] = env
    try:
        yield info
    finally:
        subprocess.run([str(script), "stop"], env=env, timeout=120)
    for pid in (info["pid"], info["jvm_pid"]):
        assert not _alive(pid), f"process {pid} of the server is still running"
    for port in (env["SPARK_THRIFT_PORT"], env["SPARK_CONNECT_PORT"]):
        assert not _listening(int(port)), f"port {port} still answers after stop"


def _hive(info, user: str = "reader", **login):
    """A PyHive connection to the endpoint as ``user`` (its password from the endpoint's secrets file)."""
    from pyhive import hive

    from changelake.config import load_settings
    from changelake.runtime.endpoint_auth import hive_login

    settings = load_settings(home=Path(info["env"]["CHANGELAKE_HOME"]))
    login = {**hive_login(settings, user), **login}
    return hive.connect(host="127.0.0.1", port=int(info["env"]["SPARK_THRIFT_PORT"]), **login)


def _query(cursor, sql: str) -> list[tuple]:
    cursor.execute(sql)
    return cursor.fetchall()


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(2400)
def test_endpoint_serves_dbt_sql_clients_and_new_batches(demo, spark, endpoint, tmp_path, monkeypatch):
    from changelake.runtime.dbt_runner import run_dbt
    from changelake.runtime.server import connect_session

    # The session target's marts, built in this process's SparkSession (as `changelake dbt build` does).
    monkeypatch.setenv("CHANGELAKE_DBT_SCHEMA", "analytics_session")
    assert run_dbt(["build"], demo.settings, progress=lambda m: None) == 0
    monkeypatch.delenv("CHANGELAKE_DBT_SCHEMA")

    # Plain dbt in the project directory, as a dbt user runs it.
    env = {**endpoint["env"], "DBT_PROFILES_DIR": ".", "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
    env.update(thrift_env(demo.settings))  # the login `make sql` prints
    started = time.monotonic()
    dbt = subprocess.run(
        [str(Path(sys.executable).with_name("dbt")), "build", "--target", "thrift",
         "--target-path", str(tmp_path / "dbt-target"), "--log-path", str(tmp_path / "dbt-logs")],
        cwd=REPO / "dbt_project", env=env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    print(f"dbt build --target thrift: {time.monotonic() - started:.1f}s")
    assert dbt.returncode == 0, dbt.stdout[-3000:]
    results = json.loads((tmp_path / "dbt-target" / "run_results.json").read_text())["results"]
    assert len(results) > 40 and all(r["status"] in ("pass", "success") for r in results)

    remote = connect_session(url=endpoint["connect_url"], settings=demo.settings)
    try:
        for mart, keys in MARTS.items():
            got = [tuple(r) for r in remote.table(f"analytics.{mart}").orderBy(*keys).collect()]
            want = [tuple(r) for r in spark.table(f"analytics_session.{mart}").orderBy(*keys).collect()]
            assert got == want and got, mart
    finally:
        remote.stop()
        spark.sql("drop database if exists analytics_session cascade")

    cursor = _hive(endpoint).cursor()
    # The start built the dbt project once into a scratch schema, which is gone.
    server_log = (demo.settings.home / "spark-server" / "server.log").read_text()
    assert f"into {WARM_DBT_SCHEMA} (dropped)" in server_log and ", exit 0; dbt parse" in server_log, (
        server_log[-2000:]
    )
    assert WARM_DBT_SCHEMA not in {name for (name,) in _query(cursor, "show databases")}
    # A PK table, its changelog and a mart through a SQL client.
    orders = demo.rows("shop.orders")
    assert sorted(_query(cursor, "select order_id from changelake.shop.orders")) == sorted(
        (r.order_id,) for r in orders.select("order_id").collect()
    )
    log = demo.changelog("shop.orders")
    assert _query(
        cursor,
        "select _change_type, count(*) from changelake.shop.orders__changelog group by 1 order by 1",
    ) == [tuple(r) for r in log.groupBy("_change_type").count().orderBy("_change_type").collect()]
    per_shop = dict(_query(cursor, "select shop_id, order_count from analytics.orders_per_shop"))
    assert per_shop == {r.shop_id: r["count"] for r in orders.groupBy("shop_id").count().collect()}

    key = orders.select("order_id").first().order_id
    point = f"select order_id, shop_id from changelake.shop.orders where order_id = {key}"
    _query(cursor, point)
    started = time.monotonic()
    row = _query(cursor, point)
    print(f"point query over JDBC/Thrift: {(time.monotonic() - started) * 1000:.0f} ms")
    assert row == [(key, demo.lookup("shop.orders", {"order_id": key})[0]["shop_id"])]

    # A new batch, applied through the Python API: the next queries see it whole, each view before or after.
    def seen() -> tuple[frozenset, tuple]:
        keys = frozenset(k for (k,) in _query(cursor, "select order_id from changelake.shop.orders"))
        batches = _query(
            cursor,
            "select _batch_id, count(*) from changelake.shop.orders__changelog group by 1 order by 1",
        )
        return keys, tuple(batches)

    def changelog_batches() -> tuple:
        counts = log.groupBy("_batch_id").count().orderBy("_batch_id").collect()
        return tuple((r["_batch_id"], r["count"]) for r in counts)

    before = (frozenset(r.order_id for r in orders.select("order_id").collect()), changelog_batches())
    assert seen() == before
    from changelake.inputs.datagen import generate

    generate(demo.spec("shop.orders"), demo.settings.landing_dir, batches=1, records=40)
    # Applied as the pipeline's warm path does: the apply app hands the batch to the endpoint's driver.
    warm = {**endpoint["env"], "CHANGELAKE_SPARK_REMOTE": endpoint["connect_url"]}
    app = subprocess.run(
        [sys.executable, str(REPO / "spark_apps" / "apply_app.py"), "shop.orders"],
        env=warm, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert app.returncode == 0 and "[shop.orders] landing batch 3 (table batch 3) committed" in app.stderr, (
        app.stderr[-3000:]
    )
    assert "[apply] on the warm endpoint" in app.stderr
    committed = time.monotonic()
    new_keys = frozenset(demo.rows_arrow("shop.orders").column("order_id").to_pylist())
    log = demo.changelog("shop.orders")
    after = (new_keys, changelog_batches())
    assert after[0] != before[0] and after[1][:2] == before[1] and after[1][-1][0] == 3
    observed = [seen()]
    while observed[-1] != after and time.monotonic() - committed < 120:
        observed.append(seen())
    print(f"new batch visible over JDBC {time.monotonic() - committed:.2f}s after its commit")
    assert observed[-1] == after
    # Whole batches only: every answer of each view is the state before the batch or after it.
    assert {keys for keys, _ in observed} <= {before[0], after[0]}
    assert {batches for _, batches in observed} <= {before[1], after[1]}

    # The dbt app's warm path: waits for the endpoint's views, runs the thrift target; the mart follows.
    built = subprocess.run(
        [sys.executable, str(REPO / "spark_apps" / "dbt_app.py"), "build", "--select", "+orders_per_shop"],
        env=warm, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    assert "views current for" in built.stderr and "(dbt target thrift)" in built.stderr
    rows = demo.rows("shop.orders")
    per_shop = dict(_query(cursor, "select shop_id, order_count from analytics.orders_per_shop"))
    assert per_shop == {r.shop_id: r["count"] for r in rows.groupBy("shop_id").count().collect()}

    # The Python API over Spark Connect: a batch whose decode and merge run as Spark jobs on the endpoint.
    from changelake import ChangeLake

    monkeypatch.setenv("CHANGELAKE_LOCAL_APPLY_RECORDS", "0")
    generate(demo.spec("shop.orders"), demo.settings.landing_dir, batches=1, records=40)
    remote = connect_session(url=endpoint["connect_url"], settings=demo.settings)
    try:
        over_connect = ChangeLake(settings=demo.settings, spark=remote, progress=None)
        [result] = over_connect.apply_pending("shop.orders")
        assert (result.batch_id, result.status) == (4, "applied")
    finally:
        remote.stop()
    assert demo.rows("shop.orders").count() == len(demo.rows_arrow("shop.orders"))
    _check_locked_down(endpoint, demo)


# --- security (issue: a locked-down SQL endpoint) ----------------------------------------------------------
_PATH_READS = ["text.`{f}`", "csv.`{f}`", "json.`{f}`", "parquet.`{d}`", "binaryFile.`{f}`"]
_PATH_STATEMENTS = [  # read files by path: the guard's words, or (runSQLOnFiles off) no such table
    "select * from {src}",  # columns every format has (binaryFile has no `value`): the guard is reached
    "select * from changelake.shop.orders where order_id in (select count(*) from {src})",
]
_GUARDED = [  # refused by the guard to every Thrift user, owner included
    "insert overwrite directory '{d}' using parquet select 1",
    "insert overwrite local directory '{d}' select 1",
    "create table default.t_{n} using parquet location '{d}' as select 1 as a",
    "create table default.h_{n} stored as parquet location '{d}' as select 1 as a",
    "create table default.l_{n} like default.t_load location '{d}'",
    "load data local inpath '{f}' into table default.t_load",
    "alter table default.t_load set location '{d}'",
    "create temporary view v_{n} using text options (path '{f}')",
    "create or replace global temporary view shop__orders__input as select 1 as order_id",
    "create view default.v_{n} as select reflect('java.lang.System', 'getenv', 'HOME') as h",
    "select transform(order_id) using 'cat {f}' as (x string) from changelake.shop.orders",
    "select reflect('java.lang.System', 'getenv', 'HOME')",
    "select java_method('java.lang.System', 'getProperty', 'user.home')",
    "add jar {f}",
    "create function f_{n} as 'org.example.F' using jar '{f}'",
    # issue 42's first attack, the catalog half: a JDBC catalog plugin; and the statement timeout turned off
    "set spark.sql.catalog.x_{n}=org.apache.spark.sql.execution.datasources.v2.jdbc.JDBCTableCatalog",
    "set spark.sql.thriftServer.queryTimeout=0",
]
_OWNER_ONLY = [  # refused by the guard to the read role, allowed to the owner (dbt's login)
    "drop view global_temp.shop__orders__input",
    "drop view if exists global_temp.shop__orders__input",
    "set spark.sql.runSQLOnFiles=true",
    "cache table c_{n} as select * from changelake.shop.orders",
    "create database if not exists db_{n}",
]
_ALLOWED = [
    "select count(*) from changelake.shop.orders",
    "select count(*) from global_temp.shop__orders__input",
]
_STATEMENTS = _PATH_STATEMENTS + _GUARDED + _OWNER_ONLY + _ALLOWED


def _locked_down_reader_statements():
    from hypothesis import strategies as st

    return st.tuples(
        st.sampled_from(_STATEMENTS), st.sampled_from(_PATH_READS), st.integers(0, 999), st.booleans()
    )


def _jvm_listening_addresses(pid: int) -> set[str]:
    """The local addresses of the listening TCP sockets the process holds (its fds matched to /proc/net)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                address = fields[1].split(":")[0]
                found.add(address)
    return found


def _check_locked_down(endpoint, demo) -> None:
    """The endpoint as an attacker meets it: no login without the password, no Spark Connect without the token,
    the read role confined to queries, no file reads, directory writes or code for anyone over Thrift, every JVM
    socket on loopback, the secrets unreadable to another user, and a view a client drops registered again."""
    from pyhive import hive
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException
    from thrift.transport.TTransport import TTransportException

    from changelake.runtime.endpoint_auth import secrets_path
    from changelake.runtime.server import connect_session

    port = int(endpoint["env"]["SPARK_THRIFT_PORT"])
    for login in ({"username": "test"}, {"username": "changelake", "password": "guess", "auth": "CUSTOM"}):
        with pytest.raises(TTransportException, match="Error validating the login"):
            hive.connect(host="127.0.0.1", port=port, **login)
    bare = connect_session(url=endpoint["connect_url"].replace("127.0.0.1", "localhost") + "/;token=x")
    try:
        with pytest.raises(SparkConnectGrpcException, match="UNAUTHENTICATED|authentication token"):
            bare.range(1).collect()
    finally:
        bare.stop()  # a client session left open keeps its threads, and pytest's process, alive at exit

    secret = secrets_path(demo.settings)
    assert (
        oct(secret.stat().st_mode & 0o777) == "0o600" and oct(secret.parent.stat().st_mode & 0o777) == "0o700"
    )
    if os.geteuid() == 0 and subprocess.run(["id", "nobody"], capture_output=True).returncode == 0:
        peek = subprocess.run(["runuser", "-u", "nobody", "--", "cat", str(secret)], capture_output=True)
        assert peek.returncode != 0 and not peek.stdout  # another local user cannot learn the passwords

    listening = _jvm_listening_addresses(int(endpoint["jvm_pid"]))
    loopback = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}
    assert listening and listening <= loopback, listening

    # Reader and owner against a fuzzed mix of the statements an attacker tries: a canary file's content is
    # never returned, nothing is written under the canary directory or the warehouse, the table is intact.
    canary_dir = demo.settings.home / "canary"
    canary_dir.mkdir(exist_ok=True)
    canary = canary_dir / "secret.txt"
    canary.write_text("CANARY-3141592653\n")
    rows_before = sorted(demo.rows_arrow("shop.orders").column("order_id").to_pylist())
    from urllib.parse import urlsplit

    warehouse = Path(urlsplit(demo.settings.warehouse).path)
    warehouse_before = sorted(str(p) for p in warehouse.rglob("*"))
    reader, owner = _hive(endpoint).cursor(), _hive(endpoint, "changelake").cursor()
    _query(owner, "create table if not exists default.t_load (value string) stored as textfile")
    _query(owner, "set spark.sql.runSQLOnFiles=true")  # the owner may; the guard still refuses path reads
    from hypothesis import HealthCheck, given, settings

    outcomes = {"allowed": 0, "refused": 0}

    def attack(template: str, source: str, n: int, as_owner: bool) -> None:
        sql = template.format(
            src=source.format(f=canary, d=canary_dir), f=canary, d=canary_dir / f"o{n}", n=n
        )
        who = "owner" if as_owner else "reader"
        try:
            got = _query(owner if as_owner else reader, sql)
        except Exception as e:  # noqa: BLE001 - refused: the message must say by whom and why
            outcomes["refused"] += 1
            message = str(e)
            guarded = template in _GUARDED or (template in _OWNER_ONLY and not as_owner)
            if guarded:
                assert "changelake SQL endpoint:" in message, f"{who}: {sql}: {message[:400]}"
            elif template in _PATH_STATEMENTS:
                # The guard's words; or, before it, no such table (the reader cannot turn runSQLOnFiles on) or
                # no plan for the file's format (nothing read either way).
                words = (
                    "changelake SQL endpoint:",
                    "TABLE_OR_VIEW_NOT_FOUND",
                    "FAILED_TO_CREATE_PLAN_FOR_DIRECT",
                )
                assert any(w in message for w in words), f"{who}: {sql}: {message[:400]}"
                assert "TABLE_OR_VIEW_NOT_FOUND" not in message or not as_owner  # the owner's reach the guard
            else:  # a name the fuzzing reused
                assert "ALREADY_EXISTS" in message, f"{who}: {sql}: {message[:400]}"
            return
        outcomes["allowed"] += 1
        assert "CANARY" not in repr(got)
        assert template in _ALLOWED or (as_owner and template in _OWNER_ONLY), f"allowed for {who}: {sql}"
        if sql.startswith("drop view"):
            views_back()  # the next statements meet the views as a client would after the server's next poll

    def views_back(timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        for view in ("shop__orders__input",):
            while True:
                try:
                    _query(reader, f"select 1 from global_temp.{view} limit 1")
                    break
                except Exception:  # noqa: BLE001 - not registered again yet
                    if time.monotonic() > deadline:
                        pytest.fail(f"global_temp.{view} was not registered again within {timeout:.0f} s")
                    time.sleep(0.3)

    # Every statement for both roles once, then a fuzzed mix of them (sources, names, order).
    for i, template in enumerate(_STATEMENTS):
        for as_owner in (False, True):
            attack(template, _PATH_READS[i % len(_PATH_READS)], i, as_owner)

    @settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(_locked_down_reader_statements())
    def fuzzed(case):
        attack(*case)

    fuzzed()
    assert outcomes["refused"] > 0 and outcomes["allowed"] > 0, outcomes
    assert sorted(p.name for p in canary_dir.iterdir()) == ["secret.txt"]  # no directory or table written
    assert sorted(str(p) for p in warehouse.rglob("*")) == warehouse_before
    assert sorted(demo.rows_arrow("shop.orders").column("order_id").to_pylist()) == rows_before

    # The owner may drop a view (dbt's login); the server registers it again within a few polls.
    _query(owner, "drop view if exists global_temp.shop__orders__input")
    views_back()
    assert _query(reader, "select count(*) from changelake.shop.orders") == [(len(rows_before),)]
