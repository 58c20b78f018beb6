#!/usr/bin/env bash
# Prefix caching through real `mxserve serve` processes: two chat requests sharing a long system
# prompt. With the cache, /metrics counts hits after the second (none after the first); the
# greedy outputs and their log-probs equal those of a server started with
# --disable-radix-cache (and of one with vLLM's --no-enable-prefix-caching). BF16 and MXFP8.
# Then `bench-serving --multi-turn` builds its conversations as documented.
# The same on the Qwen3.5 hybrid fixture. Usage: prefix_cache_server_test.sh MXSERVE SOURCE_DIR
# SHARED_DIR
set -u
bin=$1 src=$2 shared=${3:-}
model=$src/models/tiny-qwen3-moe
pids=() logs=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -f "${logs[@]}"' EXIT

. "$(dirname "$0")/start_server.sh"

# About 500 tokens of prose as the shared system prompt.
system=$(head -c 2000 "$model/eval/prose_heldout.txt")

# chat URL USER_MESSAGE: the response's first choice (message and log-probs) as compact JSON.
chat() {
  SYSTEM="$system" USER_MSG="$2" python3 - "$1" <<'EOF'
import json, os, sys, urllib.request
body = {"messages": [{"role": "system", "content": os.environ["SYSTEM"]},
                     {"role": "user", "content": os.environ["USER_MSG"]}],
        "max_tokens": 16, "temperature": 0, "logprobs": True, "top_logprobs": 2}
req = urllib.request.Request(sys.argv[1] + "/v1/chat/completions", json.dumps(body).encode(),
                             {"Content-Type": "application/json"})
r = json.load(urllib.request.urlopen(req))
c = r["choices"][0]
print(json.dumps({"message": c["message"], "logprobs": c["logprobs"],
                  "prompt_tokens": r["usage"]["prompt_tokens"]}, sort_keys=True))
EOF
}

# metric URL NAME: the value of one /metrics line.
metric() {
  curl -sf "$1/metrics" | awk -v n="$2" '$1 == n {print $2}'
}

check() {
  local label=$1 cached plain vllm a1 a2 b1 b2 c2 hits queries rate
  shift
  start_server cached "$@"
  start_server plain --disable-radix-cache "$@"
  start_server vllm --no-enable-prefix-caching "$@"
  a1=$(chat "$cached" "Summarize the story so far.") || { echo "FAIL: $label: request"; exit 1; }
  hits=$(metric "$cached" mxserve_prefix_cache_hits_total)
  [ "${hits%.*}" = 0 ] || { echo "FAIL: $label: hits after the first request: $hits"; exit 1; }
  a2=$(chat "$cached" "Who is the main character?")
  hits=$(metric "$cached" mxserve_prefix_cache_hits_total)
  queries=$(metric "$cached" mxserve_prefix_cache_queries_total)
  rate=$(metric "$cached" mxserve_prefix_cache_hit_rate)
  # The second prompt shares the system prompt's whole blocks: hundreds of tokens (a hybrid
  # model's, up to the last position whose recurrent state was kept: 256).
  [ "${hits%.*}" -ge "${MIN_HITS:-400}" ] ||
    { echo "FAIL: $label: $hits prefix-cache hits after the second"; exit 1; }
  python3 -c "import sys; q, h, r = map(float, sys.argv[1:]); sys.exit(abs(h / q - r) > 1e-6)" \
    "$queries" "$hits" "$rate" || { echo "FAIL: $label: hit rate $rate for $hits of $queries"; exit 1; }
  b1=$(chat "$plain" "Summarize the story so far.")
  b2=$(chat "$plain" "Who is the main character?")
  c2=$(chat "$vllm" "Who is the main character?")
  [ "$a1" = "$b1" ] || { echo "FAIL: $label: first reply differs:"; echo "$a1"; echo "$b1"; exit 1; }
  [ "$a2" = "$b2" ] || { echo "FAIL: $label: second reply differs:"; echo "$a2"; echo "$b2"; exit 1; }
  [ "$c2" = "$b2" ] || { echo "FAIL: $label: --no-enable-prefix-caching differs"; exit 1; }
  hits=$(metric "$plain" mxserve_prefix_cache_hits_total)
  [ "${hits%.*}" = 0 ] || { echo "FAIL: $label: hits with the cache disabled: $hits"; exit 1; }
  hits=$(metric "$cached" mxserve_prefix_cache_hits_total)
  echo "ok $label: ${hits%.*} of ${queries%.*} prompt tokens cached"
}

# bench-serving --multi-turn builds each turn's prompt from the history: 300 system tokens and
# 50 user tokens (350), then 8 reply and 50 more user tokens a turn (408, 466). The reply
# enters the history as other tokens than the ones generated, so a turn finds the whole blocks
# of the previous prompt: 0, 336 (21 blocks of 350), 400 (25 of 408) in the first conversation,
# 288 (the 18 blocks of the system prompt), 336, 400 in the second: 1760.
multi_turn() {
  local url out hits
  start_server url
  out=$("$bin" bench-serving --base-url "$url" --multi-turn 3 --num-prompts 2 --max-concurrency 1 \
    --system-len 300 --turn-len 50 --output-len 8 --json) || { echo "FAIL: multi-turn: $out"; exit 1; }
  python3 - "$out" <<'EOF' || exit 1
import json, sys
r = json.loads(sys.argv[1])
turns = [(t["turn"], t["mean_prompt_tokens"]) for t in r["ttft_by_turn"]]
want = [(1, 350), (2, 408), (3, 466)]
if r["completed"] != 6 or r["failed"] != 0 or turns != want:
    sys.exit(f"FAIL: multi-turn: {r['completed']} completed, turns {turns}, want {want}")
if not all(t["mean_ms"] > 0 for t in r["ttft_by_turn"]):
    sys.exit("FAIL: multi-turn: a turn without TTFT")
EOF
  hits=$(metric "$url" mxserve_prefix_cache_hits_total)
  [ "${hits%.*}" = 1760 ] || { echo "FAIL: multi-turn: $hits prefix-cache hits, want 1760"; exit 1; }
  echo "ok bench-serving --multi-turn: prompts of 350, 408, 466 tokens; ${hits%.*} tokens cached"
}

check bf16
check mxfp8 --quantization mxfp8
multi_turn
# A hybrid model (Qwen3.5): prefix caching with the recurrent states kept at chunk ends.
if [ -n "${shared:-}" ]; then
  model=$shared/fixtures/tiny-qwen3_5-moe
  MIN_HITS=256 check "qwen3.5 hybrid"
fi
