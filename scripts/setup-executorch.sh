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

bash "$root/scripts/unpack-executorch-wheel.sh" "$version" manylinux_2_28_x86_64 "$dest"
echo "$dest"
