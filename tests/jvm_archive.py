"""A class-data archive (Java's AppCDS) of Spark's own classes, for the JVMs the tests start.

A Spark driver loads ~10k classes from pyspark's jars at its start, and the suite starts hundreds of drivers
(every worker's session, each CLI, app and endpoint a test runs). ``make setup`` runs one short Spark job that
writes the classes it loaded into ``.cache/jvm-cds`` (``python -m tests.jvm_archive``); tests/conftest.py
points the test JVMs at it (``-XX:SharedArchiveFile``), which then map those classes instead of parsing and
verifying them: 53 Spark tests on two workers took 95 s of CPU against 109 s without it.

The archive stays correct when the classpath changes: the JVM checks each jar's size and modification time
against the archive's and, on any difference, runs without it (its warning is silenced:
``-Xlog:cds=off``). The file's name is a fingerprint of the jars and the Java it was built with, so a changed
classpath or Java makes set-up build a new one. Stdlib only: the Airflow env's tests read tests/conftest.py too.
Benchmarks and ``make demo`` never use it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DIRECTORY = REPO / ".cache" / "jvm-cds"

#: What the JVM needs to use the archive and keep quiet when it cannot (a stale archive is then skipped).
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"

# The job whose classes go into the archive: a session, SQL with a shuffle and a join, Parquet written and
# read, Arrow batches through a Python worker (mapInArrow, as the bucket tasks do). The driver must have
# exited when this returns: the JVM writes the archive as it exits.
_WORKLOAD = """
import sys
from pyspark.sql import SparkSession

spark = (
    SparkSession.builder.master("local[2]").appName("changelake-jvm-archive")
    .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4")
    .config("spark.sql.session.timeZone", "UTC").getOrCreate()
)
df = spark.range(50_000).selectExpr("id % 97 AS k", "id AS v", "CAST(id AS STRING) AS s",
                                    "TIMESTAMP '2026-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id) AS t")
df.groupBy("k").agg({"v": "sum", "t": "max"}).write.mode("overwrite").parquet(sys.argv[1])
spark.read.parquet(sys.argv[1]).join(df, "k").count()
df.mapInArrow(lambda batches: batches, df.schema).count()
spark.sql("SELECT k, count(*) FROM VALUES (1), (2) AS v(k) GROUP BY k").collect()
gateway = spark.sparkContext._gateway
spark.stop()
gateway.proc.stdin.close()
sys.exit(gateway.proc.wait())
"""


def _java_home() -> Path | None:
    """The Java a Spark launcher runs (JAVA_HOME, else ``java`` on PATH)."""
    if os.environ.get("JAVA_HOME"):
        return Path(os.environ["JAVA_HOME"])
    java = shutil.which("java")
    return Path(os.path.realpath(java)).parent.parent if java else None


def _spark_jars() -> list[Path]:
    found = sorted(REPO.glob(".venv/lib/python*/site-packages/pyspark/jars"))
    return sorted(found[0].glob("*.jar")) if found else []


def fingerprint() -> str | None:
    """A hash of pyspark's jars (names, sizes, times) and the JVM library, or None without either."""
    home, jars = _java_home(), _spark_jars()
    libjvm = home / "lib" / "server" / "libjvm.so" if home else None
    if not jars or libjvm is None or not libjvm.is_file():
        return None
    digest = hashlib.sha256()
    for path in [libjvm, *jars]:
        stat = path.stat()
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def archive() -> Path | None:
    """The archive set-up built for this checkout's jars and Java, if there is one."""
    key = fingerprint()
    path = DIRECTORY / f"spark-{key}.jsa" if key else None
    return path if path is not None and path.is_file() else None


def jvm_options() -> str:
    """The options that make a Spark JVM use the archive ('' without one)."""
    path = archive()
    return f"-XX:SharedArchiveFile={path} {QUIET}" if path else ""


def build() -> int:
    """Build the archive unless it is there; a failure is reported and leaves none (tests then run without)."""
    key = fingerprint()
    if key is None:
        print("jvm archive: no pyspark jars or no Java; skipped", file=sys.stderr)
        return 0
    target = DIRECTORY / f"spark-{key}.jsa"
    if target.is_file():
        print(f"jvm archive: {target.relative_to(REPO)} is up to date")
        return 0
    DIRECTORY.mkdir(parents=True, exist_ok=True)
    partial = DIRECTORY / f".spark-{key}.{os.getpid()}.jsa"
    with tempfile.TemporaryDirectory(prefix="changelake-jvm-archive-") as work:
        # C1 only, as the tests' JVMs (conftest.TEST_JVM_OPTIONS): the archive holds classes, not compiled code.
        dump = f"-XX:TieredStopAtLevel=1 -XX:ArchiveClassesAtExit={partial}"
        env = {**os.environ, "SPARK_SUBMIT_OPTS": dump, "PYSPARK_PYTHON": sys.executable}
        proc = subprocess.run(
            [sys.executable, "-c", _WORKLOAD, str(Path(work) / "out")],
            env=env,
            cwd=work,
            capture_output=True,
            text=True,
            check=False,
        )
    # Only a JVM that exited cleanly wrote a whole archive: a cut-short one crashes the JVM that maps it.
    if proc.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        print(
            f"jvm archive: not built (exit {proc.returncode}); the tests run without it:\n"
            + (proc.stdout + proc.stderr)[-2000:],
            file=sys.stderr,
        )
        return 0
    for old in DIRECTORY.glob("spark-*.jsa"):
        old.unlink()
    os.replace(partial, target)
    print(f"jvm archive: {target.relative_to(REPO)} ({target.stat().st_size // 2**20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(build())
