#!/usr/bin/env bash
# Starts a real `mxserve serve` on a free loopback port and runs the openai-client end-to-end
# tests against it. Usage: server_test.sh MXSERVE SOURCE_DIR
set -u
bin=$1 src=$2
model=$src/models/tiny-qwen3-moe
log=$(mktemp)
"$bin" serve -m "$model" --port 0 --api-key test-key --max-running-requests 16 >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
port=""
for _ in $(seq 1 200); do
  port=$(grep -oE 'http://127\.0\.0\.1:[0-9]+' "$log" | head -1 | sed 's/.*://')
  [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  sleep 0.1
done
if [ -z "$port" ]; then echo "server did not start:"; cat "$log"; exit 1; fi
cd "$src" && BASE_URL="http://127.0.0.1:$port" API_KEY=test-key MXSERVE="$bin" MODEL_DIR="$model" \
  node --test tests/e2e/openai.test.mjs
