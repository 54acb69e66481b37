#!/usr/bin/env bash
# Builds the dashboard's static files into OUT (default server/ui, which the server embeds):
# app.js compiled by the TypeScript compiler the lockfile pins from ui/src/*.ts (one script,
# in the order ui/tsconfig.json lists them), uPlot's files copied from the
# package the lockfile pins, index.html and app.css as written. The same inputs give the same
# bytes; tests/run checks that the committed files are what this script builds.
# Needs the npm packages (tests/setup.sh installs them into .deps/ui).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/server/ui}
modules=${FERRY_UI_MODULES:-$root/.deps/ui/node_modules}
[ -x "$modules/.bin/tsc" ] || { echo "ui/build.sh: $modules has no tsc; run tests/setup.sh" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$modules/.bin/tsc" -p "$root/ui/tsconfig.json" --outFile "$work/app.js"
mkdir -p "$out"
cp "$work/app.js" "$out/app.js"
cp "$root/ui/src/index.html" "$root/ui/src/app.css" "$out/"
cp "$modules/uplot/dist/uPlot.iife.min.js" "$modules/uplot/dist/uPlot.min.css" "$out/"
cp "$modules/uplot/LICENSE" "$out/uPlot.LICENSE"
