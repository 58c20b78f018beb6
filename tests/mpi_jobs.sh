# Sourced by the tests of multi-rank jobs, which set $src, $shared, $real_bin and $model: sets
# up $tmp, the server bookkeeping of start_server.sh (whose functions need $bin) and fail().

# The root and oversubscription settings of ../shared/reference/dependencies.md; the ranks talk
# over shared memory, and LeakSanitizer is off for them (Open MPI keeps its allocations to exit).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl=self,vader
export ASAN_OPTIONS=detect_leaks=0
tmp=$(mktemp -d)
pids=() logs=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp" "${logs[@]}"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}

. "$(dirname "$0")/start_server.sh"
bin=$real_bin

# From now on start_server starts `mpirun -np 2 mxserve serve ... -t 1 FLAGS`.
serve_on_two_ranks() {
  printf '#!/usr/bin/env bash\nexec mpirun -np 2 "%s" "$@" -t 1 %s\n' "$real_bin" "$*" >"$tmp/serve_2"
  chmod +x "$tmp/serve_2"
  bin=$tmp/serve_2
}

# Ends every server started so far.
stop_servers() {
  kill "${pids[@]}" 2>/dev/null
  wait 2>/dev/null
  pids=()
}

# The openai-client suite against servers started by $bin (a wrapper that adds the ranks): the
# main one with the suite's key and any ARGS, one that admits a request at a time and one with
# little KV room. $1 names the job in the failure.
run_openai_suite() {
  local what=$1
  shift
  start_server main_url --api-key test-key --max-running-requests 16 "$@"
  start_server busy_url --max-running-requests 1 --max-queued-requests 1
  start_server tight_url --max-running-requests 16 --max-total-tokens 160
  (cd "$src" && BASE_URL="$main_url" BUSY_URL="$busy_url" TIGHT_URL="$tight_url" \
    API_KEY=test-key MXSERVE="$real_bin" MODEL_DIR="$model" LOGPROB_TOL=2e-2 \
    GOLDEN_FILE="$shared/fixtures/tiny-qwen3-moe/golden/golden.json" SERVED_MODEL=tiny-qwen3-moe \
    node --test tests/e2e/openai.test.mjs) || fail "openai suite against $what"
}

# The pid of rank R of the mpirun job $1.
rank_pid() {
  local p
  for p in $(pgrep -P "$1"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      echo "$p"
      return
    fi
  done
}

# Rank 1 of the server job $2 (at URL $1, logging to $3) killed while it streams: the job must
# end within 10 s, and its message must name the rank.
kill_rank_mid_stream() {
  local url=$1 job=$2 log=$3
  curl -sN "$url/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt":"Once upon a time","max_tokens":100000,"ignore_eos":true,"stream":true}' \
    >"$tmp/stream" 2>/dev/null &
  for _ in $(seq 1 100); do [ -s "$tmp/stream" ] && break; sleep 0.1; done
  [ -s "$tmp/stream" ] || fail "no tokens streamed before the kill"
  local victim
  victim=$(rank_pid "$job" 1)
  [ -n "$victim" ] || fail "rank 1 not found under mpirun $job"
  local t0 t1 secs
  t0=$(date +%s.%N)
  kill -9 "$victim"
  for _ in $(seq 1 150); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$job" 2>/dev/null && fail "the job still runs 15 s after rank 1 died"
  wait "$job" 2>/dev/null
  t1=$(date +%s.%N)
  secs=$(echo "$t1 - $t0" | bc)
  echo "rank 1 killed: the job ended in ${secs} s"
  (($(echo "$secs < 10" | bc))) || fail "the job took ${secs} s to end"
  grep -q "rank 1" "$log" || { cat "$log"; fail "the message does not name rank 1"; }
}
