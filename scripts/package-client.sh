#!/usr/bin/env bash
# Builds the ferry client SDK for C and C++ apps on Linux:
#
#   scripts/package-client.sh TARGET      # x86_64-unknown-linux-gnu or aarch64-unknown-linux-gnu
#
# and writes dist/ferry-client-VERSION-TARGET.tar.gz (printed last), which unpacks to
# ferry-client-VERSION-TARGET/ with:
#   include/ferry.h                         the C ABI (docs/client.md)
#   lib/libferry_client.so                  stripped; finds the runtime through $ORIGIN/executorch
#   lib/libferry_client.a                   debug info stripped; link the runtime yourself (pkg-config/CMake say how)
#   lib/executorch/                         the ExecuTorch 1.5.1 runtime libraries it links (from the PyPI wheel)
#   lib/pkgconfig/ferry-client.pc           pkg-config (relocatable)
#   lib/cmake/ferry-client/                 find_package(ferry-client CONFIG): ferry::client, ferry::client_static
#   share/ferry-client/example/             fetch_model.c, a Makefile and a README
#   share/doc/ferry-client/                 license notices (ferry, the Rust crates it contains, ExecuTorch)
#   BUILD.json                              version, target, ExecuTorch version, files with sizes and SHA-256s
#
# The aarch64 build uses scripts/setup-cross-aarch64.sh's toolchain; the x86_64 one the
# project's. Needs patchelf (Debian) to set the library's SONAME and RUNPATH.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${1:?usage: scripts/package-client.sh x86_64-unknown-linux-gnu|aarch64-unknown-linux-gnu}
cd "$root"
say() { echo "package-client: $*" >&2; }
command -v patchelf >/dev/null 2>&1 || { say "please install patchelf"; exit 1; }

case "$target" in
  x86_64-unknown-linux-gnu)
    et_dir=$(bash scripts/setup-executorch.sh | tail -n 1)
    export FERRY_EXECUTORCH_DIR="$et_dir"
    tool_prefix=""
    build_dir="$root/target/package-x86_64"
    ;;
  aarch64-unknown-linux-gnu)
    env_file=$(bash scripts/setup-cross-aarch64.sh | tail -n 1)
    # shellcheck disable=SC1090
    . "$env_file"
    et_dir="$FERRY_EXECUTORCH_DIR"
    tool_prefix="aarch64-linux-gnu-"
    build_dir="$CARGO_TARGET_DIR"
    ;;
  *)
    say "unsupported target $target (x86_64-unknown-linux-gnu or aarch64-unknown-linux-gnu)"
    exit 2
    ;;
esac
export CARGO_TARGET_DIR="$build_dir"

version=$(cargo metadata --no-deps --format-version 1 --offline 2>/dev/null \
  | python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "ferry-client"))')
et_version=$(cd "$et_dir" && ls .complete-* | sed 's/^.complete-//')
name="ferry-client-$version-$target"
out="$root/dist/$name"

say "building the C library for $target (profile sdk: optimised for size)"
cargo build --quiet --profile sdk -p ferry-client-ffi --target "$target"
# What a static link needs besides the runtime: the Rust standard library's system libraries.
native=$(cargo rustc --quiet --profile sdk -p ferry-client-ffi --target "$target" --lib \
  --crate-type staticlib -- --print native-static-libs 2>&1 \
  | sed -n 's/.*native-static-libs: //p' | tail -n 1)
built="$build_dir/$target/sdk"

rm -rf "$out"
work_list=$(mktemp)
trap 'rm -f "$work_list"' EXIT
mkdir -p "$out"/{include,lib/executorch,lib/pkgconfig,lib/cmake/ferry-client,share/ferry-client/example,share/doc/ferry-client}
cp client/include/ferry.h "$out/include/"
cp "$built/libferry_client_ffi.so" "$out/lib/libferry_client.so"
cp "$built/libferry_client_ffi.a" "$out/lib/libferry_client.a"
"${tool_prefix}strip" --strip-unneeded "$out/lib/libferry_client.so"
"${tool_prefix}strip" --strip-debug "$out/lib/libferry_client.a"
# Two calls: some patchelf versions drop --set-rpath when it comes with --set-soname.
patchelf --set-soname libferry_client.so "$out/lib/libferry_client.so"
patchelf --set-rpath '$ORIGIN/executorch' "$out/lib/libferry_client.so"
dyn=$("${tool_prefix}readelf" -d "$out/lib/libferry_client.so")
grep -q 'RUNPATH.*\[\$ORIGIN/executorch\]' <<<"$dyn" \
  || { say "libferry_client.so's RUNPATH is not \$ORIGIN/executorch:"; grep -E 'RUNPATH|RPATH' <<<"$dyn" >&2; exit 1; }
