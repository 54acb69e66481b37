#!/usr/bin/env bash
# Resolve throughput of this checkout against another commit, measured in the same run: the
# two servers take turns (A B, then B A, ...) under the same wrk load, and each pair gives a
# ratio (this checkout / the other), so a machine that drifts in speed moves both sides of a
# pair alike. Prints the median ratio with its min and max, and each side's median req/s.
#
# The load: POST /v1/resolve for demo-mlp (`serve --demo`), a distinct install id per request
# (a counter), 64 connections, request logging at `warn` on both sides.
#
# Needs wrk (Debian; installed here if missing, as root). Loopback only. The other commit is
# checked out in target/ab/src-<rev> (a git worktree) and built in a target folder of its own
# (target/ab/target): cargo names a workspace's crates by their path inside the workspace, so
# two checkouts sharing one target folder would take each other's builds for fresh.
# Usage: bench/ab.sh REV [--runs N] [--secs S]     (defaults: 6 pairs of 5 s)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { echo "usage: bench/ab.sh REV [--runs N] [--secs S]" >&2; exit 2; }
rev=$(git -C "$root" rev-parse --short "$1")
shift
runs=6
secs=5
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --secs) secs=$2; shift 2 ;;
    *) echo "usage: bench/ab.sh REV [--runs N] [--secs S]" >&2; exit 2 ;;
  esac
done
command -v wrk >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; }

out="$root/target/ab"
mkdir -p "$out"
src="$out/src-$rev"
if [ ! -d "$src" ]; then
  git -C "$root" worktree add --detach "$src" "$rev" >/dev/null
fi
echo "building $rev and this checkout (release)..." >&2
cargo build --release -q -p ferry-server --manifest-path "$src/Cargo.toml" --target-dir "$out/target"
cp "$out/target/release/ferry" "$out/ferry-$rev"
cargo build --release -q -p ferry-server --manifest-path "$root/Cargo.toml"
cp "$root/target/release/ferry" "$out/ferry-head"

work=$(mktemp -d)
cleanup() {
  [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
port=18191
cat > "$work/post.lua" <<'LUA'
local n = 0
request = function()
  n = n + 1
  local body = '{"model":"demo-mlp","install_id":"ab-' .. n .. '","app_version":"1.0.0",' ..
    '"runtime_version":"1.5.1","backends":["XnnpackBackend","VulkanBackend"],' ..
    '"platform":"android","os_version":"14","device_model":"Pixel 8","soc":"Tensor G3",' ..
    '"ram_mb":8192}'
  return wrk.format("POST", "/v1/resolve", {["content-type"] = "application/json"}, body)
end
LUA

# Runs server binary $1 with a fresh demo store and prints its resolve req/s.
measure() {
  local data="$work/data-$RANDOM"
  FERRY_ADMIN_TOKEN=bench-admin-token-0123456789 FERRY_LOG=warn \
    "$1" serve --demo --data "$data" --listen 127.0.0.1:$port 2>"$work/server.log" &
  pid=$!
  for _ in $(seq 200); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.05; done
  local text
  text=$(wrk -t2 -c64 -d"${secs}s" --timeout 30s -s "$work/post.lua" "http://127.0.0.1:$port/v1/resolve")
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
  rm -rf "$data"
  if grep -q "Non-2xx" <<<"$text"; then
    echo "bench/ab.sh: $1 answered errors" >&2; echo "$text" >&2; exit 1
  fi
  awk '/Requests\/sec/ {print $2}' <<<"$text"
}

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
ratios=() heads=() others=()
for i in $(seq "$runs"); do
  if [ $((i % 2)) = 1 ]; then
    h=$(measure "$out/ferry-head"); o=$(measure "$out/ferry-$rev")
  else
    o=$(measure "$out/ferry-$rev"); h=$(measure "$out/ferry-head")
  fi
  heads+=("$h"); others+=("$o"); ratios+=("$(echo "$h / $o" | bc -l)")
  printf 'pair %d: this checkout %.0f req/s, %s %.0f req/s, ratio %.3f\n' "$i" "$h" "$rev" "$o" "${ratios[-1]}" >&2
done
r_med=$(printf '%s\n' "${ratios[@]}" | median)
r_min=$(printf '%s\n' "${ratios[@]}" | sort -g | head -1)
r_max=$(printf '%s\n' "${ratios[@]}" | sort -g | tail -1)
printf 'resolve req/s, this checkout / %s: median %.3f (min %.3f, max %.3f) over %d pairs of %ss; medians %.0f and %.0f req/s; %d cores\n' \
  "$rev" "$r_med" "$r_min" "$r_max" "$runs" "$secs" \
  "$(printf '%s\n' "${heads[@]}" | median)" "$(printf '%s\n' "${others[@]}" | median)" "$(nproc)"
