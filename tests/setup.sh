#!/usr/bin/env bash
# Installs what ferry's tests need, idempotently, from package registries only.
# Safe to run again: each step checks first and does nothing when already done.
set -euo pipefail

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(gcc)
command -v c++ >/dev/null 2>&1 || need_apt+=(g++)
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
echo "test dependencies ready"
