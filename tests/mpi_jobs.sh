# Sourced by the tests of multi-rank jobs (after start_server.sh, with fail() and $tmp set).

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
