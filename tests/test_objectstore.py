"""changelake.objectstore without a server: object paths, the storage options and where they come from, and
that secrets stay out of what is shown."""

from __future__ import annotations

import os
import pickle

import pytest

from changelake import objectstore
from changelake.config import load_settings
from changelake.errors import ConfigError
from changelake.objectstore import ObjectPath, Store

OPTIONS = {
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    "AWS_ACCESS_KEY_ID": "AK",
    "AWS_SECRET_ACCESS_KEY": "s3cr3t",
}


@pytest.fixture(autouse=True)
def no_aws_environment(monkeypatch):
    for variables in objectstore.OPTION_VARIABLES.values():
        for name in variables:
            monkeypatch.delenv(name, raising=False)


def test_an_object_path_joins_and_names_like_a_path_and_is_its_uri():
    landing = Store(OPTIONS).path("s3://lake/landing")
    batch = landing / "shop.orders" / "7.jsonl"
    assert str(batch) == "s3://lake/landing/shop.orders/7.jsonl"
    assert (batch.name, batch.bucket, batch.key) == ("7.jsonl", "lake", "landing/shop.orders/7.jsonl")
    assert str(batch.with_name("7.manifest.json")) == "s3://lake/landing/shop.orders/7.manifest.json"
    assert str(batch.parent) == "s3://lake/landing/shop.orders"
    assert batch.key_path == "lake/landing/shop.orders/7.jsonl"
    assert batch.store == Store(OPTIONS)  # derived paths keep the store they came from
    assert str(Store(OPTIONS).path("s3a://lake/x")) == "s3a://lake/x"


def test_an_object_path_is_never_taken_for_a_local_file(tmp_path):
    batch = Store(OPTIONS).path("s3://lake/landing/1.jsonl")
    with pytest.raises(TypeError, match="not a local path"):
        os.fspath(batch)
    with pytest.raises(TypeError):
        open(batch, "rb")  # noqa: SIM115 - must fail before opening anything
    assert not batch.is_relative_to(tmp_path)


def test_an_object_path_travels_to_a_task_with_its_store():
    batch = Store(OPTIONS).path("s3://lake/landing/1.jsonl")
    copy = pickle.loads(pickle.dumps(batch))
    assert copy == batch and str(copy) == str(batch)
    assert copy.store.options == OPTIONS


def test_not_an_object_location_is_refused_with_the_value():
    with pytest.raises(ValueError, match="'/tmp/x'"):
        Store(OPTIONS).path("/tmp/x")
    assert objectstore.is_object_location("s3://b/k") and not objectstore.is_object_location("file:///x")


def test_the_environment_wins_over_the_config_file_and_an_endpoint_gets_a_region(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1234")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-env")
    options = objectstore.storage_options({"aws_access_key_id": "from-file", "AWS_SECRET_ACCESS_KEY": "s"})
    assert options == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:1234",
        "AWS_ACCESS_KEY_ID": "from-env",
        "AWS_SECRET_ACCESS_KEY": "s",
        # without a region pyiceberg asks amazonaws.com where the bucket is
        "AWS_REGION": objectstore.DEFAULT_REGION,
    }
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:5678")  # the S3-only variable first
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    options = objectstore.storage_options()
    assert (options["AWS_ENDPOINT_URL"], options["AWS_REGION"]) == ("http://127.0.0.1:5678", "eu-west-1")


def test_the_storage_options_reach_pyiceberg_under_its_names_and_back():
    properties = objectstore.fileio_properties({**OPTIONS, "AWS_REGION": "us-east-1"})
    assert properties == {
        "s3.endpoint": "http://127.0.0.1:9",
        "s3.access-key-id": "AK",
        "s3.secret-access-key": "s3cr3t",
        "s3.region": "us-east-1",
    }
    assert objectstore.options_of_fileio({**properties, "py-io-impl": "x"}) == {
        **OPTIONS,
        "AWS_REGION": "us-east-1",
    }


def test_unknown_storage_options_in_the_config_file_are_refused(tmp_path):
    (tmp_path / "changelake.yaml").write_text("storage_options: {AWS_ENDPOINT: http://x}\n")
    with pytest.raises(ConfigError, match="AWS_ENDPOINT"):
        load_settings(home=tmp_path)


def test_secrets_are_not_shown(tmp_path):
    settings = load_settings(home=tmp_path, storage_options=OPTIONS, landing_dir="s3://lake/landing")
    assert "s3cr3t" not in repr(settings)
    assert "s3cr3t" not in repr(Store(OPTIONS)) and "s3cr3t" not in repr(settings.landing_dir)
    assert objectstore.redacted(OPTIONS)["AWS_SECRET_ACCESS_KEY"] == "***"


