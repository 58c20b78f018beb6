#!/usr/bin/env bash
# Expert parallelism from the command line, under real mpirun: launches that do not match are
# refused; `run` gives one process's text on every MX scheme in low latency; the openai-client
# suite passes against `mpirun -np 2 mxserve serve --ep-size 2`; a rank killed mid-generation
# ends the job within 10 s naming it; SIGTERM to rank 0 ends the job cleanly.
# Usage: ep_cli_test.sh MXSERVE SOURCE_DIR SHARED_DIR
set -u
real_bin=$1 src=$2 shared=$3
model=$src/models/tiny-qwen3-moe
. "$(dirname "$0")/mpi_jobs.sh"
prompt="It is a truth universally acknowledged, that"

# Launches that cannot work say what to run instead.
out=$("$real_bin" run -m "$model" -p hi -n 2 --ep-size 2 2>&1) && fail "--ep-size 2 alone ran"
grep -q "mpirun -np 2" <<<"$out" || fail "no hint to use mpirun: $out"
out=$(timeout 60 mpirun -np 2 "$real_bin" run -m "$model" -p hi -n 2 2>&1) &&
  fail "mpirun -np 2 without --ep-size ran"
grep -q "pass --ep-size 2" <<<"$out" || fail "no hint for --ep-size: $out"
out=$(timeout 60 mpirun -np 2 "$real_bin" run -m "$model" -p hi -n 2 --ep-size 4 2>&1) &&
  fail "--ep-size 4 on 2 ranks ran"
grep -q "mpirun started 2 processes" <<<"$out" || fail "no rank-count message: $out"

# inspect --ep-size: each rank's experts and bytes; the replicated bytes plus both ranks'
# experts are every byte the checkpoint's tensors hold (the bytes lines of the same report).
out=$("$real_bin" inspect -m "$model" --ep-size 2) || fail "inspect --ep-size 2"
grep -q "rank 0: experts 0-3 of 8" <<<"$out" || fail "rank 0's range: $out"
grep -q "rank 1: experts 4-7 of 8" <<<"$out" || fail "rank 1's range: $out"
total=$(grep -E '^bytes ' <<<"$out" | awk '{s += $3} END {print s}')
repl=$(grep -oE '[0-9]+ bytes replicated' <<<"$out" | awk '{print $1}')
experts=$(grep -oE '\(([0-9]+) of experts\)' <<<"$out" | tr -dc '0-9\n' | awk '{s += $1} END {print s}')
[ $((repl + experts)) = "$total" ] || fail "replicated $repl + experts $experts != $total"

# run: low latency on MX schemes gives one process's text, on 2 and 4 ranks.
for q in mxfp8 mxfp4; do
  want=$("$real_bin" run -m "$model" -p "$prompt" -n 32 -t 1 --seed 0 --quantization "$q" 2>/dev/null | head -1)
  for np in 2 4; do
    got=$(timeout 120 mpirun -np "$np" "$real_bin" run -m "$model" -p "$prompt" -n 32 -t 1 --seed 0 \
      --quantization "$q" --ep-size "$np" --ep-dispatch low_latency 2>"$tmp/err" | head -1)
    [ "$got" = "$want" ] || { cat "$tmp/err"; fail "$q on $np ranks: '$got' != '$want'"; }
  done
done

# bench --profile on 2 ranks: every rank times its MoE layers (their barriers must meet), and
# the report splits the exchange from the wait for the other rank's experts.
out=$(timeout 120 mpirun -np 2 "$real_bin" bench -m "$model" --quantization mxfp8 -p 16 -n 4 -r 1 \
  -t 1 --profile --ep-size 2 --ep-dispatch low_latency 2>&1) || fail "bench --profile on 2 ranks: $out"
for want in "ep_skew" "ep_exchange" "dispatch + combine (their exchange included)" \
  "waiting for the other ranks' experts"; do
  grep -qF "$want" <<<"$out" || fail "bench --profile on 2 ranks lacks '$want': $out"
done

# Speculative decoding under --ep-size 2: prompt lookup and a draft model give the job's own
# plain greedy ids; on the hybrid, rank 1's replicas of the recurrent states roll back with
# rank 0's after each rejected guess. The MTP head is refused by name.
# Under the sanitizers, only the hybrid's prompt lookup (the rollback of the replicas).
sanitized=${MX_SANITIZED:-0}
models=("$model" "$shared/fixtures/tiny-qwen3_5-moe") specs=(ngram "draft --speculative-draft-model-path $shared/fixtures/tiny-qwen3_5-dense")
if [ "$sanitized" = 1 ]; then models=("$shared/fixtures/tiny-qwen3_5-moe") specs=(ngram); fi
for m in "${models[@]}"; do
  timeout 120 mpirun -np 2 "$real_bin" run -m "$m" -p "$prompt" --temp 0 -n 48 -t 1 --json \
    --ep-size 2 >"$tmp/ep_plain.json" 2>"$tmp/err" || { cat "$tmp/err"; fail "plain on 2 ranks"; }
  for spec in "${specs[@]}"; do
    # shellcheck disable=SC2086
    timeout 120 mpirun -np 2 "$real_bin" run -m "$m" -p "$prompt" --temp 0 -n 48 -t 1 --json \
      --ep-size 2 --speculative-algorithm $spec --speculative-num-draft-tokens 4 \
      >"$tmp/ep_spec.json" 2>"$tmp/err" || { cat "$tmp/err"; fail "$spec on 2 ranks"; }
    python3 -c "
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert a['token_ids'] == b['token_ids'], (a['token_ids'], b['token_ids'])
assert b['speculative']['drafted'] > 0, b['speculative']" "$tmp/ep_plain.json" "$tmp/ep_spec.json" ||
      fail "${spec%% *} on 2 ranks ($(basename "$m")) differs from plain decoding there"
  done
done
out=$(timeout 60 mpirun -np 2 "$real_bin" run -m "$shared/fixtures/tiny-qwen3_5-moe" -p hi -n 2 \
  -t 1 --ep-size 2 --speculative-algorithm mtp 2>&1) && fail "mtp under --ep-size ran"
grep -q "mtp under --ep-size or --tp-size is not available yet" <<<"$out" || fail "mtp under EP: $out"

# The openai-client suite against servers of 2 ranks each, the main one drafting by prompt
# lookup.
serve_on_two_ranks --ep-size 2
run_openai_suite "2 ranks" --speculative-algorithm ngram
stop_servers

# A rank killed mid-generation: the job ends within 10 s, and the message names the rank.
start_server kill_url
kill_rank_mid_stream "$kill_url" "${pids[-1]}" "${logs[-1]}"

# SIGTERM to rank 0 (the server): it drains, ends the workers and the job exits 0.
start_server term_url
job=${pids[-1]} log=${logs[-1]}
server=$(rank_pid "$job" 0)
kill -TERM "$server"
for _ in $(seq 1 100); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
kill -0 "$job" 2>/dev/null && fail "the job still runs 10 s after SIGTERM to rank 0"
wait "$job"
rc=$?
[ "$rc" = 0 ] || { cat "$log"; fail "SIGTERM to rank 0: exit $rc"; }
echo "ep_cli_test: all passed"
