"""The SQL endpoint's secrets and classes (changelake.runtime.endpoint_auth), without starting Spark. What an
attacker meets on the running endpoint is tested end to end in test_server.py (``_check_locked_down``)."""

from __future__ import annotations

import os
import stat
import subprocess
import time
import zipfile

import pytest

from changelake.config import load_settings
from changelake.errors import ChangelakeError
from changelake.runtime import endpoint_auth
from changelake.runtime.endpoint import Endpoint
from changelake.runtime.server import _LISTENING, server_conf


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_secrets_are_generated_private_and_kept(tmp_path):
    settings = load_settings(home=tmp_path / "home")
    first = endpoint_auth.ensure_secrets(settings)
    path = endpoint_auth.secrets_path(settings)
    assert _mode(path) == 0o600 and _mode(path.parent) == 0o700
    assert first.users["changelake"][0] == "owner" and first.users["reader"][0] == "read"
    assert len({first.connect_token, first.password("changelake"), first.password("reader")}) == 3
    assert min(len(first.connect_token), len(first.password("reader"))) >= 32
    assert endpoint_auth.ensure_secrets(settings) == first  # kept across starts
    if os.geteuid() == 0 and subprocess.run(["id", "nobody"], capture_output=True).returncode == 0:
        peek = subprocess.run(["runuser", "-u", "nobody", "--", "cat", str(path)], capture_output=True)
        assert peek.returncode != 0 and not peek.stdout


def test_secrets_others_could_read_or_plant_are_refused(tmp_path):
    settings = load_settings(home=tmp_path / "home")
    endpoint_auth.ensure_secrets(settings)
    path = endpoint_auth.secrets_path(settings)
    path.chmod(0o644)
    with pytest.raises(ChangelakeError, match="readable by others"):
        endpoint_auth.load_secrets(settings)
    path.unlink()
    planted = tmp_path / "planted"
    planted.write_text("connect.token=known\nthrift.user.changelake.password=known\n")
    planted.chmod(0o600)
    path.symlink_to(planted)
    with pytest.raises(ChangelakeError, match="link"):
        endpoint_auth.ensure_secrets(settings)
    path.unlink()
    if os.geteuid() == 0:
        os.chown(path.parent, 65534, 65534)  # a directory another user made first
        with pytest.raises(ChangelakeError, match="belongs to uid 65534"):
            endpoint_auth.ensure_secrets(settings)


def test_connect_urls_carry_the_token_to_localhost(tmp_path):
    settings = load_settings(home=tmp_path / "home")
    assert (
        endpoint_auth.with_token("sc://127.0.0.1:15002", settings) == "sc://127.0.0.1:15002"
    )  # no endpoint yet
    token = endpoint_auth.ensure_secrets(settings).connect_token
    # pyspark sends a token without TLS only to "localhost" (gRPC local credentials).
    assert (
        endpoint_auth.with_token("sc://127.0.0.1:15002", settings) == f"sc://localhost:15002/;token={token}"
    )
    assert endpoint_auth.with_token("sc://localhost:1/;token=t", settings) == "sc://localhost:1/;token=t"
    assert endpoint_auth.thrift_env(settings)["SPARK_THRIFT_USER"] == "changelake"


def test_the_endpoint_conf_locks_it_down_and_the_config_file_cannot_undo_it(tmp_path):
    settings = load_settings(home=tmp_path / "home")
    conf = server_conf(settings, Endpoint(), tmp_path / "classes")
    assert conf["spark.sql.extensions"] == endpoint_auth.GUARD_CLASS
    assert conf["spark.sql.runSQLOnFiles"] == "false"
    assert conf["spark.hadoop.hive.server2.authentication"] == "CUSTOM"
    assert conf["spark.driver.bindAddress"] == "127.0.0.1" and conf["spark.authenticate"] == "true"
    assert (
        f"-Dchangelake.endpoint.secrets={endpoint_auth.secrets_path(settings)}"
        in (conf["spark.driver.defaultJavaOptions"])
    )
    for key in (
        "spark.sql.extensions",
        "spark.sql.runSQLOnFiles",
        "spark.driver.bindAddress",
        "spark.authenticate",
    ):
        assert key.startswith(_LISTENING), (
            key
        )  # Server.start takes these from the environment, not spark_conf


