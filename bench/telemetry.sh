#!/usr/bin/env bash
# Telemetry ingestion benchmark: events/s and server RSS while ingesting, printed with the
# resolve rate measured in the same run, alone and while ingestion runs (ingestion must not
# slow resolve much; the ratio says how much it does).
#
# Needs wrk (Debian; installed here if missing, as root). Loopback only.
# Usage: bench/telemetry.sh [SECONDS]   (default 10 per measurement)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-10}
command -v wrk >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; }
cargo build --release -q -p ferry-server --manifest-path "$root/Cargo.toml"
ferry="$root/target/release/ferry"
work=$(mktemp -d)
cleanup() { [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
port=18191
cat > "$work/ferry.toml" <<TOML
[telemetry]
per_install_per_minute = 100000000
per_address_per_minute = 100000000
flush_secs = 5
TOML
FERRY_LOG=warn "$ferry" serve --demo --config "$work/ferry.toml" --data "$work/data" --listen 127.0.0.1:$port 2>"$work/ferry.log" &
pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done

now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
python3 "$root/bench/telemetry_batch.py" "$now" > "$work/batch.json"
body=$(cat "$work/batch.json")
cat > "$work/telemetry.lua" <<LUA
wrk.method = "POST"
wrk.headers["content-type"] = "application/json"
wrk.body = [[$body]]
LUA
resolve='{"model":"demo-mlp","install_id":"bench","app_version":"1.0.0","runtime_version":"1.5.1","backends":["XnnpackBackend","VulkanBackend"],"platform":"android","os_version":"14","device_model":"Pixel 8","soc":"Tensor G3","ram_mb":8192}'
cat > "$work/resolve.lua" <<LUA
wrk.method = "POST"
wrk.headers["content-type"] = "application/json"
wrk.body = '$resolve'
LUA
rps() { awk '/Requests\/sec/ {print $2}'; }
rss() { awk '/VmRSS/ {print $2}' "/proc/$pid/status"; }

rss_start=$(rss)
r_alone=$(wrk -t1 -c32 -d"${secs}s" -s "$work/resolve.lua" "http://127.0.0.1:$port/v1/resolve" | rps)
peak=0
( while kill -0 "$pid" 2>/dev/null; do r=$(rss); [ "$r" -gt "$peak" ] && peak=$r && echo "$peak" > "$work/peak"; sleep 0.2; done ) &
sampler=$!
t_alone=$(wrk -t1 -c16 -d"${secs}s" -s "$work/telemetry.lua" "http://127.0.0.1:$port/v1/telemetry" | rps)
wrk -t1 -c16 -d"${secs}s" -s "$work/telemetry.lua" "http://127.0.0.1:$port/v1/telemetry" > "$work/t_both" &
r_both=$(wrk -t1 -c32 -d"${secs}s" -s "$work/resolve.lua" "http://127.0.0.1:$port/v1/resolve" | rps)
wait %3 2>/dev/null || sleep 1
t_both=$(rps < "$work/t_both")
kill "$sampler" 2>/dev/null || true
rss_peak=$(cat "$work/peak" 2>/dev/null || echo 0)
rss_end=$(rss)
events=$(curl -sf -H "authorization: Bearer $(cat "$work/data/admin-token")" "http://127.0.0.1:$port/metrics" | awk -F' ' '/ferry_telemetry_events_total\{outcome="accepted"\}/ {print $2}')

echo "batches of 100 events; ${secs}s per run; $(nproc) cores"
printf '%-44s %12.0f\n' "resolve req/s alone (32 conns)" "$r_alone"
printf '%-44s %12.0f\n' "telemetry events/s alone (16 conns)" "$(echo "$t_alone * 100" | bc -l)"
printf '%-44s %12.0f\n' "resolve req/s while ingesting" "$r_both"
printf '%-44s %12.0f\n' "telemetry events/s while resolving" "$(echo "$t_both * 100" | bc -l)"
printf '%-44s %12.2f\n' "resolve rate ratio (ingesting / alone)" "$(echo "$r_both / $r_alone" | bc -l)"
printf '%-44s %9d KiB -> peak %d KiB -> %d KiB\n' "server RSS start -> peak -> end" "$rss_start" "$rss_peak" "$rss_end"
printf '%-44s %12s\n' "events accepted in total" "$events"
