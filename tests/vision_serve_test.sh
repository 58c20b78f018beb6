#!/usr/bin/env bash
# Images through a real `mxserve serve` on the VL fixture, started with no flags, driven by the
# official openai npm client (tests/e2e/vision.test.mjs). Usage: vision_serve_test.sh MXSERVE
# SOURCE_DIR SHARED_DIR
set -u
bin=$1 src=$2 shared=$3
model=$shared/fixtures/tiny-qwen3_5-moe-vl
pids=() logs=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -f "${logs[@]}"' EXIT

. "$(dirname "$0")/start_server.sh"

start_server url
(cd "$src" && BASE_URL="$url" SERVED_MODEL=tiny-qwen3_5-moe-vl VL_DIR="$model" MXSERVE="$bin" \
  node --test tests/e2e/vision.test.mjs) || { echo "server log:"; tail -40 "${logs[0]}"; exit 1; }
