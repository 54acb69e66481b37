#!/usr/bin/env bash
# Large models and delta updates (issue 25), on real programs with .ptd weights exported by the
# real exporter (bench/delta_model.py; made once under target/bench-models, not committed).
#
# Part 1, ratios over RUNS runs (median, min, max), a device that holds release `base` in its
# cache (each run starts from a copy of that cache) downloading:
#   finetune   base with 5% of the weight bytes rewritten in one region: bytes sent / size
#   reexport   a changed program with byte-identical weights: bytes sent / size
#   unrelated  another model of the same size: bytes sent / size, and the wall time of the
#              client with delta updates against the same client with them off (--no-delta),
#              run in turns A B A B
# Bytes sent are the server's own count (ferry_blob_bytes_served in /metrics), not the client's.
#
# Part 2, one BIG_MIB variant (2 GiB by default) on a fresh server: server resident memory
# before and at its peak over the publish, the client's download into an empty cache (resident
# memory growth, throughput against `curl -o` of the same blob), a download killed with SIGKILL
# half way and started again (bytes sent beyond the file), and the load into the real
# ExecuTorch runtime (time, load mode, peak memory).
#
# Usage: bench/delta.sh [--runs N] [--mib MIB] [--big-mib MIB] [--no-big]
#   defaults: 5 runs, part 1 on 256 MiB of weights, part 2 on 2048 MiB.
# Needs the exporter's virtualenv (about 6 GB, made on first use) and about 5x BIG_MIB of disk.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=5
mib=256
big_mib=2048
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --mib) mib=$2; shift 2 ;;
    --big-mib) big_mib=$2; shift 2 ;;
    --no-big) big_mib=0; shift ;;
    *) echo "usage: bench/delta.sh [--runs N] [--mib MIB] [--big-mib MIB] [--no-big]" >&2; exit 2 ;;
  esac
done

venv="$root/.venv-export"
if ! "$venv/bin/python" -c 'import executorch, torch' 2>/dev/null; then
  echo "installing the exporter (about 6 GB, once)..." >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet executorch==1.5.1 torch==2.14.0 torchvision==0.29.0 torchao==0.18.0
