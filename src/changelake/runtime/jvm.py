"""What Spark's JVM needs of changelake: the pinned jars, changelake's own classes, and the ``changelake`` catalog.

- **Pinned jars** (decision 16): ``make setup`` runs ``infra/jars.sh spark``, which copies the exact versions
  of ``infra/jars/spark/pom.xml`` from Maven Central into ``.cache/jars/spark`` (Iceberg's Spark runtime, the
  SQLite and PostgreSQL JDBC drivers its JDBC catalog uses), checked against ``jars.lock``. Nothing is resolved
  at run time: a missing jar is a :class:`~changelake.errors.ConfigError` that names ``make setup``.
- **changelake's classes** (``runtime/java``): the Spark catalog that reads changelake's tables
  (``changelake.spark.ChangelakeCatalog``) and the SQL endpoint's authenticator and statement guard. They are
  compiled with the JDK's ``javac`` against pyspark's jars and Iceberg's runtime into one jar,
  ``.cache/jars/changelake/changelake-<sources hash>.jar`` (``make setup`` builds it; a changed source is
  built again on first use, a few seconds).
- **The ``changelake`` Spark catalog** (:func:`catalog_conf`): Iceberg's ``SparkCatalog`` over the catalog
  pyiceberg writes (SQLite or PostgreSQL through Iceberg's ``JdbcCatalog``, or a REST catalog), so Spark reads
  ``changelake.<ns>.<table>`` and ``changelake.<ns>.<table>__changelog`` as the Iceberg tables they are:
  position deletes applied by Iceberg, ``VERSION AS OF``, metadata tables (``.snapshots``, ``.files``). It is
  read only and hides a PK table's ``_bucket`` (``ReadOnlyTable.java``); no table cache, so every query sees
  the latest commit.

The session builder (:mod:`changelake.runtime.session`) puts both on ``spark.jars``; ``spark-submit`` callers
pass :func:`spark_jars` the same way (the Makefile's ``apply``, the DAGs' cold path).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

from changelake import objectstore
from changelake.config import CHECKOUT, Settings
from changelake.errors import ConfigError
from changelake.storage.catalog import bearer_token

#: The Spark catalog name changelake's tables are read under: ``changelake.<namespace>.<table>``.
SPARK_CATALOG = "changelake"
CATALOG_CLASS = "changelake.spark.ChangelakeCatalog"
JAVA_SOURCES = Path(__file__).with_name("java")
#: The jar set of infra/jars/ that Spark needs, and a jar of it that must be there.
JAR_SET = "spark"
ICEBERG_RUNTIME = "iceberg-spark-runtime-"
#: Spark settings whose values are credentials (Spark's own ``spark.redaction.regex`` default, and access-key
#: ids and credentials besides): the session builder keeps them off the JVM's command line and Spark's UI,
#: logs and event logs show them redacted.
SECRET_SETTINGS = r"(?i)secret|password|token|access[.-]key|credential"


def is_secret(key: str) -> bool:
    """Whether the Spark setting ``key`` holds a credential (:data:`SECRET_SETTINGS`)."""
    return re.search(SECRET_SETTINGS, key) is not None


def jars_dir(settings: Settings) -> Path:
    """Where ``infra/jars.sh`` puts the jar sets: the ``jars_dir`` setting (``CHANGELAKE_JARS``), else the
    checkout's ``.cache/jars``."""
    return Path(settings.jars_dir).expanduser() if settings.jars_dir else CHECKOUT / ".cache" / "jars"


def pinned_jars(settings: Settings) -> list[Path]:
    """The jars of the ``spark`` set, sorted; a ConfigError naming ``make setup`` when they are not there."""
    directory = jars_dir(settings) / JAR_SET
    jars = sorted(directory.glob("*.jar"))
    if not any(j.name.startswith(ICEBERG_RUNTIME) for j in jars):
        raise ConfigError(
            f"Iceberg's Spark runtime is not in {directory}: run `make setup` (infra/jars.sh {JAR_SET} fetches the "
            "pinned jars from Maven Central once; nothing is downloaded at run time)"
        )
    return jars


def spark_jars(settings: Settings) -> list[Path]:
    """Every jar changelake puts on Spark's classpath: the pinned set and changelake's own classes."""
    pinned = pinned_jars(settings)
    return [*pinned, compiled_jar(settings, pinned)]


