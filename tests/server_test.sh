#!/usr/bin/env bash
# Starts real `mxserve serve` processes on free loopback ports and runs the openai-client
# end-to-end tests against them: the main server, and a second one with a one-request queue
# for the 503 case. Usage: server_test.sh MXSERVE SOURCE_DIR SHARED_DIR
set -u
bin=$1 src=$2 shared=$3
model=$src/models/tiny-qwen3-moe
pids=() logs=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -f "${logs[@]}"' EXIT

# start_server VAR ARGS...: starts a server and stores its base URL in VAR.
start_server() {
  local var=$1 log port=""
  shift
  log=$(mktemp)
  logs+=("$log")
  "$bin" serve -m "$model" --port 0 "$@" >"$log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 200); do
    port=$(grep -oE 'http://127\.0\.0\.1:[0-9]+' "$log" | head -1 | sed 's/.*://')
    [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    sleep 0.1
  done
  if [ -z "$port" ]; then echo "server did not start:"; cat "$log"; exit 1; fi
  printf -v "$var" 'http://127.0.0.1:%s' "$port"
}

start_server main_url --api-key test-key --max-running-requests 16
start_server busy_url --max-running-requests 1 --max-queued-requests 1
cd "$src" && BASE_URL="$main_url" BUSY_URL="$busy_url" API_KEY=test-key MXSERVE="$bin" \
  MODEL_DIR="$model" GOLDEN_DIR="$shared/fixtures/tiny-qwen3-moe/golden" \
  node --test tests/e2e/openai.test.mjs
