#!/usr/bin/env bash
# Prints the folder holding big-ptd.pte and its 1 GiB big-ptd.ptd (bench/big_ptd.py), exporting
# them first with the real exporter when they are not there yet (bench/exporter.sh).
# Usage: bench/big_ptd.sh [--mib 512]   (512 MiB of weights instead: a 11585-wide layer)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
features=16384
out="$root/target/bench-models/big-ptd"
if [ "${1:-}" = "--mib" ] && [ "${2:-}" = 512 ]; then
  features=11585
  out="$root/target/bench-models/big-ptd-512"
fi
if [ ! -s "$out/big-ptd.ptd" ]; then
  python=$("$root/bench/exporter.sh")
  echo "exporting the program with big .ptd weights ($features wide)..." >&2
  rm -rf "$out.tmp"
  "$python" "$root/bench/big_ptd.py" "$out.tmp" "$features" >&2
  rm -rf "$out"
  mv "$out.tmp" "$out"
fi
echo "$out"
