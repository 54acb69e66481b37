#!/usr/bin/env bash
# Downloads the PyPI wheel executorch==VERSION for PLATFORM (a manylinux tag such as
# manylinux_2_28_x86_64 or manylinux_2_28_aarch64; cp311) into .deps/wheels, once, and unpacks
# its C++ runtime (executorch/lib and executorch/include; nothing else) into DEST/lib and
# DEST/include, marking DEST/.complete-VERSION. Used by setup-executorch.sh and
# setup-cross-aarch64.sh. Safe to run again.
#
#   scripts/unpack-executorch-wheel.sh VERSION PLATFORM DEST
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${1:?version}
platform=${2:?platform}
dest=${3:?destination}
[ -f "$dest/.complete-$version" ] && exit 0
wheels="$root/.deps/wheels"
mkdir -p "$wheels"
# The wheel's file name ends with its platform tag, so each platform finds its own.
pattern="executorch-$version-*-$platform.whl"
if ! compgen -G "$wheels/$pattern" >/dev/null; then
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version 3.11 --implementation cp --abi cp311 \
    --platform "$platform" -d "$wheels" "executorch==$version" >&2
fi
wheel=$(compgen -G "$wheels/$pattern" | head -n 1)
[ -n "$wheel" ] || { echo "unpack-executorch-wheel: no $pattern after the download" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$wheel" "$tmp" <<'PY'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(("executorch/lib/", "executorch/include/")):
            z.extract(name, out)
PY
rm -rf "$dest"
mkdir -p "$dest"
cp -r "$tmp/executorch/lib" "$dest/lib"
cp -r "$tmp/executorch/include" "$dest/include"
touch "$dest/.complete-$version"
