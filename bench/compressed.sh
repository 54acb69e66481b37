#!/usr/bin/env bash
# First installs with and without the ferry-grouped-zstd encoding: the 50 MiB FP32 XNNPACK program
# (bench/big_model.sh), published with `ferry publish` (which stores its encoding), downloaded by
# the `prefetch` example into a fresh cache, alternately with the encoding and without it
# (`--no-compress`), over loopback and over a link throttled to RATE bytes a second by
# bench/throttle.py. Prints, per link, the bytes the server sent per download and the time to
# verified files (median, min, max over RUNS pairs) and the encoded/plain ratios.
#
# Usage: bench/compressed.sh [--runs N] [--rate BYTES] [--file PATH]
#   (defaults: 5 pairs, 32 MiB/s, the 50 MiB program)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=5
rate=$((32 << 20))
file=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --file) file=$2; shift 2 ;;
    *) echo "usage: bench/compressed.sh [--runs N] [--rate BYTES] [--file PATH]" >&2; exit 2 ;;
  esac
done
[ -n "$file" ] || file=$("$root/bench/big_model.sh")
echo "building (release)..." >&2
cargo build --release -q -p ferry-server --manifest-path "$root/Cargo.toml"
cargo build --release -q -p ferry-client --example prefetch --manifest-path "$root/Cargo.toml"
bin="$root/target/release"
token=bench-admin-token-0123456789
BENCH_NAME=compressed
# shellcheck source=bench/common.sh
. "$root/bench/common.sh"

start_origin
mkdir -p "$work/model"
ln -s "$file" "$work/model/model.pte"
cat >"$work/model/VARIANTS.toml" <<TOML
model = "packed"
version = "1.0.0"

[[variant]]
id = "xnnpack-fp32"
file = "model.pte"
delegate = "xnnpack"
quant = "fp32"
runtime = ">=1.0.0"
app = "*"
TOML
"$bin/ferry" sign "$work/model/VARIANTS.toml" --key "$work/origin/keys/release.key" \
  -o "$work/packed.json" >/dev/null
start=$(date +%s%N)
FERRY_TOKEN=$token "$bin/ferry" publish "$work/packed.json" --files "$work/model" \
  --server "$origin" --quiet --json >"$work/publish.json"
echo "ferry publish (upload, compress, upload the encoding): $(( ($(date +%s%N) - start) / 1000000 )) ms" >&2
python3 - "$work/publish.json" <<'PY'
import json, sys
for b in json.load(open(sys.argv[1]))["blobs"]:
    c = b.get("compressed") or {}
    print(f"file {b['size']} bytes, ferry-grouped-zstd {c.get('size')} bytes "
          f"({100 * (1 - c['size'] / b['size']):.1f}% smaller)" if c.get("encoding") else
          f"file {b['size']} bytes, not compressed")
PY

uplink_port=$(free_port)
# No burst reserve: the download that runs first after a pause would otherwise get a second of
# the rate for free.
python3 "$root/bench/throttle.py" "$uplink_port" "$port" "$rate" 0.01 2>"$work/throttle.log" &
pids+=($!)
wait_ready "http://127.0.0.1:$uplink_port" "$work/throttle.log"

one() { # $1: server URL, $2: extra flag -> "bytes ms"
  local cache="$work/cache" b0 t0
  rm -rf "$cache"
  b0=$(served "$origin" "$token")
  t0=$(date +%s%N)
  # shellcheck disable=SC2086
  "$bin/examples/prefetch" --server "$1" --model packed --trust "$work/origin/keys/trust.json" \
    --cache "$cache" $2 >/dev/null
  echo "$(( $(served "$origin" "$token") - b0 )) $(( ($(date +%s%N) - t0) / 1000000 ))"
}
for link in loopback throttled; do
  url=$origin
  [ "$link" = throttled ] && url="http://127.0.0.1:$uplink_port"
  : >"$work/$link.txt"
  for _ in $(seq "$runs"); do
    echo "plain $(one "$url" --no-compress) encoded $(one "$url" "")" >>"$work/$link.txt"
  done
  python3 - "$link" "$rate" "$work/$link.txt" <<'PY'
import statistics, sys
link, rate, rows = sys.argv[1], int(sys.argv[2]), [l.split() for l in open(sys.argv[3])]
pb, pt = [int(r[1]) for r in rows], [int(r[2]) for r in rows]
eb, et = [int(r[4]) for r in rows], [int(r[5]) for r in rows]
ratios = [e / p for e, p in zip(et, pt)]
name = link if link == "loopback" else f"{link} ({rate / 2**20:.0f} MiB/s)"
print(f"{name}: plain {statistics.median(pb)} bytes, {statistics.median(pt):.0f} ms "
      f"({min(pt)}-{max(pt)}); encoded {statistics.median(eb)} bytes, "
      f"{statistics.median(et):.0f} ms ({min(et)}-{max(et)}); "
      f"time encoded/plain {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}), "
      f"bytes {statistics.median(eb) / statistics.median(pb):.3f}")
PY
done
