#!/usr/bin/env bash
# Runs one libFuzzer target on its committed corpus (fuzz/corpus/<target>/):
#
#   run.sh BINARY TARGET replay        every corpus file once, no mutation
#   run.sh BINARY TARGET fuzz SECONDS  fuzz for SECONDS from a scratch copy of the corpus
#   run.sh BINARY TARGET runs N        N executions from a scratch copy (fixed seed)
#   run.sh BINARY TARGET ci            runs with the target's count below (about 15 s each)
#
# The repo corpus is never written: the scratch copy, crash artifacts and the log go to
# $FUZZ_OUT/<target>/ (default: fuzz-out/ beside BINARY). New inputs found there can be folded
# into the corpus by hand with `BINARY -merge=1 fuzz/corpus/<target> $FUZZ_OUT/<target>/corpus`.
# Extra libFuzzer flags: $FUZZ_FLAGS. The per-target input cap and dictionary are below.
set -euo pipefail

if (($# < 3)); then
  sed -n '2,13p' "$0"
  exit 2
fi
bin=$1 target=$2 mode=$3 arg=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
corpus=$here/corpus/$target

# Per target: the input cap (-max_len, bytes; above its largest seed), the dictionary, and the
# executions of the ctest run (about 15 s each on the CI machine, under ASan + UBSan).
case $target in
  safetensors) max_len=16384 dict=json ci_runs=8000 ;;
  model_config) max_len=4096 dict=json ci_runs=12000 ;;
  quant_description) max_len=8192 dict=json ci_runs=8000 ;;
  tokenizer) max_len=16384 dict=json ci_runs=3000 ;;
  chat_template) max_len=8192 dict=jinja ci_runs=14000 ;;
  grammar) max_len=4096 dict=grammar ci_runs=400 ;;
  openai_request) max_len=4096 dict=openai ci_runs=10000 ;;
  tool_parser) max_len=4096 dict=tools ci_runs=10000 ;;
  gguf) max_len=65536 dict=gguf ci_runs=60000 ;;
  image) max_len=65536 dict=image ci_runs=100000 ;;
  *)
    echo "run.sh: unknown target '$target'" >&2
    exit 2
    ;;
esac
[[ -d $corpus ]] || { echo "run.sh: no corpus at $corpus" >&2; exit 2; }

out=${FUZZ_OUT:-$(dirname "$bin")/fuzz-out}/$target
mkdir -p "$out/crashes"
# Leaks count; an input may take 10 s and 2 GB at most; UBSan already aborts (compiled
# -fno-sanitize-recover), the options only add its stack.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
common=(-timeout=10 -rss_limit_mb=2048 -artifact_prefix="$out/crashes/" -print_final_stats=1)
# shellcheck disable=SC2206
extra=(${FUZZ_FLAGS:-})

case $mode in
  replay)
    mapfile -t files < <(find "$corpus" -type f | sort)
    exec "$bin" "${common[@]}" "${extra[@]}" "${files[@]}"
    ;;
  fuzz | runs | ci)
    cap=600
    if [[ $mode == ci ]]; then
      mode=runs arg=$ci_runs cap=120
    fi
    [[ $arg =~ ^[0-9]+$ ]] || { echo "run.sh: $mode needs a number" >&2; exit 2; }
    rm -rf "$out/corpus"
    cp -r "$corpus" "$out/corpus"
    if [[ $mode == fuzz ]]; then
      limit=(-max_total_time="$arg")
    else
      # A time cap too, so that a slow machine cannot hang ctest.
      limit=(-runs="$arg" -seed=1 -max_total_time="$cap")
    fi
    echo "run.sh: $target ${limit[*]} -max_len=$max_len (log: $out/log.txt)"
    status=0
    "$bin" "${common[@]}" "${limit[@]}" -max_len="$max_len" -dict="$here/dict/$dict.dict" \
      "${extra[@]}" "$out/corpus" >"$out/log.txt" 2>&1 || status=$?
    if ((status != 0)); then
      # The finding, its stack and the artifact; the whole log stays in $out/log.txt.
      grep -E '==FUZZ==|ERROR|SUMMARY|runtime error|^ +#[0-9]+ |Test unit written|^(Done|stat::)' \
        "$out/log.txt" | cut -c1-240 | head -n 60
      echo "run.sh: $target failed ($status); reproducer in $out/crashes/" >&2
      exit "$status"
    fi
    grep -E '^(stat::|Done |#[0-9]+ +DONE)' "$out/log.txt" || true
    ;;
  *)
    echo "run.sh: unknown mode '$mode'" >&2
    exit 2
    ;;
esac