grep -q 'SONAME.*\[libferry_client.so\]' <<<"$dyn" || { say "libferry_client.so has no SONAME"; exit 1; }

# The runtime libraries the library needs, and what those need, from the wheel's lib/.
queue=("$out/lib/libferry_client.so")
while [ ${#queue[@]} -gt 0 ]; do
  next=("${queue[@]}")
  queue=()
  for f in "${next[@]}"; do
    for lib in $("${tool_prefix}readelf" -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
      if [ -f "$et_dir/lib/$lib" ] && [ ! -f "$out/lib/executorch/$lib" ]; then
        cp "$et_dir/lib/$lib" "$out/lib/executorch/"
        queue+=("$out/lib/executorch/$lib")
      fi
    done
  done
done
runtime_libs=$(cd "$out/lib/executorch" && ls)
[ -n "$runtime_libs" ] || { say "no ExecuTorch library among libferry_client.so's dependencies"; exit 1; }
force_linked=$(for l in $runtime_libs; do
  case "$l" in libexecutorch.so) ;; lib*.so) printf -- '-l%s,' "$(basename "$l" .so | sed 's/^lib//')" ;; esac
done)

cat >"$out/lib/pkgconfig/ferry-client.pc" <<EOF
# ferry-client $version for $target, with ExecuTorch $et_version in \${libdir}/executorch.
prefix=\${pcfiledir}/../..
libdir=\${prefix}/lib
includedir=\${prefix}/include
runtimedir=\${libdir}/executorch

Name: ferry-client
Description: ferry's on-device model client (resolve, download, verify, cache, load into ExecuTorch $et_version)
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -lferry_client -Wl,-rpath-link,\${runtimedir}
Libs.private: -L\${runtimedir} -Wl,--no-as-needed,-lexecutorch,${force_linked}--as-needed -lstdc++ $native
EOF

cat >"$out/lib/cmake/ferry-client/ferry-clientConfig.cmake" <<EOF
# ferry-client $version for $target (ExecuTorch $et_version): find_package(ferry-client CONFIG)
# gives ferry::client (the shared library; it finds the runtime next to it) and
# ferry::client_static (the static library, linked with the runtime's shared libraries).
get_filename_component(_ferry_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(ferry-client_VERSION "$version")
set(ferry-client_EXECUTORCH_VERSION "$et_version")
set(ferry-client_RUNTIME_DIR "\${_ferry_prefix}/lib/executorch")
if(NOT TARGET ferry::client)
  add_library(ferry::client SHARED IMPORTED)
  set_target_properties(ferry::client PROPERTIES
    IMPORTED_LOCATION "\${_ferry_prefix}/lib/libferry_client.so"
    IMPORTED_SONAME "libferry_client.so"
    INTERFACE_INCLUDE_DIRECTORIES "\${_ferry_prefix}/include"
    INTERFACE_LINK_OPTIONS "-Wl,-rpath-link,\${_ferry_prefix}/lib/executorch")
  add_library(ferry::client_static STATIC IMPORTED)
  set_target_properties(ferry::client_static PROPERTIES
    IMPORTED_LOCATION "\${_ferry_prefix}/lib/libferry_client.a"
    INTERFACE_INCLUDE_DIRECTORIES "\${_ferry_prefix}/include"
    INTERFACE_LINK_DIRECTORIES "\${_ferry_prefix}/lib/executorch"
    INTERFACE_LINK_OPTIONS "-Wl,--no-as-needed,-lexecutorch,${force_linked}--as-needed"
    INTERFACE_LINK_LIBRARIES "stdc++;$(echo "$native" | sed 's/-l//g; s/ /;/g')")
endif()
unset(_ferry_prefix)
EOF
cat >"$out/lib/cmake/ferry-client/ferry-clientConfigVersion.cmake" <<EOF
set(PACKAGE_VERSION "$version")
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
EOF

ex="$out/share/ferry-client/example"
cp client/package/fetch_model.c client/package/CMakeLists.txt "$ex/"
cat >"$ex/Makefile" <<'EOF'
# Builds fetch_model against the unpacked package with pkg-config; for another architecture,
# set CC (make CC=aarch64-linux-gnu-gcc).
PREFIX := $(abspath ../../..)
PKG := PKG_CONFIG_PATH=$(PREFIX)/lib/pkgconfig pkg-config
CFLAGS ?= -O2 -Wall -Werror
fetch_model: fetch_model.c
	$(CC) $(CFLAGS) $< $(shell $(PKG) --cflags --libs ferry-client) -Wl,-rpath,$(PREFIX)/lib -o $@
fetch_model_static: fetch_model.c
	$(CC) $(CFLAGS) $< $(shell $(PKG) --cflags ferry-client) $(PREFIX)/lib/libferry_client.a $(filter-out -lferry_client,$(shell $(PKG) --static --libs ferry-client)) -Wl,-rpath,$(PREFIX)/lib/executorch -o $@
clean:
	rm -f fetch_model fetch_model_static
EOF
cp client/package/README.example.md "$ex/README.md"

docs="$out/share/doc/ferry-client"
cp client/package/NOTICE.md "$docs/NOTICE.md"
# The crates linked into the library (no build-time or proc-macro crates), each with the license
# files its published source carries.
cargo tree --quiet --offline -p ferry-client-ffi --target "$target" -e normal,no-proc-macro \
  --prefix none --no-dedupe -f '{p}|{l}' 2>/dev/null | sort -u >"$work_list"
python3 - "$work_list" "$docs" "${CARGO_HOME:-$HOME/.cargo}" <<'PY'
import glob, os, shutil, sys
listing, docs, cargo_home = sys.argv[1:]
rows = []
for line in open(listing):
    line = line.strip()
    if not line or "|" not in line:
        continue
    pkg, lic = line.split("|", 1)
    parts = pkg.split()
    name, version = parts[0], parts[1].lstrip("v")
    if len(parts) > 2 and parts[2].startswith("(/"):
        continue  # this workspace's own crates: ferry's license
    src = glob.glob(os.path.join(cargo_home, "registry", "src", "*", f"{name}-{version}"))
    files = []
    if src:
        for f in sorted(os.listdir(src[0])):
            if f.upper().startswith(("LICENSE", "LICENCE", "COPYING", "NOTICE")) and os.path.isfile(os.path.join(src[0], f)):
                dest = os.path.join(docs, "licenses", f"{name}-{version}")
                os.makedirs(dest, exist_ok=True)
                shutil.copy(os.path.join(src[0], f), dest)
                files.append(f"licenses/{name}-{version}/{f}")
    rows.append((name, version, lic or "see the crate", ", ".join(files) or "none in the crate's source"))
with open(os.path.join(docs, "RUST-CRATES.md"), "w") as out:
    out.write("# Rust crates linked into libferry_client\n\n| crate | version | license | license files |\n|---|---|---|---|\n")
    for r in sorted(set(rows)):
        out.write("| %s | %s | %s | %s |\n" % r)
PY
# ExecuTorch's own license file, as its wheel ships it.
wheel=$(ls "$root"/.deps/wheels/executorch-"$et_version"-*"$( [ "$target" = aarch64-unknown-linux-gnu ] && echo aarch64 || echo x86_64)"*.whl | head -n 1)
python3 - "$wheel" "$docs/EXECUTORCH-LICENSE" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    name = next((n for n in z.namelist() if n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE")), None)
    if name is None:
        sys.exit("the wheel has no LICENSE file")
    open(sys.argv[2], "wb").write(z.read(name))
PY

python3 - "$out" "$version" "$target" "$et_version" <<'PY'
import hashlib, json, os, sys
out, version, target, et = sys.argv[1:]
files = []
for d, _, names in os.walk(out):
    for n in sorted(names):
        p = os.path.join(d, n)
        rel = os.path.relpath(p, out)
        if rel == "BUILD.json":
            continue
        data = open(p, "rb").read()
        files.append({"path": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
files.sort(key=lambda f: f["path"])
size = lambda p: next(f["size"] for f in files if f["path"] == p)
runtime = sum(f["size"] for f in files if f["path"].startswith("lib/executorch/"))
json.dump({
    "name": "ferry-client", "version": version, "target": target,
    "executorch": {"version": et, "libraries": sorted(f["path"].split("/")[-1] for f in files if f["path"].startswith("lib/executorch/")), "bytes": runtime},
    "library_bytes": {"shared_stripped": size("lib/libferry_client.so"), "static": size("lib/libferry_client.a")},
    "files": files,
}, open(os.path.join(out, "BUILD.json"), "w"), indent=2)
PY

tar -C "$root/dist" -czf "$root/dist/$name.tar.gz" "$name"
so=$(stat -c %s "$out/lib/libferry_client.so")
rt=$(du -cb "$out"/lib/executorch/*.so | tail -n 1 | cut -f1)
say "libferry_client.so: $so bytes stripped, without the runtime; the runtime: $rt bytes ($(echo $runtime_libs | wc -w) libraries)"
echo "$root/dist/$name.tar.gz"
