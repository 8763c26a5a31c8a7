"""Shared fixtures: one local SparkSession for the whole run, a fresh changelake home per test.

A test that requests ``catalog_uri`` runs once per catalog kind, SQLite and PostgreSQL (the production
catalog, on a real server started for the session); its ``lake`` and ``cli_env`` then use that catalog.

Markers (registered in pyproject.toml) sort the tests into layers: ``spark`` (set here for every test using
the ``spark`` fixture), ``integration``, ``e2e`` and ``slow`` (set by the tests), and ``unit`` (set here for
every test with none of those). ``make test-unit`` runs ``-m unit --no-jvm``, ``make test`` runs them all.
"""

from __future__ import annotations

import ast
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

#: Markers that take a test out of the unit layer.
NOT_UNIT = ("spark", "integration", "e2e", "slow")


def pytest_addoption(parser):
    parser.addoption(
        "--no-jvm",
        action="store_true",
        help="fail the run if any test, or a process it starts, launches Java (make test-unit)",
    )


def pytest_collection_modifyitems(config, items):
    """Mark every test that needs Spark (the ``spark`` fixture, directly or through ``lake``) ``spark``, and
    every test without a layer marker ``unit``: ``make test-unit`` runs only those, ``make test`` all.

    Only where ``unit`` is a registered marker (pyproject.toml): the Airflow env's run of tests/orchestration
    reads this file too, with its own markers (infra/airflow/pytest.ini)."""
    layers = any(line.split(":")[0].strip() == "unit" for line in config.getini("markers"))
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
        if layers and not any(item.get_closest_marker(name) for name in NOT_UNIT):
            item.add_marker(pytest.mark.unit)


def pytest_ignore_collect(collection_path, config):
    """Under ``-m unit``, a test module whose module-level ``pytestmark`` takes every test out of the unit layer
    is not even imported: test_quality imports Great Expectations, test_dbt pyspark (seconds of the loop)."""
    if config.option.markexpr != "unit" or not collection_path.name.startswith("test_"):
        return None
    if collection_path.suffix == ".py" and _module_markers(collection_path) & set(NOT_UNIT):
        return True
    return None


