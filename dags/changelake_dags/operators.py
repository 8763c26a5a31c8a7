"""The operator that runs changelake's Spark apps: warm through the SQL endpoint when it is up, else cold
through spark-submit.

Warm: ``make airflow`` and ``make demo`` start one long-lived Spark application (``infra/spark_server.sh``:
Spark Connect + Thrift/JDBC). A task then runs the app's Python entrypoint in the data environment with
``CHANGELAKE_SPARK_REMOTE`` pointing at it: the apply and quality apps do their Spark work there over Spark
Connect, the dbt app runs dbt's ``thrift`` target against it. No JVM starts per task, and the embedded Derby
metastore of dbt's tables stays with the one JVM that may open it.

Cold: no endpoint for this ``CHANGELAKE_HOME`` (or ``CHANGELAKE_WARM=0``): ``spark-submit`` on the
``spark_default`` connection, as on a cluster.

Either way the app's exit code decides what a failure is: only a retryable kind (a lost commit race) is
retried; a refused batch, a bad spec or an unknown table fails the task at once (``common.failure``).
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from changelake_dags import common


class ChangelakeSparkOperator(SparkSubmitOperator):
    """A SparkSubmitOperator for one of ``spark_apps/*.py`` that takes the warm path when it can."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self._warm_process: subprocess.Popen | None = None

    def execute(self, context: Any) -> None:
        from airflow.sdk.exceptions import AirflowException

        endpoint = common.warm_endpoint()
        if endpoint is not None:
            return self._execute_warm(endpoint)
        self.log.info("cold path: spark-submit (no SQL endpoint serves %s)", common.home())
        try:
            return super().execute(context)
        except AirflowException as e:
            # spark-submit exits with the Python app's code; the hook words it "Error code is: N."
            found = re.search(r"Error code is: (\d+)", str(e))
            if found is None:
                raise
            raise common.failure(f"spark-submit {self._app_name()} failed", int(found.group(1))) from e

    def _app_name(self) -> str:
        return os.path.basename(str(self.application))

    def _execute_warm(self, endpoint: dict[str, Any]) -> None:
        # Empty templated arguments ('' for an unset Param) are dropped by the apps themselves.
        command = [common.data_python(), str(self.application), *map(str, self.application_args or [])]
        env = {**os.environ, "CHANGELAKE_SPARK_REMOTE": endpoint["connect_url"]}
        self.log.info("warm path: %s on the SQL endpoint %s", " ".join(command), endpoint["connect_url"])
        self._warm_process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=common.REPO
        )
        for line in self._warm_process.stdout:  # progress lines into the task log as they come
            self.log.info("%s", line.rstrip())
        returncode = self._warm_process.wait()
        if returncode != 0:
            raise common.failure(
                f"{self._app_name()} exited with {returncode} "
                f"(warm path on {endpoint['connect_url']}; the lines above say why)",
                returncode,
            )

    def on_kill(self) -> None:
        if self._warm_process is not None and self._warm_process.poll() is None:
            self._warm_process.terminate()
            return
        super().on_kill()


def spark_submit(task_id: str, app: str, args: list[str], **kwargs) -> ChangelakeSparkOperator:
    """The operator for one of changelake's apps (warm through the SQL endpoint when it runs, else
    spark-submit), with the shared connection, conf and pool."""
    return ChangelakeSparkOperator(
        task_id=task_id,
        application=str(common.SPARK_APPS / app),
        application_args=args,
        conn_id="spark_default",
        conf=common.spark_conf(),
        name=f"changelake-{task_id}",
        pool=common.SPARK_POOL,
        verbose=False,
        **kwargs,
    )
