#!/usr/bin/env bash
# Installs what the client's `executorch` feature needs, idempotently, from package registries:
#   - clang + libclang (Debian) for the executorch crate's bindgen step;
#   - the ExecuTorch 1.5.1 C++ runtime: the shared libraries and headers shipped inside the
#     PyPI `executorch==1.5.1` wheel (cp311, manylinux_2_28 x86_64), unpacked into
#     .deps/executorch/{lib,include}. Nothing else from the wheel is used.
# Prints the folder on success. Safe to run again.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/.deps/executorch"
version=1.5.1

if ! command -v clang >/dev/null 2>&1 || ! ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang libclang-dev >/dev/null
  else
    echo "setup-executorch: please install clang and libclang-dev" >&2
    exit 1
  fi
fi

if [ -f "$dest/.complete-$version" ]; then
  echo "$dest"
  exit 0
fi
wheels="$root/.deps/wheels"
mkdir -p "$wheels"
if ! ls "$wheels"/executorch-$version-*.whl >/dev/null 2>&1; then
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version 3.11 --implementation cp --abi cp311 \
    --platform manylinux_2_28_x86_64 \
    -d "$wheels" "executorch==$version" >&2
fi
wheel=$(ls "$wheels"/executorch-$version-*.whl | head -n 1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$wheel" "$tmp" <<'PY'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(("executorch/lib/", "executorch/include/")) or name.startswith("executorch/data/lib/"):
            z.extract(name, out)
PY
rm -rf "$dest"
mkdir -p "$dest"
cp -r "$tmp/executorch/lib" "$dest/lib"
cp -r "$tmp/executorch/include" "$dest/include"
touch "$dest/.complete-$version"
echo "$dest"
