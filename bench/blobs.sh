#!/usr/bin/env bash
# Serving blobs (issue 25): ferry's GET /v1/blobs against nginx (sendfile) serving the same
# file, in the same run, in turns, RUNS times; each row is the median ratio of ferry's MB/s to
# nginx's, with min and max (the machines are noisy; only same-run ratios mean anything).
#
#   whole   the 64 MiB blob, 4 connections
#   tail    its last 10 MiB by Range, 4 connections
#   chunks  2 MiB ranges at offsets that move on every request (what delta updates ask for),
#           4 connections
#
# Needs nginx and wrk (Debian packages; installed here if missing, as root). Loopback only.
# Usage: bench/blobs.sh [--runs N] [--secs S]   (defaults: 5 runs of 5 s); FERRY_BIN=PATH
# measures that ferry binary instead of building this tree's.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=5
secs=5
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --secs) secs=$2; shift 2 ;;
    *) echo "usage: bench/blobs.sh [--runs N] [--secs S]" >&2; exit 2 ;;
  esac
done
need=()
command -v wrk >/dev/null || need+=(wrk)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
if [ -n "${FERRY_BIN:-}" ]; then
  ferry=$FERRY_BIN # another build to compare (FERRY_BIN=/path/to/ferry bench/blobs.sh)
else
  cargo build --release -q -p ferry-server --manifest-path "$root/Cargo.toml"
  ferry="$root/target/release/ferry"
fi
work=$(mktemp -d)
chmod 755 "$work" # nginx workers run as another user
cleanup() {
  [ -n "${ferry_pid:-}" ] && kill "$ferry_pid" 2>/dev/null || true
  [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
fport=$(port)
nport=$(port)
token=bench-admin-token-0123456789
FERRY_ADMIN_TOKEN=$token FERRY_LOG=warn "$ferry" serve --demo --data "$work/data" \
  --listen 127.0.0.1:"$fport" 2>"$work/ferry.log" &
ferry_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$fport/healthz" >/dev/null && break; sleep 0.1; done
mkdir -p "$work/www"
head -c $((64 << 20)) /dev/urandom >"$work/www/blob.bin"
digest=$(sha256sum "$work/www/blob.bin" | cut -d' ' -f1)
curl -sf -X PUT "http://127.0.0.1:$fport/v1/admin/blobs/sha256/$digest" \
  -H "authorization: Bearer $token" --data-binary @"$work/www/blob.bin" >/dev/null
cat >"$work/nginx.conf" <<NGX
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
for _ in $(seq 50); do curl -sf -o /dev/null "http://127.0.0.1:$nport/blob.bin" && break; sleep 0.1; done
cat >"$work/tail.lua" <<'LUA'
wrk.headers["Range"] = "bytes=56623104-67108863"
LUA
cat >"$work/chunks.lua" <<'LUA'
local n = 0
request = function()
  -- 2 MiB ranges whose offsets move by an odd number of KiB, wrapping inside the 64 MiB.
  n = n + 1
  local start = (n * 1234567) % (62 * 1048576)
  return wrk.format(nil, nil, {["Range"] = "bytes=" .. start .. "-" .. (start + 2097151)})
end
LUA
mbps() { # url [wrk args...] -> MB/s
  local out
  out=$(wrk -t2 -c4 -d"${secs}s" --timeout 30s "$@")
  if grep -q "Non-2xx" <<<"$out"; then
    echo "bench: $1 answered errors" >&2
    echo "$out" >&2
    exit 1
  fi
  awk '/Transfer\/sec/ {v=$2; if (v ~ /GB$/) {sub(/GB/,"",v); v=v*1024} else if (v ~ /MB$/) {sub(/MB/,"",v)} else if (v ~ /KB$/) {sub(/KB/,"",v); v=v/1024}; print v}' <<<"$out"
}
raw="$work/raw.txt"
: >"$raw"
echo "64 MiB blob; $runs runs of ${secs}s per measurement; $(nproc) cores" >&2
for r in $(seq "$runs"); do
  echo "run $r/$runs" >&2
  for s in whole tail chunks; do
    args=()
    [ "$s" != whole ] && args=(-s "$work/$s.lua")
    f=$(mbps "http://127.0.0.1:$fport/v1/blobs/sha256/$digest" "${args[@]}")
    n=$(mbps "http://127.0.0.1:$nport/blob.bin" "${args[@]}")
    echo "$s $f $n" >>"$raw"
  done
done
python3 - "$raw" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, a, b = line.split()
    rows.setdefault(name, []).append((float(a), float(b)))
labels = {"whole": "whole 64 MiB blob", "tail": "last 10 MiB by Range", "chunks": "2 MiB ranges, moving offsets"}
print(f"{'ferry MB/s / nginx MB/s':<34} {'median':>7} {'min':>7} {'max':>7}   ferry MB/s  nginx MB/s (medians)  target >= 1.0")
for name, pairs in rows.items():
    r = [a / b for a, b in pairs]
    print(f"{labels[name]:<34} {statistics.median(r):7.2f} {min(r):7.2f} {max(r):7.2f}   "
          f"{statistics.median(a for a, _ in pairs):10.0f}  {statistics.median(b for _, b in pairs):10.0f}")
PY
