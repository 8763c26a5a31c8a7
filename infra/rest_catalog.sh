#!/usr/bin/env bash
# start | stop | env — a real Iceberg REST catalog on loopback: Iceberg's REST catalog server (infra/jars/rest;
# launched by infra/rest/RestCatalog.java: loopback only, bearer token required) over a JdbcCatalog on a SQLite
# file, writing its tables' metadata through Iceberg's S3FileIO to the S3 endpoint of infra/s3.sh.
#
#   infra/rest_catalog.sh start   start it (REST_PORT, default: a free port; the S3 endpoint must be running:
#                                 its env file, $S3_DIR/s3.env, names it); print where
#   infra/rest_catalog.sh env     print the path of the env file a shell sources to use both (the S3 endpoint's
#                                 variables, CHANGELAKE_CATALOG_TYPE/URI, CHANGELAKE_WAREHOUSE, the token)
#   infra/rest_catalog.sh stop    stop it (the catalog file stays for the next start)
#
# State in REST_DIR (default $CHANGELAKE_HOME/rest-catalog): catalog.db, rest.env (0600), classes/, server.pid,
# server.log. The token is never printed. REST_WAREHOUSE (default s3://changelake/warehouse) is the warehouse.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export CHANGELAKE_HOME="${CHANGELAKE_HOME:-$root/.changelake}"
DIR="${REST_DIR:-$CHANGELAKE_HOME/rest-catalog}"
S3_ENV="${S3_DIR:-$CHANGELAKE_HOME/s3}/s3.env"
WAREHOUSE="${REST_WAREHOUSE:-s3://changelake/warehouse}"
JARS="$root/.cache/jars/rest"

PIDFILE="$DIR/server.pid"
# shellcheck source=infra/service.sh
source "$root/infra/service.sh"
uri() { sed -n 's/^export CHANGELAKE_CATALOG_URI=//p' "$DIR/rest.env"; }

case "${1:-}" in
  start)
    if running; then echo "REST catalog already running: $(uri) (env: $DIR/rest.env)"; exit 0; fi
    [[ -f $S3_ENV ]] || { echo "the REST catalog stores its tables on the S3 endpoint: start it first (infra/s3.sh start)" >&2; exit 1; }
    "$root/infra/jars.sh" rest
    mkdir -p "$DIR/classes"
    chmod 700 "$DIR"
    # The launcher, compiled once per version of its source.
    stamp="$DIR/classes/.source-$(sha256sum "$root/infra/rest/RestCatalog.java" | cut -c1-16)"
    if [[ ! -f $stamp ]]; then
      rm -rf "$DIR/classes" && mkdir -p "$DIR/classes"
      javac -d "$DIR/classes" -cp "$JARS/*" "$root/infra/rest/RestCatalog.java"
      touch "$stamp"
    fi
    # shellcheck disable=SC1090
    source "$S3_ENV"
    port="${REST_PORT:-$(free_port)}"
    token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
    umask 077
    {
      cat "$S3_ENV"
      echo "export CHANGELAKE_CATALOG_TYPE=rest"
      echo "export CHANGELAKE_CATALOG_URI=http://127.0.0.1:$port"
      echo "export CHANGELAKE_WAREHOUSE=$WAREHOUSE"
      echo "export PYICEBERG_CATALOG__CHANGELAKE__TOKEN=$token"
    } >"$DIR/rest.env"
    REST_CATALOG_TOKEN=$token CATALOG_WAREHOUSE=$WAREHOUSE CATALOG_URI="jdbc:sqlite:$DIR/catalog.db" \
      CATALOG_IO__IMPL=org.apache.iceberg.aws.s3.S3FileIO CATALOG_S3_ENDPOINT="$AWS_ENDPOINT_URL" \
      CATALOG_S3_PATH__STYLE__ACCESS=true CATALOG_CLIENT_REGION="${AWS_REGION:-us-east-1}" \
      setsid nohup java -Xmx${REST_HEAP:-512m} -cp "$DIR/classes:$JARS/*" RestCatalog "$port" >"$DIR/server.log" 2>&1 &
    echo $! >"$PIDFILE"
    for _ in $(seq 1 150); do
      grep -q "REST catalog listening" "$DIR/server.log" 2>/dev/null && break
      running || { cat "$DIR/server.log" >&2; echo "the REST catalog did not start; see $DIR/server.log" >&2; exit 1; }
      sleep 0.1
    done
    echo "REST catalog: http://127.0.0.1:$port (warehouse $WAREHOUSE; catalog in $DIR/catalog.db)"
    echo "use it: source $DIR/rest.env   (stop: infra/rest_catalog.sh stop)"
    ;;
  env) echo "$DIR/rest.env" ;;
  stop) stop_server "REST catalog" ;;
  *) echo "usage: $0 start|env|stop" >&2; exit 2 ;;
esac
