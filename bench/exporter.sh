#!/usr/bin/env bash
# Prints the python of the exporter's virtualenv (the one tests/fixtures/export.sh builds, about
# 6 GB), installing the pinned exporter into it first when it is not there yet. Used by the
# benchmarks that export their own programs (bench/big_model.sh, bench/big_ptd.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv-export"
pins=(executorch==1.5.1 torch==2.14.0 torchvision==0.29.0 torchao==0.18.0)
if ! "$venv/bin/python" -c 'import executorch, torch, torchao' 2>/dev/null; then
  echo "installing the exporter (about 6 GB, once)..." >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet "${pins[@]}" >&2
fi
echo "$venv/bin/python"
