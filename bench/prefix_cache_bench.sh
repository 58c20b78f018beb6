#!/usr/bin/env bash
# Time to first token by turn of multi-turn chats behind `mxserve serve`, with prefix caching
# (the default) and with --disable-radix-cache, and the ratio per turn. CONVERSATIONS chats,
# one at a time, share a SYSTEM_LEN-token system prompt; each of TURNS turns appends TURN_LEN
# user tokens to the history and gets OUTPUT_LEN tokens back (`mxserve bench-serving
# --multi-turn`). The bundled model's context (1024) is too short for such histories: it is
# served from a copy whose config.json says 8192 (the weights and tokenizer linked, not copied).
# Usage: prefix_cache_bench.sh [MXSERVE] [CONVERSATIONS] [SERVE FLAGS...]
set -eu
bin=${1:-./build/mxserve}
convs=${2:-4}
shift $(($# < 2 ? $# : 2))
turns=${TURNS:-8} system_len=${SYSTEM_LEN:-2000} turn_len=${TURN_LEN:-200}
output_len=${OUTPUT_LEN:-32}
src=${MODEL:-$(dirname "$0")/../models/tiny-qwen3-moe}
src=$(cd "$src" && pwd)
pids=() logs=()
work=$(mktemp -d)
model=$work/model
mkdir "$model"
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -f "${logs[@]}"; rm -rf "$work"' EXIT
for f in "$src"/*; do
  [ "$(basename "$f")" = config.json ] || ln -s "$f" "$model/"
done
python3 - "$src/config.json" "$model/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["max_position_embeddings"] = 8192
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
. "$(dirname "$0")/../tests/start_server.sh"

# run NAME SERVE_FLAGS...: the bench's JSON against a fresh server, which then stops.
run() {
  local out=$1 url
  shift
  start_server url "$@"
  "$bin" bench-serving --base-url "$url" --multi-turn "$turns" --num-prompts "$convs" \
    --max-concurrency 1 --system-len "$system_len" --turn-len "$turn_len" \
    --output-len "$output_len" --json >"$out"
  curl -sf "$url/metrics" | grep -E '^mxserve_prefix_cache_(hits|queries)_total' >>"$out.metrics" || true
  kill "${pids[-1]}"
  wait "${pids[-1]}" 2>/dev/null || true
}
run "$work/with.json" "$@"
run "$work/without.json" --disable-radix-cache "$@"
python3 - "$work/with.json" "$work/without.json" "$work/with.json.metrics" <<'PY'
import json, sys
w, wo = (json.load(open(p)) for p in sys.argv[1:3])
for r in (w, wo):
    if r["failed"]:
        sys.exit(f"{r['failed']} requests failed: {r['errors'][:3]}")
print(f"{'turn':>4} {'prompt tok':>10} {'TTFT cached mean/median (ms)':>30} "
      f"{'TTFT uncached mean/median (ms)':>32} {'ratio mean/median':>18}")
for a, b in zip(w["ttft_by_turn"], wo["ttft_by_turn"]):
    print(f"{a['turn']:>4} {a['mean_prompt_tokens']:>10.0f} "
          f"{a['mean_ms']:>18.1f} / {a['median_ms']:>8.1f} "
          f"{b['mean_ms']:>20.1f} / {b['median_ms']:>8.1f} "
          f"{b['mean_ms'] / a['mean_ms']:>10.1f}x / {b['median_ms'] / a['median_ms']:.1f}x")
later = [b["mean_ms"] / a["mean_ms"] for a, b in zip(w["ttft_by_turn"][1:], wo["ttft_by_turn"][1:])]
if later:
    print(f"turns 2+: lowest mean-TTFT ratio {min(later):.1f}x")
print("".join(open(sys.argv[3]).readlines()), end="")
PY
