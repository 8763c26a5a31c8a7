#!/usr/bin/env bash
# start | stop | env — a local S3-compatible endpoint: S3Proxy (Maven Central, infra/jars/s3) serving a directory
# of this machine on loopback, authenticating AWS Signature V4 requests with a key pair generated at each start.
#
#   infra/s3.sh start   start it (S3_PORT, default: a free port; S3_BUCKETS, default "changelake"; S3_HOST, the
#                       address it binds, default 127.0.0.1), print where
#   infra/s3.sh env     print the path of the env file a shell sources to use it (AWS_ENDPOINT_URL, the keys)
#   infra/s3.sh stop    stop it (its objects stay in $S3_DIR/data for the next start)
#
# State in S3_DIR (default $CHANGELAKE_HOME/s3): data/<bucket>/ holds the objects (a bucket is a directory),
# s3.env (0600) the endpoint and the keys, s3.properties (0600) S3Proxy's configuration, server.pid, server.log.
# The keys are never printed. S3_REQUEST_LOG=1 logs every request (the benchmarks count them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export CHANGELAKE_HOME="${CHANGELAKE_HOME:-$root/.changelake}"
DIR="${S3_DIR:-$CHANGELAKE_HOME/s3}"
BUCKETS="${S3_BUCKETS:-changelake}"
JARS="$root/.cache/jars/s3"

PIDFILE="$DIR/server.pid"
# shellcheck source=infra/service.sh
source "$root/infra/service.sh"
endpoint() { sed -n 's/^export AWS_ENDPOINT_URL=//p' "$DIR/s3.env"; }
secret() { head -c "$1" /dev/urandom | od -An -tx1 | tr -d ' \n'; }

case "${1:-}" in
  start)
    if running; then echo "S3 endpoint already running: $(endpoint) (env: $DIR/s3.env)"; exit 0; fi
    "$root/infra/jars.sh" s3
    mkdir -p "$DIR/data"
    chmod 700 "$DIR"
    for bucket in $BUCKETS; do mkdir -p "$DIR/data/$bucket"; done
    port="${S3_PORT:-$(free_port)}"
    url="http://${S3_HOST:-127.0.0.1}:$port"
    key="CL$(secret 9 | tr 'a-f' 'A-F')"
    umask 077
    cat >"$DIR/s3.properties" <<PROPS
s3proxy.endpoint=$url
s3proxy.authorization=aws-v2-or-v4
s3proxy.identity=$key
s3proxy.credential=$(secret 20)
jclouds.provider=filesystem-nio2
jclouds.identity=local
jclouds.credential=local
jclouds.filesystem.basedir=$DIR/data
PROPS
    {
      echo "export AWS_ENDPOINT_URL=$url"
      echo "export AWS_REGION=us-east-1"
      echo "export AWS_ACCESS_KEY_ID=$key"
      echo "export AWS_SECRET_ACCESS_KEY=$(sed -n 's/^s3proxy.credential=//p' "$DIR/s3.properties")"
    } >"$DIR/s3.env"
    level=WARN; [[ ${S3_REQUEST_LOG:-0} == 1 ]] && level=DEBUG
    S3_HANDLER_LEVEL=$level setsid nohup java -Xmx${S3_HEAP:-512m} -Dlogback.configurationFile="$root/infra/s3/logback.xml" \
      -cp "$JARS/*" org.gaul.s3proxy.Main --properties "$DIR/s3.properties" >"$DIR/server.log" 2>&1 &
    echo $! >"$PIDFILE"
    for _ in $(seq 1 100); do
      curl -s -o /dev/null "$url/" 2>/dev/null && break
      running || { cat "$DIR/server.log" >&2; echo "S3Proxy did not start; see $DIR/server.log" >&2; exit 1; }
      sleep 0.1
    done
    echo "S3 endpoint: $url (buckets: $BUCKETS; objects in $DIR/data)"
    echo "use it: source $DIR/s3.env   (stop: infra/s3.sh stop)"
    ;;
  env) echo "$DIR/s3.env" ;;
  stop) stop_server "S3 endpoint" ;;
  *) echo "usage: $0 start|env|stop" >&2; exit 2 ;;
esac
