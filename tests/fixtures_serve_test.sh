#!/usr/bin/env bash
# `serve` starts on every fixture with the chat template it ships (the directories' own
# templates, Qwen3.5's macros included, and the GGUF files' tokenizer.chat_template) and answers
# a chat request through it. Usage: fixtures_serve_test.sh MXSERVE SHARED_DIR
set -u
bin=$1 shared=$2
fails=0 passes=0
pids=() logs=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -f "${logs[@]}"' EXIT
. "$(dirname "$0")/start_server.sh"
for model in "$shared"/fixtures/*/ "$shared"/fixtures/gguf/*.gguf; do
  [ -f "$model/config.json" ] || [ "${model%.gguf}" != "$model" ] || continue
  case $model in *synthetic-types*) continue ;; esac  # tensor types only: no tokenizer
  (start_server url >/dev/null 2>&1; code=$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/chat/completions" \
    -d '{"messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"}],"max_tokens":2}'); kill "${pids[@]}"; wait 2>/dev/null
    rm -f "${logs[@]}"; [ "$code" = 200 ])
  if [ $? = 0 ]; then passes=$((passes + 1)); echo "ok   $model"; else fails=$((fails + 1)); echo "FAIL $model"; fi
done
echo "$passes passed, $fails failed"
[ $fails -eq 0 ] && [ $passes -ge 7 ]