fi
models() { # $1: MiB of weights; $2...: which releases -> prints the folder
  local out="$root/target/bench-models/delta-$1"
  local m missing=()
  for m in "${@:2}"; do [ -s "$out/$m/model.ptd" ] || missing+=("$m"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "exporting $1 MiB models (${missing[*]})..." >&2
    "$venv/bin/python" "$root/bench/delta_model.py" "$out" "$1" "${missing[@]}" >&2
  fi
  echo "$out"
}

echo "building (release)..." >&2
bash "$root/scripts/setup-executorch.sh" >/dev/null
cargo build --release -q -p ferry-server --manifest-path "$root/Cargo.toml"
cargo build --release -q -p ferry-client --example prefetch --manifest-path "$root/Cargo.toml"
cargo build --release -q -p ferry-client --features executorch --example fetch \
  --manifest-path "$root/Cargo.toml"
bin="$root/target/release"
token=bench-admin-token-0123456789
work=$(mktemp -d "$root/target/bench-delta.XXXXXX")
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
start_server() { # $1: data folder -> sets url, server_pid
  local port
  port=$(free_port)
  FERRY_ADMIN_TOKEN=$token FERRY_LOG=warn "$bin/ferry" serve --demo --data "$1" \
    --listen "127.0.0.1:$port" 2>"$1.log" &
  server_pid=$!
  url="http://127.0.0.1:$port"
  for _ in $(seq 300); do curl -sf "$url/readyz" >/dev/null && return; sleep 0.1; done
  echo "the server did not start: $(cat "$1.log")" >&2
  exit 1
}
stop_server() {
  kill "$server_pid" && wait "$server_pid" 2>/dev/null || true
  server_pid=
}
publish() { # $1: data folder, $2: model name, $3: folder with model.pte and model.ptd
  cat >"$3/VARIANTS.toml" <<TOML
model = "$2"
version = "1.0.0"

[[variant]]
id = "portable-fp32"
file = "model.pte"
data = ["model.ptd"]
delegate = "portable"
quant = "fp32"
runtime = ">=1.0.0"
app = "*"
TOML
  local t0
  t0=$(now_us)
  # Its peak resident memory from the kernel's accounting of the finished child.
  sign_kb=$(python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' \
    "$bin/ferry" sign "$3/VARIANTS.toml" --key "$1/keys/release.key" -o "$work/$2.json")
  sign_us=$(($(now_us) - t0))
  FERRY_TOKEN=$token "$bin/ferry" publish "$work/$2.json" --files "$3" --server "$url" \
    >"$work/publish.log" 2>&1 || { cat "$work/publish.log" >&2; exit 1; }
}
served() { # the server's count (a Prometheus counter: its name ends in _total)
  curl -sf -H "authorization: Bearer $token" "$url/metrics" | awk '$1 == "ferry_blob_bytes_served_total" {printf "%.0f\n", $2}'
}
size_of() { echo $(($(stat -c %s "$1/model.pte") + $(stat -c %s "$1/model.ptd"))); }
prefetch() { # $1: cache, $2: model, [$3: --no-delta] -> the example's JSON
  "$bin/examples/prefetch" --server "$url" --model "$2" --trust "$data/keys/trust.json" \
    --cache "$1" ${3:+"$3"}
}
now_us() { echo $(($(date +%s%N) / 1000)); }
fresh_copy() { # a copy of the seeded cache, written out, so no writeback runs during a download
  rm -rf "$work/c" && cp -a "$work/seed" "$work/c" && sync
}

raw="$work/raw.txt"
: >"$raw"

# Part 1.
dir=$(models "$mib" base finetune reexport unrelated)
data="$work/data1"
start_server "$data"
for m in base finetune reexport unrelated; do publish "$data" "delta-$m" "$dir/$m"; done
prefetch "$work/seed" delta-base >/dev/null
cmp -s "$dir/base/model.ptd" "$dir/reexport/model.ptd" \
  || echo "note: the re-export's .ptd differs from base's" >&2
echo "part 1: $mib MiB of weights, $runs runs" >&2
for r in $(seq "$runs"); do
  echo "run $r/$runs" >&2
  for m in finetune reexport; do
    fresh_copy
    before=$(served)
    prefetch "$work/c" "delta-$m" >/dev/null
    echo "sent_$m $(($(served) - before)) $(size_of "$dir/$m")" >>"$raw"
  done
  # The unrelated model with delta updates on and off, in turns (the order swaps each run).
  if [ $((r % 2)) = 1 ]; then order="on off"; else order="off on"; fi
  for mode in $order; do
    fresh_copy
    before=$(served)
    t0=$(now_us)
    if [ "$mode" = on ]; then prefetch "$work/c" delta-unrelated >/dev/null
    else prefetch "$work/c" delta-unrelated --no-delta >/dev/null; fi
    t1=$(now_us)
    [ "$mode" = on ] && echo "sent_unrelated $(($(served) - before)) $(size_of "$dir/unrelated")" >>"$raw"
    eval "us_$mode=$((t1 - t0))"
  done
  echo "time_unrelated $us_on $us_off" >>"$raw"
done
stop_server

# Part 2.
if [ "$big_mib" -gt 0 ]; then
  dir=$(models "$big_mib" base)
  data="$work/data2"
  start_server "$data"
  status_kb() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status"; }
  idle=$(status_kb "$server_pid" VmRSS)
  t0=$(now_us)
  publish "$data" big "$dir/base"
  t1=$(now_us)
  peak=$(status_kb "$server_pid" VmHWM)
  total=$(size_of "$dir/base")
  echo "big_sign_s $sign_us 1000000" >>"$raw"
  echo "big_sign_rss_mb $sign_kb 1024" >>"$raw"
  echo "big_publish_s $((t1 - t0 - sign_us)) 1000000" >>"$raw"
  echo "big_server_rss_growth_mb $((peak - idle)) 1024" >>"$raw"
  ptd_digest=$(sha256sum "$dir/base/model.ptd" | cut -d' ' -f1)
  for r in 1 2 3; do
    rm -rf "$work/big" "$work/curl.bin"
    t0=$(now_us)
    out=$(prefetch "$work/big" big)
    t1=$(now_us)
    curl -sf -o "$work/curl.bin" "$url/v1/blobs/sha256/$ptd_digest"
    t2=$(now_us)
    # Throughput ratio: the client's bytes per second over curl's (the .ptd alone for curl).
    echo "big_throughput $((total * 1000 / (t1 - t0))) $(($(stat -c %s "$work/curl.bin") * 1000 / (t2 - t1)))" >>"$raw"
    python3 - "$out" >>"$raw" <<'PY'
import json, sys
o = json.loads(sys.argv[1])
print(f"big_client_rss_growth_mb {o['peak_rss_kb'] - o['rss_start_kb']} 1024")
PY
  done
  rm -f "$work/curl.bin"
  # Killed half way, then started again. The server counts an answer's bytes when it starts,
  # so the second run is measured alone: what it fetched beyond the rest of the file (what
  # the killed run's .part did not hold) and the chunk indexes a first install fetches.
  rm -rf "$work/big"
  "$bin/examples/prefetch" --server "$url" --model big --trust "$data/keys/trust.json" \
    --cache "$work/big" >/dev/null &
  pid=$!
  until [ "$(find "$work/big/blobs" -name '*.part' -size +$((big_mib / 2))M 2>/dev/null | head -1)" ]; do
    kill -0 "$pid" 2>/dev/null || { echo "the download ended before it was half way" >&2; exit 1; }
    sleep 0.05
  done
  kill -9 "$pid"
  wait "$pid" 2>/dev/null || true
  kept=$(find "$work/big/blobs" -name '*.part' -printf '%s\n' | awk '{n += $1} END {print n + 0}')
  before=$(served)
  prefetch "$work/big" big >/dev/null
  # Beyond the files, a first install fetches the chunk indexes (kept for the next update).
  indexes=$(python3 - "$work/big.json" <<'PY'
import base64, json, sys
m = json.loads(base64.b64decode(json.load(open(sys.argv[1]))["payload"]))
refs = [v.get("chunk_index") for v in m["variants"]]
refs += [f.get("chunk_index") for v in m["variants"] for f in v.get("extra_files", [])]
print(sum(r["size"] for r in refs if r))
PY
)
  rest=$(($(stat -c %s "$dir/base/model.ptd") - kept))
  echo "big_resume_extra_mb $(($(served) - before - rest - indexes)) 1048576" >>"$raw"
  # The load into the real runtime (the program and its .ptd memory-mapped).
  t0=$(now_us)
  out=$("$bin/examples/fetch" --server "$url" --model big --trust "$data/keys/trust.json" \
    --cache "$work/big" --json)
  t1=$(now_us)
  echo "big_load_s $((t1 - t0)) 1000000" >>"$raw"
  mode=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["report"].get("load_mode"))' "$out")
  stop_server
fi

python3 - "$raw" "$mib" "$big_mib" "${mode:-}" <<'PY'
import statistics, sys
raw, mib, big_mib, mode = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
rows = {}
for line in open(raw):
    name, a, b = line.split()
    rows.setdefault(name, []).append((float(a), float(b)))
scenarios = [
    ("sent_finetune", f"fine-tune, 5% rewritten: sent / size ({mib} MiB)", "<= 0.10", lambda r: r <= 0.10),
    ("sent_reexport", "re-export, same weights: sent / size", "<= 0.02", lambda r: r <= 0.02),
    ("sent_unrelated", "unrelated model: sent / size", "<= 1.01", lambda r: r <= 1.01),
    ("time_unrelated", "unrelated model: time, delta on / delta off", "<= 1.10", lambda r: r <= 1.10),
    ("big_sign_s", f"{big_mib} MiB variant: ferry sign, seconds (absolute)", "-", None),
    ("big_sign_rss_mb", "  ferry sign peak RSS, MiB (absolute)", "<= 128", lambda r: r <= 128),
    ("big_publish_s", "  ferry publish (upload, server checks), seconds (absolute)", "-", None),
    ("big_server_rss_growth_mb", "  server RSS peak over idle during publish, MiB", "<= 128", lambda r: r <= 128),
    ("big_client_rss_growth_mb", "  client RSS growth over its download, MiB", "<= 64", lambda r: r <= 64),
    ("big_throughput", "  client download throughput / curl -o", ">= 0.90", lambda r: r >= 0.90),
    ("big_resume_extra_mb", "  killed half way and resumed: MiB sent twice", "<= 2", lambda r: r <= 2),
    ("big_load_s", f"  load into ExecuTorch, seconds (load_mode {mode})", "-", None),
]
print(f"{'scenario':<62} {'median':>8} {'min':>8} {'max':>8}  target")
for name, label, target, ok in scenarios:
    pairs = rows.get(name)
    if not pairs:
        continue
    ratios = [a / b for a, b in pairs]
    med = statistics.median(ratios)
    verdict = "" if ok is None else ("ok" if ok(med) else "MISSED")
    print(f"{label:<62} {med:8.3f} {min(ratios):8.3f} {max(ratios):8.3f}  {target} {verdict}")
print("raw figures (value baseline):")
for name, pairs in rows.items():
    print(f"  {name}: " + ", ".join(f"{a:.0f} {b:.0f}" for a, b in pairs))
PY
