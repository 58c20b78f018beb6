#!/usr/bin/env bash
# Images through a real `mxserve serve` on the VL fixture, started with no flags, driven by the
# official openai and anthropic npm clients (tests/e2e/vision.test.mjs), then a server with
# --no-image-urls. Usage: vision_serve_test.sh MXSERVE SOURCE_DIR SHARED_DIR
set -u
bin=$1 src=$2 shared=$3
model=$shared/fixtures/tiny-qwen3_5-moe-vl
pids=() logs=()
scratch=$(mktemp -d)
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -f "${logs[@]}"; rm -rf "$scratch"' EXIT

. "$(dirname "$0")/start_server.sh"

# A self-signed certificate for the https case: the server must refuse to trust it.
tls=$scratch/tls
mkdir -p "$tls"
openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -days 1 -keyout "$tls/key.pem" \
  -out "$tls/cert.pem" >/dev/null 2>&1 || tls=""
start_server url
(cd "$src" && BASE_URL="$url" SERVED_MODEL=tiny-qwen3_5-moe-vl VL_DIR="$model" MXSERVE="$bin" \
  TLS_DIR="$tls" node --test tests/e2e/vision.test.mjs) || { echo "server log:"; tail -40 "${logs[0]}"; exit 1; }
# --no-image-urls: an http URL is refused by name.
start_server off --no-image-urls
body='{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://127.0.0.1:1/x.png"}}]}],"max_tokens":1}'
code=$(curl -s -o "$scratch/out" -w '%{http_code}' "$off/v1/chat/completions" -d "$body")
[ "$code" = 400 ] && grep -q "not fetched by this server (--no-image-urls)" "$scratch/out" ||
  { echo "FAIL --no-image-urls: $code $(cat "$scratch/out")"; exit 1; }
echo "ok   --no-image-urls refuses an http URL by name"
