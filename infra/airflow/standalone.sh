#!/usr/bin/env bash
# start | stop | init — `airflow standalone` in the background, its pid and log under $AIRFLOW_HOME; start and
# stop also start and stop the warm Spark endpoint (infra/spark_server.sh) the DAGs' Spark tasks run on.
set -euo pipefail
cd "$(dirname "$0")/../.."
. infra/airflow/env.sh
AIRFLOW=.venv-airflow/bin/airflow
PIDFILE="$AIRFLOW_HOME/standalone.pid"
LOG="$AIRFLOW_HOME/standalone.log"

init() {  # idempotent: metadata DB, the Spark pool, DAGs parsed into the DB
  mkdir -p "$AIRFLOW_HOME"
  "$AIRFLOW" db migrate >"$AIRFLOW_HOME/migrate.log" 2>&1 || { tail -20 "$AIRFLOW_HOME/migrate.log"; exit 1; }
  "$AIRFLOW" pools set changelake_spark 1 "Serialises local Spark drivers (2 cores, one Derby metastore)" >/dev/null
}

case "${1:-start}" in
  init) init ;;
  start)
    if [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      echo "Airflow is already running (pid $(cat "$PIDFILE"))"
    else
      init
      # The warm path for the DAGs' Spark tasks (see dags/changelake_dags/operators.py); without it they
      # spark-submit per task.
      if [[ "${CHANGELAKE_WARM:-1}" != 0 ]]; then
        infra/spark_server.sh start || echo "the warm Spark endpoint did not start; the DAGs' Spark tasks run cold" >&2
      fi
      setsid nohup "$AIRFLOW" standalone >"$LOG" 2>&1 &
      echo $! >"$PIDFILE"
      echo -n "starting Airflow (log: $LOG) "
      healthy=0
      for _ in $(seq 1 90); do
        if curl -fsS "http://localhost:$AIRFLOW_PORT/api/v2/monitor/health" >/dev/null 2>&1; then healthy=1; break; fi
        kill -0 "$(cat "$PIDFILE")" 2>/dev/null || { echo; echo "Airflow exited:"; tail -30 "$LOG"; exit 1; }
        echo -n "."; sleep 2
      done
      echo
      if [[ $healthy != 1 ]]; then
        echo "Airflow's API server did not answer on port $AIRFLOW_PORT within 180 s; last log lines:" >&2
        tail -30 "$LOG" >&2
        "$0" stop >&2
        exit 1
      fi
    fi
    PASSWORDS="$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated"
    echo "Airflow UI: http://localhost:$AIRFLOW_PORT"
    if [[ -f "$PASSWORDS" ]]; then
      echo "login: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(", ".join(f"{u} / {p}" for u, p in d.items()))' "$PASSWORDS")"
    fi
    echo "(simple auth manager, authentication on; passwords in $PASSWORDS)"
    echo "stop with: make airflow-stop"
    ;;
  stop)
    if [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      kill -TERM -- "-$(cat "$PIDFILE")" 2>/dev/null || kill -TERM "$(cat "$PIDFILE")"
      for _ in $(seq 1 30); do kill -0 "$(cat "$PIDFILE")" 2>/dev/null || break; sleep 1; done
      kill -KILL -- "-$(cat "$PIDFILE")" 2>/dev/null || true
      echo "Airflow stopped"
    else
      echo "Airflow is not running"
    fi
    rm -f "$PIDFILE"
    infra/spark_server.sh stop
    ;;
  *) echo "usage: $0 start|stop|init" >&2; exit 2 ;;
esac
