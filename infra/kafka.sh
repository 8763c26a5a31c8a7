#!/usr/bin/env bash
# start | stop | status — a local Apache Kafka broker (KRaft: broker and controller in one JVM, no ZooKeeper)
# from Apache Kafka's own jars (infra/jars/kafka, fetched by `make setup`), for Kafka-sourced tables, the demo
# and the tests. Loopback only; clients authenticate (SASL/PLAIN) with a password generated at the first start.
#
# Everything lives under $KAFKA_DIR (default $CHANGELAKE_HOME/kafka): the broker's config and data, its log, and
# client.properties (mode 600): the settings a client connects with (bootstrap.servers, the login), which
# changelake reads for a table's Kafka source unless $CHANGELAKE_KAFKA_CONFIG names another file.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
export CHANGELAKE_HOME="${CHANGELAKE_HOME:-$PWD/.changelake}"
DIR="${KAFKA_DIR:-$CHANGELAKE_HOME/kafka}"
PORT="${KAFKA_PORT:-9092}"
CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-9093}"
HOST=127.0.0.1
PIDFILE="$DIR/broker.pid"
LOG="$DIR/broker.log"
CLIENT="$DIR/client.properties"
JARS="$root/.cache/jars/kafka"
START_TIMEOUT="${KAFKA_START_TIMEOUT:-120}"

# shellcheck source=infra/service.sh
source "$root/infra/service.sh"
answers() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }
java_cp() { java -Xms128m -Xmx512m -XX:+UseG1GC -Dlog4j2.configurationFile="$DIR/log4j2.properties" -cp "$JARS/*" "$@"; }
bootstrap() { sed -n 's/^bootstrap.servers=//p' "$CLIENT"; }
show() {
  echo "Kafka broker:  $(bootstrap) (SASL_PLAINTEXT, PLAIN login 'changelake')"
  echo "client config: $CLIENT (mode 600: bootstrap.servers and the login, Kafka's own setting names)"
}

case "${1:-start}" in
  start)
    if running; then echo "Kafka broker already running (pid $(cat "$PIDFILE"))"; show; exit 0; fi
    [[ -d "$JARS" ]] || { echo "Kafka's jars are missing: run 'make setup' (infra/jars.sh kafka)" >&2; exit 1; }
    for port in "$PORT" "$CONTROLLER_PORT"; do
      if answers "$port"; then echo "port $port on $HOST is taken by another process (set KAFKA_PORT / KAFKA_CONTROLLER_PORT)" >&2; exit 1; fi
    done
    mkdir -p "$DIR" && chmod 700 "$DIR"  # the login, the data and the log are this user's alone
    umask 077
    if [[ ! -f "$DIR/secret" ]]; then
      python3 -c 'import secrets; print(secrets.token_urlsafe(24))' >"$DIR/secret"
    fi
    secret="$(cat "$DIR/secret")"
    jaas="org.apache.kafka.common.security.plain.PlainLoginModule required username=\"changelake\" password=\"$secret\" user_changelake=\"$secret\";"
    cat >"$DIR/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$CONTROLLER_PORT
listeners=SASL_PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CONTROLLER_PORT
advertised.listeners=SASL_PLAINTEXT://$HOST:$PORT
listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT
inter.broker.listener.name=SASL_PLAINTEXT
controller.listener.names=CONTROLLER
sasl.enabled.mechanisms=PLAIN
sasl.mechanism.inter.broker.protocol=PLAIN
sasl.mechanism.controller.protocol=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=$jaas
listener.name.controller.plain.sasl.jaas.config=$jaas
log.dirs=$DIR/data
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.check.interval.ms=1000
EOF
    cat >"$DIR/log4j2.properties" <<'EOF'
rootLogger.level=WARN
rootLogger.appenderRef.stdout.ref=STDOUT
appender.stdout.type=Console
appender.stdout.name=STDOUT
appender.stdout.layout.type=PatternLayout
appender.stdout.layout.pattern=[%d] %p %m (%c)%n
logger.started.name=kafka.server.KafkaRaftServer
logger.started.level=INFO
EOF
    {
      echo "bootstrap.servers=$HOST:$PORT"
      echo "security.protocol=SASL_PLAINTEXT"
      echo "sasl.mechanism=PLAIN"
      echo "sasl.username=changelake"
      echo "sasl.password=$secret"
    } >"$CLIENT"
    if [[ ! -f "$DIR/data/meta.properties" ]]; then
      cluster_id="$(java_cp kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)"
      java_cp kafka.tools.StorageTool format -t "$cluster_id" -c "$DIR/server.properties" >"$LOG" 2>&1 \
        || { echo "formatting the broker's storage failed:" >&2; tail -20 "$LOG" >&2; exit 1; }
    fi
    started=$SECONDS
    setsid nohup java -Xms256m -Xmx768m -XX:+UseG1GC -Dlog4j2.configurationFile="$DIR/log4j2.properties" \
      -cp "$JARS/*" kafka.Kafka "$DIR/server.properties" >>"$LOG" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    echo -n "starting the Kafka broker (log: $LOG) "
    until answers "$PORT" && "$root/.venv/bin/python" -c "
import sys
from confluent_kafka.admin import AdminClient
conf = dict(l.strip().split('=', 1) for l in open(sys.argv[1]) if '=' in l)
AdminClient(conf).list_topics(timeout=5)" "$CLIENT" 2>/dev/null; do
      if ! running; then echo; echo "the Kafka broker exited; last log lines:" >&2; tail -30 "$LOG" >&2; rm -f "$PIDFILE"; exit 1; fi
      if (( SECONDS - started > START_TIMEOUT )); then
        echo; echo "the Kafka broker did not answer within $START_TIMEOUT s; last log lines:" >&2
        tail -30 "$LOG" >&2; "$0" stop >&2; exit 1
      fi
      echo -n "."; sleep 1
    done
    echo " ready in $((SECONDS - started)) s"
    show
    if [[ "${STOP_HINT:-1}" != 0 ]]; then echo "stop with: make kafka-stop"; fi
    ;;
  stop) stop_server "Kafka broker" 30 ;;
  status)
    if running; then echo "Kafka broker running (pid $(cat "$PIDFILE"))"; show; exit 0; fi
    echo "Kafka broker is not running"; exit 3
    ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
