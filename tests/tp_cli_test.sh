#!/usr/bin/env bash
# Tensor parallelism from the command line, under real mpirun: launches and shapes that cannot
# work are refused by name on every rank; run, eval and bench give one process's results on 2
# ranks; the openai-client suite and the agent clients pass against `mpirun -np 2 mxserve serve
# --tp-size 2`; a rank killed mid-generation ends the job within 10 s naming it.
# Usage: tp_cli_test.sh MXSERVE SOURCE_DIR SHARED_DIR
set -u
real_bin=$1 src=$2 shared=$3
model=$src/models/tiny-qwen3-moe
. "$(dirname "$0")/mpi_jobs.sh"
prompt="It is a truth universally acknowledged, that"

# Launches and shapes that cannot work say why.
out=$("$real_bin" run -m "$model" -p hi -n 2 --tp-size 2 2>&1) && fail "--tp-size 2 alone ran"
grep -q "mpirun -np 2 mxserve ... --tp-size 2" <<<"$out" || fail "no hint to use mpirun: $out"
out=$(timeout 60 mpirun -np 2 "$real_bin" run -m "$model" -p hi -n 2 --tp-size 2 --ep-size 4 2>&1) &&
  fail "--tp-size 2 with --ep-size 4 ran"
grep -q "must equal --tp-size" <<<"$out" || fail "tp 2 x ep 4: $out"
out=$(timeout 60 mpirun -np 3 "$real_bin" run -m "$model" -p hi -n 2 -t 1 --tp-size 3 2>&1) &&
  fail "--tp-size 3 over 4 heads ran"
grep -q "cannot split num_attention_heads (4)" <<<"$out" || fail "3 ranks over 4 heads: $out"
out=$(timeout 60 mpirun -np 2 "$real_bin" run -m "$shared/fixtures/tiny-qwen3_5-moe" -p hi -n 2 \
  -t 1 --tp-size 2 --speculative-algorithm mtp 2>&1) && fail "mtp under --tp-size ran"
grep -q "mtp under --ep-size or --tp-size is not available yet" <<<"$out" || fail "mtp under TP: $out"

# inspect --tp-size: the replicated bytes plus every rank's share are every byte the checkpoint's
# tensors hold (the bytes lines of the same report).
out=$("$real_bin" inspect -m "$model" --tp-size 2) || fail "inspect --tp-size 2"
total=$(grep -E '^bytes ' <<<"$out" | awk '{s += $3} END {print s}')
repl=$(grep -oE '[0-9]+ bytes replicated' <<<"$out" | awk '{print $1}')
shares=$(grep -oE '\(([0-9]+) of split tensors\)' <<<"$out" | tr -dc '0-9\n' | awk '{s += $1} END {print s}')
[ $((repl + shares)) = "$total" ] || fail "replicated $repl + shares $shares != $total"

# Images do not travel to the other ranks yet: refused by name.
vl=$shared/fixtures/tiny-qwen3_5-moe-vl
img=$vl/golden/quadrants_64x64.png
out=$(timeout 60 mpirun -np 2 "$real_bin" run -m "$vl" -p "Describe" --image "$img" -n 2 -t 1 \
  --tp-size 2 2>&1) && fail "an image under --tp-size ran"
grep -q "images under --ep-size or --tp-size are not available yet" <<<"$out" || fail "image: $out"

