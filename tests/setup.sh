#!/usr/bin/env bash
# Installs what ferry's tests need, idempotently, from package registries only:
# a C/C++ compiler, nginx (the trusted-proxy tests), SoftHSM2, opensc and openssl (keys in a
# PKCS#11 token and an external signer), the aarch64 cross toolchain and qemu-user (scripts/setup-cross-aarch64.sh), strace (counts the store's fsyncs), faketime (device clocks), a JDK and JNA (the Java binding's
# test), rustfmt and clippy, and (through
# scripts/setup-executorch.sh) clang, libclang and the ExecuTorch 1.5.1 runtime libraries
# from the PyPI wheel, moto (an S3 emulator), DuckDB (reads the Parquet telemetry) and kubernetes-validate from PyPI,
# Azurite (an Azure Blob Storage emulator) from npm, and for the dashboard Debian's Chromium
# and TypeScript, uPlot and playwright-core from npm.
# Safe to run again: each step checks first and does nothing when already done.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(gcc)
command -v c++ >/dev/null 2>&1 || need_apt+=(g++)
command -v strace >/dev/null 2>&1 || need_apt+=(strace)
# libfaketime: a client process run under another wall clock (the device-clock tests).
command -v faketime >/dev/null 2>&1 || need_apt+=(faketime)
# The Java binding's test: a JDK and JNA (Debian packages).
command -v javac >/dev/null 2>&1 || need_apt+=(openjdk-17-jdk-headless)
[ -f /usr/share/java/jna.jar ] || need_apt+=(libjna-java)
# The client SDK package and its example's builds (tests/package-client.sh): patchelf sets the
# library's SONAME and RUNPATH; pkg-config and CMake build the example as app teams would.
command -v patchelf >/dev/null 2>&1 || need_apt+=(patchelf)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
command -v make >/dev/null 2>&1 || need_apt+=(make)
# The trusted-proxy tests: a real nginx in front of the server (Debian's nginx-light).
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null 2>&1 || need_apt+=(nginx-light)
# Keys in hardware (issue 48): SoftHSM2 as the PKCS#11 token, opensc's pkcs11-tool to make
# Ed25519 and P-256 keys in it, and the openssl CLI behind the tests' exec: signer.
[ -f /usr/lib/softhsm/libsofthsm2.so ] || need_apt+=(softhsm2)
command -v pkcs11-tool >/dev/null 2>&1 || need_apt+=(opensc)
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
# A caching HTTP proxy in front of the blob routes, as a CDN is (tests/src/varnish.rs).
[ -x /usr/sbin/varnishd ] || command -v varnishd >/dev/null 2>&1 || need_apt+=(varnish)
# The dashboard's browser tests: Debian's Chromium, driven by playwright-core (npm, below).
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
  else
    echo "tests/setup.sh: please install: ${need_apt[*]}" >&2
    exit 1
  fi
fi
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
bash "$root/scripts/setup-executorch.sh" >/dev/null
# The client's cross build for 64-bit ARM Linux and qemu to run it (Debian packages, the
# aarch64 ExecuTorch wheel from PyPI; tests/cross-aarch64.sh).
bash "$root/scripts/setup-cross-aarch64.sh" >/dev/null
# A real S3 emulator for the scaled-out storage tests (moto, from PyPI).
if [ ! -x "$root/.deps/moto/bin/moto_server" ]; then
  python3 -m venv "$root/.deps/moto"
  "$root/.deps/moto/bin/pip" install --quiet "moto[server]"
fi
# From PyPI: DuckDB, an independent reader for the Parquet telemetry ferry writes, and
# kubernetes-validate, which checks deploy/kubernetes against the Kubernetes schemas.
if [ ! -x "$root/.deps/pytools/bin/kubernetes-validate" ] || ! "$root/.deps/pytools/bin/python" -c 'import duckdb' 2>/dev/null; then
  python3 -m venv "$root/.deps/pytools"
  "$root/.deps/pytools/bin/pip" install --quiet duckdb kubernetes-validate
fi
# The schema-driven API tester (Schemathesis, from PyPI, at one version: fixed seeds stay
# reproducible).
st_version=4.32.5
if ! "$root/.deps/schemathesis/bin/st" --version 2>/dev/null | grep -q "$st_version"; then
  python3 -m venv "$root/.deps/schemathesis"
  "$root/.deps/schemathesis/bin/pip" install --quiet "schemathesis==$st_version"
fi
# A client generator (openapi-python-client, from PyPI, at one version): the API contract test
# generates a Python client from schemas/openapi.bundled.json and drives a real server with it.
opc_version=0.29.1
if ! "$root/.deps/openapi-client/bin/openapi-python-client" --version 2>/dev/null | grep -q "$opc_version"; then
  python3 -m venv "$root/.deps/openapi-client"
  "$root/.deps/openapi-client/bin/pip" install --quiet "openapi-python-client==$opc_version" python-dateutil
fi
# The Azure Blob Storage emulator (Azurite, from npm), at the version tests/azurite's lockfile pins.
az="$root/.deps/azurite"
if [ ! -x "$az/node_modules/.bin/azurite-blob" ] || ! cmp -s "$root/tests/azurite/package-lock.json" "$az/package-lock.json"; then
  command -v npm >/dev/null 2>&1 || { echo "tests/setup.sh: please install Node.js and npm" >&2; exit 1; }
  mkdir -p "$az"
  cp "$root/tests/azurite/package.json" "$root/tests/azurite/package-lock.json" "$az/"
  (cd "$az" && npm ci --silent --no-audit --no-fund >/dev/null)
fi
# The dashboard's build and browser tests (TypeScript, uPlot, playwright-core from npm), at the
# versions ui/package-lock.json pins.
ui="$root/.deps/ui"
if [ ! -x "$ui/node_modules/.bin/tsc" ] || ! cmp -s "$root/ui/package-lock.json" "$ui/package-lock.json"; then
  command -v npm >/dev/null 2>&1 || { echo "tests/setup.sh: please install Node.js and npm" >&2; exit 1; }
  mkdir -p "$ui"
  cp "$root/ui/package.json" "$root/ui/package-lock.json" "$ui/"
  (cd "$ui" && npm ci --silent --no-audit --no-fund >/dev/null)
fi
echo "test dependencies ready"
