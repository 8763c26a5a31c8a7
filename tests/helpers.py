"""Helpers the tests share (fixtures live in conftest.py): the repository's paths, the CLI command, row and
changelog comparisons, the demo tables, and a throwaway PostgreSQL server.

The PostgreSQL server is for the tests that run against the production catalog. A throwaway PostgreSQL server for the tests that run against the production catalog.

The server binaries come from Debian's ``postgresql`` package (``make setup`` installs it, see
``infra/postgres.sh``). Each test session gets its own cluster: ``initdb`` into a temporary directory, a random
password, TCP on 127.0.0.1 at a free port, ``fsync`` off (a crash of the machine loses nothing we keep). Postgres
refuses to run as root, so as root the server runs as the ``postgres`` OS user. The server dies with the
process that started it (parent-death signal), so even a killed test run leaks no server.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "changelake.cli"]


def land_batches(home: Path, table: str, batches: dict[int, list[dict]]) -> None:
    """Land changelog-JSON batches for ``table`` under ``home``'s landing directory, one file per batch id."""
    import json

    landing = home / "landing" / table
    landing.mkdir(parents=True, exist_ok=True)
    for batch_id, records in batches.items():
        (landing / f"{batch_id:04d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def local(location: str) -> str:
    """The local path of a warehouse file's ``file:`` location."""
    return location[len("file://") :] if location.startswith("file://") else location


def rows_of(df, order_by=None) -> list[tuple]:
    """Rows of a DataFrame as tuples, sorted for order-independent comparison."""
    return (
        sorted(tuple(r) for r in df.collect())
        if order_by is None
        else [tuple(r) for r in df.orderBy(*order_by).collect()]
    )


def changelog_of(lake, table: str) -> list[tuple]:
    """(_log_offset, _change_type, row...) in the changelog's order: batch, partition, bucket, offset.

    Checks on the way that every bucket's log is gapless from 0 (each (partition, bucket) is one log).
    """
    df = lake.changelog(table)
    cols = [c for c in df.columns if not c.startswith("_")]
    rows = df.collect()
    logs: dict[tuple, list[int]] = {}
    for r in rows:
        logs.setdefault((*[r[c] for c in lake.spec(table).partition_keys], r["_bucket"]), []).append(
            r["_log_offset"]
        )
    for bucket, offsets in logs.items():
        assert sorted(offsets) == list(range(len(offsets))), f"bucket {bucket}: offsets {sorted(offsets)}"
    return [(r["_log_offset"], r["_change_type"], *[r[c] for c in cols]) for r in rows]


DEMO_TABLES = sorted(p.stem for p in (REPO / "examples" / "tables").glob("*.yaml"))


def land_and_apply_demo(lake, batches: int = 2, records: int = 30):
    """Every demo table's spec copied into ``lake``, ``batches`` datagen batches landed per table, applied."""
    import shutil

    from changelake.inputs.datagen import generate

    for name in DEMO_TABLES:
        shutil.copy(REPO / "examples" / "tables" / f"{name}.yaml", lake.settings.tables_dir)
    specs = lake.specs()
    for name in DEMO_TABLES:
        generate(specs[name], lake.settings.landing_dir, batches=batches, records=records)
    lake.apply_pending()
    return lake


# --- a throwaway PostgreSQL server -------------------------------------------------------------------

USER = "changelake"  # the database role the catalog connects as


def server_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``postgres``: on PATH, else Debian's newest version."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("postgres"):
        return Path(os.path.realpath(on_path)).parent
    candidates = [Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin") if Path(p, "postgres").exists()]
    candidates.sort(key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """One running server; :meth:`new_database` hands out a brand-new, empty catalog database."""

    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.base = Path(tempfile.mkdtemp(prefix="changelake-pg-"))
        self.data = self.base / "data"
        self.log = self.base / "server.log"
        self.password = secrets.token_hex(16)
        self.port = 0
        self.process: subprocess.Popen | None = None
        # Root may not run postgres: drop to the package's OS user (``nobody`` if there is none).
        self._os_user = None
        if os.geteuid() == 0:
            self._os_user = "postgres" if _user_exists("postgres") else "nobody"
            entry = pwd.getpwnam(self._os_user)
            os.chown(self.base, entry.pw_uid, entry.pw_gid)

    def _command(self, *args: str | Path, pdeathsig: bool = False) -> list[str]:
        """``args`` run as the server's OS user; with ``pdeathsig`` the process gets SIGQUIT (immediate
        shutdown) when its parent (this test process) dies."""
        wrapper: list[str] = []
        setpriv = shutil.which("setpriv")
        if self._os_user:
            if not setpriv:
                raise RuntimeError("running as root needs util-linux's setpriv to start PostgreSQL as a user")
            wrapper = [setpriv, f"--reuid={self._os_user}", f"--regid={self._os_user}", "--clear-groups"]
        if pdeathsig and setpriv:
            wrapper = (wrapper or [setpriv]) + ["--pdeathsig=QUIT"]
        return [*wrapper, *map(str, args)]

    def start(self) -> None:
        """initdb, then start the server and wait until it accepts connections."""
        pwfile = self.base / "pwfile"
        pwfile.write_text(self.password + "\n")
        if self._os_user:
            entry = pwd.getpwnam(self._os_user)
            os.chown(pwfile, entry.pw_uid, entry.pw_gid)
        pwfile.chmod(0o600)
        init = subprocess.run(
            self._command(
                self.bindir / "initdb",
                "-D",
                self.data,
                "-U",
                USER,
                f"--pwfile={pwfile}",
                "--auth=scram-sha-256",
                "--encoding=UTF8",
                "--no-locale",
                "--no-sync",
                "--no-instructions",
            ),
            capture_output=True,
            text=True,
            cwd=self.base,
        )
        pwfile.unlink()
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed ({init.returncode}):\n{init.stdout}{init.stderr}")
        for _attempt in range(3):  # the free port may be taken between probing and binding
            self.port = _free_port()
            with open(self.log, "ab") as log:
                self.process = subprocess.Popen(
                    self._command(
                        self.bindir / "postgres",
                        "-D",
                        self.data,
                        "-h",
                        "127.0.0.1",
                        "-p",
                        str(self.port),
                        "-k",
                        self.base,
                        "-c",
                        "fsync=off",
                        "-c",
                        "synchronous_commit=off",
                        "-c",
                        "full_page_writes=off",
                        pdeathsig=True,
                    ),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.base,
                )
            if self._wait_ready(timeout=60):
                return
            self.stop(remove=False)
        raise RuntimeError(f"PostgreSQL did not start; its log:\n{self.log.read_text()[-3000:]}")

    def _wait_ready(self, timeout: float) -> bool:
        import psycopg2

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            try:
                psycopg2.connect(self.dsn("postgres"), connect_timeout=2).close()
                return True
            except psycopg2.OperationalError:
                time.sleep(0.1)
        return False

    def dsn(self, database: str) -> str:
        return f"host=127.0.0.1 port={self.port} user={USER} password={self.password} dbname={database}"

    def uri(self, database: str) -> str:
        """SQLAlchemy URI of ``database``, as ``CHANGELAKE_CATALOG_URI`` takes it."""
        return f"postgresql+psycopg2://{USER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """Create an empty database (a brand-new catalog: pyiceberg creates its tables on first use)."""
        import psycopg2

        name = f"catalog_{uuid.uuid4().hex[:12]}"
        conn = psycopg2.connect(self.dsn("postgres"))
        try:
            conn.autocommit = True  # CREATE DATABASE cannot run in a transaction
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return self.uri(name)

    def stop(self, remove: bool = True) -> None:
        """Immediate shutdown (SIGQUIT: no final checkpoint, the cluster is thrown away), else SIGKILL; then
        remove the cluster's directory."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            for sig, wait in ((signal.SIGQUIT, 30), (signal.SIGKILL, 10)):
                process.send_signal(sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(wait)
                    break
        if remove:
            shutil.rmtree(self.base, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@contextlib.contextmanager
def running_server() -> Iterator[PostgresServer]:
    """A started server, stopped and removed on exit."""
    bindir = server_bindir()
    if bindir is None:
        raise RuntimeError(
            "PostgreSQL server binaries not found (initdb, postgres); `make setup` installs Debian's "
            "postgresql package (infra/postgres.sh)"
        )
    server = PostgresServer(bindir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


class NoSpark:
    """Stands in for the SparkSession where a test shows that nothing needs one."""

    def __getattr__(self, name):
        raise AssertionError(f"Spark was used (.{name})")


def sparkless_lake(home: Path):
    """A ChangeLake on ``home`` (specs in ``home/tables``) whose Spark session fails any use."""
    from changelake import ChangeLake

    (home / "tables").mkdir(exist_ok=True)
    return ChangeLake(home=home, tables_dir=home / "tables", spark=NoSpark(), progress=lambda m: None)


# --- a real Kafka broker ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class KafkaBroker:
    """A broker started by infra/kafka.sh: its client properties file (bootstrap.servers and the login) and the
    same settings as a dict (for confluent-kafka producers and admin clients of the tests)."""

    directory: Path
    properties: Path

    @property
    def config(self) -> dict[str, str]:
        from changelake.inputs.kafka import read_properties

        return read_properties(self.properties)

    def _admin(self, request: str, *args) -> None:
        """An AdminClient request, waited for (the client must live until its futures are done)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self.config)
        for future in getattr(admin, request)(*args).values():
            future.result(timeout=60)

    def create_topic(self, name: str, partitions: int = 1, **config: str) -> None:
        from confluent_kafka.admin import NewTopic

        self._admin("create_topics", [NewTopic(name, partitions, 1, config=config)])

    def create_partitions(self, topic: str, total: int) -> None:
        from confluent_kafka.admin import NewPartitions

        self._admin("create_partitions", [NewPartitions(topic, total)])

    def delete_records(self, topic: str, partition: int, before: int) -> None:
        """Delete the partition's records before offset ``before``, as retention would."""
        from confluent_kafka import TopicPartition

        self._admin("delete_records", [TopicPartition(topic, partition, before)])

    def produce(self, topic: str, records: list[tuple], partition: int | None = None) -> None:
        """``(key, value)`` pairs (bytes or str; None for a null) produced in order, each key to its partition by
        Kafka's default partitioner unless ``partition`` is given; waits until all are acknowledged."""
        from confluent_kafka import Producer

        producer = Producer({**self.config, "enable.idempotence": "true", "linger.ms": "5"})
        for key, value in records:
            extra = {} if partition is None else {"partition": partition}
            producer.produce(topic, key=key, value=value, **extra)
            producer.poll(0)
        assert producer.flush(60) == 0, "records left unacknowledged"


@contextlib.contextmanager
def running_kafka(directory: Path):
    """Start a broker with infra/kafka.sh on free loopback ports; stop it at the end."""
    env = {
        **os.environ,
        "KAFKA_DIR": str(directory),
        "KAFKA_PORT": str(_free_port()),
        "KAFKA_CONTROLLER_PORT": str(_free_port()),
        "STOP_HINT": "0",
    }
    script = REPO / "infra" / "kafka.sh"
    started = subprocess.run([script, "start"], env=env, capture_output=True, text=True, timeout=300)
    if started.returncode != 0:
        raise RuntimeError(f"the Kafka broker did not start:\n{started.stdout}\n{started.stderr}")
    try:
        yield KafkaBroker(directory, directory / "client.properties")
    finally:
        subprocess.run([script, "stop"], env=env, capture_output=True, text=True, timeout=120)


# --- the S3 endpoint and the REST catalog (infra/s3.sh, infra/rest_catalog.sh) ------------------------------


class ServerEnv(dict):
    """A server's variables; shown (in a failing test's report) with its keys and tokens hidden."""

    def __repr__(self) -> str:
        return repr({k: "***" if "SECRET" in k or "TOKEN" in k else v for k, v in self.items()})


def _env_file(path: Path) -> dict[str, str]:
    """The ``export NAME=value`` lines of a server's env file."""
    out = ServerEnv()
    for line in path.read_text().splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        out[name] = value
    return out


@contextlib.contextmanager
def running_service(script: str, env: dict[str, str], env_file: Path) -> Iterator[dict[str, str]]:
    """A server started by one of the project's own scripts (``infra/<script> start``) on a free loopback port,
    yielding the variables of its env file; stopped at exit."""
    full = {**os.environ, **env}
    started = subprocess.run(
        [str(REPO / "infra" / script), "start"], env=full, capture_output=True, text=True, timeout=600
    )
    if started.returncode != 0:
        raise RuntimeError(f"infra/{script} start failed:\n{started.stdout[-2000:]}{started.stderr[-3000:]}")
    try:
        yield _env_file(env_file)
    finally:
        subprocess.run([str(REPO / "infra" / script), "stop"], env=full, capture_output=True, timeout=120)


@contextlib.contextmanager
def running_s3() -> Iterator[dict[str, str]]:
    """The S3 endpoint (S3Proxy) in a temporary directory with the bucket ``changelake``: the AWS variables to
    reach it."""
    base = Path(tempfile.mkdtemp(prefix="changelake-s3-"))
    try:
        with running_service("s3.sh", {"S3_DIR": str(base)}, base / "s3.env") as env:
            env["S3_DIR"] = str(base)
            yield env
    finally:
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def running_rest_catalog(s3: dict[str, str]) -> Iterator[dict[str, str]]:
    """The REST catalog on the S3 endpoint ``s3`` (:func:`running_s3`): the variables to reach both."""
    base = Path(tempfile.mkdtemp(prefix="changelake-rest-"))
    try:
        with running_service(
            "rest_catalog.sh", {"REST_DIR": str(base), "S3_DIR": s3["S3_DIR"]}, base / "rest.env"
        ) as env:
            yield env
    finally:
        shutil.rmtree(base, ignore_errors=True)


S3_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def storage_options_of(env: dict[str, str]) -> dict[str, str]:
    """The storage options (AWS names) an S3 endpoint's env gives."""
    return {k: env[k] for k in S3_VARIABLES}