# run: one process's greedy ids on 2 ranks, dense and hybrid MoE, BF16 and an MX scheme.
for m in "$shared/fixtures/tiny-qwen3-dense" "$shared/fixtures/tiny-qwen3_5-moe"; do
  # The last: --ep-size 2 beside --tp-size 2, whole experts a share a rank.
  for q in "" "--quantization mxfp8" "--ep-size 2"; do
    one=$q
    [ "$q" = "--ep-size 2" ] && one=""
    # shellcheck disable=SC2086
    "$real_bin" run -m "$m" -p "$prompt" --temp 0 -n 24 -t 1 --json $one >"$tmp/one.json" 2>"$tmp/err" ||
      { cat "$tmp/err"; fail "run in one process"; }
    # shellcheck disable=SC2086
    timeout 120 mpirun -np 2 "$real_bin" run -m "$m" -p "$prompt" --temp 0 -n 24 -t 1 --json $q \
      --tp-size 2 >"$tmp/tp.json" 2>"$tmp/err" || { cat "$tmp/err"; fail "run on 2 ranks ($q)"; }
    python3 -c "
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert a['token_ids'] == b['token_ids'], (a['token_ids'], b['token_ids'])" "$tmp/one.json" "$tmp/tp.json" ||
      fail "$(basename "$m") $q: 2 ranks differ from one process"
  done
done

# Prompt lookup under --tp-size 2 on the hybrid: each rank's share of the recurrent states
# rolls back with rank 0's after a rejected guess, and the ids are plain decoding's.
m=$shared/fixtures/tiny-qwen3_5-moe
for spec in "" "--speculative-algorithm ngram --speculative-num-draft-tokens 4"; do
  # shellcheck disable=SC2086
  timeout 120 mpirun -np 2 "$real_bin" run -m "$m" -p "$prompt" --temp 0 -n 48 -t 1 --json \
    --tp-size 2 $spec >"$tmp/tp${spec:+_spec}.json" 2>"$tmp/err" || { cat "$tmp/err"; fail "ngram on 2 ranks"; }
done
python3 -c "
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert a['token_ids'] == b['token_ids'], (a['token_ids'], b['token_ids'])
assert b['speculative']['drafted'] > 0, b['speculative']" "$tmp/tp.json" "$tmp/tp_spec.json" ||
  fail "prompt lookup on 2 ranks differs from plain decoding there"

# eval: the same perplexity within the FP32 all-reduce's rounding.
"$real_bin" eval -m "$model" --max-windows 20 --max-questions 10 -t 1 --json >"$tmp/one.json" 2>"$tmp/err" ||
  { cat "$tmp/err"; fail "eval in one process"; }
timeout 120 mpirun -np 2 "$real_bin" eval -m "$model" --max-windows 20 --max-questions 10 -t 1 --json \
  --tp-size 2 >"$tmp/tp.json" 2>"$tmp/err" || { cat "$tmp/err"; fail "eval on 2 ranks"; }
python3 -c "
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert abs(a['perplexity'] - b['perplexity']) <= 1e-4 * a['perplexity'], (a['perplexity'], b['perplexity'])
assert a['correct'] == b['correct'], (a['correct'], b['correct'])" "$tmp/one.json" "$tmp/tp.json" ||
  fail "eval on 2 ranks differs from one process"

# bench --profile: the all-reduce is a phase of its own, and each rank's bytes are reported.
out=$(timeout 120 mpirun -np 2 "$real_bin" bench -m "$model" -p 16 -n 4 -r 1 -t 1 --profile \
  --tp-size 2 2>&1) || fail "bench --profile on 2 ranks: $out"
grep -q "tp_all_reduce" <<<"$out" || fail "bench --profile lacks tp_all_reduce: $out"
grep -q "tensor parallelism: 2 ranks" <<<"$out" || fail "bench lacks the ranks' report: $out"

# The openai-client suite against a server of 2 ranks.
serve_on_two_ranks --tp-size 2
run_openai_suite "2 ranks"
stop_servers
# The agent clients and frameworks (Responses, Messages, AI SDK, LangChain, Agents SDK) and the
# embeddings endpoint, whose pass the other rank replays without the lm_head.
bash "$(dirname "$0")/agents_test.sh" "$tmp/serve_2" "$src" "$shared" || fail "agent clients against 2 ranks"

# A rank killed mid-generation: the job ends within 10 s, and the message names the rank.
start_server kill_url
kill_rank_mid_stream "$kill_url" "${pids[-1]}" "${logs[-1]}"
echo "tp_cli_test: all passed"
