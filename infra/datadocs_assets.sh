#!/usr/bin/env bash
# Fetch, from the npm registry, the JavaScript/CSS that Great Expectations' Data Docs load from CDNs, so
# the quality app can serve them locally: Data Docs then render without internet access. Idempotent;
# optional (without npm the Data Docs keep their CDN links and need a browser with internet).
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=".venv/datadocs-assets"
[[ -f "$DEST/.done" ]] && exit 0
if ! command -v npm >/dev/null 2>&1; then
  echo "npm not found: Data Docs will load their scripts from CDNs" >&2
  exit 0
fi
mkdir -p "$DEST"
if npm install --silent --no-save --no-audit --no-fund --legacy-peer-deps --prefix "$DEST" \
    jquery@3.7.1 bootstrap@4.3.1 popper.js@1.12.9 bootstrap-table@1.19.1 bootstrap-datepicker@1.9.0 \
    vega@5 vega-lite@5 vega-embed@6 @forevolve/bootstrap-dark@1.1.0 @fortawesome/fontawesome-free@6.6.0 \
    >"$DEST/npm.log" 2>&1; then
  touch "$DEST/.done"
  echo "Data Docs assets ready: $DEST"
else
  echo "could not fetch the Data Docs assets (see $DEST/npm.log): Data Docs will use CDNs" >&2
fi
