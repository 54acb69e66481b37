#!/usr/bin/env bash
# The telemetry journal's cost: events/s ingested with the journal (the default: every
# accepted batch is on disk before it is answered) against the same server answering from
# memory (another process holds the journal's lock, as when two servers share a data
# directory), in alternating pairs; prints each pair's ratio and the median, min and max.
# The goal (issue 47): the journal keeps >= 0.8x of the events/s without it.
#
# Needs wrk (Debian; installed here if missing, as root). Loopback only.
# Usage: bench/journal.sh [PAIRS] [SECONDS]   (defaults: 5 pairs of 10 s)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pairs=${1:-5}
secs=${2:-10}
command -v wrk >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; }
cargo build --release -q -p ferry-server --manifest-path "$root/Cargo.toml"
ferry="$root/target/release/ferry"
work=$(mktemp -d)
cleanup() {
  [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true
  [ -n "${holder:-}" ] && kill "$holder" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
port=18193
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
python3 "$root/bench/telemetry_batch.py" "$now" > "$work/batch.json"
printf 'wrk.method = "POST"\nwrk.headers["content-type"] = "application/json"\nwrk.body = [[%s]]\n' \
  "$(cat "$work/batch.json")" > "$work/telemetry.lua"
cat > "$work/ferry.toml" <<TOML
[telemetry]
per_install_per_minute = 100000000
per_address_per_minute = 100000000
flush_secs = 5
TOML

# Sets `rate` to the events/s of one fresh server; "memory" when another process holds the
# journal's lock.
run() {
  local data="$work/data-$1-$2"
  holder=
  if [ "$1" = memory ]; then
    mkdir -p "$data/journal"
    touch "$data/journal/lock"
    flock "$data/journal/lock" sleep 3600 &
    holder=$!
    sleep 0.2
  fi
  FERRY_LOG=warn "$ferry" serve --demo --config "$work/ferry.toml" --data "$data" \
    --listen 127.0.0.1:$port 2>"$work/ferry.log" &
  pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
  local rps
  rps=$(wrk -t1 -c16 -d"${secs}s" -s "$work/telemetry.lua" "http://127.0.0.1:$port/v1/telemetry" \
    | awk '/Requests\/sec/ {print $2}')
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
  if [ -n "$holder" ]; then
    kill "$holder" 2>/dev/null || true
    wait "$holder" 2>/dev/null || true
    holder=
  fi
  rm -rf "$data"
  rate=$(echo "$rps * 100" | bc -l)
}

echo "batches of 100 events, 16 connections, ${secs}s per run, $(nproc) cores"
ratios=()
for i in $(seq "$pairs"); do
  run journal "$i"
  j=$rate
  run memory "$i"
  m=$rate
  r=$(echo "$j / $m" | bc -l)
  ratios+=("$r")
  printf 'pair %d: journal %8.0f events/s, memory %8.0f events/s, ratio %.2f\n' "$i" "$j" "$m" "$r"
done
printf '%s\n' "${ratios[@]}" | sort -g | awk '{a[NR]=$1} END {
  m = (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2
  printf "journal / memory: median %.2f (min %.2f, max %.2f; goal >= 0.80)\n", m, a[1], a[NR]
}'
