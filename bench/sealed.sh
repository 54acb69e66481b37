#!/usr/bin/env bash
# Sealed variants (issue 50): the same program and data file loaded and run plain and sealed,
# in alternating rounds, by one build of the runtime adapter (client/examples/module_load.rs):
#   mmap    the plain files mapped (the client's way for 16 MiB and more);
#   read    the plain files read into memory by ExecuTorch's own file loader;
#   sealed  the files sealed (ferry-seal-1, before the timing) and read through the client's
#           decrypting data loader.
# Each round gives the ratios sealed/mmap and sealed/read of: the load (open + method load),
# the first run, a steady run (the median of the runs after the first), and the resident memory
# the load and runs added (peak minus start: sealed - mmap, in MiB). Prints medians with min and
# max over the rounds, and the raw rounds as JSON lines on stderr.
#
# The model: a 512 MiB linear layer's weights in a .ptd (bench/big_ptd.sh --mib 512, exported
# once with the real exporter), and the demo's XNNPACK program (small: the fixed costs).
# Usage: bench/sealed.sh [--runs N]   (default 5 rounds)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=5
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    *) echo "usage: bench/sealed.sh [--runs N]" >&2; exit 2 ;;
  esac
done
echo "building (release)..." >&2
cargo build --release -q -p ferry-client --features executorch --example module_load \
  --manifest-path "$root/Cargo.toml"
big=$("$root/bench/big_ptd.sh" --mib 512)
load="$root/target/release/examples/module_load"
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT

round() { # NAME ARGS... : one line per mode, as JSON with the model's name
  local name=$1
  shift
  for mode in mmap read sealed; do
    local flag=()
    [ "$mode" = read ] && flag=(--read)
    [ "$mode" = sealed ] && flag=(--sealed)
    "$load" "$@" --runs 5 "${flag[@]}" | python3 -c "
import json, sys
v = json.load(sys.stdin)
v['model'] = '$name'
v['mode'] = '$mode'
print(json.dumps(v))"
  done
}

for i in $(seq "$runs"); do
  echo "round $i/$runs" >&2
  round big512 --program "$big/big-ptd.pte" --data "$big/big-ptd.ptd" >>"$raw"
  round demo --program "$root/server/demo/mlp-v1-xnnpack.pte" >>"$raw"
done
cat "$raw" >&2
python3 - "$raw" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def fig(values):
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"
for model in ["big512", "demo"]:
    by = {m: [r for r in rows if r["model"] == model and r["mode"] == m] for m in ["mmap", "read", "sealed"]}
    print(f"{model}:")
    for key, label in [("duration_ms", "load"), ("first_run_ms", "first run"), ("steady_run_ms", "steady run")]:
        for base in ["mmap", "read"]:
            ratios = [s[key] / b[key] for s, b in zip(by["sealed"], by[base]) if b[key]]
            print(f"  {label:<10} sealed/{base:<4} {fig(ratios)}")
    grew = [((s["hwm_kb"] - s["rss_before_kb"]) - (b["hwm_kb"] - b["rss_before_kb"])) / 1024
            for s, b in zip(by["sealed"], by["mmap"])]
    print(f"  peak memory sealed - mmap: {fig(grew)} MiB")
    for m in ["mmap", "read", "sealed"]:
        print(f"  {m:<6} load {statistics.median(r['duration_ms'] for r in by[m]):8.1f} ms, "
              f"steady run {statistics.median(r['steady_run_ms'] for r in by[m]):8.1f} ms, "
              f"peak +{statistics.median((r['hwm_kb'] - r['rss_before_kb']) / 1024 for r in by[m]):.0f} MiB")
EOF
