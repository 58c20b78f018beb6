#!/usr/bin/env bash
# Output token throughput of the bundled model behind `mxserve serve` at 1 and at 8
# concurrent requests, measured by `mxserve bench-serving` against one server, the two levels
# interleaved over REPS rounds so that machine noise hits both alike; prints each round and
# the ratio of the medians. Usage: serving_concurrency.sh [MXSERVE] [REPS] [SERVE FLAGS...]
# (for example --kv-cache-dtype bf16).
set -eu
bin=${1:-./build/mxserve}
reps=${2:-3}
shift $(($# < 2 ? $# : 2))
model=${MODEL:-models/tiny-qwen3-moe}
pids=() logs=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -f "${logs[@]}"' EXIT
. "$(dirname "$0")/../tests/start_server.sh"
start_server url --max-running-requests 16 "$@"
one=() eight=()
for r in $(seq 1 "$reps"); do
  for c in 1 8; do
    t=$("$bin" bench-serving --base-url "$url" --num-prompts $((c * 8)) --max-concurrency $c \
      --input-len 64 --output-len 128 --json |
      python3 -c "import json,sys;print(json.load(sys.stdin)['output_throughput'])")
    echo "round $r, concurrency $c: $t output tok/s"
    if [ $c = 1 ]; then one+=("$t"); else eight+=("$t"); fi
  done
done
python3 - "${one[*]}" "${eight[*]}" <<'PY'
import statistics, sys
one = [float(x) for x in sys.argv[1].split()]
eight = [float(x) for x in sys.argv[2].split()]
m1, m8 = statistics.median(one), statistics.median(eight)
print(f"median output tok/s: 1 concurrent {m1:.1f}, 8 concurrent {m8:.1f}, ratio {m8 / m1:.2f}x")
PY
