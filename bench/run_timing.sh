#!/usr/bin/env bash
# What the client's run timing costs (issue 32): the demo server's model loaded twice, with
# run timing on and off, run in alternating rounds in one process (client/examples/
# run_timing.rs). Prints per-call times (median, min, max over the rounds), the ratio
# timed/untimed and the overhead per call in nanoseconds, as JSON.
# Usage: bench/run_timing.sh [--calls N] [--rounds R]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release -q -p ferry-server --manifest-path "$root/Cargo.toml"
cargo build --release -q -p ferry-client --features executorch --example run_timing \
  --manifest-path "$root/Cargo.toml"
work=$(mktemp -d)
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
FERRY_ADMIN_TOKEN=bench-token-0123456789 "$root/target/release/ferry" serve --demo \
  --listen 127.0.0.1:18391 --data "$work/data" >"$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 100); do
  grep -q "listening on" "$work/serve.log" && break
  sleep 0.1
done
"$root/target/release/examples/run_timing" --server http://127.0.0.1:18391 \
  --trust "$work/data/keys/trust.json" --cache "$work/cache" --model demo-mlp \
  --input "$root/tests/fixtures/pte/mlp-v1-xnnpack.json" "$@"
