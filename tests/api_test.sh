#!/usr/bin/env bash
# The API features beyond plain generation (tests/e2e/api.test.mjs) against a real
# `mxserve serve` with the tool-call and reasoning parsers on, driven by the official openai
# npm client. Usage: api_test.sh MXSERVE SOURCE_DIR SHARED_DIR
set -u
bin=$1 src=$2 shared=$3
model=$src/models/tiny-qwen3-moe
pids=() logs=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -f "${logs[@]}"' EXIT

. "$(dirname "$0")/start_server.sh"

start_server url --tool-call-parser auto --reasoning-parser qwen3 --max-running-requests 16
(cd "$src" && BASE_URL="$url" SERVED_MODEL=tiny-qwen3-moe \
  GOLDEN_FILE="$shared/fixtures/tiny-qwen3-moe/golden/golden.json" \
  node --test tests/e2e/api.test.mjs) || { echo "server log:"; tail -40 "${logs[0]}"; exit 1; }