def _module_markers(path: Path) -> set[str]:
    """The ``pytest.mark.<name>`` names in a test module's top-level ``pytestmark = ...``, read without
    importing it."""
    names: set[str] = set()
    for node in ast.parse(path.read_bytes()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            for sub in ast.walk(node.value):
                if isinstance(sub, ast.Attribute) and getattr(sub.value, "attr", None) == "mark":
                    names.add(sub.attr)
    return names


# Under --no-jvm, ``java`` is a stub that notes the running test (pytest's PYTEST_CURRENT_TEST, which child
# processes inherit) and fails: Spark's launcher runs $JAVA_HOME/bin/java, else the java on PATH.
_JAVA_STUB = """#!/bin/sh
echo "${PYTEST_CURRENT_TEST:-outside a test}" >> "$(dirname "$0")/../launches"
echo "java refused: the tests run with --no-jvm (make test-unit)" >&2
exit 1
"""


#: JVM options for every Spark JVM the tests start: spark-submit adds SPARK_SUBMIT_OPTS to the driver's command,
#: so they reach the workers' SparkSessions, the CLI and apps the tests run, the SQL endpoint they start and the
#: Airflow env's spark-submit tasks (child processes inherit them). C1 only: a test's JVM lives seconds to a
#: few minutes, and C2's compiler threads took a large share of 2 cores shared by 3-5 JVMs (53 Spark tests on
#: two workers: 134-138 s of CPU and 86-92 s wall, 110-114 s and 63 s with it). Tests only: benchmarks and
#: `make demo` keep the JVM's production settings.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"


def _use_test_jvm_options() -> None:
    """Put TEST_JVM_OPTIONS and the class-data archive set-up built (tests/jvm_archive.py) into
    SPARK_SUBMIT_OPTS, once (xdist workers inherit the controller's environment)."""
    from tests import jvm_archive

    given = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if TEST_JVM_OPTIONS not in given:
        options = [given, TEST_JVM_OPTIONS, jvm_archive.jvm_options()]
        os.environ["SPARK_SUBMIT_OPTS"] = " ".join(o for o in options if o)


def pytest_configure(config):
    _use_test_jvm_options()
    if not config.getoption("--no-jvm"):
        return
    if hasattr(config, "workerinput"):
        return  # a pytest-xdist worker: the stub the controller put on PATH is its too, launches noted there
    stub = Path(tempfile.mkdtemp(prefix="changelake-no-jvm-"))
    (stub / "bin").mkdir()
    java = stub / "bin" / "java"
    java.write_text(_JAVA_STUB)
    java.chmod(0o755)
    config._no_jvm_stub = stub
    os.environ["JAVA_HOME"] = str(stub)
    os.environ["PATH"] = f"{stub / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"


def pytest_sessionfinish(session, exitstatus):
    """Under --no-jvm, a Java launch fails the run even if its test passed (or swallowed the error)."""
    stub = getattr(session.config, "_no_jvm_stub", None)
    if stub is None:
        return
    launches = stub / "launches"
    tests = sorted(set(launches.read_text().splitlines())) if launches.exists() else []
    shutil.rmtree(stub, ignore_errors=True)
    if tests:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = "--no-jvm: Java was launched by " + "; ".join(tests)
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(message, red=True, bold=True)
        else:
            print(message, file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from changelake.config import load_settings
    from changelake.runtime.session import get_spark

    home = tmp_path_factory.mktemp("spark-home")
    settings = load_settings(home=home, spark_conf={"spark.sql.shuffle.partitions": "4"})
    session = get_spark(settings, app_name="changelake-tests")
    yield session
    session.stop()


@pytest.fixture
def home(tmp_path) -> Path:
    (tmp_path / "tables").mkdir()
    return tmp_path


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server for the session (tests/helpers.py), stopped and removed at its end."""
    from tests.helpers import running_server

    with running_server() as server:
        yield server


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    """A real Apache Kafka broker (KRaft, SASL/PLAIN logins, loopback) for the session, started and stopped by
    the project's own infra/kafka.sh (tests/helpers.py)."""
    from tests.helpers import running_kafka

    with running_kafka(tmp_path_factory.mktemp("kafka")) as broker:
        yield broker


@pytest.fixture(scope="session")
def s3_endpoint():
    """The project's S3 endpoint (infra/s3.sh: S3Proxy on a free loopback port, keys generated at its start) for
    the session: the AWS variables that reach it. Tests keep to prefixes of their own in its bucket
    ``changelake`` (:func:`s3_prefix`)."""
    from tests.helpers import running_s3

    with running_s3() as env:
        yield env


@pytest.fixture(scope="session")
def rest_catalog(s3_endpoint):
    """The project's Iceberg REST catalog (infra/rest_catalog.sh) on the session's S3 endpoint: the variables
    that reach both (CHANGELAKE_CATALOG_TYPE/URI, the token, the AWS ones)."""
    from tests.helpers import running_rest_catalog

    with running_rest_catalog(s3_endpoint) as env:
        yield env


@pytest.fixture
def s3_prefix(s3_endpoint) -> str:
    """A fresh ``s3://changelake/<test>/`` prefix of the session's S3 endpoint."""
    import uuid

    return f"s3://changelake/t-{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["sqlite", "postgres"])
def catalog_uri(request, home) -> str:
    """A brand-new, empty SQL catalog: SQLite in the test's home, or a new database on the session's server."""
    if request.param == "sqlite":
        return f"sqlite:///{home / 'catalog.db'}"
    return request.getfixturevalue("postgres").new_database()


def _catalog_of(request) -> dict[str, str]:
    """The test's ``catalog_uri`` if it asked for one, else nothing (the default catalog in its home)."""
    if "catalog_uri" in request.fixturenames:
        return {"catalog_uri": request.getfixturevalue("catalog_uri")}
    return {}


@pytest.fixture
def lake(spark, home, request):
    from changelake import ChangeLake

    messages: list[str] = []
    instance = ChangeLake(
        home=home, tables_dir=home / "tables", spark=spark, progress=messages.append, **_catalog_of(request)
    )
    instance.messages = messages
    return instance


@pytest.fixture
def cli_env(home, request) -> dict[str, str]:
    """Environment for running the CLI in a subprocess against the test's home (and catalog)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHANGELAKE_")}
    env.update(CHANGELAKE_HOME=str(home), CHANGELAKE_TABLES=str(home / "tables"))
    if catalog := _catalog_of(request):
        env["CHANGELAKE_CATALOG_URI"] = catalog["catalog_uri"]
    return env
