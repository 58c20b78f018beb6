#!/usr/bin/env bash
# The server's own clients against real `mxserve serve` processes: bench-serving reports
# every request and token it sent, and eval-server scores the bundled arithmetic set exactly
# as the local evaluator does (and as the fixture's reference measured it), in BF16 and in
# MXFP8. Usage: clients_test.sh MXSERVE SOURCE_DIR
set -u
bin=$1 src=$2
model=$src/models/tiny-qwen3-moe
task=$model/eval/arith_heldout.jsonl
fails=0 passes=0
tmp=$(mktemp -d)
pids=() logs=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp" "${logs[@]}"' EXIT
. "$(dirname "$0")/start_server.sh"

check() {  # name, condition result
  if [ "$2" = 0 ]; then passes=$((passes + 1)); echo "ok   $1"; else fails=$((fails + 1)); echo "FAIL $1"; fi
}
field() {  # file, python expression over d
  python3 -c "import json,sys;d=json.load(open('$1'));print($2)"
}
start_server url --api-key k
"$bin" bench-serving --base-url "$url" --api-key k --num-prompts 6 --input-len 20 --output-len 8 \
  --max-concurrency 3 --json >"$tmp/b.json"
check "bench-serving: exit 0" $?
[ "$(field "$tmp/b.json" "d['completed'], d['failed'], d['total_input_tokens'], d['total_output_tokens']")" = "6 0 120 48" ]
check "bench-serving: 6 requests, 120 prompt and 48 generated tokens counted" $?
field "$tmp/b.json" "int(0 < d['ttft']['median_ms'] <= d['e2e_latency']['p99_ms'] and d['tpot']['mean_ms'] > 0 and d['output_throughput'] > 0)" | grep -qx 1
check "bench-serving: TTFT, TPOT, latency and throughput are measured" $?
"$bin" bench-serving --base-url "$url/v1" --api-key k --num-prompts 4 --input-len 8 --output-len 4 \
  --request-rate 40 >"$tmp/b.txt"
grep -qE '^Successful requests: +4\.00$' "$tmp/b.txt" && grep -q 'Median TTFT (ms):' "$tmp/b.txt"
check "bench-serving: Poisson arrivals, /v1 base URL, text report" $?
"$bin" bench-serving --base-url "$url" --num-prompts 2 --input-len 4 --output-len 2 >"$tmp/o" 2>&1
[ $? -ne 0 ] && grep -q 'Incorrect or missing API key' "$tmp/o"
check "bench-serving: the server's error is reported" $?
"$bin" bench-serving --base-url http://127.0.0.1:1 --num-prompts 1 --input-len 4 --output-len 2 >"$tmp/o" 2>&1
[ $? -ne 0 ] && grep -q 'cannot reach' "$tmp/o"
check "bench-serving: an unreachable server is named" $?

want=$(python3 -c "import json;print(json.load(open('$model/eval/reference_metrics.json'))['arith_heldout']['exact_match'])")
"$bin" eval -m "$model" --task "$task" --json >"$tmp/local.json"
"$bin" eval-server --base-url "$url" --api-key k --task "$task" --parallel 8 --json >"$tmp/remote.json"
check "eval-server: exit 0" $?
local_acc=$(field "$tmp/local.json" "d['task_accuracy']")
remote_acc=$(field "$tmp/remote.json" "d['accuracy'], d['questions']")
[ "$remote_acc" = "$local_acc 500" ] && [ "$local_acc" = "$want" ]
check "eval-server: BF16 accuracy $remote_acc equals mxserve eval ($local_acc) and the reference ($want)" $?
"$bin" eval -m "$model" --task "$task" --shots 5 --max-questions 60 --json >"$tmp/local5.json"
"$bin" eval-server --base-url "$url" --api-key k --task "$task" --shots 5 --max-questions 60 --json >"$tmp/remote5.json"
[ "$(field "$tmp/remote5.json" "d['accuracy'], d['invalid_rate']")" = "$(field "$tmp/local5.json" "d['task_accuracy'], d['invalid_rate']")" ]
check "eval-server --shots 5: same accuracy and invalid rate as mxserve eval --shots 5" $?

