#!/usr/bin/env bash
# Cold start and idle memory with a large catalogue: a store holding 1,000 published releases
# (one model, 1,000 versions, signed and published through the real CLI), on the local folder
# store and on the S3 emulator (moto, from tests/setup.sh). Each figure is the median (min,
# max) over RUNS starts, next to the same server started on a store with one release in the
# same run (the baseline). Start = from exec to the "listening" line (the catalog loaded and
# every signature checked); RSS read 2 s after that.
#
# Usage: bench/coldstart.sh [--runs N] [--releases N] [--json FILE]   (defaults 5, 1000)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=5
count=1000
json_out="$root/target/bench-coldstart.json"
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --releases) count=$2; shift 2 ;;
    --json) json_out=$2; shift 2 ;;
    *) echo "usage: bench/coldstart.sh [--runs N] [--releases N] [--json FILE]" >&2; exit 2 ;;
  esac
done
bash "$root/tests/setup.sh" >/dev/null
echo "building (release)..." >&2
cargo build --release -q -p ferry-server --manifest-path "$root/Cargo.toml"
ferry="$root/target/release/ferry"
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
token=coldstart-admin-token-0123456789
port=18391

# Starts a server on DATA (extra env in $2...), waits for its "listening" line; prints the pid.
start() {
  local data=$1 log=$2
  shift 2
  env FERRY_ADMIN_TOKEN=$token FERRY_LOG=warn "$@" "$ferry" serve --data "$data" \
    --listen 127.0.0.1:$port >/dev/null 2>"$log" &
  echo $!
}
wait_listening() {
  local log=$1
  for _ in $(seq 6000); do
    grep -q "listening on" "$log" 2>/dev/null && return 0
    sleep 0.005
  done
  echo "bench: the server did not start:" >&2
  cat "$log" >&2
  exit 1
}

# Fills DATA's store (env in "$@") with $count releases of model "bulk".
fill() {
  local data=$1
  shift
  local pid
  pid=$(start "$data" "$work/fill.log" "$@")
  pids+=("$pid")
  wait_listening "$work/fill.log"
  mkdir -p "$work/rel"
  cp "$root/server/demo/mlp-v1-xnnpack.pte" "$work/rel/"
  echo "signing and publishing $count releases..." >&2
  for i in $(seq "$count"); do
    cat > "$work/rel/VARIANTS.toml" <<TOML
model = "bulk"
version = "1.0.$i"

[[variant]]
id = "xnnpack-fp32"
file = "mlp-v1-xnnpack.pte"
delegate = "xnnpack"
quant = "fp32"
runtime = ">=1.0.0"
app = "*"
TOML
    "$ferry" sign "$work/rel/VARIANTS.toml" --key "$data/keys/release.key" -o "$work/rel/r.json" >/dev/null
    FERRY_TOKEN=$token "$ferry" publish "$work/rel/r.json" --files "$work/rel" \
      --server "http://127.0.0.1:$port" --quiet >/dev/null
  done
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
}

# Prints "start_ms rss_mb" for one start of a server on DATA (env in "$@").
one_start() {
  local data=$1
  shift
  local t0 t1 pid rss
  t0=$(date +%s%N)
  pid=$(start "$data" "$work/start.log" "$@")
  wait_listening "$work/start.log"
  t1=$(date +%s%N)
  sleep 2
  rss=$(awk '/VmRSS/ {print $2 / 1024}' "/proc/$pid/status")
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
  echo "$(((t1 - t0) / 1000000)) $rss"
}

raw="$work/raw.txt"
: > "$raw"
keys() { # a data folder with provisioned keys
  "$ferry" keys generate --out "$1/keys" >/dev/null
}

# Local folder store.
keys "$work/big"
fill "$work/big"
keys "$work/small"
count_saved=$count
count=1
fill "$work/small"
count=$count_saved

# S3 emulator (moto).
moto_port=18392
"$root/.deps/moto/bin/python" -c "import sys
from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
run_simple('127.0.0.1', int(sys.argv[1]), DomainDispatcherApplication(create_backend_app), threaded=False, use_reloader=False)" \
  "$moto_port" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$moto_port/" >/dev/null 2>&1 && break; sleep 0.1; done
curl -sf -X PUT "http://127.0.0.1:$moto_port/big" >/dev/null
curl -sf -X PUT "http://127.0.0.1:$moto_port/small" >/dev/null
s3() { echo FERRY_STORAGE=s3 FERRY_S3_BUCKET="$1" FERRY_S3_ENDPOINT="http://127.0.0.1:$moto_port" \
  FERRY_S3_ALLOW_HTTP=1 FERRY_S3_ACCESS_KEY_ID=test FERRY_S3_SECRET_ACCESS_KEY=test; }
keys "$work/s3big"
# shellcheck disable=SC2046
fill "$work/s3big" $(s3 big)
keys "$work/s3small"
count=1
# shellcheck disable=SC2046
fill "$work/s3small" $(s3 small)
count=$count_saved

for r in $(seq "$runs"); do
  echo "run $r/$runs" >&2
  read -r big_ms big_rss <<<"$(one_start "$work/big")"
  read -r small_ms small_rss <<<"$(one_start "$work/small")"
  echo "local_start_ms $big_ms $small_ms" >>"$raw"
  echo "local_rss_mb $big_rss $small_rss" >>"$raw"
  # shellcheck disable=SC2046
  read -r big_ms big_rss <<<"$(one_start "$work/s3big" $(s3 big))"
  # shellcheck disable=SC2046
  read -r small_ms small_rss <<<"$(one_start "$work/s3small" $(s3 small))"
  echo "s3_start_ms $big_ms $small_ms" >>"$raw"
  echo "s3_rss_mb $big_rss $small_rss" >>"$raw"
done

mkdir -p "$(dirname "$json_out")"
python3 - "$raw" "$json_out" "$count" <<'PY'
import json, statistics, sys
raw, out, count = sys.argv[1:]
rows = {}
for line in open(raw):
    name, a, b = line.split()
    rows.setdefault(name, []).append((float(a), float(b)))
labels = {
    "local_start_ms": (f"cold start, {count} releases, folder store (ms)", "<= 1000 ms"),
    "s3_start_ms": (f"cold start, {count} releases, S3 emulator (ms)", "<= 1000 ms"),
    "local_rss_mb": (f"idle RSS, {count} releases, folder store (MB)", "<= 64 MB"),
    "s3_rss_mb": (f"idle RSS, {count} releases, S3 emulator (MB)", "<= 64 MB"),
}
result = {"releases": int(count), "scenarios": {}}
print(f"{'scenario':<50} {'median':>8} {'min':>8} {'max':>8} {'1 release':>10}  target")
for name, (label, target) in labels.items():
    pairs = rows[name]
    big = [a for a, _ in pairs]
    small = [b for _, b in pairs]
    limit = 1000 if name.endswith("_ms") else 64
    med = statistics.median(big)
    result["scenarios"][name] = {"label": label, "target": target, "runs": [{"value": a, "baseline_one_release": b} for a, b in pairs],
                                 "median": med, "min": min(big), "max": max(big), "baseline_median": statistics.median(small),
                                 "met": med <= limit}
    print(f"{label:<50} {med:8.0f} {min(big):8.0f} {max(big):8.0f} {statistics.median(small):10.0f}  {target} {'ok' if med <= limit else 'MISSED'}")
json.dump(result, open(out, "w"), indent=2)
print(f"raw figures: {out}")
PY
