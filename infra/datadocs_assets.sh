#!/usr/bin/env bash
# Fetch, from the npm registry, the scripts, styles and fonts that Great Expectations' Data Docs load from
# CDNs (jQuery, Bootstrap, Popper, bootstrap-table, bootstrap-datepicker, Vega, Font Awesome). The quality
# app copies them next to the pages and points the pages at the copies (src/changelake/quality/datadocs.py),
# so the Data Docs work opened as file:// without a network. Idempotent. Optional: without npm, or if the
# download fails, `make setup` carries on, and the Data Docs need internet for their scripts and styles
# (every quality run says so). Run this script again once npm is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=".venv/datadocs-assets"
PY="${PY:-.venv/bin/python}"
check() { "$PY" -m changelake.quality.datadocs "$DEST/node_modules"; }
[[ -f "$DEST/.done" ]] && check >/dev/null 2>&1 && exit 0
rm -f "$DEST/.done"
if ! command -v npm >/dev/null 2>&1; then
  echo "WARNING: npm not found: the Data Docs will need internet (their scripts and styles come from CDNs)." >&2
  echo "         Install npm (e.g. apt-get install npm), then run infra/datadocs_assets.sh." >&2
  exit 0
fi
mkdir -p "$DEST"
if npm install --no-save --no-audit --no-fund --legacy-peer-deps --prefix "$DEST" \
    jquery@3.7.1 bootstrap@4.3.1 popper.js@1.12.9 bootstrap-table@1.19.1 bootstrap-datepicker@1.9.0 \
    vega@5 vega-lite@5 vega-embed@6 @forevolve/bootstrap-dark@1.1.0 @fortawesome/fontawesome-free@6.6.0 \
    >"$DEST/npm.log" 2>&1 && check; then
  touch "$DEST/.done"
  echo "Data Docs assets ready: $DEST (the Data Docs work offline)"
else
  echo "WARNING: could not fetch the Data Docs assets (see $DEST/npm.log): the Data Docs will need internet." >&2
fi
