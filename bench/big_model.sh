#!/usr/bin/env bash
# Prints the path of the 50 MiB XNNPACK program the client benchmark downloads, exporting it
# first with the real exporter when it is not there yet (bench/big_model.py; the exporter's
# virtualenv is the one tests/fixtures/export.sh builds, about 6 GB, made on first use).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/target/bench-models/big-xnnpack.pte"
if [ ! -s "$out" ]; then
  python=$("$root/bench/exporter.sh")
  mkdir -p "$(dirname "$out")"
  echo "exporting the 50 MiB benchmark program..." >&2
  "$python" "$root/bench/big_model.py" "$out.tmp" >&2
  mv "$out.tmp" "$out"
fi
echo "$out"
