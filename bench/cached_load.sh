#!/usr/bin/env bash
# App start with a cached large model: the time a cached variant takes to be ready (the load
# report's duration_ms: resolve, cache check, runtime load of the program), for the demo XNNPACK
# program alone ("plain") and the same program with a 1 GiB asset made now from /dev/urandom
# ("heavy"), loaded in alternating pairs by the real client (client/examples/fetch.rs, the real
# ExecuTorch runtime) against a real server. The figure is heavy / plain per pair: the cost of
# the cached gigabyte at every app start. Page cache warm (the file was just written).
#
# Usage: bench/cached_load.sh [--runs N] [--gib G] [--raw FILE]   (defaults: 5 pairs, 1 GiB)
# With --raw, appends "cached_load_ms HEAVY PLAIN" per pair to FILE (bench/run's format) and
# prints nothing else on stdout.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=5
gib=1
raw=
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --gib) gib=$2; shift 2 ;;
    --raw) raw=$2; shift 2 ;;
    *) echo "usage: bench/cached_load.sh [--runs N] [--gib G] [--raw FILE]" >&2; exit 2 ;;
  esac
done
echo "building (release)..." >&2
cargo build --release -q -p ferry-server --manifest-path "$root/Cargo.toml"
cargo build --release -q -p ferry-client --features executorch --example fetch \
  --manifest-path "$root/Cargo.toml"
ferry="$root/target/release/ferry"
fetch="$root/target/release/examples/fetch"
work=$(mktemp -d)
cleanup() {
  if [ -n "${ferry_pid:-}" ]; then
    kill "$ferry_pid" 2>/dev/null || true
    wait "$ferry_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
port=18385
token=bench-admin-token-0123456789
FERRY_ADMIN_TOKEN=$token FERRY_LOG=warn "$ferry" serve --demo --data "$work/data" \
  --listen 127.0.0.1:$port 2>"$work/ferry.log" &
ferry_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done

rel="$work/rel"
mkdir -p "$rel"
cp "$root/server/demo/mlp-v1-xnnpack.pte" "$rel/"
echo "making the ${gib} GiB asset..." >&2
head -c $((gib << 30)) /dev/urandom > "$rel/big.bin"
for model in plain heavy; do
  assets=
  [ "$model" = heavy ] && assets='assets = ["big.bin"]'
  cat > "$rel/$model.toml" <<TOML
model = "$model"
version = "1.0.0"
$assets

[[variant]]
id = "xnnpack-fp32"
file = "mlp-v1-xnnpack.pte"
delegate = "xnnpack"
quant = "fp32"
runtime = ">=1.0.0"
app = "*"
TOML
  "$ferry" sign "$rel/$model.toml" --key "$work/data/keys/release.key" -o "$rel/$model.json" >/dev/null
  FERRY_TOKEN=$token "$ferry" publish "$rel/$model.json" --files "$rel" \
    --server "http://127.0.0.1:$port" --quiet >/dev/null
done
rm -f "$rel/big.bin"

load() { # model -> duration_ms of a load from the cache (exits non-zero unless cached)
  local out
  out=$("$fetch" --server "http://127.0.0.1:$port" --model "$1" --trust "$work/data/keys/trust.json" \
    --cache "$work/cache" --json)
  python3 - "$out" <<'PY'
import json, sys
o = json.loads(sys.argv[1])
r = o.get("report") or {}
if r.get("source") != "cached":
    sys.exit(f"bench: expected a cached load, got {o}")
print(r["duration_ms"])
PY
}
echo "first downloads..." >&2
"$fetch" --server "http://127.0.0.1:$port" --model plain --trust "$work/data/keys/trust.json" \
  --cache "$work/cache" --json >/dev/null
"$fetch" --server "http://127.0.0.1:$port" --model heavy --trust "$work/data/keys/trust.json" \
  --cache "$work/cache" --json >/dev/null
pairs="$work/pairs.txt"
: > "$pairs"
for r in $(seq "$runs"); do
  p=$(load plain)
  h=$(load heavy)
  echo "pair $r/$runs: heavy ${h} ms, plain ${p} ms" >&2
  echo "cached_load_ms $h $p" >> "$pairs"
done
if [ -n "$raw" ]; then
  cat "$pairs" >> "$raw"
  exit 0
fi
python3 - "$pairs" "$gib" <<'PY'
import statistics, sys
rows = [tuple(map(float, l.split()[1:])) for l in open(sys.argv[1])]
ratios = [h / p for h, p in rows]
med = lambda xs: statistics.median(xs)
print(f"cached load with {sys.argv[2]} GiB asset vs without: median {med(ratios):.2f}x "
      f"(min {min(ratios):.2f}, max {max(ratios):.2f}) over {len(rows)} pairs; "
      f"heavy {med([h for h, _ in rows]):.1f} ms, plain {med([p for _, p in rows]):.1f} ms (medians)")
PY
