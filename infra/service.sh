# Sourced by the scripts that run a local server in the background (infra/s3.sh, infra/rest_catalog.sh,
# infra/kafka.sh): its pid file, a free loopback port, and a stop that waits for the process. The caller sets
# PIDFILE before using them.

# Whether the server of $PIDFILE is alive.
running() { [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

# A TCP port nothing listens on at the moment, on loopback.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# stop_server NAME [SECONDS]: SIGTERM, up to SECONDS (default 5) for it to end, then SIGKILL (its process group
# too: a launcher's children); says what it did and removes the pid file.
stop_server() {
  local name="$1" grace="${2:-5}" pid
  if running; then
    pid="$(cat "$PIDFILE")"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 $((grace * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    echo "$name stopped"
  else
    echo "$name is not running"
  fi
  rm -f "$PIDFILE"
}
