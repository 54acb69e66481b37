#!/usr/bin/env bash
# A site behind a thin uplink: N simulated devices (each a `prefetch` process with a cache of its
# own: resolve, download, verify) fetch a release with a MiB-sized asset, once straight from the
# origin and once through a site mirror (`ferry serve --mirror-of`), the uplink throttled in both
# cases to RATE bytes a second in total by bench/throttle.py (one shared token bucket: a site's
# link, not a per-connection cap). Prints the bytes the origin sent and each device's time to its
# verified files (median, p95, max) for both, and their ratio.
#
# Usage: bench/mirror.sh [--devices N] [--concurrency C] [--mib M] [--rate BYTES]
#   (defaults: 100 devices, 20 at a time, a 10 MiB asset, 8 MiB/s uplink)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
devices=100
concurrency=20
mib=10
rate=$((8 << 20))
while [ $# -gt 0 ]; do
  case "$1" in
    --devices) devices=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --mib) mib=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    *) echo "usage: bench/mirror.sh [--devices N] [--concurrency C] [--mib M] [--rate BYTES]" >&2; exit 2 ;;
  esac
done
echo "building (release)..." >&2
cargo build --release -q -p ferry-server --manifest-path "$root/Cargo.toml"
cargo build --release -q -p ferry-client --example prefetch --manifest-path "$root/Cargo.toml"
bin="$root/target/release"
token=bench-admin-token-0123456789
BENCH_NAME=mirror
# shellcheck source=bench/common.sh
. "$root/bench/common.sh"

# The origin, with the model: the portable MLP and an incompressible asset.
start_origin
mkdir -p "$work/model"
cp "$root/tests/fixtures/pte/mlp-v1-portable.pte" "$work/model/model.pte"
head -c "$((mib << 20))" /dev/urandom >"$work/model/weights.bin"
cat >"$work/model/VARIANTS.toml" <<TOML
model = "site"
version = "1.0.0"

[[variant]]
id = "portable-fp32"
file = "model.pte"
assets = ["weights.bin"]
delegate = "portable"
quant = "fp32"
runtime = ">=1.0.0"
app = "*"
TOML
"$bin/ferry" sign "$work/model/VARIANTS.toml" --key "$work/origin/keys/release.key" \
  -o "$work/site.json" >/dev/null
FERRY_TOKEN=$token "$bin/ferry" publish "$work/site.json" --files "$work/model" \
  --server "$origin" >/dev/null

# The uplink: every byte between the site and the origin goes through one token bucket.
uplink_port=$(free_port)
python3 "$root/bench/throttle.py" "$uplink_port" "$port" "$rate" 2>"$work/throttle.log" &
pids+=($!)
uplink="http://127.0.0.1:$uplink_port"
wait_ready "$uplink" "$work/throttle.log"

# The site mirror, on the site's side of the uplink.
mport=$(free_port)
mirror="http://127.0.0.1:$mport"
FERRY_ADMIN_TOKEN=$token FERRY_LOG=warn "$bin/ferry" serve --mirror-of "$uplink" \
  --trust "$work/origin/keys/trust.json" --data "$work/mirror" --listen "127.0.0.1:$mport" \
  2>"$work/mirror.log" &
pids+=($!)
wait_ready "$mirror" "$work/mirror.log"

fleet() { # $1: server URL the devices use, $2: label -> prints one time (ms) per device
  local i
  rm -rf "$work/devices-$2"
  mkdir -p "$work/devices-$2"
  for i in $(seq "$devices"); do echo "$i"; done |
    xargs -P "$concurrency" -I{} sh -c '
      start=$(date +%s%N)
      "$0" --server "$1" --model site --trust "$2" --cache "$3/{}" >/dev/null 2>"$3/{}.err" || exit 1
      echo $(( ($(date +%s%N) - start) / 1000000 ))
    ' "$bin/examples/prefetch" "$1" "$work/origin/keys/trust.json" "$work/devices-$2"
}
summary() { # $1: label, $2: bytes from the origin, then times
  python3 - "$@" <<'PY'
import statistics, sys
label, origin_bytes, times = sys.argv[1], int(sys.argv[2]), sorted(int(t) for t in sys.argv[3:])
p95 = times[max(0, int(round(0.95 * len(times))) - 1)]
print(f"{label:>10}: {len(times)} devices, origin sent {origin_bytes / 2**20:8.1f} MiB, "
      f"time to files median {statistics.median(times):7.0f} ms, p95 {p95:7.0f} ms, "
      f"max {times[-1]:7.0f} ms")
print(f"RESULT {label} {origin_bytes} {statistics.median(times)} {p95} {times[-1]}")
PY
}
echo "$devices devices, $concurrency at a time, a $mib MiB asset, uplink $((rate >> 20)) MiB/s" >&2
b0=$(served "$origin" "$token")
direct=$(fleet "$uplink" direct)
b1=$(served "$origin" "$token")
site=$(fleet "$mirror" mirror)
b2=$(served "$origin" "$token")
# shellcheck disable=SC2086
summary direct $((b1 - b0)) $direct | tee "$work/direct.txt"
# shellcheck disable=SC2086
summary mirror $((b2 - b1)) $site | tee "$work/mirror.txt"
python3 - "$work/direct.txt" "$work/mirror.txt" <<'PY'
import sys
d = open(sys.argv[1]).read().split("RESULT")[1].split()
m = open(sys.argv[2]).read().split("RESULT")[1].split()
print(f"mirror / direct: origin bytes {int(m[1]) / max(1, int(d[1])):.3f}, "
      f"p95 time {float(m[3]) / float(d[3]):.3f}, median time {float(m[2]) / float(d[2]):.3f}")
PY
