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
# template all from the file), a Qwen3.5 hybrid and the hybrid's GGUF, each with its own golden.
extra=()  # flags every server of the next suite gets
run_suite() {
  local golden=$1 served=$2 main_url busy_url tight_url
  start_server main_url "${extra[@]}" --api-key test-key --max-running-requests 16
  start_server busy_url "${extra[@]}" --max-running-requests 1 --max-queued-requests 1
  start_server tight_url "${extra[@]}" --max-running-requests 16 --max-total-tokens 160
  (cd "$src" && BASE_URL="$main_url" BUSY_URL="$busy_url" TIGHT_URL="$tight_url" \
    API_KEY=test-key MXSERVE="$bin" \
    MODEL_DIR="$model" GOLDEN_FILE="$golden" SERVED_MODEL="$served" \
    node --test tests/e2e/openai.test.mjs) || exit 1
  if [[ " ${extra[*]} " == *" --speculative-algorithm "* ]]; then
    # The suite's requests drafted, and the counters say so as vLLM names them.
    local m drafted kept
    m=$(curl -s -H "Authorization: Bearer test-key" "$main_url/metrics")
    drafted=$(awk '/^mxserve_spec_decode_num_draft_tokens_total /{print int($2)}' <<<"$m")
    kept=$(awk '/^mxserve_spec_decode_num_accepted_tokens_total /{print int($2)}' <<<"$m")
    [ "${drafted:-0}" -gt 0 ] ||
      { echo "FAIL: no drafting in /metrics: $(grep spec_decode <<<"$m")"; exit 1; }
    [[ " ${extra[*]} " == *" mtp "* || " ${extra[*]} " == *" draft "* ]] || [ "${kept:-0}" -gt 0 ] ||
      { echo "FAIL: prompt lookup kept nothing: $(grep spec_decode <<<"$m")"; exit 1; }
    grep -q 'mxserve_spec_decode_num_accepted_tokens_per_pos_total{position="0"}' <<<"$m" ||
      { echo "FAIL: no per-position counters"; exit 1; }
    grep -qE "completion tokens, .* drafted tokens accepted" "${logs[-3]}" ||
      { echo "FAIL: no drafting in the request log"; exit 1; }
    # A drafter with a model of its own (an MTP head, a draft model) has its caches planned.
    if [[ " ${extra[*]} " == *" mtp "* || " ${extra[*]} " == *" draft "* ]]; then
      grep -q "the drafter's caches" "${logs[-3]}" ||
        { echo "FAIL: the drafter's caches are not in the KV plan"; exit 1; }
    fi
    echo "ok speculative: $kept of $drafted drafted tokens accepted"
  fi
}
# The HTTP layer's limits, with curl as README shows it.
http_checks() {
  local url port code out big
  start_server url --api-key test-key --max-connections 8 --max-body-bytes 1000000
  port=${url##*:}
  local auth=(-H "Authorization: Bearer test-key")
  # README's curl -d (form-urlencoded Content-Type; Expect: 100-continue above 1 KiB) with an
  # 8 KiB+ prompt (box-drawing lines: 96 bytes a token in this vocabulary, so it fits the
  # context).
  big=$(python3 -c 'print("\u2500" * 2880)')
  out=$(curl -s "${auth[@]}" "$url/v1/chat/completions" \
    -d '{"messages":[{"role":"user","content":"'"$big"'"}],"max_tokens":8}')
  grep -q '"finish_reason"' <<<"$out" || { echo "FAIL: curl -d with an 8 KiB prompt: $out"; exit 1; }
  out=$(curl -sN "${auth[@]}" "$url/v1/chat/completions" \
    -d '{"messages":[{"role":"user","content":"'"$big"'"}],"max_tokens":8,"stream":true}')
  grep -q '^data: \[DONE\]' <<<"$out" || { echo "FAIL: streamed curl -d: $out"; exit 1; }
  # The backlog of the listening socket (ss shows it as Send-Q).
  out=$(ss -Hltn "sport = :$port" | awk '{print $3}')
  [ "${out:-0}" -ge 1024 ] || { echo "FAIL: listen backlog ${out:-none}, want >= 1024"; exit 1; }
  # A port in use: a clear error, never a shared port (SO_REUSEPORT).
  out=$("$bin" serve -m "$model" --port "$port" 2>&1) && { echo "FAIL: second server on $port"; exit 1; }
  grep -q "cannot listen on 127.0.0.1:$port: Address already in use" <<<"$out" ||
    { echo "FAIL: port in use: $out"; exit 1; }
  # Authentication before the body: a wrong key gets 401 although the body never ends.
  out=$(exec 3<>/dev/tcp/127.0.0.1/$port
        printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n' >&3
        printf 'Transfer-Encoding: chunked\r\n\r\n10\r\n{"prompt":"aaaaa\r\n' >&3
        timeout 5 head -1 <&3)
  grep -q "^HTTP/1.1 401" <<<"$out" || { echo "FAIL: auth before the body: $out"; exit 1; }
  # Chunked bodies count against the body limit too; so does a header past its limit.
  code=$(head -c 2000000 /dev/zero | tr '\0' 'x' | curl -s -o /dev/null -w '%{http_code}' \
    "${auth[@]}" -H 'Transfer-Encoding: chunked' --data-binary @- "$url/v1/completions")
  [ "$code" = 413 ] || { echo "FAIL: chunked body over the limit got $code"; exit 1; }
  code=$(curl -s -o /dev/null -w '%{http_code}' -H "X-Big: $(head -c 20000 /dev/zero | tr '\0' 'y')" \
    "$url/health")
  [ "$code" = 431 ] || { echo "FAIL: a 20 kB header got $code"; exit 1; }
  # The connection cap answers 503; the server serves again once connections close.
  local fds=()
  for i in $(seq 1 8); do exec {fd}<>/dev/tcp/127.0.0.1/$port; fds+=("$fd"); done
  sleep 0.3
  out=$(curl -s "$url/health")
  grep -q "too many connections" <<<"$out" || { echo "FAIL: connection cap: $out"; exit 1; }
  for fd in "${fds[@]}"; do exec {fd}>&-; done
  for _ in $(seq 1 50); do [ "$(curl -s "$url/health")" = ok ] && break; sleep 0.1; done
  [ "$(curl -s "$url/health")" = ok ] || { echo "FAIL: no service after the cap"; exit 1; }
  # JSON nested 400,000 deep is refused before it is parsed (nlohmann copies recursively).
  out=$(python3 -c 'print("{\"prompt\":" + "[" * 400000 + "]" * 400000 + "}")' |
    curl -s "${auth[@]}" --data-binary @- "$url/v1/completions")
  grep -q "nests JSON deeper than 256 levels" <<<"$out" || { echo "FAIL: deep JSON: $out"; exit 1; }
  # A non-streaming request whose client goes away is cancelled too (the log says how far it
  # got: far short of its 1000 tokens).
  (exec 3<>/dev/tcp/127.0.0.1/$port
   body='{"prompt":"Once upon a time","max_tokens":1000,"ignore_eos":true}'
   printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer test-key\r\n' >&3
   printf 'Content-Length: %d\r\n\r\n%s' "${#body}" "$body" >&3
   sleep 0.1)
  for _ in $(seq 1 50); do grep -q "/v1/completions: 499" "${logs[-1]}" && break; sleep 0.1; done
  out=$(grep "/v1/completions: 499" "${logs[-1]}" | grep -oE '[0-9]+ completion' | cut -d' ' -f1)
  [ -n "$out" ] && [ "$out" -lt 1000 ] ||
    { echo "FAIL: an abandoned request was not cancelled:"; tail -5 "${logs[-1]}"; exit 1; }
  echo "ok HTTP limits"
}
http_checks
run_suite "$shared/fixtures/tiny-qwen3-moe/golden/golden.json" tiny-qwen3-moe
# Under the sanitizers (MX_SANITIZED=1) the suites that only change what is loaded (the GGUF
# files) or repeat a drafter on another model are left to the release run: the serving code
# they run is the same, and the sanitized run's minutes go to the paths that differ.
sanitized=${MX_SANITIZED:-0}
if [ "$sanitized" != 1 ]; then
  model=$shared/fixtures/gguf/tiny-qwen3-moe-allmoe.Q8_0.gguf
  # The suite holds log-probs to the dequantized-at-load golden (2e-3): FP32 activations.
  extra=(--gguf-activations f32)
  run_suite "$shared/fixtures/gguf/golden/tiny-qwen3-moe-allmoe.Q8_0.golden.json" \
    tiny-qwen3-moe-allmoe.Q8_0
fi
extra=()
# A hybrid model: each running request's recurrent state in its own slot.
model=$shared/fixtures/tiny-qwen3_5-moe
run_suite "$model/golden/golden.json" tiny-qwen3_5-moe
if [ "$sanitized" != 1 ]; then
  model=$shared/fixtures/gguf/tiny-qwen3_5-moe.Q4_K_M.gguf
  extra=(--gguf-activations f32)
  run_suite "$shared/fixtures/gguf/golden/tiny-qwen3_5-moe.Q4_K_M.golden.json" \
    tiny-qwen3_5-moe.Q4_K_M
fi
# Speculative decoding with prompt lookup: the same suite and goldens, on the bundled model
# and on the hybrid (whose recurrent states roll back to each request's last kept token).
extra=(--speculative-algorithm ngram)
model=$src/models/tiny-qwen3-moe
run_suite "$shared/fixtures/tiny-qwen3-moe/golden/golden.json" tiny-qwen3-moe
model=$shared/fixtures/tiny-qwen3_5-moe
[ "$sanitized" = 1 ] || run_suite "$model/golden/golden.json" tiny-qwen3_5-moe
# The hybrid's MTP head, one drafter per request (its random weights get every guess rejected).
extra=(--speculative-algorithm mtp)
run_suite "$model/golden/golden.json" tiny-qwen3_5-moe
# A draft model sharing the tokenizer (the hybrid dense fixture), one cache per request.
if [ "$sanitized" != 1 ]; then
  extra=(--speculative-algorithm draft --speculative-draft-model-path "$shared/fixtures/tiny-qwen3_5-dense")
  model=$src/models/tiny-qwen3-moe
  run_suite "$shared/fixtures/tiny-qwen3-moe/golden/golden.json" tiny-qwen3-moe
fi
