#!/usr/bin/env bash
# Sets up cross builds of the ferry client for 64-bit ARM Linux (aarch64-unknown-linux-gnu),
# idempotently, from package registries only, and prints the path of an env file to source:
#
#   . "$(bash scripts/setup-cross-aarch64.sh | tail -n 1)"
#   cargo build --release -p ferry-client --features executorch --example fetch \
#     --target aarch64-unknown-linux-gnu
#   qemu-aarch64 -L / "$CARGO_TARGET_DIR/aarch64-unknown-linux-gnu/release/examples/fetch" --help
#
# What it installs:
#   - Debian's arm64 architecture, the aarch64 cross gcc/g++ and C library headers, qemu-user
#     (runs aarch64 programs here), and Debian's rustc-web/cargo-web 1.96 with the aarch64
#     standard library (libstd-rust-web-dev:arm64), linked into rustup as the toolchain
#     `ferry-cross-aarch64`. The project's own toolchain (rust-toolchain / rustup default) is
#     not touched: it has no aarch64 std, and the env file chooses the cross toolchain with
#     RUSTUP_TOOLCHAIN for the commands run after sourcing it only.
#   - The aarch64 ExecuTorch 1.5.1 runtime: lib/ and include/ of the PyPI wheel
#     executorch==1.5.1 (cp311, manylinux_2_28_aarch64), unpacked into .deps/executorch-aarch64.
#
# The env file sets the linker, CC/CXX/AR for the target, bindgen's sysroot, the qemu runner
# (`qemu-aarch64 -L /`: the arm64 libraries Debian installed under /lib/aarch64-linux-gnu; with
# -L /usr/aarch64-linux-gnu every thread spawn hangs), FERRY_EXECUTORCH_DIR and a target dir of
# its own (target/cross-aarch64), so cross and host builds never share artefacts.
# Installing the arm64 libraries may upgrade a few amd64 packages to the matching versions.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=1.5.1
toolchain=ferry-cross-aarch64
dest="$root/.deps/executorch-aarch64"
env_file="$root/.deps/cross-aarch64.env"

say() { echo "setup-cross-aarch64: $*" >&2; }

need=()
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need+=(gcc-aarch64-linux-gnu)
command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 || need+=(g++-aarch64-linux-gnu)
[ -f /usr/aarch64-linux-gnu/include/stdio.h ] || need+=(libc6-dev-arm64-cross)
command -v qemu-aarch64 >/dev/null 2>&1 || need+=(qemu-user)
/usr/bin/rustc --version 2>/dev/null | grep -q '^rustc 1\.9[6-9]' || need+=(rustc-web cargo-web)
[ -d /usr/lib/rustlib/aarch64-unknown-linux-gnu/lib ] || need+=(libstd-rust-web-dev:arm64)
# The runtime's shared libraries need the arm64 C++ library at run time (qemu -L /).
[ -e /lib/aarch64-linux-gnu/libstdc++.so.6 ] || need+=(libstdc++6:arm64)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    say "please run as root, or install: dpkg --add-architecture arm64 && apt-get install ${need[*]}"
    exit 1
  fi
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64
  fi
  say "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# Debian's toolchain, as a rustup toolchain of its own (rustup's proxies then find it by name).
if ! rustup toolchain list | grep -q "^$toolchain"; then
  rustup toolchain link "$toolchain" /usr >&2
fi

# The aarch64 ExecuTorch runtime from the PyPI wheel.
bash "$root/scripts/unpack-executorch-wheel.sh" "$version" manylinux_2_28_aarch64 "$dest"

mkdir -p "$(dirname "$env_file")"
cat >"$env_file" <<EOF
# Written by scripts/setup-cross-aarch64.sh: source it, then build with --target aarch64-unknown-linux-gnu.
export RUSTUP_TOOLCHAIN=$toolchain
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /"
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export CXX_aarch64_unknown_linux_gnu=aarch64-linux-gnu-g++
export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
export BINDGEN_EXTRA_CLANG_ARGS_aarch64_unknown_linux_gnu="--target=aarch64-linux-gnu --sysroot=/usr/aarch64-linux-gnu"
export FERRY_EXECUTORCH_DIR=$dest
export CARGO_TARGET_DIR=$root/target/cross-aarch64
export FERRY_CROSS_TARGET=aarch64-unknown-linux-gnu
EOF
echo "$env_file"