def test_the_guard_and_authenticator_compile_once(tmp_path):
    # A jars directory of its own: the pinned set linked in, changelake's jar built here.
    from changelake.runtime import jvm

    pinned = jvm.jars_dir(load_settings()) / jvm.JAR_SET
    (tmp_path / "jars").mkdir()
    (tmp_path / "jars" / jvm.JAR_SET).symlink_to(pinned)
    settings = load_settings(home=tmp_path / "home", jars_dir=str(tmp_path / "jars"))
    started = time.monotonic()
    classes = endpoint_auth.compiled_classes(settings)
    names = set(zipfile.ZipFile(classes).namelist())
    assert {
        "changelake/endpoint/Guard.class",
        "changelake/endpoint/PasswordAuthenticator.class",
        "changelake/spark/ChangelakeCatalog.class",
    } <= names
    first = time.monotonic() - started
    started = time.monotonic()
    assert endpoint_auth.compiled_classes(settings) == classes
    assert time.monotonic() - started < min(1.0, first)  # cached by the sources' hash


def test_the_endpoint_bounds_statements_and_pools_its_own_jobs(tmp_path, monkeypatch):
    """Issue 42's limits as the endpoint's Spark settings: the statement timeout and the result cap follow their
    variables, and the FAIR scheduler's file names the server's pool and the clients' default pool."""
    import xml.etree.ElementTree as ET

    from changelake.runtime.endpoint import Endpoint
    from changelake.runtime.server import SERVER_POOL, server_conf

    monkeypatch.setenv("CHANGELAKE_SERVER_STATEMENT_TIMEOUT", "7")
    monkeypatch.setenv("CHANGELAKE_SERVER_MAX_RESULT_MB", "64")
    settings = load_settings(home=tmp_path / "home")
    conf = server_conf(settings, Endpoint(host="127.0.0.1", thrift_port=1, connect_port=2))
    assert conf["spark.sql.thriftServer.queryTimeout"] == "7s"
    assert conf["spark.sql.thriftServer.interruptOnCancel"] == "true"
    assert conf["spark.driver.maxResultSize"] == "64m"
    assert conf["spark.scheduler.mode"] == "FAIR"
    pools = ET.parse(conf["spark.scheduler.allocation.file"]).getroot()
    assert {p.get("name"): p.findtext("minShare") for p in pools} == {SERVER_POOL: "1", "default": "0"}


def test_the_driver_class_path_links_the_catalog_and_the_guard_records_on_request(tmp_path, monkeypatch):
    """changelake's jar goes on the driver's own class path with Iceberg's runtime beside it (ChangelakeCatalog,
    in the same jar, extends Iceberg's SparkCatalog); the guard's record is written only when asked for."""
    from changelake.runtime import jvm
    from changelake.runtime.server import GUARD_RECORD, server_dir

    pinned = tmp_path / "jars" / jvm.JAR_SET
    pinned.mkdir(parents=True)
    iceberg = pinned / f"{jvm.ICEBERG_RUNTIME}4.1_2.13-1.10.0.jar"
    iceberg.touch()
    settings = load_settings(home=tmp_path / "home", jars_dir=str(tmp_path / "jars"))
    jar = tmp_path / "changelake.jar"
    path = server_conf(settings, Endpoint(), jar)["spark.driver.extraClassPath"].split(os.pathsep)
    assert path == [str(jar), str(iceberg)]
    record = f"-Dchangelake.endpoint.guard.record={server_dir(settings) / GUARD_RECORD}"
    monkeypatch.delenv("CHANGELAKE_SERVER_GUARD_RECORD", raising=False)
    assert record not in server_conf(settings, Endpoint(), jar)["spark.driver.defaultJavaOptions"]
    monkeypatch.setenv("CHANGELAKE_SERVER_GUARD_RECORD", "1")
    assert record in server_conf(settings, Endpoint(), jar)["spark.driver.defaultJavaOptions"]