def compiled_jar(settings: Settings, pinned: list[Path] | None = None) -> Path:
    """changelake's Java classes as one jar, compiled once per version of their sources (and of the jars they
    are compiled against) into ``<jars>/changelake/changelake-<hash>.jar``; earlier versions are removed."""
    from pyspark.find_spark_home import _find_spark_home

    pinned = pinned_jars(settings) if pinned is None else pinned
    # Spark's own jars, found as pyspark finds them: under spark-submit pyspark is imported from a zip
    # (python/lib/pyspark.zip) and SPARK_HOME names the installation.
    spark_jars_dir = Path(_find_spark_home()).resolve() / "jars"
    sources = sorted(JAVA_SOURCES.rglob("*.java"))
    digest = hashlib.sha256()
    for source in sources:
        digest.update(str(source.relative_to(JAVA_SOURCES)).encode() + b"\0" + source.read_bytes())
    for jar in pinned:
        digest.update(jar.name.encode())
    digest.update(str(spark_jars_dir).encode())
    out_dir = jars_dir(settings) / "changelake"
    out = out_dir / f"changelake-{digest.hexdigest()[:16]}.jar"
    if out.exists():
        return out
    javac = shutil.which("javac") or (
        str(Path(os.environ["JAVA_HOME"], "bin", "javac")) if os.environ.get("JAVA_HOME") else None
    )
    if javac is None or not Path(javac).exists():
        raise ConfigError(
            "changelake's Spark catalog and SQL endpoint classes need a JDK (javac) to build: install one "
            "(Debian: openjdk-17-jdk-headless) and run `make setup`"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".classes-", dir=out_dir) as scratch:
        classes = Path(scratch) / "classes"
        classpath = os.pathsep.join([f"{spark_jars_dir}/*", *map(str, pinned)])
        run = subprocess.run(
            [javac, "-nowarn", "-d", str(classes), "-cp", classpath, *map(str, sources)],
            capture_output=True,
            text=True,
        )
        if run.returncode != 0:
            raise ConfigError(f"javac could not build changelake's Java classes:\n{run.stderr[-2000:]}")
        partial = Path(scratch) / out.name
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(classes.rglob("*.class")):
                archive.write(path, path.relative_to(classes).as_posix())
        os.replace(partial, out)  # whole or not at all; a racing build's jar is the same
    for old in out_dir.glob("changelake-*.jar"):
        if old != out:
            old.unlink(missing_ok=True)
    return out


def catalog_conf(settings: Settings, name: str = SPARK_CATALOG) -> dict[str, str]:
    """Spark settings of the Spark catalog ``name`` over ``settings``' Iceberg catalog: Iceberg's JDBC catalog
    on the SQL catalog pyiceberg writes (SQLite or PostgreSQL, reading the rows registered under
    ``settings.catalog_name``), or Iceberg's REST catalog. No table cache: each query loads the table's
    current metadata, so a batch is visible to Spark as soon as it is committed.

    A warehouse on an object store (``s3://``) is read through Iceberg's ``S3FileIO`` with the storage options
    (:func:`changelake.objectstore.java_fileio_properties`): the driver plans with it, and each executor reads
    the table's files with the copy serialized with the table, so no executor needs the store's settings of its
    own. Some values are credentials (:func:`is_secret`)."""
    prefix = f"spark.sql.catalog.{name}"
    conf = {
        prefix: CATALOG_CLASS,
        f"{prefix}.warehouse": settings.warehouse,
        f"{prefix}.iceberg-catalog-name": settings.catalog_name,
        f"{prefix}.cache-enabled": "false",
    }
    if objectstore.is_object_location(settings.warehouse):
        options = settings.storage_options
        conf.update({f"{prefix}.{k}": v for k, v in objectstore.java_fileio_properties(options).items()})
    if settings.catalog_type == "rest":
        conf[f"{prefix}.type"] = "rest"
        conf[f"{prefix}.uri"] = settings.catalog_uri
        conf.update({f"{prefix}.{k}": str(v) for k, v in settings.catalog_properties.items()})
        token = bearer_token(settings)
        if token:
            conf[f"{prefix}.token"] = token
        return conf
    conf[f"{prefix}.type"] = "jdbc"
    conf[f"{prefix}.jdbc.schema-version"] = "V1"  # the schema pyiceberg's SqlCatalog creates
    uri = settings.catalog_uri
    if uri.startswith("sqlite:///"):
        conf[f"{prefix}.uri"] = f"jdbc:sqlite:{uri[len('sqlite:///') :]}"  # as Storage opens it
        return conf
    parts = urlsplit(uri)
    if not parts.scheme.startswith("postgresql"):
        raise ConfigError(
            f"catalog_uri {uri!r}: Spark reads a SQLite or PostgreSQL SQL catalog, or a REST catalog"
        )
    conf[f"{prefix}.uri"] = f"jdbc:postgresql://{parts.hostname}:{parts.port or 5432}{parts.path}"
    if parts.username:
        conf[f"{prefix}.jdbc.user"] = unquote(parts.username)
    if parts.password:
        conf[f"{prefix}.jdbc.password"] = unquote(parts.password)
    return conf


def spark_catalog(spark, settings: Settings) -> str:
    """The name of the Spark catalog that reads ``settings``' tables in this session: ``changelake`` when the
    session was built for them (:mod:`changelake.runtime.session`, the SQL endpoint), else a catalog of its own
    registered now (a process that works with several changelake homes, as the tests do).

    Every setting of the catalog tells two apart, not only its catalog and warehouse: two homes with one
    warehouse name on different S3 endpoints (or with other keys) are different tables. The name is a hash of
    them (credentials included: a hash shows none of them)."""
    prefix = f"spark.sql.catalog.{SPARK_CATALOG}"
    identity = {k.removeprefix(prefix): v for k, v in catalog_conf(settings).items()}
    if all(spark.conf.get(f"{prefix}{k}", None) == v for k, v in identity.items()):
        return SPARK_CATALOG
    key = "\0".join(f"{k}={v}" for k, v in sorted(identity.items()))
    name = f"{SPARK_CATALOG}_{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    if spark.conf.get(f"spark.sql.catalog.{name}", None) is None:
        for k, v in catalog_conf(settings, name).items():
            spark.conf.set(k, v)
    return name


def main() -> int:
    """``python -m changelake.runtime.jvm``: build changelake's jar now (``make setup``), print its path."""
    from changelake.config import load_settings

    print(compiled_jar(load_settings()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
