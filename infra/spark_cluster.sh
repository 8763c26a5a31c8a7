#!/usr/bin/env bash
# start | stop — a Spark standalone master and one worker on loopback, from the data env's pyspark.
# The pyspark wheel ships only the history-server scripts in sbin/, so this runs the same classes that
# sbin/start-master.sh and start-worker.sh would (org.apache.spark.deploy.master.Master / worker.Worker).
#
# A second host on one machine (tests/runtime/test_two_hosts.py): SPARK_MASTER_HOST / SPARK_WORKER_HOST are
# the addresses each binds (default 127.0.0.1), SPARK_WORKER_NETNS a network namespace (`ip netns`) the worker
# runs in, and SPARK_WORKER_HIDE directories (space-separated) the worker and its executors must not see: in a
# mount namespace of their own each is covered by an empty file system, as the driver's disk is on another host.
set -euo pipefail
cd "$(dirname "$0")/.."
export CHANGELAKE_HOME="${CHANGELAKE_HOME:-$PWD/.changelake}"
SPARK_HOME="$(.venv/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
export SPARK_HOME
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
DIR="${SPARK_CLUSTER_DIR:-$CHANGELAKE_HOME/spark-cluster}"
PORT="${SPARK_MASTER_PORT:-7077}"
MASTER_HOST="${SPARK_MASTER_HOST:-127.0.0.1}"
WORKER_HOST="${SPARK_WORKER_HOST:-$MASTER_HOST}"
UI_PORT="${SPARK_MASTER_WEBUI_PORT:-8081}"
WORKER_UI_PORT="${SPARK_WORKER_WEBUI_PORT:-8082}"
CORES="${SPARK_WORKER_CORES:-2}"
MEMORY="${SPARK_WORKER_MEMORY:-4g}"
mkdir -p "$DIR"

running() { [[ -f "$DIR/$1.pid" ]] && kill -0 "$(cat "$DIR/$1.pid")" 2>/dev/null; }

case "${1:-start}" in
  start)
    if running master; then echo "Spark master already running: spark://$MASTER_HOST:$PORT"; exit 0; fi
    SPARK_LOCAL_DIRS="$DIR/local" setsid nohup "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
      --host "$MASTER_HOST" --port "$PORT" --webui-port "$UI_PORT" >"$DIR/master.log" 2>&1 &
    echo $! >"$DIR/master.pid"
    for _ in $(seq 1 60); do grep -q "I have been elected leader" "$DIR/master.log" 2>/dev/null && break; sleep 1; done
    worker=("$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker --host "$WORKER_HOST" --cores "$CORES"
      --memory "$MEMORY" --webui-port "$WORKER_UI_PORT" "spark://$MASTER_HOST:$PORT")
    if [[ -n ${SPARK_WORKER_NETNS:-} ]]; then
      # shellcheck disable=SC2016  # expanded by the inner shell, in the worker's namespaces
      worker=(ip netns exec "$SPARK_WORKER_NETNS" unshare --mount --propagation private sh -ec \
        'for d in $SPARK_WORKER_HIDE; do mount -t tmpfs -o size=1m,mode=0700 changelake-elsewhere "$d"; done; exec "$@"' \
        worker "${worker[@]}")
    fi
    SPARK_WORKER_DIR="$DIR/work" SPARK_LOCAL_DIRS="$DIR/local" SPARK_WORKER_HIDE="${SPARK_WORKER_HIDE:-}" \
      setsid nohup "${worker[@]}" >"$DIR/worker.log" 2>&1 &
    echo $! >"$DIR/worker.pid"
    for _ in $(seq 1 60); do grep -q "Successfully registered with master" "$DIR/worker.log" 2>/dev/null && break; sleep 1; done
    if ! grep -q "Successfully registered with master" "$DIR/worker.log"; then
      echo "the Spark worker did not register; see $DIR/worker.log" >&2; exit 1
    fi
    echo "Spark standalone cluster: spark://$MASTER_HOST:$PORT (master UI http://$MASTER_HOST:$UI_PORT, 1 worker, $CORES cores)"
    echo "run the apply app on it: make apply SPARK_MASTER=spark://$MASTER_HOST:$PORT   (stop: make spark-cluster-stop)"
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
