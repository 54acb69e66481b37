#!/usr/bin/env bash
# Device-clock benchmark: resolve requests/s for the shared, pre-signed answers devices with a
# right clock get, against resolves with a nonce (a decision signed for each request, what a
# device without a trusted time asks for), in the same run. With BASELINE=path/to/older/ferry,
# also the shared answers of that binary, alternating with this one, to compare the common path
# across a change (ratios of medians; the machines are noisy).
#
# Needs wrk (Debian package; installed here if missing, as root). Loopback only.
# Usage: bench/clocks.sh [SECONDS] [ROUNDS]   (defaults 8 and 3)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-8}
rounds=${2:-3}
command -v wrk >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
}
cargo build --release -q -p ferry-server --manifest-path "$root/Cargo.toml"
ferry="$root/target/release/ferry"
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# serve BINARY PORT NAME [CONFIG]: a demo server on its own data directory.
serve() {
  local config=()
  [ -n "${4:-}" ] && config=(--config "$4")
  FERRY_ADMIN_TOKEN=bench-admin-token-0123456789 FERRY_LOG=warn \
    "$1" serve --demo --data "$work/$3" --listen "127.0.0.1:$2" "${config[@]}" 2>"$work/$3.log" &
  pids+=($!)
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$2/healthz" >/dev/null && return; sleep 0.1; done
  echo "bench: $3 did not start" >&2
  cat "$work/$3.log" >&2
  exit 1
}

# No per-network limit on decisions with a nonce: every request here comes from 127.0.0.1.
printf '[limits]\nfresh_decisions_per_minute = 0\n' >"$work/unlimited.toml"
serve "$ferry" 18191 current "$work/unlimited.toml"
if [ -n "${BASELINE:-}" ]; then
  serve "$BASELINE" 18192 baseline
fi

body='"model":"demo-mlp","install_id":"bench","app_version":"1.0.0","runtime_version":"1.5.1","backends":["XnnpackBackend","VulkanBackend"],"platform":"android","os_version":"14","device_model":"Pixel 8","soc":"Tensor G3","ram_mb":8192'
cat >"$work/shared.lua" <<LUA
wrk.method = "POST"
wrk.headers["content-type"] = "application/json"
wrk.body = '{$body}'
LUA
# A fresh 16-byte nonce (base64url, 22 characters) per request.
cat >"$work/nonce.lua" <<LUA
local alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
math.randomseed(os.time())
request = function()
  local n = {}
  for i = 1, 21 do
    local k = math.random(1, 64)
    n[i] = alphabet:sub(k, k)
  end
  local k = math.random(1, 4) * 16 - 15
  n[22] = alphabet:sub(k, k)
  local body = '{$body,"nonce":"' .. table.concat(n) .. '"}'
  return wrk.format("POST", nil, {["content-type"] = "application/json"}, body)
end
LUA

rps() { # port script -> requests/s (fails on any non-2xx answer)
  local out
  out=$(wrk -t2 -c64 -d"${secs}s" --timeout 30s -s "$work/$2" "http://127.0.0.1:$1/v1/resolve")
  if grep -q "Non-2xx" <<<"$out"; then
    echo "bench: answers that were not 200 on port $1 ($2):" >&2
    echo "$out" >&2
    exit 1
  fi
  awk '/Requests\/sec/ {print $2}' <<<"$out"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
minmax() { sort -g | awk 'NR==1 {lo=$1} {hi=$1} END {printf "%.0f-%.0f", lo, hi}'; }

shared=() nonce=() base=()
for _ in $(seq "$rounds"); do
  shared+=("$(rps 18191 shared.lua)")
  nonce+=("$(rps 18191 nonce.lua)")
  if [ -n "${BASELINE:-}" ]; then
    base+=("$(rps 18192 shared.lua)")
  fi
done
s=$(printf '%s\n' "${shared[@]}" | median)
n=$(printf '%s\n' "${nonce[@]}" | median)
echo "resolve req/s at 64 connections, ${secs}s x $rounds rounds, $(nproc) cores (median, min-max)"
printf '%-44s %10.0f  (%s)\n' "shared answers" "$s" "$(printf '%s\n' "${shared[@]}" | minmax)"
printf '%-44s %10.0f  (%s)\n' "with a nonce (one signature each)" "$n" "$(printf '%s\n' "${nonce[@]}" | minmax)"
printf '%-44s %10.2f\n' "nonce / shared" "$(echo "$n / $s" | bc -l)"
if [ -n "${BASELINE:-}" ]; then
  b=$(printf '%s\n' "${base[@]}" | median)
  printf '%-44s %10.0f  (%s)\n' "shared answers, baseline binary" "$b" "$(printf '%s\n' "${base[@]}" | minmax)"
  printf '%-44s %10.2f\n' "shared: this / baseline" "$(echo "$s / $b" | bc -l)"
fi
