#!/usr/bin/env bash
# JVM jars from Maven Central, pinned, fetched at set-up (never at run time).
#
#   infra/jars.sh SET...            copy the jars of infra/jars/SET/pom.xml into .cache/jars/SET/ and check
#                                   each against infra/jars/SET/jars.lock (name, size, SHA-256); a set whose
#                                   cache already matches its lock is not touched (no Maven, no network)
#   infra/jars.sh --lock SET...     (maintainers) fetch, then write jars.lock from what Maven copied
#
# Maven's own download cache is the user's (~/.m2/repository, or MAVEN_REPO_LOCAL), shared by every checkout
# as uv's cache is: a fresh clone copies its ~340 MB of jars from it instead of downloading them again (48 s
# against 25 s for the four sets on the project's machine). A set-up checkout runs offline either way: Spark
# reads .cache/jars/spark/*.jar (changelake.runtime.session, spark_server.sh), checked against the lock.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache="$root/.cache/jars"
lock_mode=0
if [[ ${1:-} == --lock ]]; then lock_mode=1; shift; fi
[[ $# -gt 0 ]] || { echo "usage: infra/jars.sh [--lock] SET..." >&2; exit 2; }

# The lock's lines: "<file name> <bytes> <sha256>", sorted by name.
listing() { (cd "$1" && for f in *.jar; do [[ -e $f ]] && printf '%s %s %s\n' "$f" "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -d' ' -f1)"; done) | LC_ALL=C sort; }

for set in "$@"; do
  pom="$root/infra/jars/$set/pom.xml"
  lock="$root/infra/jars/$set/jars.lock"
  dest="$cache/$set"
  [[ -f $pom ]] || { echo "infra/jars.sh: no jar set '$set' (no $pom)" >&2; exit 2; }
  if [[ $lock_mode == 0 && -f $lock && -d $dest ]] && diff -q <(listing "$dest") <(grep -v '^#' "$lock") >/dev/null; then
    continue  # already fetched and verified
  fi
  command -v mvn >/dev/null || { echo "infra/jars.sh: Maven (mvn) is needed to fetch the '$set' jars" >&2; exit 1; }
  tmp="$dest.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  echo "fetching the '$set' jars from Maven Central (pinned in infra/jars/$set/pom.xml)..."
  if ! mvn -B -q -f "$pom" -Dmaven.repo.local="${MAVEN_REPO_LOCAL:-$HOME/.m2/repository}" \
      org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
      -DoutputDirectory="$tmp" -DincludeScope=runtime >"$tmp.log" 2>&1; then
    cat "$tmp.log" >&2; rm -rf "$tmp" "$tmp.log"; exit 1
  fi
  rm -f "$tmp.log"
  if [[ $lock_mode == 1 ]]; then
    { echo "# <jar> <bytes> <sha256>: written by infra/jars.sh --lock $set; checked at every set-up"; listing "$tmp"; } >"$lock"
  elif [[ ! -f $lock ]]; then
    echo "infra/jars.sh: infra/jars/$set/jars.lock is missing (run infra/jars.sh --lock $set and commit it)" >&2
    rm -rf "$tmp"; exit 1
  elif ! diff <(grep -v '^#' "$lock") <(listing "$tmp") >&2; then
    echo "infra/jars.sh: the '$set' jars Maven fetched differ from infra/jars/$set/jars.lock (above: < lock, > fetched)" >&2
    rm -rf "$tmp"; exit 1
  fi
  rm -rf "$dest"
  mv "$tmp" "$dest"
  echo "'$set' jars ready in .cache/jars/$set: $(ls "$dest" | wc -l) jar(s), $(du -sh "$dest" | cut -f1)"
done
