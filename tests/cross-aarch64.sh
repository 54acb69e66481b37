#!/usr/bin/env bash
# The client on 64-bit ARM Linux, tested on the target architecture (issue 33):
# cross-builds ferry-client for aarch64-unknown-linux-gnu (default features, and with the
# ExecuTorch runtime and the C ABI), the C library and the fetch example, runs the client's
# tests under qemu, then the end-to-end test (tests/tests/cross_aarch64.rs: a native server,
# the aarch64 fetch under qemu). Needs scripts/setup-cross-aarch64.sh (tests/setup.sh runs it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

env_file=$(bash "$root/scripts/setup-cross-aarch64.sh" | tail -n 1)
target=aarch64-unknown-linux-gnu
(
  # shellcheck disable=SC1090
  . "$env_file"
  echo "cross toolchain: $(rustc --version) for $target, runtime in $FERRY_EXECUTORCH_DIR"
  cargo build --quiet -p ferry-client --target "$target"
  cargo build --quiet -p ferry-client-ffi -p ferry-client --features ferry-client/executorch \
    --example fetch --target "$target"
  # The client's own tests, run by qemu (the env file's runner).
  cargo test --quiet -p ferry-client --features executorch,ffi --target "$target" --lib
  aarch64-linux-gnu-readelf -h "$CARGO_TARGET_DIR/$target/debug/examples/fetch" | grep -q AArch64 \
    || { echo "the fetch example is not an aarch64 program" >&2; exit 1; }
)
# The end-to-end test runs natively (the server, the proxy); only fetch runs under qemu.
FERRY_AARCH64_FETCH="$root/target/cross-aarch64/$target/debug/examples/fetch" \
  cargo test --quiet -p ferry-tests --test cross_aarch64
