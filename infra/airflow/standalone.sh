#!/usr/bin/env bash
# start | stop | init — Airflow's API server, DAG processor, triggerer and scheduler in the background, in that
# order (infra/airflow/components.sh), their pid and log under $AIRFLOW_HOME; start also starts the warm Spark
# endpoint (infra/spark_server.sh) the DAGs' Spark tasks run on, and stop stops it when start started it.
# start pauses changelake_demo_source (it lands batches) unless DEMO_SOURCE=1.
set -euo pipefail
cd "$(dirname "$0")/../.."
. infra/airflow/env.sh
AIRFLOW=.venv-airflow/bin/airflow
PIDFILE="$AIRFLOW_HOME/standalone.pid"
LOG="$AIRFLOW_HOME/standalone.log"
# present while the SQL endpoint running is the one `start` started (so `stop` leaves one from `make sql`)
OWNS_SERVER="$AIRFLOW_HOME/started-sql-endpoint"

what_runs() {  # what the scheduler now does without anyone asking, from the metadata DB's pause flags
  local paused
  paused="$("$AIRFLOW" dags list --output json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:  # warnings may come first on stdout
    if line.startswith("["):
        print(" ".join(d["dag_id"] for d in json.loads(line) if str(d.get("is_paused")).lower() == "true"))' || true)"
  state() { if [[ " $paused " == *" $1 "* ]]; then echo "paused "; else echo "ON     "; fi; }
  echo "What runs on its own now (pause or trigger any DAG in the UI):"
  echo "  $(state changelake_apply)changelake_apply        every 5 min and when batches land: applies landed batches"
  echo "  $(state changelake_dbt)changelake_dbt          after an apply changed a table: dbt build of the marts"
  echo "  $(state changelake_quality)changelake_quality      after dbt built the marts: GX checks, Data Docs"
  echo "  $(state changelake_maintenance)changelake_maintenance  hourly at :17: compaction, snapshot expiry, orphan files"
  echo "  $(state changelake_demo_source)changelake_demo_source  every 10 min: lands demo batches (make airflow DEMO_SOURCE=1 turns it on)"
  echo "  Asset events left by earlier runs (make demo) start one run of the DAGs they schedule at once."
}
scheduler_healthy() {  # the API server answers and the scheduler, started after it, heartbeats
  curl -fsS "http://$AIRFLOW_API_ADDRESS:$AIRFLOW_PORT/api/v2/monitor/health" 2>/dev/null | python3 -c '
import json, sys
sys.exit(json.load(sys.stdin).get("scheduler", {}).get("status") != "healthy")' 2>/dev/null
}
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
      rm -f "$OWNS_SERVER"
      if [[ "${CHANGELAKE_WARM:-1}" != 0 ]] && ! infra/spark_server.sh status >/dev/null 2>&1; then
        if MAKE_TARGET=airflow STOP_HINT=0 infra/spark_server.sh start; then
          touch "$OWNS_SERVER"
        else
          echo "the warm Spark endpoint did not start; the DAGs' Spark tasks run cold" >&2
        fi
      fi
      if (exec 3<>"/dev/tcp/$AIRFLOW_API_ADDRESS/$AIRFLOW_PORT") 2>/dev/null; then
        echo "port $AIRFLOW_PORT on $AIRFLOW_API_ADDRESS is taken by another process; free it, or pick a free" \
          "one: AIRFLOW_PORT=8090 make airflow" >&2
        exit 1
      fi
      # The log holds the generated admin password (the API server prints it): this user's alone.
      : >"$LOG" && chmod 600 "$LOG"
      setsid nohup infra/airflow/components.sh >"$LOG" 2>&1 </dev/null &
      echo $! >"$PIDFILE"
      echo -n "starting Airflow (log: $LOG) "
      healthy=0
      for _ in $(seq 1 90); do
        if scheduler_healthy; then healthy=1; break; fi
        kill -0 "$(cat "$PIDFILE")" 2>/dev/null || { echo; echo "Airflow exited:"; tail -30 "$LOG"; exit 1; }
        echo -n "."; sleep 2
      done
      echo
      if [[ $healthy != 1 ]]; then
        echo "Airflow did not answer healthy on port $AIRFLOW_PORT within 180 s; last log lines:" >&2
        tail -30 "$LOG" >&2
        "$0" stop >&2
        exit 1
      fi
    fi
    # The demo source writes data: paused unless asked for, whatever an earlier session left (the DAG
    # processor may not have parsed it yet, hence the retries).
    toggle=pause; [[ "${DEMO_SOURCE:-0}" == 1 ]] && toggle=unpause
    for _ in $(seq 1 30); do "$AIRFLOW" dags "$toggle" changelake_demo_source >/dev/null 2>&1 && break; sleep 2; done
    what_runs
    PASSWORDS="$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated"
    ui_host=localhost; [[ "$AIRFLOW_API_ADDRESS" == 127.0.0.1 ]] || ui_host="$AIRFLOW_API_ADDRESS"
    echo "Airflow UI: http://$ui_host:$AIRFLOW_PORT (bound to $AIRFLOW__API__HOST)"
    if [[ -f "$PASSWORDS" ]]; then
      echo "login: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(", ".join(f"{u} / {p}" for u, p in d.items()))' "$PASSWORDS")"
    fi
    echo "(simple auth manager, authentication on; passwords in $PASSWORDS)"
    if [[ -f "$OWNS_SERVER" ]]; then
      echo "stop with: make airflow-stop (stops Airflow and the SQL endpoint it started)"
    else
      echo "stop with: make airflow-stop"
    fi
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
    if [[ -f "$OWNS_SERVER" ]]; then
      infra/spark_server.sh stop
      rm -f "$OWNS_SERVER"
    elif infra/spark_server.sh status >/dev/null 2>&1; then
      echo "the SQL endpoint keeps running (started by make sql; stop it with make sql-stop)"
    fi
    ;;
  *) echo "usage: $0 start|stop|init" >&2; exit 2 ;;
esac
