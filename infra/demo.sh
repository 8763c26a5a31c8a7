#!/usr/bin/env bash
# `make demo`: land sample batches and run the pipeline end to end through Airflow (`airflow dags test`,
# the same task code the scheduler runs), then print a summary. Idempotent: each run lands new batches.
set -euo pipefail
cd "$(dirname "$0")/.."
# `make demo-kafka`: the same pipeline with Kafka topics as the tables' sources. A local broker (infra/kafka.sh)
# runs for the demo, the specs are the demo's with a topic each (infra/demo_kafka_specs.py), and the demo
# source DAG's `changelake datagen` produces into the topics instead of landing files.
# `make demo-s3`: the same pipeline with the warehouse and the landing zone on a local S3 endpoint
# (infra/s3.sh) and the tables behind a local Iceberg REST catalog (infra/rest_catalog.sh), both started for the
# demo unless already running and stopped after it (before them, the warm endpoint that reads through them).
SERVER_STARTED=0
KAFKA_STARTED=0
S3_STARTED=0
REST_STARTED=0
stop_server() {
  if [[ $SERVER_STARTED == 1 && "${CHANGELAKE_DEMO_KEEP_SERVER:-0}" != 1 ]]; then
    infra/spark_server.sh stop >/dev/null 2>&1 || true
  fi
  if [[ $KAFKA_STARTED == 1 && "${CHANGELAKE_DEMO_KEEP_SERVER:-0}" != 1 ]]; then
    infra/kafka.sh stop >/dev/null 2>&1 || true
  fi
  if [[ $REST_STARTED == 1 && "${CHANGELAKE_DEMO_KEEP_SERVER:-0}" != 1 ]]; then
    infra/rest_catalog.sh stop >/dev/null 2>&1 || true
  fi
  if [[ $S3_STARTED == 1 && "${CHANGELAKE_DEMO_KEEP_SERVER:-0}" != 1 ]]; then
    infra/s3.sh stop >/dev/null 2>&1 || true
  fi
}
trap stop_server EXIT
if [[ "${CHANGELAKE_DEMO_S3:-0}" == 1 ]]; then
  echo "==> the local S3 endpoint and Iceberg REST catalog (infra/s3.sh, infra/rest_catalog.sh)"
  started=$(infra/s3.sh start)
  [[ $started == *"already running"* ]] || S3_STARTED=1
  echo "$started" | head -1 | sed 's/^/    /'
  started=$(infra/rest_catalog.sh start)
  [[ $started == *"already running"* ]] || REST_STARTED=1
  echo "$started" | head -1 | sed 's/^/    /'
  # The endpoint, its keys, the catalog's address and token, the warehouse: every process below (the warm
  # endpoint, Airflow's tasks, dbt, GX) inherits them; none is printed.
  # shellcheck disable=SC1090
  source "$(infra/rest_catalog.sh env)"
  export CHANGELAKE_LANDING="${CHANGELAKE_LANDING:-s3://changelake/landing}"
  echo "    warehouse $CHANGELAKE_WAREHOUSE, landing zone $CHANGELAKE_LANDING, catalog $CHANGELAKE_CATALOG_URI"
  DEMO_TARGET=demo-s3
fi
if [[ "${CHANGELAKE_DEMO_KAFKA:-0}" == 1 ]]; then
  export CHANGELAKE_TABLES="$CHANGELAKE_HOME/kafka-tables"
  DEMO_TARGET=demo-kafka
  .venv/bin/python infra/demo_kafka_specs.py "$CHANGELAKE_TABLES" "$CHANGELAKE_HOME/kafka/schemas"
  if ! infra/kafka.sh status >/dev/null 2>&1; then
    echo "==> starting a local Kafka broker (infra/kafka.sh)"
    STOP_HINT=0 infra/kafka.sh start | sed 's/^/    /'
    KAFKA_STARTED=1
  fi
fi
. infra/airflow/env.sh
AIRFLOW=.venv-airflow/bin/airflow
RUN_DIR="$CHANGELAKE_HOME/demo/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$RUN_DIR"
infra/airflow/standalone.sh init

# The warm path: one Spark application (Spark Connect + Thrift) serves every task of the pipeline, so no
# task starts a JVM. Stopped at the end if this run started it; if it cannot start, the tasks run cold
# (spark-submit per task), only slower.
if [[ "${CHANGELAKE_WARM:-1}" != 0 ]] && ! infra/spark_server.sh status >/dev/null 2>&1; then
  echo "==> starting the warm Spark endpoint (infra/spark_server.sh)"
  started=$SECONDS
  if MAKE_TARGET=demo infra/spark_server.sh start >"$RUN_DIR/spark_server.log" 2>&1; then
    SERVER_STARTED=1
    echo "    ready in $((SECONDS - started))s: $(grep -m1 'Spark Connect' "$RUN_DIR/spark_server.log")"
  else
    # Said here, not only in the log: without the endpoint every task starts a JVM of its own.
    echo "    !! the warm endpoint did not start, so each Spark task starts its own JVM (slower, same results):" >&2
    grep -m3 -E "taken|error|Error|exited" "$RUN_DIR/spark_server.log" | sed 's/^/       /' >&2 || true
    echo "       full log: $RUN_DIR/spark_server.log" >&2
  fi
fi

run_dag() {  # dag_id [conf]: run one DAG through Airflow, show its progress lines, fail if the run failed
  local dag="$1" conf="${2:-{\}}" log="$RUN_DIR/$1.log"
  echo "==> airflow dags test $dag (log: $log)"
  local started=$SECONDS
  "$AIRFLOW" dags test "$dag" -c "$conf" >"$log" 2>&1 || true
  grep -E "\] batch [0-9]+: [0-9]+ messages|batch [0-9]+\) committed|batch [0-9]+ already applied|up to date|\[dbt\] build:|\[quality\] [0-9]+/[0-9]+ expectations|\[quality\] WARNING|\[DAG TEST\] end task" "$log" \
    | grep -v "Returned value" | sed -E 's/^.*\[info *\] //; s/ \[airflow[^]]*\].*$//; s/ loc=.*$//' | sed 's/^/    /' || true
  if ! grep -q "DagRun Finished: dag_id=$dag.*state=success" "$log"; then
    echo "!! $dag did not succeed; last lines of $log:" >&2
    tail -40 "$log" >&2
    exit 1
  fi
  echo "    $dag: success in $((SECONDS - started))s"
}

run_dag changelake_demo_source '{"batches": 2}'
run_dag changelake_apply
run_dag changelake_dbt
run_dag changelake_quality
.venv/bin/python infra/demo_summary.py --run-dir "$RUN_DIR"
if [[ $SERVER_STARTED == 1 && "${CHANGELAKE_DEMO_KEEP_SERVER:-0}" != 1 ]]; then
  echo "(the warm Spark endpoint is stopped now: start it again with the make sql line above, or keep it"
  echo " running after the demo with CHANGELAKE_DEMO_KEEP_SERVER=1 make ${DEMO_TARGET:-demo})"
fi
