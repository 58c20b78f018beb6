#!/usr/bin/env bash
# Agent clients against `mxserve serve` started with no flags: the official clients of the
# Responses and Messages APIs (tests/e2e/apis.test.mjs), then the frameworks people build
# agents with (tests/e2e/frameworks.test.mjs). Usage: agents_test.sh MXSERVE SOURCE_DIR SHARED_DIR
set -u
bin=$1 src=$2 shared=$3
model=$src/models/tiny-qwen3-moe
pids=() logs=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -f "${logs[@]}"' EXIT

. "$(dirname "$0")/start_server.sh"

start_server url
for t in apis frameworks; do
  (cd "$src" && BASE_URL="$url" SHARED_DIR="$shared" SERVED_MODEL=tiny-qwen3-moe node --test "tests/e2e/$t.test.mjs") ||
    { echo "server log:"; tail -40 "${logs[0]}"; exit 1; }
done
