#!/usr/bin/env bash
# Install the PostgreSQL server binaries the tests start their own throwaway server from (tests/pg.py):
# Debian's `postgresql` package, only when no server is found. No cluster is created or started here.
set -euo pipefail

have_server() {
  { command -v initdb && command -v postgres; } >/dev/null 2>&1 && return 0
  compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null
}

if have_server; then
  exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
  echo "warning: no PostgreSQL server found; the PostgreSQL catalog tests need one (Debian: apt-get install postgresql)" >&2
  exit 0
fi

# The package would create and start a `main` cluster on port 5432; the tests need none of that.
mkdir -p /etc/postgresql-common/createcluster.d
echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.d/changelake.conf

log=$(mktemp)
trap 'rm -f "$log"' EXIT
install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >>"$log" 2>&1; }
echo "installing Debian's postgresql package (server for the catalog tests)..."
if ! install; then
  # A fresh image has no package lists yet.
  apt-get update -qq >>"$log" 2>&1 && install || { cat "$log" >&2; exit 1; }
fi
have_server || { echo "postgresql installed, but no server binaries found" >&2; exit 1; }
echo "postgresql server ready: $(compgen -G '/usr/lib/postgresql/*/bin/postgres' | sort -V | tail -1)"
