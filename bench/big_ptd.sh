#!/usr/bin/env bash
# Prints the folder holding big-ptd.pte and its 1 GiB big-ptd.ptd (bench/big_ptd.py), exporting
# them first with the real exporter when they are not there yet (the exporter's virtualenv is
# the one bench/big_model.sh and tests/fixtures/export.sh use, about 6 GB, made on first use).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/target/bench-models/big-ptd"
if [ ! -s "$out/big-ptd.ptd" ]; then
  venv="$root/.venv-export"
  pins=(executorch==1.5.1 torch==2.14.0 torchvision==0.29.0 torchao==0.18.0)
  if ! "$venv/bin/python" -c 'import executorch, torch, torchao' 2>/dev/null; then
    echo "installing the exporter (about 6 GB, once)..." >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "${pins[@]}"
  fi
  echo "exporting the program with 1 GiB of .ptd weights..." >&2
  rm -rf "$out.tmp"
  "$venv/bin/python" "$root/bench/big_ptd.py" "$out.tmp" >&2
  rm -rf "$out"
  mv "$out.tmp" "$out"
fi
echo "$out"
