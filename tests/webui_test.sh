#!/usr/bin/env bash
# The chat page at / (tests/e2e/webui.test.mjs): a server with the page, on scalar kernels and
# one thread so that a long generation lasts seconds and the page's Stop lands within it, and
# one started with --no-webui. Without Debian's chromium the browser tests are skipped and the
# script exits 77 (ctest's skip) once the others pass. Usage: webui_test.sh MXSERVE SOURCE_DIR
set -u
bin=$1 src=$2
model=$src/models/tiny-qwen3-moe
pids=() logs=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -f "${logs[@]}"' EXIT

. "$(dirname "$0")/start_server.sh"

MX_CPU_ISA=scalar start_server url -t 1
page_log=${logs[-1]}
start_server no_webui_url --no-webui
(cd "$src" && BASE_URL="$url" SERVER_LOG="$page_log" NO_WEBUI_URL="$no_webui_url" \
  MODEL_DIR="$model" node --test tests/e2e/webui.test.mjs) || exit 1
if [ ! -x "${CHROMIUM:-/usr/bin/chromium}" ]; then
  echo "SKIP: the browser tests: ${CHROMIUM:-/usr/bin/chromium} is absent (scripts/install-deps.sh)"
  exit 77
fi
