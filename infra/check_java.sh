#!/usr/bin/env bash
# Spark 4.1 needs Java 17 or newer. Stop with a clear message instead of a JVM stack trace later.
set -euo pipefail
if ! command -v java >/dev/null 2>&1; then
  echo "error: java not found on PATH. Install a JDK >= 17 (Debian: apt-get install openjdk-17-jre-headless)." >&2
  exit 1
fi
version=$(java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
major=${version%%.*}
[ "$major" = "1" ] && major=$(echo "$version" | cut -d. -f2)
if [ -z "$major" ] || [ "$major" -lt 17 ]; then
  echo "error: Java $version found; changelake (Spark 4.1) needs Java >= 17." >&2
  exit 1
fi
