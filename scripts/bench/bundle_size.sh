#!/usr/bin/env bash
# The minified + gzipped (-9) size in bytes of an ES-module bundle of the JS client's entry
# (clients/js/src/index.ts, with its dependencies: eventsource-parser) and of PocketBase's JS SDK
# (its dist/pocketbase.es.mjs, from `npm pack pocketbase@$POCKETBASE_VERSION` in a temporary directory;
# never added to package.json), both bundled by the esbuild of clients/js (`npm ci` there first).
#
#   bash scripts/bench/bundle_size.sh            # POCKETBASE_VERSION defaults to 0.28.1
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
JS="$ROOT/clients/js"
POCKETBASE_VERSION="${POCKETBASE_VERSION:-0.28.1}"
ESBUILD="$JS/node_modules/.bin/esbuild"
[ -x "$ESBUILD" ] || { echo "bundle_size.sh: no esbuild in clients/js/node_modules (run npm ci there)" >&2; exit 1; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

size() {  # bytes of `esbuild $1 --bundle --minify --format=esm`, gzipped -9
  "$ESBUILD" "$1" --bundle --minify --format=esm --log-level=warning | gzip -9 | wc -c | tr -d ' '
}

(cd "$WORK" && npm pack --silent "pocketbase@$POCKETBASE_VERSION" >/dev/null && tar xzf pocketbase-*.tgz)
client_bytes="$(cd "$JS" && size src/index.ts)"
pocketbase_bytes="$(size "$WORK/package/dist/pocketbase.es.mjs")"
client_version="$(node -p "require('$JS/package.json').version")"
printf '%-28s %8s\n' "bundle (min + gzip -9)" "bytes"
printf '%-28s %8s\n' "cms-client $client_version" "$client_bytes"
printf '%-28s %8s\n' "pocketbase $POCKETBASE_VERSION" "$pocketbase_bytes"
