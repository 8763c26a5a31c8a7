#!/usr/bin/env bash
# start | stop — a Spark standalone master and one worker on loopback, from the data env's pyspark.
# The pyspark wheel ships only the history-server scripts in sbin/, so this runs the same classes that
# sbin/start-master.sh and start-worker.sh would (org.apache.spark.deploy.master.Master / worker.Worker).
set -euo pipefail
cd "$(dirname "$0")/.."
export CHANGELAKE_HOME="${CHANGELAKE_HOME:-$PWD/.changelake}"
SPARK_HOME="$(.venv/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
export SPARK_HOME
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
DIR="${SPARK_CLUSTER_DIR:-$CHANGELAKE_HOME/spark-cluster}"
PORT="${SPARK_MASTER_PORT:-7077}"
UI_PORT="${SPARK_MASTER_WEBUI_PORT:-8081}"
WORKER_UI_PORT="${SPARK_WORKER_WEBUI_PORT:-8082}"
CORES="${SPARK_WORKER_CORES:-2}"
MEMORY="${SPARK_WORKER_MEMORY:-4g}"
mkdir -p "$DIR"

running() { [[ -f "$DIR/$1.pid" ]] && kill -0 "$(cat "$DIR/$1.pid")" 2>/dev/null; }

case "${1:-start}" in
  start)
    if running master; then echo "Spark master already running: spark://127.0.0.1:$PORT"; exit 0; fi
    SPARK_LOCAL_DIRS="$DIR/local" setsid nohup "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
      --host 127.0.0.1 --port "$PORT" --webui-port "$UI_PORT" >"$DIR/master.log" 2>&1 &
    echo $! >"$DIR/master.pid"
    for _ in $(seq 1 60); do grep -q "I have been elected leader" "$DIR/master.log" 2>/dev/null && break; sleep 1; done
    SPARK_WORKER_DIR="$DIR/work" SPARK_LOCAL_DIRS="$DIR/local" setsid nohup "$SPARK_HOME/bin/spark-class" \
      org.apache.spark.deploy.worker.Worker --host 127.0.0.1 --cores "$CORES" --memory "$MEMORY" \
      --webui-port "$WORKER_UI_PORT" "spark://127.0.0.1:$PORT" >"$DIR/worker.log" 2>&1 &
    echo $! >"$DIR/worker.pid"
    for _ in $(seq 1 60); do grep -q "Successfully registered with master" "$DIR/worker.log" 2>/dev/null && break; sleep 1; done
    if ! grep -q "Successfully registered with master" "$DIR/worker.log"; then
      echo "the Spark worker did not register; see $DIR/worker.log" >&2; exit 1
    fi
    echo "Spark standalone cluster: spark://127.0.0.1:$PORT (master UI http://127.0.0.1:$UI_PORT, 1 worker, $CORES cores)"
    echo "run the apply app on it: make apply SPARK_MASTER=spark://127.0.0.1:$PORT   (stop: make spark-cluster-stop)"
    ;;
  stop)
    for role in worker master; do
      if running "$role"; then kill -TERM -- "-$(cat "$DIR/$role.pid")" 2>/dev/null || kill "$(cat "$DIR/$role.pid")"; fi
      rm -f "$DIR/$role.pid"
    done
    echo "Spark standalone cluster stopped"
    ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