# gsm8k-format rows (worked answers ending "#### N"): SGLang's prompts, stops and report. The
# tiny model scores nothing here; what is held is the report's shape and that the server and
# the local evaluator generate the same text for every question, greedy, in 5 shots (SGLang's
# default, 17 of the 22 rows scored) and in 1 shot (where some answers hold no number).
gsm=$src/tests/data/gsm8k_style.jsonl
"$bin" eval-server --base-url "$url" --api-key k --task "$gsm" --max-new-tokens 64 >"$tmp/g.txt"
check "eval-server gsm8k: exit 0" $?
grep -qxE 'Accuracy: [01]\.[0-9]{3}' "$tmp/g.txt" && grep -qxE 'Invalid: [01]\.[0-9]{3}' "$tmp/g.txt" &&
  grep -qxE 'Latency: [0-9]+\.[0-9]{3} s' "$tmp/g.txt" &&
  grep -qxE 'Output throughput: [0-9]+\.[0-9]{3} token/s' "$tmp/g.txt"
check "eval-server gsm8k: prints SGLang's Accuracy, Invalid, Latency and Output throughput lines" $?
for shots in 5 1; do
  "$bin" eval-server --base-url "$url" --api-key k --task "$gsm" --shots $shots --max-new-tokens 64 \
    --json --dump "$tmp/gr$shots.jsonl" >"$tmp/gr$shots.json"
  "$bin" eval -m "$model" --task "$gsm" --shots $shots --max-new-tokens 64 --json \
    --dump "$tmp/gl$shots.jsonl" >"$tmp/gl$shots.json"
  [ "$(field "$tmp/gr$shots.json" "d['correct'], d['invalid'], d['questions']")" = \
    "$(field "$tmp/gl$shots.json" "d['correct'], d['invalid'], d['questions']")" ] &&
    cmp -s "$tmp/gr$shots.jsonl" "$tmp/gl$shots.jsonl"
  check "gsm8k --shots $shots: mxserve eval and eval-server agree on every question's text, correct and invalid counts ($(field "$tmp/gr$shots.json" "d['correct'], d['invalid'], d['questions']"))" $?
done
field "$tmp/gr5.json" "int(all(k in d for k in ('task', 'backend', 'num_gpus', 'latency', 'accuracy', 'num_requests', 'output_throughput', 'invalid_rate')) and set(d['other']) == {'num_questions', 'parallel'} and d['task'] == 'gsm8k_style' and d['num_requests'] == d['questions'] == 17 and 0 <= d['accuracy'] <= 1 and 0 <= d['invalid_rate'] <= 1 and d['output_tokens'] > 0)" | grep -qx 1
check "eval-server gsm8k --json: SGLang's keys, 17 questions, accuracy and invalid rate in [0,1]" $?
"$bin" eval-server --base-url "$url" --api-key k --task "$gsm" >"$tmp/o" 2>&1
[ $? -ne 0 ] && grep -q 'plus max_tokens (512) exceeds the context length of 1024' "$tmp/o"
check "eval-server gsm8k: SGLang's 512-token budget past the tiny model's context is refused by name" $?

start_server url8 --quantization mxfp8
"$bin" eval -m "$model" --quantization mxfp8 --task "$task" --max-questions 150 --json >"$tmp/l8.json"
"$bin" eval-server --base-url "$url8" --task "$task" --max-questions 150 --json >"$tmp/r8.json"
[ "$(field "$tmp/r8.json" "d['accuracy']")" = "$(field "$tmp/l8.json" "d['task_accuracy']")" ]
check "eval-server: MXFP8 accuracy equals mxserve eval --quantization mxfp8" $?
"$bin" eval-server --base-url "$url8" --task "$tmp/missing.jsonl" >"$tmp/o" 2>&1
[ $? -ne 0 ] && grep -q 'missing.jsonl: cannot open' "$tmp/o"
check "eval-server: a missing task file is named" $?

echo "$passes passed, $fails failed"
[ "$fails" = 0 ]
