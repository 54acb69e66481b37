#!/usr/bin/env bash
# The client SDK packages (issue 33): builds dist/ferry-client-VERSION-TARGET.tar.gz for x86_64
# and aarch64 Linux (scripts/package-client.sh), unpacks each, builds its C example against the
# unpacked package as a team would (pkg-config with the shared and the static library, and
# CMake's find_package; the aarch64 one with the cross compiler), and runs every build against a
# native `ferry serve --demo` (the aarch64 ones under qemu): each must load demo-mlp's XNNPACK
# variant, compute the same outputs and send its telemetry.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
work=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

cargo build --quiet -p ferry-server --all-features
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
(cd "$work" && exec "$root/target/debug/ferry" serve --demo --listen "127.0.0.1:$port" >server.log 2>&1) &
server_pid=$!
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
trust="$work/ferry-data/keys/trust.json"
[ -f "$trust" ] || { cat "$work/server.log" >&2; echo "the demo server did not start" >&2; exit 1; }
device='{"install_id":"sdk-example","platform":"linux","os_version":"6.1","device_model":"acme-cam-x1","soc":"RK3588","ram_mb":2048,"claimed_backends":[]}'

for target in x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu; do
  tarball=$(bash scripts/package-client.sh "$target" | tail -n 1)
  mkdir -p "$work/$target"
  tar -C "$work/$target" -xzf "$tarball"
  pkg=$(echo "$work/$target"/ferry-client-*)
  python3 -c 'import json,sys; b = json.load(open(sys.argv[1])); print("%s: libferry_client.so %d bytes stripped, libferry_client.a %d bytes, ExecuTorch %s runtime %d bytes (%s)" % (b["target"], b["library_bytes"]["shared_stripped"], b["library_bytes"]["static"], b["executorch"]["version"], b["executorch"]["bytes"], ", ".join(b["executorch"]["libraries"])))' "$pkg/BUILD.json"
  ex="$pkg/share/ferry-client/example"
  if [ "$target" = aarch64-unknown-linux-gnu ]; then
    cc=aarch64-linux-gnu-gcc
    run=(qemu-aarch64 -L /)
    cmake_cross=(-DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc)
  else
    cc=cc
    run=()
    cmake_cross=()
  fi
  make --quiet -C "$ex" CC="$cc" fetch_model fetch_model_static
  cmake -S "$ex" -B "$ex/build" -DCMAKE_PREFIX_PATH="$pkg" "${cmake_cross[@]}" >/dev/null
  cmake --build "$ex/build" >/dev/null
  for exe in "$ex/fetch_model" "$ex/fetch_model_static" "$ex/build/fetch_model" "$ex/build/fetch_model_static"; do
    out=$("${run[@]}" "$exe" "http://127.0.0.1:$port" "$trust" "$work/cache-$target" demo-mlp "$device")
    echo "$out" | sed "s|^|  $(basename "$(dirname "$exe")")/$(basename "$exe"): |"
    grep -q "^loaded demo-mlp 1.0.0 variant xnnpack-fp32 (xnnpack)" <<<"$out" \
      || { echo "$exe did not load the XNNPACK variant" >&2; exit 1; }
    grep -q "^telemetry: [1-9][0-9]* sent, 0 queued" <<<"$out" \
      || { echo "$exe did not send its telemetry" >&2; exit 1; }
    grep '^output' <<<"$out" >>"$work/outputs"
  done
  # Installed as an image would hold it: the library and its runtime under /usr/lib of a root
  # file system, nothing else. The library must find the runtime next to itself ($ORIGIN), not
  # where it was built.
  rootfs="$work/rootfs-$target/usr/lib"
  mkdir -p "$rootfs"
  cp -r "$pkg/lib/libferry_client.so" "$pkg/lib/executorch" "$rootfs/"
  if [ "$target" = aarch64-unknown-linux-gnu ]; then
    loaded=$(qemu-aarch64 -L / -E LD_LIBRARY_PATH="$rootfs" -E LD_DEBUG=libs "$ex/fetch_model" \
      "http://127.0.0.1:$port" "$trust" "$work/cache-$target" demo-mlp "$device" 2>&1)
  else
    loaded=$(LD_LIBRARY_PATH="$rootfs" LD_DEBUG=libs "$ex/fetch_model" \
      "http://127.0.0.1:$port" "$trust" "$work/cache-$target" demo-mlp "$device" 2>&1)
  fi
  for lib in libferry_client.so executorch/libexecutorch.so executorch/libexecutorch_backend_xnnpack.so; do
    grep -q "calling init: $rootfs/$lib\$" <<<"$loaded" \
      || { grep "calling init" <<<"$loaded" >&2; echo "$target: $lib was not loaded from the installed copy" >&2; exit 1; }
  done
  grep -q "^loaded demo-mlp" <<<"$loaded" || { echo "$target: the installed copy did not load" >&2; exit 1; }
  echo "  installed copy: the library and its runtime load from $(basename "$(dirname "$(dirname "$rootfs")")")/usr/lib"
done
# Every build, on both architectures, computed the same outputs (to the printed precision).
python3 - "$work/outputs" <<'PY'
import sys
rows = [[float(x) for x in l.split(":", 1)[1].split()] for l in open(sys.argv[1])]
assert len(rows) == 8, rows
for r in rows[1:]:
    assert len(r) == len(rows[0]) and all(abs(a - b) <= 2e-6 for a, b in zip(r, rows[0])), (r, rows[0])
print("ok: 8 builds (2 architectures x shared/static x make/CMake) computed the same outputs")
PY
