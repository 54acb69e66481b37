#!/usr/bin/env bash
# What crash-safe loading costs (issue 45): the flight recorder's mark and clear around each
# native step, against the same loops without it, in alternating rounds in one process
# (client/examples/flight_cost.rs): the demo model's runs (ns per call) and its loads from the
# cache (ms per load: open, method load, golden check). Prints medians with min and max over
# the rounds, the ratios and the overheads, as JSON.
# Usage: bench/flight_cost.sh [--calls N] [--loads N] [--rounds R]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release -q -p ferry-server --manifest-path "$root/Cargo.toml"
cargo build --release -q -p ferry-client --features executorch --example flight_cost \
  --manifest-path "$root/Cargo.toml"
work=$(mktemp -d)
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
FERRY_ADMIN_TOKEN=bench-token-0123456789 "$root/target/release/ferry" serve --demo \
  --listen 127.0.0.1:18392 --data "$work/data" >"$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 100); do
  grep -q "listening on" "$work/serve.log" && break
  sleep 0.1
done
"$root/target/release/examples/flight_cost" --server http://127.0.0.1:18392 \
  --trust "$work/data/keys/trust.json" --cache "$work/cache" --model demo-mlp \
  --input "$root/tests/fixtures/pte/mlp-v1-xnnpack.json" "$@"
