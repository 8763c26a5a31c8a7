"""The one place that builds a SparkSession for changelake (apps, CLI, dbt runner, GX runner, tests)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from changelake.config import Settings
from changelake.runtime import jvm

# Defaults that matter for correctness (UTC, microsecond timestamps readable by pyiceberg) and for speed on
# small machines. Anything set by spark-submit, spark-defaults or the config file wins over them.
_DEFAULTS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
    "spark.ui.enabled": "false",
    "spark.driver.memory": "4g",
    "spark.sql.parquet.compression.codec": "zstd",
    # the UI, the logs and event logs show these settings' values as *** (credentials: jvm.SECRET_SETTINGS)
    "spark.redaction.regex": jvm.SECRET_SETTINGS,
}


def get_spark(settings: Settings, app_name: str = "changelake", hive: bool = False):
    """Return the active SparkSession or build one from ``settings``.

    Its classpath has Iceberg's Spark runtime and changelake's classes (:mod:`changelake.runtime.jvm`; a
    ConfigError naming ``make setup`` when they are missing), and its catalog ``changelake`` reads the tables of
    ``settings`` as Iceberg tables: ``changelake.<ns>.<table>``, ``…__changelog``.

    ``hive=True`` enables the Hive catalog (a Derby metastore under ``$CHANGELAKE_HOME/metastore``) for
    dbt's own tables; changelake's PK tables never need it.

    With ``settings.spark_remote`` (``sc://host:port``) the session is a Spark Connect client of that warm
    server and no JVM starts here; the server's own catalog (Hive, for the endpoint ``make sql`` starts)
    serves ``hive=True`` callers, whose embedded Derby metastore only one JVM can open.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    if settings.spark_remote:
        # A warm Spark Connect server (see `make sql`): no JVM in this process, the server's conf applies.
        from changelake.runtime.endpoint_auth import with_token

        return SparkSession.builder.remote(with_token(settings.spark_remote, settings)).getOrCreate()
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        # Under spark-submit: attach to its JVM first, so SparkConf() sees what it passed (e.g. --master).
        SparkContext._ensure_initialized()
    given = SparkConf()
    builder = SparkSession.builder.appName(app_name)
    conf = dict(_DEFAULTS)
    if not given.contains("spark.master"):
        conf["spark.master"] = settings.spark_master
    metastore = settings.metastore_dir
    conf["spark.sql.warehouse.dir"] = str(metastore / "spark-warehouse")
    log_config = Path(__file__).with_name("log4j2.properties")
    conf["spark.driver.extraJavaOptions"] = (
        f"-Dderby.system.home={metastore} -Dlog4j2.configurationFile={log_config}"
    )
    # Iceberg's Spark runtime and changelake's catalog (runtime/jvm.py): changelake.<ns>.<table> reads the tables.
    conf["spark.jars"] = ",".join(str(j) for j in jvm.spark_jars(settings))
    conf.update(jvm.catalog_conf(settings))
    if hive:
        metastore.mkdir(parents=True, exist_ok=True)
        conf["spark.sql.catalogImplementation"] = "hive"
        conf["spark.hadoop.javax.jdo.option.ConnectionURL"] = (
            f"jdbc:derby:;databaseName={metastore / 'metastore_db'};create=true"
        )
    # Python workers (per-bucket rewrite) must run this environment's interpreter, not whatever is on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf.update(settings.spark_conf)
    if settings.spark_conf.get("spark.jars"):  # the config file's jars besides changelake's, not instead
        conf["spark.jars"] = (
            ",".join(str(j) for j in jvm.spark_jars(settings)) + "," + settings.spark_conf["spark.jars"]
        )
    conf = {k: v for k, v in conf.items() if not given.contains(k)}
    if SparkContext._gateway is None and not os.environ.get("PYSPARK_GATEWAY_PORT"):
        # pyspark starts the JVM with spark-submit and every setting it has then as a --conf argument, which
        # any local user reads in the process list: start it without the credentials (jvm.is_secret), which
        # reach the SparkContext's configuration over py4j below, as every other setting does.
        public = [(k, v) for k, v in conf.items() if not jvm.is_secret(k)]
        launch = SparkConf(loadDefaults=False).setAll([*public, ("spark.app.name", app_name)])
        SparkContext._ensure_initialized(conf=launch)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