def test_an_s3_landing_zone_is_an_object_path_of_the_configured_store(tmp_path):
    settings = load_settings(home=tmp_path, storage_options=OPTIONS, landing_dir="s3://lake/landing")
    assert isinstance(settings.landing_dir, ObjectPath)
    assert str(settings.landing_dir / "t.kv") == "s3://lake/landing/t.kv"
    assert settings.landing_dir.store.options["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9"
    assert load_settings(home=tmp_path).landing_dir == tmp_path.resolve() / "landing"


def test_spark_reads_an_s3_warehouse_through_icebergs_s3fileio_and_its_credentials_are_known_secrets(
    tmp_path, monkeypatch
):
    from changelake.runtime import jvm

    monkeypatch.setenv("PYICEBERG_CATALOG__CHANGELAKE__TOKEN", "t0ken")
    settings = load_settings(
        home=tmp_path,
        warehouse="s3://lake/warehouse",
        storage_options=OPTIONS,
        catalog_type="rest",
        catalog_uri="http://127.0.0.1:9",
    )
    conf = jvm.catalog_conf(settings)
    prefix = "spark.sql.catalog.changelake."
    io = {
        k.removeprefix(prefix): v
        for k, v in conf.items()
        if k.startswith(prefix) and ("s3." in k or "io-" in k)
    }
    assert io == {
        "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        "s3.endpoint": "http://127.0.0.1:9",
        "s3.path-style-access": "true",  # a local endpoint has no per-bucket host names
        "s3.access-key-id": "AK",
        "s3.secret-access-key": "s3cr3t",
    }
    assert conf[prefix + "client.region"] == "us-east-1" and conf[prefix + "token"] == "t0ken"
    # The session builder starts the JVM without these (its command line is for every local user to read).
    assert {conf[k] for k in conf if jvm.is_secret(k)} == {"AK", "s3cr3t", "t0ken"}
    postgres = load_settings(home=tmp_path, catalog_uri="postgresql://cl:pw@127.0.0.1:5/db")
    assert [k for k, v in jvm.catalog_conf(postgres).items() if jvm.is_secret(k)] == [
        prefix + "jdbc.password"
    ]
    # A warehouse on local disk keeps Iceberg's default FileIO.
    local = jvm.catalog_conf(load_settings(home=tmp_path, storage_options=OPTIONS))
    assert not any("s3." in k or "io-impl" in k for k in local)


class _SessionConf:
    """A Spark session's runtime configuration (``spark.conf``), as :func:`jvm.spark_catalog` uses it."""

    def __init__(self, values: dict[str, str]):
        self.values = dict(values)

    def get(self, key: str, default=None):
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


def test_one_warehouse_name_on_two_endpoints_is_two_spark_catalogs(tmp_path):
    from types import SimpleNamespace

    from changelake.runtime import jvm

    def settings(**options):
        return load_settings(
            home=tmp_path, warehouse="s3://lake/warehouse", storage_options={**OPTIONS, **options}
        )

    first = settings()
    other_endpoint = settings(AWS_ENDPOINT_URL="http://127.0.0.2:9")
    other_keys = settings(AWS_ACCESS_KEY_ID="AK2")
    spark = SimpleNamespace(conf=_SessionConf(jvm.catalog_conf(first)))  # a session built for ``first``
    assert jvm.spark_catalog(spark, first) == jvm.SPARK_CATALOG
    name = jvm.spark_catalog(spark, other_endpoint)
    assert name != jvm.SPARK_CATALOG
    assert spark.conf.get(f"spark.sql.catalog.{name}.s3.endpoint") == "http://127.0.0.2:9"
    assert jvm.spark_catalog(spark, other_endpoint) == name  # registered once, found again
    assert jvm.spark_catalog(spark, other_keys) not in (name, jvm.SPARK_CATALOG)
    assert not any("s3cr3t" in k for k in spark.conf.values)  # the catalogs' names show no secret


def test_an_object_writer_sends_one_put_on_close_and_nothing_otherwise(monkeypatch):
    """Where the store is reached directly, what is written goes as one PUT when the writer closes; a writer
    left by an exception, or dropped unclosed, sends nothing (the store itself: tests/storage/test_s3.py)."""
    sent: list[tuple[str, str, bytes]] = []

    class Direct:
        def put(self, bucket, key, uri, body):
            sent.append((bucket, key, body))

    monkeypatch.setattr(objectstore, "_direct_reads", lambda key: Direct())
    store = Store(OPTIONS)
    with store.open_output("s3://lake/t/a.parquet") as out:
        out.write(b"PAR1")
        out.write(memoryview(b"rows"))
        out.write(bytearray(b"PAR1"))
        assert out.tell() == 12 and sent == []
    assert sent == [("lake", "t/a.parquet", b"PAR1rowsPAR1")]
    with pytest.raises(RuntimeError):
        with store.open_output("s3://lake/t/b.parquet") as out:
            out.write(b"half")
            raise RuntimeError("the writer failed")
    left = store.open_output("s3://lake/t/c.parquet")
    left.write(b"never closed")
    del left
    assert [key for _, key, _ in sent] == ["t/a.parquet"]
