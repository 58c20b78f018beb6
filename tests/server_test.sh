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

# The same suite against the bundled model, a GGUF file alone (weights, tokenizer and chat
# template all from the file) and a Qwen3.5 hybrid, each with its own golden.
run_suite() {
  local golden=$1 served=$2 main_url busy_url tight_url
  start_server main_url --api-key test-key --max-running-requests 16
  start_server busy_url --max-running-requests 1 --max-queued-requests 1
  start_server tight_url --max-running-requests 16 --max-total-tokens 160
  (cd "$src" && BASE_URL="$main_url" BUSY_URL="$busy_url" TIGHT_URL="$tight_url" \
    API_KEY=test-key MXSERVE="$bin" \
    MODEL_DIR="$model" GOLDEN_FILE="$golden" SERVED_MODEL="$served" \
    node --test tests/e2e/openai.test.mjs) || exit 1
}
run_suite "$shared/fixtures/tiny-qwen3-moe/golden/golden.json" tiny-qwen3-moe
model=$shared/fixtures/gguf/tiny-qwen3-moe-allmoe.Q8_0.gguf
run_suite "$shared/fixtures/gguf/golden/tiny-qwen3-moe-allmoe.Q8_0.golden.json" \
  tiny-qwen3-moe-allmoe.Q8_0
# A hybrid model: each running request's recurrent state in its own slot.
model=$shared/fixtures/tiny-qwen3_5-moe
run_suite "$model/golden/golden.json" tiny-qwen3_5-moe
