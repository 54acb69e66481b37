#!/usr/bin/env bash
# App start with a cached large model: the time a cached variant takes to be ready (the load
# report's duration_ms: resolve, cache check, runtime load of the program), for the demo XNNPACK
# program alone ("plain") and the same program with a 1 GiB asset made now from /dev/urandom
# ("heavy"), loaded in alternating pairs by the real client (client/examples/fetch.rs, the real
# ExecuTorch runtime) against a real server. The figure is heavy / plain per pair, each side the
# best of three process starts: the cost of the cached gigabyte at every app start. Page cache
# warm (the file was just written).
#
# With --ptd, also a program whose 1 GiB of weights are in a .ptd data file (exported once with
# the real exporter, bench/big_ptd.sh), its cached load by ferry against ExecuTorch's own Module
# load of the same cached files with nothing of ferry's around it (client/examples/module_load.rs).
#
# Usage: bench/cached_load.sh [--runs N] [--gib G] [--ptd] [--raw FILE]   (defaults: 5 pairs,
# 1 GiB). With --raw, appends "cached_load_ms HEAVY PLAIN" (and "cached_ptd_ms FERRY MODULE")
# per pair to FILE (bench/run's format) and prints nothing else on stdout.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=5
gib=1
raw=
ptd=0
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --gib) gib=$2; shift 2 ;;
    --raw) raw=$2; shift 2 ;;
    --ptd) ptd=1; shift ;;
    *) echo "usage: bench/cached_load.sh [--runs N] [--gib G] [--ptd] [--raw FILE]" >&2; exit 2 ;;
  esac
done
echo "building (release)..." >&2
cargo build --release -q -p ferry-server --manifest-path "$root/Cargo.toml"
cargo build --release -q -p ferry-client --features executorch --example fetch \
  --example module_load --manifest-path "$root/Cargo.toml"
[ "$ptd" = 1 ] && big_ptd=$("$root/bench/big_ptd.sh")
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
if [ "$ptd" = 1 ]; then
  cp "$big_ptd/big-ptd.pte" "$big_ptd/big-ptd.ptd" "$rel/"
  cat > "$rel/ptd.toml" <<TOML
model = "ptd"
version = "1.0.0"

[[variant]]
id = "portable-fp32"
file = "big-ptd.pte"
data = ["big-ptd.ptd"]
delegate = "portable"
quant = "fp32"
runtime = ">=1.0.0"
app = "*"
TOML
  "$ferry" sign "$rel/ptd.toml" --key "$work/data/keys/release.key" -o "$rel/ptd.json" >/dev/null
  FERRY_TOKEN=$token "$ferry" publish "$rel/ptd.json" --files "$rel" \
    --server "http://127.0.0.1:$port" --quiet >/dev/null
  rm -f "$rel/big-ptd.ptd"
fi

load() { # model -> duration_ms of a load from the cache, the best of three (exits non-zero
  # unless cached): a stray fsync or page-cache hiccup of one process start is not the figure.
  local out all=()
  for _ in 1 2 3; do
    out=$("$fetch" --server "http://127.0.0.1:$port" --model "$1" --trust "$work/data/keys/trust.json" \
      --cache "$work/cache" --json)
    all+=("$out")
  done
  python3 - "${all[@]}" <<'PY'
import json, sys
best = None
for text in sys.argv[1:]:
    o = json.loads(text)
    r = o.get("report") or {}
    if r.get("source") != "cached":
        sys.exit(f"bench: expected a cached load, got {o}")
    best = r["duration_ms"] if best is None else min(best, r["duration_ms"])
print(best)
PY
}
echo "first downloads..." >&2
"$fetch" --server "http://127.0.0.1:$port" --model plain --trust "$work/data/keys/trust.json" \
  --cache "$work/cache" --json >/dev/null
"$fetch" --server "http://127.0.0.1:$port" --model heavy --trust "$work/data/keys/trust.json" \
  --cache "$work/cache" --json >/dev/null
if [ "$ptd" = 1 ]; then
  first=$("$fetch" --server "http://127.0.0.1:$port" --model ptd --trust "$work/data/keys/trust.json" \
    --cache "$work/cache" --json)
  read -r ptd_program ptd_data <<<"$(python3 -c 'import json,sys; o=json.loads(sys.argv[1]); print(o["path"], o["data_files"][0])' "$first")"
fi
module() { # -> duration_ms of ExecuTorch's own load of the cached program and data file (best
  # of three, as for load)
  for _ in 1 2 3; do
    "$root/target/release/examples/module_load" --program "$ptd_program" --data "$ptd_data"
  done | python3 -c 'import json,sys; print(min(json.loads(l)["duration_ms"] for l in sys.stdin))'
}
pairs="$work/pairs.txt"
: > "$pairs"
for r in $(seq "$runs"); do
  p=$(load plain)
  h=$(load heavy)
  echo "pair $r/$runs: heavy ${h} ms, plain ${p} ms" >&2
  echo "cached_load_ms $h $p" >> "$pairs"
  if [ "$ptd" = 1 ]; then
    f=$(load ptd)
    m=$(module)
    echo "pair $r/$runs: ferry with the 1 GiB .ptd ${f} ms, ExecuTorch Module ${m} ms" >&2
    echo "cached_ptd_ms $f $m" >> "$pairs"
  fi
done
if [ -n "$raw" ]; then
  cat "$pairs" >> "$raw"
  exit 0
fi
python3 - "$pairs" "$gib" <<'PY'
import statistics, sys
rows = {}
for l in open(sys.argv[1]):
    name, a, b = l.split()
    rows.setdefault(name, []).append((float(a), float(b)))
med = statistics.median
labels = {"cached_load_ms": (f"cached load with a {sys.argv[2]} GiB asset vs without", "with", "without"),
          "cached_ptd_ms": ("cached load of a program with 1 GiB of .ptd weights vs ExecuTorch's Module load", "ferry", "Module")}
for name, pairs in rows.items():
    label, a, b = labels[name]
    ratios = [x / y for x, y in pairs]
    print(f"{label}: median {med(ratios):.2f}x (min {min(ratios):.2f}, max {max(ratios):.2f}) over "
          f"{len(pairs)} pairs; {a} {med([x for x, _ in pairs]):.1f} ms, {b} {med([y for _, y in pairs]):.1f} ms (medians)")
PY
