#!/usr/bin/env bash
# Fills a data folder with a large catalogue for bench/run: MODELS models x RELEASES releases x 6
# variants (Core ML, Vulkan, XNNPACK int8, XNNPACK fp32 for new and old runtimes, portable),
# signed and published through the real CLI, and stages each model's last release at 10% of
# the one before. Reuses a complete folder (a marker file records what it holds).
#
# Usage: bench/catalogue.sh FERRY_BIN DATA_DIR MODELS RELEASES PORT
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ferry=$1 data=$2 models=$3 releases=$4 port=$5
marker="$data/bench-catalogue-$models-$releases"
[ -f "$marker" ] && exit 0
rm -rf "$data"
mkdir -p "$data"
"$ferry" keys generate --out "$data/keys" >/dev/null
token=catalogue-admin-token-0123456789
FERRY_ADMIN_TOKEN=$token FERRY_LOG=warn "$ferry" serve --data "$data" --listen 127.0.0.1:"$port" \
  2>"$data/fill.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
files="$data/files"
mkdir -p "$files"
for f in mlp-v1-coreml mlp-v1-vulkan mlp-v1-xnnpack-int8 mlp-v1-xnnpack mlp-v1-portable; do
  cp "$root/tests/fixtures/pte/$f.pte" "$files/"
done
# One model's releases, one after another (two models are published at a time).
publish_model() {
  local m=$1 dir="$files/$1"
  mkdir -p "$dir"
  cp "$files"/*.pte "$dir/"
  for r in $(seq 0 $((releases - 1))); do
    cat > "$dir/VARIANTS.toml" <<TOML
model = "$m"
version = "1.$r.0"

[[variant]]
id = "coreml-fp32"
file = "mlp-v1-coreml.pte"
delegate = "coreml"
quant = "fp32"
runtime = ">=1.0.0"
app = "*"
platforms = ["ios", "macos"]

[[variant]]
id = "vulkan-fp32"
file = "mlp-v1-vulkan.pte"
delegate = "vulkan"
quant = "fp32"
runtime = ">=1.0.0"
app = "*"
platforms = ["android"]

[[variant]]
id = "xnnpack-int8"
file = "mlp-v1-xnnpack-int8.pte"
delegate = "xnnpack"
quant = "int8"
runtime = ">=1.0.0"
app = "*"
min_ram_mb = 6144

[[variant]]
id = "xnnpack-fp32"
file = "mlp-v1-xnnpack.pte"
delegate = "xnnpack"
quant = "fp32"
runtime = ">=1.5.0"
app = "*"

[[variant]]
id = "xnnpack-fp32-old-runtime"
file = "mlp-v1-xnnpack.pte"
delegate = "xnnpack"
quant = "fp32"
runtime = ">=1.0.0, <1.5.0"
app = "*"

[[variant]]
id = "portable-fp32"
file = "mlp-v1-portable.pte"
delegate = "portable"
quant = "fp32"
runtime = ">=1.0.0"
app = "*"
TOML
    "$ferry" sign "$dir/VARIANTS.toml" --key "$data/keys/release.key" -o "$dir/release.json" >/dev/null
    FERRY_TOKEN=$token "$ferry" publish "$dir/release.json" --files "$dir" \
      --server "http://127.0.0.1:$port" --quiet >/dev/null
  done
  if [ "$releases" -gt 1 ]; then
    FERRY_TOKEN=$token "$ferry" rollout start "$m" --release "1.$((releases - 1)).0" --percent 10 \
      --server "http://127.0.0.1:$port" >/dev/null
  fi
}
echo "publishing $models models x $releases releases x 6 variants into $data ..." >&2
started=$(date +%s)
for i in $(seq 0 2 $((models - 1))); do
  publish_model "$(printf 'cat-%03d' "$i")" &
  a=$!
  if [ $((i + 1)) -lt "$models" ]; then
    publish_model "$(printf 'cat-%03d' $((i + 1)))" &
    b=$!
    wait "$b"
  fi
  wait "$a"
  [ $((i % 10)) -eq 0 ] && echo "  $((i + 2 > models ? models : i + 2)) of $models models ($(($(date +%s) - started)) s)" >&2
done
kill -TERM $pid
wait $pid 2>/dev/null || true
trap - EXIT
rm -rf "$files"
touch "$marker"
