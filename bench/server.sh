#!/usr/bin/env bash
# Server benchmark: resolve requests/s and p99 at 64 connections, and blob MB/s, each printed
# as a ratio to nginx serving a static file of the same size, measured in the same run (the
# machines are noisy; only same-run ratios mean anything).
#
# Needs nginx and wrk (Debian packages; installed here if missing, as root). Loopback only.
# Usage: bench/server.sh [SECONDS]   (default 10 per measurement)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-10}
need=()
command -v wrk >/dev/null || need+=(wrk)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)

cargo build --release -q -p ferry-server --manifest-path "$root/Cargo.toml"
ferry="$root/target/release/ferry"
work=$(mktemp -d)
chmod 755 "$work" # nginx workers run as another user
cleanup() {
  [ -n "${ferry_pid:-}" ] && kill "$ferry_pid" 2>/dev/null || true
  [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

fport=18181
nport=18182
token=bench-admin-token-0123456789
FERRY_ADMIN_TOKEN=$token FERRY_LOG=warn "$ferry" serve --demo --data "$work/data" --listen 127.0.0.1:$fport 2>"$work/ferry.log" &
ferry_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$fport/healthz" >/dev/null && break; sleep 0.1; done

body='{"model":"demo-mlp","install_id":"bench","app_version":"1.0.0","runtime_version":"1.5.1","backends":["XnnpackBackend","VulkanBackend"],"platform":"android","os_version":"14","device_model":"Pixel 8","soc":"Tensor G3","ram_mb":8192}'
mkdir -p "$work/www"
curl -sf "http://127.0.0.1:$fport/v1/resolve" -H 'content-type: application/json' -d "$body" > "$work/www/resolve.json"
# A 64 MiB blob for throughput.
head -c $((64 << 20)) /dev/urandom > "$work/www/blob.bin"
digest=$(sha256sum "$work/www/blob.bin" | cut -d' ' -f1)
curl -sf -X PUT "http://127.0.0.1:$fport/v1/admin/blobs/sha256/$digest" -H "authorization: Bearer $token" \
  --data-binary @"$work/www/blob.bin" >/dev/null

cat > "$work/nginx.conf" <<NGX
worker_processes 2;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$nport;
    root $work/www;
    default_type application/octet-stream;
  }
}
NGX
"$nginx_bin" -c "$work/nginx.conf" -p "$work"
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$nport/resolve.json" >/dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$nport/resolve.json" >/dev/null || { echo "bench: nginx does not serve the static files" >&2; exit 1; }

cat > "$work/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["content-type"] = "application/json"
wrk.body = '$body'
LUA

measure() { # url extra-args... -> prints "rps p99_ms mb_per_s"
  local out
  out=$(wrk -t2 -c"$2" -d"${secs}s" --timeout 30s --latency "${@:3}" "$1")
  if grep -q "Non-2xx" <<<"$out"; then
    echo "bench: $1 answered errors; is the server healthy?" >&2
    echo "$out" >&2
    exit 1
  fi
  local rps p99 tr
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v=v/1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v=v*1000}; print v}' <<<"$out")
  tr=$(awk '/Transfer\/sec/ {v=$2; if (v ~ /GB$/) {sub(/GB/,"",v); v=v*1024} else if (v ~ /MB$/) {sub(/MB/,"",v)} else if (v ~ /KB$/) {sub(/KB/,"",v); v=v/1024}; print v}' <<<"$out")
  echo "$rps $p99 $tr"
}

echo "resolve response: $(stat -c %s "$work/www/resolve.json") bytes; blob: 64 MiB; ${secs}s per run; $(nproc) cores"
read -r f_rps f_p99 _ <<<"$(measure "http://127.0.0.1:$fport/v1/resolve" 64 -s "$work/post.lua")"
read -r n_rps n_p99 _ <<<"$(measure "http://127.0.0.1:$nport/resolve.json" 64)"
read -r _ _ f_mb <<<"$(measure "http://127.0.0.1:$fport/v1/blobs/sha256/$digest" 4)"
read -r _ _ n_mb <<<"$(measure "http://127.0.0.1:$nport/blob.bin" 4)"
printf '%-34s %12s %12s %8s\n' "" ferry nginx ratio
printf '%-34s %12.0f %12.0f %8.2f\n' "resolve req/s (64 conns)" "$f_rps" "$n_rps" "$(echo "$f_rps / $n_rps" | bc -l)"
printf '%-34s %12.2f %12.2f %8.2f\n' "resolve p99 ms (64 conns)" "$f_p99" "$n_p99" "$(echo "$f_p99 / $n_p99" | bc -l)"
printf '%-34s %12.0f %12.0f %8.2f\n' "blob MB/s (64 MiB, 4 conns)" "$f_mb" "$n_mb" "$(echo "$f_mb / $n_mb" | bc -l)"
