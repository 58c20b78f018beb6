# Sourced by the scripts that need a real `mxserve serve` on a free loopback port.
# Needs $bin (the mxserve binary) and $model; appends the server's pid to the array `pids`
# and writes its log to a temporary file listed in `logs`.
#
# start_server VAR ARGS...: starts `mxserve serve -m $model --port 0 ARGS...`, waits until
# /health answers, and stores http://127.0.0.1:PORT in VAR; exits the script if it never does.
start_server() {
  local var=$1 log port=""
  shift
  log=$(mktemp)
  logs+=("$log")
  "$bin" serve -m "$model" --port 0 "$@" >"$log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 300); do
    port=$(grep -oE 'http://127\.0\.0\.1:[0-9]+' "$log" | head -1 | sed 's/.*://') || true
    [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    sleep 0.1
  done
  if [ -z "$port" ]; then echo "server did not start:"; cat "$log"; exit 1; fi
  printf -v "$var" 'http://127.0.0.1:%s' "$port"
}
