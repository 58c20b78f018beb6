#!/usr/bin/env bash
# Starts real `mxserve serve` processes on free loopback ports and runs the openai-client
# end-to-end tests against them: the main server, and a second one with a one-request queue
# for the 503 case. Usage: server_test.sh MXSERVE SOURCE_DIR SHARED_DIR
set -u
bin=$1 src=$2 shared=$3
model=$src/models/tiny-qwen3-moe
pids=() logs=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -f "${logs[@]}"' EXIT

. "$(dirname "$0")/start_server.sh"

start_server main_url --api-key test-key --max-running-requests 16
start_server busy_url --max-running-requests 1 --max-queued-requests 1
cd "$src" && BASE_URL="$main_url" BUSY_URL="$busy_url" API_KEY=test-key MXSERVE="$bin" \
  MODEL_DIR="$model" GOLDEN_DIR="$shared/fixtures/tiny-qwen3-moe/golden" \
  node --test tests/e2e/openai.test.mjs
