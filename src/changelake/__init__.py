"""changelake: primary-key tables with Apache Fluss semantics on Iceberg, applied exactly once by PySpark.

The public Python API lives in :mod:`changelake.api` (``from changelake import ChangeLake``); Spark-free
reads in :mod:`changelake.storage.fastread` (``from changelake import FastReader``).
"""

from changelake.errors import ChangelakeError

__all__ = ["ChangeLake", "ChangelakeError", "FastReader", "__version__"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # Lazy so that `import changelake` (CLI help, Airflow DAG parsing) does not import pyspark.
    if name == "ChangeLake":
        from changelake.api import ChangeLake

        return ChangeLake
    if name == "FastReader":
        from changelake.storage.fastread import FastReader

        return FastReader
    raise AttributeError(name)
