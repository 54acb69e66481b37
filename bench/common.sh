# Shared by the benchmark scripts that start ferry servers of their own (bench/mirror.sh,
# bench/compressed.sh): sourced, not run. Sets `work` (a fresh folder under target/, removed on
# exit with every process whose pid is added to `pids`) and defines free_port, wait_ready,
# served and start_origin. Needs `root` set to the repository.

work=$(mktemp -d "$root/target/bench-${BENCH_NAME:-bench}.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_ready() { # $1: url, $2: log
  for _ in $(seq 300); do curl -sf "$1/healthz" >/dev/null && return; sleep 0.1; done
  echo "did not start: $(cat "$2")" >&2
  exit 1
}

served() { # $1: server URL, $2: a token with the read scope -> the blob bytes it sent so far
  curl -sf -H "authorization: Bearer $2" "$1/metrics" |
    awk '$1 == "ferry_blob_bytes_served_total" {printf "%.0f\n", $2}'
}

start_origin() { # `ferry serve --demo` ($bin, $token set) on a free port: sets port and origin
  port=$(free_port)
  origin="http://127.0.0.1:$port"
  FERRY_ADMIN_TOKEN=$token FERRY_LOG=warn "$bin/ferry" serve --demo --data "$work/origin" \
    --listen "127.0.0.1:$port" 2>"$work/origin.log" &
  pids+=($!)
  wait_ready "$origin" "$work/origin.log"
}
