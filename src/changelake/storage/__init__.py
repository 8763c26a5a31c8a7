"""Storage: PK tables and their changelogs as Iceberg tables, read with or without Spark.

``iceberg`` is the catalog and commit side (pyiceberg only); ``sparkread`` builds Spark DataFrames over the
planned files; ``fastread`` answers lookups, scans and status through pyarrow without a JVM.
"""
