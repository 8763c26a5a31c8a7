#!/usr/bin/env bash
# The Airflow components of `make airflow`, started in order: the API server first, then, once it answers,
# the DAG processor, the triggerer and the scheduler. `airflow standalone` starts all four at once, and its
# scheduler queued tasks whose first calls to the execution API met a refused connection (a traceback each,
# and a retry). standalone.sh runs this in a process group of its own (stopping the group stops everything)
# with the output in one log, each line prefixed by its component. No log server: the API server reads the
# task logs from this machine's disk, and serve-logs would listen on every interface.
set -euo pipefail
cd "$(dirname "$0")/../.."
. infra/airflow/env.sh
AIRFLOW=.venv-airflow/bin/airflow
HEALTH="http://$AIRFLOW_API_ADDRESS:$AIRFLOW_PORT/api/v2/monitor/health"

component() {  # name airflow-arguments...: run one component in the background, its lines prefixed
  local name="$1"
  shift
  "$AIRFLOW" "$@" 2>&1 | sed -u "s/^/$name | /" &
}

say() { echo "components | $*"; }

say "starting the API server on $AIRFLOW__API__HOST:$AIRFLOW_PORT ($AIRFLOW__CORE__PARALLELISM executor slots)"
component api-server api-server --host "$AIRFLOW__API__HOST" --port "$AIRFLOW_PORT"
api=$!
until curl -fsS "$HEALTH" >/dev/null 2>&1; do
  kill -0 "$api" 2>/dev/null || { say "the API server exited before it answered"; exit 1; }
  sleep 1
done
say "the API server answers; starting the DAG processor, the triggerer and the scheduler"
component dag-processor dag-processor
component triggerer triggerer --skip-serve-logs
component scheduler scheduler --skip-serve-logs
wait -n || true  # the first component to exit ends the group's run; standalone.sh reports it
say "a component exited; stopping the others"
kill -TERM 0 2>/dev/null || true
