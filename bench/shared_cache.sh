#!/usr/bin/env bash
# What sharing one cache costs an app's processes: N processes loading an already cached model
# (verify, open, load, golden check) from ONE shared cache, against the same N processes each
# with a cache of its own, in the same run, alternating A B A B. Prints each round's ratio and
# the median with min and max (the machines are noisy: only same-run ratios mean anything).
#
# Usage: bench/shared_cache.sh [--procs N] [--rounds R]   (defaults: 4 processes, 15 rounds)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
procs=4
rounds=15
while [ $# -gt 0 ]; do
  case "$1" in
    --procs) procs=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "usage: bench/shared_cache.sh [--procs N] [--rounds R]" >&2; exit 2 ;;
  esac
done
bash "$root/scripts/setup-executorch.sh" >/dev/null
cargo build --quiet --release -p ferry-server --bin ferry
cargo build --quiet --release -p ferry-tests --bin load-child
bin="$root/target/release"
work=$(mktemp -d)
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin/ferry" serve --demo --listen "127.0.0.1:$port" --data "$work/data" >"$work/server.log" 2>&1 &
server=$!
for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
url="http://127.0.0.1:$port"
trust="$work/data/keys/trust.json"
# Fill the caches once: the runs below load from the cache (cached-or-download mode is what an
# app's second process does; here each run is a fresh process that resolves, then finds the
# blob cached and verifies it).
"$bin/load-child" load "$url" "$trust" "$work/shared" demo-mlp >/dev/null
for i in $(seq "$procs"); do "$bin/load-child" load "$url" "$trust" "$work/own-$i" demo-mlp >/dev/null; done
run() { # $1: shared|own; prints wall nanoseconds for N processes started together
  local start end pids=()
  start=$(date +%s%N)
  for i in $(seq "$procs"); do
    if [ "$1" = shared ]; then dir="$work/shared"; else dir="$work/own-$i"; fi
    "$bin/load-child" load "$url" "$trust" "$dir" demo-mlp >/dev/null &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  end=$(date +%s%N)
  echo $((end - start))
}
ratios=()
for r in $(seq "$rounds"); do
  a=$(run shared)
  b=$(run own)
  ratio=$(python3 -c "print(f'{$a/$b:.3f}')")
  ratios+=("$ratio")
  printf 'round %2d: shared %6.1f ms, own caches %6.1f ms, ratio %s\n' "$r" \
    "$(python3 -c "print($a/1e6)")" "$(python3 -c "print($b/1e6)")" "$ratio"
done
python3 - "$procs" "${ratios[@]}" <<'PY'
import statistics, sys
procs, xs = sys.argv[1], [float(x) for x in sys.argv[2:]]
print(f"{procs} processes, shared cache / a cache each: median {statistics.median(xs):.3f} "
      f"(min {min(xs):.3f}, max {max(xs):.3f}) over {len(xs)} rounds")
PY
