# Environment of changelake's Airflow: source it (`. infra/airflow/env.sh`) from the repository root.
# Airflow's home and SQLite metadata DB live under $CHANGELAKE_HOME/airflow; the DAG folder is dags/; the
# data env's bin (spark-submit, changelake) comes first on PATH so tasks run Spark in the data env.
REPO_ROOT="${REPO_ROOT:-$(pwd)}"
export CHANGELAKE_HOME="${CHANGELAKE_HOME:-$REPO_ROOT/.changelake}"
export CHANGELAKE_TABLES="${CHANGELAKE_TABLES:-$REPO_ROOT/examples/tables}"
export AIRFLOW_HOME="${AIRFLOW_HOME:-$CHANGELAKE_HOME/airflow}"
export AIRFLOW_PORT="${AIRFLOW_PORT:-8080}"
export AIRFLOW__CORE__DAGS_FOLDER="$REPO_ROOT/dags"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
# The DAGs run on their schedules as soon as Airflow sees them, except changelake_demo_source, which lands
# data and is paused at creation in its own file (make airflow DEMO_SOURCE=1 unpauses it).
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS:-admin:admin}"
export AIRFLOW__API__PORT="$AIRFLOW_PORT"
# Loopback, as every server of the project, unless asked otherwise (AIRFLOW__API__HOST=0.0.0.0 for the LAN).
export AIRFLOW__API__HOST="${AIRFLOW__API__HOST:-127.0.0.1}"
case "$AIRFLOW__API__HOST" in 0.0.0.0 | :: | "") AIRFLOW_API_ADDRESS=127.0.0.1 ;; *) AIRFLOW_API_ADDRESS="$AIRFLOW__API__HOST" ;; esac
export AIRFLOW_API_ADDRESS
export AIRFLOW__API__BASE_URL="${AIRFLOW__API__BASE_URL:-http://localhost:$AIRFLOW_PORT}"
# The tasks' calls go to the address the API server listens on ("localhost" may resolve to ::1 first).
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://$AIRFLOW_API_ADDRESS:$AIRFLOW_PORT/execution/"
# The LocalExecutor runs this many tasks at once, one process each (Airflow's default is 32): one per core, at
# least two, so that the Spark tasks (one at a time, pool changelake_spark) leave room for the light ones.
NPROC="$(nproc 2>/dev/null || echo 2)"
export AIRFLOW__CORE__PARALLELISM="${AIRFLOW__CORE__PARALLELISM:-$((NPROC > 2 ? NPROC : 2))}"
export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="${AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL:-30}"
export AIRFLOW__LOGGING__COLORED_CONSOLE_LOG=False
# The first retry of a retryable failure (a lost commit race) after 30 s, then exponentially longer.
export AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY="${AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY:-30}"
# spark_default: local Spark unless the caller points it at a cluster (make airflow SPARK_MASTER=spark://...).
export AIRFLOW_CONN_SPARK_DEFAULT="${AIRFLOW_CONN_SPARK_DEFAULT:-{\"conn_type\": \"spark\", \"host\": \"${SPARK_MASTER:-local[2]}\"}}"
# airflow standalone starts its components as `airflow ...` subprocesses, so the Airflow env's bin is on
# PATH too, after the data env's (whose spark-submit and python the Spark tasks need).
export PATH="$REPO_ROOT/.venv/bin:$REPO_ROOT/.venv-airflow/bin:$PATH"
