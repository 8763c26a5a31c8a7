"""Helpers for changelake's DAGs. Runs in the Airflow environment: stdlib and Airflow only.

Spark work runs in the data environment through ``spark-submit`` (SparkSubmitOperator) and the
``changelake`` CLI, both on PATH (``make airflow`` puts the data env's ``bin`` there).
"""
