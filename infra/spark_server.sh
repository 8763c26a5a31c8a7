#!/usr/bin/env bash
# start | stop | status — the warm Spark SQL endpoint (spark_apps/server_app.py) in the background: one Spark
# application serving Spark Connect and Thrift/JDBC with changelake's views. Pid, ready file (URLs, pids,
# start time) and log under $CHANGELAKE_HOME/spark-server. Loopback only unless SPARK_THRIFT_HOST says
# otherwise (see docs/sql-endpoint.md before exposing it).
set -euo pipefail
cd "$(dirname "$0")/.."
export CHANGELAKE_HOME="${CHANGELAKE_HOME:-$PWD/.changelake}"
export CHANGELAKE_TABLES="${CHANGELAKE_TABLES:-$PWD/examples/tables}"
export SPARK_THRIFT_HOST="${SPARK_THRIFT_HOST:-127.0.0.1}"
export SPARK_THRIFT_PORT="${SPARK_THRIFT_PORT:-10000}"
export SPARK_CONNECT_PORT="${SPARK_CONNECT_PORT:-15002}"
# SPARK_MASTER as for `make apply` / `make airflow`: unset = local[2] (or CHANGELAKE_SPARK_MASTER).
if [[ -n "${SPARK_MASTER:-}" ]]; then export CHANGELAKE_SPARK_MASTER="$SPARK_MASTER"; fi
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
DIR="$CHANGELAKE_HOME/spark-server"
PIDFILE="$DIR/server.pid"
LOG="$DIR/server.log"
READY="$DIR/ready"
START_TIMEOUT="${CHANGELAKE_SERVER_START_TIMEOUT:-300}"

running() { [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }
answers() { (exec 3<>"/dev/tcp/$SPARK_THRIFT_HOST/$1") 2>/dev/null; }
SECRETS="$DIR/endpoint.secrets"
urls() {
  echo "Spark Connect: sc://localhost:$SPARK_CONNECT_PORT/;token=<connect.token in $SECRETS>"
  echo "JDBC (Thrift): jdbc:hive2://$SPARK_THRIFT_HOST:$SPARK_THRIFT_PORT/default"
  echo "logins:        changelake (owner: dbt, the pipeline) and reader (queries only); passwords in $SECRETS (mode 600)"
  echo "dbt:           export SPARK_THRIFT_PASSWORD=\"\$(sed -n 's/^thrift.user.changelake.password=//p' $SECRETS)\""
  echo "               cd dbt_project && DBT_PROFILES_DIR=. ../.venv/bin/dbt build --target thrift"
}

case "${1:-start}" in
  start)
    if running && [[ -f "$READY" ]]; then echo "SQL endpoint already running (pid $(cat "$PIDFILE"))"; urls; exit 0; fi
    if running; then echo "SQL endpoint is starting (pid $(cat "$PIDFILE")); see $LOG" >&2; exit 1; fi
    for var in SPARK_THRIFT_PORT SPARK_CONNECT_PORT; do
      if answers "${!var}"; then
        echo "port ${!var} on $SPARK_THRIFT_HOST ($var) is taken by another process; free it, or pick free" \
          "ports: SPARK_THRIFT_PORT=10010 SPARK_CONNECT_PORT=15010 make ${MAKE_TARGET:-sql}" >&2
        exit 1
      fi
    done
    mkdir -p "$DIR" && chmod 700 "$DIR"  # its secrets, log and ready file are this user's alone
    rm -f "$READY"
    started=$SECONDS
    setsid nohup .venv/bin/python spark_apps/server_app.py >"$LOG" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    echo -n "starting the SQL endpoint (log: $LOG) "
    until [[ -f "$READY" ]] && answers "$SPARK_THRIFT_PORT" && answers "$SPARK_CONNECT_PORT"; do
      if ! running; then echo; echo "the SQL endpoint exited; last log lines:" >&2; tail -30 "$LOG" >&2; rm -f "$PIDFILE"; exit 1; fi
      if (( SECONDS - started > START_TIMEOUT )); then
        echo; echo "the SQL endpoint did not answer within $START_TIMEOUT s; last log lines:" >&2
        tail -30 "$LOG" >&2; "$0" stop >&2; exit 1
      fi
      echo -n "."; sleep 1
    done
    echo " ready in $((SECONDS - started)) s"
    urls
    if [[ "${STOP_HINT:-1}" != 0 ]]; then echo "stop with: make sql-stop"; fi
    ;;
  stop)
    if running; then
      pid="$(cat "$PIDFILE")"
      # The Python driver cancels running jobs, stops both servers and its JVM on SIGTERM; the group kill is
      # the fallback, and says so (tests check a mid-query stop did not need it).
      started=$SECONDS
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      # Its JVM exits after it, once its shutdown hooks have run: a few seconds' grace for the group.
      if ! kill -0 "$pid" 2>/dev/null; then
        for _ in $(seq 1 20); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.5; done
      fi
      if kill -0 "$pid" 2>/dev/null; then
        kill -KILL -- "-$pid" 2>/dev/null || true
        echo "SQL endpoint stopped (SIGKILL: still running $((SECONDS - started))s after SIGTERM)"
      elif kill -0 -- "-$pid" 2>/dev/null; then
        kill -KILL -- "-$pid" 2>/dev/null || true
        echo "SQL endpoint stopped (SIGKILL: its process group outlived it)"
      else
        echo "SQL endpoint stopped (SIGTERM, $((SECONDS - started))s)"
      fi
    else
      echo "SQL endpoint is not running"
    fi
    rm -f "$PIDFILE" "$READY"
    ;;
  status)
    if running && [[ -f "$READY" ]]; then echo "SQL endpoint running (pid $(cat "$PIDFILE"))"; urls; exit 0; fi
    if running; then echo "SQL endpoint starting (pid $(cat "$PIDFILE")); log: $LOG"; exit 0; fi
    echo "SQL endpoint is not running"; exit 3
    ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
