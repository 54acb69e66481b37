#!/usr/bin/env bash
# Prints the folder holding big-ptd.pte and its 1 GiB big-ptd.ptd (bench/big_ptd.py), exporting
# them first with the real exporter when they are not there yet (bench/exporter.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/target/bench-models/big-ptd"
if [ ! -s "$out/big-ptd.ptd" ]; then
  python=$("$root/bench/exporter.sh")
  echo "exporting the program with 1 GiB of .ptd weights..." >&2
  rm -rf "$out.tmp"
  "$python" "$root/bench/big_ptd.py" "$out.tmp" >&2
  rm -rf "$out"
  mv "$out.tmp" "$out"
fi
echo "$out"
