#!/usr/bin/env bash
# Data-parallel attention beside expert parallelism, under real mpirun: the flags refuse what
# cannot work; against `mpirun -np 2 mxserve serve --ep-size 2 --enable-dp-attention` the
# openai-client suite passes, and 16 concurrent greedy requests equal the same requests one at a
# time and a one-process server's answers, with the lm_head whole on each rank and split by
# vocabulary (--enable-dp-lm-head), in BF16 and in W8A8 MXFP8.
# Usage: dp_cli_test.sh MXSERVE SOURCE_DIR SHARED_DIR
set -u
real_bin=$1 src=$2 shared=$3
model=$src/models/tiny-qwen3-moe
. "$(dirname "$0")/mpi_jobs.sh"

out=$("$real_bin" run -m "$model" -p hi -n 2 --enable-dp-attention 2>&1) &&
  fail "--enable-dp-attention without --ep-size ran"
grep -q "enable-dp-attention needs --ep-size N" <<<"$out" || fail "dp without ep: $out"
out=$(timeout 60 mpirun -np 2 "$real_bin" run -m "$model" -p hi -n 2 -t 1 --ep-size 2 \
  --enable-dp-lm-head 2>&1) && fail "--enable-dp-lm-head alone ran"
grep -q "enable-dp-lm-head needs --enable-dp-attention" <<<"$out" || fail "dp lm_head alone: $out"

# bench --profile: every request on rank 0, so rank 1 runs only the MoE layers' collectives,
# timed as rank 0's are (their barriers must meet).
out=$(timeout 120 mpirun -np 2 "$real_bin" bench -m "$model" -p 16 -n 4 -r 1 -t 1 --profile \
  --ep-size 2 --enable-dp-attention 2>&1) || fail "bench --profile with an idle rank: $out"
grep -q "ep_exchange" <<<"$out" || fail "bench --profile lacks the exchange: $out"

start_server one_url
start_server one_q_url --quantization mxfp8
serve_on_two_ranks --ep-size 2 --enable-dp-attention
run_openai_suite "2 data-parallel ranks"

start_server head_url --enable-dp-lm-head
start_server q_url --quantization mxfp8 --ep-dispatch low_latency
for case in "$main_url $one_url" "$head_url $one_url" "$q_url $one_q_url"; do
  # shellcheck disable=SC2086
  API_KEY=test-key python3 "$(dirname "$0")/dp_concurrency.py" $case || fail "16 concurrent requests ($case)"
done
echo "dp_cli_test: all passed"
